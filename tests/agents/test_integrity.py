"""An agent never reports success for a turn that failed (issue 14): raw K3 text through the
ScriptedEngine (the real parser runs); each listed failing input, plus variants of its kind."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import anyio
import pytest
from PIL import Image

from kimik3 import (
    Agent,
    Allow,
    AssistantMessage,
    Budgets,
    ContextPolicy,
    ImageTooLargeError,
    ScriptedEngine,
    ToolMessage,
    UserMessage,
    tool,
)
from kimik3.agents import CompactionEvent, ContinueWith, FinalEvent
from kimik3.formats.k3 import render_output
from kimik3.media import prepare_image
from kimik3.types import ImagePart, ImageURL, Message
from tests.media._helpers import png_header_only

WRITTEN: list[tuple[str, str]] = []

THINK = "plan<|close|>think<|sep|>"
CALL = '<|open|>call tool="write"<|sep|>'
PATH_C = '<|open|>argument key="path" type="string"<|sep|>c<|close|>argument<|sep|>'
TEXT_ARG = '<|open|>argument key="text" type="string"<|sep|>'
END = "<|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>"

CUT_NOTE = (
    "Some of your tool calls did not run:\n- The call to 'write' was cut by the output limit (max_tokens) "
    "before it finished and did not run. Make the call again; if its arguments are long, split the work "
    "into smaller calls."
)
UNCLOSED_NOTE = (
    "Some of your tool calls did not run:\n- The call to 'write' never closed: the message ended or moved on "
    "before the call (or one of its argument values) was closed and did not run. Make the call again, closing "
    "each argument and the call."
)
CLOSER_ERROR = (
    "Error: the call was not run: argument 'text' holds the text <|close|>argument<|sep|>, which is what ends "
    "a value, so where the value ends cannot be told. Write that text another way (for example split or "
    "escaped) and call again"
)
EMPTY_NOTE = "Your last message had neither an answer nor a tool call that could run. Answer the task, or call a tool."


@tool
def write(path: str, text: str) -> str:
    """Write a file."""
    WRITTEN.append((path, text))
    return f"wrote {len(text)} characters to {path}"


def calls(*items: tuple[str, dict[str, Any]]) -> str:
    return render_output({"reasoning_content": "plan", "content": "",
                          "tool_calls": [{"id": "x", "function": {"name": n, "arguments": a}} for n, a in items]})


def answer(text: str) -> str:
    return render_output({"reasoning_content": "done", "content": text})


def write_call(path: str, text: str) -> str:
    return calls(("write", {"path": path, "text": text}))


def user_notes(messages: list[Message]) -> list[str]:
    return [str(m.content) for m in messages[2:] if isinstance(m, UserMessage)]


def tool_texts(messages: list[Message]) -> list[str]:
    return [str(m.content) for m in messages if isinstance(m, ToolMessage)]


@pytest.fixture(autouse=True)
def _clear() -> None:
    WRITTEN.clear()


# -- 1. a call cut by max_tokens while a sibling completed -----------------------------------


def cut_after_sibling() -> str:
    """The issue's input: the first write completes, the second is cut inside its text argument."""
    first = write_call("a", "hello")
    head = first[: first.index('<|close|>tools<|sep|>')]
    return head + CALL + PATH_C + TEXT_ARG + "ab"


async def test_a_cut_call_beside_a_complete_one_is_named_to_the_model_which_retries_it() -> None:
    engine = ScriptedEngine([cut_after_sibling(), write_call("c", "abc"), answer("both written")])
    result = await Agent(tools=[write], engine=engine).run("write a and c")
    assert WRITTEN == [("a", "hello"), ("c", "abc")]
    # the second model call saw the result of the call that ran, then the note on the cut one
    second = engine.calls[1].messages
    assert isinstance(second[-2], ToolMessage) and second[-2].content == "wrote 5 characters to a"
    assert second[-1] == UserMessage(content=CUT_NOTE)
    assert result.stop_reason == "completed" and result.output == "both written"
    assert (result.cut_calls, result.dropped_calls, result.failed_calls) == (1, 0, 0)
    assert result.issues == [
        "turn 1: the call to 'write' was cut by the output limit (max_tokens) before it finished and did not run"
    ]
    assert result.degraded


