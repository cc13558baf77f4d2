"""The Agent loop with ScriptedEngine replies in raw K3 text (the real parser runs)."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from kimik3 import (
    Agent,
    Allow,
    AssistantMessage,
    Budgets,
    ContextPolicy,
    Deny,
    Edit,
    ScriptedEngine,
    ToolMessage,
    UserMessage,
    tool,
)
from kimik3.agents import CompactionEvent, FinalEvent, ToolResultEvent, TurnEndEvent, load_session
from kimik3.formats.k3 import ToolCallDone, parse, render, render_output
from kimik3.types import Message, SystemMessage


def calls(*items: tuple[str, dict[str, Any]], reasoning: str = "plan", content: str = "") -> str:
    return render_output(
        {
            "reasoning_content": reasoning,
            "content": content,
            "tool_calls": [{"id": "x", "function": {"name": n, "arguments": a}} for n, a in items],
        }
    )


def answer(text: str, reasoning: str = "done") -> str:
    return render_output({"reasoning_content": reasoning, "content": text})


@tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: first.
        b: second.
    """
    return a + b


@tool
def boom(x: str) -> str:
    """Always fails."""
    raise RuntimeError(f"kaboom {x}")


@tool
async def echo(text: str) -> str:
    """Echo text back."""
    await anyio.sleep(0.01)
    return text.upper()


def tool_messages(messages: list[Message]) -> list[ToolMessage]:
    return [m for m in messages if isinstance(m, ToolMessage)]


async def test_one_call_then_answer() -> None:
    engine = ScriptedEngine([calls(("add", {"a": 2, "b": 40})), answer("42")])
    result = await Agent(instructions="You add.", tools=[add], engine=engine).run("2+40?")
    assert result.output == "42" and result.stop_reason == "completed" and result.turns == 2
    roles = [m.role for m in result.messages]
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    (tm,) = tool_messages(result.messages)
    assert tm.content == "42" and tm.name == "add"
    first = result.messages[2]
    assert isinstance(first, AssistantMessage) and first.tool_calls is not None
    assert tm.tool_call_id == first.tool_calls[0].id
    # the second request replayed the first assistant message with its reasoning and call
    second_prompt = engine.calls[1].prompt
    assert "<|open|>think<|sep|>plan<|close|>think<|sep|>" in second_prompt
    assert '<|open|>call tool="add" index="1"<|sep|><|open|>argument key="a" type="number"<|sep|>2<|close|>' in second_prompt
    assert '<|open|>message role="tool" tool="add" index="1"<|sep|>42<|close|>message' in second_prompt
    assert result.usage.total_tokens > 0


async def test_parallel_calls_middle_one_fails_results_in_call_order() -> None:
    started: list[str] = []

    @tool
    async def slow(name: str) -> str:
        """Slow tool."""
        started.append(name)
        await anyio.sleep(0.05)
        return f"slow {name}"

    engine = ScriptedEngine(
        [calls(("slow", {"name": "a"}), ("boom", {"x": "b"}), ("echo", {"text": "c"})), answer("ok")]
    )
    agent = Agent(tools=[slow, boom, echo], engine=engine)
    events = [e async for e in agent.run_stream("go")]
    results = [e for e in events if isinstance(e, ToolResultEvent)]
    assert [r.name for r in results] == ["slow", "boom", "echo"]
    assert results[0].result.content == "slow a" and not results[0].result.is_error
    assert results[1].result.is_error and results[1].result.content == "Error: RuntimeError: kaboom b"
    assert results[2].result.content == "C"
    final = events[-1]
    assert isinstance(final, FinalEvent)
    msgs = final.result.messages
    assistant = msgs[1]  # no instructions: [user, assistant, tool x3, assistant]
    assert isinstance(assistant, AssistantMessage) and assistant.tool_calls is not None
    ids = [c.id for c in assistant.tool_calls]
    assert [m.tool_call_id for m in tool_messages(msgs)] == ids  # one per call, in call order
    assert len(set(ids)) == 3
    done = [e for e in events if isinstance(e, ToolCallDone)]
    assert [d.arguments for d in done] == [{"name": "a"}, {"x": "b"}, {"text": "c"}]


async def test_parallel_calls_really_run_concurrently() -> None:
    both = anyio.Event()
    arrived = 0

    @tool
    async def rendezvous(k: int) -> str:
        """Waits for its sibling."""
        nonlocal arrived
        arrived += 1
        if arrived == 2:
            both.set()
        with anyio.fail_after(5):
            await both.wait()  # deadlocks unless both calls run at once
        return str(k)

    engine = ScriptedEngine([calls(("rendezvous", {"k": 1}), ("rendezvous", {"k": 2})), answer("both")])
    result = await Agent(tools=[rendezvous], engine=engine).run("x")
    assert [m.content for m in tool_messages(result.messages)] == ["1", "2"]


