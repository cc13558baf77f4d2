"""Benchmark the cost of kimik3's OpenTelemetry spans on the Agent loop (issue 19, item 2).

The same 100-turn scripted run (one tool call a turn, real K3 parsing) three ways, interleaved
and repeated, CPU times (``process_time``: single-process work) as ratios to the first's run of
the same repeat (min / median / max):
  (a) no tracer provider configured (the API's no-op spans: what every user gets by default),
  (b) the SDK recording every span into an in-memory exporter,
  (c) (b) with message content captured.

Run: .venv/bin/python bench/tracing.py
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

from kimik3 import Agent, Budgets, ScriptedEngine, _tracing, tool  # noqa: E402
from kimik3.formats.k3 import render_output  # noqa: E402

TURNS = 100
# distinct calls (id and path): the same call repeated is a loop the agent stops (issue 41)
CALLS = [render_output({"reasoning_content": "Read the next file. " * 10, "content": "",
                        "tool_calls": [{"id": f"c{i}", "function": {"name": "read_file", "arguments": {"path": f"m{i}.py"}}}]})
         for i in range(TURNS)]  # fmt: skip
FINAL = render_output({"reasoning_content": "done", "content": "All read."})


@tool
def read_file(path: str) -> str:
    """Read a file."""
    return "def f():\n    return 1\n" * 20


async def one_run() -> float:
    engine = ScriptedEngine([*CALLS, FINAL], chunk_size=64)
    agent = Agent(tools=[read_file], engine=engine, budgets=Budgets(turns=TURNS + 5))
    start = time.process_time()  # CPU of this process (all its threads): single-process work
    result = await agent.run("Read every file.")
    assert result.turns == TURNS + 1, result.turns  # every call ran: the run measured is the whole run
    return time.process_time() - start


class Switch:
    """Routes the global tracer provider to the no-op one or to the SDK (set once, switched here)."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.sdk = TracerProvider()
        self.sdk.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.noop = trace.NoOpTracerProvider()
        self.current: Any = self.noop

    def get_tracer(self, *args: Any, **kwargs: Any) -> Any:
        return self.current.get_tracer(*args, **kwargs)


async def main() -> None:
    switch = Switch()
    trace.set_tracer_provider(switch)  # type: ignore[arg-type]
    modes = {"no provider (no-op spans)": (switch.noop, False), "SDK, in-memory exporter": (switch.sdk, False),
             "SDK + content capture": (switch.sdk, True)}
    times: dict[str, list[float]] = {name: [] for name in modes}
    await one_run()  # warm-up
    for _ in range(5):
        for name, (provider, capture) in modes.items():
            switch.current = provider
            _tracing.set_capture_content(capture)
            switch.exporter.clear()
            times[name].append(await one_run())
            if provider is switch.sdk:
                assert len(switch.exporter.get_finished_spans()) == 2 * TURNS + 2
    base = times["no provider (no-op spans)"]
    print(f"{TURNS}-turn scripted run, CPU, 5 interleaved repeats; baseline median {statistics.median(base) * 1000:.1f} ms")
    for name, values in times.items():
        ratios = sorted(v / b for v, b in zip(values, base, strict=True))  # same repeat
        print(f"  {name:28s} {ratios[0]:5.2f} / {statistics.median(ratios):5.2f} / {ratios[-1]:5.2f}x "
              "(min / median / max of the same repeat's ratios)")


if __name__ == "__main__":
    anyio.run(main)
