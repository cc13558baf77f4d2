"""K3's dynamic tool declarations in the Agent: tools added during a run (add_tools, a tool
through ToolContext.add_tools, tool search) are declared in the history, never in the prompt's
head, so every earlier prompt stays an exact prefix of the later ones."""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from kimik3 import Agent, ChatRequest, K3Tokenizer, RemoteEngine, ScriptedEngine, ToolMessage, UserError, tool
from kimik3.formats.k3 import EncodedPrompt, K3Codec, render_output
from kimik3.tools import Tool, ToolContext, Toolset, tool_search
from kimik3.types import SystemMessage, UserMessage
from tests.k3vocab import write_model_dir

NEW_TOOLS = (
    '<|open|>message role="system" type="tool-declare"<|sep|>## New Tools Available\n'
    "The system dynamically extends the toolset via lazy-loading.\n"
    "You have access to all existing and extended tools.\n"
    "Here are the specs for the extended tools.\n\n```json\n{json}\n```<|close|>message<|sep|><|end_of_msg|>"
)
WEATHER_SPEC = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather of a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                       "additionalProperties": False},
    },
}


def calls(*items: tuple[str, dict[str, Any]]) -> str:
    return render_output({"reasoning_content": "r", "content": "",
                          "tool_calls": [{"id": "x", "function": {"name": n, "arguments": a}} for n, a in items]})


def answer(text: str) -> str:
    return render_output({"reasoning_content": "r", "content": text})


@tool
def get_weather(city: str) -> str:
    """Weather of a city."""
    return f"sunny in {city}"


@tool
def get_time(city: str) -> str:
    """Local time of a city."""
    return f"noon in {city}"


@tool
def load_weather(context: ToolContext) -> str:
    """Load the weather tool."""
    assert context.add_tools is not None
    context.add_tools(get_weather)
    return "loaded"


def declarations(messages: Sequence[Any]) -> list[list[str]]:
    return [[t.function.name for t in m.tools] for m in messages
            if isinstance(m, SystemMessage) and m.tools is not None and not m.content]


def assert_prefixes(prompts: Sequence[Sequence[Any]]) -> None:
    for before, after in itertools.pairwise(prompts):
        assert after[: len(before)] == before


async def test_a_tool_loaded_mid_run_is_declared_in_the_history() -> None:
    engine = ScriptedEngine([calls(("load_weather", {})), calls(("get_weather", {"city": "Paris"})), answer("sunny")])
    result = await Agent(instructions="hi", tools=[load_weather], engine=engine).run("weather?")
    assert result.output == "sunny"
    assert [m.content for m in result.messages if isinstance(m, ToolMessage)] == ["loaded", "sunny in Paris"]
    assert [m.role for m in result.messages] == ["system", "user", "assistant", "tool", "system", "assistant", "tool",
                                                 "assistant"]
    assert declarations(result.messages) == [["get_weather"]]
    prompts = [c.prompt for c in engine.calls]
    assert_prefixes(prompts)
    spec = json.dumps([WEATHER_SPEC], sort_keys=True, separators=(",", ":"))
    tail = prompts[1][len(prompts[0]) :]
    assert NEW_TOOLS.format(json=spec) in tail
    assert tail.index("<|open|>message role=\"tool\"") < tail.index("## New Tools Available")
    # the head (the global declaration) never changes
    assert [c.request.tools for c in engine.calls] == [[load_weather.spec]] * 3


async def test_prompt_ids_stay_prefixes_with_incremental_encoding(tmp_path: Path) -> None:
    tok = K3Tokenizer.from_pretrained(write_model_dir(tmp_path / "k3", num_base_tokens=163_584))
    ids: list[list[int]] = []

    class Recording(ScriptedEngine):
        def encode(self, request: ChatRequest, **k3: Any) -> EncodedPrompt:
            out = super().encode(request, **k3)
            ids.append(list(out.ids))
            return out

    engine = Recording([calls(("load_weather", {})), calls(("get_weather", {"city": "Rome"})), answer("ok")],
                       tokenizer=tok)
    await Agent(tools=[load_weather], engine=engine).run("weather?")
    assert len(ids) == 3 and len(ids[0]) < len(ids[1]) < len(ids[2])
    assert_prefixes(ids)
    full = tok.encode_messages(engine.calls[2].messages, engine.calls[2].request.tools,
                               **K3Codec.encoding_options(engine.calls[2].request))
    assert list(full) == ids[2]  # incremental == from scratch


