"""Issue 41 items 3-5 and issue 40's N08 through an Agent: leaked markup read as structure keeps the
parsed message in history; markup left as text, usage that did not add up, a second tools section,
an argument given twice are issues of their turn (a degraded run), never a clean one; text between
two calls loses neither call.

The checker's and parser's sides are rows of ``tests/engines/test_chat_leaks.py`` and
``tests/formats/test_k3_model_slips.py``.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from kimik3 import Agent, AssistantMessage, ScriptedEngine, ToolMessage, tool
from kimik3._pricing import Pricing
from tests.agents.test_agent import answer
from tests.engines.test_remote_offline import FakeServer, chat_chunk, model_card, replies

RAN: list[str] = []


@tool
def bash(command: str) -> str:
    """Run a command."""
    RAN.append(command)
    return f"ran {command}"


def usage(prompt: int, completion: int, cached: int | None = None) -> dict[str, Any]:
    counts: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                              "total_tokens": prompt + completion}
    if cached is not None:
        counts["prompt_tokens_details"] = {"cached_tokens": cached}
    return {"object": "chat.completion.chunk", "choices": [], "usage": counts}


async def test_a_near_miss_separator_is_read_history_keeps_the_parsed_message_and_the_turn_says_so() -> None:
    # SGLang #33530, streamed a few characters at a time
    text = "<|open|>response<|sep|the answer is 4"
    turn = [chat_chunk({"reasoning_content": "2 + 2"}),
            *(chat_chunk({"content": text[i:i + 3]}) for i in range(0, len(text), 3)),
            chat_chunk({}, finish="stop"), usage(20, 9)]
    result = await Agent(engine=replies(turn).engine()).run("2 + 2?")
    assert (result.output, result.stop_reason, result.degraded) == ("the answer is 4", "completed", True)
    assert result.issues == [  # the answer changed: never silently (issue 41, attack round)
        "turn 1: the answer held K3 markup the server left unparsed; read as K3 structure, so its text changed "
        "(markers dropped, text moved between reasoning and answer, calls read)"]
    kept = result.messages[-1]
    assert isinstance(kept, AssistantMessage)
    assert (kept.content, kept.reasoning_content) == ("the answer is 4", "2 + 2")


async def test_a_cut_marker_sequence_is_dropped_from_history() -> None:
    # SGLang #33097: a length cut right after <|close|> in the reasoning; the agent asks to continue
    cut = [chat_chunk({"reasoning_content": "deep thought<|close|>"}), chat_chunk({}, finish="length"), usage(20, 9)]
    done = [chat_chunk({"reasoning_content": "so"}), chat_chunk({"content": "42"}, finish="stop"), usage(40, 3)]
    result = await Agent(engine=replies(cut, done).engine()).run("?")
    first = next(m for m in result.messages if isinstance(m, AssistantMessage))
    assert first.reasoning_content == "deep thought" and "<|" not in str(first.content)


async def test_markup_left_as_text_makes_the_turn_degraded() -> None:
    turn = [chat_chunk({"reasoning_content": "plan"}), chat_chunk({"content": "one<|close|>think<|sep|>two"},
                                                                  finish="stop"), usage(20, 9)]
    result = await Agent(engine=replies(turn).engine()).run("?")
    assert result.output == "one<|close|>think<|sep|>two" and result.stop_reason == "completed"
    assert result.degraded and result.issues == [
        "turn 1: the answer holds K3 marker text (<|open|>, <|close|>, <|sep|>, or one spelled a little wrong) that "
        "could not be read as K3 structure: kept as text"]


async def test_usage_that_does_not_add_up_is_clamped_and_an_issue() -> None:
    turn = [chat_chunk({"reasoning_content": "r"}), chat_chunk({"content": "ok"}, finish="stop"), usage(120, 5, 900)]
    result = await Agent(engine=replies(turn).engine()).run("?")
    assert result.usage.cached_tokens == 120 and result.usage.prompt_tokens == 120
    assert result.issues == [
        "turn 1: usage.prompt_tokens_details.cached_tokens was 900, more than prompt_tokens 120: counted as 120"]


def raw_calls(body: str) -> str:
    return "checking<|close|>think<|sep|>" + body + "<|close|>message<|sep|>"


def call(command: str, index: int = 1, twice: str | None = None) -> str:
    extra = (f'<|open|>argument key="command" type="string"<|sep|>{twice}<|close|>argument<|sep|>'
             if twice is not None else "")
    return (f'<|open|>call tool="bash" index="{index}"<|sep|><|open|>argument key="command" type="string"<|sep|>'
            f"{command}<|close|>argument<|sep|>{extra}<|close|>call<|sep|>")


def section(*calls: str) -> str:
    return "<|open|>tools<|sep|>" + "".join(calls) + "<|close|>tools<|sep|>"


async def test_n08_a_second_tools_section_never_runs_and_is_said() -> None:
    RAN.clear()
    engine = ScriptedEngine([raw_calls(section(call("ls")) + section(call("rm -rf build"))), answer("done")])
    result = await Agent(engine=engine, tools=[bash]).run("clean up")
    assert RAN == ["ls"]
    assert result.degraded and result.issues == [
        "turn 1: the call to 'bash' was written outside the tools section, as text and did not run"]


async def test_b07_text_between_two_calls_loses_neither_call() -> None:
    RAN.clear()
    engine = ScriptedEngine([raw_calls(section(call("ls"), "\nNow the second one:\n", call("pwd", 2))),
                             answer("done")])
    result = await Agent(engine=engine, tools=[bash]).run("look")
    assert sorted(RAN) == ["ls", "pwd"] and result.output == "done"  # the two calls run concurrently


async def test_an_argument_given_twice_is_an_error_the_model_reads() -> None:
    RAN.clear()
    engine = ScriptedEngine([raw_calls(section(call("ls", twice="rm -rf /"))), answer("sorry")])
    result = await Agent(engine=engine, tools=[bash]).run("look")
    assert RAN == []
    (error,) = [m.content for m in result.messages if isinstance(m, ToolMessage)]
    assert error == ("Error: the call was not run: it gives argument 'command' more than once, so which value is "
                     "meant cannot be told; give each argument once")
    assert result.degraded



async def test_each_turns_clamped_usage_is_its_own_issue_said_once_and_the_cost_stays_positive(
        caplog: pytest.LogCaptureFixture) -> None:
    # turn 1: reasoning above completion, with a call; turn 2: cached above prompt in Moonshot's top-level shape
    RAN.clear()
    call_turn = [chat_chunk({"reasoning_content": "r"}), chat_chunk({"tool_calls": [{"index": 0, "id": "a", "function": {
        "name": "bash", "arguments": '{"command": "ls"}'}}]}, finish="tool_calls"),
        {"object": "chat.completion.chunk", "choices": [], "usage": {
            "prompt_tokens": 30, "completion_tokens": 4, "total_tokens": 34,
            "completion_tokens_details": {"reasoning_tokens": 9}}}]
    answer_turn = [chat_chunk({"reasoning_content": "r"}), chat_chunk({"content": "ok"}, finish="stop"),
                   {"object": "chat.completion.chunk", "choices": [], "usage": {
                       "prompt_tokens": 50, "completion_tokens": 2, "total_tokens": 52, "cached_tokens": 70}}]
    with caplog.at_level("WARNING", logger="kimik3"):
        result = await Agent(engine=replies(call_turn, answer_turn).engine(), tools=[bash]).run("?")
    assert RAN == ["ls"] and result.output == "ok"
    assert result.issues == [
        "turn 1: usage.completion_tokens_details.reasoning_tokens was 9, more than completion_tokens 4: counted as 4",
        "turn 2: usage.prompt_tokens_details.cached_tokens was 70, more than prompt_tokens 50: counted as 50"]
    said = [r.getMessage() for r in caplog.records if "did not add up" in r.getMessage()]
    assert len(said) == 2
    u = result.usage
    assert (u.prompt_tokens, u.completion_tokens, u.cached_tokens, u.reasoning_tokens) == (80, 6, 50, 4)
    assert Pricing(input=3.0, cached_input=0.30, output=15.0).cost(u) == pytest.approx(
        (30 * 3.0 + 50 * 0.30 + 6 * 15.0) / 1e6)


async def test_n39_a_continued_answer_streamed_a_character_at_a_time_is_the_whole_answer() -> None:
    # chat mode, both replies one character a chunk; the cut one ends inside a marker sequence (SGLang #33097)
    for first, second, want in [
        ("The capital of France is", " Paris.", "The capital of France is Paris."),
        ("The capital<|close|>response", " is Paris.", "The capital is Paris."),
        ("The capital of<|clo", " France is Paris.", "The capital of France is Paris."),
        ("One, two, three,", "One, two, three, four.", "One, two, three, four."),  # started over: not doubled
    ]:
        cut = [chat_chunk({"reasoning_content": "r"}), *(chat_chunk({"content": ch}) for ch in first),
               chat_chunk({}, finish="length"), usage(10, 5)]
        done = [chat_chunk({"reasoning_content": "r2"}), *(chat_chunk({"content": ch}) for ch in second),
                chat_chunk({}, finish="stop"), usage(20, 5)]
        result = await Agent(engine=replies(cut, done).engine()).run("?")
        assert (result.output, result.stop_reason) == (want, "completed")
        assert "<|" not in str([m.content for m in result.messages])  # history keeps the parsed messages


async def test_a_non_streamed_think_close_at_a_cut_is_read_and_the_history_keeps_the_parsed_message() -> None:
    # senpi #1092 from a server that ignored stream: true (one chat.completion a request)
    bodies = [{"object": "chat.completion", "model": "k3", "usage": usage(10, 5)["usage"], "choices": [{"index": 0,
               "message": {"role": "assistant", "reasoning_content": "plan", "content": "it is done<|close|>think\n"},
               "finish_reason": "length"}]},
              {"object": "chat.completion", "model": "k3", "usage": usage(20, 5)["usage"], "choices": [{"index": 0,
               "message": {"role": "assistant", "reasoning_content": "r", "content": " And checked."},
               "finish_reason": "stop"}]}]
    server = FakeServer(lambda request: httpx.Response(200, json=bodies.pop(0)), models=[model_card()])
    result = await Agent(engine=server.engine()).run("?")
    assert (result.output, result.stop_reason, result.degraded) == ("it is done And checked.", "completed", True)
    assert result.issues == [
        "turn 1: the answer held K3 markup the server left unparsed; read as K3 structure, so its text changed "
        "(markers dropped, text moved between reasoning and answer, calls read)"]
    kept = [(m.content, m.reasoning_content) for m in result.messages if isinstance(m, AssistantMessage)]
    assert kept == [("it is done", "plan"), (" And checked.", "r")]