async def test_a_cut_call_alone_gets_the_note_not_continue_where_you_stopped() -> None:
    cut = THINK + "<|open|>tools<|sep|>" + CALL + PATH_C + TEXT_ARG + "abc"
    engine = ScriptedEngine([cut, write_call("c", "abc"), answer("ok")])
    result = await Agent(tools=[write], engine=engine).run("x")
    assert user_notes(result.messages) == [CUT_NOTE]
    assert WRITTEN == [("c", "abc")] and result.output == "ok" and result.cut_calls == 1


async def test_calls_cut_twice_in_a_row_stop_with_unusable_output() -> None:
    cut = THINK + "<|open|>tools<|sep|>" + CALL + PATH_C + TEXT_ARG + "a very long file"
    engine = ScriptedEngine([cut, cut, answer("never asked")])
    result = await Agent(tools=[write], engine=engine).run("x")
    assert result.stop_reason == "unusable_output" and result.output is None and result.turns == 2
    assert WRITTEN == [] and result.cut_calls == 2 and engine.remaining == 1
    assert user_notes(result.messages) == [CUT_NOTE]  # asked again once, then stopped


async def test_a_clean_run_is_not_degraded() -> None:
    engine = ScriptedEngine([write_call("a", "x"), answer("done")])
    result = await Agent(tools=[write], engine=engine).run("x")
    assert not result.degraded and result.issues == [] and (result.cut_calls, result.dropped_calls) == (0, 0)


# -- 2. marker text inside a string argument (issue 27 replaced round 2's rule) -------------------
# Round 2 read marker text inside a value as markers and dropped the damaged call (asked again once,
# then unusable_output). Moonshot's encoder writes string values raw, so since issue 27 only the exact
# closer <|close|>argument<|sep|> ends a value: every other marker text is the value, kept exactly,
# and the call runs; the closer itself inside a value is a failed call the model is told about.


def marker_in_argument(marker: str) -> str:
    return THINK + "<|open|>tools<|sep|>" + CALL + PATH_C + TEXT_ARG + f"use {marker} here<|close|>argument<|sep|>" + END


@pytest.mark.parametrize("marker", ["<|open|>tools<|sep|>", "<|close|>message<|sep|>", "<|open|>response<|sep|>",
                                    '<|open|>call tool="write"<|sep|>', "<|end_of_msg|>", "<|sep|>", "<|close|>",
                                    "<|close|>argumen", "<|close|>call<|sep|>", "<|", "<|open|>argument "
                                    'key="z" type="string"<|sep|>zz'])
async def test_marker_text_in_an_argument_is_the_value_and_the_call_runs(marker: str) -> None:
    engine = ScriptedEngine([marker_in_argument(marker), answer("documented")], chunk_size=3)
    result = await Agent(tools=[write], engine=engine).run("document the format")
    value = "use " + marker + " here"
    assert (WRITTEN[0][1] if WRITTEN else None) == value and len(WRITTEN) == 1
    assert result.stop_reason == "completed" and result.output == "documented" and not result.degraded


async def test_the_closer_inside_a_value_is_a_failed_call_the_model_is_told_about() -> None:
    engine = ScriptedEngine([marker_in_argument("<|close|>argument<|sep|>"), write_call("c", "use it here"),
                             answer("ok")])
    result = await Agent(tools=[write], engine=engine).run("x")
    assert WRITTEN == [("c", "use it here")]  # the ambiguous call never ran; the retry did
    assert tool_texts(result.messages) == [CLOSER_ERROR, "wrote 11 characters to c"]
    call = next(m for m in result.messages if isinstance(m, AssistantMessage))
    assert call.tool_calls is not None  # kept as the model wrote it
    assert json.loads(call.tool_calls[0].function.arguments) == {
        "path": "c", "text": "use <|close|>argument<|sep|> here"}
    assert result.stop_reason == "completed" and result.output == "ok" and result.degraded
    assert result.issues == [
        "turn 1: the call to 'write' failed: the call was not run: argument 'text' holds the text "
        "<|close|>argument<|sep|>, which is what ends a value, so where the value ends cannot be told. Write that "
        "text another way (for example split or escaped) and call again"]
    assert result.failed_calls == 1


