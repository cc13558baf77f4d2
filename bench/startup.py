"""Benchmark start-up: ``python -c "import kimik3"`` in fresh processes (issue 30, point 5).

Each repeat runs, interleaved, one fresh interpreter per statement: ``pass`` (the interpreter's
own start-up, the baseline), ``import kimik3``, ``import kimik3`` followed by a first
``K3Tokenizer()`` (what ``kimik3 run`` / ``resume`` pay before their first call: the
vocabulary) and ``import openai`` (for scale: the import kimik3 no longer pays). Each
process's CPU time (user + system, from ``getrusage(RUSAGE_CHILDREN)``) and wall time are
measured from outside; the machine is shared, so CPU time is the figure to read. Printed:
min / median / max over the repeats, and the median ratio to ``pass``.

Also ``import pydantic, anyio, asyncio``: the floor of what kimik3 must load (its typed messages are
pydantic models, its loop anyio's), so ``import kimik3`` / floor says what kimik3's own modules
add; and one ``python -X importtime -c "import kimik3"`` split into shares (load-independent):
pydantic (with its plugin look-up, which reads every installed distribution's entry points
through ``importlib.metadata``: it grows with the venv, vLLM's included), asyncio + anyio,
kimik3's own modules (self time), the rest.

Goal (issue 44): ``import kimik3`` <= 0.3 s CPU on a quiet machine, openai / Pillow / PyAV / numpy
not imported by it (the statement prints which of them it finds in ``sys.modules``). CPU time
grows with the machine's load (shared caches, a busy core): read the ratio to the floor there.

Run: .venv/bin/python bench/startup.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import os
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
    "import pydantic, anyio, asyncio": "import pydantic, anyio, asyncio; pydantic.BaseModel",
    "import openai": "import openai",
}


# What an installed kimik3 does: imports from cached bytecode. A shell with PYTHONDONTWRITEBYTECODE
# set (some CI and sandbox set-ups) would have every process compile kimik3 from source: ~0.08 s more.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def run_once(code: str) -> tuple[float, float, str]:
    """(CPU seconds, wall seconds, stdout) of one fresh ``python -c code`` in the repository root,
    with bytecode caching on (:data:`ENV`)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True, text=True,
                         env=ENV).stdout
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
    for code in STATEMENTS.values():  # once, not measured: the bytecode caches written, as after an install
        run_once(code)
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
    floor = statistics.median(cpu["import pydantic, anyio, asyncio"])
    print(f"import kimik3 / its floor (pydantic, anyio, asyncio): {(k3 - base_cpu) / max(floor - base_cpu, 1e-9):.2f}x "
          "(beyond the interpreter's start-up, medians)")
    print(f"heavy modules imported by `import kimik3`: {found}")
    print("where `import kimik3` spends its time (-X importtime, one process, shares of the total):")
    for name, share in import_shares().items():
        print(f"    {name:48s} {share:6.1%}")


def import_shares() -> dict[str, float]:
    """Shares of ``import kimik3``'s import time (``-X importtime``, self times summed by group)."""
    err = subprocess.run([sys.executable, "-X", "importtime", "-c", "import kimik3"], cwd=ROOT, check=True,
                         capture_output=True, text=True).stderr
    groups = {"pydantic's plugin look-up (importlib.metadata)": 0, "pydantic": 0, "asyncio + anyio": 0,
              "kimik3's own modules": 0, "the rest (stdlib, typing_extensions, ...)": 0}
    for line in err.splitlines():
        parts = line.split("|")
        if len(parts) != 3 or not parts[0].strip().removeprefix("import time:").strip().isdigit():
            continue
        self_us, name = int(parts[0].split(":")[1]), parts[2].strip()
        top = name.split(".")[0]
        if name.startswith("importlib.metadata") or top in ("email", "zipfile", "csv"):  # what the look-up loads
            key = "pydantic's plugin look-up (importlib.metadata)"
        elif top in ("pydantic", "pydantic_core", "annotated_types", "typing_inspection"):
            key = "pydantic"
        elif top in ("asyncio", "anyio", "sniffio"):
            key = "asyncio + anyio"
        elif top == "kimik3":
            key = "kimik3's own modules"
        else:
            key = "the rest (stdlib, typing_extensions, ...)"
        groups[key] += self_us
    total = sum(groups.values()) or 1
    return {k: v / total for k, v in groups.items()}


if __name__ == "__main__":
    main()
