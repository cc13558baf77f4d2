"""Where ``bash``'s commands run: one sandbox per run, bubblewrap (``sandbox="bwrap"``) or Landlock
(``"landlock"``), or the same process supervisor without one (``"none"``); ``"auto"`` picks bwrap
where it works, else Landlock where the kernel has it (issue 39).

The sandbox is started at the first command and holds every process a command starts, foreground
or background, until :meth:`Sandbox.close` (the end of the run, with :class:`kimik3.harness.CodingHarness`;
or when the sandbox is garbage-collected, or this process exits). The policy is ``_policy``'s (see
``docs/sandbox.md``): the workspace read-write, the rest of the file system read-only, the
secrets unreadable, ``/tmp``, ``/var/tmp`` and ``/run`` private except the toolchain there,
credentials left out of the environment, no network unless ``network=True``. Under bubblewrap:
a fresh ``/dev`` and ``/proc`` (``/proc/sys`` read-only), no capabilities and no nested user
namespace, new PID / IPC / UTS namespaces and, unless ``network=True``, a network namespace with
only a loopback interface, shared by the run's commands; the git control data and session files
in the workspace bound read-only. Under Landlock (``_landlock``): rules applied by the
supervisor to itself, no TCP without ``network=True``, the git control data put back after each
command (``_guard``). The sandbox's first process is the supervisor of ``_reaper``; when it ends
(or this process dies: ``--die-with-parent``), every process of the sandbox ends.

The secrets are masked by path and by inode (``_masks``: the other names of a secret file found
in the home, the workspace and the allowed paths are masked too; Landlock never rules a linked
secret's inode), and before each command the secret set is compared with the one the running
supervisor was built with (``stat`` calls only): when it changed (a secret replaced by rename, made
or linked anew), the sandbox is restarted where no process of a command would be lost, else the
command's result says which secrets are unmasked until those end.

Limits (:class:`ProcessLimits`, set on each command's shell and inherited): address space that is
data (``RLIMIT_DATA``), file size, CPU seconds per process, and a count of processes per command
watched by its reaper (plus ``RLIMIT_NPROC`` for the whole sandbox where the kernel counts it per
user namespace: bwrap run by a user other than root).

Why one file past the ~600-line guide (issue 42 point 5): it is one concern, the life of one run's
sandbox (choose a backend, build its mounts or rules, start the supervisor, spawn each command,
keep the masks current, end it), and each part reads and moves the same state under one lock
(the supervisor, the active commands, the secret stamp). What stands apart already lives apart:
the policy (``_policy``), masks by inode (``_masks``), the places shown from hidden folders
(``_places``), Landlock's rules (``_landlock``), the git data's guard (``_guard``) and the
supervisor's protocol (``_supervisor`` / ``_reaper``).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import warnings
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import anyio

from ..._exceptions import SandboxUnavailableError, ToolError, UserError
from . import _landlock, _reaper
from ._git_links import restore_git_links
from ._guard import GitGuard
from ._kept import MAX_WALK_DIRS, SessionFiles, kept_read_only, under
from ._masks import SecretStamp, identity, link_counts, other_names
from ._places import enclosing_repo, existing, linked_from, prefixes, tmpfs_bytes
from ._policy import hidden_dirs, home, preloads, scrub_env, secrets, toolchain
from ._supervisor import _CLOSE_S, _READY_S, Command, _Supervisor

__all__ = ["Command", "ProcessLimits", "Sandbox", "SandboxMode"]  # Command: _supervisor's, used from here

SandboxMode = Literal["auto", "bwrap", "landlock", "none"]

_SOURCE = Path(_reaper.__file__).read_bytes()
_LANDLOCK_SOURCE = Path(_landlock.__file__).read_text()
_NS_FLAGS = ("--die-with-parent", "--new-session", "--unshare-user", "--disable-userns", "--unshare-pid",
             "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--cap-drop", "ALL")
_INSTALL_FIX = ("install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap; "
                "or bash scripts/setup_ui.sh in a kimik3 checkout)")
_USERNS_FIX = ("allow user namespaces: sysctl kernel.unprivileged_userns_clone=1 (Debian); on Ubuntu 23.10+ an "
               "AppArmor profile for bwrap that allows userns, or sysctl "
               "kernel.apparmor_restrict_unprivileged_userns=0; in a container, one that permits unshare(2)")
_GIB = 1 << 30
_MIB = 1 << 20
_LANDLOCK_FIX = "a kernel with Landlock (Linux 5.13+, enabled: lsm=landlock,... on its command line)"
_LANDLOCK_CANNOT = ("UDP and unix sockets at a path not blocked; no background jobs; cannot hide paths' existence "
                    "or isolate processes; git data checked and restored after each command, what a command left "
                    "running ended first")
_NO_BACKGROUND = ("background commands are refused under the Landlock sandbox: Landlock cannot make the git "
                  "control data read-only inside the writable workspace, so kimik3 restores it after each command "
                  "with nothing running, and a job running between calls could rewrite it (a core.fsmonitor "
                  "that the next git status outside runs); run it in the foreground, or use bwrap (--sandbox bwrap)")


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


@functools.lru_cache(maxsize=1)
def _landlock_abi() -> int:
    """The kernel's Landlock ABI (checked once per process; 0: none)."""
    return _landlock.abi() if sys.platform.startswith("linux") else 0