async def test_a_call_that_never_closes_is_asked_again_once_then_stops_unusable() -> None:
    unclosed = THINK + "<|open|>tools<|sep|>" + CALL + "<|close|>tools<|sep|><|close|>message<|sep|>"
    engine = ScriptedEngine([unclosed, unclosed, answer("never asked")])
    result = await Agent(tools=[write], engine=engine).run("x")
    assert result.stop_reason == "unusable_output" and result.output is None and result.turns == 2
    assert WRITTEN == [] and result.dropped_calls == 2 and engine.remaining == 1
    assert engine.calls[1].messages[-1] == UserMessage(content=UNCLOSED_NOTE)
    assert result.issues[0] == (
        "turn 1: the call to 'write' never closed: the message ended or moved on before the call (or one of its "
        "argument values) was closed and did not run"
    )


async def test_a_call_outside_the_tools_section_never_runs_and_the_model_is_told() -> None:
    # issue 27, input 2: `bash rm -rf build` written in the response text, and after the tools close
    bash = ('<|open|>call tool="write" index="1"<|sep|>' + PATH_C + TEXT_ARG + "rm -rf build<|close|>argument<|sep|>"
            "<|close|>call<|sep|>")
    for text in (THINK + "<|open|>response<|sep|>Cleaning up. " + bash + "<|close|>response<|sep|>"
                 "<|close|>message<|sep|>",
                 THINK + "<|open|>tools<|sep|><|close|>tools<|sep|>" + bash + "<|close|>message<|sep|>"):
        WRITTEN.clear()
        engine = ScriptedEngine([text, answer("done")])
        result = await Agent(tools=[write], engine=engine).run("x")
        assert WRITTEN == []  # never run
        first = next(m for m in result.messages if isinstance(m, AssistantMessage))
        assert first.tool_calls is None
        assert bash in str(first.content)  # the text stays visible, as written
        assert engine.calls[1].messages[-1] == UserMessage(content=(
            "Some of your tool calls did not run:\n- The call to 'write' was written outside the tools section, as "
            "text and did not run. Tool calls run only inside the tools section: make it again there if it is "
            "still needed."))
        assert result.output == "done" and result.degraded and result.dropped_calls == 1
        assert result.issues == ["turn 1: the call to 'write' was written outside the tools section, as text and "
                                 "did not run"]


@pytest.mark.parametrize(
    "empty",
    [
        THINK + "<|close|>message<|sep|>",  # reasoning only
        THINK + "<|open|>response<|sep|>   \n<|close|>response<|sep|><|close|>message<|sep|>",  # blank text
        THINK + "<|open|>tools<|sep|><|close|>tools<|sep|><|close|>message<|sep|>",  # tools opened, no call
    ],
)
async def test_a_turn_with_no_answer_and_no_call_is_never_the_final_answer(empty: str) -> None:
    engine = ScriptedEngine([empty, answer("the answer")])
    result = await Agent(tools=[write], engine=engine).run("x")
    assert user_notes(result.messages) == [EMPTY_NOTE]
    assert result.output == "the answer" and result.stop_reason == "completed"
    assert result.issues == ["turn 1: the model's message had neither an answer nor a tool call"]

    engine = ScriptedEngine([empty, empty])
    result = await Agent(tools=[write], engine=engine).run("x")
    assert result.stop_reason == "unusable_output" and result.output is None


async def test_a_usable_turn_resets_the_count_of_unusable_ones() -> None:
    empty = THINK + "<|close|>message<|sep|>"
    engine = ScriptedEngine([empty, write_call("a", "1"), empty, answer("fine")])
    result = await Agent(tools=[write], engine=engine).run("x")
    assert result.stop_reason == "completed" and result.output == "fine" and result.turns == 4


async def test_the_outcome_of_an_unusable_turn_is_named() -> None:
    engine = ScriptedEngine([THINK + "<|open|>tools<|sep|>" + CALL + "<|close|>tools<|sep|><|close|>message<|sep|>"])
    agent = Agent(tools=[write], engine=engine)
    outcomes = [e async for e in agent._turn(_run(agent)) if isinstance(e, ContinueWith)]
    assert outcomes == [ContinueWith(UNCLOSED_NOTE)]


def _run(agent: Agent[Any]) -> Any:
    from kimik3.agents._agent import _Run
    from kimik3.agents._tokens import RunTokens

    return _Run([UserMessage(content="go")], None, None, RunTokens(None, agent.client))


# -- 4. compaction summaries that are empty or cut ----------------------------------------------