async def test_cancellation_during_a_slow_tool_leaves_a_result_for_every_call() -> None:
    entered = anyio.Event()
    cancelled: list[bool] = []

    @tool
    async def sleepy(s: float) -> str:
        """Sleeps."""
        entered.set()
        try:
            await anyio.sleep(s)
        except anyio.get_cancelled_exc_class():
            cancelled.append(True)
            raise
        return "woke"

    @tool
    async def fast(text: str) -> str:
        """Returns at once."""
        return text.upper()

    engine = ScriptedEngine([calls(("fast", {"text": "fast"}), ("sleepy", {"s": 60}))])
    history: list[Message] = []
    agent = Agent(tools=[fast, sleepy], engine=engine)
    async with anyio.create_task_group() as tg:

        async def go() -> None:
            await agent.run("x", messages=history)

        tg.start_soon(go)
        await entered.wait()
        tg.cancel_scope.cancel()
    assert cancelled == [True]
    results = tool_messages(history)
    assistant = history[1]
    assert isinstance(assistant, AssistantMessage) and assistant.tool_calls is not None
    assert [m.tool_call_id for m in results] == [c.id for c in assistant.tool_calls]
    assert results[0].content == "FAST"
    assert results[1].content == "Error: the tool call was cancelled before it finished"
    render(history)  # the history is still a valid K3 conversation


async def test_sync_tools_run_in_threads() -> None:
    threads: list[int] = []

    @tool
    def where() -> str:
        """Report."""
        threads.append(threading.get_ident())
        return "ok"

    engine = ScriptedEngine([calls(("where", {})), answer("done")])
    await Agent(tools=[where], engine=engine).run("x")
    assert threads and threads[0] != threading.get_ident()


async def test_invalid_arguments_and_unknown_tool_become_errors_history_stays_valid() -> None:
    engine = ScriptedEngine(
        [
            calls(("add", {"a": "sixty", "b": 1}), ("nope", {"q": 1})),
            calls(("add", {"a": "60", "b": 1.0})),
            answer("61"),
        ]
    )
    result = await Agent(tools=[add], engine=engine).run("x")
    errs = tool_messages(result.messages)
    assert errs[0].content.startswith("Error: ToolArgumentsError: a: Input should be a valid integer")
    assert errs[1].content == "Error: unknown tool 'nope'; available tools: add"
    assert errs[2].content == "61"  # "60" and 1.0 were coerced
    # the replayed history (third prompt) holds both failed calls and their errors
    third = engine.calls[2].prompt
    assert third.count('<|open|>call tool="add"') == 2 and '<|open|>call tool="nope"' in third
    assert result.output == "61"


async def test_truncated_call_is_never_replayed_and_model_is_asked_to_continue() -> None:
    full = calls(("echo", {"text": "a"}), ("echo", {"text": "bbbbbbbb"}))
    cut = full[: full.index("bbbb")]
    engine = ScriptedEngine([cut, answer("fine")])
    result = await Agent(tools=[echo], engine=engine).run("x")
    first = result.messages[1]
    assert isinstance(first, AssistantMessage) and first.tool_calls is not None
    assert [c.function.arguments for c in first.tool_calls] == ['{"text": "a"}']
    assert [m.content for m in tool_messages(result.messages)] == ["A"]
    assert result.output == "fine"
    # a cut with no complete call: the agent asks the model to continue
    engine2 = ScriptedEngine(["I was thinking<|close|>think<|sep|><|open|>response<|sep|>about", answer(" it: ok")])
    r2 = await Agent(engine=engine2).run("y")
    assert [m.role for m in r2.messages] == ["user", "assistant", "user", "assistant"]
    assert "cut off" in str(r2.messages[2].content) and r2.output == "about it: ok"  # the whole answer (N39)


async def test_reasoning_replayed_on_every_assistant_message() -> None:
    script = [calls(("echo", {"text": str(i)}), reasoning=f"r{i}") for i in range(3)] + [answer("end", "rfinal")]
    engine = ScriptedEngine(script)
    await Agent(tools=[echo], engine=engine).run("x")
    last = engine.calls[-1].prompt
    for i in range(3):
        assert f"<|open|>think<|sep|>r{i}<|close|>think<|sep|>" in last


