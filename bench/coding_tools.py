"""Benchmark the coding tools on the hostile inputs of issue 15, against the naive way measured
in the same run (what the tools did before):

(a) glob over a tree whose directories each hold a symlink to their parent and to themselves,
    9 levels deep, with "*/*/*/*/*/*/*/*/*/*" (wildcards follow links: 3^9 paths), and
    "**/**/**/**/*" over a 60-deep chain: pathlib's glob plus a resolve per path (the old tool)
    vs the tool;
(b) read_file of 5 lines of a 64 MB log: read_bytes + decode + split (the old tool) vs the tool;
(c) grep "hit" over 3,000,000 matching lines (Python fallback): collect every match then show 200
    (the old fallback) vs the tool, which stops counting at 100,000;
(d) one ``bash`` call (``true``): the old way (a Python reaper started per call, the code before the
    sandbox, kept below as OLD_REAPER) vs the tool with ``sandbox="none"``, ``"bwrap"`` and ``"landlock"``
    (one supervisor per run forks a reaper per call), interleaved in rounds; wall time per call
    (min / median / max) and CPU time per call (this process, plus the reapers, shells and
    supervisor, read from /proc before the sandbox closes); and the sandbox's start, once per run.

Run: .venv/bin/python bench/coding_tools.py [bash]   (bash: only (d))
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import statistics
import subprocess
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
from kimik3.tools.coding import Sandbox, _sandbox, coding_tools  # noqa: E402
from kimik3.tools.coding._bash import shell_env  # noqa: E402
from kimik3.tools.coding._reaper import descendants  # noqa: E402

# The reaper as it was before the sandbox (one Python process per call): a subreaper that runs the
# shell, reports its exit code on FD and exits when its stdin closes.
OLD_REAPER = """
import ctypes, os, sys
fd, argv = int(sys.argv[1]), sys.argv[2:]
ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)
os.set_inheritable(fd, False)
shell = os.fork()
if shell == 0:
    null = os.open(os.devnull, os.O_RDONLY); os.dup2(null, 0); os.close(null)
    os.execv(argv[0], argv)
null = os.open(os.devnull, os.O_WRONLY); os.dup2(null, 1); os.dup2(null, 2)
_, status = os.waitpid(shell, 0)
os.write(fd, b"exit %d\\n" % os.waitstatus_to_exitcode(status))
while os.read(0, 1):
    pass