def compaction_script(summaries: list[str]) -> tuple[ScriptedEngine, list[str], list[list[Message]]]:
    """Six write turns, then an answer; compaction requests take ``summaries`` in order (the last
    one again when they run out). Returns the engine, the compaction requests' texts and the
    messages of every other model call."""
    asked: list[str] = []
    seen: list[list[Message]] = []
    turns = [write_call(f"t{i}", LONG) for i in range(6)]

    def script(messages: list[Message]) -> str:
        last = messages[-1]
        if isinstance(last, UserMessage) and str(last.content).startswith(("Summarise the conversation", "Your summary")):
            asked.append(str(last.content))
            return summaries.pop(0) if len(summaries) > 1 else summaries[0]
        seen.append(messages)
        n = sum(isinstance(m, AssistantMessage) for m in messages)
        return turns[n] if n < len(turns) else answer("final")

    return ScriptedEngine(script), asked, seen


POLICY = ContextPolicy(context_window=6000, compact_at=0.5, keep_recent_turns=2)
LONG = "word " * 400


async def test_an_empty_summary_twice_is_never_applied_and_the_run_goes_on_without_it() -> None:
    """Issue 41: the history is no longer kept whole (the run would overflow): the oldest turns
    go without a summary, and the summary backs off instead of being asked every turn."""
    reasoning_only = "I summarise<|close|>think<|sep|><|close|>message<|sep|>"
    asked: list[str] = []
    done = [0]  # the model's own count of its turns (the history loses the oldest)

    def script(messages: list[Message]) -> str:
        last = str(messages[-1].content)
        if last.startswith(("Summarise the conversation", "Your summary")):
            asked.append(last)
            return reasoning_only
        done[0] += 1
        return write_call(f"t{done[0] - 1}", LONG) if done[0] <= 6 else answer("final")

    events = [e async for e in Agent(tools=[write], engine=ScriptedEngine(script), context=POLICY).run_stream("go")]
    compactions = [e for e in events if isinstance(e, CompactionEvent)]
    why = "compaction's summary came back empty (no text, only reasoning)"
    assert compactions[0].failed == why and all(c.summary == "" for c in compactions)
    assert asked[:2] == [asked[0], "Your summary came back empty (no text, only reasoning). "
                                   "Write the summary again, shorter, as plain text."]
    assert asked[0].startswith("Summarise the conversation so far")
    assert len(asked) == 2  # backing off: not asked again on the next turns
    final = events[-1]
    assert isinstance(final, FinalEvent)
    result = final.result
    assert result.issues[:2] == [
        f"turn 5: {why}",
        f"turn 5: compaction without a summary (the summary failed): 0 old tool results cleared, "
        f"{compactions[0].removed_messages} messages of the oldest turns dropped"]
    assert result.degraded and result.output == "final" and result.dropped_messages > 0
    # whole turns went, oldest first: the write results left are the most recent ones, in order
    texts = tool_texts(result.messages)
    assert texts == [f"wrote 2000 characters to t{i}" for i in range(6 - len(texts), 6)] and len(texts) < 6
    assert not any("[Summary of" in str(m.content) for m in result.messages)


@pytest.mark.parametrize("bad", ["cut", "blank", "calls only"])
async def test_a_cut_or_empty_summary_is_retried_and_the_second_one_applied(bad: str) -> None:
    good = answer("SUMMARY: wrote t0, t1")
    first = {
        "cut": good[: -len("<|close|>response<|sep|><|close|>message<|sep|>")],
        "blank": answer("  \n "),
        "calls only": write_call("z", "summary as a call"),
    }[bad]
    engine, asked, seen = compaction_script([first, good])
    events = [e async for e in Agent(tools=[write], engine=engine, context=POLICY).run_stream("go")]
    compactions = [e for e in events if isinstance(e, CompactionEvent)]
    assert compactions[0].summary == "SUMMARY: wrote t0, t1" and compactions[0].failed is None
    problem = "was cut by the output limit (max_tokens)" if bad == "cut" else "came back empty (no text, only reasoning)"
    assert asked[1] == f"Your summary {problem}. Write the summary again, shorter, as plain text."
    after = next(msgs for msgs in seen if any("[Summary of" in str(m.content) for m in msgs))
    notes = [str(m.content) for m in after if "[Summary of" in str(m.content)]
    assert notes == [f"[Summary of {compactions[0].removed_messages} earlier messages, written by you]\n"
                     "SUMMARY: wrote t0, t1"]
    assert ("z", "summary as a call") not in WRITTEN  # the summary turn's call never runs


