"""An attempt's directory and its shell commands: fresh copies (symlinks kept as links, never
followed out of the suite), and commands in a sandbox (bubblewrap, or none) that ends every
process they started (daemons that left the process group too) when they end, time out or are
cancelled: checked by the host's /proc."""

from __future__ import annotations

import os
import time
from pathlib import Path

import anyio
import pytest

from kimik3.eval import load_suite
from kimik3.eval._workspace import OUTPUT_CHARS, prepare_attempt, run_command
from kimik3.tools.coding import Sandbox

from ..procs import BWRAP_WORKS, MODES, alive_with, marker
from .helpers import tree_hash, write_task


def gone(mark: str) -> bool:
    """No live process has ``mark`` in its command line (polled for up to 10 s: a process may
    take a moment to be reaped)."""
    deadline = time.monotonic() + 10
    while alive_with(mark):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def box(root: Path, mode: str) -> Sandbox:
    return Sandbox(root, "bwrap" if mode == "bwrap" else "none")


@pytest.mark.parametrize("mode", MODES)
def test_a_command_that_exits_takes_what_it_left_running_with_it(tmp_path: Path, mode: str) -> None:
    mark, daemon = marker(), marker()
    result = anyio.run(lambda: run_command(f"sleep {mark} & setsid sleep {daemon} & echo started", box(tmp_path, mode),
                                           timeout=30))
    assert (result.exit_code, result.output, result.timed_out) == (0, "started\n", False)
    assert gone(mark) and gone(daemon)  # setsid left the process group, not the reaper


@pytest.mark.parametrize("mode", MODES)
def test_a_command_over_its_limit_is_killed_with_its_children(tmp_path: Path, mode: str) -> None:
    mark = marker()
    result = anyio.run(lambda: run_command(f"(setsid sleep {mark} &); echo waiting; sleep {mark}", box(tmp_path, mode),
                                           timeout=0.5))
    assert (result.exit_code, result.timed_out, result.output, result.ok) == (None, True, "waiting\n", False)
    assert gone(mark)


@pytest.mark.parametrize("mode", MODES)
def test_a_cancelled_command_is_killed_before_the_cancellation_returns(tmp_path: Path, mode: str) -> None:
    mark = marker()
    seen: list[int] = []

    async def main() -> None:
        with anyio.move_on_after(2):
            await run_command(f"(setsid sleep {mark} &); sleep {mark}", box(tmp_path, mode), timeout=30)
        seen.extend(alive_with(mark))  # right after the cancellation returned

    anyio.run(main)
    assert seen == []


@pytest.mark.parametrize("mode", MODES)
def test_a_commands_output_is_its_tail_and_its_exit_status_is_kept(tmp_path: Path, mode: str) -> None:
    result = anyio.run(lambda: run_command("seq 1 20000; echo 'é end' >&2; exit 7", box(tmp_path, mode), timeout=30))
    assert result.exit_code == 7 and len(result.output) == OUTPUT_CHARS
    assert result.output.endswith("19999\n20000\né end\n")
    env = anyio.run(lambda: run_command('printf %s "$X"', box(tmp_path, mode), timeout=30, env={"X": "from env"}))
    assert env.output == "from env"
    killed = anyio.run(lambda: run_command("kill -TERM $$", box(tmp_path, mode), timeout=30))
    assert (killed.exit_code, killed.timed_out) == (-15, False)


def test_a_sandboxed_command_writes_its_workspace_only(tmp_path: Path, host_dir: Path) -> None:
    if not BWRAP_WORKS:
        pytest.skip("bubblewrap cannot run here")
    ws = tmp_path / "ws"
    ws.mkdir()
    command = f"echo in > inside.txt; echo out > {host_dir}/outside.txt"
    result = anyio.run(lambda: run_command(command, Sandbox(ws, "bwrap"), timeout=30))
    assert result.exit_code == 1 and "Read-only file system" in result.output
    assert (ws / "inside.txt").read_text() == "in\n" and list(host_dir.iterdir()) == []
    result = anyio.run(lambda: run_command(command, Sandbox(ws, "none"), timeout=30))
    assert (result.exit_code, (host_dir / "outside.txt").read_text()) == (0, "out\n")  # unsandboxed: it can


def test_a_sandbox_that_cannot_start_is_a_tool_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kimik3 import ToolError

    sandbox = Sandbox(tmp_path, "none")
    monkeypatch.setattr(sandbox, "_argv", lambda: (["/nonexistent/python"], b""))
    with pytest.raises(ToolError, match="cannot start the command supervisor"):
        anyio.run(lambda: run_command("true", sandbox, timeout=30))
    assert not sandbox.running


