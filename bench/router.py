"""Many agents through vLLM's router (issue 32, item 3): N concurrent coding agents, each one
conversation of T tasks, through ``vllm-router`` in front of R k3-tiny replicas (as ``kimik3
serve --replicas R`` starts them), in two phases of the same run over the same replicas:

- **key**: the router's ``consistent_hash`` policy; every request carries the conversation's
  routing key (kimik3's default: ``x-session-id`` and the other headers, the session's id).
- **round robin**: ``round_robin``; the requests carry no key (``Agent(routing_key=None)``,
  ``RemoteEngine(routing_headers=None, routing_user=False)``).

Each agent is a session: its first task is ``run(session=...)``, the next ones ``resume`` it (as
``kimik3 resume`` does). Before each phase every replica's prefix cache is reset
(``POST /reset_prefix_cache``, vLLM's dev endpoint: the replicas run with
``VLLM_SERVER_DEV_MODE=1``) and the router restarted with the phase's policy.

Reported per phase: the engines' prefix-cache hit rate = prompt tokens served from cache /
prompt tokens, from the replicas' ``/metrics`` counters (``vllm:prefix_cache_hits_total`` /
``vllm:prefix_cache_queries_total``, the deltas over the phase) and from the responses'
``usage.prompt_tokens_details.cached_tokens``; the requests each replica served; generated
tokens/s (completion tokens / the phase's wall time). Then the ratios key / round robin.

Goal (issue 44): round robin sends >= 1.5x the uncached prompt tokens the key does (what the key
changes; a hit rate alone cannot tell the two apart, since the instructions and tools every
agent shares are cached on every replica either way: 95.1% vs 96.6% in an earlier run), over
conversations whose history outgrows that shared header (printed: each conversation's last
prompt against its first, goal >= 2x). k3-tiny's 8,192-token window, compaction at 80%.

With R replicas and no key, a conversation's next request lands on the replica that holds its
last prefix about 1/R of the time; elsewhere only the prefix that replica saw at an earlier turn
(or the system prompt and tools all agents share) is cached. On a 2-core machine the throughput
ratio is noise-bound: both phases share the same two cores for the replicas, the router and the
agents' tools.

Starts 2 vLLM servers and the router: run it under ``flock /tmp/kimik3-engine.lock``.

Run: .venv/bin/python bench/router.py [--agents 8] [--turns 10] [--replicas 2] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kimik3 import Agent, ContextLengthExceededError, ContextPolicy, ModelSettings, RemoteEngine  # noqa: E402
from kimik3.agents import CODING_INSTRUCTIONS  # noqa: E402
from kimik3.engines._cluster import Cluster, free_port  # noqa: E402
from kimik3.tools.coding import coding_tools  # noqa: E402

K3_TINY = ROOT / "models" / "k3-tiny"
WORKSPACE = ROOT / "tests" / "data" / "k3_tiny_workspace"
TASKS = ["Read kettle.txt.", "What does harbor.md say?", "Show me falcon.cfg.",
         "Which file mentions lantern?", "Read harbor.md again."]  # fmt: skip
SETTINGS = ModelSettings(temperature=0.0, max_tokens=96, seed=0)
HITS, QUERIES, GENERATED = "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total", \
    "vllm:generation_tokens_total"


async def conversation(engine: RemoteEngine, keyed: bool, i: int, turns: int, root: Path) -> list[int]:
    """One agent's conversation of ``turns`` tasks; [prompt, cached, completion tokens, calls, tasks done,
    the first task's mean prompt tokens a call (the shared header and one task), the last task's]."""
    workspace = Path(shutil.copytree(WORKSPACE, root / f"ws{i}"))
    session = root / f"s{i}.jsonl"
    agent = Agent(instructions=CODING_INSTRUCTIONS, tools=coding_tools(workspace), engine=engine, max_turns=3,
                  settings=SETTINGS, routing_key="auto" if keyed else None,
                  context=ContextPolicy(context_window=8192, compact_at=0.8, keep_recent_turns=4))  # fmt: skip
    out = [0, 0, 0, 0, 0, 0, 0]
    for t in range(turns):
        task = TASKS[(i + t) % len(TASKS)]
        try:
            result = await (agent.run(task, session=session) if t == 0 else agent.resume(session, task))
        except ContextLengthExceededError:  # k3-tiny's 8,192 tokens are full (compaction stopped)
            break
        u = result.usage
        per_call = u.prompt_tokens // max(result.turns, 1)  # this task's mean prompt
        out = [out[0] + u.prompt_tokens, out[1] + u.cached_tokens, out[2] + u.completion_tokens,
               out[3] + result.turns, out[4] + 1, out[5] or per_call, per_call]
    return out


def reset_caches(cluster: Cluster) -> None:
    with httpx.Client(timeout=60, trust_env=False) as http:
        for url in cluster.replica_urls:
            http.post(f"{url}/reset_prefix_cache").raise_for_status()


def delta(after: Sequence[dict[str, float]], before: Sequence[dict[str, float]], name: str) -> list[float]:
    return [a.get(name, 0.0) - b.get(name, 0.0) for a, b in zip(after, before, strict=True)]


async def phase(cluster: Cluster, keyed: bool, agents: int, turns: int) -> dict[str, Any]:
    cluster.stop_router()
    cluster.start_router("consistent_hash" if keyed else "round_robin")
    reset_caches(cluster)
    engine = (RemoteEngine(base_url=cluster.base_url, timeout=600) if keyed else
              RemoteEngine(base_url=cluster.base_url, timeout=600, routing_headers=None, routing_user=False))
    before = cluster.metrics()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        rows = await asyncio.gather(*(conversation(engine, keyed, i, turns, Path(tmp)) for i in range(agents)))
    secs = time.perf_counter() - t0
    await engine.aclose()
    after = cluster.metrics()
    prompt, cached, completion, calls, done = (sum(r[k] for r in rows) for k in range(5))
    growth = statistics.median(r[6] / max(r[5], 1) for r in rows)
    hits, queries = sum(delta(after, before, HITS)), sum(delta(after, before, QUERIES))
    per_replica = [int(d) for d in delta(after, before, "vllm:request_success_total")]
    return {"metrics_rate": hits / max(queries, 1.0), "usage_rate": cached / max(prompt, 1), "prompt": prompt,
            "cached": cached, "tps": completion / secs, "secs": secs, "calls": calls, "done": done,
            "per_replica": per_replica, "generated": sum(delta(after, before, GENERATED)), "growth": growth}


def show(name: str, r: dict[str, Any], agents: int, turns: int) -> None:
    print(f"{name:11}: {agents} agents, {r['done']}/{agents * turns} tasks, {r['calls']} model calls in "
          f"{r['secs']:.1f} s; prefix cache {r['metrics_rate']:.1%} (/metrics), {r['usage_rate']:.1%} "
          f"({r['cached']}/{r['prompt']} cached_tokens); {r['tps']:.1f} generated tok/s; requests per "
          f"replica {r['per_replica']}; last prompt / first prompt of a conversation (median) "
          f"{r['growth']:.1f}x", flush=True)


def spread(values: Sequence[float], fmt: str = "{:.1%}") -> str:
    """min/median/max of the repeats."""
    return "/".join(fmt.format(v) for v in (min(values), statistics.median(values), max(values)))


async def main(agents: int, turns: int, replicas: int, kv_mib: int, repeats: int) -> None:
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1"}
    env.pop("VLLM_CPU_KVCACHE_SPACE", None)
    logs = Path(tempfile.mkdtemp(prefix="kimik3-bench-router-"))
    vllm_args = ["--max-model-len", "8192", "--block-size", "32", "--max-num-seqs", str(agents),
                 "--kv-cache-memory-bytes", str(kv_mib * 2**20)]  # fmt: skip
    results: dict[bool, list[dict[str, Any]]] = {True: [], False: []}
    with Cluster(K3_TINY, replicas=replicas, policy="consistent_hash", port=free_port(),
                 replica_ports=[free_port() for _ in range(replicas)], vllm_args=vllm_args, log_dir=logs,
                 env=env) as cluster:  # fmt: skip
        t0 = time.perf_counter()
        cluster.start()
        print(f"{replicas} replicas of k3-tiny ({kv_mib} MiB KV cache each) and vllm-router up in "
              f"{time.perf_counter() - t0:.0f} s; logs in {logs}", flush=True)
        for rep in range(repeats):  # alternate the order: this machine is shared and noisy
            for keyed in (True, False) if rep % 2 == 0 else (False, True):
                results[keyed].append(await phase(cluster, keyed, agents, turns))
                show("key" if keyed else "round robin", results[keyed][-1], agents, turns)
    key, rr = results[True], results[False]
    ratio = [k["metrics_rate"] / max(r["metrics_rate"], 1e-9) for k, r in zip(key, rr, strict=True)]
    fewer = [(r["prompt"] - r["cached"]) / max(k["prompt"] - k["cached"], 1) for k, r in zip(key, rr, strict=True)]
    tps = [k["tps"] / max(r["tps"], 1e-9) for k, r in zip(key, rr, strict=True)]
    print(f"over {repeats} repeats (min/median/max): uncached prompt tokens, round robin / key "
          f"{spread(fewer, '{:.2f}x')} (goal >= 1.5x); history growth, last prompt / first "
          f"{spread([k['growth'] for k in key], '{:.1f}x')} (goal >= 2x); prefix-cache hit rate with the key "
          f"{spread([k['metrics_rate'] for k in key])} vs round robin "
          f"{spread([r['metrics_rate'] for r in rr])}: ratio {spread(ratio, '{:.2f}x')}; generated tok/s {spread([k['tps'] for k in key], '{:.1f}')}"
          f" vs {spread([r['tps'] for r in rr], '{:.1f}')}: ratio {spread(tps, '{:.2f}x')}", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--agents", type=int, default=8, help="concurrent agents (conversations)")
    parser.add_argument("--turns", type=int, default=10, help="tasks per conversation")
    parser.add_argument("--replicas", type=int, default=2, help="vLLM replicas behind the router")
    parser.add_argument("--kv-mib", type=int, default=128, help="KV cache per replica, MiB")
    parser.add_argument("--repeats", type=int, default=3, help="repeats of the two phases (alternating)")
    args = parser.parse_args()
    asyncio.run(main(args.agents, args.turns, args.replicas, args.kv_mib, args.repeats))
