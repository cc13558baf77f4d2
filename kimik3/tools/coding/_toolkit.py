"""The coding toolkit: ``bash``, ``read_file``, ``write_file``, ``edit_file``, ``grep``, ``glob``.

Every tool is bound to one workspace root. The file tools walk paths (relative ones from the
root) component by component from the root's directory descriptor, follow symlinks, and refuse
anything that leads outside the root, ``..`` and absolute paths included, with a
:class:`~kimik3.ToolError`; a directory swapped for a symlink mid-call cannot lead them out
(see ``_paths``). They open regular files only (a FIFO, socket or device is refused before any
open that could block), stream what they read, and each has a time limit (a call that overruns
returns an error and its thread is abandoned, see :meth:`~kimik3.tools.Tool.run`). ``bash`` runs
its commands in the root inside a bubblewrap sandbox where one works (``sandbox=``, see
``_sandbox`` and ``docs/sandbox.md``): the workspace writable, the rest read-only, ``$HOME``
hidden, no network; with ``sandbox="none"`` it runs as the current user and can reach anything
that user can (the path checks only keep the file tools honest). The argument names are the ones models already
know (Claude Code / mini-swe-agent style); the docstrings below are what the model reads, and they
describe the exact output formats, which are kept stable on purpose. POSIX only (Linux for the
full guarantees: ``/proc``, ``prctl``).

The docstrings are frozen: they are the tool descriptions k3-tiny was trained on
(``tests/test_k3_tiny.py`` pins the prompt's hash). What they do not say, the model learns from the
results: a FIFO, socket or device is an error naming its kind; a file with several hard links is
not written (``write_hard_links``); edits match line endings loosely, keep each line's own ending
and every undecodable byte, and count overlapping matches; a file whose lines end with a lone CR
(no LF anywhere: classic Mac OS) is read, searched and edited line by line; a write lands only
while its call is live (``_write``); files over 10 MiB are not edited;
grep's Python fallback uses the ``regex`` module with a timeout; grep adds "[at least N more
matching lines not shown]" and "[<why>; results are incomplete]" when it stops early (60 s, 100,000
matching lines); glob follows a symlinked directory only when its target was not entered yet and
adds "[directories more than 128 levels deep were not searched]"; bash's environment makes
editors (``vi`` / ``vim`` run directly too), pagers and prompts fail fast
(``_bash._FAIL_FAST_ENV``); a ``timeout`` above a week is an error; its output has no terminal
escape codes, a timeout ends every descendant (``setsid`` ones too, through a subreaper), and a
line "[these processes survived the kill: PID...]" names any that could not be ended. File names
are shown with control characters and undecodable bytes escaped (``\\n``, ``\\xNN``) and a backslash
doubled (``\\\\``), so a name ``a<LF>b`` shows as ``a\\nb`` and a name ``a\\nb`` as ``a\\\\nb``; the file
tools read a path argument in the same escaped form (``_paths.read_path``), so a name they print
can be passed back as printed.

Usage::

    from kimik3.tools.coding import coding_tools

    tools = coding_tools("/path/to/repo")          # list[Tool]
    result = await tools[0].run({"command": "ls"})  # ToolResult
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Annotated

from pydantic import Field

from ..._exceptions import ToolDefinitionError, ToolError, UserError
from .._tool import FunctionTool, Tool
from . import _files, _search
from ._bash import result_lines, run_shell
from ._files import cap_line
from ._paths import Workspace, show_path
from ._sandbox import Sandbox, SandboxMode

__all__ = ["coding_tools"]

_MAX_GREP_LINE_CHARS = 500


@contextlib.contextmanager
def _os_errors(action: str, path: str) -> Iterator[None]:
    """An :class:`OSError` (a disk error, a file removed mid-call) becomes a ToolError."""
    try:
        yield
    except OSError as e:
        raise ToolError(f"cannot {action} {path}: {e.strerror or e}") from None
FILE_TOOL_TIMEOUT_S = 60.0  # read_file / write_file / edit_file
MAX_BASH_TIMEOUT_S = 7 * 24 * 3600  # bash's timeout argument: at most a week


def coding_tools(
    root: str | os.PathLike[str],
    *,
    bash_timeout: int = 120,
    max_output_chars: int = 30_000,
    write_hard_links: bool = False,
    sandbox: SandboxMode | Sandbox = "auto",
    network: bool = False,
    sandbox_read: Sequence[str | os.PathLike[str]] = (),
    sandbox_write: Sequence[str | os.PathLike[str]] = (),
    read_only: Sequence[str | os.PathLike[str]] | Callable[[], Iterable[str | os.PathLike[str]]] = (),
) -> list[Tool]:
    """The six coding tools bound to the workspace ``root``.

    Returns ``[bash, read_file, write_file, edit_file, grep, glob]``; their docstrings (below, in
    the source) are the descriptions the model reads and document each output format exactly.

    Args:
        root: the workspace directory (resolved once; the file tools refuse paths outside it).
        bash_timeout: ``bash``'s default ``timeout`` in seconds (an int, 1 to
            :data:`MAX_BASH_TIMEOUT_S`, a week). A call's own ``timeout`` above that is a tool
            error, not a crash (``10**400`` cannot become a float).
        max_output_chars: cap on ``bash`` output (head and tail kept, see
            :func:`~kimik3.tools.truncate_middle`).
        write_hard_links: let ``write_file`` / ``edit_file`` write a file that has more than one
            hard link (off by default: another link may be outside the workspace).
        sandbox: where ``bash`` runs its commands: "auto" (bubblewrap where it works, else
            unsandboxed with a one-line warning), "bwrap" (required), "none", or a
            :class:`~kimik3.tools.coding.Sandbox` to share (with background processes).
        network: let commands reach the network (bwrap; default a private loopback only).
        sandbox_read, sandbox_write: more paths readable / writable inside the sandbox.
        read_only: folders outside the workspace that ``read_file``, ``grep`` and ``glob`` may
            read, by absolute path (a skill's folder, :class:`kimik3.harness.Skills`); never
            written, and a symlink or ``..`` leading out of such a folder is refused as one
            leading out of the workspace is. A callable is asked at every call (folders that
            appear mid-run). Paths printed from them are absolute.

    Returns:
        A list of :class:`~kimik3.tools.Tool`. The sandbox starts with the first command and
        ends, with every process in it, when it is closed or garbage-collected.

    Raises:
        ToolDefinitionError: ``root`` is not an existing directory.
        SandboxUnavailableError: ``sandbox="bwrap"`` where bubblewrap cannot run.
        UserError: options for a :class:`Sandbox` given with one, or an allowed path that does
            not exist.
        UserError: ``bash_timeout`` is not a whole number of seconds from 1 to a week (0 or a
            negative number would kill every command at once).
    """
    if type(bash_timeout) is not int or not 1 <= bash_timeout <= MAX_BASH_TIMEOUT_S:
        raise UserError(f"bash_timeout must be a whole number of seconds from 1 to {MAX_BASH_TIMEOUT_S}, "
                        f"got {bash_timeout!r}")
    workspace = Path(root).resolve()
    if not workspace.is_dir():
        raise ToolDefinitionError(f"workspace root {str(root)!r} is not a directory")
    if isinstance(sandbox, Sandbox):
        if network or sandbox_read or sandbox_write:
            raise UserError("network, sandbox_read and sandbox_write are options of the Sandbox given; set them there")
        box = sandbox
    else:
        box = Sandbox(workspace, sandbox, network=network, read=sandbox_read, write=sandbox_write)
    ws = Workspace(workspace, sessions=box.sessions)  # the run's session files: refused
    shell = shutil.which("bash") or "/bin/sh"

    def reader(path: str) -> tuple[Workspace, str]:
        """(where a read of ``path`` walks, the prefix of the paths it prints)."""
        w = ws.reading(path, read_only() if callable(read_only) else read_only)
        return w, ("" if w is ws else f"{w.root}/")

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
        if timeout > MAX_BASH_TIMEOUT_S:  # the schema says only ge=1 (frozen); 10**400 is no float
            shown = f"{timeout} s" if timeout < 10**30 else "beyond 10^30 s"
            raise ToolError(f"timeout {shown} is too long: at most {MAX_BASH_TIMEOUT_S} s (a week)")
        if "\0" in command:  # exec would refuse it with a bare "embedded null byte"
            raise ToolError("the command contains a NUL byte; a command line cannot hold one (use printf '\\0')")
        done = await run_shell(box, [shell, "-c", command], timeout, max_output_chars)
        lines = [done.output.rstrip("\n")] if done.output.strip("\n") else []
        return "\n".join(lines + result_lines(done, timeout, box))

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
        with _os_errors("read", path):
            return _files.read_file(reader(path)[0], path, offset, limit)

    def write_file(path: str, content: str) -> str:
        """Create or overwrite a file with the given content (UTF-8), creating parent directories.

        Returns "Wrote N bytes to PATH" (PATH relative to the workspace root).

        Args:
            path: file path, relative to the workspace root.
            content: the complete new file content.
        """
        with _os_errors("write", path):
            return _files.write_file(ws, path, content, write_hard_links)

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
        with _os_errors("edit", path):
            return _files.edit_file(ws, path, old_string, new_string, replace_all, write_hard_links)

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
        if glob:
            _search.check_glob(glob)
        rg = _search.rg_path()
        w, shown = reader(path)
        with _os_errors("search", path):
            found = _search.grep_rg(rg, w, pattern, path, glob) if rg else _search.grep_python(w, pattern, path, glob)
        if not found.total:
            return f"[no matches; {found.stopped}]" if found.stopped else "[no matches]"
        out = [
            f"{show_path(shown + rel)}:{n}:{cap_line(text, _MAX_GREP_LINE_CHARS)}" for rel, n, text in found.kept
        ]
        more = found.total - len(found.kept)
        if more:
            at_least = "at least " if found.stopped else ""
            out.append(f"[{at_least}{more} more matching line{'s' if more != 1 else ''} not shown]")
        if found.stopped:
            out.append(f"[{found.stopped}; results are incomplete]")
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
        w, shown = reader(pattern)
        with _os_errors("list", pattern):
            found = _search.glob(w, (pattern[len(shown) :] or ".") if shown else pattern)
        paths = sorted(found.paths, key=lambda p: p.split("/"))
        out = [show_path(shown + p) for p in paths[: _search.MAX_GLOB_PATHS]] or ["[no matches]"]
        more = found.total - len(paths[: _search.MAX_GLOB_PATHS])
        if more:
            out.append(f"[{more} more path{'s' if more != 1 else ''} not shown]")
        if found.pruned:
            out.append(f"[directories more than {_search.MAX_DEPTH} levels deep were not searched]")
        if found.stopped:
            out.append(f"[{found.stopped}; results are incomplete]")
        return "\n".join(out)

    return [
        FunctionTool(bash),  # bounded by its own ``timeout`` (and async: cancelled with the run)
        *(FunctionTool(f, timeout=FILE_TOOL_TIMEOUT_S) for f in (read_file, write_file, edit_file)),
        FunctionTool(grep, timeout=_search.GREP_TIMEOUT_S + 30),  # grep stops itself at GREP_TIMEOUT_S
        FunctionTool(glob, timeout=_search.GLOB_TIMEOUT_S + 30),
    ]