# -- 5. a tool that raises CancelledError itself --------------------------------------------------


async def test_a_tools_own_cancelled_error_is_its_error_and_siblings_finish() -> None:
    @tool
    async def liar() -> str:
        """Raises CancelledError though nothing cancelled it."""
        raise asyncio.CancelledError("mine")

    @tool
    def sync_liar() -> str:
        """Raises CancelledError in its worker thread."""
        raise asyncio.CancelledError()

    @tool
    async def waits_on_a_cancelled_task() -> str:
        """Awaits a sub-task it cancelled itself."""
        task = asyncio.ensure_future(asyncio.sleep(60))
        await asyncio.sleep(0)
        task.cancel()
        await task
        return "unreachable"

    @tool
    async def slow(text: str) -> str:
        """Finishes after a while."""
        await anyio.sleep(0.05)
        return text.upper()

    engine = ScriptedEngine([calls(("slow", {"text": "a"}), ("liar", {}), ("sync_liar", {}),
                                   ("waits_on_a_cancelled_task", {}), ("write", {"path": "p", "text": "t"})),
                             answer("carried on")])
    result = await Agent(tools=[slow, liar, sync_liar, waits_on_a_cancelled_task, write], engine=engine).run("x")
    assert tool_texts(result.messages) == [
        "A",
        "Error: CancelledError: mine (raised by the code itself: nothing cancelled it)",
        "Error: CancelledError (raised by the code itself: nothing cancelled it)",
        "Error: CancelledError (raised by the code itself: nothing cancelled it)",
        "wrote 1 characters to p",
    ]
    assert result.output == "carried on" and result.failed_calls == 3 and result.stop_reason == "completed"


async def test_an_approval_hook_raising_cancelled_error_fails_only_its_call() -> None:
    def approve(pending: Any) -> Any:
        if pending.arguments["path"] == "bad":
            raise asyncio.CancelledError("hook")
        return Allow()

    engine = ScriptedEngine([calls(("write", {"path": "bad", "text": "1"}), ("write", {"path": "ok", "text": "2"})),
                             answer("done")])
    result = await Agent(tools=[write], engine=engine, approval=approve).run("x")
    assert tool_texts(result.messages) == [
        "Error: CancelledError: hook (raised by the code itself: nothing cancelled it)", "wrote 1 characters to ok"]
    assert WRITTEN == [("ok", "2")]


# -- 6. images the model could never be shown ---------------------------------------------------


def data_url(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode()


BOMB = ("Error: the tool's result holds an image the model cannot be shown: ImageTooLargeError: Image size "
        "(200000000 pixels) exceeds limit of 178956970 pixels, could be decompression bomb DOS attack.")


async def test_an_image_over_the_bomb_limit_becomes_a_tool_error_and_the_run_goes_on() -> None:
    @tool
    def screenshot(kind: str) -> Any:
        """Returns an image."""
        if kind == "bomb":
            return ["caption", ImagePart(image_url=ImageURL(url=data_url(png_header_only(20000, 10000))))]
        if kind == "corrupt":
            return ImagePart(image_url=ImageURL(url=data_url(png_header_only(100, 100))))
        return ImagePart(image_url=ImageURL(url=prepare_image(Image.new("RGB", (32, 32), "red")).data_url()))

    engine = ScriptedEngine([calls(("screenshot", {"kind": "bomb"}), ("screenshot", {"kind": "corrupt"}),
                                   ("screenshot", {"kind": "fine"})), answer("seen")])
    result = await Agent(tools=[screenshot], engine=engine).run("look")
    bomb, corrupt, fine = [m for m in result.messages if isinstance(m, ToolMessage)]
    assert bomb.content == BOMB + "\ncaption"
    assert isinstance(corrupt.content, str)
    assert corrupt.content.startswith("Error: the tool's result holds an image the model cannot be shown: "
                                      "MediaDecodeError: cannot decode image")
    assert isinstance(fine.content, list) and isinstance(fine.content[0], ImagePart)
    assert result.output == "seen" and result.failed_calls == 2


def test_the_decompression_bomb_warning_under_warnings_as_errors_is_image_too_large() -> None:
    over_warning_limit = png_header_only(10000, 10000)  # 100,000,000 > 89,478,485: Pillow only warns
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ImageTooLargeError, match=r"Image size \(100000000 pixels\) exceeds limit"):
            prepare_image(over_warning_limit)


