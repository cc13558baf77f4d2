"""``multi_edit`` (several replacements in one file) and ``apply_patch`` (a unified diff over
several files): validated completely in memory before any byte is written; all or nothing.

Files are opened through the coding tools' confined walk (:class:`~kimik3.tools.coding._paths.
Workspace`: ``openat`` from the root with ``O_NOFOLLOW``, regular files only, never blocking), so
these tools cannot leave the workspace either; a file with several hard links is not written
unless allowed. Text handling is ``edit_file``'s (:mod:`kimik3.tools.coding._files`): UTF-8 with
undecodable bytes kept byte for byte, a BOM kept, legacy 8-bit files as Latin-1; ``multi_edit``
matches line endings loosely and keeps each line's own ending; ``apply_patch`` compares lines
without their endings and gives each new line the file's usual ending. If a write fails midway,
the files already written are put back as they were and the call fails. Every file's new text is
written to a temporary file first and renamed into place only while the call is live
(:mod:`kimik3.tools.coding._write`): a call reported as timed out changes nothing afterwards.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from .._exceptions import ToolError
from ..tools import commit_point, truncate_middle
from ..tools.coding.api import (
    MAX_EDIT_BYTES,
    SessionFiles,
    Staged,
    Workspace,
    decode,
    encode,
    is_binary,
    lines_and_endings,
    replace,
    replace_keeping_endings,
    sniff_encoding,
    split_lines,
    stage,
    to_utf8,
    unified_diff,
    usual_ending,
)

__all__ = ["EditSpec", "FileAccess", "apply_edits", "apply_patch_text", "parse_patch", "patch_paths"]

_MAX_DIFF_CHARS = 4000
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_NO_NEWLINE = "\\ No newline at end of file"


class EditSpec(BaseModel):
    """One replacement: old_string becomes new_string (every occurrence with replace_all)."""

    model_config = ConfigDict(json_schema_extra=lambda schema: schema.pop("description", None))

    old_string: str
    new_string: str
    replace_all: bool = False


class FileAccess:
    """Confined reads and writes for the patch tools.

    Args:
        root: the workspace root.
        hard_links: write files that have more than one hard link (see ``coding_tools``).
        sessions: the run's session files, refused (a sandbox's :attr:`~kimik3.tools.coding.Sandbox.sessions`).
    """

    def __init__(self, root: str | os.PathLike[str], *, hard_links: bool = False,
                 sessions: SessionFiles | None = None) -> None:
        self.ws = Workspace(Path(root).resolve(), sessions=sessions)
        self.hard_links = hard_links

    def read(self, path: str) -> bytes | None:
        """The bytes of the regular file ``path``, or None when it does not exist.

        Raises:
            ToolError: outside the workspace, not a regular file, over the edit size limit.
        """
        try:
            fd, _, _ = self.ws.open_file(path)
        except ToolError as e:
            if str(e).endswith(("no such file", "no such file or directory")):
                return None
            raise
        with os.fdopen(fd, "rb") as f:
            data = f.read(MAX_EDIT_BYTES + 1)
        if len(data) > MAX_EDIT_BYTES:
            raise ToolError(f"{path} is over the limit of {MAX_EDIT_BYTES} bytes for edits; use bash tools")
        return data

    def write(self, path: str, data: bytes) -> str:
        """Make ``data`` the content of ``path`` (made, with its directories, when missing), only
        while the call is live (:mod:`kimik3.tools.coding._write`); its workspace-relative path."""
        return replace(self.ws, path, data, hard_links=self.hard_links)

    def stage(self, path: str, data: bytes) -> Staged:
        """``data`` ready to become ``path``'s content (:func:`~kimik3.tools.coding._write.stage`)."""
        return stage(self.ws, path, data, hard_links=self.hard_links)

    def removable(self, path: str) -> None:
        """Check that :meth:`delete` may remove ``path`` (no git control data, no kept folder:
        ``kimik3.tools.coding._kept``) without removing anything.

        Raises:
            ToolError: it may not (the refusal the model reads), or the walk fails.
        """
        with self.ws.locate(path, write=True):
            pass

    def delete(self, path: str) -> None:
        """Remove the file ``path`` (only while the call is live)."""
        commit_point()
        with self.ws.locate(path, write=True) as loc:
            if loc.name is None:
                raise ToolError(f"{path} is a directory")
            os.unlink(loc.name, dir_fd=loc.dir_fd)


# -- text ------------------------------------------------------------------------------------


