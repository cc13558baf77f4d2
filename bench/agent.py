"""Benchmark the Agent loop's own work (issues 30 and 44), in CPU time (``process_time``: the
scripted engine, K3 parsing and encoding, the tool and the agent are all kimik3's work).

(a) flat per-turn cost: one run of 1,520 turns with ScriptedEngine on K3's real vocabulary, one
    sync tool call a turn, in a 32,768-token window, so the run compacts (the script answers the
    summary requests) as a real long run does; the CPU of a turn around turn 1,500 (median of
    turns 1,480-1,520) against a turn at 20-40 turns of history (median of those) of the SAME run
    (goal <= 1.3x); then the same run with ``gc.disable()`` (interleaved), which separates
    kimik3's own per-turn work from the cyclic collector's passes over a heap that grows.
(b) the Agent's CPU per model call against a minimal hand-written loop over the same primitives
    (goal <= 2x, issue 44), both 40-turn runs of the same script, interleaved. The baseline,
    written out in :func:`minimal_run`: ``PromptEncoder.encode`` of the history, the script's
    text, ``StreamParser`` fed 64-character chunks, the parsed message appended, ``FunctionTool.run``
    for each call, its ``ToolMessage`` appended. Nothing else: no Client, engine, events, session,
    budgets, usage or tracing. The Agent runs the same script through ``ScriptedEngine`` (also
    64-character chunks).
(c) 200 concurrent agents in one process (each 10 turns): wall time against 200 x one agent alone
    measured in the same run (< 1 means concurrency overlaps the awaits; wall time, as it measures
    overlap).

Each figure is min / median / max of REPEATS repeats ((b): at least 7).

``--instructions`` runs only (b), then counts it in instructions as well, which a loaded machine
does not change: the process runs again under ``valgrind --tool=callgrind`` (needs valgrind and a
CPython whose symbols it can see); after the same warm-up one 40-turn Agent run is entered through
``functools.reduce`` and one minimal run through ``operator.call``, and callgrind counts only
inside those two C functions (``--toggle-collect``). Only the event loop's thread is counted: the
sync tool's body runs in a worker thread in both loops alike.

Run: .venv/bin/python bench/agent.py [--turns 1520] [--repeats 3] [--instructions]
"""

from __future__ import annotations

import argparse
import functools
import gc
import itertools
import operator
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kimik3 import Agent, Budgets, ContextPolicy, ScriptedEngine, tool  # noqa: E402
from kimik3.agents import CompactionEvent, FinalEvent, TurnEndEvent  # noqa: E402
from kimik3.formats.k3 import K3Tokenizer, PromptEncoder, StreamParser, default_tokenizer, render_output  # noqa: E402
from kimik3.types import AssistantMessage, FunctionCall, Message, ToolCall, ToolMessage, UserMessage  # noqa: E402

REASONING = "I should read the next file and check the function it defines before editing anything."
WINDOW = 32_768  # (a) compacts about every 400 turns, as a long run in a small window does
CHUNK = 64  # characters a streamed chunk, for the Agent's engine and the minimal loop alike


@tool
def read_file(path: str) -> str:
    """Read a file.

    Args:
        path: the file.
    """
    return f"def function(value):\n    return value + {len(path)}\n"


def make_script(turns: int) -> Any:
    final = render_output({"reasoning_content": "done", "content": "All files read."})
    summary = render_output({"reasoning_content": "sum up", "content": "Read src/m1.py onwards; all as expected."})
    made = [0]

    def script(messages: list[Message]) -> str:
        last = messages[-1]
        if isinstance(last, UserMessage) and str(last.content).startswith("Summarise the conversation"):
            return summary
        made[0] += 1
        if made[0] > turns:
            return final
        return render_output({"reasoning_content": REASONING, "content": "", "tool_calls": [
            {"id": f"c{made[0]}", "function": {"name": "read_file", "arguments": {"path": f"src/m{made[0]}.py"}}}]})

    return script


def engine(turns: int, tok: K3Tokenizer) -> ScriptedEngine:
    return ScriptedEngine(make_script(turns), chunk_size=CHUNK, tokenizer=tok, max_model_len=WINDOW)


async def agent_run(turns: int, tok: K3Tokenizer, stamps: list[float] | None = None) -> None:
    agent = Agent(tools=[read_file], engine=engine(turns, tok), budgets=Budgets(turns=turns + 5),
                  context=ContextPolicy(context_window=WINDOW))
    compactions, stop = 0, None
    async for event in agent.run_stream("Read every file."):
        if stamps is not None and isinstance(event, TurnEndEvent):
            stamps.append(time.process_time())
        compactions += isinstance(event, CompactionEvent)
        if isinstance(event, FinalEvent):
            stop = event.result.stop_reason
    if stop != "completed":
        raise SystemExit(f"the benchmarked run did not complete: {stop}")
    if stamps is not None and turns > 400 and not compactions:
        raise SystemExit("the long run never compacted: (a) would not measure a long run in a window")


