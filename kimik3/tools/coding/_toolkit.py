"""The coding toolkit: ``bash``, ``read_file``, ``write_file``, ``edit_file``, ``grep``, ``glob``.

Every tool is bound to one workspace root. The file tools resolve paths (relative ones against
the root), follow symlinks, and refuse anything that ends up outside the root, ``..`` and
absolute paths included, with a :class:`~kimik3.ToolError`. ``bash`` is *not* sandboxed: it runs
in the root as the current user and can reach anything that user can; the path checks only keep
the file tools honest. The argument names are the ones models already know (Claude Code /
mini-swe-agent style); the docstrings below are what the model reads, and they describe the exact
output formats, which are kept stable on purpose. POSIX only (``bash`` relies on process groups).

Usage::

    from kimik3.tools.coding import coding_tools

    tools = coding_tools("/path/to/repo")          # list[Tool]
    result = await tools[0].run({"command": "ls"})  # ToolResult
"""

from __future__ import annotations

import codecs
import contextlib
import difflib
import fnmatch
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path, PurePosixPath
from typing import Annotated

import anyio
from pydantic import Field

from ..._exceptions import ToolDefinitionError, ToolError
from .._tool import Tool
from .._truncate import _truncate, truncate_middle

__all__ = ["coding_tools"]

_TERM_GRACE_S = 1.0  # SIGTERM -> SIGKILL
_PIPE_GRACE_S = 1.0  # how long the output may stay open after the shell itself exited
_POLL_S = 0.05
_READ_CHUNK = 65536
_MAX_READ_PER_POLL = 1 << 20
_BINARY_SNIFF = 8192
_MAX_LINE_CHARS = 2000  # read_file
_MAX_GREP_LINE_CHARS = 500
_MAX_GREP_LINES = 200
_MAX_GLOB_PATHS = 500
_MAX_DIFF_CHARS = 4000
_GREP_TIMEOUT_S = 60


# -- shared helpers --------------------------------------------------------------------------


class _Workspace:
    def __init__(self, root: Path) -> None:
        self.root = root

    def resolve(self, path: str) -> Path:
        """The absolute, symlink-free path of ``path``; ToolError when it leaves the root."""
        if "\x00" in path:
            raise ToolError(f"invalid path {path!r}")
        p = Path(path)
        try:
            resolved = (p if p.is_absolute() else self.root / p).resolve()
        except (OSError, RuntimeError) as e:  # symlink loops
            raise ToolError(f"cannot resolve path {path!r}: {e}") from e
        if not resolved.is_relative_to(self.root):
            raise ToolError(f"path {path!r} is outside the workspace {self.root}; use a path inside it")
        return resolved

    def rel(self, path: Path) -> str:
        rel = path.relative_to(self.root).as_posix()
        return rel or "."

    def inside(self, path: Path) -> bool:
        try:
            return path.resolve().is_relative_to(self.root)
        except (OSError, RuntimeError):
            return False


def _is_binary(data: bytes) -> bool:
    return b"\x00" in data[:_BINARY_SNIFF]


def _decode(data: bytes) -> tuple[str, str]:
    """(text, encoding): UTF-8 with BOM, UTF-8, else latin-1 (which round-trips any bytes)."""
    if data.startswith(codecs.BOM_UTF8):
        try:
            return data[len(codecs.BOM_UTF8) :].decode("utf-8"), "utf-8-sig"
        except UnicodeDecodeError:
            pass
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return data.decode("latin-1"), "latin-1"


def _split_lines(text: str) -> list[str]:
    """Lines split on ``\\n`` only (like grep / rg numbering), without ``\\r\\n`` / ``\\n``."""
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def _cap_line(line: str, limit: int) -> str:
    if len(line) <= limit:
        return line
    return f"{line[:limit]}... [{len(line) - limit} more characters]"


def _read_text_file(ws: _Workspace, path: str) -> tuple[Path, bytes]:
    p = ws.resolve(path)
    if p.is_dir():
        raise ToolError(f"{path} is a directory")
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise ToolError(f"{path}: no such file") from None
    except OSError as e:
        raise ToolError(f"cannot read {path}: {e.strerror or e}") from None
    if _is_binary(data):
        raise ToolError(f"{path} is a binary file ({len(data)} bytes)")
    return p, data


# -- bash ------------------------------------------------------------------------------------