@dataclass
class _Text:
    text: str
    encoding: str
    ending: str  # the usual line ending: "\n", "\r\n", or "\r" (a CR-only file)

    @classmethod
    def of(cls, data: bytes, path: str) -> _Text:
        if is_binary(data):
            raise ToolError(f"{path} is a binary file ({len(data)} bytes)")
        encoding = sniff_encoding(data, complete=True)
        text = decode(data, encoding)
        return cls(text, encoding, usual_ending(text))

    def encode(self, text: str, path: str) -> bytes:
        return encode(text, self.encoding, path)


def apply_edits(text: str, edits: list[EditSpec], path: str) -> tuple[str, int]:
    """``text`` with every edit applied in order (each sees the previous ones' result), each with
    ``edit_file``'s rules (:func:`~kimik3.tools.coding._files.replace_keeping_endings`).

    Returns:
        (new text, number of replacements).

    Raises:
        ToolError: an edit whose old_string is empty, unchanged, missing, or ambiguous; the
            message names the edit (1-based) and says nothing was written.
    """
    if not edits:
        raise ToolError("edits is empty; give at least one {old_string, new_string}")
    total = 0
    for n, e in enumerate(edits, 1):
        if not e.old_string:
            raise ToolError(f"edit {n}: old_string is empty; nothing was changed")
        if e.old_string == e.new_string:
            raise ToolError(f"edit {n}: old_string and new_string are identical; nothing was changed")
        try:
            text, count = replace_keeping_endings(text, e.old_string, e.new_string, e.replace_all, path)
        except ToolError as err:
            raise ToolError(f"edit {n}: {err} (after the edits before it); nothing was changed") from None
        total += count
    return text, total


# -- unified diffs ---------------------------------------------------------------------------


@dataclass
class Hunk:
    old_start: int
    lines: list[str] = field(default_factory=list)  # " x", "-x", "+x"
    no_newline_old: bool = False  # the old text ends the file, without a final newline
    no_newline_new: bool = False  # the new text ends the file, without a final newline

    def old(self) -> list[str]:
        return [line[1:] for line in self.lines if line[0] in " -"]

    def new(self) -> list[str]:
        return [line[1:] for line in self.lines if line[0] in " +"]


@dataclass
class FilePatch:
    old_path: str | None  # None: the file is created
    new_path: str | None  # None: the file is deleted
    hunks: list[Hunk] = field(default_factory=list)


def _strip_prefix(name: str) -> str | None:
    name = name.split("\t", 1)[0].strip()
    if name == "/dev/null":
        return None
    return name[2:] if name.startswith(("a/", "b/")) else name


