"""Measure the tiny K3 model end to end with kimik3's embedded engine on this CPU (issue: tiny
K3 model, item 5).

For N held-out tasks (unseen file names and words; ``.cache/tiny_k3/episodes_heldout.jsonl``,
made by ``gen_data.py``), each task's sandbox is written to a temporary directory and kimik3's
coding agent runs it for real: ``Agent(CODING_INSTRUCTIONS, coding_tools(dir),
VLLMEngine("models/k3-tiny"))``. Reported:

- tool calls: every call the model generated (complete or not) and how many parsed into a known
  tool whose arguments validate against its schema (goal >= 99%);
- task success: the run completed and the goal holds (the answer contains the expected text,
  and/or the files the task should write hold the expected content) (goal >= 80%);
- decode speed: generated tokens per second, one task alone and all tasks at once.

``--free``: instead, the hand-written free phrasings of ``phrasings.py`` on
examples/sample_workspace (requests typed as people type them, never in training), each checked
(answer text, files written, the honest reply), reported per shape.

``--tools full`` (the default) gives the agent what ``kimik3 run`` gives it: the full coding
harness (``CodingHarness(dir).agent(...)``); ``--tools core``: the six coding tools alone (what
k3-tiny v1/v2 were trained on).

Run: .venv/bin/python scripts/tiny_k3/measure.py [--tasks 50] [--temperature 1.0] [--json OUT]
     .venv/bin/python scripts/tiny_k3/measure.py --free --temperature 0 [--tools core] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import phrasings

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

from kimik3 import (  # noqa: E402
    Agent,
    ModelSettings,
    ToolArgumentsError,
    VLLMEngine,
)
from kimik3.agents import CODING_INSTRUCTIONS, FinalEvent  # noqa: E402
from kimik3.formats.k3 import ToolCallDone, ToolCallIncomplete  # noqa: E402
from kimik3.harness import CodingHarness  # noqa: E402
from kimik3.tools.coding import coding_tools  # noqa: E402

MODEL = ROOT / "models" / "k3-tiny"
HELDOUT = ROOT / ".cache" / "tiny_k3" / "episodes_heldout.jsonl"


def load_tasks(n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` held-out single-task episodes, the same number of each kind (seeded choice)."""
    if not HELDOUT.exists():
        raise SystemExit(f"{HELDOUT} is missing: run scripts/tiny_k3/gen_data.py first")
    episodes = [json.loads(line) for line in HELDOUT.read_text().splitlines()]
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for e in episodes:
        if len(e["kind"]) == 1:
            by_kind.setdefault(e["kind"][0], []).append(e)
    rng = random.Random(seed)
    kinds = sorted(by_kind)
    picked: list[dict[str, Any]] = []
    while len(picked) < n:
        for kind in kinds:
            pool = by_kind[kind]
            if pool and len(picked) < n:
                picked.append(pool.pop(rng.randrange(len(pool))))
    return picked


def goal_met(goal: dict[str, Any], output: str, root: Path) -> bool:
    if not all(text in output for text in goal.get("answer_contains", [])):
        return False
    for path, content in goal.get("files", {}).items():
        target = root / path
        if not target.is_file() or target.read_text() != content:
            return False
    return True


def contains(answer: str, text: str) -> bool:
    """``text`` in ``answer``, case-insensitively, not glued to a letter or digit at an edge that
    is one ("2" is not found in "12", "port = 8080" is found in "port = 8080.")."""
    pattern = re.escape(text.lower())
    if text[:1].isalnum():
        pattern = r"(?<![0-9a-z])" + pattern
    if text[-1:].isalnum():
        pattern += r"(?![0-9a-z])"
    return re.search(pattern, answer.lower()) is not None


def free_goal_met(entry: dict[str, Any], output: str, root: Path) -> bool:
    """The checks of one free phrasing (``phrasings.py``): answer texts, written files, the honest
    reply; every file not named stays as it was."""
    expected = {**phrasings.WORKSPACE_FILES, **entry.get("files", {})}
    found = {p.relative_to(root).as_posix(): p.read_text(errors="replace") for p in root.rglob("*") if p.is_file()}
    if found != expected:
        return False
    answer = ["k3-tiny"] if entry.get("honest") else entry.get("answer", [])
    return all(contains(output, a) for a in answer)


def make_agent(root: Path, engine: VLLMEngine, settings: ModelSettings, tool_set: str) -> tuple[Agent[str], list[Any]]:
    """The agent ``kimik3 run`` builds (``full``: the coding harness; ``core``: the six tools)."""
    if tool_set == "full":
        harness = CodingHarness(root, checkpoints=False)
        agent = harness.agent(engine=engine, settings=settings, max_turns=6)
        return agent, list(agent.tools.values())
    tools = coding_tools(root)
    return Agent(instructions=CODING_INSTRUCTIONS, tools=tools, engine=engine, settings=settings, max_turns=6), tools


