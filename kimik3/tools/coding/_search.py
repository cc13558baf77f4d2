"""``grep`` (ripgrep, or a Python fallback on the ``regex`` package) and ``glob``, both bounded in
time, memory and output.

grep keeps the first :data:`MAX_GREP_LINES` matching lines and only counts the rest, up to
:data:`_MAX_GREP_COUNT`; the Python fallback runs every regular-expression search with a timeout
(``regex``'s ``timeout=``), so a catastrophic pattern such as ``(a+)+$`` ends. glob walks the
tree once: each directory is entered at most once (a symlinked directory whose target was already
entered is not entered again), so its time is linear in the number of entries, and it stops after
:data:`_MAX_GLOB_SCAN` entries.
"""

from __future__ import annotations

import atexit
import fnmatch
import functools
import io
import os
import re
import select
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO

import regex

from ..._exceptions import ToolError
from ._files import LINE_BYTES, READ_CHUNK, CarriageReturns, cr_only, decode, is_binary, sniff_encoding
from ._paths import DIR_FLAGS, FILE_FLAGS, Workspace, check_regular

GREP_TIMEOUT_S = 60.0
GLOB_TIMEOUT_S = 30.0
MAX_GREP_LINES = 200
_MAX_GREP_COUNT = 100_000  # matching lines counted (not kept) before grep stops
_MAX_GREP_RECORD = 1 << 20  # rg: longer lines are replaced by rg's "[Omitted long line ...]"
MAX_GLOB_PATHS = 500
_MAX_GLOB_KEPT = 10_000
_MAX_GLOB_SCAN = 1_000_000
MAX_DEPTH = 128  # directories below the start that grep and glob descend into
_MAX_CR_FILES = 1_000  # CR-only files rg reads through its --pre filter (more: searched as rg reads them)


@dataclass
class Matches:
    """The first matching lines (``(path, line number, text)``) and how many there were."""

    kept: list[tuple[str, int, str]] = field(default_factory=list)
    total: int = 0
    stopped: str = ""  # why the search ended early ("" when it ran to the end)

    def add(self, rel: str, number: int, text: str) -> bool:
        """Record one match; False once the count limit is reached."""
        self.total += 1
        if len(self.kept) < MAX_GREP_LINES:
            self.kept.append((rel, number, text))
        if self.total >= _MAX_GREP_COUNT:
            self.stopped = f"counting stopped at {_MAX_GREP_COUNT} matching lines"
            return False
        return True