async def test_add_tools_between_runs_declares_in_the_continued_conversation() -> None:
    engine = ScriptedEngine([answer("hello"), calls(("get_time", {"city": "Oslo"})), answer("noon")])
    agent = Agent(instructions="hi", tools=[get_weather], engine=engine)
    first = await agent.run("hi")
    agent.add_tools(get_time)
    agent.add_tools(get_time)  # the same tool again: nothing new
    second = await agent.run("time in Oslo?", messages=first.messages)
    assert second.output == "noon"
    assert declarations(second.messages) == [["get_time"]]
    prompts = [c.prompt for c in engine.calls]
    assert_prefixes(prompts)
    assert [c.request.tools for c in engine.calls] == [[get_weather.spec]] * 3


async def test_a_changed_tool_is_not_declared_twice_and_clashes_raise(caplog: pytest.LogCaptureFixture) -> None:
    # a K3 endpoint refuses one name in two declarations (Vendor Verifier, issue 27): a changed tool
    # keeps its first declaration, and a warning says so
    engine = ScriptedEngine([answer("a"), answer("b")])
    agent = Agent(tools=[], engine=engine)
    agent.add_tools(get_weather)
    first = await agent.run("x")
    assert declarations(first.messages) == [["get_weather"]]
    with pytest.raises(UserError, match="two tools are named 'get_weather'"):
        agent.add_tools(Tool(get_time.function, name="get_weather"))
    agent.tools["get_weather"] = Tool(get_weather.function, description="Weather, v2.")
    with caplog.at_level("WARNING", logger="kimik3.agent"):
        second = await agent.run("y", messages=first.messages)
    assert declarations(second.messages) == [["get_weather"]]
    assert "tool 'get_weather' changed after it was declared" in caplog.text
    assert second.output == "b"  # the request was valid (check_request refuses a second declaration)


# -- tool search -----------------------------------------------------------------------------


def test_tool_search_shows_a_compact_index() -> None:
    search = tool_search([get_weather, get_time, load_weather])
    assert search.name == "search_tools"
    assert search.description.endswith(
        "Tools:\n- get_weather: Weather of a city.\n- get_time: Local time of a city.\n"
        "- load_weather: Load the weather tool."
    )
    assert search.parameters == {
        "type": "object",
        "properties": {"query": {"type": "string", "description": "tool names, or keywords of what you need."}},
        "required": ["query"],
        "additionalProperties": False,
    }


@pytest.mark.parametrize(
    ("query", "loaded"),
    [
        ("weather", ["get_weather"]),
        ("get_time, get_weather", ["get_time", "get_weather"]),
        ("what is the local TIME", ["get_time"]),
    ],
)
async def test_tool_search_loads_the_full_schema_dynamically(query: str, loaded: list[str]) -> None:
    first = loaded[0]
    engine = ScriptedEngine([calls(("search_tools", {"query": query})), calls((first, {"city": "Lima"})), answer("ok")])
    agent = Agent(tools=[tool_search([get_weather, get_time])], engine=engine)
    result = await agent.run("?")
    results = [m.content for m in result.messages if isinstance(m, ToolMessage)]
    expected_second = "sunny in Lima" if first == "get_weather" else "noon in Lima"
    assert results == [f"loaded: {', '.join(loaded)}; call them directly", expected_second]
    assert declarations(result.messages) == [loaded]
    assert [t.function.name for t in engine.calls[0].request.tools] == ["search_tools"]
    assert_prefixes([c.prompt for c in engine.calls])


