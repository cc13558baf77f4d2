"""``multi_edit`` (several replacements in one file) and ``apply_patch`` (a unified diff over
several files): validated completely in memory before any byte is written; all or nothing.

Text handling matches ``edit_file``: bytes are decoded as UTF-8 with undecodable bytes carried as
surrogates (``surrogateescape``), so they are written back byte for byte; a UTF-8 BOM is kept; in a
CRLF file the model's LF text is matched and written with CRLF. ``apply_patch`` compares lines
without their endings and gives each new line the file's own ending. If a write fails midway, the
files already written are put back as they were and the call fails.
"""

from __future__ import annotations

import codecs
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from .._exceptions import ToolError

__all__ = ["EditSpec", "FileAccess", "apply_edits", "apply_patch_text", "parse_patch", "patch_paths"]

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_NO_NEWLINE = "\\ No newline at end of file"


class EditSpec(BaseModel):
    """One replacement: old_string becomes new_string (every occurrence with replace_all)."""

    model_config = ConfigDict(json_schema_extra=lambda schema: schema.pop("description", None))

    old_string: str
    new_string: str
    replace_all: bool = False


@dataclass
class FileAccess:
    """Reads and writes confined to a workspace: ``resolve(path)`` gives the absolute path or
    raises :class:`~kimik3.ToolError`; ``rel(path)`` the workspace-relative name.

    The default resolver resolves symlinks and refuses anything outside ``root``; the final
    component is then opened with ``O_NOFOLLOW``.
    """

    root: Path
    resolve: Callable[[str], Path] | None = None

    def path(self, path: str) -> Path:
        if self.resolve is not None:
            return self.resolve(path)
        if "\x00" in path:
            raise ToolError(f"invalid path {path!r}")
        p = Path(path)
        resolved = (p if p.is_absolute() else self.root / p).resolve()
        if not resolved.is_relative_to(self.root):
            raise ToolError(f"path {path!r} is outside the workspace {self.root}; use a path inside it")
        return resolved

    def rel(self, p: Path) -> str:
        return p.relative_to(self.root).as_posix()

    def read(self, p: Path) -> bytes | None:
        """The file's bytes, or None when it does not exist."""
        try:
            fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except IsADirectoryError:
            raise ToolError(f"{self.rel(p)} is a directory") from None
        except OSError as e:
            raise ToolError(f"cannot read {self.rel(p)}: {e.strerror or e}") from None
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ToolError(f"{self.rel(p)} is not a regular file")
            return f.read()

    def write(self, p: Path, data: bytes) -> None:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.truncate()

    def delete(self, p: Path) -> None:
        p.unlink()


# -- text ------------------------------------------------------------------------------------


@dataclass
class _Text:
    text: str
    bom: bool
    crlf: bool

    @classmethod
    def of(cls, data: bytes) -> _Text:
        bom = data.startswith(codecs.BOM_UTF8)
        text = data[3:].decode("utf-8", "surrogateescape") if bom else data.decode("utf-8", "surrogateescape")
        crlf = text.count("\r\n") * 2 >= text.count("\n") > 0
        return cls(text, bom, crlf)

    def encode(self, text: str, what: str) -> bytes:
        try:
            data = text.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError as e:
            raise ToolError(f"{what} has a character UTF-8 cannot hold ({text[e.start]!a})") from None
        return codecs.BOM_UTF8 + data if self.bom else data


def apply_edits(text: str, crlf: bool, edits: list[EditSpec], path: str) -> tuple[str, int]:
    """``text`` with every edit applied in order (each sees the previous ones' result).

    Returns:
        (new text, number of replacements).

    Raises:
        ToolError: an edit whose old_string is empty, unchanged, missing, or ambiguous; the
            message names the edit (1-based) and nothing is written.
    """
    if not edits:
        raise ToolError("edits is empty; give at least one {old_string, new_string}")
    total = 0
    for n, e in enumerate(edits, 1):
        old, new = e.old_string, e.new_string
        if not old:
            raise ToolError(f"edit {n}: old_string is empty; nothing was changed")
        if old == new:
            raise ToolError(f"edit {n}: old_string and new_string are identical; nothing was changed")
        if crlf:
            lf_old = old.replace("\r\n", "\n").replace("\n", "\r\n")
            if lf_old in text or old not in text:
                old, new = lf_old, new.replace("\r\n", "\n").replace("\n", "\r\n")
        count = text.count(old)
        if count == 0:
            raise ToolError(f"edit {n}: old_string not found in {path} (after the edits before it); "
                            "nothing was changed")
        if count > 1 and not e.replace_all:
            raise ToolError(f"edit {n}: old_string matches {count} times in {path}; add surrounding lines "
                            "or set replace_all; nothing was changed")
        text = text.replace(old, new) if e.replace_all else text.replace(old, new, 1)
        total += count if e.replace_all else 1
    return text, total


# -- unified diffs ---------------------------------------------------------------------------