def _open_target(ws: Workspace, path: str) -> tuple[int, str, str | None]:
    """(directory descriptor, relative path, file name or None) of what grep searches: the
    directory ``path``, or the regular file ``path`` as a name inside its directory."""
    with ws.locate(path) as loc:
        if loc.name is None:
            return os.dup(loc.dir_fd), loc.rel, None
        try:
            st = os.stat(loc.name, dir_fd=loc.dir_fd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                return os.open(loc.name, DIR_FLAGS, dir_fd=loc.dir_fd), loc.rel, None
        except FileNotFoundError:
            raise ToolError(f"{path}: no such file or directory") from None
        except OSError as e:  # e.g. swapped for a symlink meanwhile
            raise ToolError(f"cannot open {path}: {e.strerror or e}") from None
        check_regular(st, path)
        return os.dup(loc.dir_fd), loc.rel, loc.name


def rg_path() -> str | None:
    """The ripgrep executable, or None (grep then uses its Python fallback)."""
    return shutil.which("rg")


# -- ripgrep ---------------------------------------------------------------------------------


@functools.cache
def _cr_filter() -> str:
    """An executable printing the file it is given with each ``\\r`` as ``\\n``: ripgrep's
    ``--pre`` for CR-only files (made once per process, removed at exit)."""
    folder = tempfile.mkdtemp(prefix="kimik3-rg-")
    atexit.register(shutil.rmtree, folder, True)
    path = os.path.join(folder, "cr-lines")
    with open(path, "w", encoding="ascii") as f:
        f.write("#!/bin/sh\nexec tr '\\r' '\\n' < \"$1\"\n")
    os.chmod(path, 0o700)
    return path


def _glob_literal(name: str) -> str:
    """A ripgrep glob matching exactly ``name``."""
    return re.sub(r"([\\*?\[\]{}!])", r"\\\1", name)


def _cr_only_files(argv: list[str], cwd: str, dir_fd: int, deadline: float) -> list[str]:
    """The CR-only text files among those ``argv`` (rg listing the files with no ``\\n``) finds:
    those whose head holds a ``\\r`` and no NUL; paths as rg prints them, without ``./``."""
    try:
        proc = subprocess.run(argv, cwd=cwd, pass_fds=(dir_fd,), stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=max(0.1, deadline - time.monotonic()), check=False)
    except subprocess.TimeoutExpired:
        return []
    found = []
    for raw in proc.stdout.split(b"\0")[:_MAX_CR_FILES]:
        try:
            fd = os.open(raw, os.O_RDONLY | FILE_FLAGS, dir_fd=dir_fd) if raw else -1
        except OSError:
            continue
        if fd < 0:
            continue
        try:
            head = os.pread(fd, READ_CHUNK, 0) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
        finally:
            os.close(fd)
        if cr_only(head) and not is_binary(head):
            name = os.fsdecode(raw)
            found.append(name[2:] if name.startswith("./") else name)
    return found


def _parse_records(buffer: bytearray, rel_prefix: str, matches: Matches) -> bool:
    """Take the complete ``name\\0number:text\\n`` records off ``buffer`` (file names may hold
    newlines, texts never do); False once ``matches`` is full."""
    while True:
        nul = buffer.find(b"\x00")
        if nul < 0:
            return True
        end = buffer.find(b"\n", nul)
        if end < 0:
            return True
        name, record = bytes(buffer[:nul]), bytes(buffer[nul + 1 : end])
        del buffer[: end + 1]
        number, sep, text = record.partition(b":")
        if not sep or not number.isdigit():
            continue
        rel = os.fsdecode(name)
        rel = rel[2:] if rel.startswith("./") else rel
        rel = f"{rel_prefix}/{rel}" if rel_prefix not in ("", ".") else rel
        line = decode(text, sniff_encoding(text, complete=True))
        if not matches.add(rel, int(number), line.removesuffix("\r")):
            return False


def grep_rg(rg: str, ws: Workspace, pattern: str, path: str, glob: str | None) -> Matches:
    """Run ripgrep in the directory (or on the file) ``path`` opened confined; stream its output."""
    dir_fd, rel, file_name = _open_target(ws, path)
    prefix = rel.rsplit("/", 1)[0] if file_name and "/" in rel else ("" if file_name else rel)
    options = [rg, "--no-config", "--null", "--color", "never"]
    if glob:  # rg matches it from where it starts (the target); the tool's globs are from the root
        options += ["--glob", glob[len(prefix) + 1 :] if prefix and glob.startswith(prefix + "/") else glob]
    target = file_name or "."
    # rg starts in the directory already opened confined (Linux: through /proc's magic link to the
    # descriptor, so a swapped path cannot redirect it; elsewhere by its path).
    cwd = f"/proc/self/fd/{dir_fd}" if os.path.isdir("/proc/self/fd") else str(ws.root / (prefix or "."))
    matches = Matches()
    deadline = time.monotonic() + GREP_TIMEOUT_S
    argv = [*options, "--line-number", "--no-heading", "--with-filename", "--sort", "path", "--max-columns",
            str(_MAX_GREP_RECORD)]
    # rg counts \n-lines only: a CR-only file (lines ending with \r alone) is read through a filter
    # turning each \r into \n, so its lines are numbered (and anchored) as read_file shows them.
    cr_files = _cr_only_files([*options, "--files-without-match", "--multiline", "-e", "\\n", "--", target],
                              cwd, dir_fd, deadline)
    if cr_files:
        argv += ["--pre", _cr_filter(), *(a for name in cr_files for a in ("--pre-glob", _glob_literal(name)))]
    argv += ["-e", pattern, "--", target]
    with tempfile.TemporaryFile() as errors:  # a file: rg never blocks on a full stderr pipe
        try:
            proc = subprocess.Popen(argv, cwd=cwd, pass_fds=(dir_fd,), stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=errors)
        finally:
            os.close(dir_fd)
        assert proc.stdout is not None
        buffer = bytearray()
        eof = False
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    matches.stopped = f"the search stopped after {GREP_TIMEOUT_S:g} s"
                    break
                ready, _, _ = select.select([proc.stdout], [], [], min(left, 1.0))
                if not ready:
                    continue
                chunk = os.read(proc.stdout.fileno(), READ_CHUNK)
                if not chunk:
                    eof = True
                    break
                buffer += chunk
                if not _parse_records(buffer, prefix, matches):
                    break
        finally:
            if eof:
                try:
                    proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    eof = False
            proc.kill()
            proc.wait()
            proc.stdout.close()
        if eof and proc.returncode not in (0, 1) and not matches.total:
            errors.seek(0)
            message = errors.read(2000).decode("utf-8", "replace").strip()
            raise ToolError(message or f"rg failed with exit code {proc.returncode}")
    return matches


# -- the Python fallback ---------------------------------------------------------------------


def glob_matches(rel: str, glob: str) -> bool:
    if "/" not in glob:
        return fnmatch.fnmatchcase(rel.rsplit("/", 1)[-1], glob)
    return fnmatch.fnmatchcase(rel, glob) or (glob.startswith("**/") and fnmatch.fnmatchcase(rel, glob[3:]))


def walk_files(dir_fd: int, rel: str, deadline: float, depth: int = 0) -> Iterator[tuple[int, str, str]]:
    """(directory fd, name, relative path) of the regular files below ``dir_fd``, depth first in
    name order, at most :data:`MAX_DEPTH` levels down; hidden entries and symlinks are skipped
    (like ripgrep's defaults)."""
    try:
        with os.scandir(dir_fd) as it:
            entries = sorted((e.name, e.is_dir(follow_symlinks=False), e.is_file(follow_symlinks=False)) for e in it)
    except OSError:  # removed meanwhile, or unreadable
        return
    for name, is_dir, is_file in entries:
        if name.startswith(".") or time.monotonic() > deadline:
            continue
        child = name if rel == "." else f"{rel}/{name}"
        if is_file:
            yield dir_fd, name, child
        elif is_dir and depth < MAX_DEPTH:
            try:
                sub = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
            except OSError:
                continue
            try:
                yield from walk_files(sub, child, deadline, depth + 1)
            finally:
                os.close(sub)


def _search_file(fd: int, rel: str, rx: regex.Pattern[str], matches: Matches, deadline: float) -> bool:
    """Search one open file line by line; False once grep must stop."""
    with os.fdopen(fd, "rb", buffering=READ_CHUNK) as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return True
        head = os.pread(fd, READ_CHUNK, 0)
        if is_binary(head):
            return True
        codec = "latin-1" if sniff_encoding(head, complete=len(head) < READ_CHUNK) == "latin-1" else "utf-8"
        src: IO[bytes] = io.BufferedReader(CarriageReturns(f), READ_CHUNK) if cr_only(head) else f
        number = 0
        while raw := src.readline(LINE_BYTES):
            number += 1
            if not raw.endswith(b"\n") and len(raw) == LINE_BYTES:  # a long line: its head is searched
                while (piece := src.readline(READ_CHUNK)) and not piece.endswith(b"\n"):
                    pass
            line = decode(raw, codec).removesuffix("\n").removesuffix("\r")
            try:
                found = rx.search(line, timeout=max(0.001, deadline - time.monotonic()))
            except TimeoutError:
                matches.stopped = f"the search stopped after {GREP_TIMEOUT_S:g} s (a slow pattern?)"
                return False
            if found and not matches.add(rel, number, line):
                return False
    return True


def grep_python(ws: Workspace, pattern: str, path: str, glob: str | None) -> Matches:
    try:
        rx = regex.compile(pattern)
    except regex.error as e:
        raise ToolError(f"invalid regular expression {pattern!r}: {e}") from None
    matches = Matches()
    deadline = time.monotonic() + GREP_TIMEOUT_S
    dir_fd, rel, file_name = _open_target(ws, path)
    try:
        if file_name is not None:
            try:
                fd = os.open(file_name, os.O_RDONLY | FILE_FLAGS, dir_fd=dir_fd)
            except OSError as e:
                raise ToolError(f"cannot open {path}: {e.strerror or e}") from None
            _search_file(fd, rel, rx, matches, deadline)
            return matches
        for parent, name, child in walk_files(dir_fd, rel, deadline):
            if glob and not glob_matches(child, glob):
                continue
            try:
                fd = os.open(name, os.O_RDONLY | FILE_FLAGS, dir_fd=parent)
            except OSError:
                continue
            if not _search_file(fd, child, rx, matches, deadline):
                break
    finally:
        os.close(dir_fd)
    if time.monotonic() > deadline and not matches.stopped:
        matches.stopped = f"the search stopped after {GREP_TIMEOUT_S:g} s"
    return matches


# -- glob ------------------------------------------------------------------------------------


@dataclass
class GlobResult:
    paths: list[str] = field(default_factory=list)  # kept (at most _MAX_GLOB_KEPT), with "/" on directories
    total: int = 0
    stopped: str = ""
    pruned: bool = False  # directories deeper than MAX_DEPTH were not entered


def check_glob(pattern: str) -> None:
    """Raises ToolError: an absolute glob or one with a ``..`` component (it could never match a
    path in the workspace; glob and grep both refuse it rather than answer "no matches"), or one
    holding U+FFFD (the real characters of a path were lost on the way: issue 40, N46's kind)."""
    if pattern.startswith("/") or ".." in pattern.split("/"):
        raise ToolError(f"pattern {pattern!r} must be relative to the workspace and not use '..'")
    if "\ufffd" in pattern:
        raise ToolError(f"pattern {pattern!r} holds U+FFFD, the replacement character for bytes that could not be "
                        "decoded: the real characters were lost on the way; write it again with its real characters")


def glob(ws: Workspace, pattern: str) -> GlobResult:
    """Match ``pattern`` ("*" within a component, "**" any number of directories) in one walk.

    Raises:
        ToolError: an empty, absolute or ``..`` pattern.
    """
    if not pattern:
        raise ToolError("invalid glob pattern '': it is empty")
    check_glob(pattern)
    parts = [p for p in pattern.split("/") if p not in ("", ".")]
    result = GlobResult()
    if not parts:
        result.paths, result.total = ["."], 1
        return result
    rxs = [None if p == "**" else re.compile(fnmatch.translate(p)) for p in parts]
    wants_git = ".git" in parts
    end = len(parts)

    def closure(states: set[int]) -> set[int]:
        out = set(states)
        for i in sorted(states):
            j = i
            while j < end and rxs[j] is None:
                j += 1
                out.add(j)
        return out

    deadline = time.monotonic() + GLOB_TIMEOUT_S
    entered: set[tuple[int, int]] = set()
    pending: list[tuple[str, set[int]]] = []  # symlinked directories, entered after the real tree
    scanned = 0

    def visit(dir_fd: int, rel: str, states: set[int], depth: int) -> None:
        nonlocal scanned
        st = os.fstat(dir_fd)
        if (st.st_dev, st.st_ino) in entered:
            return
        entered.add((st.st_dev, st.st_ino))
        active = closure(states)
        try:
            with os.scandir(dir_fd) as it:
                entries = sorted((e.name, e.is_dir(follow_symlinks=False), e.is_symlink()) for e in it)
        except OSError:  # removed meanwhile, or unreadable
            return
        for name, is_dir, is_link in entries:
            scanned += 1
            if result.stopped or scanned > _MAX_GLOB_SCAN or time.monotonic() > deadline:
                result.stopped = result.stopped or (
                    f"glob stopped after {GLOB_TIMEOUT_S:g} s" if time.monotonic() > deadline
                    else f"glob stopped after {_MAX_GLOB_SCAN} entries"
                )
                return
            if name == ".git" and not wants_git:
                continue
            child = name if rel == "." else f"{rel}/{name}"
            if is_link:
                if not ws.inside(child):
                    continue
                try:
                    is_dir = stat.S_ISDIR(os.stat(name, dir_fd=dir_fd).st_mode)
                except OSError:
                    continue
            nxt = set()
            for i in active:
                if i < end and (rxs[i] is None and is_dir):
                    nxt.add(i)
                elif i < end and rxs[i] is not None and rxs[i].match(name):  # type: ignore[union-attr]
                    nxt.add(i + 1)
            if end in nxt or (is_dir and end in closure(nxt)):
                result.total += 1
                if len(result.paths) < _MAX_GLOB_KEPT:
                    result.paths.append(child + "/" if is_dir else child)
            if is_dir and any(i < end for i in closure(nxt)):
                if depth >= MAX_DEPTH:
                    result.pruned = True
                    continue
                if is_link:
                    pending.append((child, nxt))
                    continue
                try:
                    sub = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
                except OSError:
                    continue
                try:
                    visit(sub, child, nxt, depth + 1)
                finally:
                    os.close(sub)

    root_fd, _ = ws.open_dir(".")
    try:
        visit(root_fd, ".", {0}, 0)
    finally:
        os.close(root_fd)
    while pending and not result.stopped:
        child, states = pending.pop(0)
        try:
            sub, _ = ws.open_dir(child)
        except ToolError:
            continue
        try:
            visit(sub, child, states, child.count("/") + 1)
        finally:
            os.close(sub)
    return result