async def test_each_budget_ends_gracefully_with_a_summary_turn() -> None:
    loop = [calls(("echo", {"text": "again"}))] * 5
    engine = ScriptedEngine([*loop[:3], answer("summary: looped")])
    r = await Agent(tools=[echo], engine=engine, max_turns=3).run("x")
    assert r.stop_reason == "turn_budget" and r.output == "summary: looped" and r.turns == 4
    summary_prompt = engine.calls[-1].prompt
    assert "A budget of this run is used up" in summary_prompt
    assert "`tool_choice=none`" in summary_prompt  # the final turn is tool-free

    engine = ScriptedEngine([loop[0], answer("tokens out")])
    r = await Agent(tools=[echo], engine=engine, budgets=Budgets(tokens=1)).run("x")
    assert r.stop_reason == "token_budget" and r.turns == 2 and r.output == "tokens out"

    @tool
    async def slow() -> str:
        """Slow."""
        await anyio.sleep(30)
        return "never"

    engine = ScriptedEngine([calls(("slow", {})), answer("time out")])
    r = await Agent(tools=[slow], engine=engine, budgets=Budgets(seconds=0.2)).run("x")
    assert r.stop_reason == "time_budget" and r.output == "time out"
    # the tool got the rest of the budget (rounded up to 0.1 s) as its own time limit
    assert re.fullmatch(r"Error: ToolTimeoutError: slow did not finish within 0(\.[12])? s and was cancelled",
                        str(tool_messages(r.messages)[0].content))

    # the summary turn disobeys and calls a tool: the words are kept, the call is dropped
    engine = ScriptedEngine([loop[0], calls(("echo", {"text": "x"}), content="partial")])
    r = await Agent(tools=[echo], engine=engine, max_turns=1).run("x")
    last = r.messages[-1]
    assert isinstance(last, AssistantMessage) and last.tool_calls is None and last.content == "partial"
    render(r.messages)


async def test_result_size_cap_head_tail_and_elided_count() -> None:
    @tool
    def big() -> str:
        """Big."""
        return "a" * 500 + "b" * 500

    engine = ScriptedEngine([calls(("big", {})), answer("ok")])
    r = await Agent(tools=[big], engine=engine, context=ContextPolicy(max_result_chars=100)).run("x")
    text = tool_messages(r.messages)[0].content
    assert isinstance(text, str) and len(text) <= 100
    assert text.startswith("aaaa") and text.endswith("bbbb")
    head, tail = text.split("\n")[0], text.split("\n")[-1]
    assert set(head) == {"a"} and set(tail) == {"b"}
    kept = len(head) + len(tail)
    assert f"[{1000 - kept} characters elided]" in text


async def test_compaction_keeps_call_result_pairs_and_recent_turns() -> None:
    turns = [calls(("echo", {"text": f"t{i} " + "word " * 400}), reasoning=f"r{i}") for i in range(6)]
    summary = answer("SUMMARY: echoed t0..t3")

    def script(messages: list[Message]) -> str:
        last = messages[-1]
        if isinstance(last, UserMessage) and "Summarise the conversation" in str(last.content):
            return summary
        n = sum(isinstance(m, AssistantMessage) for m in messages)
        return turns[n] if n < len(turns) else answer("final")

    policy = ContextPolicy(context_window=6000, compact_at=0.5, keep_recent_turns=2)
    engine = ScriptedEngine(script)
    events = [e async for e in Agent(tools=[echo], engine=engine, context=policy).run_stream("go")]
    compactions = [e for e in events if isinstance(e, CompactionEvent)]
    assert compactions and compactions[0].summary == "SUMMARY: echoed t0..t3"
    final = events[-1]
    assert isinstance(final, FinalEvent)
    msgs = final.result.messages
    # every tool message directly follows the assistant message whose call it answers
    for i, m in enumerate(msgs):
        if isinstance(m, ToolMessage):
            j = i
            while isinstance(msgs[j], ToolMessage):
                j -= 1
            owner = msgs[j]
            assert isinstance(owner, AssistantMessage) and owner.tool_calls is not None
            assert m.tool_call_id in {c.id for c in owner.tool_calls}
    assert any(isinstance(m, UserMessage) and "SUMMARY: echoed" in str(m.content) for m in msgs)
    render(msgs)


