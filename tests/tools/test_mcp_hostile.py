"""MCP servers that try to end or stall a run (issue 26, item 4): unusable tool lists, patterns
that backtrack, 16,000 tools, silence, two runs at once, daemons left behind. Servers are
tests/tools/mcp_raw_server.py (raw JSON text) and tests/tools/mcp_server.py (the SDK's)."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import re
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

import mcp.types as mcp_types

from kimik3 import Agent, ScriptedEngine, ToolDefinitionError, UserError, tool
from kimik3.agents._dynamic import Toolbox, undeclared
from kimik3.formats.k3 import render_output
from kimik3.tools import ToolResult
from kimik3.tools.mcp import DEFAULT_TIMEOUT_S, MCPServerStdio, MCPServerStreamableHTTP
from kimik3.types import SystemMessage, ToolMessage

HERE = Path(__file__).parent
RAW = str(HERE / "mcp_raw_server.py")
SDK_SERVER = str(HERE / "mcp_server.py")
ROOT = str(HERE.parent.parent)


def calls(*items: tuple[str, dict[str, Any]]) -> str:
    return render_output({"reasoning_content": "r", "content": "",
                          "tool_calls": [{"id": "x", "function": {"name": n, "arguments": a}} for n, a in items]})


def answer(text: str) -> str:
    return render_output({"reasoning_content": "r", "content": text})


def spec(name: str, schema: str = '{"type":"object"}') -> str:
    return '{"name":"' + name + '","inputSchema":' + schema + "}"


def raw_server(tmp_path: Path, *lists: str, **kwargs: Any) -> MCPServerStdio:
    """The raw server listing ``lists`` in turn (each the JSON text of a tools array)."""
    path = tmp_path / "lists.txt"
    path.write_text("\n".join(lists) + "\n", encoding="utf-8")
    kwargs.setdefault("timeout", 120)
    return MCPServerStdio(sys.executable, [RAW, str(path)], name="raw", mode="legacy", errlog=sys.stderr, **kwargs)


GOOD = "[" + ",".join([spec("swap"), spec("echo")]) + "]"


def deep(levels: int) -> str:
    """A schema ``2 * levels`` objects deep."""
    return '{"type":"object","properties":{"a":' * levels + "{}" + "}}" * levels


BAD_LISTS = {
    "a name listed twice": "[" + ",".join([spec("swap"), spec("echo"), spec("echo")]) + "]",
    "1e999": "[" + ",".join([spec("swap"), spec("echo", '{"type":"object","properties":{"n":{"maximum":1e999}}}')]) + "]",
    "NaN": "[" + ",".join([spec("swap"), spec("echo", '{"type":"object","default":NaN}')]) + "]",
    "nested 140 deep": "[" + ",".join([spec("swap"), spec("echo", deep(70))]) + "]",  # kimik3's limit: 128
    "nested 400 deep": "[" + ",".join([spec("swap"), spec("echo", deep(200))]) + "]",  # the SDK cannot parse it
    "a clash with the agent's own tool": "[" + ",".join([spec("swap"), spec("echo"), spec("local")]) + "]",
}


@tool
def local(x: str) -> str:
    """A local tool."""
    return x


@pytest.mark.parametrize("kind", list(BAD_LISTS))
async def test_a_refetched_list_that_cannot_be_used_keeps_the_last_good_one(
    kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine = ScriptedEngine([calls(("swap", {})), calls(("echo", {"x": 1})), calls(("echo", {"x": 2})),
                             answer("done")])
    # the unparsable answer never arrives: the listing's time limit ends it (once, not at every turn)
    server = raw_server(tmp_path, GOOD, BAD_LISTS[kind], timeout=3 if kind == "nested 400 deep" else 120)
    agent = Agent(tools=[local, server], engine=engine)
    with caplog.at_level(logging.WARNING, logger="kimik3"):
        result = await agent.run("go")
    assert result.stop_reason == "completed" and result.output == "done"
    assert [m.content for m in result.messages if isinstance(m, ToolMessage)] == ["list 1", '{"x":1}', '{"x":2}']
    assert not [m for m in result.messages if isinstance(m, SystemMessage) and m.tools]  # nothing new declared
    assert [t.function.name for t in engine.calls[-1].request.tools] == ["local", "swap", "echo"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    if kind == "a clash with the agent's own tool":
        assert warnings == ["kimik3: the new tool list of 'raw' is not used: its tool 'local' clashes with another "
                            "tool of that name; its last list stays"]
        return
    not_used = [w for w in warnings if w.startswith("kimik3: the refetched tool list of MCP server 'raw' is not used (")]
    assert len(not_used) == 1, warnings
    assert not_used[0].endswith("); the last good list of 2 tools stays")
    if kind == "nested 400 deep":
        assert "(MCPServerError: the MCP server 'raw' did not list its tools within 3 s)" in not_used[0]
        assert warnings[0].startswith("kimik3: MCP server 'raw': ValidationError: ")  # the SDK's parse error
    else:
        assert len(warnings) == 1, warnings


@pytest.mark.parametrize(("kind", "why"), [
    ("a name listed twice", "MCP server 'raw': tools 'echo' and 'echo' both become 'echo'"),
    ("1e999", "MCP server 'raw': tool 'echo' cannot be declared: Value error, the number inf is not finite; JSON "
              "has no such number"),
    ("NaN", "MCP server 'raw': tool 'echo' cannot be declared: Value error, the number nan is not finite; JSON has "
            "no such number"),
    ("nested 140 deep", "MCP server 'raw': tool 'echo' cannot be declared: Value error, nested deeper than 128 "
                        "arrays/objects"),
])
async def test_a_first_list_that_cannot_be_used_is_a_tool_definition_error(kind: str, why: str, tmp_path: Path) -> None:
    server = raw_server(tmp_path, BAD_LISTS[kind])
    with pytest.raises(ToolDefinitionError) as e:
        await server.open()
    assert str(e.value) == why
    assert not server.is_open


async def test_a_refetch_is_not_repeated_until_the_server_changes_its_list_again(tmp_path: Path) -> None:
    server = raw_server(tmp_path, GOOD, BAD_LISTS["1e999"], "[" + spec("swap") + "]")
    async with server:
        tools = {t.name: t for t in await server.get_tools()}
        assert await tools["swap"].run({}) == ToolResult(content="list 1")
        assert [t.name for t in await server.get_tools()] == ["swap", "echo"]  # the bad list: not used
        assert not server._stale  # and not fetched again at every turn
        assert await tools["swap"].run({}) == ToolResult(content="list 2")
        assert [t.name for t in await server.get_tools()] == ["swap"]


# -- patterns --------------------------------------------------------------------------------

PATTERN_CHILD = textwrap.dedent("""
    import asyncio, json, sys
    sys.path.insert(0, ROOT)
    from kimik3.tools.mcp import MCPServerStdio

    async def main():
        server = MCPServerStdio(sys.executable, [RAW, LISTS], mode="legacy", timeout=60)
        out = {}
        async with server:
            tools = {t.name: t for t in await server.get_tools()}
            ticks = 0
            async def ticker():
                nonlocal ticks
                while True:
                    await asyncio.sleep(0.01)
                    ticks += 1
            for name, value in (("exponential", "a" * 60 + "!"), ("issue", "a" * 30 + "!"), ("fine", "aaaa")):
                ticks = 0
                task = asyncio.ensure_future(ticker())
                result = await tools[name].run({"s": value}, timeout=TIMEOUT)
                task.cancel()
                out[name] = [result.text, ticks > 0]
        print(json.dumps(out))

    asyncio.run(main())
