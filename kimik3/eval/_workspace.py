"""An attempt's own directory: a fresh copy of the task's workspace (or a git checkout), a copy
of the task folder, and shell commands (``setup``, ``check``) run there with a time limit.

The suite is only read: ``workspace/`` is copied with its symlinks as symlinks (never followed
out of the suite), a ``repo`` that is a directory is cloned with ``--no-local`` (git's sanitized
clone, gitsecurityboundary(7): through ``upload-pack``, which runs nothing the source repository
names, and no file of the clone shares an inode with the suite's; the clone's checkout runs no
hook, and its checkpoints run git without its configuration, :mod:`kimik3.harness._git`), and
the check's ``$KIMIK3_EVAL_TASK_DIR`` is a copy too. A command runs
in a :class:`~kimik3.tools.coding.Sandbox` of its own (bubblewrap, or ``"none"``: the same
process supervisor unsandboxed), under the supervisor's reaper: when the command ends, overruns
its limit or is cancelled, the sandbox is closed and every process it started is ended with it
(``setsid`` and double-forked daemons included).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.to_thread

from .._exceptions import EvalError
from ..harness import SAFE_CONFIG, clean_env
from ..tools.coding import Sandbox
from ..tools.coding.api import Command
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
    """``git <args>`` as kimik3 runs git on a workspace (:mod:`kimik3.harness._git`): no hook, fsmonitor
    or other program of a configuration's runs (the user's own included), no ``GIT_*`` variable of
    kimik3's environment leaks in, no prompt."""
    try:
        subprocess.run(["git", "--no-pager", *SAFE_CONFIG, *args], check=True, capture_output=True, text=True,
                       timeout=600, stdin=subprocess.DEVNULL, env=clean_env(network=True))
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
            local = [] if _is_url(task.repo) else ["--no-local"]  # git's sanitized clone of a directory
            _git("clone", "clone", "--quiet", *local, "--no-checkout", source, str(workspace))
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


class _Tail:
    """The last bytes of a command's output: about 4 a character of :data:`OUTPUT_CHARS` (room
    for UTF-8)."""

    def __init__(self) -> None:
        self.data = bytearray()

    def read(self, fd: int) -> bool:
        """Append what the pipe ``fd`` holds now; True at end of file."""
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                return False
            except OSError:
                return True
            if not chunk:
                return True
            self.data += chunk
            if len(self.data) > 8 * OUTPUT_CHARS:
                del self.data[: -4 * OUTPUT_CHARS]

    def text(self) -> str:
        return self.data.decode("utf-8", "replace")


async def _wait_readable(fd: int, seconds: float) -> None:
    with anyio.move_on_after(seconds):
        await anyio.wait_readable(fd)


def _note(cmd: Command, timed_out: bool) -> str:
    """A line to add to the output when the command did not simply exit (or time out)."""
    if cmd.error is not None:
        return f"[kimik3: the command could not be started: {cmd.error}]\n"
    if cmd.limit:
        return f"[kimik3: the command reached the limit of {cmd.limit.split()[-1]} processes; all were killed]\n"
    if cmd.exit_code is None and not timed_out:
        return "[kimik3: the command's reaper was killed, so its exit status is unknown]\n"
    return ""


async def run_command(command: str, sandbox: Sandbox, *, timeout: float,
                      env: dict[str, str] | None = None) -> CommandResult:
    """Run ``bash -c command`` in ``sandbox`` (its root the working directory, stdin /dev/null),
    then close the sandbox.

    Args:
        command: the shell command.
        sandbox: where it runs (bubblewrap, or ``"none"``); closed before this returns, ending
            every process the command started (SIGTERM, a second, SIGKILL), also on timeout
            and on cancellation.
        timeout: seconds before it (and everything it started) is ended.
        env: extra environment variables (over this process's).

    Returns:
        The :class:`CommandResult` (a command the sandbox could not start, or whose reaper was
        killed, has a line saying so in its output).

    Raises:
        ToolError: the sandbox cannot be started (bubblewrap's or Python's message).
    """
    shell = shutil.which("bash") or "/bin/sh"
    tail = _Tail()
    timed_out = False
    try:
        cmd = sandbox.spawn([shell, "-c", command], {**os.environ, **(env or {})})
    except BaseException:
        with anyio.CancelScope(shield=True):
            await sandbox.aclose()
        raise
    try:
        deadline = anyio.current_time() + timeout
        eof = False
        while True:
            if not eof:
                eof = tail.read(cmd.output)
            cmd.poll()
            if cmd.exit_code is not None or cmd.closed:  # the shell exited (or its reaper is gone)
                break
            now = anyio.current_time()
            if now >= deadline:
                timed_out = True
                break
            await _wait_readable(cmd.status_fd if eof else cmd.output, min(deadline - now, 0.05))
    finally:
        with anyio.CancelScope(shield=True):
            await sandbox.aclose()  # what it left running (or all of it, timed out or cancelled)
            end = anyio.current_time() + 2.0
            while not tail.read(cmd.output) and anyio.current_time() < end:  # every writer is gone
                await _wait_readable(cmd.output, 0.01)
            cmd.poll()
            cmd.close()
    output = (tail.text() + _note(cmd, timed_out))[-OUTPUT_CHARS:]
    code = None if timed_out else cmd.exit_code if cmd.exit_code is not None else -9
    return CommandResult(exit_code=code, output=output, timed_out=timed_out)