async def test_tool_search_without_a_match_or_outside_a_run() -> None:
    search = tool_search([get_weather, get_time])
    engine = ScriptedEngine([calls(("search_tools", {"query": "stock prices"})), answer("none")])
    result = await Agent(tools=[search], engine=engine).run("?")
    assert [m.content for m in result.messages if isinstance(m, ToolMessage)] == [
        "no tool matches 'stock prices'; the tools are: get_weather, get_time"
    ]
    assert declarations(result.messages) == []
    outside = await search.run({"query": "weather"})
    assert outside.is_error and outside.content == (
        "Error: ToolError: search_tools loads tools into an agent run; there is none here"
    )


# -- chat mode: message-level tools in Moonshot's shape --------------------------------------


def _sse(chunks: list[dict[str, Any]]) -> httpx.Response:
    body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    return httpx.Response(200, content=body.encode(), headers={"content-type": "text/event-stream"})


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "k3",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def _call_chunk(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return _chunk({"tool_calls": [{"index": 0, "id": call_id, "type": "function",
                                   "function": {"name": name, "arguments": arguments}}]})


async def test_chat_mode_sends_the_dynamic_declaration_as_a_system_message() -> None:
    replies = [
        [_chunk({"role": "assistant", "reasoning_content": "load"}), _call_chunk("call_1", "load_weather", "{}"),
         _chunk({}, finish="tool_calls")],
        [_chunk({"reasoning_content": "call"}), _call_chunk("call_2", "get_weather", '{"city": "Paris"}'),
         _chunk({}, finish="tool_calls")],
        [_chunk({"reasoning_content": "done", "content": "sunny"}, finish="stop")],
    ]
    bodies: list[dict[str, Any]] = []

    def respond(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return _sse(replies[len(bodies) - 1])

    client = openai.AsyncOpenAI(base_url="http://fake/v1", api_key="k", max_retries=0,
                                http_client=httpx.AsyncClient(transport=httpx.MockTransport(respond)))
    result = await Agent(tools=[load_weather], engine=RemoteEngine(model="k3", client=client)).run("weather?")
    assert result.output == "sunny"
    head = [load_weather.spec.model_dump(mode="json", exclude_none=True)]
    assert [b["tools"] for b in bodies] == [head, head, head]
    assert bodies[0]["messages"] == [{"role": "user", "content": "weather?"}]
    assert [m["role"] for m in bodies[1]["messages"]] == ["user", "assistant", "tool", "system"]
    assert bodies[1]["messages"][3] == {"role": "system", "content": "", "tools": [WEATHER_SPEC]}
    assert bodies[2]["messages"][:4] == bodies[1]["messages"]
    assert bodies[2]["messages"][5] == {"role": "tool", "tool_call_id": "call_2", "name": "get_weather",
                                        "content": "sunny in Paris"}


async def test_a_session_keeps_the_declaration_and_resuming_keeps_the_prefix(tmp_path: Path) -> None:
    session = tmp_path / "s.jsonl"
    engine = ScriptedEngine([calls(("load_weather", {})), answer("loaded it")])
    first = await Agent(instructions="hi", tools=[load_weather], engine=engine).run("load", session=session)
    lines = [json.loads(line) for line in session.read_text().splitlines()[1:]]
    assert {"role": "system", "content": "", "tools": [WEATHER_SPEC]} in [x["message"] for x in lines if "message" in x]
    again = ScriptedEngine([calls(("get_weather", {"city": "Kyiv"})), answer("sunny")])
    agent = Agent(instructions="hi", tools=[load_weather], engine=again)
    agent.add_tools(get_weather)
    resumed = await agent.resume(session, "weather in Kyiv?")
    assert [m.content for m in resumed.messages if isinstance(m, ToolMessage)][-1] == "sunny in Kyiv"
    assert declarations(resumed.messages) == [["get_weather"]]  # already declared: not again
    before = engine.calls[-1].prompt
    assert again.calls[0].prompt.startswith(before[: before.rindex('<|open|>message role="assistant"')])
    assert len(first.messages) < len(resumed.messages)



@tool
def unlock_time() -> list[Tool]:
    """Returns the time tool."""
    return [get_time]


async def test_a_tool_returning_tools_adds_them() -> None:
    engine = ScriptedEngine([calls(("unlock_time", {})), calls(("get_time", {"city": "Quito"})), answer("noon")])
    result = await Agent(tools=[unlock_time], engine=engine).run("time?")
    assert [m.content for m in result.messages if isinstance(m, ToolMessage)] == ["new tools: get_time",
                                                                                    "noon in Quito"]
    assert declarations(result.messages) == [["get_time"]]
    assert_prefixes([c.prompt for c in engine.calls])
    outside = await unlock_time.run({})
    assert outside.is_error and outside.content == (
        "Error: ToolError: unlock_time returns tools, which only an agent run can take")


async def test_a_declaration_counts_toward_the_context() -> None:
    from kimik3.agents._agent import _Run
    from kimik3.agents._tokens import RunTokens
    from kimik3.formats.k3 import default_tokenizer

    tok = default_tokenizer()
    run = _Run([], None, None, RunTokens(tok, None))
    decl = SystemMessage(content="", tools=[WEATHER_SPEC])
    # what the declaration adds to a K3 prompt, framing and K3's declaration text included
    head = [UserMessage(content="hi")]
    added = len(tok.encode_messages([*head, decl], add_generation_prompt=False)) - len(
        tok.encode_messages(head, add_generation_prompt=False))
    assert run.message_tokens(decl) == added > len(tok.encode_text(json.dumps([WEATHER_SPEC])))


# -- misuse and resume -----------------------------------------------------------------------


@tool
def unlock_junk() -> list[Any]:
    """Returns the time tool and junk."""
    return [get_time, 5, None]


async def test_a_tool_returning_tools_mixed_with_junk_is_an_error_and_adds_nothing() -> None:
    engine = ScriptedEngine([calls(("unlock_junk", {})), calls(("get_time", {"city": "Quito"})), answer("no")])
    agent = Agent(tools=[unlock_junk], engine=engine)
    result = await agent.run("time?")
    assert [m.content for m in result.messages if isinstance(m, ToolMessage)] == [
        "Error: ToolError: unlock_junk returned tools mixed with other values (item 1: int 5; item 2: NoneType "
        "None); none were added: return only tools, or no tool",
        "Error: unknown tool 'get_time'; available tools: unlock_junk",
    ]
    assert declarations(result.messages) == [] and list(agent.tools) == ["unlock_junk"]


def test_non_tools_are_refused_naming_their_type() -> None:
    from kimik3.tools.mcp import MCPServerStdio

    server = MCPServerStdio("true", name="srv")
    agent = Agent(tools=[get_time], engine=ScriptedEngine([]))
    cases: list[tuple[Any, str]] = [(5, "int 5"), (None, "NoneType None"), ("get_time", "str 'get_time'"),
                                    (server, "a toolset (an MCP server), which only Agent(tools=[...]) takes")]
    for bad, what in cases:
        message = f"a tool must be a Tool or a typed function, not {what}"
        with pytest.raises(UserError) as e:
            agent.add_tools(bad)
        assert str(e.value) == message
        with pytest.raises(UserError) as e:
            tool_search([get_weather, bad])
        assert str(e.value) == message
    with pytest.raises(UserError, match="not NoneType None"):
        Agent(tools=[None], engine=ScriptedEngine([]))  # type: ignore[list-item]
    for n in (0, -1, True, 2.0):
        with pytest.raises(UserError) as e:
            tool_search([get_weather], max_results=n)  # type: ignore[arg-type]
        assert str(e.value) == f"tool_search: max_results must be an integer >= 1, not {n!r}"
    with pytest.raises(UserError, match="tool_search: tools must be a list of tools, not int"):
        tool_search(5)  # type: ignore[arg-type]
    assert [t.name for t in tool_search([get_weather, get_time], max_results=1).catalog.values()] == [  # type: ignore[attr-defined]
        "get_weather",
        "get_time",
    ]


async def test_resume_restores_tools_a_tool_search_had_loaded(tmp_path: Path) -> None:
    session = tmp_path / "s.jsonl"
    first = ScriptedEngine([calls(("search_tools", {"query": "get_time"})), answer("loaded")])
    await Agent(tools=[tool_search([get_weather, get_time])], engine=first).run("load", session=session)
    again = ScriptedEngine([calls(("get_time", {"city": "Oslo"})), answer("noon")])
    agent = Agent(tools=[tool_search([get_weather, get_time])], engine=again)
    resumed = await agent.resume(session, "time in Oslo?")
    assert [m.content for m in resumed.messages if isinstance(m, ToolMessage)][-1] == "noon in Oslo"
    assert declarations(resumed.messages) == [["get_time"]]  # declared once, in the first run
    assert list(agent.tools) == ["search_tools", "get_time"]


async def test_resume_warns_about_declared_tools_it_cannot_restore(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    session = tmp_path / "s.jsonl"
    first = ScriptedEngine([calls(("unlock_time", {})), answer("unlocked")])
    await Agent(tools=[unlock_time], engine=first).run("unlock", session=session)
    again = ScriptedEngine([calls(("get_time", {"city": "Oslo"})), answer("cannot")])
    with caplog.at_level("WARNING", logger="kimik3.agent"):
        resumed = await Agent(tools=[unlock_time], engine=again).resume(session, "time in Oslo?")
    assert [r.getMessage() for r in caplog.records] == [
        "kimik3: tools 'get_time' were declared in an earlier run of this conversation and are not available now "
        "(give them with Agent.add_tools); calls to them get an error"
    ]
    assert [m.content for m in resumed.messages if isinstance(m, ToolMessage)][-1] == (
        "Error: unknown tool 'get_time' was declared in an earlier run and is not available now; "
        "available tools: unlock_time"
    )
    caplog.clear()
    restored = Agent(tools=[unlock_time], engine=ScriptedEngine([calls(("get_time", {"city": "Oslo"})), answer("ok")]))
    restored.add_tools(get_time)  # given again: no warning, the call runs
    with caplog.at_level("WARNING", logger="kimik3.agent"):
        result = await restored.resume(session, "again")
    assert caplog.records == []
    assert [m.content for m in result.messages if isinstance(m, ToolMessage)][-1] == "noon in Oslo"


class Growing(Toolset):
    """A toolset whose list grows when its ``grow`` tool is called (as an MCP server's may)."""

    name = "growing"

    def __init__(self, grown: bool = False) -> None:
        self.grown = grown

    async def open(self) -> None:
        self.is_open = True

    async def close(self) -> None:
        self.is_open = False

    async def get_tools(self) -> list[Tool]:
        return [self.grow_tool(), get_weather, *([get_time] if self.grown else [])]

    def grow_tool(self) -> Tool:
        def grow() -> str:
            """Grow the list."""
            self.grown = True
            return "grown"

        return Tool(grow)


async def test_resume_keeps_a_toolsets_dynamically_declared_tool_out_of_the_head(tmp_path: Path) -> None:
    """Before: the resumed head declared get_time again, beside its declaration in the history:
    InvalidRequestError (a K3 endpoint takes each name once per request)."""
    session = tmp_path / "s.jsonl"
    first = ScriptedEngine([calls(("grow", {})), answer("grown")])
    done = await Agent(tools=[Growing()], engine=first).run("grow", session=session)
    assert declarations(done.messages) == [["get_time"]]
    again = ScriptedEngine([calls(("get_time", {"city": "Oslo"})), answer("noon")])
    resumed = await Agent(tools=[Growing(grown=True)], engine=again).resume(session, "time?")
    assert [t.function.name for t in again.calls[0].request.tools] == ["grow", "get_weather"]  # the first head
    assert again.calls[0].request.tools == first.calls[0].request.tools
    assert declarations(resumed.messages) == [["get_time"]]
    assert [m.content for m in resumed.messages if isinstance(m, ToolMessage)][-1] == "noon in Oslo"
    before = first.calls[-1].prompt
    assert again.calls[0].prompt.startswith(before[: before.rindex('<|open|>message role="assistant"')])
