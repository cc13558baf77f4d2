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
``enforce_eager``, ``block_size`` 32): an N-turn coding conversation (each turn a new task; the
agent reads workspace files) under each policy, the prefix cache reset in between; reports prompt
tokens served from cache / prompt tokens, from vLLM's per-request ``num_cached_tokens``
(``usage.prompt_tokens_details.cached_tokens``). Goal: >= 90% over 30 turns for kimik3.
Beside it, the client-side view of the same calls: the share of prompt tokens shared with the
previous prompt (``prefix_stats`` over the prompt ids kimik3 sent). The two differ: vLLM caches
whole blocks (``--block-size``; K3's hybrid attention whole 1536-token blocks, vLLM #50235 /
#53749), and a prefix another conversation left in the cache counts for the engine only.
Then (issue 32, item 4) the cache across a restart: a session of 2 tasks, then ``resume`` by a
new Agent (as ``kimik3 resume`` builds it) and a fork of it (``fork_session``), each first
request's cached tokens against its prompt's prefix shared with the session's prompts (the
cache may hold more: vLLM caches the blocks of the answers' tokens too).
Starts an engine: run it under ``flock /tmp/kimik3-engine.lock``.

Run: .venv/bin/python bench/cache.py [--engine] [--turns 30] [--block-size 32]
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

from kimik3 import Agent, ContextLengthExceededError, ContextPolicy, ModelSettings, ScriptedEngine, VLLMEngine  # noqa: E402
from kimik3.agents import CODING_INSTRUCTIONS, AgentEvent, fork_session, prefix_stats  # noqa: E402
from kimik3.agents._agent import _Run  # noqa: E402
from kimik3.formats.k3 import RawChunk  # noqa: E402
from kimik3.tools.coding import coding_tools  # noqa: E402
from kimik3.tools.ui import ui_tools  # noqa: E402
from kimik3.types import ChatRequest, Message, ToolCall, ToolMessage  # noqa: E402

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


class RecordingEngine(VLLMEngine):
    """The embedded engine, recording each call's [prompt ids, cached prompt tokens]."""

    calls: list[list[Any]]

    async def generate(self, prompt_ids: Sequence[int], request: ChatRequest, *,
                       images: Sequence[Any] = ()) -> AsyncIterator[RawChunk]:  # fmt: skip
        entry: list[Any] = [list(prompt_ids), 0]
        self.calls.append(entry)
        async for chunk in super().generate(prompt_ids, request, images=images):
            if chunk.cached_tokens is not None:
                entry[1] = chunk.cached_tokens
            yield chunk


def recorded(engine: RecordingEngine, start: int = 0) -> list[tuple[list[int], int]]:
    return [(ids, cached) for ids, cached in engine.calls[start:]]


def shared(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


async def conversation(engine: Any, naive: bool, turns: int, workspace: Path) -> tuple[int, int, int, float]:
    """(prompt tokens, cached prompt tokens, model calls, seconds) of ``turns`` tasks in one
    growing conversation."""
    cls = NaiveAgent if naive else Agent
    tools = coding_tools(workspace)  # the tools k3-tiny was trained with
    agent = cls(instructions=CODING_INSTRUCTIONS, tools=tools, engine=engine, max_turns=3,
                settings=ModelSettings(temperature=0.0, max_tokens=96, seed=0),
                context=ContextPolicy(context_window=8192, compact_at=0.8, keep_recent_turns=4))  # fmt: skip
    history: list[Message] = []
    prompt = cached = calls = 0
    t0 = time.perf_counter()
    for i in range(turns):
        try:
            result = await agent.run(TASKS[i % len(TASKS)], messages=history)
        except ContextLengthExceededError:  # k3-tiny's 8,192 tokens are full (compaction stopped)
            print(f"  {'naive' if naive else 'kimik3'}: the 8,192-token window is full after {i} of {turns} "
                  "turns; rates over those", flush=True)
            break
        prompt += result.usage.prompt_tokens
        cached += result.usage.cached_tokens
        calls += result.turns
    results = [m for m in history if isinstance(m, ToolMessage)]
    print(f"  {'naive' if naive else 'kimik3'}: {len(results)} tool results in the final history, "
          f"{sum(m.content == NOTE for m in results)} of them dropped", flush=True)
    return prompt, cached, calls, time.perf_counter() - t0


async def restarts(engine: RecordingEngine, workspace: Path, block_size: int) -> None:
    """The prefix cache across a ``resume`` by a new Agent and a fork (see the module doc)."""

    def make() -> Agent[Any]:  # built anew each time, as a new process builds it
        return Agent(instructions=CODING_INSTRUCTIONS, tools=coding_tools(workspace), engine=engine, max_turns=3,
                     settings=ModelSettings(temperature=0.0, max_tokens=96, seed=0))  # fmt: skip

    session = workspace.parent / "session.jsonl"
    await make().run(TASKS[0], session=session)
    await make().resume(session, TASKS[1])
    before = recorded(engine)
    for name, path in (("resume", session), ("fork", fork_session(session, 3, workspace.parent / "fork.jsonl"))):
        start = len(engine.calls)
        await make().resume(path, TASKS[2])
        ids, cached = recorded(engine, start)[0]
        common = max(shared(ids, b) for b, _ in before)
        print(f"engine {name:6}: first request {cached}/{len(ids)} prompt tokens from the cache; it shares "
              f"{common} tokens with a prompt of the session ({common // block_size * block_size} in whole "
              f"{block_size}-token blocks)", flush=True)


async def part_b(turns: int, block_size: int) -> None:
    engine = RecordingEngine(K3_TINY, enforce_eager=True, trust_remote_code=True, max_model_len=8192,
                             enable_prefix_caching=True, block_size=block_size)  # fmt: skip
    engine.calls = []
    await engine.start()
    rates = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for name, naive in (("kimik3", False), ("naive", True)):
                workspace = Path(shutil.copytree(WORKSPACE, Path(tmp) / name))
                await engine.llm.reset_prefix_cache()  # each policy starts cold
                start = len(engine.calls)
                prompt, cached, calls, secs = await conversation(engine, naive, turns, workspace)
                rates[name] = cached / prompt
                client = prefix_stats([ids for ids, _ in recorded(engine, start)])
                print(f"engine {name:6} up to {turns} turns ({calls} model calls, {secs:.1f} s): "
                      f"{cached}/{prompt} prompt tokens from the prefix cache = {rates[name]:.1%}; client side "
                      f"(prefix_stats): {client.shared_rate:.1%} of prompt tokens shared with the previous prompt, "
                      f"{client.extend_rate:.1%} of prompts extend it", flush=True)
            await restarts(engine, Path(shutil.copytree(WORKSPACE, Path(tmp) / "restart" / "ws")), block_size)
    finally:
        await engine.aclose()
    print(f"prefix-cache hit rate kimik3 {rates['kimik3']:.1%} (goal >= 90%) vs naive {rates['naive']:.1%}: "
          f"ratio {rates['kimik3'] / max(rates['naive'], 1e-9):.2f}x; block_size {block_size}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engine", action="store_true", help="also run part B on the embedded vLLM engine")
    parser.add_argument("--turns", type=int, default=30, help="tasks of the engine conversation (part B)")
    parser.add_argument("--block-size", type=int, default=32, help="vLLM KV block size (tokens) for part B")
    args = parser.parse_args()
    asyncio.run(part_a())
    if args.engine:
        asyncio.run(part_b(args.turns, args.block_size))


if __name__ == "__main__":
    main()
