"""Prefix-cache stability of kimik3's history policy against a naive one (issue 18, items 1-2).

Two policies, same runs:

- **kimik3**: the Agent as shipped: the history only grows; screenshots drop in batches
  (``ContextPolicy(max_images=3)``, slack 3), results are truncated once when they arrive,
  compaction is batched and its request extends the previous prompt.
- **naive**: prunes every turn: screenshots with ``image_slack=0``; for text, every tool result
  but the last 3 is replaced by a note after every turn (a sliding window, what a naive agent
  does to keep its context small).

Part A (offline, ScriptedEngine, exact prompts): the share of prompts that extend the previous
one (prefix_stats), for a 24-turn one-screenshot-per-turn UI run (max_images=3) and a 100-turn
coding run with compaction. Goals: >= 75% (UI, never more than 6 images), >= 90% (coding).

Part B (``--engine``; real vLLM, k3-tiny embedded with ``enable_prefix_caching=True``,
``enforce_eager``, ``block_size`` 32): N coding tasks (the agent reads workspace files) under
each policy, the prefix cache reset in between, as conversations of ``--per-conversation`` tasks
(default 6) that each grow task by task: k3-tiny's 4,096-token window holds 10-18 tasks of
this workload after its ~1,260-token head, and k3-tiny's summaries (cut at 96 tokens, or
reasoning only) cannot compact it yet, so one conversation of 30 would overflow. Each task runs;
the largest prompt is printed beside the window. Reports prompt tokens served from cache /
prompt tokens, from vLLM's per-request ``num_cached_tokens``
(``usage.prompt_tokens_details.cached_tokens``). Goal: >= 90% over 30 tasks for kimik3.
Starts an engine: run it under ``flock /tmp/kimik3-engine.lock``.

Run: .venv/bin/python bench/cache.py [--engine] [--turns 30] [--per-conversation 10] [--block-size 32]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kimik3 import Agent, ContextLengthExceededError, ContextPolicy, ModelSettings, ScriptedEngine  # noqa: E402
from kimik3.agents import CODING_INSTRUCTIONS, AgentEvent, TurnEndEvent, prefix_stats  # noqa: E402
from kimik3.agents._agent import _Run  # noqa: E402
from kimik3.tools.coding import coding_tools  # noqa: E402
from kimik3.tools.ui import ui_tools  # noqa: E402
from kimik3.types import Message, ToolCall, ToolMessage  # noqa: E402

K3_TINY = ROOT / "models" / "k3-tiny"
WORKSPACE = ROOT / "tests" / "data" / "k3_tiny_workspace"
NOTE = "[an older tool result was dropped from the context]"


class NaiveAgent(Agent[Any]):
    """Prunes every turn: after each tool batch, every tool result but the last ``keep`` becomes
    a note (the history is rewritten on every turn)."""

    keep = 3

    async def _run_tools(self, run: _Run, calls: Sequence[ToolCall], *rest: Any) -> AsyncIterator[AgentEvent]:
        async for event in super()._run_tools(run, calls, *rest):
            yield event
        results = [i for i, m in enumerate(run.messages) if isinstance(m, ToolMessage)]
        for i in results[: -self.keep]:
            m = run.messages[i]
            assert isinstance(m, ToolMessage)
            if m.content != NOTE:
                run.messages[i] = ToolMessage(content=NOTE, tool_call_id=m.tool_call_id, name=m.name)


# -- part A: exact prompts (ScriptedEngine) ------------------------------------------------


async def ui_run(slack: int | None) -> tuple[float, int]:
    """(share of prompts extending the previous one, most images in one prompt)."""
    from tests.tools.test_ui import CanvasComputer, Script, answer, call

    script = Script([lambda shot: call("screenshot"), *[lambda shot, i=i: call("click", x=10 + i, y=10) for i in range(23)],
                     lambda shot: answer("done")])  # fmt: skip
    engine = ScriptedEngine(script)
    agent = Agent(engine=engine, tools=ui_tools(CanvasComputer((400, 300)), settle=0),
                  context=ContextPolicy(max_images=3, image_slack=slack))  # fmt: skip
    await agent.run("look")
    return prefix_stats([c.prompt for c in engine.calls]).extend_rate, max(script.images_per_call)


async def coding_run(naive: bool, turns: int = 100) -> tuple[float, float, int]:
    """(extend rate, shared-prefix rate, compactions) of a ``turns``-turn coding run."""
    from tests.agents.test_cache_stable import coding_script, read_file

    engine, compactions = coding_script(turns)
    cls = NaiveAgent if naive else Agent
    agent = cls(instructions="You fix bugs.", tools=[read_file], engine=engine, max_turns=2 * turns,
                context=ContextPolicy(context_window=16_384, compact_at=0.8, keep_recent_turns=4))  # fmt: skip
    await agent.run("Find the broken handler.")
    stats = prefix_stats([c.prompt for c in engine.calls])
    return stats.extend_rate, stats.shared_rate, len(compactions)


async def part_a() -> None:
    ours_rate, ours_max = await ui_run(None)
    naive_rate, naive_max = await ui_run(0)
    print(f"UI 24 turns, max_images=3: prompts extending the previous one: kimik3 {ours_rate:.1%} "
          f"(at most {ours_max} images; goal >= 75%, <= 6)  naive {naive_rate:.1%} "
          f"(at most {naive_max})  ratio {ours_rate / naive_rate:.2f}x", flush=True)
    o_ext, o_shared, o_comp = await coding_run(False)
    n_ext, n_shared, n_comp = await coding_run(True)
    print(f"coding 100 turns, compaction: prompts extending the previous one: kimik3 {o_ext:.1%} "
          f"({o_comp} compactions; goal >= 90%)  naive {n_ext:.1%} ({n_comp} compactions)  ratio "
          f"{o_ext / n_ext:.2f}x; prompt text shared with the previous prompt: kimik3 {o_shared:.1%} "
          f"naive {n_shared:.1%}", flush=True)


# -- part B: the real prefix cache (vLLM, k3-tiny) --------------------------------------------

TASKS = ["Read kettle.txt.", "What does harbor.md say?", "Show me falcon.cfg.",
         "Which file mentions lantern?", "Read harbor.md again."]  # fmt: skip


WINDOW = 4096  # k3-tiny's max_position_embeddings
PER_CONVERSATION = 6  # 6 reach ~2,430 tokens; 10 reached 3,840 of 4,096 (compaction due at 3,277, failing)


async def conversation(engine: Any, naive: bool, turns: int, per: int,
                       workspace: Path) -> tuple[int, int, int, int, int, float]:
    """(prompt tokens, cached prompt tokens, model calls, tool results, largest prompt, seconds)
    of ``turns`` tasks, ``per`` tasks to a growing conversation: each conversation starts from
    the same instructions and tools (a prefix a cache can serve across them)."""
    cls = NaiveAgent if naive else Agent
    tools = coding_tools(workspace)  # the tools k3-tiny was trained with
    agent = cls(instructions=CODING_INSTRUCTIONS, tools=tools, engine=engine, max_turns=3,
                settings=ModelSettings(temperature=0.0, max_tokens=96, seed=0),
                context=ContextPolicy(context_window=WINDOW, compact_at=0.8, keep_recent_turns=4))  # fmt: skip
    name = "naive" if naive else "kimik3"
    prompt = cached = calls = results = largest = 0
    t0 = time.perf_counter()
    history: list[Message] = []
    for i in range(turns):
        if i % per == 0:
            history = []
        try:
            async for event in agent.run_stream(TASKS[i % len(TASKS)], messages=history):
                if isinstance(event, TurnEndEvent):
                    prompt += event.usage.prompt_tokens
                    cached += event.usage.cached_tokens
                    calls += 1
                    largest = max(largest, event.usage.prompt_tokens)
        except ContextLengthExceededError as e:  # the window is full: said, and the rates are over what ran
            print(f"  {name}: the {WINDOW:,}-token window is full at task {i + 1} of {turns} ({e}); "
                  "rates over the tasks before it", flush=True)
            break
        if i % per == per - 1 or i == turns - 1:
            results += sum(isinstance(m, ToolMessage) for m in history)
    print(f"  {name}: {results} tool results over the conversations; largest prompt {largest:,} of {WINDOW:,} "
          f"tokens", flush=True)
    return prompt, cached, calls, results, largest, time.perf_counter() - t0


async def part_b(turns: int, per: int, block_size: int) -> None:
    from kimik3 import VLLMEngine

    engine = VLLMEngine(K3_TINY, enforce_eager=True, trust_remote_code=True, max_model_len=WINDOW,
                        enable_prefix_caching=True, block_size=block_size)  # fmt: skip
    await engine.start()
    rates = {}
    print(f"engine: {turns} tasks as conversations of {per} (k3-tiny's {WINDOW:,}-token window holds 10-18 "
          "tasks of this workload and its summaries cannot compact it yet: one conversation of 30 would "
          "overflow)", flush=True)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for name, naive in (("kimik3", False), ("naive", True)):
                workspace = Path(shutil.copytree(WORKSPACE, Path(tmp) / name))
                await engine.llm.reset_prefix_cache()  # each policy starts cold
                prompt, cached, calls, _, _, secs = await conversation(engine, naive, turns, per, workspace)
                rates[name] = cached / prompt
                print(f"engine {name:6} {turns} tasks ({calls} model calls, {secs:.1f} s): "
                      f"{cached}/{prompt} prompt tokens from the prefix cache = {rates[name]:.1%}", flush=True)
    finally:
        await engine.aclose()
    print(f"prefix-cache hit rate kimik3 {rates['kimik3']:.1%} (goal >= 90%) vs naive {rates['naive']:.1%}: "
          f"ratio {rates['kimik3'] / max(rates['naive'], 1e-9):.2f}x; block_size {block_size}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engine", action="store_true", help="also run part B on the embedded vLLM engine")
    parser.add_argument("--turns", type=int, default=30, help="tasks of the engine conversation (part B)")
    parser.add_argument("--per-conversation", type=int, default=PER_CONVERSATION,
                        help="tasks per conversation (part B; a new conversation after each)")
    parser.add_argument("--block-size", type=int, default=32, help="vLLM KV block size (tokens) for part B")
    args = parser.parse_args()
    asyncio.run(part_a())
    if args.engine:
        asyncio.run(part_b(args.turns, args.per_conversation, args.block_size))


if __name__ == "__main__":
    main()