async def minimal_run(turns: int, tok: K3Tokenizer) -> None:
    """The baseline of (b): the loop a user would write by hand over kimik3's primitives."""
    script = make_script(turns)
    encoder = PromptEncoder(tok, [read_file.spec])
    messages: list[Message] = [UserMessage(content="Read every file.")]
    while True:
        encoder.encode(messages)  # the prompt ids an engine would be sent
        text = script(messages)
        parser = StreamParser()
        for i in range(0, len(text), CHUNK):
            parser.feed(text[i : i + CHUNK])
        parser.finish("stop")
        out = parser.result()
        calls = [ToolCall(id=c.id, function=FunctionCall(name=c.name, arguments=c.arguments_json)) for c in out.tool_calls]
        messages.append(AssistantMessage(content=out.content, reasoning_content=out.reasoning_content,
                                         tool_calls=calls or None))
        if not calls:
            return
        for call in calls:
            result = await read_file.run(call.function.arguments)
            messages.append(ToolMessage(tool_call_id=call.id, content=result.text))


def spread(xs: list[float], scale: float = 1.0, unit: str = "") -> str:
    return f"{min(xs) * scale:.2f} / {statistics.median(xs) * scale:.2f} / {max(xs) * scale:.2f}{unit}"


def counted_child() -> None:
    """Under callgrind: warm up, then one Agent run inside ``functools.reduce`` and one minimal
    run inside ``operator.call`` (the two C functions callgrind counts in)."""
    tok = default_tokenizer()

    async def warm() -> None:
        await agent_run(5, tok)
        await minimal_run(5, tok)

    anyio.run(warm)
    functools.reduce(lambda _a, _b: anyio.run(agent_run, 40, tok), [0, 0])
    operator.call(lambda: anyio.run(minimal_run, 40, tok))


def instructions() -> None:
    """(b) in instructions: this script's :func:`counted_child` under callgrind."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_annotate") is None:
        raise SystemExit("--instructions needs valgrind (apt-get install valgrind)")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp, "callgrind.out")
        subprocess.run(["valgrind", "--tool=callgrind", "--collect-atstart=no", "--toggle-collect=functools_reduce",
                        "--toggle-collect=_operator_call", f"--callgrind-out-file={out}", sys.executable,
                        __file__, "--counted-child"], check=True, capture_output=True,
                       env={**os.environ, "PYTHONHASHSEED": "0"})
        report = subprocess.run(["callgrind_annotate", "--inclusive=yes", str(out)], check=True, capture_output=True,
                                text=True).stdout
    counts = {}
    for name in ("functools_reduce", "_operator_call"):
        hit = re.search(rf"^\s*([\d,]+) .*:{name} \[", report, re.MULTILINE)
        if hit is None:
            raise SystemExit(f"callgrind saw no {name}: is CPython's symbol table stripped?")
        counts[name] = int(hit.group(1).replace(",", "")) / 41
    agent, minimal = counts["functools_reduce"], counts["_operator_call"]
    print(f"    instructions per model call (callgrind, one 40-turn run each): Agent {agent / 1e6:.2f} M, minimal loop "
          f"{minimal / 1e6:.2f} M; Agent / minimal loop {agent / minimal:.2f}x  (goal <= 2x)")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=1520)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--instructions", action="store_true", help="only (b), in CPU time and in instructions")
    args = parser.parse_args()
    tok = default_tokenizer()
    if args.instructions:
        await part_b(tok, args.repeats)
        instructions()
        return
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

    await part_b(tok, args.repeats)

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


async def part_b(tok: K3Tokenizer, repeats: int) -> None:
    """(b): the Agent's CPU per model call against :func:`minimal_run`'s, interleaved."""
    calls = 41  # 40 tool calls and the answer
    agent_cpu, minimal_cpu, overhead = [], [], []
    await agent_run(5, tok)  # warm both paths (imports, caches) before measuring
    await minimal_run(5, tok)
    for _ in range(max(repeats, 7)):
        for name, run in (("agent", agent_run), ("minimal", minimal_run)):
            cpu = time.process_time()
            await run(40, tok)
            (agent_cpu if name == "agent" else minimal_cpu).append((time.process_time() - cpu) / calls)
        overhead.append(agent_cpu[-1] / minimal_cpu[-1])
    print(f"(b) CPU per model call, 40-turn runs interleaved: Agent {spread(agent_cpu, 1e3, ' ms')}, "
          f"minimal loop {spread(minimal_cpu, 1e3, ' ms')}")
    print(f"    Agent / minimal loop {spread(overhead, unit='x')}  (goal <= 2x)")


if __name__ == "__main__":
    if sys.argv[1:] == ["--counted-child"]:
        counted_child()
    else:
        anyio.run(main)