def _resolve(mode: str) -> tuple[Literal["bwrap", "landlock", "none"], str | None]:
    """(the sandbox that runs, why it is not bwrap when ``mode`` is "auto").

    Raises:
        UserError: an unknown mode.
        SandboxUnavailableError: "bwrap" or "landlock" where it cannot run (the fix named).
    """
    if mode not in ("auto", "bwrap", "landlock", "none"):
        raise UserError(f"sandbox must be 'auto', 'bwrap', 'landlock' or 'none', got {mode!r}")
    if mode == "none":
        return "none", None
    if mode == "landlock":
        if _landlock_abi() < 1:
            raise SandboxUnavailableError(f"sandbox='landlock' but this kernel has no Landlock ({sys.platform}); to "
                                          f"fix it, use {_LANDLOCK_FIX}; or run unsandboxed with sandbox='none' "
                                          "(--sandbox none)")
        return "landlock", None
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
    if _landlock_abi() >= 1:
        return "landlock", reason
    return "none", f"{reason}, and this kernel has no Landlock"


def _cmdline(pid: int) -> bytes:
    with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read()
    return b""


class Sandbox:
    """The sandbox (or, with ``mode="none"``, the plain process supervisor) ``bash`` runs its
    commands in, one per run: see the module docstring and ``docs/sandbox.md``.

    Args:
        root: the workspace (read-write inside).
        mode: "auto" (bwrap where it works, checked once per process; else Landlock where the
            kernel has it; else unsandboxed; a one-line :class:`RuntimeWarning` when not bwrap),
            "bwrap" or "landlock" (required), or "none" (no sandbox; the supervisor and the limits
            still apply).
        network: keep the host's network (and its abstract unix sockets) instead of a private one.
        read: more paths readable (in a hidden folder such as ``/tmp``; naming a secret of
            :data:`~kimik3.tools.coding._policy.HOME_SECRETS` exactly lifts it, e.g. ``~/.npmrc``).
        write: more paths writable (e.g. a cache directory).
        limits: the resource limits (default :class:`ProcessLimits`).
        deny_read: more paths never readable, like the secrets (``--deny-read``).
        allow_env: names of credential variables to pass to the commands after all (``--allow-env``;
            the rest are left out: :func:`~kimik3.tools.coding._policy.scrub_env`).
        deny_env: names of more variables to leave out, credentials of the user's own that no rule
            recognises (``--deny-env``; a name in both lists is left out).

    Raises:
        SandboxUnavailableError: ``mode="bwrap"`` / ``"landlock"`` where it cannot run (the fix named).
        UserError: an unknown mode, a ``read`` / ``write`` / ``deny_read`` path that does not exist,
            or one name given as ``allow_env`` / ``deny_env`` instead of a list.
    """

    def __init__(self, root: str | os.PathLike[str], mode: SandboxMode = "auto", *, network: bool = False,
                 read: Any = (), write: Any = (), limits: ProcessLimits | None = None, deny_read: Any = (),
                 allow_env: Any = (), deny_env: Any = ()) -> None:
        self.root = Path(root).resolve()
        self.requested = mode
        self.network = network
        self.read = existing(read, "sandbox_read")
        self.write = existing(write, "sandbox_write")
        self.deny_read = existing(deny_read, "deny_read")
        for field, names in (("allow_env", allow_env), ("deny_env", deny_env)):
            if isinstance(names, str):
                raise UserError(f"{field} takes a list of names, not one name ({names!r})")
        self.allow_env = list(allow_env)
        self.deny_env = list(deny_env)
        self.secrets = self._secrets()
        self.linked: list[tuple[int, int]] = []  # (st_dev, st_ino) of secret files with hard links
        self._stamp: SecretStamp | None = None  # what the running supervisor's secrets were built from
        self._built: dict[str, Any] = {}  # identity() of the secrets, link_counts() of the files inside
        self._links: list[str] = []  # the other names of secret files found at the start
        self._inner: list[str] = []  # the files inside secret folders (their link counts are watched)
        self._own: tuple[bytes, ...] = ()  # the supervisor's command line (not a command's)
        self.tmpdir: str | None = None  # Landlock's private temporary folder (TMPDIR), removed at close
        self.guards: list[GitGuard] = []  # Landlock: the git control data's copies (_guard), per top
        self.limits = limits if limits is not None else ProcessLimits()
        self.mode, self.reason = _resolve(mode)
        if self.reason is not None:
            warnings.warn(f"kimik3: {self.describe()}", RuntimeWarning, stacklevel=2)
        self.protected: list[str] = []
        self.sessions = SessionFiles()
        self.preloaded: list[str] = []  # LD_PRELOAD libraries under a hidden folder, made visible
        self.git_links: dict[str, str] = {}  # .git symlinks, and ones naming kept folders -> target
        self._sup: _Supervisor | None = None
        self._n = 0
        self._active: set[int] = set()  # the commands running now (their Command not yet closed)
        self._checked = False  # Landlock: the git data was checked and put back, nothing ran since
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
        removed (a bind mount cannot keep a symlink; see ``_git_links``) and, under Landlock, the
        git control data and kept folders (skills) a command changed (``_guard``): a line for the tool result for each
        (also a :class:`RuntimeWarning`)."""
        lines = restore_git_links(self.root, self.git_links) if self.git_links else []
        if self.mode == "landlock" and not self._active:
            if self._checked:  # nothing ran since the last check: what changed since is kimik3's own
                return lines  # (a checkpoint ref) or the user's (a commit in another terminal)
            ended = self._end_leftovers()
            if ended:
                lines.append(f"{ended} processes the command left running were ended: under Landlock nothing may "
                             "run between commands, or it could rewrite the git control data after kimik3 checks it")
        put = [os.path.relpath(os.path.join(g.root, p), self.root) for g in self.guards for p in g.restore()]
        if self.mode == "landlock" and not self._active:
            self._checked = True
        if put:
            shown = ", ".join(put[:5]) + (f" and {len(put) - 5} more" if len(put) > 5 else "")
            line = (f"the command changed what kimik3 keeps read-only ({shown}); kimik3 put it back (Landlock "
                    "cannot keep it read-only)")
            warnings.warn(f"kimik3: {line}", RuntimeWarning, stacklevel=2)
            lines.append(line)
        return lines

    def ended(self, command_id: int) -> None:
        """Command ``command_id`` is over (its :class:`Command` closed)."""
        with self._lock:
            self._active.discard(command_id)

    def _end_leftovers(self) -> int:
        """Landlock, no command running: SIGKILL every process of the sandbox but its supervisor
        (what a command left: ``(sleep 1; echo ... >> .git/config) & disown``), until none is left
        (at most ~2 s), so that nothing changes the git control data after :meth:`restore_git_links`
        checks it (issue 39: Landlock cannot make it read-only). The number of processes ended."""
        sup = self._sup
        if sup is None or not sup.alive():
            return 0
        own = _cmdline(sup.proc.pid)  # a command's reaper is a fork of the supervisor: not counted
        seen: set[int] = set()
        end = time.monotonic() + 2.0
        while time.monotonic() < end:
            pids = _reaper.descendants(sup.proc.pid, live=True)
            if not pids:
                break
            seen.update(p for p in pids if p not in seen and _cmdline(p) not in (own, b""))  # b"": exiting
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, 9)
            time.sleep(0.005)
        return len(seen)

    def _running(self) -> int:
        """How many processes of commands run in the sandbox now (background jobs, what a command
        left running): all its processes but bwrap, the supervisor and the commands' reapers."""
        sup = self._sup
        if sup is None or not sup.alive():
            return 0
        own = (*self._own, _cmdline(sup.proc.pid))  # the supervisor's: its argv and its socket's number
        return sum(1 for p in _reaper.descendants(sup.proc.pid, live=True)
                   if (line := _cmdline(p)) and not line.startswith(own))  # b"": exiting

    def _secrets(self) -> list[str]:
        """:func:`~kimik3.tools.coding._policy.secrets` but the workspace and the allowed write paths
        themselves: the folder you chose to work in is yours, whatever its name (``-w
        ~/.config/token-service``); the secrets inside it stay masked."""
        return secrets(self.deny_read, [*self.read, str(self.root), *self.write])

    def _masked_now(self) -> tuple[list[str], list[tuple[int, int]], dict[str, int]]:
        """(the secrets, by path: :func:`~kimik3.tools.coding._policy.secrets` and the other names
        of secret files found in the home, the workspace, the allowed paths and what is shown of
        the hidden folders (the toolchain there); the inodes
        of secret files with several names; {a secret file: its names not found}: ``_masks``).
        Reads every file of the secret folders: once per start, never per command."""
        found = self._secrets()
        roots = [p for p in (home(), str(self.root), *self.write, *self._shown(hidden_dirs())) if p]
        links, missing, inodes, self._inner = other_names(found, roots)
        self._links = links
        return [*found, *links], inodes, missing

    def _refresh(self, cid: int) -> str | None:
        """Before a command: when the secrets changed since the supervisor started (a secret
        replaced by rename, made, linked anew: its masks are stale), restart the sandbox where no
        process of a command would be lost, else say it; the line for the result, or None.
        ``stat`` calls only while nothing changed (:class:`~kimik3.tools.coding._masks.SecretStamp`)."""
        stamp = self._stamp
        if stamp is None or self._sup is None or self.mode == "none" or not stamp.moved():
            return None
        now: dict[str, Any] = {**identity([*self._secrets(), *self._links]),  # a new link: a link count moved
                               **link_counts(self._inner)}  # also of a file inside a secret folder
        if now == self._built:
            stamp.renew()
            return None
        h = home()
        names = ", ".join(sorted({os.path.relpath(p, h) if h and under(p, [h]) else p
                                  for p in (*now, *self._built) if now.get(p) != self._built.get(p)}))
        if self._active - {cid} or self._running():
            return (f"[the secrets changed outside the sandbox ({names}) while processes run in it (a background "
                    "job, or what a command left running): they are not masked until those end; the sandbox is "
                    "restarted at the next command after that]")
        sup, self._sup = self._sup, None
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        sup.sock.close()
        self._end(sup)
        tmp = "/tmp" if self.mode == "bwrap" else "TMPDIR"
        return (f"[the secrets changed outside the sandbox ({names}); it was restarted to mask them: nothing was "
                f"running in it, its private {tmp} starts empty]")

    def describe(self) -> str:
        """One line saying which sandbox runs the commands and what it keeps, e.g. ``sandbox: bwrap
        (workspace read-write, the rest read-only, secrets hidden, /tmp private, network off)``;
        Landlock's says what it cannot do."""
        extra = "".join(f", {len(p)} more {what}" for p, what in ((self.read, "readable"), (self.write, "writable"))
                        if p)
        net = "network on" if self.network else "network off"
        # what a writable folder holds is not hidden: -w /tmp shows the host's /tmp, -w / all of it
        shared = under("/tmp", [str(self.root), *self.write])
        rest = "nothing read-only (the workspace is /)" if str(self.root) == "/" else "the rest read-only"
        if self.mode == "bwrap":
            tmp = "/tmp shared (writable: the host's)" if shared else "/tmp private"
            return f"sandbox: bwrap (workspace read-write, {rest}, secrets hidden, {tmp}{extra}, {net})"
        if self.mode == "landlock":
            net = "network on" if self.network else "TCP off"
            why = f"; {self.reason}" if self.reason else ""
            tmp = "/tmp shared (writable: the host's)" if shared else "/tmp unreadable (TMPDIR private)"
            return (f"sandbox: landlock ABI {_landlock_abi()} (workspace read-write, {rest}, secrets "
                    f"unreadable, {tmp}{extra}, {net}; {_LANDLOCK_CANNOT}{why})")
        if self.reason is None:
            return "sandbox: none (commands run unsandboxed, with your rights)"
        return f"sandbox: none ({self.reason}; commands run unsandboxed, with your rights)"

    def info(self) -> dict[str, Any]:
        """What a session records about the sandbox (its header's ``sandbox`` field)."""
        out: dict[str, Any] = {"mode": self.mode, "requested": self.requested}
        if self.mode != "none":
            out.update(network=self.network, read=self.read, write=self.write)
            if self.deny_read:
                out["deny_read"] = self.deny_read
        if self.allow_env:
            out["allow_env"] = self.allow_env
        if self.deny_env:
            out["deny_env"] = self.deny_env
        if self.reason is not None:
            out["reason"] = self.reason
        return out

    # -- the supervisor --------------------------------------------------------------------------

    def _argv(self) -> tuple[list[str], bytes]:
        """The supervisor's command line and the program it reads on stdin."""
        if self.mode != "none":  # the secrets that exist now, and what to compare before each command
            self.secrets, self.linked, missing = self._masked_now()
            for path, n in missing.items():
                warnings.warn(f"kimik3: {path} has {n} more name{'s' if n > 1 else ''} (a hard link) that kimik3 did "
                              f"not find in the home and the workspace (it looks through {MAX_WALK_DIRS} folders at "
                              "most): that name stays readable in the sandbox; remove the link or add it with "
                              "--deny-read", RuntimeWarning, stacklevel=3)
            self._stamp = SecretStamp(self.secrets, self.deny_read, self._inner)
            self._built = {**identity(self.secrets), **link_counts(self._inner)}
        python = os.path.realpath(sys.executable)
        argv = [python, "-I", "-S", "-", "supervise"]  # the source on stdin
        self._own = ("\0".join([*argv, ""]).encode(),)
        if self.mode == "bwrap":
            return [_bwrap() or "bwrap", *self._bwrap_args(python), "--", *argv], _SOURCE
        if self.mode == "landlock":
            return argv, self._landlock_program()
        return argv, _SOURCE

    def _kept(self) -> tuple[list[str], list[str], list[str], list[str]]:
        """(the git control data kept read-only, the allowed write paths that lift some of it, the
        session files kept read-only, the checked-out submodules' folders that must stay mount
        points), all in the workspace or an allowed write path; sets :attr:`git_links` (see ``_kept``)."""
        root, tops = str(self.root), [str(self.root), *self.write]
        records = list(dict.fromkeys(p for p in (*self.protected, *self.sessions.existing())
                                     if under(p, tops) and p != root and os.path.lexists(p)))
        links: dict[str, str] = {}
        pinned: list[str] = []  # checked-out submodules' folders: mount points, so never replaced (_kept)
        gits = list(dict.fromkeys(p for w in (root, *self.write)
                                  for p in kept_read_only(w, MAX_WALK_DIRS if w == root else 1, links, pinned)))
        self.git_links = {os.path.relpath(p, root): t for p, t in {**links, **self.sessions.links}.items()
                          if under(p, [root]) and p != root}  # .git symlinks, and those naming kept folders
        lifted = [w for w in self.write if w != root and any(under(w, [g]) for g in gits)]
        gits = [g for g in gits if not under(g, lifted) and g not in records]
        return gits, lifted, records, pinned

    def _shown(self, hidden: list[str]) -> list[str]:
        """What is shown read-only in the hidden folders: the toolchain, the allowed read paths and,
        with the network, the folder of ``/etc/resolv.conf`` (systemd-resolved's is in ``/run``);
        never a secret, nor a path inside one (those allowed are shown after the secrets)."""
        tools = toolchain(os.environ)
        shown = [p for p in (*tools, *prefixes(tools), *linked_from(str(self.root)), *enclosing_repo(str(self.root)))
                 if under(p, hidden) and p not in hidden]  # never all of /tmp
        self.preloaded = [lib for lib in preloads(os.environ) if under(lib, hidden)]  # vLLM's libgomp
        if self.network:
            resolv = os.path.realpath("/etc/resolv.conf")
            shown += [os.path.dirname(resolv)] if under(resolv, hidden) else []
        out: list[str] = []
        for p in sorted(dict.fromkeys([*shown, *self.read]), key=len):  # a folder shows what it holds
            if not under(p, self.secrets) and not under(p, out):
                out.append(p)
        return out

    def _inside_secrets(self) -> list[str]:
        """The allowed read paths inside a secret (``~/.kimik3/skills`` in ``~/.kimik3``)."""
        return [p for p in self.read if any(under(p, [s]) and p != s for s in self.secrets)]

    def _bwrap_args(self, python: str) -> list[str]:
        """bubblewrap's options: namespaces, then mounts in order (later ones cover earlier ones)."""
        tmp = tmpfs_bytes(self.limits.memory_bytes)  # each tmpfs holds memory: sized together

        def tmpfs(path: str, size: int) -> list[str]:
            return ["--size", str(size), "--tmpfs", path]

        args = [*_NS_FLAGS, *(() if self.network else ("--unshare-net",)),
                "--ro-bind", "/", "/", "--dev", "/dev", *tmpfs("/dev/shm", tmp // 4), "--proc", "/proc",
                "--ro-bind", "/proc/sys", "/proc/sys", "--ro-bind-try", "/proc/sysrq-trigger", "/proc/sysrq-trigger"]
        hidden = hidden_dirs()
        for d in hidden:
            args += tmpfs(d, tmp if d == "/tmp" else tmp // 8 if d == "/var/tmp" else 16 * _MIB)
        shown = self._shown(hidden)
        for p in shown:
            args += ["--ro-bind-try", p, p]
        for p in (str(self.root), *self.write):
            args += ["--bind", p, p]
        # The secrets, over whatever showed them (also a workspace that holds one: -w ~): a folder
        # an empty read-only tmpfs, a file /dev/null. Where bwrap cannot see it, nothing to hide.
        visible = [str(self.root), *self.write, *shown]
        # a path through a symlink (the secret, or a folder on the way: ~/.config -> dotfiles/config):
        # its real path (also listed) is masked, which the link's name reaches
        masked = [p for p in sorted(self.secrets, key=len)
                  if os.path.realpath(p) == p and (not under(p, hidden) or under(p, visible))]
        for p in masked:
            args += tmpfs(p, 4096) if os.path.isdir(p) else ["--ro-bind", "/dev/null", p]
        for p in self._inside_secrets():  # a path allowed inside a secret (~/.kimik3/skills in ~/.kimik3)
            args += ["--ro-bind", p, p]
        for p in (str(self.root), *self.write):  # a workspace you chose inside one stays yours
            if any(under(p, [m]) and p != m for m in masked):
                args += ["--bind", p, p]
        for p in masked:
            args += ["--remount-ro", p] if os.path.isdir(p) else []
        # What git run outside the sandbox (kimik3's checkpoints, the user's own git) executes from a
        # repository (filters, hooks, fsmonitor, commondir / gitdir pointing at a planted config)
        # stays read-only, and so do the session files kimik3 writes (an approval appended there
        # would be acted on): see _kept. Each is made a mount point (so it cannot be renamed away
        # and replaced), and so is each folder between it and the workspace. An allowed write path
        # lifts only the git control data it lies in or names (``<ws>/.git``, ``<ws>/.git/objects``:
        # bound writable again after), never a repository below it, never a session file.
        gits, lifted, records, pinned = self._kept()
        tops = [str(self.root), *self.write]
        folders = {str(d) for p in (*gits, *records) if os.path.basename(p) != ".git" for d in Path(p).parents
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

    def _landlock_program(self) -> bytes:
        """The supervisor's program under Landlock: restrict itself to the policy's rules
        (``_landlock``), then run ``_reaper``. Makes the private temporary folder and the copy of
        the git control data (``_guard``).

        Raises:
            ToolError: a session file lies in the workspace (Landlock cannot keep it read-only), or
                the git control data cannot be copied.
        """
        gits, _, records, _ = self._kept()
        files = [r for r in records if not os.path.isdir(r)]
        if files:
            raise ToolError(f"sandbox landlock cannot keep {files[0]} (kimik3's record of the run) read-only: it "
                            "lies in a writable folder, and a Landlock rule cannot exclude part of one; keep the "
                            "session outside the workspace, or use bwrap (--sandbox bwrap)")
        tops = [str(self.root), *self.write]
        by_top: dict[str, tuple[list[str], list[str]]] = {}  # under its innermost writable top: git data, folders
        for i, kept in enumerate((gits, [r for r in records if r not in files])):
            for p in kept:
                by_top.setdefault(max((t for t in tops if under(p, [t])), key=len), ([], []))[i].append(p)
        try:
            self.guards = [GitGuard(top, git, whole) for top, (git, whole) in by_top.items()]
        except OSError as e:
            raise ToolError(f"sandbox landlock cannot copy the workspace's git control data to keep it: {e}") from None
        linked = set(self.linked)
        held = [p for p, i in identity(self.secrets).items() if i and i[:2] in linked and under(p, tops)]
        if held:  # found in the workspace: kept out the way -w ~ keeps its secrets (see docs/sandbox.md)
            warnings.warn(f"kimik3: {held[0]} is a secret file with several names (hard links) in a writable folder; "
                          "Landlock keeps it unreadable only by letting the folders on the way to it take no new "
                          "entries (commands cannot create files there); remove the link, or use bwrap "
                          "(--sandbox bwrap)", RuntimeWarning, stacklevel=2)
        inside = [p for p in self.secrets if under(p, tops) and p not in tops and p not in held]
        if inside:  # -w ~, -w ~/.config/app holding token.json, KUBECONFIG=<ws>/kubeconfig
            more = f" and {len(inside) - 1} more" if len(inside) > 1 else ""
            warnings.warn(f"kimik3: {inside[0]}{more} is a secret in a writable folder; Landlock keeps it unreadable "
                          f"only by letting the folders on the way to it ({os.path.dirname(inside[0])} and those above "
                          "it in the workspace) take no new entries, renames or removals (their existing files and "
                          "subfolders stay writable); move it out, or use bwrap (--sandbox bwrap)", RuntimeWarning,
                          stacklevel=2)
        if self.tmpdir is None:
            self.tmpdir = tempfile.mkdtemp(prefix="kimik3-sandbox-")
            weakref.finalize(self, shutil.rmtree, self.tmpdir, True)  # at close, collection or exit
        hidden = hidden_dirs()
        rules = _landlock.rules(read=[*self._shown(hidden), *self._inside_secrets()],
                                write=[str(self.root), *self.write, self.tmpdir], denied=self.secrets, hidden=hidden,
                                inodes=self.linked)
        policy = {"rules": rules, "network": self.network}
        return (f"import sys\nll = {{'__name__': '_landlock'}}\n"
                f"exec(compile({_LANDLOCK_SOURCE!r}, '_landlock.py', 'exec'), ll)\n"
                f"try:\n    ll['restrict']({policy!r})\n"
                "except OSError as e:\n    sys.stderr.write(f'Landlock: {e}'); sys.exit(1)\n"
                f"exec(compile({_SOURCE.decode()!r}, '_reaper.py', 'exec'), {{'__name__': '__main__'}})\n").encode()

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
            argv, program = self._argv()
            self._sup = _Supervisor(argv, program, self.root, 4 * tasks + 64 if tasks else None)
            self._starts += 1
            if self._finalizer is not None:
                self._finalizer.detach()
            self._finalizer = weakref.finalize(self, self._sup.release)
        return self._sup, note

    def _visiblepreloads(self, env: dict[str, str]) -> dict[str, str]:
        """``env`` with only the ``LD_PRELOAD`` libraries visible inside the sandbox (:attr:`preloaded`)."""
        if self.mode == "none" or not env.get("LD_PRELOAD"):
            return env
        hidden = hidden_dirs()
        kept = [lib for lib in env["LD_PRELOAD"].replace(":", " ").split() if not os.path.isabs(lib)
                or os.path.abspath(lib) in self.preloaded or not under(os.path.abspath(lib), hidden)]
        return {**env, "LD_PRELOAD": " ".join(kept)}

    def spawn(self, argv: list[str], env: dict[str, str], *, grace: float = 1.0, cpu: bool = True,
              background: bool = False) -> Command:
        """Start ``argv`` (a shell) in the sandbox with ``env``; the sandbox starts at the first call.

        Args:
            argv: the program and its arguments; ``argv[0]`` an absolute path.
            env: its environment (``TMPDIR`` becomes ``/tmp`` inside bwrap).
            grace: seconds between SIGTERM and SIGKILL when it is ended (``t``).
            cpu: apply the CPU-time limit (off for long-running background servers).
            background: a job that runs on between tool calls (``bash(background=true)``): refused
                under Landlock, where it could rewrite the git control data after each check.

        Returns:
            The :class:`Command`; every descriptor in it is the caller's to close.

        Raises:
            ToolError: the sandbox cannot be started (bwrap's or Python's message), or a
                ``background`` job under Landlock.
        """
        if background and self.mode == "landlock":
            raise ToolError(_NO_BACKGROUND)
        limits = self.limits
        rlimits = {name: value for name, value in (("DATA", limits.memory_bytes), ("FSIZE", limits.file_bytes),
                                                   ("CPU", limits.cpu_seconds if cpu else None)) if value}
        if limits.processes and self.mode == "bwrap" and os.geteuid() != 0:
            rlimits["NPROC"] = 4 * limits.processes  # counted in the sandbox's user namespace
        env = scrub_env(env, self.allow_env, self.deny_env)
        out_r, out_w = os.pipe()
        status_r, status_w = os.pipe()
        control_r, control_w = os.pipe()
        cid = 0
        try:
            with self._lock:
                self._n += 1
                cid = self._n
                if self._checked and not self._active:  # Landlock: nothing of the sandbox ran since the last
                    for guard in self.guards:  # check, so the git data is as kimik3 or the user left it
                        guard.renew()  # (checkpoint refs, a commit made meanwhile): the copy to keep
                self._checked = False
                self._active.add(cid)
                stale = self._refresh(cid)
                sup, note = self._supervisor()
                note = stale or note
                if self.mode == "bwrap" and "TMPDIR" in env:
                    env = {**env, "TMPDIR": "/tmp"}
                elif self.mode == "landlock" and self.tmpdir is not None:  # /tmp is not writable there
                    env = {**env, "TMPDIR": self.tmpdir}
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
            self._active.discard(cid)
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
        if sup is not None:
            self._end(sup)

    def _end(self, sup: _Supervisor) -> None:
        """Wait for ``sup`` (its socket closed) to end its processes and exit, then finish it."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            sup.proc.wait(_CLOSE_S)
        self._finish(sup)

    def _finish(self, sup: _Supervisor) -> None:
        if sup.proc.poll() is None:
            sup.kill_now()
            with contextlib.suppress(subprocess.TimeoutExpired):
                sup.proc.wait(2.0)
        sup.end_cgroup()
        sup.abandon()
        if self.tmpdir is not None:  # Landlock's private temporary folder: nothing runs there now
            shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.tmpdir = None

    @property
    def running(self) -> bool:
        """Whether the sandbox is started now."""
        return self._sup is not None and self._sup.alive()

