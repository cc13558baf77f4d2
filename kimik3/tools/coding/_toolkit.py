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

import difflib
import os
import shutil
from pathlib import Path, PurePosixPath
from typing import Annotated

from pydantic import Field

from ..._exceptions import ToolDefinitionError, ToolError
from .._tool import Tool
from .._truncate import truncate_middle
from . import _search
from ._bash import _run_shell
from ._paths import _cap_line, _decode, _read_text_file, _split_lines, _Workspace
from ._search import _grep_python, _grep_rg

__all__ = ["coding_tools"]

_MAX_LINE_CHARS = 2000  # read_file
_MAX_GREP_LINE_CHARS = 500
_MAX_GREP_LINES = 200
_MAX_GLOB_PATHS = 500
_MAX_DIFF_CHARS = 4000


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
        rg = _search._rg_path()
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
