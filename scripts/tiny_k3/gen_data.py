"""Generate the tiny K3 model's agent episodes (step 1 of 3; see models/k3-tiny/README.md).

Every episode is run for real: its sandbox is written to a temporary directory and each tool call
goes through kimik3's full coding harness (``kimik3.harness.CodingHarness``: read-before-edit,
background ``bash``, ``multi_edit``, ``apply_patch``, ``read_output``, ``stop``, ``task``), so
tool declarations and tool-result texts are exactly what ``kimik3 run`` produces. The task shapes
and their phrasings are ``shapes.py`` and ``phrase.py``; no training request equals one of the
hand-written free phrasings of ``phrasings.py`` (case, punctuation and spaces ignored). Episodes
are a pure function of ``--seed`` and their index (one ``random.Random`` per episode), whatever
the number of workers.

Writes, under ``--out`` (default ``.cache/tiny_k3``, git-ignored):

- ``episodes_train.jsonl``: training episodes (train word pool; 1 task, 2 in 13%, 3-6 in 7%; thinking
  and effort varied, mostly thinking on / effort max as kimik3's Agent sends);
- ``episodes_heldout.jsonl``: one-task episodes, thinking on / effort max, the held-out
  evaluation, in three groups (field ``group``): ``synthetic`` (the held-out pools: words,
  generated file names and lines never seen in training), ``realistic`` (common file names and
  real held-out lines only) and ``sample_workspace`` (examples/sample_workspace as it is, which
  training never shows: its paths and lines are kept out of the training pools);
- ``pools.json``: the word and line pools (``textpool.py``), built first;
- ``episodes_meta.json``: the tool declarations, system prompt, seed, pool sizes and counts.

Usage: python scripts/tiny_k3/gen_data.py [--train 120000] [--heldout 600] [--heldout-real 100]
       [--heldout-sample 100] [--seed 0] [--workers 3]
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

import phrasings
import shapes
import tasks
import textpool

from kimik3.agents._prompts import CODING_INSTRUCTIONS

REPO = Path(__file__).resolve().parents[2]

_POOLS: dict[str, tasks.Pools] = {}
_SEED = 0
_SAMPLE: dict[str, str] = {}


def _init(seed: int, pools: Path, spaced_p: float = 0.0) -> None:
    global _POOLS, _SEED, _SAMPLE
    os.environ["LC_ALL"] = "C"  # `ls` order and messages independent of the host locale
    _POOLS = tasks.make_pools(pools, spaced_p)
    _SEED = seed
    ws = textpool.SAMPLE_WORKSPACE
    _SAMPLE = {p.relative_to(ws).as_posix(): p.read_text(encoding="utf-8")
               for p in sorted(ws.rglob("*")) if p.is_file()}


def _one(job: tuple[str, int]) -> dict[str, Any]:
    split, i = job
    rng = random.Random(f"{_SEED}:{split}:{i}")
    group = split.removeprefix("heldout_") if split.startswith("heldout_") else "synthetic"
    if split == "train":
        ep = shapes.sample_episode(rng, _POOLS["train"], forbidden_requests=phrasings.FORBIDDEN_REQUESTS)
    elif split == "long":  # long conversations (8-14 runs on one sandbox): positions up to the window
        ep = shapes.sample_episode(rng, _POOLS["train"], n_tasks=rng.randint(8, 14),
                                   forbidden_requests=phrasings.FORBIDDEN_REQUESTS)
    else:
        kinds = list(shapes.TASKS)
        ep = shapes.sample_episode(
            rng, _POOLS["heldout"], kinds=[kinds[i % len(kinds)]], n_tasks=1, settings=(True, "max"),
            realistic=1.0 if group == "realistic" else 0.0, agents_md=0.0,
            files=_SAMPLE if group == "sample_workspace" else None,
        )
    d = asdict(ep)
    d["split"] = split if split in ("train", "long") else "heldout"
    d["group"] = group
    d["index"] = i
    return d


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO / ".cache" / "tiny_k3")
    ap.add_argument("--train", type=int, default=120000)
    ap.add_argument("--heldout", type=int, default=600, help="synthetic held-out episodes")
    ap.add_argument("--heldout-real", type=int, default=100, help="realistic held-out episodes")
    ap.add_argument("--heldout-sample", type=int, default=100, help="episodes on examples/sample_workspace")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--reuse-pools", action="store_true", help="keep an existing pools.json")
    ap.add_argument("--long", type=int, default=1500, help="long training conversations (8-14 tasks)")
    ap.add_argument("--start", type=int, default=0, help="first training index (continue a cut run: appends)")
    ap.add_argument("--spaced-words", type=float, default=0.0,
                    help="share of words drawn from the vocabulary's spaced words (tasks.spaced_words; v3 seed 1: 0.2)")
    ap.add_argument("--only", choices=["heldout", "train", "long"], action="append",
                    help="generate these splits only (default: all)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    pools_path = args.out / "pools.json"
    if args.reuse_pools and pools_path.exists():
        pools = json.loads(pools_path.read_text())
    else:
        pools = textpool.build(pseudo=tasks.pseudo_words())
        pools_path.write_text(json.dumps(pools, ensure_ascii=False) + "\n")
    print(f"pools: {json.dumps(pools['sizes'])} from {pools['meta']['files']} files ({time.time() - t0:.0f}s)")
    _init(args.seed, pools_path, args.spaced_words)
    meta: dict[str, Any] = {
        "seed": args.seed,
        "system": CODING_INSTRUCTIONS,
        "data": "v3",
        "free_phrasings": len(phrasings.FREE),
        "spaced_words": args.spaced_words,
        "tools": tasks.tool_specs(),
        "pools": {"sizes": pools["sizes"], **pools["meta"]},
    }
    plan = {
        "heldout": [("heldout", i) for i in range(args.heldout)]
        + [("heldout_realistic", i) for i in range(args.heldout_real)]
        + [("heldout_sample_workspace", i) for i in range(args.heldout_sample)],
        "train": [("train", i) for i in range(args.start, args.train)],
        "long": [("long", i) for i in range(args.long)],
    }
    meta_path = args.out / "episodes_meta.json"
    if args.only and meta_path.exists():
        meta = {**json.loads(meta_path.read_text()), **meta}
    for split, jobs in plan.items():
        if args.only and split not in args.only:
            continue
        n = len(jobs)
        counts: collections.Counter[str] = collections.Counter()
        path = args.out / f"episodes_{split}.jsonl"
        tmp = path.with_suffix(".tmp")
        if split == "train" and args.start:  # the episodes before start: from the file a cut run left
            tmp.write_text("".join(path.read_text(encoding="utf-8").splitlines(keepends=True)[: args.start]))
        with tmp.open("a" if split == "train" and args.start else "w", encoding="utf-8") as f, mp.Pool(args.workers, _init, (args.seed, pools_path, args.spaced_words)) as pool:
            for k, ep in enumerate(pool.imap(_one, jobs, chunksize=64), 1):
                f.write(json.dumps(ep, ensure_ascii=False) + "\n")
                counts["+".join(ep["kind"]) if len(ep["kind"]) <= 2 else f"{len(ep['kind'])} tasks"] += 1
                counts[f"thinking={ep['thinking']} effort={ep['effort']}"] += 1
                counts[f"group={ep['group']}"] += 1
                counts[f"tasks={len(ep['kind'])}"] += 1
                counts[f"agents_md={ep['messages'][0]['content'] != CODING_INSTRUCTIONS}"] += 1
                if k % 10000 == 0:
                    print(f"  {split}: {k}/{n} ({time.time() - t0:.0f}s)", flush=True)
        tmp.replace(path)
        meta[split] = {"episodes": n, "counts": dict(sorted(counts.items()))}
        print(f"{split}: {n} episodes -> {path} ({time.time() - t0:.0f}s)", flush=True)
    meta_path.write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
