"""MCP 2026-07-28 input requests and Tasks against a real ``mcp`` 2.x server over stdio
(tests/tools/mcp_input_server.py): an ``input_required`` result goes to the input handler and the
call is retried with the answers; a Task is polled to completion within the call's time limit,
and cancelled (``tasks/cancel``) with the call or the run."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp", reason="the MCP SDK is not installed")

from kimik3 import Agent, ScriptedEngine, ToolMessage
from kimik3.formats.k3 import render_output
from kimik3.tools.mcp import InputRequest, MCPServerStdio

SERVER = str(Path(__file__).with_name("mcp_input_server.py"))


def server(log: Path, **kw: Any) -> MCPServerStdio:
    kw.setdefault("timeout", 60)
    return MCPServerStdio(sys.executable, [SERVER, str(log)], name="inp", connect_timeout=120, **kw)


async def tools_of(s: MCPServerStdio) -> dict[str, Any]:
    return {t.name: t for t in await s.get_tools()}


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_an_input_request_goes_to_the_handler_and_the_call_is_retried_with_the_answer(
        tmp_path: Path, mode: str) -> None:
    seen: list[InputRequest] = []

    def handler(request: InputRequest) -> dict[str, Any]:
        seen.append(request)
        return {"name": "Ada"}

    async with server(tmp_path / "log", input_handler=handler, mode=mode) as s:  # type: ignore[arg-type]
        result = await (await tools_of(s))["book"].run({"city": "Oslo"})
    assert (result.content, result.is_error) == ("booked Oslo for Ada", False)
    schema: dict[str, Any] = {"properties": {"name": {"title": "Name", "type": "string"}}, "required": ["name"], "type": "object"}
    # 2026-07-28: the input_required result comes back to the call that made it (the tool is
    # known); on a handshake-era connection it is a request of its own, mid-call
    tool = "book" if mode == "auto" else None
    if mode == "legacy":  # the SDK's server sends the model's title there
        schema["title"] = "Who"
    assert seen == [InputRequest("inp", tool, "Whose name is the booking in Oslo under?", schema)]


async def test_an_async_handler_that_declines(tmp_path: Path) -> None:
    async def decline(request: InputRequest) -> None:
        await anyio.sleep(0)
        return None

    async with server(tmp_path / "log", input_handler=decline) as s:
        result = await (await tools_of(s))["book"].run({"city": "Oslo"})
    assert (result.content, result.is_error) == ("not booked: decline", False)


async def test_without_a_handler_or_with_a_failing_one_the_call_fails_saying_why(tmp_path: Path) -> None:
    async with server(tmp_path / "log") as s:
        result = await (await tools_of(s))["book"].run({"city": "Oslo"})
    assert result.is_error and result.content == (
        "Error: MCPServerError: the MCP server 'inp' asked for input ('Whose name is the booking in Oslo under?') "
        "and no one can answer: give MCPServer(input_handler=...), or run the agent with a session so that a person "
        "answers later (kimik3 run asks on the terminal)")

    def broken(request: InputRequest) -> dict[str, Any]:
        raise RuntimeError("no terminal")

    async with server(tmp_path / "log", input_handler=broken) as s:
        result = await (await tools_of(s))["book"].run({"city": "Oslo"})
    assert result.is_error and result.content == (
        "Error: MCPServerError: the input handler failed on the MCP server 'inp''s request: RuntimeError: no terminal")


def log_lines(path: Path) -> list[str]:
    """The server's log without task ids: ``get <status>``, ``cancel``, ``update <key> <action>``."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        words = line.split()
        out.append(f"get {words[-1]}" if words[0] == "get" else "cancel" if words[0] == "cancel" else line)
    return out


async def test_a_task_is_polled_to_completion(tmp_path: Path) -> None:
    log = tmp_path / "log"
    async with server(log) as s:
        result = await (await tools_of(s))["long_job"].run({"n": 3})
    assert (result.content, result.is_error) == ("job done after 3 polls", False)
    assert log_lines(log) == ["get working", "get working", "get working", "get completed"]


async def test_a_task_past_the_call_time_limit_is_cancelled(tmp_path: Path) -> None:
    log = tmp_path / "log"
    async with server(log, timeout=1) as s:
        result = await (await tools_of(s))["long_job"].run({"n": 1_000_000})
    assert result.is_error and result.content == (
        "Error: MCPServerError: the task of 'long_job' on the MCP server 'inp' did not finish within 1 s "
        "(it is cancelled)")
    lines = log_lines(log)
    assert lines[-1] == "cancel" and set(lines[:-1]) == {"get working"}


