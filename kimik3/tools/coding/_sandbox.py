"""Where ``bash``'s commands run: one bubblewrap sandbox per run (``sandbox="bwrap"``), or the same
process supervisor without one (``"none"``); ``"auto"`` picks bwrap where it works.

The sandbox is started at the first command and holds every process a command starts, foreground
or background, until :meth:`Sandbox.close` (the end of the run, with :class:`kimik3.harness.CodingHarness`;
or when the sandbox is garbage-collected, or this process exits). Inside, per bubblewrap (see
``docs/sandbox.md``): the workspace read-write, the rest of the filesystem read-only, ``$HOME``,
``/tmp``, ``/var/tmp`` and ``/run`` empty (private tmpfs) except the paths allowed, a fresh
``/dev`` and ``/proc`` (``/proc/sys`` read-only), no capabilities and no nested user namespace,
new PID / IPC / UTS namespaces and, unless ``network=True``, a network namespace with only a
loopback interface: shared by the run's commands, so a server started in the background answers
a later command on 127.0.0.1, and nothing outside answers. The sandbox's first process is the
supervisor of ``_reaper``; when it ends (or this process dies: ``--die-with-parent``), the kernel
ends every process in the namespace.

Limits (:class:`ProcessLimits`, set on each command's shell and inherited): address space that is
data (``RLIMIT_DATA``), file size, CPU seconds per process, and a count of processes per command
watched by its reaper (plus ``RLIMIT_NPROC`` for the whole sandbox where the kernel counts it per
user namespace: bwrap run by a user other than root).
"""

from __future__ import annotations

import array
import contextlib
import functools
import glob
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import warnings
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import anyio

from ..._exceptions import SandboxUnavailableError, ToolError, UserError
from . import _reaper
from ._cgroup import PidsCgroup
from ._git_links import restore_git_links
from ._kept import MAX_WALK_DIRS, SessionFiles, hidden_dirs, kept_read_only, preloads, under

__all__ = ["ProcessLimits", "Sandbox", "SandboxMode"]

SandboxMode = Literal["auto", "bwrap", "none"]

_SOURCE = Path(_reaper.__file__).read_bytes()
_READY_S = 30.0  # a loaded machine may take a while to start bwrap and Python
_CLOSE_S = 6.0  # the supervisor's SIGTERM second and SIGKILL round, with room
_NS_FLAGS = ("--die-with-parent", "--new-session", "--unshare-user", "--disable-userns", "--unshare-pid",
             "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--cap-drop", "ALL")
_INSTALL_FIX = ("install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap; "
                "or bash scripts/setup_ui.sh in a kimik3 checkout)")
_USERNS_FIX = ("allow user namespaces: sysctl kernel.unprivileged_userns_clone=1 (Debian); on Ubuntu 23.10+ an "
               "AppArmor profile for bwrap that allows userns, or sysctl "
               "kernel.apparmor_restrict_unprivileged_userns=0; in a container, one that permits unshare(2)")
_GIB = 1 << 30
_ROOT_SECRETS = ("/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/ssh/ssh_host_*_key",
                 "/etc/sudoers", "/etc/sudoers.d/*")


@dataclass(frozen=True)
class ProcessLimits:
    """Resource limits of the commands ``bash`` runs (None: no limit). Each is reported in the tool
    result when a command reaches it (the processes count, the CPU and file-size signals); a
    program whose allocation fails reports it itself (``MemoryError``, ``Cannot allocate memory``).

    Attributes:
        processes: processes one command may have at once (its reaper counts them every 0.1 s and
            kills them all at the limit); with bwrap run by a user other than root the kernel
            also refuses forks past 4x this many tasks in the whole sandbox (``RLIMIT_NPROC``).
        memory_bytes: data memory per process (``RLIMIT_DATA``: heap and private mappings, not
            reserved address space, so JIT runtimes still start).
        file_bytes: the largest file a process may write (``RLIMIT_FSIZE``; past it, SIGXFSZ).
        cpu_seconds: CPU time per process (``RLIMIT_CPU``; past it, SIGXCPU).
    """

    processes: int | None = 1024
    memory_bytes: int | None = 8 * _GIB
    file_bytes: int | None = 8 * _GIB
    cpu_seconds: int | None = 3600


def _bwrap() -> str | None:
    return shutil.which("bwrap")


