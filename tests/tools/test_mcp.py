"""kimik3.tools.mcp against a real MCP server written with the SDK's server API
(tests/tools/mcp_server.py), over stdio and Streamable HTTP on 127.0.0.1."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from PIL import Image

from kimik3 import Agent, MCPServerError, ScriptedEngine, ToolArgumentsError, ToolDefinitionError, UserError, tool
from kimik3.formats.k3 import render_output
from kimik3.tools import ToolResult
from kimik3.tools.mcp import MCPServer, MCPServerStdio, MCPServerStreamableHTTP, MCPTool, to_tool_result, tool_name
from kimik3.types import ImagePart, SystemMessage, ToolMessage

SERVER = str(Path(__file__).with_name("mcp_server.py"))
NAMES = ["add", "shout", "picture", "fail", "crash", "mixed", "unlock", "header", "pid", "slow"]


def stdio(**kwargs: Any) -> MCPServerStdio:
    # generous timeout: only there so a broken server cannot hang the suite
    return MCPServerStdio(sys.executable, [SERVER, "stdio"], timeout=120, connect_timeout=120, errlog=sys.stderr,
                          **kwargs)


async def tools_of(server: MCPServer) -> dict[str, MCPTool]:
    out = {}
    for t in await server.get_tools():
        assert isinstance(t, MCPTool)
        out[t.name] = t
    return out


def calls(*items: tuple[str, dict[str, Any]]) -> str:
    return render_output({"reasoning_content": "r", "content": "",
                          "tool_calls": [{"id": "x", "function": {"name": n, "arguments": a}} for n, a in items]})


def answer(text: str) -> str:
    return render_output({"reasoning_content": "r", "content": text})


# -- names -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "prefix", "expected"),
    [
        ("secret.word", None, "secret.word"),
        ("read_file", "fs", "fs_read_file"),
        ("a/b c", "x.y", "x.y_a_b_c"),
        ("é", None, "é"),
        ("搜索", None, "搜索"),
        ("ツール", "jp", "jp_ツール"),
        ("検索 ツール!", None, "検索_ツール_"),
        ("a\nb", None, "a_b"),
        ("n" * 80, "p", "p_" + "n" * 62),
    ],
)
def test_tool_names_follow_openai_rule(name: str, prefix: str | None, expected: str) -> None:
    assert tool_name(name, prefix) == expected


# -- stdio -----------------------------------------------------------------------------------


async def test_stdio_tools_schemas_and_results() -> None:
    async with stdio() as server:
        assert server.is_open
        tools = await tools_of(server)
        assert list(tools) == NAMES
        add = tools["add"]
        # the schema is passed through exactly as the server declares it
        assert add.spec.function.parameters == {
            "type": "object",
            "properties": {"a": {"title": "A", "type": "integer"}, "b": {"title": "B", "type": "integer"}},
            "required": ["a", "b"],
            "title": "addArguments",
        }
        assert add.spec.function.description == "Add two integers."
        assert await add.run({"a": 2, "b": 40}) == ToolResult(content="42")
        assert await add.run('{"a": 2, "b": 3}') == ToolResult(content="5")
        assert await tools["shout"].run({"text": "hi"}) == ToolResult(content="HI!")
        bad = await add.run({"a": "x"})
        assert bad == ToolResult(
            content="Error: ToolArgumentsError: <arguments>: 'b' is a required property; a: 'x' is not of type 'integer'",
            is_error=True,
        )
        assert (await add.run("[1]")).content == "Error: ToolArgumentsError: arguments must be a JSON object, got list"
        failed = await tools["fail"].run({"reason": "no"})
        assert failed == ToolResult(content="Error: Error executing tool fail: refused: no", is_error=True)
        mixed = await tools["mixed"].run({})
        assert mixed == ToolResult(content="\n".join([
            "first",
            "[audio (audio/wav) left out: K3 takes no audio]",
            "[resource file:///notes.txt (notes): the notes]",
            "embedded text",
            "[binary resource file:///b.bin (application/zip, 4 bytes) left out]",
        ]))
        assert await tools["header"].run({"name": "x-test"}) == ToolResult(content="")


async def test_stdio_image_result_goes_through_kimik3_media() -> None:
    async with stdio() as server:
        result = await (await tools_of(server))["picture"].run({})
    assert not result.is_error and isinstance(result.content, list) and len(result.content) == 1
    part = result.content[0]
    assert isinstance(part, ImagePart)
    url = part.image_url.url
    assert url.startswith("data:image/png;base64,")
    img = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
    assert img.size == (40, 20) and img.mode == "RGB"
    assert img.getpixel((0, 0)) == (255, 0, 0) and img.getpixel((39, 19)) == (255, 0, 0)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_list_changed_refreshes_the_tools(mode: str) -> None:
    async with stdio(mode=mode, tool_prefix="t") as server:
        tools = await tools_of(server)
        assert "t_secret.word" not in tools
        assert await tools["t_unlock"].run({}) == ToolResult(content="unlocked")
        tools = await tools_of(server)
        assert list(tools) == [f"t_{n}" for n in NAMES] + ["t_secret.word"]
        secret = tools["t_secret.word"]
        assert secret.mcp_name == "secret.word"
        assert await secret.run({}) == ToolResult(content="swordfish")


async def test_a_server_that_crashes_mid_call_gives_tool_errors() -> None:
    async with stdio(name="test-server") as server:
        tools = await tools_of(server)
        crashed = await tools["crash"].run({})
        assert crashed == ToolResult(
            content="Error: MCPServerError: the MCP server 'test-server' closed the connection during the call",
            is_error=True,
        )
        after = await tools["add"].run({"a": 1, "b": 2})
        assert after == ToolResult(
            content="Error: MCPServerError: the MCP server 'test-server' is gone: it closed the connection during "
                    "a call to 'crash'",
            is_error=True,
        )
        assert list(await tools_of(server)) == NAMES  # the last list stays
    assert not server.is_open


async def test_timeout_is_a_tool_error() -> None:
    async with MCPServerStdio(sys.executable, [SERVER, "stdio"], name="s", timeout=0.5, connect_timeout=120) as server:
        slow = (await tools_of(server))["slow"]
        result = await slow.run({"seconds": 5})
    assert result == ToolResult(content="Error: MCPServerError: the MCP server 's' did not answer within 0.5 s",
                                is_error=True)


@pytest.mark.parametrize(
    ("command", "args", "why"),
    [
        ("kimik3-no-such-command", [], "FileNotFoundError"),
        (sys.executable, ["-c", "import sys; sys.exit(2)"], "MCP error"),
    ],
)
async def test_a_server_that_cannot_start_raises_mcp_server_error(command: str, args: list[str], why: str) -> None:
    server = MCPServerStdio(command, args, name="broken", timeout=60)
    with pytest.raises(MCPServerError, match=f"cannot open the MCP server 'broken': {why}"):
        await server.open()
    assert not server.is_open
    with pytest.raises(MCPServerError, match="is not open"):
        await server.get_tools()


async def test_open_twice_and_close_twice() -> None:
    server = stdio(name="s")
    async with server:
        with pytest.raises(MCPServerError, match="'s' is already open"):
            await server.open()
    await server.close()
    assert not server.is_open


# -- Streamable HTTP -------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def http_server() -> Iterator[str]:
    """The test server over Streamable HTTP on 127.0.0.1 (a subprocess); yields its URL."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, SERVER, "http", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):  # up to a minute for the server to listen
            if proc.poll() is not None:
                pytest.fail(f"the MCP test server exited with {proc.returncode}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    with http_server() as url:
        yield url


async def test_streamable_http_tools_headers_and_errors(http_url: str) -> None:
    async with MCPServerStreamableHTTP(http_url, headers={"X-Test": "kimik3"}, tool_prefix="web", timeout=120) as server:
        tools = await tools_of(server)
        assert list(tools) == [f"web_{n}" for n in NAMES]
        assert await tools["web_add"].run({"a": 20, "b": 22}) == ToolResult(content="42")
        assert await tools["web_header"].run({"name": "x-test"}) == ToolResult(content="kimik3")
        assert await tools["web_fail"].run({"reason": "x"}) == ToolResult(content="Error: Error executing tool fail: refused: x", is_error=True)


async def test_streamable_http_server_that_crashes_mid_call() -> None:
    with http_server() as url:
        async with MCPServerStreamableHTTP(url, name="h", timeout=120) as server:
            tools = await tools_of(server)
            crashed = await tools["crash"].run({})
            after = await tools["add"].run({"a": 1, "b": 2})
    assert crashed == ToolResult(
        content="Error: MCPServerError: the MCP server 'h' closed the connection during the call", is_error=True)
    assert after.is_error and str(after.content).startswith("Error: MCPServerError: the MCP server 'h' is gone: ")


async def test_streamable_http_unreachable() -> None:
    server = MCPServerStreamableHTTP(f"http://127.0.0.1:{_free_port()}/mcp", name="gone", timeout=60)
    with pytest.raises(MCPServerError, match="cannot open the MCP server 'gone': "):
        await server.open()


# -- in the agent ----------------------------------------------------------------------------


async def test_agent_opens_a_server_for_the_run_and_survives_its_crash() -> None:
    server = stdio(name="srv")
    engine = ScriptedEngine([
        calls(("add", {"a": 1, "b": 2})),
        calls(("crash", {})),
        calls(("add", {"a": 3, "b": 4}), ("local", {"x": "ok"})),
        answer("done"),
    ])

    @tool
    def local(x: str) -> str:
        """A local tool."""
        return x * 2

    result = await Agent(tools=[local, server], engine=engine).run("go")
    assert result.stop_reason == "completed" and result.output == "done"
    assert not server.is_open  # opened for the run, closed after it
    tool_texts = [m.content for m in result.messages if isinstance(m, ToolMessage)]
    assert tool_texts == [
        "3",
        "Error: MCPServerError: the MCP server 'srv' closed the connection during the call",
        "Error: MCPServerError: the MCP server 'srv' is gone: it closed the connection during a call to 'crash'",
        "okok",
    ]
    head = engine.calls[0].request.tools
    assert [t.function.name for t in head] == ["local", *NAMES]


async def test_agent_declares_tools_a_server_adds_mid_run_dynamically() -> None:
    engine = ScriptedEngine([calls(("unlock", {})), calls(("secret.word", {})), answer("swordfish")])
    async with stdio() as server:
        result = await Agent(tools=[server], engine=engine).run("what is the word?")
        assert server.is_open  # the caller opened it: the agent leaves it open
    assert result.output == "swordfish"
    declarations = [m for m in result.messages if isinstance(m, SystemMessage) and m.tools]
    assert len(declarations) == 1 and declarations[0].content == ""
    assert [t.function.name for t in declarations[0].tools or []] == ["secret.word"]
    prompts = [c.prompt for c in engine.calls]
    assert prompts[1].startswith(prompts[0]) and prompts[2].startswith(prompts[1])
    assert "## New Tools Available" not in prompts[0] and "## New Tools Available" in prompts[1]
    assert all(c.request.tools == engine.calls[0].request.tools for c in engine.calls)
    assert [m.content for m in result.messages if isinstance(m, ToolMessage)] == ["unlocked", "swordfish"]


async def test_agent_rejects_a_server_tool_that_clashes_with_its_own() -> None:
    @tool
    def add(a: int, b: int) -> int:
        """Local add."""
        return a + b

    agent = Agent(tools=[add, stdio(name="s")], engine=ScriptedEngine([answer("x")]))
    with pytest.raises(UserError, match="tool 'add' of 's' has the same name as one of the agent's own tools"):
        await agent.run("go")


def _sha8(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def test_names_that_clash_after_sanitising_get_a_stable_hash_suffix() -> None:
    import mcp.types as t

    def names(*listed: str, prefix: str | None = None) -> list[str]:
        server = stdio(name="s", tool_prefix=prefix)
        return [m.name for m in server._build([t.Tool(name=n, input_schema={"type": "object"}) for n in listed])]

    # non-ASCII names are kept: two CJK tools stay two tools
    assert names("搜索", "翻译", "ツール") == ["搜索", "翻译", "ツール"]
    # a valid name keeps itself; the changed one that now clashes with it gets a suffix
    assert names("a b", "a_b") == [f"a_b_{_sha8('a b')}", "a_b"]
    assert names("a_b", "a b") == ["a_b", f"a_b_{_sha8('a b')}"]  # whatever the order
    assert names("a/b", "a b", prefix="p") == [f"p_a_b_{_sha8('p_a/b')}", f"p_a_b_{_sha8('p_a b')}"]
    # long names cut to 64 that clash: each stays 64 characters and distinct
    long = names("x" * 70 + "1", "x" * 70 + "2")
    assert long == ["x" * 55 + "_" + _sha8("x" * 70 + "1"), "x" * 55 + "_" + _sha8("x" * 70 + "2")]
    assert names("a b", "c") == ["a_b", "c"]  # no clash: no suffix
    server = stdio(name="s")
    listed = [t.Tool(name="same", input_schema={"type": "object"})] * 2
    with pytest.raises(ToolDefinitionError, match=re.escape("MCP server 's': tools 'same' and 'same' both become 'same'")):
        server._build(listed)


def test_unicode_tool_names_are_valid_kimik3_tools() -> None:
    def f() -> str:
        return "x"

    assert tool(f, name="搜索").name == "搜索"
    for bad in ("a b", "a\n", "", "x" * 65, "a/b"):
        with pytest.raises(ToolDefinitionError, match="invalid tool name"):
            tool(f, name=bad)


async def test_a_server_that_never_answers_the_handshake() -> None:
    server = MCPServerStdio(sys.executable, ["-c", "import time; time.sleep(600)"], name="mute", connect_timeout=1)
    with pytest.raises(MCPServerError, match=r"^cannot open the MCP server 'mute': no answer within 1 s$"):
        await server.open()
    assert not server.is_open


async def test_a_server_killed_between_calls() -> None:
    async with stdio(name="k") as server:
        tools = await tools_of(server)
        pid = int(str((await tools["pid"].run({})).content))
        os.kill(pid, signal.SIGKILL)
        first = await tools["add"].run({"a": 1, "b": 2})
        second = await tools["add"].run({"a": 1, "b": 2})
    assert first.is_error and str(first.content).startswith("Error: MCPServerError: the MCP server 'k' ")
    assert second.is_error and str(second.content).startswith("Error: MCPServerError: the MCP server 'k' is gone: ")


def test_the_same_server_twice_is_refused() -> None:
    server = stdio(name="twice")
    with pytest.raises(UserError, match="the toolset 'twice' is given twice"):
        Agent(tools=[server, server], engine=ScriptedEngine([]))


# -- result mapping and schemas, without a server --------------------------------------------


def test_result_mapping_variants() -> None:
    import mcp.types as t

    structured = t.CallToolResult(content=[], structured_content={"n": 1, "s": "é"})
    assert to_tool_result(structured) == ToolResult(content='{"n":1,"s":"é"}')
    bare_error = t.CallToolResult(content=[], is_error=True)
    assert to_tool_result(bare_error) == ToolResult(content="Error: the MCP tool reported an error", is_error=True)
    broken = t.CallToolResult(content=[t.ImageContent(data="bm90IGFuIGltYWdl", mime_type="image/png")])
    text = str(to_tool_result(broken).content)
    assert text.startswith("[an image (image/png) could not be read: ")
    png = io.BytesIO()
    Image.new("RGB", (8, 8), (0, 0, 255)).save(png, format="PNG")
    blob = base64.b64encode(png.getvalue()).decode()
    image_error = t.CallToolResult(content=[t.EmbeddedResource(resource=t.BlobResourceContents(
        uri="file:///x.png", blob=blob, mime_type="image/png"))], is_error=True)
    out = to_tool_result(image_error)
    assert out.is_error and isinstance(out.content, list)
    assert [type(p).__name__ for p in out.content] == ["TextPart", "ImagePart"]
    assert out.text == "Error: the MCP tool reported an error"


def test_an_invalid_input_schema_is_passed_through_unchecked(caplog: pytest.LogCaptureFixture) -> None:
    import mcp.types as t

    schema = {"type": "object", "properties": {"a": {"type": "nonsense"}}}
    mcp_tool = MCPTool(stdio(name="s"), t.Tool(name="odd", input_schema=schema), "odd")
    assert mcp_tool.spec.function.parameters == schema
    assert mcp_tool.validate({"a": 1, "b": [2]}) == {"a": 1, "b": [2]}
    assert "MCP tool 'odd' of 's' has an invalid input schema" in caplog.text
    with pytest.raises(ToolArgumentsError, match="arguments are not valid JSON"):
        mcp_tool.validate("{nope")


def test_without_the_mcp_sdk_only_kimik3_tools_mcp_fails() -> None:
    code = (
        "import sys; sys.modules['mcp'] = None\n"
        "import kimik3, kimik3.tools, kimik3.agents\n"
        "try:\n    import kimik3.tools.mcp\nexcept ImportError as e:\n    print(e)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "kimik3.tools.mcp needs the MCP SDK: pip install 'kimik3[mcp]'\n"


async def test_a_cjk_tool_name_round_trips_through_k3() -> None:
    def search(q: str) -> str:
        return f"found {q}"

    engine = ScriptedEngine([calls(("搜索", {"q": "猫"})), answer("done")])
    result = await Agent(tools=[tool(search, name="搜索")], engine=engine).run("go")
    assert result.output == "done"
    tool_messages = [m for m in result.messages if isinstance(m, ToolMessage)]
    assert [m.content for m in tool_messages] == ["found 猫"]


def test_an_unknown_connect_mode_is_misuse_at_construction() -> None:
    for mode in ("auto", "legacy", "2025-06-18"):
        assert stdio(mode=mode).mode == mode
    with pytest.raises(UserError, match=r"MCPServer\(mode=\.\.\.\) must be 'auto', 'legacy' or a protocol version "
                                        r"of the MCP SDK \(2024-11-05, .*\); got 'Auto'"):
        stdio(mode="Auto")  # type: ignore[arg-type]
