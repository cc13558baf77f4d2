"""Compaction at K3's real context windows (131,072 / 196,608 / 1,048,576 tokens) counted with
the exact tokenizer (K3's real 163,584-rank vocabulary), on a scripted run (issue 18, item 4;
bench/long.py grows a session to 1M tokens)."""

from __future__ import annotations

import pytest

from kimik3 import Agent, ContextPolicy, K3Tokenizer, ScriptedEngine, tool
from kimik3.agents import CompactionEvent, FinalEvent, TurnEndEvent
from kimik3.formats.k3 import default_tokenizer, render_output
from kimik3.types import Message, UserMessage


@pytest.fixture(scope="module")
def real_tokenizer() -> K3Tokenizer:
    """K3's real vocabulary (the package's, kimik3/formats/k3/vocab)."""
    return default_tokenizer()


def source(n: int, lines: int) -> str:
    return "".join(f"    def handler_{n}_{i}(self, request):\n        return self.render(request, 'p_{n}_{i}.html')\n"
                   for i in range(lines))  # fmt: skip


def test_the_real_vocabulary_is_k3s(real_tokenizer: K3Tokenizer) -> None:
    tok = real_tokenizer
    assert tok.num_base_tokens == 163_584 and tok.vocab_size == 163_840
    assert tok.end_of_msg_id == 163_586
    assert tok.encode_text("Hello world") == [19180, 2695]


@pytest.mark.parametrize("window", [131_072, 196_608, 1_048_576])
async def test_compaction_fires_at_the_exact_token_count_of_k3s_real_windows(real_tokenizer: K3Tokenizer, window: int) -> None:
    tok = real_tokenizer
    lines = max(8, window // 12 // 22)  # ~1/12 of the window per tool result

    @tool
    def read_file(path: str) -> str:
        """Read a file.

        Args:
            path: the file.
        """
        return source(int(path.split("_")[1]), lines)

    reads: list[int] = []

    def reply(messages: list[Message]) -> str:
        last = messages[-1]
        if isinstance(last, UserMessage) and str(last.content).startswith("Summarise the conversation"):
            return render_output({"reasoning_content": "Summing up.", "content": "Read the handler modules."})
        if len(reads) >= 16:
            return render_output({"reasoning_content": "Done.", "content": "No bug found."})
        reads.append(len(reads))
        return render_output({"reasoning_content": "Read the next module.",
                              "tool_calls": [{"id": f"c{len(reads)}", "function": {"name": "read_file",
                                              "arguments": {"path": f"mod_{len(reads)}"}}}]})  # fmt: skip

    engine = ScriptedEngine(reply, tokenizer=tok, chunk_size=256)
    policy = ContextPolicy(context_window=window, compact_at=0.8, keep_recent_turns=2,
                           max_result_chars=10**9)  # fmt: skip
    agent = Agent(tools=[read_file], engine=engine, context=policy, max_turns=40)
    events = [e async for e in agent.run_stream("Find the bug.")]
    final = events[-1]
    assert isinstance(final, FinalEvent) and final.result.output == "No bug found."
    first = next(i for i, e in enumerate(events) if isinstance(e, CompactionEvent))
    ends = [e for e in events[:first] if isinstance(e, TurnEndEvent)]
    threshold = 0.8 * window
    # every model call before the compaction had a prompt under the threshold ...
    assert all(e.usage.prompt_tokens < threshold for e in ends)
    # ... and the compaction request (the whole history, then the request) is past it, inside
    # the window, and counted exactly: the engine's count is the real tokenizer's
    request = next(c for c in engine.calls if str(c.messages[-1].content).startswith("Summarise"))
    exact = len(tok.encode_messages(list(request.messages), request.request.tools, tool_choice="none"))
    assert threshold <= exact < window
    # the agent decided on its own count of the context: the last call's prompt + completion +
    # the new tool result's text, a few framing tokens short of the exact prompt
    last = ends[-1].usage
    result_tokens = len(tok.encode_text(source(len(ends), lines)))
    context = last.prompt_tokens + last.completion_tokens + result_tokens
    history = len(tok.encode_messages(list(request.messages[:-1]), request.request.tools))
    assert context >= threshold and 0 <= history - context < 32
    # one turn earlier the context was under the threshold: the first possible moment
    assert ends[-2].usage.prompt_tokens + ends[-2].usage.completion_tokens + result_tokens < threshold
    after = [e for e in events[first:] if isinstance(e, TurnEndEvent)]
    assert after and after[0].usage.prompt_tokens < 4 * result_tokens  # summary + the 2 recent turns
