"""A run whose replies keep being cut by max_tokens stops with stop_reason "no_progress" after
MAX_CONTINUES cut replies in a row, instead of asking to "continue" until the context overflows
(issue 16, item 2); a cut reply that leaves the window no room to continue is reported the same
way, not raised (issue 35)."""

from __future__ import annotations

from pydantic import BaseModel

from kimik3 import Agent, ContextLengthExceededError, ScriptedEngine, UserMessage
from kimik3._defaults import MAX_CONTINUES
from kimik3.agents._prompts import CONTINUE_REQUEST
from kimik3.formats.k3 import render_output

CUT = "Let me think<|close|>think<|sep|><|open|>response<|sep|>The answer is"  # no message close: "length"
CALL = render_output({"tool_calls": [{"id": "c", "type": "function", "function": {"name": "noop", "arguments": "{}"}}]})


def noop() -> str:
    """Do nothing."""
    return "done"


def continues(result_messages: list[object]) -> int:
    return sum(1 for m in result_messages if isinstance(m, UserMessage) and m.content == CONTINUE_REQUEST)


async def test_cut_replies_in_a_row_stop_with_no_progress() -> None:
    assert MAX_CONTINUES == 3
    engine = ScriptedEngine([CUT, CUT + " 4", CUT + " 42", "never used"])
    result = await Agent(engine=engine).run("What is 6 x 7?")
    assert result.stop_reason == "no_progress"
    assert result.output == "The answer is 42"  # the last reply's text, visibly cut
    assert result.turns == 3 and engine.remaining == 1
    assert continues(result.messages) == 2


async def test_a_tool_call_resets_the_count_and_a_full_reply_completes() -> None:
    engine = ScriptedEngine([CUT, CUT, CALL, CUT, CUT, " 42. Done."])
    result = await Agent(tools=[noop], engine=engine).run("go")
    assert (result.stop_reason, result.output, result.turns) == ("completed", "The answer is 42. Done.", 6)
    assert continues(result.messages) == 4


class Answer(BaseModel):
    value: int


async def test_no_progress_with_an_output_type_has_no_output() -> None:
    result = await Agent(engine=ScriptedEngine([CUT] * 3), output_type=Answer).run("value?")
    assert (result.stop_reason, result.output, result.turns) == ("no_progress", None, 3)


def window_full(replies: list[str]) -> ScriptedEngine:
    """Replies in order, then the context window is full: the next request is refused, as a real
    engine refuses a prompt over its max_model_len."""

    def reply(messages: object) -> str:
        if not replies:
            raise ContextLengthExceededError("the prompt (8200 tokens) does not fit max_model_len 8192",
                                             status_code=None)
        return replies.pop(0)

    return ScriptedEngine(reply)


async def test_a_cut_reply_that_filled_the_window_is_reported_not_raised() -> None:
    result = await Agent(engine=window_full([CUT + " 4"])).run("What is 6 x 7?")
    assert (result.stop_reason, result.output, result.turns) == ("no_progress", "The answer is 4", 1)
    assert result.issues == ["turn 1: the reply was cut by max_tokens and the context window has no room to "
                             "continue it"]
    assert continues(result.messages) == 1  # asked, recorded; the engine refused the request


async def test_a_full_window_without_a_cut_reply_ends_the_run_context_overflow() -> None:
    """Before issue 41 the error was raised out of Agent.run."""
    result = await Agent(engine=window_full([])).run("What is 6 x 7?")
    assert (result.stop_reason, result.output, result.turns) == ("context_overflow", None, 0)
    assert result.issues[-1].endswith("a summary tried): the prompt (8200 tokens) does not fit max_model_len 8192")