""")


@pytest.mark.parametrize("timeout", [1.0, 30.0])
def test_a_pathological_pattern_neither_blocks_the_loop_nor_overruns_the_budget(tmp_path: Path, timeout: float) -> None:
    lists = tmp_path / "lists.txt"
    schema = '{"type":"object","properties":{"s":{"type":"string","pattern":"PATTERN"}}}'
    lists.write_text("[" + ",".join([spec("exponential", schema.replace("PATTERN", "^(a|aa)+$")),
                                     spec("issue", schema.replace("PATTERN", "(a+)+$")),
                                     spec("fine", schema.replace("PATTERN", "^a+$"))]) + "]\n")
    code = PATTERN_CHILD.replace("ROOT", repr(ROOT)).replace("RAW", repr(RAW)).replace("LISTS", repr(str(lists)))
    code = code.replace("TIMEOUT", repr(timeout))
    # generous: the budget is 1 s of regex CPU per call; Python's re needs years for the first value
    # and minutes for the second (the input: 6.7 s on the event loop)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    if timeout == 1.0:  # the call's own limit cuts the check first, or the budget does: both refuse
        assert out["exponential"][0] in (
            "Error: ToolTimeoutError: exponential did not finish within 1 s and was cancelled",
            "Error: ToolArgumentsError: the arguments cannot be checked: the schema's pattern '^(a|aa)+$' took "
            "longer than the check's budget of 1 s",
        )
    else:
        assert out["exponential"][0] == ("Error: ToolArgumentsError: the arguments cannot be checked: the schema's "
                                         "pattern '^(a|aa)+$' took longer than the check's budget of 1 s")
    assert out["exponential"][1] is True  # the event loop ran while the pattern was matched
    assert out["issue"][0].startswith("Error: ToolArgumentsError: s: 'aaaa") and out["issue"][0].endswith(
        "!' does not match '(a+)+$'")
    assert out["fine"][0] == "ok"


@pytest.mark.parametrize("schema", [
    {"type": "object", "patternProperties": {"^(a|aa)+$": {"type": "string"}}},
    {"type": "object", "patternProperties": {"^(a|aa)+$": {}}, "additionalProperties": False},
    {"type": "object", "patternProperties": {"^(a|aa)+$": {}}, "unevaluatedProperties": False},
    {"type": "object", "propertyNames": {"pattern": "^(a|aa)+$"}},
    {"type": "object", "properties": {"s": {"type": "array", "items": {"pattern": "^(a|aa)+$"}}}},
])  # fmt: skip
def test_every_place_a_schema_matches_a_pattern_is_bounded(schema: dict[str, Any]) -> None:
    from kimik3 import ToolArgumentsError
    from kimik3.tools._mcp_schema import ArgumentsSchema

    key = "a" * 60 + "!"  # the pattern backtracks exponentially on it (regex too)
    with pytest.raises(ToolArgumentsError) as e:
        ArgumentsSchema(schema, "MCP tool 't' of 's'").check({key: "x", "s": [key]}, budget_s=0.2)
    assert str(e.value) == ("the arguments cannot be checked: the schema's pattern '^(a|aa)+$' took longer than "
                            "the check's budget of 0.2 s")


def test_the_bounded_search_is_plain_re_for_other_users_of_jsonschema() -> None:
    import jsonschema

    validator = jsonschema.Draft202012Validator({"type": "string", "pattern": "^a+$"})
    assert validator.is_valid("aaa") and not validator.is_valid("ab")
    assert validator.is_valid("aaa")  # no deadline set in this thread: re.search, unchanged


# -- many tools ------------------------------------------------------------------------------


def _listing(n: int) -> list[mcp_types.Tool]:
    schema = {"type": "object", "properties": {"q": {"type": "string", "pattern": "^[a-z]+$"}}, "required": ["q"]}
    return [mcp_types.Tool(name=f"tool {i}", description=f"tool number {i}", input_schema=schema) for i in range(n)]


async def test_listing_many_tools_is_linear_and_checks_no_schema(monkeypatch: pytest.MonkeyPatch) -> None:
    import jsonschema

    checked: list[object] = []
    real = jsonschema.Draft202012Validator.check_schema
    monkeypatch.setattr(jsonschema.Draft202012Validator, "check_schema",
                        classmethod(lambda cls, s, **kw: (checked.append(s), real(s, **kw))[1]))
    server = MCPServerStdio("true", name="many")

    async def cost(n: int) -> float:
        """Least CPU seconds of 3 listings of ``n`` tools and two turns, without Python's cyclic GC
        (its passes over a growing heap are not kimik3's work)."""
        listed = _listing(n)
        best = float("inf")
        for _ in range(3):
            gc.collect()
            gc.disable()
            try:
                start = time.process_time()
                built = server._build(listed)
                server._tools, server._stale, server.is_open = built, False, True
                toolbox = Toolbox([server])
                table, from_toolsets = await toolbox.current()
                undeclared(table, [t.spec for t in from_toolsets], [])
                await toolbox.current()  # the next turn
                best = min(best, time.process_time() - start)
            finally:
                gc.enable()
        assert len(built) == n and built[-1].name == f"tool_{n - 1}"
        return best

    small, large = await cost(2000), await cost(16000)
    assert checked == []  # schemas are checked on a tool's first call, not on listing
    # 8x the tools: 8-12x the CPU here; the quadratic name check of before alone made it ~30x
    assert large / small < 16, (small, large)
    tools = server._build(_listing(3))
    assert tools[0].validate({"q": "abc"}) == {"q": "abc"} and len(checked) == 1


# -- time limits -----------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [0, -1, None, float("inf"), float("nan"), True, "5"])
def test_every_request_has_a_time_limit(bad: Any) -> None:
    assert MCPServerStdio("true").timeout == DEFAULT_TIMEOUT_S == 60.0
    assert MCPServerStdio("true").connect_timeout == 60.0
    assert MCPServerStreamableHTTP("http://127.0.0.1:1/mcp", timeout=5).connect_timeout == 5.0
    with pytest.raises(UserError) as e:
        MCPServerStdio("true", timeout=bad)
    assert str(e.value) == f"MCP server timeout must be a positive number of seconds, got {bad!r}"
    with pytest.raises(UserError) as e:
        MCPServerStreamableHTTP("http://127.0.0.1:1/mcp", connect_timeout=bad if bad is not None else 0)
    assert str(e.value).startswith("MCP server connect_timeout must be a positive number of seconds, got ")


SILENT_CHILD = textwrap.dedent("""
    import asyncio, sys
    sys.path.insert(0, ROOT)
    from kimik3.tools.mcp import MCPServerStreamableHTTP

    async def main():
        try:
            await MCPServerStreamableHTTP(URL, name="silent", timeout=2).open()
        except Exception as e:
            print(type(e).__name__, e)

    asyncio.run(main())
""")


def test_a_silent_url_fails_within_the_timeout() -> None:
    with socket.socket() as black_hole:  # listens, never accepts: connections complete, nothing answers
        black_hole.bind(("127.0.0.1", 0))
        black_hole.listen(64)
        url = f"http://127.0.0.1:{black_hole.getsockname()[1]}/mcp"
        code = SILENT_CHILD.replace("ROOT", repr(ROOT)).replace("URL", repr(url))
        # generous for 2 s (a loaded machine), well under the 72 s a silent URL took before
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=40)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "MCPServerError cannot open the MCP server 'silent': no answer within 2 s\n"


