"""The run's task survives compaction (issue 41): the user message that started a run is never
summarised or dropped, it stays verbatim in every later request; a task that no request could
carry ends the run with ``context_overflow`` before any request, never ``completed``."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kimik3 import Agent, K3Tokenizer, ScriptedEngine, tool
from kimik3.formats.k3 import default_tokenizer, render_output
from kimik3.types import Message, UserMessage

SUMMARY_ASK = ("Summarise the conversation", "Your summary")


@pytest.fixture(scope="module")
def tok() -> K3Tokenizer:
    return default_tokenizer()


@tool
def read_file(path: str) -> str:
    """Read a file.

    Args:
        path: the file.
    """
    return "".join(f"line {i} of {path}\n" for i in range(40))


def reads(paths: list[str]) -> Callable[[list[Message]], str]:
    """One read_file call a turn for each of ``paths``, then "All read."; summaries are "Summary."."""
    done = [0]

    def reply(messages: list[Message]) -> str:
        if str(messages[-1].content).startswith(SUMMARY_ASK):
            return render_output({"reasoning_content": "x", "content": "Summary."})
        done[0] += 1
        if done[0] > len(paths):
            return render_output({"reasoning_content": "x", "content": "All read."})
        return render_output({"reasoning_content": "x", "tool_calls": [
            {"id": f"c{done[0]}", "function": {"name": "read_file", "arguments": {"path": paths[done[0] - 1]}}}]})

    return reply


async def history(tok: K3Tokenizer, files: int) -> list[Message]:
    engine = ScriptedEngine(reads([f"f{i}" for i in range(files)]), tokenizer=tok, max_model_len=4096)
    result = await Agent(tools=[read_file], engine=engine, max_turns=100).run("Read.")
    assert result.stop_reason == "completed"
    return result.messages


def asked_with(engine: ScriptedEngine, task: str) -> list[bool]:
    """For each request after the summary: whether it carried ``task`` verbatim."""
    return [any(isinstance(m, UserMessage) and m.content == task for m in c.messages)
            for c in engine.calls if not str(c.messages[-1].content).startswith(SUMMARY_ASK)]


async def test_a_resumed_runs_large_task_is_kept_through_compaction(tok: K3Tokenizer) -> None:
    """The attacker's input (c5): a 1,895-token task resuming a 12-read history in a 4,096 window.
    Before: the compaction summarised the task away; the model answered a request without it."""
    task = "NEWTASK please do: " + "step " * 1800
    assert len(tok.encode_messages([UserMessage(content=task)])) == 1895
    engine = ScriptedEngine(reads([]), tokenizer=tok, max_model_len=4096)
    result = await Agent(tools=[read_file], engine=engine, max_turns=10).run(
        task, messages=await history(tok, 12))
    assert (result.stop_reason, result.output) == ("completed", "All read.")
    assert result.summaries == 1 and asked_with(engine, task) == [True]
    assert [m.content for m in result.messages if isinstance(m, UserMessage)][-1] == task


async def test_the_task_stays_while_the_runs_own_turns_are_summarised(tok: K3Tokenizer) -> None:
    """The variant: a 900-token task, then the run's own reads fill the window again and again;
    every request (the model's turns) carries the task verbatim, through every compaction."""
    task = "SECOND task: " + "do this " * 440
    engine = ScriptedEngine(reads([f"g{i}" for i in range(30)]), tokenizer=tok, max_model_len=4096)
    result = await Agent(tools=[read_file], engine=engine, max_turns=100).run(
        task, messages=await history(tok, 3))
    assert (result.stop_reason, result.output) == ("completed", "All read.")
    assert result.summaries >= 2
    assert asked_with(engine, task) == [True] * 31


async def test_a_task_larger_than_the_window_ends_with_context_overflow(tok: K3Tokenizer) -> None:
    """The attacker's input (c3): a 6,000-word task resuming a short history in a 4,096 window.
    Before: ``completed``, answered from a summary of a task no request contained."""
    engine = ScriptedEngine(reads([]), tokenizer=tok, max_model_len=4096)
    result = await Agent(tools=[read_file], engine=engine, max_turns=10).run(
        "PASTE " * 6000, messages=await history(tok, 1))
    assert (result.stop_reason, result.output, result.turns, len(engine.calls)) == ("context_overflow", None, 0, 0)
    assert len(result.issues) == 1
    assert result.issues[0].startswith("turn 0: the task does not fit the context window: with what always stays")
    assert result.issues[0].endswith("of the 4,096-token window; the task is never summarised or dropped, so no "
                                     "request can carry it: give a shorter task, or serve a larger window "
                                     "(vLLM --max-model-len)")


async def test_a_task_that_fits_alone_but_not_with_what_stays_ends_with_context_overflow(tok: K3Tokenizer) -> None:
    """The variant: the task alone is under the 4,096-token window; with the tool declarations and
    the first task no request can carry it."""
    task = "NEWTASK " + "step " * 3950
    assert len(tok.encode_messages([UserMessage(content=task)])) < 4096
    engine = ScriptedEngine(reads([]), tokenizer=tok, max_model_len=4096)
    result = await Agent(tools=[read_file], engine=engine, max_turns=10).run(task, messages=await history(tok, 2))
    assert (result.stop_reason, result.output, len(engine.calls)) == ("context_overflow", None, 0)
    assert len(result.issues) == 1 and result.issues[0].startswith(
        "turn 0: the task does not fit the context window: with what always stays (tool declarations, instructions, "
        "the first task) it is ")
