"""Benchmark start-up: ``python -c "import kimik3"`` in fresh processes (issue 30, point 5).

Each repeat runs, interleaved, one fresh interpreter per statement: ``pass`` (the interpreter's
own start-up, the baseline), ``import kimik3``, ``import kimik3`` followed by a first
``K3Tokenizer()`` (what ``kimik3 run`` / ``resume`` pay before their first call: the
vocabulary) and ``import openai`` (for scale: the import kimik3 no longer pays). Each
process's CPU time (user + system, from ``getrusage(RUSAGE_CHILDREN)``) and wall time are
measured from outside; the machine is shared, so CPU time is the figure to read. Printed:
min / median / max over the repeats, and the median ratio to ``pass``.

Goal: ``import kimik3`` <= 0.3 s, openai / Pillow / PyAV / numpy not imported by it (the
statement prints which of them it finds in ``sys.modules``).

Run: .venv/bin/python bench/startup.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

HEAVY = ("openai", "PIL", "av", "numpy", "httpx", "jsonschema", "tiktoken")
STATEMENTS = {
    "pass": "pass",
    "import kimik3": f"import sys, kimik3; print(','.join(m for m in {HEAVY!r} if m in sys.modules) or '-')",
    "import kimik3 + K3Tokenizer()": "import kimik3; kimik3.K3Tokenizer()",
    "import openai": "import openai",
}


def run_once(code: str) -> tuple[float, float, str]:
    """(CPU seconds, wall seconds, stdout) of one fresh ``python -c code`` in the repository root."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True, text=True).stdout
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, out.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=7, help="fresh processes per statement (>= 5)")
    args = ap.parse_args()
    cpu: dict[str, list[float]] = {k: [] for k in STATEMENTS}
    wall: dict[str, list[float]] = {k: [] for k in STATEMENTS}
    found = ""
    for _ in range(max(args.repeats, 5)):
        for name, code in STATEMENTS.items():
            c, w, out = run_once(code)
            cpu[name].append(c)
            wall[name].append(w)
            if name == "import kimik3":
                found = out
    base_cpu, base_wall = statistics.median(cpu["pass"]), statistics.median(wall["pass"])
    print(f"{max(args.repeats, 5)} fresh processes each, interleaved; seconds min / median / max")
    print(f"{'statement':32s} {'CPU (user+sys)':>24s} {'x pass':>7s} {'wall':>24s} {'x pass':>7s}")
    for name in STATEMENTS:
        c, w = cpu[name], wall[name]
        print(
            f"{name:32s} {min(c):7.3f} {statistics.median(c):7.3f} {max(c):7.3f}  {statistics.median(c) / base_cpu:6.1f}x"
            f" {min(w):7.3f} {statistics.median(w):7.3f} {max(w):7.3f}  {statistics.median(w) / base_wall:6.1f}x"
        )
    k3 = statistics.median(cpu["import kimik3"])
    print(f"import kimik3 beyond the interpreter's start-up: {k3 - base_cpu:.3f} s CPU (median)")
    print(f"goal: import kimik3 <= 0.3 s: {'met' if k3 <= 0.3 else 'NOT met'} ({k3:.3f} s CPU, median)")
    print(f"heavy modules imported by `import kimik3`: {found}")


if __name__ == "__main__":
    main()