def test_the_cli_passes_mcp_timeout() -> None:
    from kimik3.cli.engine import mcp_server

    stdio = mcp_server("python -m srv --flag", timeout=7.5)
    http = mcp_server("http://127.0.0.1:9/mcp", timeout=7.5)
    assert isinstance(stdio, MCPServerStdio) and isinstance(http, MCPServerStreamableHTTP)
    assert (stdio.timeout, http.timeout, stdio.params.args) == (7.5, 7.5, ["-m", "srv", "--flag"])
    assert mcp_server("http://127.0.0.1:9/mcp").timeout == DEFAULT_TIMEOUT_S


# -- sharing and processes -------------------------------------------------------------------


async def test_two_concurrent_runs_share_one_unopened_server() -> None:
    server = MCPServerStdio(sys.executable, [SDK_SERVER, "stdio"], name="shared", timeout=120)

    def engine(a: int) -> ScriptedEngine:
        return ScriptedEngine([calls(("slow", {"seconds": 0.5})), calls(("add", {"a": a, "b": 1})), calls(("pid", {})),
                               answer(f"done {a}")])

    agents = [Agent(tools=[server], engine=engine(1)), Agent(tools=[server], engine=engine(2))]
    first, second = await asyncio.gather(agents[0].run("one"), agents[1].run("two"))
    assert (first.output, second.output) == ("done 1", "done 2")
    texts = [[m.content for m in r.messages if isinstance(m, ToolMessage)] for r in (first, second)]
    assert [t[:2] for t in texts] == [["slept", "2"], ["slept", "3"]]
    assert texts[0][2] == texts[1][2]  # one server process for both runs
    assert not server.is_open  # the last run to leave closed it
    assert not Path(f"/proc/{texts[0][2]}").exists() or _state(int(str(texts[0][2]))) == "Z"
    # and again, now from one task after the other
    third = await Agent(tools=[server], engine=engine(3)).run("three")
    assert third.output == "done 3" and not server.is_open


