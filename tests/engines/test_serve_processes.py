"""Issue 40: no process outlives ``kimik3 serve``, however it ends. vLLM's server starts an engine
process that does not watch its parent; a ``kill -9`` of ``kimik3 serve`` (one server, or
``--replicas 2`` during start-up) left them running. Here a stand-in server starts the same kind
of tree (a child, and a ``setsid`` daemon that escapes its process group), and the top process is
killed with SIGKILL; every process of the tree must be gone. No real vLLM is started."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# the stand-in "vLLM server": an engine process and a daemon of its own session, their pids written
TREE = """
import os, subprocess, sys, time
out = sys.argv[1]
engine = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
daemon = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
with open(out + ".tmp", "w") as f:
    f.write(f"{os.getpid()} {engine.pid} {daemon.pid}")
os.rename(out + ".tmp", out)
time.sleep(600)
"""

# `kimik3 serve MODEL_DIR` with vLLM's server command replaced by the stand-in
SERVE = """
import sys
import kimik3.engines._vllm as vllm
vllm.server_command = lambda model, *args, **kw: [sys.executable, "-c", sys.argv[1], sys.argv[2]]
from kimik3.cli import main
main(["serve", sys.argv[3]], prog_name="kimik3")
"""

# two replicas started the way Cluster starts each (a process group of its own, supervised), then
# this process waits as `kimik3 serve --replicas 2` does during start-up
REPLICAS = """
import sys, time
from pathlib import Path
from kimik3.engines._cluster import _Process
for i in (1, 2):
    _Process(f"replica {i}", [sys.executable, "-c", sys.argv[1], f"{sys.argv[2]}.{i}"], Path(sys.argv[2] + f".{i}.log"),
             {"PATH": "/usr/bin:/bin"})
time.sleep(600)
"""


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")


def wait_for(path: Path, child: subprocess.Popen[bytes]) -> list[int]:
    for _ in range(1200):  # the limit of a hang, not a speed claim
        if path.exists():
            return [int(p) for p in path.read_text().split()]
        assert child.poll() is None, child.communicate()
        time.sleep(0.1)
    raise AssertionError(f"{path} never appeared")


def gone(pids: list[int]) -> list[int]:
    """The pids still alive after waiting (generously) for them to end."""
    for _ in range(600):
        left = [p for p in pids if alive(p)]
        if not left:
            return []
        time.sleep(0.1)
    return left


def start(tmp_path: Path, script: str, *args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KIMIK3_HOME": str(tmp_path / "home")}
    return subprocess.Popen([sys.executable, "-c", script, *args], env=env, cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT])
def test_no_process_outlives_kimik3_serve(tmp_path: Path, how: signal.Signals) -> None:
    pids_file = tmp_path / "pids"
    serve = start(tmp_path, SERVE, TREE, str(pids_file), str(tmp_path))
    try:
        pids = wait_for(pids_file, serve)
        assert all(alive(p) for p in pids)
        os.kill(serve.pid, how)
        serve.wait(timeout=120)
        assert gone(pids) == []
    finally:
        if serve.poll() is None:
            serve.kill()
    if how == signal.SIGTERM:  # passed on: the server's exit code (128 + 15 for the stand-in killed by it)
        assert serve.returncode == 143


def test_no_replica_outlives_a_kill_9_during_start_up(tmp_path: Path) -> None:
    base = tmp_path / "pids"
    serve = start(tmp_path, REPLICAS, TREE, str(base))
    try:
        pids = wait_for(Path(f"{base}.1"), serve) + wait_for(Path(f"{base}.2"), serve)
        assert len(pids) == 6 and all(alive(p) for p in pids)
        os.kill(serve.pid, signal.SIGKILL)
        serve.wait(timeout=120)
        assert gone(pids) == []
    finally:
        if serve.poll() is None:
            serve.kill()


@pytest.mark.parametrize("how", [signal.SIGHUP, signal.SIGINT, signal.SIGQUIT])
def test_no_process_outlives_kimik3_serve_ended_by_another_signal(tmp_path: Path, how: signal.Signals) -> None:
    # variants (a40c): the terminal closed (SIGHUP), Ctrl-C sent to kimik3 serve alone (SIGINT, not
    # to its group), Ctrl-\ (SIGQUIT); every process of the tree ends with it
    pids_file = tmp_path / "pids"
    serve = start(tmp_path, SERVE, TREE, str(pids_file), str(tmp_path))
    try:
        pids = wait_for(pids_file, serve)
        os.kill(serve.pid, how)
        serve.wait(timeout=120)
        assert gone(pids) == []
    finally:
        if serve.poll() is None:
            serve.kill()


def test_the_server_ends_with_its_reaper_killed_9(tmp_path: Path) -> None:
    # a variant (a40c): the OOM killer picks the supervising reaper, not kimik3 serve: the server
    # ended neither (it now has PR_SET_PDEATHSIG). Not covered yet: the server's own children
    # (the stand-in's engine and daemon) then have no reaper left; they are ended here
    pids_file = tmp_path / "pids"
    serve = start(tmp_path, SERVE, TREE, str(pids_file), str(tmp_path))
    pids: list[int] = []
    try:
        pids = wait_for(pids_file, serve)
        with open(f"/proc/{pids[0]}/stat") as f:
            reaper = int(f.read().rsplit(")", 1)[1].split()[1])  # the server's parent
        assert reaper != serve.pid and alive(reaper)
        os.kill(reaper, signal.SIGKILL)
        assert gone(pids[:1]) == []
    finally:
        for pid in pids[1:]:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        os.killpg(serve.pid, signal.SIGKILL)
        serve.wait(timeout=120)
