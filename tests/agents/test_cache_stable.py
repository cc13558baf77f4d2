"""Cache-stable history (issue 18, item 1) measured on the prompts a ScriptedEngine rendered:
a 100-turn coding run with compactions, results truncated once and for all, and the 24-turn
screenshot run of tests/tools/test_ui_pruning.py seen through prefix_stats."""

from __future__ import annotations

from kimik3 import Agent, ContextPolicy, ScriptedEngine, tool
from kimik3.agents import CompactionEvent, FinalEvent, prefix_stats
from kimik3.types import Message, ToolMessage, UserMessage

from .test_agent import answer, calls

FILE = "".join(f"line {i}: def handler_{i}(request): return render(request, 'page_{i}.html')\n" for i in range(28))


@tool
def read_file(path: str) -> str:
    """Read a file of the workspace.

    Args:
        path: the file.
    """
    return f"# {path}\n{FILE}"


def coding_script(turns: int) -> tuple[ScriptedEngine, list[int]]:
    """A coding run: one read per turn, then an answer; compaction requests get a summary."""
    compactions: list[int] = []
    reads: list[int] = []

    def reply(messages: list[Message]) -> str:
        last = messages[-1]
        if isinstance(last, UserMessage) and str(last.content).startswith("Summarise the conversation"):
            compactions.append(len(messages))
            return answer(f"Summary {len(compactions)}: read the handlers so far; none is broken yet.")
        done = len(reads)  # compaction removes tool messages: count the calls made
        if done >= turns - 1:
            return answer("handler_7 is the broken one.")
        reads.append(done)
        return calls(("read_file", {"path": f"src/views_{done}.py"}), reasoning=f"Read file {done} next.")

    return ScriptedEngine(reply), compactions


async def test_a_100_turn_coding_run_with_compaction_extends_the_previous_prompt_90_percent() -> None:
    engine, compactions = coding_script(100)
    policy = ContextPolicy(context_window=16_384, compact_at=0.8, keep_recent_turns=4)
    agent = Agent(instructions="You fix bugs.", tools=[read_file], engine=engine, context=policy, max_turns=200)
    events = [e async for e in agent.run_stream("Find the broken handler.")]
    final = events[-1]
    assert isinstance(final, FinalEvent) and final.result.output == "handler_7 is the broken one."
    assert final.result.turns == 100
    n_compactions = sum(isinstance(e, CompactionEvent) for e in events)
    assert n_compactions == len(compactions) == 5
    stats = prefix_stats([c.prompt for c in engine.calls])
    assert stats.prompts == 105  # 100 turns + 5 compaction requests
    # each compaction request extends the prompt before it (the whole history, then the
    # request); only the first prompt after each compaction starts over
    assert stats.extends == 104 - 5
    assert stats.extend_rate >= 0.90
    breaks = [i + 1 for i, (a, b) in enumerate(zip(engine.calls, engine.calls[1:], strict=False))
              if not b.prompt.startswith(a.prompt.removesuffix('<|open|>message role="assistant"<|sep|><|open|>think<|sep|>'))]  # fmt: skip
    requests = [i for i, c in enumerate(engine.calls) if str(c.messages[-1].content).startswith("Summarise")]
    assert breaks == [i + 1 for i in requests]


async def test_a_result_truncated_once_stays_truncated_the_same_way() -> None:
    engine, _ = coding_script(12)
    agent = Agent(tools=[read_file], engine=engine, context=ContextPolicy(max_result_chars=300))
    result = await agent.run("Find the broken handler.")
    first = next(m for m in result.messages if isinstance(m, ToolMessage))
    assert isinstance(first.content, str) and len(first.content) <= 300 and "characters elided]" in first.content
    # every later prompt carries that result byte for byte, and every prompt extends the previous
    assert all(first.content in c.prompt for c in engine.calls[2:])
    stats = prefix_stats([c.prompt for c in engine.calls])
    assert (stats.prompts, stats.extends) == (12, 11)


def test_prefix_stats_on_text_and_ids() -> None:
    g = '<|open|>message role="assistant"<|sep|><|open|>think<|sep|>'
    s = prefix_stats(["A" + g, "A" + g + "x" + g, "B" + g])
    assert (s.prompts, s.extends, s.total) == (3, 1, 4 * len(g) + 4)
    assert s.shared == len("A" + g) + 0 and s.extend_rate == 0.5
    ids = prefix_stats([[1, 2], [1, 2, 3], [1, 9, 3, 4]])
    assert (ids.extends, ids.shared, ids.total) == (1, 2 + 1, 9)
    assert round(ids.shared_rate, 4) == round(3 / 9, 4)
    assert prefix_stats([]).extend_rate == 1.0