class _HeadTail:
    """Keeps the first and the last ``cap`` characters of a byte stream decoded as UTF-8."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.head: list[str] = []
        self.head_len = 0
        self.tail = ""
        self.dropped = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, data: bytes, final: bool = False) -> None:
        s = self._decoder.decode(data, final)
        if self.head_len < self.cap:
            take = s[: self.cap - self.head_len]
            self.head.append(take)
            self.head_len += len(take)
            s = s[len(take) :]
        if s:
            self.tail += s
            if len(self.tail) > self.cap:
                self.dropped += len(self.tail) - self.cap
                self.tail = self.tail[-self.cap :]

    def text(self) -> str:
        self.feed(b"", final=True)
        full = "".join(self.head) + self.tail
        if self.dropped:
            return _truncate(full, self.cap, self.dropped)
        return truncate_middle(full, self.cap)


def _drain(fd: int, out: _HeadTail) -> bool:
    """Read what the pipe holds now (at most ~1 MiB); True at end of file."""
    read = 0
    while read < _MAX_READ_PER_POLL:
        try:
            chunk = os.read(fd, _READ_CHUNK)
        except BlockingIOError:
            return False
        except OSError:
            return True
        if not chunk:
            return True
        out.feed(chunk)
        read += len(chunk)
    return False


def _group_members(pgid: int) -> list[int] | None:
    """Pids of the live (not zombie) processes of group ``pgid``, from ``/proc``; None without
    a Linux ``/proc``."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    members = []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # exited meanwhile
        fields = stat[stat.rfind(b")") + 2 :].split()  # after "pid (comm) "
        if len(fields) > 2 and fields[0] not in (b"Z", b"X") and int(fields[2]) == pgid:
            members.append(int(entry))
    return members


def _group_alive(pgid: int) -> bool:
    """Whether group ``pgid`` has a live member (zombies left to a non-reaping init don't count)."""
    members = _group_members(pgid)
    if members is not None:
        return bool(members)
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - a member changed credentials
        return True
    return True


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


async def _kill_group(proc: subprocess.Popen[bytes], fd: int, out: _HeadTail, grace: float) -> None:
    """SIGTERM the process group, SIGKILL it after ``grace`` seconds, reap the shell.

    The group id is the shell's pid (``start_new_session=True``); the group cannot be reused
    while the unreaped shell or any member exists. Output still in the pipe is read, but never
    waited for: a process that escaped the group may hold the pipe forever.
    """
    pgid = proc.pid
    if grace > 0:
        _signal_group(pgid, signal.SIGTERM)
        end = time.monotonic() + grace
        while time.monotonic() < end:
            _drain(fd, out)
            proc.poll()
            if not _group_alive(pgid):
                break
            await anyio.sleep(_POLL_S)
    if _group_alive(pgid):
        _signal_group(pgid, signal.SIGKILL)
    for _ in range(200):  # SIGKILL takes effect at once; reap the shell, see the group gone (<= ~2 s)
        if proc.poll() is not None and not _group_alive(pgid):
            break
        await anyio.sleep(0.01)
    _drain(fd, out)