# -- 7. budgets hold for any tool -----------------------------------------------------------------

CHILD = r"""
import json, os, sys, tempfile, threading, time
import anyio
from kimik3 import Agent, Budgets, ScriptedEngine, ToolMessage, tool
from kimik3.formats.k3 import render_output

kind = sys.argv[1]
fifo = os.path.join(tempfile.mkdtemp(), "pipe")
os.mkfifo(fifo)

@tool
def block(path: str) -> str:
    '''Blocks in a system call (or a lock) the way a user's own sync function can.'''
    if kind == "fifo":
        with open(path) as f:  # no writer ever comes: open() blocks in the kernel
            return f.read()
    threading.Event().wait()  # a lock nobody releases
    return "never"

call = render_output({"reasoning_content": "r", "content": "", "tool_calls": [
    {"id": "1", "function": {"name": "block", "arguments": {"path": fifo}}}]})
summary = render_output({"reasoning_content": "r", "content": "out of time"})
engine = ScriptedEngine([call, summary])
result = anyio.run(Agent(tools=[block], engine=engine, budgets=Budgets(seconds=5)).run, "read it")
tool_message = [m.content for m in result.messages if isinstance(m, ToolMessage)]
print(json.dumps({"stop": result.stop_reason, "output": result.output, "tool": tool_message,
                  "failed": result.failed_calls}))
sys.stdout.flush()
"""


