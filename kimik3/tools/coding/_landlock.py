"""Landlock (Linux 5.13+, any unprivileged process, no system package): the sandbox where
bubblewrap cannot run (``sandbox="landlock"``, or ``"auto"`` without a working bwrap). The policy
is ``_policy``'s, turned into rules here (:func:`rules`) and applied by the sandbox's supervisor to
itself before it serves (:func:`restrict`): every command it starts inherits the domain.

Kernel interface (``Documentation/userspace-api/landlock.rst``; syscalls 444-446 on every
architecture): a ruleset *handles* access rights; a right it handles is allowed only beneath a
rule that grants it. File system rights (ABI 1; REFER ABI 2, TRUNCATE ABI 3, IOCTL_DEV ABI 5),
TCP bind / connect (ABI 4: none granted, so without ``--network`` no TCP at all), scopes (ABI 6:
no abstract unix socket or signal outside the domain). A domain also cannot ptrace (nor read
``/proc/PID/environ`` of) processes outside it, nor mount.

Landlock only *grants*: a folder's rule covers everything beneath it. A secret inside a readable
folder is kept out by granting each other entry of every folder on the way to it (:func:`rules`),
so those folders' names stay listable (``READ_DIR``) and what is created in them later is not
readable; a path's existence is never hidden. This module imports only the standard library: its
source is run by the supervisor's interpreter, which may not see kimik3.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import struct
from collections.abc import Iterable
from typing import Any

__all__ = ["READ", "WRITE", "abi", "restrict", "rules"]

_CREATE, _ADD_RULE, _RESTRICT = 444, 445, 446
_VERSION = 1
_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS, _PR_CAPBSET_DROP, _PR_CAP_AMBIENT, _AMBIENT_CLEAR_ALL = 38, 24, 47, 4

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1, 2, 4, 8
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR, MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = (
    16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
READ = EXECUTE | READ_FILE | READ_DIR
"""A read-only hierarchy: list, read, run."""
WRITE = READ | WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_DIR | MAKE_REG | MAKE_SOCK | MAKE_FIFO | MAKE_SYM \
    | REFER | TRUNCATE
"""A writable hierarchy (no device nodes)."""
_FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
_NET_BIND, _NET_CONNECT = 1, 2
_SCOPE_ABSTRACT, _SCOPE_SIGNAL = 1, 2
_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/ptmx")


def _libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


def abi() -> int:
    """The kernel's Landlock ABI version (0: none, or Landlock disabled at boot)."""
    try:
        version = int(_libc().syscall(_CREATE, None, 0, _VERSION))
    except (OSError, AttributeError):
        return 0
    return max(version, 0)


def _handled(version: int) -> int:
    """The file system rights this ABI ``version`` knows (all handled: unknown ones would fail)."""
    fs = (1 << 13) - 1
    fs |= REFER if version >= 2 else 0
    fs |= TRUNCATE if version >= 3 else 0
    fs |= IOCTL_DEV if version >= 5 else 0
    return fs


