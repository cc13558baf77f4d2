"""Issue 40's A14 (MCP tool names that collide: two servers, or a server and the agent's own tool,
refused with a typed error naming both, or kept apart by a prefix the user chooses, CLI included)
and A20 (a server that never answers the handshake ends in a typed error within
``connect_timeout``; run in a child process, bounded by a generous limit)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the MCP SDK is not installed")

from click.testing import CliRunner

from kimik3 import Agent, ScriptedEngine, ToolDefinitionError, tool
from kimik3.cli import main
from kimik3.formats.k3 import render_output
from kimik3.tools import FunctionTool, Toolset
from kimik3.tools._mcp_content import unique_names
from kimik3.tools.mcp import MCPServerStdio

ROOT = str(Path(__file__).resolve().parents[2])
SERVER = str(Path(__file__).with_name("mcp_server.py"))
MCP = f"{sys.executable} {SERVER} stdio"


def stdio(name: str, prefix: str | None = None) -> MCPServerStdio:
    return MCPServerStdio(sys.executable, [SERVER, "stdio"], name=name, tool_prefix=prefix, timeout=120,
                          connect_timeout=120)


@tool
def add(a: int, b: int) -> int:
    """Local add."""
    return a + b


async def test_a_server_tool_with_the_name_of_an_own_tool_or_another_servers_is_refused_naming_both() -> None:
    with pytest.raises(ToolDefinitionError) as own:
        await Agent(tools=[add, stdio("calc")], engine=ScriptedEngine(["x"])).run("go")
    assert str(own.value) == (
        "tool 'add' of 'calc' has the same name as one of the agent's own tools; give the toolset a tool_prefix "
        "(MCPServerStdio(..., tool_prefix='x') names it 'x_<name>'; kimik3 run: --mcp 'x=CMD ARGS')")
    with pytest.raises(ToolDefinitionError, match=r"^tool 'add' of 'two' has the same name as a tool of 'one'; "):
        await Agent(tools=[stdio("one"), stdio("two")], engine=ScriptedEngine(["x"])).run("go")


async def test_prefixed_servers_keep_their_tools_apart() -> None:
    call = render_output({"reasoning_content": "r", "content": "", "tool_calls": [
        {"id": "1", "function": {"name": "b_add", "arguments": {"a": 2, "b": 3}}},
        {"id": "2", "function": {"name": "add", "arguments": {"a": 1, "b": 1}}}]})
    agent = Agent(tools=[add, stdio("one", "a"), stdio("two", "b")], engine=ScriptedEngine([call, "done"]))
    result = await agent.run("go")
    assert [m.content for m in result.messages if m.role == "tool"] == ["5", "2"]


def invoke(args: list[str], home: Path) -> Any:
    env: dict[str, str | None] = {k: None for k in ("KIMIK3_BASE_URL", "KIMIK3_API_KEY", "KIMIK3_MODEL")}
    env["KIMIK3_HOME"] = str(home)
    return CliRunner().invoke(main, args, env=env, catch_exceptions=False)


def test_the_cli_refuses_a_collision_and_takes_a_prefix(tmp_path: Path) -> None:
    call = render_output({"reasoning_content": "r", "content": "", "tool_calls": [
        {"id": "1", "function": {"name": "two_add", "arguments": {"a": 40, "b": 2}}}]})
    script = tmp_path / "script.json"
    script.write_text(json.dumps([call, render_output({"reasoning_content": "r", "content": "42"})]))
    base = ["run", "add", "-w", str(tmp_path), "--script", str(script), "--plain"]
    clash = invoke([*base, "--mcp", MCP, "--mcp", MCP], tmp_path / "home")
    assert clash.exit_code == 1
    assert ("has the same name as a tool of" in clash.stderr and "--mcp 'x=CMD ARGS'" in clash.stderr), clash.stderr
    ok = invoke([*base, "--mcp", f"one={MCP}", "--mcp", f"two={MCP}"], tmp_path / "home")
    assert ok.exit_code == 0, ok.output
    assert '[turn 1] tool two_add {"a": 40, "b": 2}' in ok.stdout and "[turn 1] result two_add: 42" in ok.stdout
    twice = invoke([*base, "--mcp", f"one={MCP}", "--mcp", f"one={MCP}"], tmp_path / "home")
    assert twice.exit_code == 2 and "two servers have one prefix: one, one" in twice.stderr


CHILD = textwrap.dedent("""
    import asyncio, sys
    sys.path.insert(0, ROOT)
    from kimik3.tools.mcp import MCPServerStdio

    async def main():
        server = MCPServerStdio(sys.executable, ["-c", SERVER], name="mute", connect_timeout=2)
        try:
            await server.open()
        except Exception as e:
            print(type(e).__name__, e)

    asyncio.run(main())