@dataclass
class Hunk:
    old_start: int
    lines: list[str] = field(default_factory=list)  # " x", "-x", "+x"
    no_newline_old: bool = False
    no_newline_new: bool = False

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
        ToolError: no file header, a hunk before any file, or a body line that is not
            " ", "-", "+" or "\\ No newline at end of file".
    """
    files: list[FilePatch] = []
    lines = patch.replace("\r\n", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    i = 0
    hunk: Hunk | None = None
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
            hunk = None
        else:
            raise ToolError(f"patch line {i + 1}: {line[:80]!r} is not a diff line (' ', '-', '+' or '@@')")
        i += 1
    if not files:
        raise ToolError("no '--- a/PATH' / '+++ b/PATH' file header in the patch")
    return files


def patch_paths(patch: str) -> list[str]:
    """The paths a patch names (best effort, for instructions lookup; never raises)."""
    try:
        return [p for f in parse_patch(patch) for p in (f.new_path or f.old_path,) if p]
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


def _patch_text(text: str, crlf: bool, fp: FilePatch, name: str) -> str:
    ending = "\r\n" if crlf else "\n"
    raw = text.split("\n")
    had_final_newline = raw[-1] == ""
    if had_final_newline:
        raw.pop()
    lines = [line[:-1] if line.endswith("\r") else line for line in raw]
    endings = ["\r\n" if line.endswith("\r") else "\n" for line in raw]
    if raw and not had_final_newline:
        endings[-1] = ""
    out: list[str] = []
    pos = 0
    for n, h in enumerate(fp.hunks, 1):
        old = h.old()
        # "@@ -L,0" inserts after line L, else the hunk starts at line L (of the original file)
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


def apply_patch_text(files: FileAccess, patch: str) -> str:
    """Apply a unified diff to the workspace, all or nothing (see the module docstring).

    Returns:
        "Patched N file(s)" and one line per file: "M PATH", "A PATH" (created), "D PATH".

    Raises:
        ToolError: a malformed patch, a path outside the workspace, a hunk that does not match,
            a created file that exists, a deleted file whose text differs; nothing is written.
    """
    plan: list[tuple[Path, bytes | None, bytes | None, str]] = []  # (path, old, new, letter)
    seen: set[Path] = set()
    for fp in parse_patch(patch):
        name = fp.new_path or fp.old_path
        assert name is not None
        p = files.path(name)
        if p in seen:
            raise ToolError(f"{name} appears twice in the patch; put all its hunks under one header")
        seen.add(p)
        current = files.read(p)
        if fp.old_path is None:  # created
            if current is not None:
                raise ToolError(f"{name} already exists; the patch creates it (--- /dev/null); nothing was changed")
            body = [h.new() for h in fp.hunks]
            text = "".join(line + "\n" for lines in body for line in lines)
            if fp.hunks and fp.hunks[-1].no_newline_new:
                text = text[:-1]
            plan.append((p, None, _Text("", False, False).encode(text, name), "A"))
            continue
        if current is None:
            raise ToolError(f"{name}: no such file; nothing was changed")
        t = _Text.of(current)
        if fp.new_path is None:  # deleted: the patch must hold the whole text
            old_lines = [line for h in fp.hunks for line in h.old()]
            have = [line.rstrip("\r") for line in t.text.split("\n")]
            if have and have[-1] == "":
                have.pop()
            if old_lines != have:
                raise ToolError(f"{name}: the patch deletes it but its lines differ from the file; nothing was changed")
            plan.append((p, current, None, "D"))
            continue
        if not fp.hunks:
            raise ToolError(f"{name}: no hunks; nothing was changed")
        plan.append((p, current, t.encode(_patch_text(t.text, t.crlf, fp, name), name), "M"))
    done: list[tuple[Path, bytes | None]] = []
    try:
        for p, old, new, _ in plan:
            if new is None:
                files.delete(p)
            else:
                files.write(p, new)
            done.append((p, old))
    except OSError as e:
        for p, old in reversed(done):  # put back what was written
            if old is None:
                p.unlink(missing_ok=True)
            else:
                files.write(p, old)
        raise ToolError(f"cannot write {files.rel(p)}: {e.strerror or e}; nothing was changed") from None
    lines = [f"{letter} {files.rel(p)}" for p, _, _, letter in plan]
    return f"Patched {len(plan)} file{'s' if len(plan) != 1 else ''}\n" + "\n".join(lines)


def multi_edit_file(files: FileAccess, path: str, edits: list[EditSpec]) -> str:
    """Apply ``edits`` to one file, all or nothing.

    Returns:
        "Edited PATH (N replacement[s] in E edit[s])".

    Raises:
        ToolError: a missing file, or any edit that does not apply (nothing is written).
    """
    p = files.path(path)
    data = files.read(p)
    if data is None:
        raise ToolError(f"{path}: no such file")
    if b"\x00" in data[:8192]:
        raise ToolError(f"{path} is a binary file ({len(data)} bytes)")
    t = _Text.of(data)
    new, count = apply_edits(t.text, t.crlf, edits, path)
    encoded = t.encode(new, "new_string")
    try:
        files.write(p, encoded)
    except OSError as e:
        raise ToolError(f"cannot write {path}: {e.strerror or e}") from None
    return (f"Edited {files.rel(p)} ({count} replacement{'s' if count != 1 else ''} in {len(edits)} "
            f"edit{'s' if len(edits) != 1 else ''})")