async def test_a_run_leaves_a_server_the_caller_opened_open() -> None:
    async with MCPServerStdio(sys.executable, [SDK_SERVER, "stdio"], name="kept", timeout=120) as server:
        engine = ScriptedEngine([calls(("add", {"a": 1, "b": 1})), answer("2")])
        await asyncio.gather(Agent(tools=[server], engine=engine).run("x"))
        assert server.is_open
        assert [t.name for t in await server.get_tools()][:2] == ["add", "shout"]
    assert not server.is_open


def _state(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the subreaper is Linux's")
@pytest.mark.parametrize("ending", ["close", "crash"])
async def test_a_daemon_the_server_started_ends_with_it(tmp_path: Path, ending: str) -> None:
    server = raw_server(tmp_path, "[" + ",".join([spec("daemon"), spec("swap")]) + "]")
    async with server:
        tools = {t.name: t for t in await server.get_tools()}
        pid = int(str((await tools["daemon"].run({})).content))
        assert _state(pid) in ("S", "R")
        reaper = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])  # orphaned: re-parented
        assert os.getsid(pid) != os.getsid(reaper)  # out of the server's session: a group kill misses it
        children = [int(p) for p in Path(f"/proc/{reaper}/task/{reaper}/children").read_text().split()]
        assert pid in children and len(children) == 2  # the server and the daemon
        if ending == "crash":
            os.kill(next(p for p in children if p != pid), 9)  # the server itself dies
            for _ in range(600):
                if _state(pid) in (None, "Z"):
                    break
                await asyncio.sleep(0.05)
    for _ in range(600):  # the kill is asynchronous: up to 30 s on a loaded machine
        if _state(pid) in (None, "Z"):
            break
        await asyncio.sleep(0.05)
    assert _state(pid) in (None, "Z")


