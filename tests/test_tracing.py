"""OpenTelemetry spans of runs, model calls and tool calls (GenAI semantic conventions),
checked with the SDK's in-memory exporter; and nothing at all without opentelemetry."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="opentelemetry-sdk is not installed")

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from kimik3 import Agent, Client, EngineError, ScriptedEngine, ToolMessage, tool
from kimik3._tracing import set_capture_content
from kimik3.agents import FinalEvent, TurnEndEvent
from kimik3.engines import Usage
from kimik3.formats.k3 import render_output


@pytest.fixture(scope="module")
def provider_exporter() -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


@pytest.fixture
def spans(provider_exporter: InMemorySpanExporter) -> Iterator[InMemorySpanExporter]:
    provider_exporter.clear()
    set_capture_content(None)
    yield provider_exporter
    set_capture_content(None)


def calls(*items: tuple[str, dict[str, Any]]) -> str:
    return render_output({"reasoning_content": "r", "content": "",
                          "tool_calls": [{"id": "x", "function": {"name": n, "arguments": a}} for n, a in items]})


def answer(text: str) -> str:
    return render_output({"reasoning_content": "think", "content": text})


@tool
def add(a: int, b: int) -> int:
    """Add."""
    return a + b


async def run_collecting(agent: Agent[Any], task: str) -> tuple[Any, list[Usage]]:
    usages: list[Usage] = []
    result = None
    async for event in agent.run_stream(task):
        if isinstance(event, TurnEndEvent):
            usages.append(event.usage)
        if isinstance(event, FinalEvent):
            result = event.result
    return result, usages


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


async def test_spans_of_a_run_with_genai_attributes(spans: InMemorySpanExporter) -> None:
    engine = ScriptedEngine([calls(("add", {"a": 2, "b": 3}), ("nope", {})), answer("5")], model="k3-test")
    agent = Agent(tools=[add], engine=engine, name="adder")
    result, usages = await run_collecting(agent, "2+3?")
    finished = sorted(spans.get_finished_spans(), key=lambda s: s.start_time or 0)
    assert [s.name for s in finished] == ["invoke_agent adder", "chat k3-test", "execute_tool add",
                                          "execute_tool", "chat k3-test"]  # "nope" is no tool: model text
    run, chat1, tool_ok, tool_bad, chat2 = finished
    assert run.parent is None and run.kind == SpanKind.INTERNAL
    assert all(s.parent is not None and s.parent.span_id == run.context.span_id for s in finished[1:])
    assert len({s.context.trace_id for s in finished}) == 1
    assert chat1.kind == SpanKind.CLIENT
    routing = {c.request.routing for c in engine.calls}
    assert len(routing) == 1 and None not in routing
    key = next(iter(routing)).key  # type: ignore[union-attr]
    assert len(key) == 32 and int(key, 16) >= 0
    for span, usage, reason in ((chat1, usages[0], "tool_calls"), (chat2, usages[1], "stop")):
        assert attrs(span) == {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "moonshot_ai",
            "gen_ai.request.model": "k3-test",
            "gen_ai.request.temperature": 1.0,
            "gen_ai.request.top_p": 1.0,
            "gen_ai.response.model": "k3-test",
            "gen_ai.response.id": attrs(span)["gen_ai.response.id"],
            "gen_ai.response.finish_reasons": (reason,),
            "gen_ai.usage.input_tokens": usage.prompt_tokens,
            "gen_ai.usage.output_tokens": usage.completion_tokens,
            "gen_ai.conversation.id": key,  # the conversation's routing key, the same on every call
        }
        assert usage.prompt_tokens > 0 and usage.completion_tokens > 0
        assert str(attrs(span)["gen_ai.response.id"]).startswith("chatcmpl-")
    ids = [m.tool_call_id for m in result.messages if isinstance(m, ToolMessage)]
    assert attrs(tool_ok) == {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "add",
                              "gen_ai.tool.call.id": ids[0], "gen_ai.tool.type": "function"}
    assert tool_ok.status.status_code == StatusCode.UNSET
    assert attrs(tool_bad)["error.type"] == "tool_error" and attrs(tool_bad)["gen_ai.tool.call.id"] == ids[1]
    assert "gen_ai.tool.name" not in attrs(tool_bad)
    assert tool_bad.status.status_code == StatusCode.ERROR
    assert attrs(run) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.provider.name": "moonshot_ai",
        "gen_ai.agent.name": "adder",
        "gen_ai.request.model": "k3-test",
        "kimik3.stop_reason": "completed",
        "gen_ai.usage.input_tokens": result.usage.prompt_tokens,
        "gen_ai.usage.output_tokens": result.usage.completion_tokens,
        "kimik3.context.summaries": 0,  # compaction's work (issue 41)
        "kimik3.context.cleared_results": 0,
        "kimik3.context.dropped_messages": 0,
    }
    assert run.status.status_code == StatusCode.UNSET


async def test_a_client_call_is_the_same_traced_path(spans: InMemorySpanExporter) -> None:
    # one model-call path (the client's): a direct call gets the chat span an agent's turn gets
    client = Client(ScriptedEngine(["hello"], model="m"))
    out = await client.chat([{"role": "user", "content": "hi"}], temperature=0.5, max_tokens=40)
    (chat,) = spans.get_finished_spans()
    assert chat.name == "chat m" and chat.kind == SpanKind.CLIENT and chat.parent is None
    assert attrs(chat)["gen_ai.request.temperature"] == 0.5 and attrs(chat)["gen_ai.request.top_p"] == 0.95
    assert attrs(chat)["gen_ai.request.max_tokens"] == 40 and attrs(chat)["gen_ai.response.id"] == out.id
    assert "error.type" not in attrs(chat) and chat.status.status_code == StatusCode.UNSET


def test_chat_spans_carry_the_cache_and_reasoning_split_where_reported(spans: InMemorySpanExporter) -> None:
    from kimik3._tracing import model_call
    from kimik3.types import ChatCompletion, ChatRequest, CompletionTokensDetails, PromptTokensDetails

    usage = Usage(prompt_tokens=100, completion_tokens=10, total_tokens=110,
                  prompt_tokens_details=PromptTokensDetails(cached_tokens=60, cache_write_tokens=30),
                  completion_tokens_details=CompletionTokensDetails(reasoning_tokens=7))
    done = ChatCompletion(model="kimi-k3.1-pro", usage=usage,
                          choices=[{"message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}])
    request = ChatRequest(messages=[{"role": "user", "content": "a"}])
    for completion in (done, done.model_copy(update={"usage": Usage(prompt_tokens=5, completion_tokens=1)})):
        with model_call(None, "kimi-k3.1-pro", request) as call:
            call.done(completion)
    reported, plain = (attrs(s) for s in spans.get_finished_spans())
    assert (reported["gen_ai.usage.cache_read.input_tokens"], reported["gen_ai.usage.cache_creation.input_tokens"],
            reported["gen_ai.usage.reasoning.output_tokens"]) == (60, 30, 7)
    assert not any(k in plain for k in ("gen_ai.usage.cache_read.input_tokens",
                                        "gen_ai.usage.cache_creation.input_tokens",
                                        "gen_ai.usage.reasoning.output_tokens"))  # not reported: not guessed


async def test_a_failed_model_call_sets_error_type(spans: InMemorySpanExporter) -> None:
    engine = ScriptedEngine([calls(("add", {"a": 1, "b": 1}))], model="m")
    with pytest.raises(EngineError, match="ran out of responses"):
        await Agent(tools=[add], engine=engine).run("x")
    chat1, tool_span, chat2, run = spans.get_finished_spans()
    assert [s.name for s in (chat1, tool_span, chat2, run)] == ["chat m", "execute_tool add", "chat m", "invoke_agent"]
    assert "error.type" not in attrs(chat1)
    for span in (chat2, run):
        assert attrs(span)["error.type"] == "EngineError"
        assert span.status.status_code == StatusCode.ERROR
        assert span.events[0].name == "exception"


async def test_content_is_not_captured_by_default_and_is_when_switched_on(
    spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    content_keys = {"gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.tool.call.arguments",
                    "gen_ai.tool.call.result"}
    await Agent(tools=[add], engine=ScriptedEngine([calls(("add", {"a": 1, "b": 2})), answer("3")])).run("1+2?")
    assert not any(content_keys & set(attrs(s)) for s in spans.get_finished_spans())

    for switch in ("api", "env"):
        spans.clear()
        if switch == "api":
            set_capture_content(True)
        else:
            set_capture_content(None)
            monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
        engine = ScriptedEngine([calls(("add", {"a": 1, "b": 2})), answer("3")])
        await Agent(instructions="sys", tools=[add], engine=engine).run("1+2?")
        chat1, tool_span, _chat2, _run = spans.get_finished_spans()
        assert json.loads(str(attrs(chat1)["gen_ai.input.messages"])) == [
            {"role": "system", "parts": [{"type": "text", "content": "sys"}]},
            {"role": "user", "parts": [{"type": "text", "content": "1+2?"}]},
        ]
        (out,) = json.loads(str(attrs(chat1)["gen_ai.output.messages"]))
        assert out["role"] == "assistant" and out["parts"][0] == {"type": "reasoning", "content": "r"}
        assert out["parts"][1]["type"] == "tool_call" and out["parts"][1]["name"] == "add"
        assert json.loads(out["parts"][1]["arguments"]) == {"a": 1, "b": 2}
        assert json.loads(str(attrs(tool_span)["gen_ai.tool.call.arguments"])) == {"a": 1, "b": 2}
        assert attrs(tool_span)["gen_ai.tool.call.result"] == "3"


def _child(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_without_opentelemetry_nothing_changes() -> None:
    out = _child("""
        import sys
        sys.modules["opentelemetry"] = None  # as if not installed: any import of it fails
        import anyio
        from kimik3 import Agent, ScriptedEngine, tool
        from kimik3 import _tracing
        from kimik3.formats.k3 import render_output

        @tool
        def add(a: int, b: int) -> int:
            "Add."
            return a + b

        call = render_output({"content": "", "tool_calls": [{"id": "x", "function": {"name": "add", "arguments": {"a": 1, "b": 2}}}]})
        engine = ScriptedEngine([call, render_output({"content": "3"})])
        result = anyio.run(Agent(tools=[add], engine=engine).run, "1+2?")
        print(result.output, result.stop_reason, _tracing._api(), _tracing.agent_run("a", "m").__enter__().span)
    """)
    assert out == "3 completed None None\n"


def test_opentelemetry_is_imported_lazily() -> None:
    out = _child("""
        import sys
        import kimik3, kimik3.agents, kimik3.tools
        print(any(m.startswith("opentelemetry") for m in sys.modules))
        from kimik3 import _tracing
        _tracing.agent_run("a", "m").__enter__().end()
        print(any(m.startswith("opentelemetry") for m in sys.modules))
    """)
    assert out == "False\nTrue\n"


async def test_a_loop_that_ended_the_run_is_on_its_span(spans: InMemorySpanExporter) -> None:
    """Issue 41: loop_detected reaches OpenTelemetry as the run's kimik3.stop_reason."""
    engine = ScriptedEngine([calls(("add", {"a": 2, "b": 3}))] * 10)
    result = await Agent(tools=[add], engine=engine, name="looper").run("2+3?")
    assert result.stop_reason == "loop_detected"
    (run,) = [s for s in spans.get_finished_spans() if s.name == "invoke_agent looper"]
    assert run.attributes is not None and run.attributes["kimik3.stop_reason"] == "loop_detected"
    tools = [s for s in spans.get_finished_spans() if s.name == "execute_tool add"]
    assert len(tools) == 4  # the 5th to 8th calls were not run: no tool span, their error results in the history