async def _run_shell(
    argv: list[str], cwd: Path, timeout: float, max_chars: int
) -> tuple[str, int | None, float, bool]:
    """(output, exit status or None on timeout, seconds, background processes were killed)."""
    start = time.monotonic()
    proc = subprocess.Popen(  # fork/exec only; fast enough to call from the event loop
        argv,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    os.set_blocking(fd, False)
    out = _HeadTail(max_chars)
    deadline = start + timeout
    eof = timed_out = killed_background = False
    exited_at: float | None = None
    try:
        while True:
            if not eof:
                eof = _drain(fd, out)
            exited = proc.poll() is not None
            if eof and exited:
                break
            now = time.monotonic()
            if exited:  # the shell is gone but something still holds its output pipe
                exited_at = now if exited_at is None else exited_at
                if now - exited_at >= _PIPE_GRACE_S or now >= deadline:
                    killed_background = True
                    break
            elif now >= deadline:
                timed_out = True
                break
            wait = min(deadline - now, _POLL_S)
            if eof:
                await anyio.sleep(min(wait, 0.005))  # output closed; waiting for the exit status
            else:
                with anyio.move_on_after(wait):
                    await anyio.wait_readable(fd)
        if timed_out or killed_background:
            await _kill_group(proc, fd, out, _TERM_GRACE_S)
    except BaseException:  # cancelled: kill everything at once, then let the cancellation go on
        with anyio.CancelScope(shield=True):
            await _kill_group(proc, fd, out, 0.0)
        raise
    finally:
        proc.stdout.close()
    elapsed = time.monotonic() - start
    rc = proc.returncode
    status = None if timed_out or rc is None else (rc if rc >= 0 else 128 - rc)
    return out.text(), status, elapsed, killed_background


# -- the tools -------------------------------------------------------------------------------


def _rg_path() -> str | None:
    """The ripgrep executable, or None (grep then uses its Python fallback)."""
    return shutil.which("rg")


def _grep_rg(
    rg: str, ws: _Workspace, regex: str, target: Path, glob: str | None
) -> list[tuple[str, int, str]]:
    argv = [rg, "--line-number", "--no-heading", "--with-filename", "--null", "--color", "never"]
    if glob:
        argv += ["--glob", glob]
    argv += ["-e", regex]
    if target != ws.root:
        argv += ["--", ws.rel(target)]
    try:
        proc = subprocess.run(
            argv, cwd=ws.root, stdin=subprocess.DEVNULL, capture_output=True, timeout=_GREP_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        raise ToolError(f"grep timed out after {_GREP_TIMEOUT_S} s; narrow the path or glob") from None
    if proc.returncode == 1:
        return []
    if proc.returncode != 0 and not proc.stdout:
        message = proc.stderr.decode("utf-8", "replace").strip()
        raise ToolError(message or f"rg failed with exit code {proc.returncode}")
    results = []
    for raw in proc.stdout.split(b"\n"):
        name, sep, rest = raw.partition(b"\x00")
        number, sep2, text = rest.partition(b":")
        if not sep or not sep2 or not number.isdigit():
            continue
        rel = PurePosixPath(os.path.normpath(os.fsdecode(name))).as_posix()
        line = _decode(text)[0]
        results.append((rel, int(number), line[:-1] if line.endswith("\r") else line))
    return results


def _glob_matches(rel: str, glob: str) -> bool:
    if "/" not in glob:
        return fnmatch.fnmatchcase(rel.rsplit("/", 1)[-1], glob)
    return fnmatch.fnmatchcase(rel, glob) or (
        glob.startswith("**/") and fnmatch.fnmatchcase(rel, glob[3:])
    )


def _grep_python(
    ws: _Workspace, regex: str, target: Path, glob: str | None
) -> list[tuple[str, int, str]]:
    try:
        rx = re.compile(regex)
    except re.error as e:
        raise ToolError(f"invalid regular expression {regex!r}: {e}") from None
    files: list[Path] = []
    if target.is_file():
        files.append(target)
    else:
        for dirpath, dirnames, filenames in os.walk(target):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for fname in sorted(filenames):
                fpath = Path(dirpath) / fname
                if fname.startswith(".") or fpath.is_symlink():
                    continue
                if glob and not _glob_matches(ws.rel(fpath), glob):
                    continue
                files.append(fpath)
    results = []
    for fpath in files:
        try:
            data = fpath.read_bytes()
        except OSError:
            continue
        if _is_binary(data):
            continue
        rel = ws.rel(fpath)
        for number, line in enumerate(_split_lines(_decode(data)[0]), 1):
            if rx.search(line):
                results.append((rel, number, line))
    return results


def coding_tools(
    root: str | os.PathLike[str], *, bash_timeout: int = 120, max_output_chars: int = 30_000
) -> list[Tool]:
    """The six coding tools bound to the workspace ``root``.

    Returns ``[bash, read_file, write_file, edit_file, grep, glob]``; their docstrings (below, in
    the source) are the descriptions the model reads and document each output format exactly.

    Args:
        root: the workspace directory (resolved once; the file tools refuse paths outside it).
        bash_timeout: ``bash``'s default ``timeout`` in seconds.
        max_output_chars: cap on ``bash`` output (head and tail kept, see
            :func:`~kimik3.tools.truncate_middle`).

    Returns:
        A list of :class:`~kimik3.tools.Tool`.

    Raises:
        ToolDefinitionError: ``root`` is not an existing directory.
    """
    workspace = Path(root).resolve()
    if not workspace.is_dir():
        raise ToolDefinitionError(f"workspace root {str(root)!r} is not a directory")
    ws = _Workspace(workspace)
    shell = shutil.which("bash") or "/bin/sh"

    async def bash(command: str, timeout: Annotated[int, Field(ge=1)] = bash_timeout) -> str:
        """Run a shell command (bash) in the workspace root and return its output.

        Each call starts a fresh shell (cd and variables do not persist); stdin is empty;
        stdout and stderr are merged. Long output keeps its head and tail around a line
        "... [N characters elided] ...". The last line is "[exit code: N, 0.12 s]" (N is 128+S
        for a process killed by signal S), or "[timed out after T s; process group killed]".
        Background processes that keep the output open are killed when the command ends (a line
        "[background processes holding the output were killed]" says so before the last line);
        redirect their output (cmd > log 2>&1 &) to keep them running.

        Args:
            command: the command line; pipes, &&, redirections and heredocs work.
            timeout: seconds before the command and all its child processes are killed.
        """
        output, status, elapsed, killed_background = await _run_shell(
            [shell, "-c", command], workspace, timeout, max_output_chars
        )
        lines = [output.rstrip("\n")] if output.strip("\n") else []
        if killed_background:
            lines.append("[background processes holding the output were killed]")
        if status is None:
            lines.append(f"[timed out after {timeout} s; process group killed]")
        else:
            lines.append(f"[exit code: {status}, {elapsed:.2f} s]")
        return "\n".join(lines)

    def read_file(
        path: str,
        offset: Annotated[int, Field(ge=1)] = 1,
        limit: Annotated[int, Field(ge=1)] = 2000,
    ) -> str:
        """Read a text file with line numbers.

        Each line is shown as its number right-aligned in 6 columns, a tab character, then the
        line's text (the cat -n format). Lines longer than 2000 characters end with
        "... [N more characters]". If lines remain after the shown range, a last line
        "[N more lines; continue with offset=M]" follows. An empty file gives "[empty file]";
        a binary file is an error.

        Args:
            path: file path, relative to the workspace root.
            offset: number of the first line to show (1 = start of file).
            limit: maximum number of lines to show.
        """
        _, data = _read_text_file(ws, path)
        lines = _split_lines(_decode(data)[0])
        if not lines:
            return "[empty file]"
        if offset > len(lines):
            raise ToolError(f"offset {offset} is past the end of {path} ({len(lines)} lines)")
        shown = lines[offset - 1 : offset - 1 + limit]
        out = [f"{n:6d}\t{_cap_line(line, _MAX_LINE_CHARS)}" for n, line in enumerate(shown, offset)]
        end = offset - 1 + len(shown)
        if end < len(lines):
            more = len(lines) - end
            out.append(f"[{more} more line{'s' if more != 1 else ''}; continue with offset={end + 1}]")
        return "\n".join(out)

    def write_file(path: str, content: str) -> str:
        """Create or overwrite a file with the given content (UTF-8), creating parent directories.

        Returns "Wrote N bytes to PATH" (PATH relative to the workspace root).

        Args:
            path: file path, relative to the workspace root.
            content: the complete new file content.
        """
        p = ws.resolve(path)
        if p.is_dir():
            raise ToolError(f"{path} is a directory")
        data = content.encode("utf-8")
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
        except OSError as e:
            raise ToolError(f"cannot write {path}: {e.strerror or e}") from None
        return f"Wrote {len(data)} bytes to {ws.rel(p)}"

    def edit_file(path: str, old_string: str, new_string: str, replace_all: bool = False) -> str:
        """Replace an exact string in a file.

        old_string must match the file exactly (whitespace and indentation included) and only
        once, unless replace_all is true; include surrounding lines to make it unique. The
        file's line endings (LF or CRLF) and encoding are kept. Returns "Edited PATH
        (N replacement[s])" followed by a unified diff of the change (3 context lines).

        Args:
            path: file path, relative to the workspace root.
            old_string: the exact text to replace.
            new_string: the replacement text.
            replace_all: replace every occurrence instead of requiring exactly one.
        """
        if not old_string:
            raise ToolError("old_string is empty; use write_file to create or overwrite a file")
        if old_string == new_string:
            raise ToolError("old_string and new_string are identical; nothing to change")
        p, data = _read_text_file(ws, path)
        text, encoding = _decode(data)
        old, new = old_string, new_string
        crlf = text.count("\r\n")
        if crlf and crlf * 2 >= text.count("\n"):  # a CRLF file: the model speaks LF
            old = old_string.replace("\r\n", "\n").replace("\n", "\r\n")
            new = new_string.replace("\r\n", "\n").replace("\n", "\r\n")
            if old not in text and old_string in text:  # a stray LF line in a CRLF file
                old, new = old_string, new_string
        count = text.count(old)
        if count == 0:
            raise ToolError(f"old_string not found in {path}; it must match the file exactly")
        if count > 1 and not replace_all:
            raise ToolError(
                f"old_string matches {count} times in {path}; add surrounding lines to make it "
                "unique, or set replace_all to true"
            )
        updated = text.replace(old, new) if replace_all else text.replace(old, new, 1)
        try:
            encoded = updated.encode(encoding)
        except UnicodeEncodeError:
            raise ToolError(
                f"{path} is not UTF-8 (kept as {encoding}) and new_string has characters it cannot hold"
            ) from None
        try:
            p.write_bytes(encoded)
        except OSError as e:
            raise ToolError(f"cannot write {path}: {e.strerror or e}") from None
        rel = ws.rel(p)
        n = count if replace_all else 1
        diff = "\n".join(
            difflib.unified_diff(
                _split_lines(text), _split_lines(updated), f"a/{rel}", f"b/{rel}", n=3, lineterm=""
            )
        )
        header = f"Edited {rel} ({n} replacement{'s' if n != 1 else ''})"
        return f"{header}\n{truncate_middle(diff, _MAX_DIFF_CHARS)}" if diff else header

    def grep(pattern: str, path: str = ".", glob: str | None = None) -> str:
        """Search file contents with a regular expression.

        Uses ripgrep when installed (Rust regex syntax; .gitignore'd and hidden files skipped),
        else Python's re (hidden files and directories skipped). Binary files are skipped.
        Output: one line per matching line, "PATH:LINE:TEXT", sorted by path then line number,
        PATH relative to the workspace root; TEXT longer than 500 characters ends with
        "... [N more characters]". At most 200 lines, then "[N more matching lines not shown]".
        No match gives "[no matches]".

        Args:
            pattern: the regular expression, e.g. "def \\w+\\(" or "TODO".
            path: file or directory to search, relative to the workspace root.
            glob: only search files matching this pattern, e.g. "*.py" (file name) or
                "src/**/*.ts" (path).
        """
        target = ws.resolve(path)
        if not target.exists():
            raise ToolError(f"{path}: no such file or directory")
        rg = _rg_path()
        found = _grep_rg(rg, ws, pattern, target, glob) if rg else _grep_python(ws, pattern, target, glob)
        if not found:
            return "[no matches]"
        found.sort(key=lambda m: (m[0], m[1]))
        out = [
            f"{rel}:{n}:{_cap_line(text, _MAX_GREP_LINE_CHARS)}" for rel, n, text in found[:_MAX_GREP_LINES]
        ]
        if len(found) > _MAX_GREP_LINES:
            more = len(found) - _MAX_GREP_LINES
            out.append(f"[{more} more matching line{'s' if more != 1 else ''} not shown]")
        return "\n".join(out)

    def glob(pattern: str) -> str:
        """List the files and directories matching a glob pattern.

        "*" matches within one path component, "**" any number of directories: "*.py" (top
        level), "**/*.py" (everywhere), "src/*" (list a directory). Output: one path per line,
        relative to the workspace root, sorted, directories ending with "/"; .git is left out
        unless the pattern names it. At most 500 paths, then "[N more paths not shown]". No match
        gives "[no matches]".

        Args:
            pattern: the glob pattern, relative to the workspace root.
        """
        parts = PurePosixPath(pattern).parts
        if Path(pattern).is_absolute() or ".." in parts:
            raise ToolError(f"pattern {pattern!r} must be relative to the workspace and not use '..'")
        try:
            candidates = list(workspace.glob(pattern))
        except (ValueError, NotImplementedError) as e:
            raise ToolError(f"invalid glob pattern {pattern!r}: {e}") from None
        wants_git = ".git" in parts
        found = []
        for p in candidates:
            rel = ws.rel(p)
            if (not wants_git and ".git" in rel.split("/")) or not ws.inside(p):
                continue
            found.append(rel + "/" if p.is_dir() and rel != "." else rel)
        if not found:
            return "[no matches]"
        found.sort()
        out = found[:_MAX_GLOB_PATHS]
        if len(found) > _MAX_GLOB_PATHS:
            more = len(found) - _MAX_GLOB_PATHS
            out.append(f"[{more} more path{'s' if more != 1 else ''} not shown]")
        return "\n".join(out)

    return [Tool(f) for f in (bash, read_file, write_file, edit_file, grep, glob)]
