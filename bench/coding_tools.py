"""Benchmark the coding tools on the hostile inputs of issue 15, against the naive way measured
in the same run (what the tools did before):

(a) glob over a tree whose directories each hold a symlink to their parent and to themselves,
    9 levels deep, with "*/*/*/*/*/*/*/*/*/*" (wildcards follow links: 3^9 paths), and
    "**/**/**/**/*" over a 60-deep chain: pathlib's glob plus a resolve per path (the old tool)
    vs the tool;
(b) read_file of 5 lines of a 64 MB log: read_bytes + decode + split (the old tool) vs the tool;
(c) grep "hit" over 3,000,000 matching lines (Python fallback): collect every match then show 200
    (the old fallback) vs the tool, which stops counting at 100,000.

Run: .venv/bin/python bench/coding_tools.py
"""

from __future__ import annotations

import re
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kimik3.tools import coding  # noqa: E402
from kimik3.tools.coding import coding_tools  # noqa: E402


def best_of(n: int, fn: Callable[[], Any]) -> float:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="kimik3-bench-"))
    tools = {t.name: t for t in coding_tools(tmp)}

    def call(name: str, **args: Any) -> str:
        return str(anyio.run(tools[name].run, args).content)

    def old_glob(pattern: str) -> list[str]:  # the tool before issue 15
        return [str(p) + "/" * p.is_dir() for p in tmp.glob(pattern) if p.resolve().is_relative_to(tmp)]

    d = tmp
    for i in range(9):
        d = d / f"l{i}"
        d.mkdir()
        (d / "f.txt").write_text("")
        (d / "up").symlink_to("..")
        (d / "self").symlink_to(".")
    pattern = "/".join(["*"] * 10)
    old = best_of(1, lambda: old_glob(pattern))
    new = best_of(3, lambda: call("glob", pattern=pattern))
    print(f"(a) glob {pattern} over self-referencing symlinks, 9 levels: old {old:.3f} s, tool {new:.4f} s, "
          f"ratio {old / new:.0f}x")
    chain = tmp / "chain" / "/".join(["c"] * 60)
    chain.mkdir(parents=True)
    old = best_of(1, lambda: old_glob("chain/**/**/**/**/*"))
    new = best_of(3, lambda: call("glob", pattern="chain/**/**/**/**/*"))
    print(f"    glob chain/**/**/**/**/* over a 60-deep chain: old {old:.3f} s, tool {new:.4f} s, "
          f"ratio {old / new:.0f}x")

    line = b"2026-11-30 12:00:00 INFO request handled in 12 ms by worker 7 of the pool\n"
    with open(tmp / "log.txt", "wb") as f:
        f.write(line * (64 * 1024 * 1024 // len(line) - 1))
    old = best_of(3, lambda: (tmp / "log.txt").read_bytes().decode("utf-8").split("\n")[:5])
    new = best_of(3, lambda: call("read_file", path="log.txt", limit=5))
    print(f"(b) read_file 5 lines of a 64 MB log: old {old:.3f} s, tool {new:.3f} s, ratio {old / new:.1f}x")

    (tmp / "log.txt").unlink()
    with open(tmp / "hits.txt", "wb") as f:
        f.write(b"hit\n" * 3_000_000)
    rx = re.compile("hit")

    def naive_grep() -> list[str]:
        found = [f"hits.txt:{n}:{t}" for n, t in enumerate((tmp / "hits.txt").read_text().split("\n"), 1)
                 if rx.search(t)]
        return found[:200]

    coding._search.rg_path = lambda: None  # type: ignore[attr-defined]
    old = best_of(1, naive_grep)
    new = best_of(1, lambda: call("grep", pattern="hit"))
    print(f"(c) grep 3,000,000 matching lines (Python fallback): old {old:.2f} s, tool {new:.2f} s, "
          f"ratio {old / new:.1f}x")


if __name__ == "__main__":
    main()