@functools.lru_cache(maxsize=4)
def _probe(bwrap: str) -> str | None:
    """None when ``bwrap`` can build kimik3's sandbox here (tried once per process), else why not."""
    true = shutil.which("true") or "/bin/true"
    try:
        done = subprocess.run([bwrap, *_NS_FLAGS, "--unshare-net", "--ro-bind", "/", "/", "--dev", "/dev",
                               "--proc", "/proc", "--", true], stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=_READY_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{bwrap} did not run: {e}"
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", "replace").strip().splitlines() or [f"exit code {done.returncode}"]
        return f"{bwrap} cannot create its namespaces here ({why[-1]})"
    return None


def _resolve(mode: str) -> tuple[Literal["bwrap", "none"], str | None]:
    """(the sandbox that runs, why it is not bwrap when ``mode`` is "auto").

    Raises:
        UserError: an unknown mode.
        SandboxUnavailableError: "bwrap" where it cannot run (the fix named).
    """
    if mode not in ("auto", "bwrap", "none"):
        raise UserError(f"sandbox must be 'auto', 'bwrap' or 'none', got {mode!r}")
    if mode == "none":
        return "none", None
    bwrap = _bwrap()
    reason: str | None
    if not sys.platform.startswith("linux"):
        reason, fix = f"bubblewrap needs Linux (this is {sys.platform})", "run on Linux"
    elif bwrap is None:
        reason, fix = "bubblewrap (bwrap) is not installed", _INSTALL_FIX
    else:
        reason, fix = _probe(bwrap), _USERNS_FIX
    if reason is None:
        return "bwrap", None
    if mode == "bwrap":
        raise SandboxUnavailableError(f"sandbox='bwrap' but {reason}; to fix it, {fix}; or run unsandboxed "
                                      "with sandbox='none' (--sandbox none)")
    return "none", reason


def _existing(paths: Any, what: str) -> list[str]:
    """``paths`` resolved, each an existing path.

    Raises:
        UserError: a path that does not exist, or a lone string instead of a list.
    """
    if isinstance(paths, (str, os.PathLike)):
        raise UserError(f"{what} takes a list of paths, not one path ({paths!r})")
    out = []
    for p in paths:
        real = os.path.realpath(os.path.expanduser(os.fspath(p)))
        if not os.path.exists(real):
            raise UserError(f"{what}: {p} does not exist")
        out.append(real)
    return out


class _Supervisor:
    """The running supervisor: its process (bwrap's, or its own), its socket, its stderr, and the
    pids cgroup it runs in (None where none can be made)."""

    def __init__(self, argv: list[str], root: Path, max_tasks: int | None) -> None:
        # Started from the calling thread (the event loop's): bwrap's --die-with-parent follows the
        # thread that forked it, so a worker thread that exits would end the sandbox.
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.cgroup: PidsCgroup | None = None
        try:
            self.proc = subprocess.Popen([*argv, str(theirs.fileno())], cwd=root, stdin=subprocess.PIPE,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, pass_fds=(theirs.fileno(),),
                                         start_new_session=True, env={"PATH": os.environ.get("PATH", os.defpath)})
        except OSError as e:
            self.sock.close()
            raise ToolError(f"cannot start the command supervisor ({argv[0]}): {e}") from None
        finally:
            theirs.close()
        assert self.proc.stdin is not None
        with contextlib.suppress(OSError), self.proc.stdin:  # fits the pipe's buffer; Python reads it all, runs it
            self.proc.stdin.write(_SOURCE)
        self.sock.settimeout(_READY_S)
        try:
            ready = self.sock.recv(64)
        except OSError:
            ready = b""
        self.sock.settimeout(None)
        assert self.proc.stderr is not None
        if not ready.startswith(b"ready"):
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(5.0)
            os.set_blocking(self.proc.stderr.fileno(), False)
            said = b""
            with contextlib.suppress(OSError):
                said = self.proc.stderr.read(4000) or b""
            why = said.decode("utf-8", "replace").strip() or f"exit code {self.proc.poll()}"
            self.abandon()
            raise ToolError(f"the sandbox did not start: {why}")
        self.proc.stderr.close()  # read only if it does not start; a later writer gets EPIPE
        self.contained = ready == b"ready"
        if max_tasks:  # it forks nothing before the first request: move it (and bwrap's) in now
            try:
                self.cgroup = PidsCgroup(max_tasks)
                self.cgroup.add([self.proc.pid, *_reaper.descendants(self.proc.pid)])
            except OSError:
                if self.cgroup is not None:
                    self.cgroup.remove()
                self.cgroup = None

    def alive(self) -> bool:
        return self.sock.fileno() >= 0 and self.proc.poll() is None

    def send(self, request: dict[str, Any], fds: list[int]) -> None:
        fds_part = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())] if fds else []
        self.sock.sendmsg([json.dumps(request).encode()], fds_part)

    def abandon(self) -> None:
        """Close the socket (the supervisor ends everything and exits); no waiting."""
        self.sock.close()
        if self.proc.stderr is not None:
            self.proc.stderr.close()

    def release(self) -> None:
        """:meth:`abandon`, then, in a thread, wait for the supervisor and end its cgroup (the
        sandbox was garbage-collected without being closed)."""
        self.abandon()
        if self.cgroup is not None:
            threading.Thread(target=self._wait_and_end, daemon=True, name="kimik3-sandbox-release").start()

    def _wait_and_end(self) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(_CLOSE_S)
        if self.proc.poll() is None:
            self.kill_now()
        self.end_cgroup()

    def kill_now(self) -> None:
        """The supervisor did not exit in time: SIGKILL it (bwrap's: the namespace dies with it)
        and, without a PID namespace, every process below it first."""
        for pid in _reaper.descendants(self.proc.pid):
            with contextlib.suppress(OSError):
                os.kill(pid, 9)
        with contextlib.suppress(OSError):
            self.proc.kill()

    def end_cgroup(self) -> None:
        """Whatever is still in the cgroup (a process that escaped the supervisor's tree): SIGKILL;
        then remove it."""
        if self.cgroup is not None:
            self.cgroup.kill_all()
            self.cgroup.remove()