"""


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


async def old_bash_call(argv: list[str], cwd: Path) -> None:
    """One call the old way: start the Python reaper, read the output to its end and the exit
    code, close its stdin, wait for it (what ``_run_shell`` did)."""
    status_r, status_w = os.pipe()
    proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", OLD_REAPER, str(status_w), *argv], cwd=cwd,
                            env=shell_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            pass_fds=(status_w,), start_new_session=True)
    os.close(status_w)
    assert proc.stdout is not None and proc.stdin is not None
    os.set_blocking(proc.stdout.fileno(), False)
    while True:
        await anyio.wait_readable(proc.stdout.fileno())
        if not os.read(proc.stdout.fileno(), 65536):
            break
    await anyio.wait_readable(status_r)
    assert os.read(status_r, 64).startswith(b"exit 0")
    proc.stdin.close()
    proc.wait()
    proc.stdout.close()
    os.close(status_r)


def _tree_cpu(pid: int) -> float:
    """CPU seconds of ``pid`` and its descendants, the children they reaped included (/proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for p in [pid, *descendants(pid)]:
        try:
            fields = Path(f"/proc/{p}/stat").read_bytes().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    return total / tick


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return sum(r.ru_utime + r.ru_stime for r in ru)


async def bash_cost(rounds: int = 5, calls: int = 20) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="kimik3-bench-bash-"))
    argv = [shutil.which("bash") or "/bin/sh", "-c", "true"]
    modes = ["old", "none"] + (["bwrap"] if _sandbox._resolve("auto")[0] == "bwrap" else []) \
        + (["landlock"] if _sandbox._landlock_abi() >= 1 else [])
    walls: dict[str, list[list[float]]] = {m: [] for m in modes}  # per round, per call
    cpus: dict[str, list[float]] = {m: [] for m in modes}  # per round
    starts: dict[str, list[float]] = {m: [] for m in modes}
    checks: dict[str, list[float]] = {m: [] for m in modes}  # the secret-set check before each command (CPU)
    rechecks: dict[str, list[float]] = {m: [] for m in modes}  # the same when a watched folder moved
    for _ in range(rounds):
        for mode in modes:
            box = Sandbox(tmp, mode) if mode != "old" else None  # type: ignore[arg-type]
            bash = coding_tools(tmp, sandbox=box)[0] if box is not None else None
            if box is not None and bash is not None:
                start = time.perf_counter()
                await bash.run({"command": "true"})  # starts the sandbox
                starts[mode].append(time.perf_counter() - start)
            c0 = _cpu() + (_tree_cpu(box._sup.proc.pid) if box is not None and box._sup else 0.0)
            walls[mode].append([])
            for _ in range(calls):
                t = time.perf_counter()
                if bash is None:
                    await old_bash_call(argv, tmp)
                else:
                    await bash.run({"command": "true"})
                walls[mode][-1].append(time.perf_counter() - t)
            c1 = _cpu() + (_tree_cpu(box._sup.proc.pid) if box is not None and box._sup else 0.0)
            cpus[mode].append((c1 - c0) / calls)
            if box is not None and box._stamp is not None:  # what each command pays for stale masks (issue 39)
                for out, moved in ((checks, False), (rechecks, True)):
                    t = time.process_time()
                    for _ in range(calls):
                        if moved:
                            box._stamp.state = ([], {})  # as if a file was made in the home
                        assert box._refresh(-1) is None
                    out[mode].append((time.process_time() - t) / calls)
            if box is not None:
                await box.aclose()

    def ms(xs: list[float]) -> str:
        return f"{min(xs) * 1e3:6.1f} / {statistics.median(xs) * 1e3:6.1f} / {max(xs) * 1e3:6.1f} ms"

    def us(xs: list[float]) -> str:
        return f"{min(xs) * 1e6:6.0f} / {statistics.median(xs) * 1e6:6.0f} / {max(xs) * 1e6:6.0f} us"

    def ratios(xs: list[float]) -> str:
        return f"{min(xs):.2f}x / {statistics.median(xs):.2f}x / {max(xs):.2f}x"

    labels = {"old": "old: a Python reaper per call", "none": 'sandbox="none"', "bwrap": 'sandbox="bwrap"',
              "landlock": 'sandbox="landlock"'}
    print(f"(d) one bash call ({rounds} rounds x {calls} calls, interleaved); wall min / median / max, CPU per call "
          "(min / median / max of the rounds):")
    for mode in modes:
        print(f"    {labels[mode]:32} wall {ms([w for r in walls[mode] for w in r])}   cpu {ms(cpus[mode])}")
    print("    ratios to none, per round (wall: the rounds' medians; min / median / max of the rounds):")
    for mode in [m for m in modes if m != "none"]:
        wall = [statistics.median(a) / statistics.median(b) for a, b in zip(walls[mode], walls["none"], strict=True)]
        cpu = [a / b for a, b in zip(cpus[mode], cpus["none"], strict=True)]
        print(f"    {mode} / none: wall {ratios(wall)}, cpu {ratios(cpu)}")
    print("    the secret-set check before each command (stat of the secrets and their folders; CPU per call, min / "
          "median / max of the rounds), and its ratio to the call's CPU in the same round:")
    for mode in [m for m in modes if checks[m]]:
        for what, xs in (("nothing changed", checks[mode]), ("a watched folder changed", rechecks[mode])):
            share = [c / b for c, b in zip(xs, cpus[mode], strict=True)]
            print(f"    {mode:8} {what:24} {us(xs)}   {ratios(share)} of a call")
    for mode in modes[2:]:
        print(f"    {mode}'s start (once per run, with the first call): {ms(starts[mode])}")
    if len(modes) == 2:
        print("    (neither bubblewrap nor Landlock can run here: no sandboxed numbers)")


if __name__ == "__main__":
    if sys.argv[1:] == ["bash"]:
        anyio.run(bash_cost)
    else:
        main()
        anyio.run(bash_cost)