def test_an_attempt_is_a_fresh_copy_and_the_suite_is_only_read(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    folder = write_task(suite, "t", "x", "true", {"a.txt": "one\n", "sub/b.txt": "two\n"})
    secret = tmp_path / "outside.txt"
    secret.write_text("not the suite's\n")
    os.symlink(secret, folder / "workspace" / "link.txt")
    before = tree_hash(suite)
    task = load_suite(suite).tasks[0]

    async def twice() -> tuple[Path, Path]:
        first, second = await prepare_attempt(task), await prepare_attempt(task)
        (first.workspace / "a.txt").write_text("changed by attempt 1\n")
        assert (second.workspace / "a.txt").read_text() == "one\n"  # each attempt has its own copy
        assert os.readlink(first.workspace / "link.txt") == str(secret)  # a link stays a link
        assert (first.task_dir / "task.toml").is_file() and not (first.task_dir / "workspace").exists()
        assert first.answer.read_text() == ""
        first.remove()
        second.remove()
        return first.root, second.root

    roots = anyio.run(twice)
    assert not any(r.exists() for r in roots)
    assert secret.read_text() == "not the suite's\n"  # removing the copy did not follow the link
    assert tree_hash(suite) == before


def test_an_empty_workspace_when_the_task_has_none(tmp_path: Path) -> None:
    write_task(tmp_path / "suite", "t", "x", "true")
    attempt = anyio.run(prepare_attempt, load_suite(tmp_path / "suite").tasks[0])
    try:
        assert attempt.workspace.is_dir() and list(attempt.workspace.iterdir()) == []
    finally:
        attempt.remove()


def test_a_repo_that_cannot_be_cloned_is_an_eval_error(tmp_path: Path) -> None:
    from kimik3.eval import EvalError

    write_task(tmp_path / "suite", "t", "x", "true", repo="../nowhere", commit="abc123")
    task = load_suite(tmp_path / "suite").tasks[0]
    with pytest.raises(EvalError, match="git clone failed: fatal: repository"):
        anyio.run(prepare_attempt, task)


def test_a_task_whose_repo_cannot_be_cloned_fails_its_attempts_only(tmp_path: Path) -> None:
    from kimik3 import ScriptedEngine
    from kimik3.eval import evaluate, read_results

    suite = tmp_path / "suite"
    write_task(suite, "a-broken", "x", "true", repo="../nowhere", commit="abc123")
    write_task(suite, "b-fine", "y", "true")
    loaded = load_suite(suite)
    anyio.run(lambda: evaluate(loaded, ScriptedEngine(["done"]), tmp_path / "out"))
    results, _ = read_results(tmp_path / "out" / "results.jsonl")
    assert [(r.task, r.stop_reason, r.passed) for r in results] == [("a-broken", "setup_failed", False),
                                                                     ("b-fine", "completed", True)]
    assert results[0].error is not None and results[0].error.startswith("EvalError: git clone failed: fatal:")


def test_a_fifo_in_a_workspace_fails_the_attempt_instead_of_blocking_it(tmp_path: Path) -> None:
    from kimik3 import ScriptedEngine
    from kimik3.eval import evaluate, read_results

    folder = write_task(tmp_path / "suite", "t", "x", "true", {"a.txt": "x\n"})
    os.mkfifo(folder / "workspace" / "pipe")
    loaded = load_suite(tmp_path / "suite")  # the digest never opens it either
    anyio.run(lambda: evaluate(loaded, ScriptedEngine(["done"]), tmp_path / "out"))
    (r,), _ = read_results(tmp_path / "out" / "results.jsonl")
    assert (r.stop_reason, r.passed) == ("setup_failed", False)
    assert r.error is not None and r.error.startswith("EvalError: ") and r.error.endswith(
        "pipe is not a regular file; a task's files must be")


def test_a_repo_checkout_runs_no_hook_or_filter_and_takes_no_git_variable(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The checkout of a task's repo runs no hook (the user's template hooks copied into the clone:
    before, post-checkout ran), no filter the source repository names, and no ``GIT_*`` variable of
    kimik3's environment reaches git (before: ``GIT_DIR`` sent the clone's checkout elsewhere)."""
    import shlex
    import subprocess

    marker = tmp_path / "marker"
    mark = tmp_path / "mark"
    mark.write_text(f'#!/bin/sh\necho "$0 $*" >> {shlex.quote(str(marker))}\nexec cat\n')
    mark.chmod(0o755)
    templates = tmp_path / "templates" / "hooks"
    templates.mkdir(parents=True)
    for hook in ("post-checkout", "reference-transaction", "post-index-change"):
        (templates / hook).write_bytes(mark.read_bytes())
        (templates / hook).chmod(0o755)
    source = tmp_path / "suite" / "_repos" / "r"
    source.mkdir(parents=True)

    def git(*args: str, cwd: Path = source) -> str:
        return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout

    git("init", "-q")
    (source / "a.txt").write_text("alpha\n")
    (source / ".gitattributes").write_text("*.txt filter=k\n")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@x", "commit", "-qm", "one")
    git("config", "filter.k.smudge", str(mark))  # the source's: never copied by a clone
    (source / ".git" / "hooks" / "post-checkout").write_bytes(mark.read_bytes())
    (source / ".git" / "hooks" / "post-checkout").chmod(0o755)
    write_task(tmp_path / "suite", "t", "x", "true", repo="../_repos/r", commit=git("rev-parse", "HEAD").strip())
    task = load_suite(tmp_path / "suite").tasks[0]
    (tmp_path / "gitconfig").write_text(f"[init]\n\ttemplateDir = {tmp_path / 'templates'}\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "gitconfig"))  # the user's own: still read
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        monkeypatch.setenv(name, str(tmp_path / "elsewhere"))
    attempt = anyio.run(prepare_attempt, task)
    try:
        assert (attempt.workspace / "a.txt").read_text() == "alpha\n"
        assert not marker.exists(), marker.read_text()
        assert not (tmp_path / "elsewhere").exists()
        for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
            monkeypatch.delenv(name)
        git("clone", "-q", str(source), str(tmp_path / "plain"), cwd=tmp_path)  # control: plain git runs the hook
        assert f"{tmp_path}/plain/.git/hooks/post-checkout " in marker.read_text()
    finally:
        attempt.remove()