async def run_task(engine: VLLMEngine, episode: dict[str, Any], settings: ModelSettings,
                   tool_set: str = "full", free: dict[str, Any] | None = None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for path, content in episode["files"].items():
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(content)
        agent, tools = make_agent(root, engine, settings, tool_set)
        by_name = {t.name: t for t in tools}
        task = next(m["content"] for m in episode["messages"] if m["role"] == "user")
        calls = valid = 0
        output = ""
        stop = "error"
        completion_tokens = 0
        t0 = time.perf_counter()
        async for event in agent.run_stream(task):
            if isinstance(event, ToolCallIncomplete):
                calls += 1
            elif isinstance(event, ToolCallDone):
                calls += 1
                tool = by_name.get(event.name)
                if tool is not None:
                    try:
                        tool.validate(event.arguments)
                        valid += 1
                    except ToolArgumentsError:
                        pass
            elif isinstance(event, FinalEvent):
                output = str(event.result.output or "")
                stop = event.result.stop_reason
                completion_tokens = event.result.usage.completion_tokens
        seconds = time.perf_counter() - t0
        if free is not None:
            ok = stop == "completed" and free_goal_met(free, output, root)
        else:
            ok = stop == "completed" and goal_met(episode["goals"][0], output, root)
    return {"kind": episode["kind"][0], "task": task, "calls": calls, "valid": valid, "success": ok,
            "stop": stop, "output": output, "completion_tokens": completion_tokens, "seconds": seconds}


async def decode_speed(engine: VLLMEngine, episode: dict[str, Any], tokens: int = 200) -> float:
    """Steady decode rate of one sequence: tokens after the first, over the time after the first."""
    from kimik3.engines import ChatRequest

    request = ChatRequest(messages=episode["messages"][:2],
                          settings=ModelSettings(max_tokens=tokens, temperature=1.0, extra={"ignore_eos": True}))
    stamps: list[float] = []
    count = 0
    async for chunk in engine.generate(engine.encode(request).ids, request):
        if chunk.completion_tokens is not None and chunk.completion_tokens > count:
            count = chunk.completion_tokens
            stamps.append(time.perf_counter())
    return (count - 1) / (stamps[-1] - stamps[0])


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--temperature", type=float, default=1.0, help="kimik3's default (the model card's)")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--json", type=Path, help="write every task's result here")
    ap.add_argument("--free", action="store_true", help="the hand-written free phrasings (phrasings.py)")
    ap.add_argument("--more", action="store_true", help="with --free: the second set (phrasings.MORE)")
    ap.add_argument("--tools", choices=["full", "core"], default="full", help="the harness (kimik3 run) or six tools")
    ap.add_argument("--max-model-len", type=int, default=None, help="default: the model's max_position_embeddings")
    args = ap.parse_args()

    frees: list[dict[str, Any] | None]
    if args.free:
        frees = list(phrasings.MORE if args.more else phrasings.FREE)
        episodes = [{"kind": [f["shape"]], "files": phrasings.WORKSPACE_FILES,
                     "messages": [{"role": "user", "content": f["ask"]}]} for f in frees]
    else:
        episodes = load_tasks(args.tasks, args.seed)
        frees = [None] * len(episodes)
    settings = ModelSettings(temperature=args.temperature, seed=args.seed, max_tokens=400)
    window = args.max_model_len or json.loads((MODEL / "config.json").read_text())["max_position_embeddings"]
    engine = VLLMEngine(MODEL, enforce_eager=True, trust_remote_code=True, max_model_len=window)
    await engine.start()
    try:
        await run_task(engine, episodes[0], settings, args.tools, frees[0])  # warm-up
        decode = await decode_speed(engine, episodes[0])
        results: list[dict[str, Any]] = [{}] * len(episodes)
        limiter = anyio.CapacityLimiter(args.concurrency)
        t0 = time.perf_counter()

        async def one(i: int) -> None:
            async with limiter:
                results[i] = await run_task(engine, episodes[i], settings, args.tools, frees[i])

        async with anyio.create_task_group() as tg:
            for i in range(len(episodes)):
                tg.start_soon(one, i)
        wall = time.perf_counter() - t0
    finally:
        await engine.aclose()

    calls = sum(r["calls"] for r in results)
    valid = sum(r["valid"] for r in results)
    ok = sum(r["success"] for r in results)
    tokens = sum(r["completion_tokens"] for r in results)
    what = "free phrasings (phrasings.py)" if args.free else "held-out tasks"
    print(f"tiny K3 model, embedded vLLM on CPU, {len(results)} {what}, temperature {args.temperature}, "
          f"tools {args.tools}")
    print(f"  tool calls parsed and valid: {valid}/{calls} = {valid / max(calls, 1):.1%} (goal >= 99%)")
    print(f"  tasks succeeded: {ok}/{len(results)} = {ok / len(results):.1%} (goal >= 80%)")
    if args.free:
        for r in results:
            print(f"    [{'ok' if r['success'] else 'NO'}] {r['task']!r} -> {r['output'][:120]!r}")
    per_kind = Counter(r["kind"] for r in results)
    won = Counter(r["kind"] for r in results if r["success"])
    print("  by kind: " + ", ".join(f"{k} {won[k]}/{per_kind[k]}" for k in sorted(per_kind)))
    print(f"  decode: {decode:.1f} tok/s for one sequence; {tokens / wall:.1f} tok/s generated overall with "
          f"{args.concurrency} tasks at a time, tools and prefill included ({tokens} tokens in {wall:.0f} s)")
    print(f"  stop reasons: {dict(Counter(r['stop'] for r in results))}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    anyio.run(main)