class Command:
    """One command started in the sandbox: its output pipe, its reaper's status and control pipes
    (see ``_reaper``); every descriptor non-blocking, owned here.

    Attributes:
        output: the read end of the command's stdout + stderr.
        exit_code: the shell's exit code (``-S`` for signal S) once reported.
        left: pids (inside the sandbox) still running after the shell exited, once asked (``q``).
        survivors: pids still alive after a kill.
        limit: "processes N" when the command reached the process limit and was killed.
        contained: False when the kernel refused a subreaper (daemons may escape).
        closed: the reaper has exited: nothing of the command is left.
        note: a line about the sandbox to add to the result (it was restarted), or None.
    """

    def __init__(self, sandbox: Sandbox, cid: int, output: int, status: int, control: int, note: str | None) -> None:
        self.sandbox, self.id, self.note = sandbox, cid, note
        self.output, self.status_fd, self.control = output, status, control
        for fd in (output, status, control):
            os.set_blocking(fd, False)
        self._buffer = b""
        self.exit_code: int | None = None
        self.left: list[int] | None = None
        self.survivors: list[int] = []
        self.limit: str | None = None
        self.error: str | None = None
        self.contained = True
        self.closed = False

    def poll(self) -> None:
        """Read what the reaper reported since the last poll."""
        if self.closed:
            return
        with contextlib.suppress(BlockingIOError, OSError):
            while chunk := os.read(self.status_fd, 4096):
                self._buffer += chunk
            self.closed = True
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            word, _, rest = line.decode("utf-8", "replace").partition(" ")
            if word == "exit":
                self.exit_code = int(rest)
            elif word == "left":
                self.left = [int(p) for p in rest.split()]
            elif word == "survivors":
                self.survivors = [int(p) for p in rest.split()]
            elif word == "limit":
                self.limit = rest
            elif word == "error":
                self.error = rest
            elif word == "noreaper":
                self.contained = False

    def send(self, byte: bytes) -> bool:
        """Send ``q``, ``t`` or ``k`` to the reaper; False when it is gone."""
        try:
            return os.write(self.control, byte) == 1
        except OSError:
            return False

    def kill(self) -> None:
        """The fallback when the reaper does not answer: the supervisor SIGKILLs what is left."""
        self.sandbox.kill(self.id)

    def close(self) -> None:
        for fd in (self.output, self.status_fd, self.control):
            with contextlib.suppress(OSError):
                os.close(fd)