async def test_session_file_and_resume_after_crash(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"

    class SimulatedCrash(BaseException):
        """Not an Exception: escapes the tool and the loop, like the process dying would."""

    @tool
    async def crash(x: int) -> str:
        """Simulates a crash of the process while the tool runs."""
        raise SimulatedCrash

    engine = ScriptedEngine([calls(("echo", {"text": "a"}), ("crash", {"x": 1}))])
    with pytest.raises(BaseException):  # noqa: B017 - a simulated process crash
        await Agent(tools=[echo, crash], engine=engine, instructions="sys").run("task", session=path)
    lines = path.read_text().splitlines()
    assert json.loads(lines[0])["kimik3_session"] == 1
    # a torn last line (the crash hit mid-write) is ignored on resume
    with open(path, "a") as f:
        f.write('{"message": {"role": "assis')
    history = load_session(path)
    assert [m.role for m in history] == ["system", "user", "assistant", "tool", "tool"]

    engine2 = ScriptedEngine([answer("recovered")])
    r = await Agent(tools=[echo, crash], engine=engine2, instructions="sys").resume(path, task=None)
    assert r.output == "recovered"
    assert [m.role for m in r.messages] == ["system", "user", "assistant", "tool", "tool", "assistant"]
    # the resumed request replayed the old assistant message with its reasoning
    assert "<|open|>think<|sep|>plan<|close|>think<|sep|>" in engine2.calls[0].prompt
    assert [m.role for m in load_session(path)][-1] == "assistant"


async def test_resume_answers_calls_left_without_result(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    msgs: list[Message] = [
        SystemMessage(content="sys"),
        UserMessage(content="t"),
        parse(calls(("echo", {"text": "a"}), ("echo", {"text": "b"}))).to_message(),
    ]
    from kimik3.agents import SessionWriter

    w = SessionWriter(path)
    for m in msgs:
        w.message(m)
    w.close()
    engine = ScriptedEngine([answer("ok")])
    r = await Agent(tools=[echo], engine=engine).resume(path)
    results = tool_messages(r.messages)
    assert [m.content for m in results] == [("Error: the run stopped before this call's result was recorded; whether it ran, "
        "and how far, is unknown: check before calling it again")] * 2


async def test_approval_allow_deny_edit() -> None:
    seen: list[tuple[str, dict[str, Any]]] = []

    async def approve(call: Any) -> Any:
        seen.append((call.name, call.arguments))
        if call.arguments.get("text") == "rm":
            return Deny("not allowed here")
        if call.arguments.get("text") == "edit me":
            return Edit({"text": "edited"})
        return Allow()

    engine = ScriptedEngine([calls(("echo", {"text": "ok"}), ("echo", {"text": "rm"}), ("echo", {"text": "edit me"})), answer("k")])
    r = await Agent(tools=[echo], engine=engine, approval=approve).run("x")
    contents = [m.content for m in tool_messages(r.messages)]
    assert contents == [
        "OK",
        "Error: the user denied this call: not allowed here",
        '[the user edited the arguments to {"text": "edited"}]\nEDITED',
    ]
    assert seen[1] == ("echo", {"text": "rm"})


class Weather(BaseModel):
    city: str
    celsius: float


async def test_output_type_validated_and_retried_once() -> None:
    engine = ScriptedEngine([answer('{"city": "Paris"}'), answer('```json\n{"city": "Paris", "celsius": 21.5}\n```')])
    r = await Agent(engine=engine, output_type=Weather).run("weather?")
    assert r.output == Weather(city="Paris", celsius=21.5) and r.stop_reason == "completed"
    retry = r.messages[-2]
    assert isinstance(retry, UserMessage) and "celsius: Field required" in str(retry.content)
    assert '"type":"json_schema"' not in engine.calls[0].prompt  # rendered as K3's directive:
    assert "`response_format=json_schema`" in engine.calls[0].prompt

    engine = ScriptedEngine([answer("no"), answer("still no")])
    r2 = await Agent(engine=engine, output_type=Weather).run("weather?")
    assert r2.output is None and r2.stop_reason == "invalid_output"


async def test_turn_end_events_and_streamed_deltas() -> None:
    engine = ScriptedEngine([calls(("echo", {"text": "a"}), reasoning="why"), answer("fin", reasoning="ok")], chunk_size=2)
    events = [e async for e in Agent(tools=[echo], engine=engine).run_stream("x")]
    kinds = [e.type for e in events]
    assert kinds.count("turn_end") == 2 and kinds[-1] == "final"
    assert "".join(e.delta for e in events if e.type == "reasoning_delta") == "whyok"
    assert "".join(e.delta for e in events if e.type == "content_delta") == "fin"
    assert kinds.index("tool_call_done") < kinds.index("tool_result") < kinds.index("turn_end")
    ends = [e for e in events if isinstance(e, TurnEndEvent)]
    assert ends[0].turn == 1 and ends[1].turn == 2
