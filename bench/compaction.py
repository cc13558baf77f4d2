"""Benchmark what issue 41 added to the Agent loop, in CPU time (``process_time``: the scripted
engine, K3 parsing and encoding, the tool and the agent are all kimik3's work).

(a) a summary that always fails: one run of TURNS turns (default 1,500) with ScriptedEngine on
    K3's real vocabulary in a 16,384-token window, one small tool call a turn, every compaction
    summary answered with reasoning only (unusable). Prints the summary requests (before issue
    41: one pair per turn once due, 80 in 193 turns, then ContextLengthExceededError), the
    compactions, cleared results and dropped messages, the largest request against the window,
    and the CPU of a late turn (median of the last 40) against an early one (median of turns
    20-60) of the SAME run.
(b) the loop breaker's cost per call: the same 300-turn run of distinct calls with the breaker
    and with it replaced by a no-op (interleaved ABBA, REPEATS times); the ratio of the two runs'
    CPU per call, same repeat (min / median / max), and the breaker's own CPU per call
    (``screen`` + ``answered`` + ``trim``, as the agent calls it for a lone call) measured alone, as a
    share of the agent's CPU per call.

Run: .venv/bin/python bench/compaction.py [--turns 1500] [--repeats 5]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kimik3 import Agent, ScriptedEngine, tool  # noqa: E402
from kimik3.agents import Budgets, CompactionEvent, FinalEvent, TurnEndEvent  # noqa: E402
from kimik3.agents import _run as run_module  # noqa: E402
from kimik3.agents._loops import LoopBreaker  # noqa: E402
from kimik3.formats.k3 import K3Tokenizer, default_tokenizer, render_output  # noqa: E402
from kimik3.tools import ToolResult, default_failure_text  # noqa: E402
from kimik3.types import FunctionCall, Message, ToolCall, UserMessage  # noqa: E402

WINDOW = 16_384


@tool
def read_file(path: str) -> str:
    """Read a file.

    Args:
        path: the file.
    """
    return f"# {path}\n" + "".join(f"line {i}: value_{i} = {i * 7}\n" for i in range(12))


def script(turns: int) -> Any:
    done = [0]

    def reply(messages: list[Message]) -> str:
        last = messages[-1]
        if isinstance(last, UserMessage) and str(last.content).startswith(("Summarise the conversation", "Your summary")):
            return render_output({"reasoning_content": "Let me think about what to write first."})  # unusable
        done[0] += 1
        if done[0] > turns:
            return render_output({"reasoning_content": "Done.", "content": "All read."})
        return render_output({"reasoning_content": "Next.", "tool_calls": [
            {"id": f"c{done[0]}", "function": {"name": "read_file", "arguments": {"path": f"m{done[0]}.py"}}}]})

    return reply


async def failing_summary(tok: K3Tokenizer, turns: int) -> None:
    engine = ScriptedEngine(script(turns), tokenizer=tok, chunk_size=256, max_model_len=WINDOW)
    agent = Agent(tools=[read_file], engine=engine, budgets=Budgets(turns=turns + 10))
    cpu: list[float] = []
    compactions = 0
    result = None
    last = time.process_time()
    async for event in agent.run_stream("Read every module."):
        if isinstance(event, TurnEndEvent):
            now = time.process_time()
            cpu.append(now - last)
            last = now
        elif isinstance(event, CompactionEvent):
            compactions += 1
        elif isinstance(event, FinalEvent):
            result = event.result
    assert result is not None
    biggest = max(len(tok.encode_messages(list(c.messages), c.request.tools)) for c in engine.calls[-200:])
    early = statistics.median(cpu[20:60])
    late = statistics.median(cpu[-40:])
    print(f"(a) {result.turns:,} turns, stop_reason {result.stop_reason}, {len(result.issues)} issues")
    print(f"    summary requests {result.summaries} (all failed), compactions {compactions}, cleared results "
          f"{result.cleared_results:,}, dropped messages {result.dropped_messages:,}")
    print(f"    largest request of the last 200: {biggest:,} tokens of the {WINDOW:,}-token window")
    print(f"    CPU per turn: early (turns 20-60) {early * 1e3:.2f} ms, late (last 40) {late * 1e3:.2f} ms, "
          f"late/early {late / early:.2f}x")


class NoBreaker(LoopBreaker):
    """The breaker's interface doing nothing (the baseline of (b))."""

    def screen(self, calls: Any, text: Any) -> Any:  # every call runs, no key made, nothing recorded
        return [(i, "run", None) for i in range(len(calls))], [None] * len(calls), None

    def answered(self, step: Any, result: ToolResult) -> ToolResult:
        return result

    def trim(self) -> None:
        return None


async def one_run(tok: K3Tokenizer, turns: int) -> float:
    engine = ScriptedEngine(script(turns), tokenizer=tok, chunk_size=256)
    agent = Agent(tools=[read_file], engine=engine, budgets=Budgets(turns=turns + 10))
    start = time.process_time()
    result = await agent.run("Read every module.")
    assert result.stop_reason == "completed", result.stop_reason
    return (time.process_time() - start) / turns


async def breaker_cost(tok: K3Tokenizer, repeats: int) -> None:
    ratios, per_call = [], []
    for i in range(repeats):
        order = (True, False) if i % 2 == 0 else (False, True)  # ABBA: drift cancels out
        got = {}
        for breaker_on in order:
            if not breaker_on:
                run_module.LoopBreaker = NoBreaker  # type: ignore[misc]
            try:
                got[breaker_on] = await one_run(tok, 300)
            finally:
                run_module.LoopBreaker = LoopBreaker  # type: ignore[misc]
        ratios.append(got[True] / got[False])
        per_call.append(got[True])
    breaker = LoopBreaker(Budgets())
    calls = [ToolCall(id=str(i), function=FunctionCall(name="read_file", arguments=f'{{"path": "m{i % 7}.py"}}'))
             for i in range(20_000)]
    results = [ToolResult(content=f"text {i}") for i in range(20_000)]
    start = time.process_time()
    for c, r in zip(calls, results, strict=True):  # what the agent calls for a lone call a turn
        steps, _, _ = breaker.screen([c], default_failure_text)
        breaker.answered(steps[0], r)
        breaker.trim()
    alone = (time.process_time() - start) / len(calls)
    print(f"(b) CPU per call, agent with the loop breaker / without (same repeat), {repeats} repeats: "
          f"min {min(ratios):.3f}x, median {statistics.median(ratios):.3f}x, max {max(ratios):.3f}x")
    print(f"    the breaker alone (screen + answered + trim): {alone * 1e6:.1f} us a call, "
          f"{alone / statistics.median(per_call):.2%} of the agent's CPU per call ({statistics.median(per_call) * 1e3:.2f} ms)")


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=1500)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    logging.getLogger("kimik3").setLevel(logging.ERROR)  # each compaction without a summary warns
    tok = default_tokenizer()
    await failing_summary(tok, args.turns)
    await breaker_cost(tok, args.repeats)


if __name__ == "__main__":
    anyio.run(main)
