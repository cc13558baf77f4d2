"""A run whose replies keep being cut by max_tokens stops with stop_reason "no_progress" after
MAX_CONTINUES cut replies in a row, instead of asking to "continue" until the context overflows
(issue 16, item 2)."""

from __future__ import annotations

from pydantic import BaseModel

from kimik3 import Agent, ScriptedEngine, UserMessage
from kimik3._defaults import MAX_CONTINUES
from kimik3.agents._agent import CONTINUE_REQUEST
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
    engine = ScriptedEngine([CUT, CUT, CALL, CUT, CUT, "Done."])
    result = await Agent(tools=[noop], engine=engine).run("go")
    assert (result.stop_reason, result.output, result.turns) == ("completed", "Done.", 6)
    assert continues(result.messages) == 4


class Answer(BaseModel):
    value: int


async def test_no_progress_with_an_output_type_has_no_output() -> None:
    result = await Agent(engine=ScriptedEngine([CUT] * 3), output_type=Answer).run("value?")
    assert (result.stop_reason, result.output, result.turns) == ("no_progress", None, 3)
