"""The server shapes reported since round 2 (issue 27, item 8), and usage wherever servers put it
(item 6), through an Agent (or a Client) against an in-process OpenAI server: each shape ends in
the answer, or a visibly degraded run, never ``completed`` with markers or with "".

The checker's side of each shape is a row of ``tests/engines/test_chat_transcripts.py``."""

from __future__ import annotations

from typing import Any

from kimik3 import Agent, Budgets, Client, ToolMessage, UserMessage, tool
from tests.engines.test_remote_offline import chat_chunk, replies

RAN: list[str] = []
LEAK = ('<|open|>tools<|sep|><|open|>call tool="calculator" index="1"<|sep|><|open|>argument key="expression" '
        'type="string"<|sep|>37 * 19<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>'
        "<|close|>message<|sep|>")
READ = ("turn 1: the {} held K3 markup the server left unparsed; read as K3 structure, so its text changed (markers "
        "dropped, text moved between reasoning and answer, calls read)")  # a field changed by recovery: an issue


@tool
def lookup(q: str) -> str:
    """Look something up."""
    RAN.append(q)
    return f"found {q}"


def usage(prompt: int, completion: int, *, in_choice: bool = False) -> dict[str, Any]:
    counts = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    if in_choice:  # Kimi's shape: usage inside choices[0], on the last chunk
        return {"object": "chat.completion.chunk", "choices": [
            {"index": 0, "delta": {}, "finish_reason": "stop", "usage": counts}]}
    return {"object": "chat.completion.chunk", "choices": [], "usage": counts}


ANSWER = [chat_chunk({"reasoning_content": "ok"}), chat_chunk({"content": "703."}, finish="stop"), usage(40, 5)]


async def test_a_the_answer_streamed_as_reasoning_is_the_answer() -> None:
    # vLLM #57689: a completion that opens straight into the response channel, all of it streamed as
    # reasoning, raw markers included, content empty
    turn = [chat_chunk({"reasoning": "<|open|>response<|sep|>37 * 19 = 703."}),
            chat_chunk({"reasoning": "<|close|>response<|sep|><|close|>message<|sep|>"}, finish="stop"), usage(30, 9)]
    result = await Agent(engine=replies(turn).engine()).run("37 * 19?")
    # the answer changed on the way (issue 41, attack round): the turn says so, never silently
    assert (result.output, result.stop_reason, result.degraded) == ("37 * 19 = 703.", "completed", True)
    assert result.issues == [READ.format("reasoning")]
    assert result.messages[-1].reasoning_content == ""  # type: ignore[union-attr]


async def test_b_a_tools_section_returned_as_content_without_tools_never_runs_nor_is_the_answer() -> None:
    # SGLang #39583: the request declared no tools; the model's XTML call came back as plain content
    server = replies([chat_chunk({"reasoning_content": "use calculator"}), chat_chunk({"content": LEAK}, finish="stop"),
                      usage(30, 20)], ANSWER)
    result = await Agent(engine=server.engine()).run("Multiply 37 by 19 using calculator.")
    assert result.output == "703." and result.stop_reason == "completed" and result.degraded
    (error,) = [m.content for m in result.messages if isinstance(m, ToolMessage)]
    assert error == "Error: unknown tool 'calculator'; available tools: none"  # never run
    first = result.messages[1]
    assert first.content == "" and "<|" not in str(first.content)  # type: ignore[union-attr]
    assert result.issues == [
        READ.format("answer"),
        "turn 1: the call to 'calculator' could not be run (the server returned this call as text, and the request "
        "declared no tools) and did not run"]
    assert "tools" not in server.requests[1]["body"]  # still no tools declared


