"""Benchmark the Agent loop's own overhead (issue: The Agent, item 4).

(a) kimik3's time per turn with ScriptedEngine (real K3 parsing, incremental K3 encoding, tool
    execution, session-free) at 10, 100 and 1,000 turns of history, as ratios to the time per
    turn at 10 turns (goal: flat beyond the incremental encoding cost).
(b) 500 concurrent agents in one process (each 10 turns), as a ratio of wall time to 500 x one
    agent alone measured in the same run (< 1 means concurrency overlaps the awaits).

Run: .venv/bin/python bench/agent.py
"""

from __future__ import annotations

import itertools
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from encode import tokenizer  # noqa: E402

from kimik3 import Agent, Budgets, ContextPolicy, ScriptedEngine, tool  # noqa: E402
from kimik3.agents import TurnEndEvent  # noqa: E402
from kimik3.formats.k3 import render_output  # noqa: E402
from kimik3.types import Message  # noqa: E402

REASONING = "I should read the next file and check the function it defines before editing anything. " * 3
RESULT = "\n".join(f"{i:6d}\tdef function_{i}(value):\n        return value + {i}" for i in range(40))


@tool
def read_file(path: str) -> str:
    """Read a file."""
    return RESULT


def make_script(turns: int) -> Any:
    call = render_output(
        {"reasoning_content": REASONING, "content": "", "tool_calls": [{"id": "x", "function": {"name": "read_file", "arguments": {"path": "src/module.py"}}}]}
    )
    final = render_output({"reasoning_content": "done", "content": "All files read."})

    calls_made = 0

    def script(messages: list[Message]) -> str:
        nonlocal calls_made
        calls_made += 1
        return call if calls_made <= turns else final

    return script


async def timed_run(turns: int, tok: Any) -> list[float]:
    engine = ScriptedEngine(make_script(turns), chunk_size=64, tokenizer=tok)
    agent = Agent(
        tools=[read_file],
        engine=engine,
        budgets=Budgets(turns=turns + 5),
        context=ContextPolicy(context_window=10**9),
    )
    stamps = [time.perf_counter()]
    async for event in agent.run_stream("Read every file."):
        if isinstance(event, TurnEndEvent):
            stamps.append(time.perf_counter())
    return [b - a for a, b in itertools.pairwise(stamps)]


async def main() -> None:
    tok, vocab = tokenizer()
    print(f"vocabulary: {vocab}")
    durations = await timed_run(1000, tok)

    def at(k: int) -> float:
        window = durations[max(0, k - 10) : k + 10]
        return statistics.median(window)

    base = at(10)
    print("(a) time per turn (median of 20 turns around each point)")
    for k in (10, 100, 1000):
        print(f"    at {k:5d} turns of history: {at(k) * 1e3:7.3f} ms   ratio to 10 turns: {at(k) / base:5.2f}x")

    one = []
    for _ in range(9):
        t0 = time.perf_counter()
        await timed_run(10, tok)
        one.append(time.perf_counter() - t0)
    single = statistics.median(one)
    t0 = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(500):
            tg.start_soon(timed_run, 10, tok)
    many = time.perf_counter() - t0
    print(f"(b) 500 concurrent agents x 10 turns: {many:6.2f} s; one agent alone {single * 1e3:6.1f} ms; "
          f"ratio to 500 x alone: {many / (500 * single):4.2f}x; {5000 / many:,.0f} turns/s")


if __name__ == "__main__":
    anyio.run(main)