""")

# reads every request and answers none (server/discover, initialize, ...)
READS_AND_NEVER_ANSWERS = "import sys\nfor line in sys.stdin: pass"
# answers server/discover with "method not found" (a handshake-era server), then never initialize
NEVER_INITIALIZES = textwrap.dedent("""
    import json, sys
    for line in sys.stdin:
        msg = json.loads(line)
        if msg.get("method") == "server/discover":
            print(json.dumps({"jsonrpc": "2.0", "id": msg["id"],
                              "error": {"code": -32601, "message": "Method not found"}}), flush=True)
""")


# a40c's variants: never reads at all; answers garbage lines without end; ignores SIGTERM (the
# timeout's close must not wait on it); answers with one line that never ends
NEVER_READS = "import time\ntime.sleep(600)"
GARBAGE = "import sys\nwhile True:\n    sys.stdout.write('not json\\n' * 1000); sys.stdout.flush()"
IGNORES_SIGTERM = "import signal, sys\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nfor line in sys.stdin: pass"
ENDLESS_LINE = "import sys\nwhile True:\n    sys.stdout.write('x' * 65536); sys.stdout.flush()"


@pytest.mark.parametrize("server", [READS_AND_NEVER_ANSWERS, NEVER_INITIALIZES, NEVER_READS, GARBAGE, IGNORES_SIGTERM,
                                    ENDLESS_LINE])
def test_a_server_that_never_answers_the_handshake_is_a_typed_error_within_connect_timeout(server: str) -> None:
    code = CHILD.replace("ROOT", repr(ROOT)).replace("SERVER", repr(server))
    # generous for 2 s on a loaded machine; a hang would be killed here, not hang the suite
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "MCPServerError cannot open the MCP server 'mute': no answer within 2 s\n"


class _Listed(Toolset):
    """A toolset naming its tools as an MCP server's are named (prefix, sanitising, hash suffixes)."""

    def __init__(self, name: str, names: list[str], prefix: str | None) -> None:
        self.name, self._names, self._prefix = name, names, prefix

    async def open(self) -> None:
        self.is_open = True

    async def close(self) -> None:
        self.is_open = False

    async def get_tools(self) -> list[Any]:
        return [FunctionTool(lambda: "ok", name=n, description="x")
                for n in unique_names(self._names, self._prefix, self.name)]


@pytest.mark.parametrize(("one", "two", "clash"), [
    (("c", "a b"), ("b c", "a"), "a_b_c"),  # prefixes that differ, names that meet once sanitised
    (("x" * 70, None), ("x" * 64, None), "x" * 64),  # a name cut to 64 meets another's whole name
    (("add", "p"), ("p_add", None), "p_add"),  # a prefixed name meets an unprefixed one
])  # fmt: skip
async def test_names_that_meet_only_after_prefixing_are_refused_naming_both(one: tuple[str, str | None],
                                                                           two: tuple[str, str | None],
                                                                           clash: str) -> None:
    # variants of A14 (a40c): the collision appears only in kimik3's names, never in the servers'
    with pytest.raises(ToolDefinitionError) as e:
        await Agent(tools=[_Listed("one", [one[0]], one[1]), _Listed("two", [two[0]], two[1])],
                    engine=ScriptedEngine(["x"])).run("go")
    assert str(e.value).startswith(f"tool {clash!r} of 'two' has the same name as a tool of 'one'; ")