def parse_patch(patch: str) -> list[FilePatch]:
    """The files of a unified diff (``diff -u`` / ``git diff`` output; ``diff --git`` and
    ``index`` lines are skipped). Hunk line counts are not trusted: a hunk ends at the next
    ``@@`` or file header; a blank body line counts as a blank context line.

    Raises:
        ToolError: no file header, a hunk before any file, a body line that is not
            " ", "-", "+" or "\\ No newline at end of file", a binary change, or a ``diff --git``
            block without a ``---``/``+++`` header (pure renames, mode changes, empty files).
    """
    files: list[FilePatch] = []
    lines = patch.replace("\r\n", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    i = 0
    hunk: Hunk | None = None
    block: tuple[int, int] | None = None  # ("diff --git" line number, len(files) there)

    def close_block() -> None:  # a git block with no "---"/"+++" would be skipped: say so
        if block is not None and len(files) == block[1]:
            raise ToolError(f"patch line {block[0]}: {lines[block[0] - 1][:80]!r} has no '--- a/PATH' / "
                            "'+++ b/PATH' header (a binary file, a pure rename, a mode change or an empty "
                            "file); apply_patch cannot apply it: use bash (git apply); nothing was changed")

    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            files.append(FilePatch(_strip_prefix(line[4:]), _strip_prefix(lines[i + 1][4:])))
            hunk = None
            i += 2
            continue
        m = _HUNK.match(line)
        if m:
            if not files:
                raise ToolError(f"patch line {i + 1}: a hunk before any '--- a/PATH' / '+++ b/PATH' header")
            hunk = Hunk(int(m.group(1)))
            files[-1].hunks.append(hunk)
        elif line.startswith(("Binary files ", "GIT binary patch")):
            raise ToolError(f"patch line {i + 1}: {line[:80]!r}: apply_patch cannot apply binary changes; "
                            "use bash (git apply); nothing was changed")
        elif hunk is not None and line.startswith((" ", "-", "+")):
            hunk.lines.append(line)
        elif hunk is not None and line == "":
            hunk.lines.append(" ")
        elif hunk is not None and line.startswith("\\"):
            if hunk.lines and hunk.lines[-1][0] in " -":
                hunk.no_newline_old = True
            if hunk.lines and hunk.lines[-1][0] in " +":
                hunk.no_newline_new = True
        elif line.startswith(("diff ", "index ", "new file mode", "deleted file mode", "similarity", "rename ",
                              "old mode", "new mode")) or hunk is None:
            if line.startswith("diff --git "):
                close_block()
                block = (i + 1, len(files))
            hunk = None
        else:
            raise ToolError(f"patch line {i + 1}: {line[:80]!r} is not a diff line (' ', '-', '+' or '@@')")
        i += 1
    close_block()
    if not files:
        raise ToolError("no '--- a/PATH' / '+++ b/PATH' file header in the patch")
    return files


def patch_paths(patch: str) -> list[str]:
    """The paths a patch names (best effort, for instructions lookup; never raises)."""
    try:
        return list(dict.fromkeys(p for f in parse_patch(patch) for p in (f.old_path, f.new_path) if p))
    except ToolError:
        return []


def _find(lines: list[str], want: list[str], guess: int, start: int) -> int | None:
    """Where ``want`` occurs in ``lines`` at or after ``start``, nearest to ``guess``."""
    if not want:
        return min(max(guess, start), len(lines))
    best = None
    for pos in range(start, len(lines) - len(want) + 1):
        if lines[pos : pos + len(want)] == want and (best is None or abs(pos - guess) < abs(best - guess)):
            best = pos
    return best


def _patch_text(text: str, ending: str, fp: FilePatch, name: str) -> str:
    lines, endings = lines_and_endings(text)  # CR-only files too: their lines as read_file shows them
    out: list[str] = []
    pos = 0
    for n, h in enumerate(fp.hunks, 1):
        old = h.old()
        if h.no_newline_old:  # "\ No newline at end of file" after an old line: the hunk ends the file
            end = len(lines) - len(old)
            no_final_newline = bool(endings) and endings[-1] == ""
            at: int | None = end if end >= pos and lines[end:] == old and no_final_newline else None
        else:  # "@@ -L,0" inserts after line L, else the hunk starts at line L (of the original file)
            at = _find(lines, old, h.old_start if not old else h.old_start - 1, pos)
        if at is None:
            first = old[0] if old else ""
            raise ToolError(f"{name}: hunk {n} (@@ -{h.old_start}) does not match the file (looking for "
                            f"{first!r}...); read the file and make the patch again; nothing was changed")
        out += [line + end for line, end in zip(lines[pos:at], endings[pos:at], strict=True)]
        new = h.new()
        kept_end = endings[at + len(old) - 1] if old else ending
        out += [line + ending for line in new[:-1]]
        if new:
            last_end = "" if h.no_newline_new else (kept_end if kept_end else ending)
            out.append(new[-1] + last_end)
        pos = at + len(old)
    out += [line + end for line, end in zip(lines[pos:], endings[pos:], strict=True)]
    return "".join(out)


def _same(path: str) -> str:
    """The key of a patch path (``./x``, ``d/../x`` and ``x`` are one file)."""
    return os.path.normpath(path)


def apply_patch_text(files: FileAccess, patch: str) -> str:
    """Apply a unified diff to the workspace, all or nothing (see the module docstring).

    Returns:
        "Patched N file(s)" and one line per file: "M PATH", "A PATH" (created), "D PATH",
        "R OLD -> NEW" (renamed, with its hunks applied).

    Raises:
        ToolError: a malformed patch, a path outside the workspace, a hunk that does not match,
            a created (or renamed-to) file that exists, a deleted file whose text differs, a
            binary change; nothing is written.
    """
    plan: list[tuple[str, bytes | None, bytes | None, str]] = []  # (path, old, new, letter)
    seen: set[str] = set()
    for fp in parse_patch(patch):
        name = fp.new_path or fp.old_path
        assert name is not None
        if lost := next((n for n in (fp.old_path, fp.new_path) if n and "\ufffd" in n), None):  # issue 40, N46
            raise ToolError(f"{lost!r}: the file name holds U+FFFD, the replacement character for bytes that could "
                            "not be decoded: the real name was lost; nothing was changed")
        renamed = fp.old_path if fp.old_path and fp.new_path and _same(fp.old_path) != _same(fp.new_path) else None
        for key in {_same(name), *([_same(renamed)] if renamed else [])}:
            if key in seen:
                raise ToolError(f"{key} appears twice in the patch; put all its hunks under one header")
            seen.add(key)
        current = files.read(name)
        if renamed is not None:  # "--- a/OLD" "+++ b/NEW": OLD's text, patched, becomes NEW
            if current is not None:
                raise ToolError(f"{name} already exists; the patch renames {renamed} to it; nothing was changed")
            source = files.read(renamed)
            if source is None:
                raise ToolError(f"{renamed}: no such file (the patch renames it to {name}); nothing was changed")
            t = _Text.of(source, renamed)
            text = _patch_text(t.text, t.ending, fp, renamed) if fp.hunks else t.text
            plan.append((name, None, t.encode(text, name), f"R {_same(renamed)} ->"))
            plan.append((renamed, source, None, ""))
            continue
        if fp.old_path is None:  # created
            if current is not None:
                raise ToolError(f"{name} already exists; the patch creates it (--- /dev/null); nothing was changed")
            text = "".join(line + "\n" for h in fp.hunks for line in h.new())
            if fp.hunks and fp.hunks[-1].no_newline_new:
                text = text[:-1]
            plan.append((name, None, to_utf8(text, name), "A"))
            continue
        if current is None:
            raise ToolError(f"{name}: no such file; nothing was changed")
        t = _Text.of(current, name)
        if fp.new_path is None:  # deleted: the patch must hold the whole text
            have = split_lines(t.text)
            if [line for h in fp.hunks for line in h.old()] != have:
                raise ToolError(f"{name}: the patch deletes it but its lines differ from the file; nothing was changed")
            plan.append((name, current, None, "D"))
            continue
        if not fp.hunks:
            raise ToolError(f"{name}: no hunks; nothing was changed")
        plan.append((name, current, t.encode(_patch_text(t.text, t.ending, fp, name), name), "M"))
    done: list[tuple[str, bytes | None]] = []
    shown: list[str] = []
    staged: list[Staged | None] = []
    try:
        for name, _, new, _ in plan:  # every new text in a temporary file first: nothing changed yet
            try:
                if new is None:
                    files.removable(name)
                staged.append(files.stage(name, new) if new is not None else None)
            except ToolError as e:
                raise ToolError(f"cannot write {name}: {e}; nothing was changed") from None
        commit_point()  # an abandoned call (its time limit passed) stops here
        try:
            for (name, old, _, letter), ready in zip(plan, staged, strict=True):
                if ready is None:
                    files.delete(name)
                    line = f"{letter} {_same(name)}"
                else:
                    line = f"{letter} {ready.commit()}"
                done.append((name, old))
                if letter:
                    shown.append(line)
        except (OSError, ToolError) as e:
            for name, old in reversed(done):  # put back what was written
                if old is None:
                    files.delete(name)
                else:
                    files.write(name, old)
            why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            raise ToolError(f"cannot write {plan[len(done)][0]}: {why}; nothing was changed") from None
    finally:
        for ready in staged:
            if ready is not None:
                ready.discard()
    return f"Patched {len(shown)} file{'s' if len(shown) != 1 else ''}\n" + "\n".join(shown)


def multi_edit_file(files: FileAccess, path: str, edits: list[EditSpec]) -> str:
    """Apply ``edits`` to one file, all or nothing (one descriptor from read to write, like
    ``edit_file``).

    Returns:
        "Edited PATH (N replacement[s] in E edit[s])", then the unified diff of the change.

    Raises:
        ToolError: a missing, binary or too large file, or any edit that does not apply (nothing
            is written).
    """
    fd, rel, _ = files.ws.open_file(path, write=True, hard_links=files.hard_links)
    try:
        data = os.read(fd, MAX_EDIT_BYTES + 1)
        while len(data) <= MAX_EDIT_BYTES and (chunk := os.read(fd, MAX_EDIT_BYTES + 1 - len(data))):
            data += chunk
        if len(data) > MAX_EDIT_BYTES:
            raise ToolError(f"{path} is over the limit of {MAX_EDIT_BYTES} bytes for edits; use bash tools")
        t = _Text.of(data, path)
        new, count = apply_edits(t.text, edits, path)
        st = os.fstat(fd)
    finally:
        os.close(fd)
    replace(files.ws, path, t.encode(new, path), hard_links=files.hard_links, same=(st.st_dev, st.st_ino))
    diff = unified_diff(split_lines(t.text), split_lines(new), rel)
    header = (f"Edited {rel} ({count} replacement{'s' if count != 1 else ''} in {len(edits)} "
              f"edit{'s' if len(edits) != 1 else ''})")
    return f"{header}\n{truncate_middle(diff, _MAX_DIFF_CHARS)}" if diff else header