def rules(read: Iterable[str], write: Iterable[str], denied: Iterable[str], hidden: Iterable[str],
          inodes: Iterable[tuple[int, int]] = ()) -> list[tuple[str, int]]:
    """The (path, rights) rules of the policy: ``/`` readable except ``hidden`` and ``denied``;
    each of ``read`` readable and each of ``write`` writable, except what ``denied`` holds; a few
    devices (``/dev/null``, ``/dev/tty``, ...) and ``/dev/shm``, ``/dev/pts`` usable.

    Args:
        read: more read-only hierarchies (the toolchain in a hidden folder, the allowed paths).
        write: writable hierarchies (the workspace, the allowed paths, the private temporary folder).
        denied: the secrets, never readable, also inside ``read`` and ``write``.
        hidden: folders not readable (``/tmp``, ``/run``) except where ``read`` / ``write`` say.
        inodes: the ``(st_dev, st_ino)`` of secret files with other names (hard links): no rule
            names such a file, whatever its path (a rule is bound to the inode, so it would open
            the secret by its own name too; issue 39).

    Returns:
        Rules, in order; a folder on the way to a denied path gets ``READ_DIR`` only.
    """
    out: list[tuple[str, int]] = []
    secret = [os.path.normpath(d) for d in denied]
    linked = set(inodes)

    def grant(path: str, rights: int, skip: list[str]) -> None:
        if path in skip:
            return
        if linked:
            with contextlib.suppress(OSError):
                st = os.lstat(path)
                if (st.st_dev, st.st_ino) in linked:  # a file (folders have no hard links)
                    return
        inner = [d for d in skip if d.startswith(path.rstrip("/") + "/")]
        if not inner:
            out.append((path, rights))
            return
        out.append((path, READ_DIR))
        with contextlib.suppress(OSError), os.scandir(path) as entries:
            for entry in entries:
                if not entry.is_symlink():  # following one needs no right: its target's rule decides
                    grant(entry.path, rights, inner)

    grant("/", READ, [*secret, *(os.path.normpath(h) for h in hidden), "/dev"])
    out.append(("/dev", READ_DIR))
    out += [(d, READ_FILE | WRITE_FILE | TRUNCATE | IOCTL_DEV) for d in _DEVICES if os.path.exists(d)]
    out += [(d, WRITE | IOCTL_DEV) for d in ("/dev/pts", "/dev/shm") if os.path.isdir(d)]
    for p in read:
        grant(os.path.normpath(p), READ, secret)
    for p in write:
        grant(os.path.normpath(p), WRITE, secret)
    return out


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def _drop_capabilities(libc: Any) -> None:
    """Root keeps no capability (none inherited by the commands either): the bounding set, the
    ambient set, then effective / permitted / inheritable emptied (``capset``, version 3)."""
    if os.geteuid() != 0:
        return
    for cap in range(64):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            break  # past the last capability this kernel knows
    libc.prctl(_PR_CAP_AMBIENT, _AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = struct.pack("Ii", 0x20080522, 0)
    data = bytes(24)
    _check(libc.capset(header, data), "capset")


def restrict(policy: dict[str, Any]) -> int:
    """Make this process (and everything it will start) a Landlock domain of ``policy``:
    ``{"rules": [[path, rights], ...], "network": bool}`` (:func:`rules`). Sets
    ``PR_SET_NO_NEW_PRIVS`` and, as root, drops every capability first. A rule whose path is gone
    is skipped. Returns the ABI used.

    Raises:
        OSError: Landlock is not available, or the kernel refused the ruleset.
    """
    libc = _libc()
    version = abi()
    if version < 1:
        raise OSError("Landlock is not available in this kernel")
    handled = _handled(version)
    net = 0 if policy.get("network") or version < 4 else _NET_BIND | _NET_CONNECT
    scoped = 0 if version < 6 else _SCOPE_SIGNAL | (0 if policy.get("network") else _SCOPE_ABSTRACT)
    attr = struct.pack("QQQ", handled, net, scoped)
    size = 24 if version >= 6 else 16 if version >= 4 else 8
    buf = ctypes.create_string_buffer(attr[:size], size)
    ruleset = _check(libc.syscall(_CREATE, buf, ctypes.c_size_t(size), 0), "landlock_create_ruleset")
    try:
        for path, rights in policy["rules"]:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                allowed = int(rights) & handled
                if not os.path.isdir(f"/proc/self/fd/{fd}"):
                    allowed &= _FILE_RIGHTS
                if allowed:
                    rule = ctypes.create_string_buffer(struct.pack("=Qi", allowed, fd), 12)
                    _check(libc.syscall(_ADD_RULE, ruleset, _PATH_BENEATH, rule, 0), f"landlock_add_rule {path}")
            finally:
                os.close(fd)
        _drop_capabilities(libc)
        _check(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
        _check(libc.syscall(_RESTRICT, ruleset, 0), "landlock_restrict_self")
    finally:
        os.close(ruleset)
    return version