async def test_c_tool_choice_required_answered_with_json_content_is_the_call() -> None:
    # SGLang #33192: under tool_choice="required" the server returns the call as JSON content
    spec = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
    json_call = [chat_chunk({"content": '{"name": "lookup", "parameters": {"q": "Paris"}}'}, finish="stop"), usage(9, 9)]
    out = await Client(replies(json_call).engine()).chat([{"role": "user", "content": "x"}], tools=[spec],
                                                         tool_choice="required", reasoning_effort="none")
    assert out.message.content == "" and out.finish_reason == "tool_calls"
    assert [(c.function.name, c.function.arguments) for c in out.message.tool_calls or ()] == [("lookup", '{"q": "Paris"}')]
    # a name that was not declared: a failed call (never run), and never the answer
    other = [chat_chunk({"content": '{"name": "rm", "parameters": {"path": "/"}}'}, finish="stop"), usage(9, 9)]
    out = await Client(replies(other).engine()).chat([{"role": "user", "content": "x"}], tools=[spec],
                                                     tool_choice="required", reasoning_effort="none")
    assert out.message.content == "" and out.message.tool_calls is None and out.finish_reason == "stop"
    assert [(f.name, f.arguments, f.reason) for f in out.failed_tool_calls] == [
        ("rm", '{"path": "/"}', "the server returned this call as text, and no tool named 'rm' is declared")]


async def test_d_reasoning_leaked_into_the_answer_through_a_spelled_marker_is_split_off() -> None:
    # SGLang #32677: the model re-emitted its think open as ordinary text ('<|sep' + '|>'), so the server
    # streamed the whole think channel, markers included, as content
    turn = [chat_chunk({"content": "<|open|>think<|sep"}), chat_chunk({"content": "|>The user greets me."}),
            chat_chunk({"content": "<|close|>think<|sep|><|open|>response<|sep|>Hello!<|close|>response<|sep|>"}),
            chat_chunk({"content": "<|close|>message<|sep|>"}, finish="stop"), usage(20, 20)]
    result = await Agent(engine=replies(turn).engine()).run("hi")
    assert (result.output, result.stop_reason, result.degraded) == ("Hello!", "completed", True)
    assert result.issues == [READ.format("answer")]
    assert result.messages[-1].reasoning_content == "The user greets me."  # type: ignore[union-attr]


async def test_e_replies_cut_after_reasoning_only_get_one_retry_then_no_progress() -> None:
    cut = [chat_chunk({"reasoning_content": "Let me think about this for a long"}), chat_chunk({}, finish="length"),
           usage(20, 512)]
    server = replies(cut, cut, cut)
    result = await Agent(engine=server.engine()).run("a hard question")
    assert (result.stop_reason, result.output, result.turns) == ("no_progress", None, 2)
    assert len(server.requests) == 2  # one retry, the third reply never asked for
    assert [m.content for m in result.messages if isinstance(m, UserMessage)][1:] == [
        "Your last message was cut off by the output limit. Continue where you stopped."]
    assert result.degraded and result.issues == [
        "turn 2: the model's replies kept being cut by the output limit (max_tokens)"]


async def test_usage_inside_choices_is_read() -> None:
    turn = [chat_chunk({"content": "Hi."}), usage(123, 4, in_choice=True)]
    result = await Agent(engine=replies(turn).engine()).run("hi")
    u = result.usage
    assert (u.prompt_tokens, u.completion_tokens, u.total_tokens, u.unknown) == (123, 4, 127, False)


async def test_no_usage_at_all_is_counted_and_the_token_budget_still_holds() -> None:
    # a server that never reports usage (or reports zeros): the budget is not silently passed as 0
    RAN.clear()
    call = [chat_chunk({"tool_calls": [{"index": 0, "id": "c", "type": "function",
                                        "function": {"name": "lookup", "arguments": '{"q": "' + "x" * 200 + '"}'}}]}),
            chat_chunk({}, finish="tool_calls")]
    zeros = [*call, usage(0, 0)]
    server = replies(*([call, zeros] * 10), ANSWER)
    agent = Agent(tools=[lookup], engine=server.engine(), budgets=Budgets(tokens=400, turns=20))
    result = await agent.run("look it up, again and again")
    assert result.stop_reason == "token_budget"
    assert result.usage.unknown and result.usage.total_tokens >= 400
    assert 1 <= len(RAN) < 10  # stopped by the budget, long before the turn budget