# -- issue 40, A36: a tool listing whose cursor never ends ------------------------------------


@pytest.mark.parametrize(("cursors", "why"), [
    (lambda n: f"page-{n}", "listed more than 1000 pages of tools (its cursor never ends)"),  # always a new one
    (lambda n: "again", "gave the tool-list cursor 'again' twice: its listing never ends"),  # a variant: a cycle
    (lambda n: f"c{n % 3}", "gave the tool-list cursor 'c1' twice: its listing never ends"),
])
async def test_an_endless_tool_listing_is_an_mcp_server_error_not_a_cut_list(
    cursors: Any, why: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kimik3 import MCPServerError

    server = MCPServerStdio("true", name="endless")
    pages: list[str | None] = []

    async def guarded(request: Any) -> mcp_types.ListToolsResult:
        pages.append(request.keywords["cursor"])
        n = len(pages)
        return mcp_types.ListToolsResult(tools=_listing(1), nextCursor=cursors(n))

    monkeypatch.setattr(server, "_guarded", guarded)
    with pytest.raises(MCPServerError, match=f"^the MCP server {re.escape(repr('endless') + ' ' + why)}$"):
        await server._list_all()
    assert pages[0] is None and len(pages) == (1000 if "1000" in why else len(set(map(cursors, range(1, 5)))) + 1)


async def test_a_listing_whose_pages_grow_without_end_is_an_mcp_server_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # a variant of A36 (a40c): a new cursor each time, each page 2,000 tools: within the 1,000
    # pages the run's memory would hold two million tools; the listing stops past 100,000
    from kimik3 import MCPServerError

    server = MCPServerStdio("true", name="growing")
    page = _listing(2000)
    pages: list[str | None] = []

    async def guarded(request: Any) -> mcp_types.ListToolsResult:
        pages.append(request.keywords["cursor"])
        return mcp_types.ListToolsResult(tools=page, nextCursor=f"p{len(pages)}")

    monkeypatch.setattr(server, "_guarded", guarded)
    with pytest.raises(MCPServerError, match=r"^the MCP server 'growing' listed more than 100,000 tools \(its listing "
                                             r"never ends\)$"):
        await server._list_all()
    assert len(pages) == 51


def test_a_servers_image_over_8k_is_a_note_never_decoded(monkeypatch: pytest.MonkeyPatch) -> None:
    # a variant of A30 (a40c): not a screenshot but an MCP tool's image; Pillow's limit (178,956,970
    # pixels) let 36,000,000 through to be decoded (seconds and hundreds of MB at 170,000,000)
    import base64
    import io

    from PIL import Image

    from kimik3.tools.mcp import to_tool_result

    buf = io.BytesIO()
    Image.new("1", (9000, 4000)).save(buf, "PNG")  # a few KB
    data = base64.b64encode(buf.getvalue()).decode()
    loaded: list[object] = []
    monkeypatch.setattr(Image.Image, "load", lambda self, *a, **k: loaded.append(self))
    result = to_tool_result(mcp_types.CallToolResult(content=[mcp_types.ImageContent(type="image", data=data,
                                                                                     mimeType="image/png")]))
    assert loaded == [] and result.content == (
        "[an image (image/png) could not be read: image is 9000x4000 = 36,000,000 pixels, over the limit of "
        "33,177,600 (decompression bomb)]")
