"""Long runs stay cheap and inside the window (issue 30): each message is checked, scanned and
encoded once however long the run; compaction counts each message's K3 framing, so a 3,000-turn
run of small tool calls compacts and completes inside a window the engine enforces."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from kimik3 import Agent, ContextLengthExceededError, ContextPolicy, K3Tokenizer, ScriptedEngine, tool
from kimik3.agents import CompactionEvent, FinalEvent, TurnEndEvent
from kimik3.formats.k3 import _codec, default_tokenizer, render_output
from kimik3.types import Message, UserMessage
from kimik3.types import _request as request_module


@pytest.fixture(scope="module")
def tok() -> K3Tokenizer:
    return default_tokenizer()  # K3's real vocabulary: exact counts


@tool
def read_file(path: str) -> str:
    """Read a file.

    Args:
        path: the file.
    """
    return f"x = {path!r}"


def small_calls(turns: int, summaries: list[int] | None = None) -> Any:
    """A script of ``turns`` small read_file calls, then the answer; compaction requests get a
    summary (their turn numbers go into ``summaries``)."""
    done = [0]

    def reply(messages: list[Message]) -> str:
        last = messages[-1]
        if isinstance(last, UserMessage) and str(last.content).startswith("Summarise the conversation"):
            if summaries is not None:
                summaries.append(done[0])
            return render_output({"reasoning_content": "Summing up.", "content": f"Read m1 to m{done[0]}."})
        done[0] += 1
        if done[0] > turns:
            return render_output({"reasoning_content": "Done.", "content": "All read."})
        return render_output({"reasoning_content": "Next.", "tool_calls": [
            {"id": f"c{done[0]}", "function": {"name": "read_file", "arguments": {"path": f"m{done[0]}"}}}]})

    return reply


async def test_each_message_is_checked_scanned_and_encoded_once(monkeypatch: pytest.MonkeyPatch,
                                                               tok: K3Tokenizer) -> None:
    counts: Counter[str] = Counter()

    def counting(name: str, module: Any, attr: str) -> None:
        real = getattr(module, attr)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            counts[name] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(module, attr, wrapper)

    counting("checked", request_module, "_check_message")
    counting("scanned", _codec, "_message_media")
    counting("encoded", _codec, "message_segments")
    engine = ScriptedEngine(small_calls(300), tokenizer=tok, chunk_size=64)
    result = await Agent(instructions="Be careful.", tools=[read_file], engine=engine, max_turns=400).run("Read.")
    assert result.output == "All read." and result.turns == 301
    n = len(result.messages)
    assert n == 2 + 2 * 300 + 1
    # each message of the 301 requests once: not 301 requests x the history (~90,000 each)
    assert counts["checked"] == n - 1  # the last answer is in no request
    assert counts["scanned"] == n - 1
    # a trailing run of tool results stays open (a later result may join it): encoded in its
    # request's tail, then once more when the next message commits it (all but the last one)
    assert counts["encoded"] == n - 1 + 299


async def test_a_3000_turn_run_of_small_calls_compacts_and_completes_inside_the_window(tok: K3Tokenizer) -> None:
    """Before: compaction counted the messages' text only, took their K3 framing (most of a
    small turn) for what cannot shrink, and stopped at ~1,200 turns ("what it must keep ...
    about 86,877 tokens"); the run went on past K3's 131,072-token window."""
    window = 131_072
    summaries: list[int] = []
    engine = ScriptedEngine(small_calls(3000, summaries), tokenizer=tok, chunk_size=256, max_model_len=window)
    agent = Agent(tools=[read_file], engine=engine, max_turns=3100)  # ContextPolicy's window: 131,072
    events = [e async for e in agent.run_stream("Read every module.")]
    final = events[-1]
    assert isinstance(final, FinalEvent)
    result = final.result
    assert (result.stop_reason, result.output, result.turns, result.issues) == ("completed", "All read.", 3001, [])
    compactions = [e for e in events if isinstance(e, CompactionEvent)]
    assert compactions and all(e.stopped is None and e.failed is None for e in compactions)
    assert len(summaries) == len(compactions) >= 2
    prompts = [e.usage.prompt_tokens for e in events if isinstance(e, TurnEndEvent)]
    assert max(prompts) < 0.8 * window + 200  # compaction kept every turn near its threshold
    assert prompts[-1] < 0.8 * window


async def test_the_scripted_engine_enforces_its_window_as_vllm_does(tok: K3Tokenizer) -> None:
    from kimik3 import Client

    engine = ScriptedEngine(small_calls(150), tokenizer=tok, chunk_size=256, max_model_len=2048)
    # a window set to 131,072 tokens: it would never compact; the engine refuses the first prompt
    # over 2,048 tokens as vLLM does, the agent takes the stated window as the run's and compacts
    agent = Agent(tools=[read_file], engine=engine, max_turns=400, context=ContextPolicy(context_window=131_072))
    result = await agent.run("Read every module.")
    assert (result.stop_reason, result.output) == ("completed", "All read.")
    sizes = [len(tok.encode_messages(list(c.messages), c.request.tools)) for c in engine.calls]
    refused = [i for i, n in enumerate(sizes) if n >= 2048]
    assert len(refused) == 1 and sizes[refused[0] - 1] < 2048  # the one before it fitted
    assert max(n for i, n in enumerate(sizes) if i > refused[0]) < 2048  # after it: inside the window
    # the refusal's words are vLLM's, for the refused prompt encoded exactly
    call = engine.calls[refused[0]]
    again = ScriptedEngine(["unused"], tokenizer=tok, max_model_len=2048)
    with pytest.raises(ContextLengthExceededError) as caught:
        await Client(again).chat(list(call.messages), tools=call.request.tools)
    assert caught.value.status_code is None
    assert str(caught.value) == (
        f"This model's maximum context length is 2048 tokens. However, your prompt contains {sizes[refused[0]]} "
        "input tokens, which leaves no room for output tokens. Please reduce the length of the input prompt."
    )


async def test_an_answer_is_cut_where_the_window_ends(tok: K3Tokenizer) -> None:
    """vLLM clamps max_tokens to what the window leaves: the answer ends there, finish "length"."""
    from kimik3 import Client

    long_answer = render_output({"reasoning_content": "word " * 400, "content": "done"})
    for window, cut in ((1_048_576, False), (300, True)):
        completion = await Client(ScriptedEngine([long_answer], tokenizer=tok, max_model_len=window)).chat(
            [{"role": "user", "content": "hi"}])
        prompt = completion.usage.prompt_tokens
        if cut:
            assert (completion.finish_reason, completion.usage.completion_tokens) == ("length", window - prompt)
            assert completion.truncated and completion.message.content == ""  # cut in the reasoning
        else:
            assert (completion.finish_reason, completion.message.content) == ("stop", "done")


async def test_the_agent_plans_for_the_window_the_engine_states(tok: K3Tokenizer) -> None:
    """Issue 41: the default Agent planned for 131,072 tokens whatever the engine served; now
    it takes the engine's window (vLLM's max_model_len, /v1/models) and no request is refused."""
    engine = ScriptedEngine(small_calls(150), tokenizer=tok, chunk_size=256, max_model_len=2048)
    result = await Agent(tools=[read_file], engine=engine, max_turns=400).run("Read every module.")
    assert (result.stop_reason, result.output, result.issues) == ("completed", "All read.", [])
    sizes = [len(tok.encode_messages(list(c.messages), c.request.tools)) for c in engine.calls]
    assert max(sizes) < 2048 and result.summaries >= 2
    turns = [n for n, c in zip(sizes, engine.calls, strict=True)
             if not str(c.messages[-1].content).startswith("Summarise the conversation")]
    assert max(turns) < 0.8 * 2048 + 120  # each turn's request near or under the threshold