async def test_compactions_work_is_counted_on_the_run_span(spans: InMemorySpanExporter) -> None:
    """Issue 41: clearing chosen by the policy, and summaries and dropped turns, are counted on the
    run's span as on its RunResult."""
    from kimik3 import ContextPolicy
    from kimik3.formats.k3 import default_tokenizer
    from tests.agents.test_compaction_fallback import calls as reading
    from tests.agents.test_compaction_fallback import read_file, reasoning_only

    engine = ScriptedEngine(reading(120, reasoning_only), tokenizer=default_tokenizer(), chunk_size=512,
                            max_model_len=4096)
    agent = Agent(tools=[read_file], engine=engine, name="reader", context=ContextPolicy(clear_tool_results=True),
                  max_turns=200)
    result = await agent.run("Read all.")
    assert result.stop_reason == "completed" and result.cleared_results > 20 and result.summaries > 0
    (run,) = [s for s in spans.get_finished_spans() if s.name == "invoke_agent reader"]
    assert {k: v for k, v in attrs(run).items() if k.startswith("kimik3.context.")} == {
        "kimik3.context.summaries": result.summaries, "kimik3.context.cleared_results": result.cleared_results,
        "kimik3.context.dropped_messages": result.dropped_messages}


def test_no_tracer_provider_builds_no_spans_and_keeps_the_callers_trace() -> None:
    """Issue 44: with the API installed but no provider configured, kimik3 starts no spans (each
    would be a no-op); a tool still sees the caller's trace (an incoming request's context), and
    a provider configured later gets every span of the next run."""
    out = _child("""
        import anyio
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        from kimik3 import Agent, ScriptedEngine, tool
        from kimik3 import _tracing
        from kimik3.formats.k3 import render_output

        seen = []

        @tool
        def add(a: int, b: int) -> int:
            "Add."
            seen.append(format(trace.get_current_span().get_span_context().trace_id, "x"))
            return a + b

        def run():
            call = render_output({"content": "", "tool_calls": [{"id": "x", "function": {"name": "add", "arguments": {"a": 1, "b": 2}}}]})
            engine = ScriptedEngine([call, render_output({"content": "3"})])
            return anyio.run(Agent(tools=[add], engine=engine).run, "1+2?").output

        remote = trace.SpanContext(trace_id=0xABC, span_id=0xDEF, is_remote=True)
        with trace.use_span(trace.NonRecordingSpan(remote)):
            print(run(), seen[-1], _tracing.model_call(None, "m", None).__enter__().span)
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        print(run(), [s.name for s in exporter.get_finished_spans()])
    """)
    assert out == "3 abc None\n3 ['chat scripted-k3', 'execute_tool add', 'chat scripted-k3', 'invoke_agent']\n"