@pytest.mark.parametrize("kind", ["fifo", "lock"])
def test_a_sync_tool_blocked_in_a_system_call_cannot_hold_the_run_past_its_budget(kind: str) -> None:
    # A hang would show as the child never finishing: 120 s is generous for a 5 s budget (5 s, not
    # less: on a loaded machine the child's start and first model call must leave the tool some).
    proc = subprocess.run([sys.executable, "-c", CHILD, kind], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["stop"] == "time_budget" and out["output"] == "out of time" and out["failed"] == 1
    (text,) = out["tool"]
    # the limit is what was left of the 5 s budget when the tool started (rounded up to 0.1 s)
    assert re.fullmatch(r"Error: ToolTimeoutError: block did not finish within (0\.[1-9]|[1-4](\.\d)?|5) s and was abandoned "
                        r"\(its thread may still be running\)", text), text


async def test_a_tool_cancelling_its_own_task_fails_alone() -> None:
    @tool
    async def cancels_itself() -> str:
        """Cancels the task it runs in."""
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        await asyncio.sleep(60)
        return "unreachable"

    @tool
    async def slow(text: str) -> str:
        """Finishes after a while."""
        await anyio.sleep(0.05)
        return text.upper()

    engine = ScriptedEngine([calls(("cancels_itself", {}), ("slow", {"text": "b"})), answer("fine")])
    result = await Agent(tools=[cancels_itself, slow], engine=engine).run("x")
    assert tool_texts(result.messages) == ["Error: CancelledError (raised by the code itself: nothing cancelled it)", "B"]
    assert result.output == "fine"


async def test_the_runs_own_cancellation_from_asyncio_still_cancels_every_tool() -> None:
    cancelled: list[str] = []
    entered = anyio.Event()

    @tool
    async def waits(name: str) -> str:
        """Waits until cancelled."""
        entered.set()
        try:
            await anyio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append(name)
            raise
        return "woke"

    history: list[Message] = []
    engine = ScriptedEngine([calls(("waits", {"name": "a"}), ("waits", {"name": "b"}))])
    task = asyncio.ensure_future(Agent(tools=[waits], engine=engine).run("x", messages=history))
    await entered.wait()
    await asyncio.sleep(0.01)
    task.cancel()  # asyncio's own cancellation of the task running the agent (as wait_for does)
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sorted(cancelled) == ["a", "b"]
    assert tool_texts(history) == ["Error: the tool call was cancelled before it finished"] * 2


async def test_a_compaction_call_that_fails_is_said_and_the_run_goes_on_without_it() -> None:
    done = [0]

    def script(messages: list[Message]) -> str:
        if str(messages[-1].content).startswith("Summarise the conversation"):
            raise ConnectionResetError("the server went away")
        done[0] += 1
        return write_call(f"t{done[0] - 1}", LONG) if done[0] <= 6 else answer("final")

    events = [e async for e in Agent(tools=[write], engine=ScriptedEngine(script), context=POLICY).run_stream("go")]
    failed = [e.failed for e in events if isinstance(e, CompactionEvent)]
    assert failed[0] == "compaction's summary could not be made (ConnectionResetError: the server went away)"
    final = events[-1]
    assert isinstance(final, FinalEvent) and final.result.output == "final"
    texts = tool_texts(final.result.messages)
    assert texts == [f"wrote 2000 characters to t{i}" for i in range(6 - len(texts), 6)]


async def test_an_empty_summary_turn_after_a_budget_is_an_issue() -> None:
    engine = ScriptedEngine([write_call("a", "1"), THINK + "<|close|>message<|sep|>"])
    result = await Agent(tools=[write], engine=engine, max_turns=1).run("x")
    assert result.stop_reason == "turn_budget" and result.output == ""
    assert result.issues == ["turn 2: the summary turn gave no text"] and result.degraded


async def test_an_image_path_that_cannot_be_read_is_a_tool_error_too(tmp_path: Path) -> None:
    @tool
    def screenshot() -> Any:
        """Returns an image by path."""
        return ImagePart(image_url=ImageURL(url=str(tmp_path / "gone.png")))

    engine = ScriptedEngine([calls(("screenshot", {})), answer("ok")])
    result = await Agent(tools=[screenshot], engine=engine).run("look")
    (text,) = tool_texts(result.messages)
    # local files are refused unless the engine allows them; allowed, a missing one is an OSError: both errors
    assert text.startswith("Error: the tool's result holds an image the model cannot be shown: MediaError: an "
                           f"image part names a local file ('{tmp_path / 'gone.png'}')")
    assert result.output == "ok"
    engine = ScriptedEngine([calls(("screenshot", {})), answer("ok")])
    engine.allow_local_files = True  # allowed: the file is missing, still the tool's error
    result = await Agent(tools=[screenshot], engine=engine).run("look")
    assert tool_texts(result.messages) == [
        "Error: the tool's result holds an image the model cannot be shown: MediaError: cannot read the image "
        f"file '{tmp_path / 'gone.png'}': No such file or directory"]


async def test_an_approval_hook_that_outlasts_the_time_budget_is_ended_by_it() -> None:
    async def never_decides(pending: Any) -> Any:
        await anyio.sleep(60)
        return Allow()

    engine = ScriptedEngine([write_call("a", "1"), answer("out of time")])
    result = await Agent(tools=[write], engine=engine, approval=never_decides, budgets=Budgets(seconds=0.5)).run("x")
    assert tool_texts(result.messages) == ["Error: the run's time budget ran out before the tool call finished"]
    assert result.stop_reason == "time_budget" and WRITTEN == [] and result.failed_calls == 1


async def test_a_tools_own_time_limit_holds_under_a_longer_budget() -> None:
    @tool(timeout=0.1)
    async def stuck() -> str:
        """Never returns in time."""
        await anyio.sleep(60)
        return "late"

    engine = ScriptedEngine([calls(("stuck", {})), answer("moved on")])
    result = await Agent(tools=[stuck], engine=engine, budgets=Budgets(seconds=3600)).run("x")
    assert tool_texts(result.messages) == ["Error: ToolTimeoutError: stuck did not finish within 0.1 s and was cancelled"]
    assert result.output == "moved on" and result.stop_reason == "completed"


@pytest.mark.parametrize("cut_at", ['<|open|>call tool="wr', "<|open|>", "<|close|>tools"])
async def test_output_cut_after_the_complete_calls_is_named_too(cut_at: str) -> None:
    first = write_call("a", "hello")
    cut = first[: first.index("<|close|>tools<|sep|>")] + cut_at  # cut before a further call had a name
    engine = ScriptedEngine([cut, answer("done")])
    result = await Agent(tools=[write], engine=engine).run("x")
    assert WRITTEN == [("a", "hello")] and result.output == "done"
    assert user_notes(result.messages) == [
        "Some of your tool calls did not run:\n- Whatever followed the last complete call was cut by the output "
        "limit (max_tokens) and did not run. If you meant to make more calls, make them now."]
    assert result.issues == ["turn 1: whatever followed the last complete call was cut by the output limit "
                             "(max_tokens) and did not run"]
    assert (result.cut_calls, result.dropped_calls) == (0, 0) and result.degraded
