"""An attempt's own directory: a fresh copy of the task's workspace (or a git checkout), a copy
of the task folder, and shell commands (``setup``, ``check``) run there with a time limit.

The suite is only read: ``workspace/`` is copied with its symlinks as symlinks (never followed
out of the suite), a ``repo`` is cloned with ``--no-hardlinks`` (no file of the clone shares an
inode with the suite's), and the check's ``$KIMIK3_EVAL_TASK_DIR`` is a copy too. A command runs
in its own session (process group); when it ends, overruns its limit or is cancelled, the whole
group is killed, so nothing it started outlives it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.to_thread

from .._exceptions import EvalError
from ._suite import EvalTask

__all__ = ["Attempt", "CommandResult", "prepare_attempt", "run_command"]

OUTPUT_CHARS = 4000
"""A command's output is kept up to this many characters (its tail)."""


@dataclass(frozen=True)
class CommandResult:
    """How a shell command ended.

    Attributes:
        exit_code: its exit status (negative: killed by that signal; None: timed out).
        output: the tail of its stdout and stderr, interleaved (at most :data:`OUTPUT_CHARS`).
        timed_out: it overran its limit and was killed (with everything it started).
    """

    exit_code: int | None
    output: str
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        """It exited 0."""
        return self.exit_code == 0


@dataclass(frozen=True)
class Attempt:
    """The directories of one attempt (all under :attr:`root`, removed afterwards).

    Attributes:
        root: the attempt's temporary directory.
        workspace: where the agent, ``setup`` and ``check`` work.
        task_dir: a copy of the task folder without ``workspace/``.
        answer: the file that receives the agent's final answer (``$KIMIK3_EVAL_ANSWER``).
    """

    root: Path
    workspace: Path
    task_dir: Path
    answer: Path

    def remove(self) -> None:
        """Delete the attempt's directory (symlinks inside are removed, never followed)."""
        shutil.rmtree(self.root, ignore_errors=True)


def _is_url(repo: str) -> bool:
    return "://" in repo or repo.startswith("git@")


def _git(what: str, *args: str) -> None:
    try:
        subprocess.run(["git", *args], check=True, capture_output=True, text=True, timeout=600,
                       stdin=subprocess.DEVNULL, env={**os.environ, "GIT_TERMINAL_PROMPT": "0"})
    except FileNotFoundError:
        raise EvalError("the task's repo needs git, which is not installed") from None
    except subprocess.CalledProcessError as e:
        raise EvalError(f"git {what} failed: {(e.stderr or e.stdout or '').strip()[-300:]}") from None
    except subprocess.TimeoutExpired:
        raise EvalError(f"git {what} took more than 600 s") from None


def _copy_regular(src: str, dst: str) -> str:
    """shutil.copy2 for regular files only: a FIFO would block the copy forever, a device would
    copy its endless stream."""
    if not stat.S_ISREG(os.lstat(src).st_mode):
        raise EvalError(f"{src} is not a regular file; a task's files must be")
    return str(shutil.copy2(src, dst))


def _prepare(task: EvalTask) -> Attempt:
    root = Path(tempfile.mkdtemp(prefix=f"kimik3-eval-{task.name[:40]}-"))
    try:
        workspace, task_dir = root / "workspace", root / "task"
        shutil.copytree(task.path, task_dir, symlinks=True, ignore=shutil.ignore_patterns("workspace"),
                        copy_function=_copy_regular)
        if task.workspace is not None:
            shutil.copytree(task.workspace, workspace, symlinks=True, copy_function=_copy_regular)
        elif task.repo is not None and task.commit is not None:
            source = task.repo if _is_url(task.repo) else str((task.path / task.repo).resolve())
            _git("clone", "clone", "--quiet", "--no-hardlinks", "--no-checkout", source, str(workspace))
            _git("checkout", "-C", str(workspace), "checkout", "--quiet", "--detach", task.commit)
        else:
            workspace.mkdir()
        answer = root / "answer.txt"
        answer.write_text("", encoding="utf-8")
        return Attempt(root=root, workspace=workspace, task_dir=task_dir, answer=answer)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise


async def prepare_attempt(task: EvalTask) -> Attempt:
    """A fresh directory for one attempt of ``task`` (in a worker thread).

    Raises:
        EvalError: the repo cannot be cloned or the commit checked out, or the task holds a
            file that is not a regular file (a FIFO, a socket, a device).
        OSError: the copy failed (disk full, an unreadable file in the suite).
    """
    return await anyio.to_thread.run_sync(_prepare, task)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def run_command(command: str, cwd: Path, *, timeout: float, env: dict[str, str] | None = None) -> CommandResult:
    """Run ``bash -c command`` in ``cwd`` with stdin from /dev/null, in its own process group.

    Args:
        command: the shell command.
        cwd: its working directory.
        timeout: seconds before it (and everything it started) is killed.
        env: extra environment variables (over this process's).

    Returns:
        The :class:`CommandResult`. When the command exits, anything it left running in its
        process group is killed too; on cancellation the group is killed before this returns.
    """
    shell = shutil.which("bash") or "/bin/sh"
    process = await anyio.open_process([shell, "-c", command], cwd=cwd, env={**os.environ, **(env or {})},
                                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, start_new_session=True)
    chunks: list[bytes] = []
    kept = 0

    async def read() -> None:
        nonlocal kept
        assert process.stdout is not None
        async for chunk in process.stdout:
            chunks.append(chunk)
            kept += len(chunk)
            while kept - len(chunks[0]) >= 4 * OUTPUT_CHARS:  # keep 4 bytes a character: room for UTF-8
                kept -= len(chunks.pop(0))

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(read)
            with anyio.move_on_after(timeout):
                await process.wait()
            timed_out = process.returncode is None
            _kill_group(process.pid)  # what it left running (or all of it, timed out): the pipe closes
            group.cancel_scope.deadline = anyio.current_time() + 30  # a process that left the group
    finally:
        _kill_group(process.pid)
        with anyio.CancelScope(shield=True):
            await process.wait()
            await process.aclose()
    output = b"".join(chunks).decode("utf-8", "replace")[-OUTPUT_CHARS:]
    return CommandResult(exit_code=None if timed_out else process.returncode, output=output, timed_out=timed_out)