async def test_a_task_is_cancelled_with_the_run(tmp_path: Path) -> None:
    log = tmp_path / "log"
    call = render_output({"reasoning_content": "r", "content": "", "tool_calls": [
        {"id": "x", "function": {"name": "long_job", "arguments": {"n": 1_000_000}}}]})
    agent = Agent(engine=ScriptedEngine([call, "never"]), tools=[server(log)])
    messages: list[Any] = []

    async def polled() -> None:
        while not (log.exists() and log.read_text(encoding="utf-8").count("get ") >= 2):
            await anyio.sleep(0.02)

    async with anyio.create_task_group() as group:
        async def run() -> None:
            await agent.run("go", messages=messages)

        group.start_soon(run)
        await polled()
        group.cancel_scope.cancel()
    lines = log_lines(log)
    assert lines[-1] == "cancel" and set(lines[:-1]) == {"get working"}
    results = [m.content for m in messages if isinstance(m, ToolMessage)]
    assert results == ["Error: the tool call was cancelled before it finished"]


def test_the_cli_asks_on_the_terminal() -> None:
    from click.testing import CliRunner

    from kimik3.cli.engine import _terminal_input

    schema = {"properties": {"name": {"title": "Name", "type": "string"}, "seats": {"type": "integer"}}}
    request = InputRequest("inp", "book", "Whose name\x1b[31m?", schema)
    with CliRunner().isolation(input="y\nAda\nx\n2\n") as streams:
        answer = _terminal_input(request)
        shown = streams[1].getvalue().decode()
    assert answer == {"name": "Ada", "seats": 2}
    assert shown == ("\nMCP server 'inp', tool 'book' asks: Whose name?\nanswer [Y/n]: y\nName: Ada\nseats: x\n"
                     "Error: 'x' is not a valid integer.\nseats: 2\n")  # the server's escape sequence is gone
    with CliRunner().isolation(input="n\n"):
        assert _terminal_input(request) is None
    with CliRunner().isolation(input="\n"):
        assert _terminal_input(InputRequest("inp", None, "Sign in", url="https://example.com/login")) == {}


def test_the_cli_asks_only_when_stdin_is_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    from kimik3.cli import engine as cli_engine

    class Tty:
        def isatty(self) -> bool:
            return True

    assert cli_engine.mcp_server("python -m srv").input_handler is None
    monkeypatch.setattr(sys, "stdin", Tty())
    assert cli_engine.mcp_server("python -m srv").input_handler is cli_engine._terminal_input


async def test_a_task_that_needs_input_asks_the_handler_and_sends_the_answer_with_tasks_update(tmp_path: Path) -> None:
    log = tmp_path / "log"
    seen: list[InputRequest] = []

    def handler(request: InputRequest) -> dict[str, Any]:
        seen.append(request)
        return {"ok": True}

    async with server(log, input_handler=handler) as s:
        result = await (await tools_of(s))["approve_job"].run({})
    assert (result.content, result.is_error) == ("approved: True", False)
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    assert seen == [InputRequest("inp", "approve_job", "Run the job?", schema)]
    assert log_lines(log) == ["get input_required", "update confirm accept", "get completed"]


async def test_a_failed_task_is_the_calls_error(tmp_path: Path) -> None:
    log = tmp_path / "log"
    async with server(log) as s:
        result = await (await tools_of(s))["long_job"].run({"n": -1})
    assert result.is_error and result.content == (
        "Error: MCPServerError: the task of 'long_job' on the MCP server 'inp' failed: MCP error -32000: the job broke")
    assert log_lines(log) == ["get failed"]  # no tasks/cancel for a task that ended
    assert s._gone is None  # -32000 is the SDK's "connection closed" code too: the server is not taken for gone


async def test_a_server_error_with_the_code_of_a_closed_connection_leaves_the_server_usable(tmp_path: Path) -> None:
    async with server(tmp_path / "log") as s:
        tools = await tools_of(s)
        result = await tools["quota"].run({})
        after = await tools["long_job"].run({"n": 0})
    assert result.is_error and result.content == (
        "Error: MCPServerError: the MCP server 'inp' answered with MCP error -32000: quota exceeded")
    assert (after.content, after.is_error) == ("job done after 0 polls", False)


async def test_over_streamable_http_too(tmp_path: Path) -> None:
    from kimik3.tools.mcp import MCPServerStreamableHTTP

    from .test_mcp import _free_port

    log, port = tmp_path / "log", _free_port()
    proc = subprocess.Popen([sys.executable, SERVER, str(log), str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):  # up to a minute for the server to listen
            assert proc.poll() is None, f"the MCP test server exited with {proc.returncode}"
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            await anyio.sleep(0.1)
        url = f"http://127.0.0.1:{port}/mcp"
        async with MCPServerStreamableHTTP(url, name="inp", timeout=60, input_handler=lambda r: {"name": "Lin"}) as s:
            tools = await tools_of(s)
            booked = await tools["book"].run({"city": "Rome"})
            job = await tools["long_job"].run({"n": 2})
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert (booked.content, job.content) == ("booked Rome for Lin", "job done after 2 polls")
    assert log_lines(log) == ["get working", "get working", "get completed"]