class Sandbox:
    """The sandbox (or, with ``mode="none"``, the plain process supervisor) ``bash`` runs its
    commands in, one per run: see the module docstring and ``docs/sandbox.md``.

    Args:
        root: the workspace (read-write inside).
        mode: "auto" (bwrap where it works, checked once per process; else unsandboxed, with a
            one-line :class:`RuntimeWarning`), "bwrap" (required) or "none" (no sandbox; the
            supervisor and the limits still apply).
        network: keep the host's network (and its abstract unix sockets) instead of a private one.
        read: more paths visible read-only (e.g. ``~/.gitconfig``, a toolchain under ``$HOME``).
        write: more paths writable (e.g. a cache directory).
        limits: the resource limits (default :class:`ProcessLimits`).

    Raises:
        SandboxUnavailableError: ``mode="bwrap"`` where bubblewrap cannot run (the fix named).
        UserError: an unknown mode, or a ``read`` / ``write`` path that does not exist.
    """

    def __init__(self, root: str | os.PathLike[str], mode: SandboxMode = "auto", *, network: bool = False,
                 read: Any = (), write: Any = (), limits: ProcessLimits | None = None) -> None:
        self.root = Path(root).resolve()
        self.requested = mode
        self.network = network
        self.read = _existing(read, "sandbox_read")
        self.write = _existing(write, "sandbox_write")
        self.limits = limits if limits is not None else ProcessLimits()
        self.mode, self.reason = _resolve(mode)
        if self.reason is not None:
            warnings.warn(f"kimik3: {self.describe()}", RuntimeWarning, stacklevel=2)
        self.protected: list[str] = []
        self.sessions = SessionFiles()
        self.preloaded: list[str] = []  # LD_PRELOAD libraries under a hidden folder, made visible
        self.git_links: dict[str, str] = {}  # each .git symlink of the start -> its target (_git_links)
        self._sup: _Supervisor | None = None
        self._n = 0
        self._starts = 0
        self._lock = threading.Lock()
        self._finalizer: weakref.finalize[Any, Any] | None = None

    def protect(self, paths: Any) -> None:
        """Keep ``paths`` (files kimik3 itself writes during the run: its session files) read-only
        inside the sandbox where they lie in the workspace, from its next start on (a running
        sandbox's mounts cannot change: the run's hooks call this before its first command).
        Replaces what an earlier call named; a path that does not exist then is left out. The run's
        session files are :attr:`sessions` (:class:`~kimik3.tools.coding._kept.SessionFiles`, which
        the file tools refuse too); an allowed write path never lifts either.

        Args:
            paths: an iterable of paths (str or PathLike).
        """
        self.protected = [os.path.realpath(os.fspath(p)) for p in paths]

    def restore_git_links(self) -> list[str]:
        """Put back each ``.git`` symlink of the sandbox's start that a command replaced or
        removed (a bind mount cannot keep a symlink; see ``_git_links``): a line for the tool
        result for each (also a :class:`RuntimeWarning`)."""
        return restore_git_links(self.root, self.git_links) if self.git_links else []

    def describe(self) -> str:
        """One line saying which sandbox runs the commands, e.g. ``sandbox: bwrap (workspace
        read-write, the rest read-only, home hidden, network off)``."""
        if self.mode == "bwrap":
            extra = "".join(f", {len(p)} more {what}" for p, what in ((self.read, "readable"), (self.write, "writable"))
                            if p)
            net = "network on" if self.network else "network off"
            return f"sandbox: bwrap (workspace read-write, the rest read-only, home hidden{extra}, {net})"
        if self.reason is None:
            return "sandbox: none (commands run unsandboxed, with your rights)"
        return f"sandbox: none ({self.reason}; commands run unsandboxed, with your rights)"

    def info(self) -> dict[str, Any]:
        """What a session records about the sandbox (its header's ``sandbox`` field)."""
        out: dict[str, Any] = {"mode": self.mode, "requested": self.requested}
        if self.mode == "bwrap":
            out.update(network=self.network, read=self.read, write=self.write)
        if self.reason is not None:
            out["reason"] = self.reason
        return out

    # -- the supervisor --------------------------------------------------------------------------

    def _argv(self) -> list[str]:
        python = os.path.realpath(sys.executable)
        argv = [python, "-I", "-S", "-", "supervise"]  # the source on stdin
        return argv if self.mode == "none" else [_bwrap() or "bwrap", *self._bwrap_args(python), "--", *argv]

    def _bwrap_args(self, python: str) -> list[str]:
        """bubblewrap's options: namespaces, then mounts in order (later ones cover earlier ones)."""
        # each private tmpfs (memory) holds at most the memory limit: a balloon of files is bounded too
        size = ["--size", str(self.limits.memory_bytes)] if self.limits.memory_bytes else []
        args = [*_NS_FLAGS, *(() if self.network else ("--unshare-net",)),
                "--ro-bind", "/", "/", "--dev", "/dev", *size, "--tmpfs", "/dev/shm", "--proc", "/proc",
                "--ro-bind", "/proc/sys", "/proc/sys", "--ro-bind-try", "/proc/sysrq-trigger", "/proc/sysrq-trigger"]
        hidden = hidden_dirs()
        for d in hidden:
            args += [*size, "--tmpfs", d]
        visible = list(self.read)
        if self.network:  # name resolution: /etc/resolv.conf may point into /run (systemd-resolved)
            resolv = os.path.realpath("/etc/resolv.conf")
            if under(resolv, hidden):
                visible.append(os.path.dirname(resolv))
        for needed in (os.path.dirname(python), sys.base_prefix):  # the supervisor's own interpreter
            if under(os.path.realpath(needed), hidden):
                visible.append(os.path.realpath(needed))
        self.preloaded = [lib for lib in preloads(os.environ) if under(lib, hidden)]  # vLLM's libgomp
        visible += self.preloaded
        for p in visible:
            args += ["--ro-bind-try", p, p]
        for secret in _ROOT_SECRETS:  # readable by root (the owner) even without capabilities: hidden
            for p in sorted(glob.glob(secret)):
                if not under(p, self.read):
                    args += ["--ro-bind", "/dev/null", p]
        for p in (str(self.root), *self.write):
            args += ["--bind", p, p]
        # What git run outside the sandbox (kimik3's checkpoints, the user's own git) executes from a
        # repository (filters, hooks, fsmonitor, commondir / gitdir pointing at a planted config)
        # stays read-only, and so do the session files kimik3 writes (an approval appended there
        # would be acted on): see _kept. Each is made a mount point (so it cannot be renamed away
        # and replaced), and so is each folder between it and the workspace. An allowed write path
        # lifts only the git control data it lies in or names (``<ws>/.git``, ``<ws>/.git/objects``:
        # bound writable again after), never a repository below it, never a session file.
        root, tops = str(self.root), [str(self.root), *self.write]
        records = list(dict.fromkeys(p for p in (*self.protected, *self.sessions.existing())
                                     if under(p, tops) and p != root and os.path.lexists(p)))
        links: dict[str, str] = {}
        pinned: list[str] = []  # checked-out submodules' folders: mount points, so never replaced (_kept)
        gits = list(dict.fromkeys(p for w in (root, *self.write)
                                  for p in kept_read_only(w, MAX_WALK_DIRS if w == root else 1, links, pinned)))
        self.git_links = {os.path.relpath(p, root): t for p, t in links.items() if under(p, [root])}
        lifted = [w for w in self.write if w != root and any(under(w, [g]) for g in gits)]
        gits = [g for g in gits if not under(g, lifted) and g not in records]
        kept = [*gits, *records]
        folders = {str(d) for p in kept if os.path.basename(p) != ".git" for d in Path(p).parents
                   if under(str(d), tops) and str(d) not in tops}
        folders |= {str(d) for p in pinned for d in (Path(p), *Path(p).parents) if under(str(d), tops)
                    and str(d) not in tops}
        for d in sorted(folders, key=len):
            args += ["--bind", d, d]
        for p in sorted(gits, key=len):
            args += ["--ro-bind", p, p]
        for w in sorted(lifted, key=len):
            args += ["--bind", w, w]
        for p in sorted(records, key=len):
            args += ["--ro-bind", p, p]
        return [*args, "--chdir", str(self.root)]

    def _supervisor(self) -> tuple[_Supervisor, str | None]:
        """The running supervisor, started now if needed; with a note when it had to be restarted."""
        note = None
        if self._sup is not None and not self._sup.alive():
            self._sup.release()  # what it left in its cgroup goes too
            self._sup = None
            note = ("[the sandbox had ended (a command killed its supervisor?); a new one was started: processes "
                    "left by earlier commands are gone]")
        if self._sup is None:
            tasks = self.limits.processes
            self._sup = _Supervisor(self._argv(), self.root, 4 * tasks + 64 if tasks else None)
            self._starts += 1
            if self._finalizer is not None:
                self._finalizer.detach()
            self._finalizer = weakref.finalize(self, self._sup.release)
        return self._sup, note

    def _visiblepreloads(self, env: dict[str, str]) -> dict[str, str]:
        """``env`` with only the ``LD_PRELOAD`` libraries visible inside bwrap (:attr:`preloaded`)."""
        if self.mode != "bwrap" or not env.get("LD_PRELOAD"):
            return env
        hidden = hidden_dirs()
        kept = [lib for lib in env["LD_PRELOAD"].replace(":", " ").split() if not os.path.isabs(lib)
                or os.path.abspath(lib) in self.preloaded or not under(os.path.abspath(lib), hidden)]
        return {**env, "LD_PRELOAD": " ".join(kept)}

    def spawn(self, argv: list[str], env: dict[str, str], *, grace: float = 1.0, cpu: bool = True) -> Command:
        """Start ``argv`` (a shell) in the sandbox with ``env``; the sandbox starts at the first call.

        Args:
            argv: the program and its arguments; ``argv[0]`` an absolute path.
            env: its environment (``TMPDIR`` becomes ``/tmp`` inside bwrap).
            grace: seconds between SIGTERM and SIGKILL when it is ended (``t``).
            cpu: apply the CPU-time limit (off for long-running background servers).

        Returns:
            The :class:`Command`; every descriptor in it is the caller's to close.

        Raises:
            ToolError: the sandbox cannot be started (bwrap's or Python's message).
        """
        limits = self.limits
        rlimits = {name: value for name, value in (("DATA", limits.memory_bytes), ("FSIZE", limits.file_bytes),
                                                   ("CPU", limits.cpu_seconds if cpu else None)) if value}
        if limits.processes and self.mode == "bwrap" and os.geteuid() != 0:
            rlimits["NPROC"] = 4 * limits.processes  # counted in the sandbox's user namespace
        if self.mode == "bwrap" and "TMPDIR" in env:
            env = {**env, "TMPDIR": "/tmp"}
        out_r, out_w = os.pipe()
        status_r, status_w = os.pipe()
        control_r, control_w = os.pipe()
        try:
            with self._lock:
                self._n += 1
                cid = self._n
                sup, note = self._supervisor()
                request = {"spawn": cid, "argv": argv, "cwd": str(self.root), "env": self._visiblepreloads(env),
                           "rlimits": rlimits, "max_processes": limits.processes, "grace": grace}
                try:
                    sup.send(request, [out_w, status_w, control_r])
                except OSError:  # it died just now: once more, in a new one
                    sup.release()
                    self._sup = None
                    sup, note = self._supervisor()
                    sup.send(request, [out_w, status_w, control_r])
            command = Command(self, cid, out_r, status_r, control_w, note)
        except BaseException:
            for fd in (out_r, status_r, control_w):
                os.close(fd)
            raise
        finally:
            for fd in (out_w, status_w, control_r):
                os.close(fd)
        if not sup.contained:
            command.contained = False
        return command

    def kill(self, command_id: int) -> None:
        """Ask the supervisor to SIGKILL what command ``command_id`` left (see ``_reaper``)."""
        with self._lock:
            if self._sup is not None and self._sup.alive():
                with contextlib.suppress(OSError):
                    self._sup.send({"kill": command_id}, [])

    def _stop(self) -> _Supervisor | None:
        with self._lock:
            sup, self._sup = self._sup, None
            if self._finalizer is not None:
                self._finalizer.detach()
                self._finalizer = None
        if sup is not None:
            sup.sock.close()  # end of file: the supervisor ends every process and exits
        return sup

    async def aclose(self) -> None:
        """End every process of the sandbox and the sandbox itself (waits until they are gone,
        at most ~6 s); the next command starts a new one. Safe to call twice."""
        sup = self._stop()
        if sup is None:
            return
        end = time.monotonic() + _CLOSE_S
        while sup.proc.poll() is None and time.monotonic() < end:
            await anyio.sleep(0.01)
        self._finish(sup)

    def close(self) -> None:
        """:meth:`aclose` for synchronous callers (blocks while the processes end)."""
        sup = self._stop()
        if sup is None:
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            sup.proc.wait(_CLOSE_S)
        self._finish(sup)

    @staticmethod
    def _finish(sup: _Supervisor) -> None:
        if sup.proc.poll() is None:
            sup.kill_now()
            with contextlib.suppress(subprocess.TimeoutExpired):
                sup.proc.wait(2.0)
        sup.end_cgroup()
        sup.abandon()

    @property
    def running(self) -> bool:
        """Whether the sandbox is started now."""
        return self._sup is not None and self._sup.alive()

