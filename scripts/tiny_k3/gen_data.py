"""Generate the tiny K3 model's agent episodes (step 1 of 3; see models/k3-tiny/README.md).

Every episode is run for real: its sandbox is written to a temporary directory and each tool call
goes through kimik3's coding tools (``kimik3.tools.coding.coding_tools``), so tool declarations
and tool-result texts are exactly what ``kimik3 run`` produces. Episodes are a pure function of
``--seed`` and their index (one ``random.Random`` per episode), whatever the number of workers.

Writes, under ``--out`` (default ``.cache/tiny_k3``, git-ignored):

- ``episodes_train.jsonl``: training episodes (train word pool; 1 or 2 tasks each; thinking and
  effort varied, mostly thinking on / effort max as kimik3's Agent sends);
- ``episodes_heldout.jsonl``: one-task episodes over the held-out word pool (file names and words
  never seen in training), thinking on / effort max: the held-out evaluation;
- ``episodes_meta.json``: the tool declarations, system prompt, seed and counts.

Usage: python scripts/tiny_k3/gen_data.py [--train 40000] [--heldout 600] [--seed 0] [--workers 2]
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing as mp
import os
import random
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import tasks

from kimik3.agents._prompts import CODING_INSTRUCTIONS

REPO = Path(__file__).resolve().parents[2]

_POOLS: dict[str, tasks.Pools] = {}
_SEED = 0


def _init(seed: int) -> None:
    global _POOLS, _SEED
    os.environ["LC_ALL"] = "C"  # `ls` order and messages independent of the host locale
    _POOLS = tasks.make_pools()
    _SEED = seed


def _one(job: tuple[str, int]) -> dict[str, Any]:
    split, i = job
    rng = random.Random(f"{_SEED}:{split}:{i}")
    if split == "train":
        ep = tasks.sample_episode(rng, _POOLS["train"], system=CODING_INSTRUCTIONS)
    else:
        kinds = list(tasks.TASKS)
        ep = tasks.sample_episode(
            rng, _POOLS["heldout"], system=CODING_INSTRUCTIONS, kinds=[kinds[i % len(kinds)]],
            multi_turn=0.0, settings=(True, "max"),
        )
    d = asdict(ep)
    d["split"] = split
    d["index"] = i
    return d


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO / ".cache" / "tiny_k3")
    ap.add_argument("--train", type=int, default=40000)
    ap.add_argument("--heldout", type=int, default=600)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    _init(args.seed)
    t0 = time.time()
    meta: dict[str, Any] = {
        "seed": args.seed,
        "system": CODING_INSTRUCTIONS,
        "tools": tasks.tool_specs(),
        "pools": {k: len(v.words) for k, v in _POOLS.items()},
    }
    for split, n in (("heldout", args.heldout), ("train", args.train)):
        counts: collections.Counter[str] = collections.Counter()
        path = args.out / f"episodes_{split}.jsonl"
        tmp = path.with_suffix(".tmp")
        with tmp.open("w", encoding="utf-8") as f, mp.Pool(args.workers, _init, (args.seed,)) as pool:
            for k, ep in enumerate(pool.imap(_one, [(split, i) for i in range(n)], chunksize=64), 1):
                f.write(json.dumps(ep, ensure_ascii=False) + "\n")
                counts["+".join(ep["kind"])] += 1
                counts[f"thinking={ep['thinking']} effort={ep['effort']}"] += 1
                if k % 5000 == 0:
                    print(f"  {split}: {k}/{n} ({time.time() - t0:.0f}s)", flush=True)
        tmp.replace(path)
        meta[split] = {"episodes": n, "counts": dict(sorted(counts.items()))}
        print(f"{split}: {n} episodes -> {path} ({time.time() - t0:.0f}s)", flush=True)
    (args.out / "episodes_meta.json").write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
