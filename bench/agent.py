"""Benchmark the Agent loop's own work (issue 30, item 1), in CPU time (``process_time``: the
scripted engine, K3 parsing and encoding, the tool and the agent are all kimik3's work).

(a) flat per-turn cost: one run of 1,520 turns with ScriptedEngine on K3's real vocabulary, one
    sync tool call a turn; the CPU of a turn around turn 1,500 (median of turns 1,480-1,520)
    against a turn at 20-40 turns of history (median of those) of the SAME run (goal <= 1.3x);
    then the same run with ``gc.disable()`` (interleaved), which separates kimik3's own per-turn
    work from the cyclic collector's passes over a heap that grows with the history.
(b) the Agent's own CPU per model call against a minimal loop over the same primitives
    (``Client.chat`` with a ``PromptCache``, ``FunctionTool.run``, appending the messages), both
    40-turn runs, interleaved (goal <= 2x).
(c) 200 concurrent agents in one process (each 10 turns): wall time against 200 x one agent alone
    measured in the same run (< 1 means concurrency overlaps the awaits; wall time, as it measures
    overlap).

Each figure is min / median / max of REPEATS repeats.

Run: .venv/bin/python bench/agent.py [--turns 1520] [--repeats 3]
"""

from __future__ import annotations

import argparse
import gc
import itertools
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kimik3 import Agent, Budgets, Client, ContextPolicy, ScriptedEngine, tool  # noqa: E402
from kimik3.agents import TurnEndEvent  # noqa: E402
from kimik3.formats.k3 import K3Tokenizer, PromptCache, default_tokenizer, render_output  # noqa: E402
from kimik3.types import Message, ToolMessage, UserMessage  # noqa: E402

REASONING = "I should read the next file and check the function it defines before editing anything."
WINDOW = 10**9  # no window: this measures growth, not compaction


@tool
def read_file(path: str) -> str:
    """Read a file.

    Args:
        path: the file.
    """
    return f"def function(value):\n    return value + {len(path)}\n"


def make_script(turns: int) -> Any:
    final = render_output({"reasoning_content": "done", "content": "All files read."})
    made = [0]

    def script(messages: list[Message]) -> str:
        made[0] += 1
        if made[0] > turns:
            return final
        return render_output({"reasoning_content": REASONING, "content": "", "tool_calls": [
            {"id": f"c{made[0]}", "function": {"name": "read_file", "arguments": {"path": f"src/m{made[0]}.py"}}}]})

    return script


def engine(turns: int, tok: K3Tokenizer) -> ScriptedEngine:
    return ScriptedEngine(make_script(turns), chunk_size=64, tokenizer=tok, max_model_len=WINDOW)


async def agent_run(turns: int, tok: K3Tokenizer, stamps: list[float] | None = None) -> None:
    agent = Agent(tools=[read_file], engine=engine(turns, tok), budgets=Budgets(turns=turns + 5),
                  context=ContextPolicy(context_window=WINDOW))
    async for event in agent.run_stream("Read every file."):
        if stamps is not None and isinstance(event, TurnEndEvent):
            stamps.append(time.process_time())


async def minimal_run(turns: int, tok: K3Tokenizer) -> None:
    client = Client(engine(turns, tok))
    cache = PromptCache()
    messages: list[Message] = [UserMessage(content="Read every file.")]
    while True:
        completion = await client.chat(messages, tools=[read_file], prompt_cache=cache)
        messages.append(completion.message)
        if not completion.message.tool_calls:
            return
        for call in completion.message.tool_calls:
            result = await read_file.run(call.function.arguments)
            messages.append(ToolMessage(tool_call_id=call.id, content=result.text))


def spread(xs: list[float], scale: float = 1.0, unit: str = "") -> str:
    return f"{min(xs) * scale:.2f} / {statistics.median(xs) * scale:.2f} / {max(xs) * scale:.2f}{unit}"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=1520)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    tok = default_tokenizer()
    late = args.turns - 40

    print(f"(a) CPU per turn, one run of {args.turns} turns (min / median / max of {args.repeats} runs)")
    early_ms, late_ms, ratios, gc_off = [], [], [], []
    for _ in range(args.repeats):
        for collect in (True, False):  # interleaved: with Python's GC, then without (kimik3's own work)
            gc.collect()
            if not collect:
                gc.disable()
            stamps = [time.process_time()]
            try:
                await agent_run(args.turns, tok, stamps)
            finally:
                gc.enable()
            turns = [b - a for a, b in itertools.pairwise(stamps)]
            early, grown = statistics.median(turns[20:40]), statistics.median(turns[late:late + 40])
            if collect:
                early_ms.append(early)
                late_ms.append(grown)
                ratios.append(grown / early)
            else:
                gc_off.append(grown / early)
    print(f"    turns 20-40: {spread(early_ms, 1e3, ' ms')}; turns {late}-{late + 40}: {spread(late_ms, 1e3, ' ms')}")
    print(f"    ratio {spread(ratios, unit='x')}  (goal <= 1.3x); with gc.disable() during the run (the "
          f"collector's passes over a larger heap taken out): {spread(gc_off, unit='x')}")

    calls = 41  # 40 tool calls and the answer
    agent_cpu, minimal_cpu, overhead = [], [], []
    for _ in range(max(args.repeats, 5)):
        for name, run in (("agent", agent_run), ("minimal", minimal_run)):
            cpu = time.process_time()
            await run(40, tok)
            (agent_cpu if name == "agent" else minimal_cpu).append((time.process_time() - cpu) / calls)
        overhead.append(agent_cpu[-1] / minimal_cpu[-1])
    print(f"(b) CPU per model call, 40-turn runs interleaved: Agent {spread(agent_cpu, 1e3, ' ms')}, "
          f"minimal loop {spread(minimal_cpu, 1e3, ' ms')}")
    print(f"    Agent / minimal loop {spread(overhead, unit='x')}  (goal <= 2x)")

    n, ratios = 200, []
    for _ in range(args.repeats):
        one = []
        for _ in range(5):
            t0 = time.perf_counter()
            await agent_run(10, tok)
            one.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for _ in range(n):
                tg.start_soon(agent_run, 10, tok)
        ratios.append((time.perf_counter() - t0) / (n * statistics.median(one)))
    print(f"(c) {n} concurrent agents x 10 turns, wall against {n} x one alone: {spread(ratios, unit='x')}")


if __name__ == "__main__":
    anyio.run(main)
