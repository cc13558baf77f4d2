"""One Agent Skill on disk: a folder with a ``SKILL.md`` (YAML front matter, then Markdown
instructions) and any other files, read and checked against the Agent Skills format.

The format (https://agentskills.io/specification, and its reference validator ``skills-ref``,
``skills-ref/src/skills_ref/validator.py`` in github.com/agentskills/agentskills): the file
starts with a line ``---``, the front matter is a YAML mapping closed by another ``---`` line.

- ``name`` (required): 1-64 characters, lowercase letters and digits (Unicode, compared after NFKC
  normalisation, as skills-ref does) and hyphens, not starting or ending with a hyphen, no ``--``;
  it must match the name of the skill's folder.
- ``description`` (required): a non-empty string of at most 1024 characters.
- ``compatibility`` (optional): 1-500 characters. ``license``: a string. ``metadata``: a mapping.
  ``allowed-tools``: a string or a list of strings (read, never acted on: it grants nothing here,
  every call goes through the agent's approval as any other).
- Other fields are ignored (skills-ref's validator refuses them; skills written for other clients
  carry their own, e.g. Claude Code's ``disable-model-invocation``).

Limits (a file is never read whole at discovery): the front matter must close within
:data:`MAX_FRONT_MATTER_BYTES`; the instructions given to the model are cut at
:data:`MAX_SKILL_BYTES` on a line boundary (as ``AGENTS.md`` files are, with a note saying where
the rest is); the listing of the other files stops at :data:`MAX_LISTED_FILES`. YAML is parsed
with PyYAML's ``safe_load`` (no Python objects are ever built from it).
"""

from __future__ import annotations

import hashlib
import os
import time
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from .._exceptions import ToolError
from ..tools.coding.api import Workspace, walk_files
from ._instructions import MAX_INSTRUCTIONS_BYTES

__all__ = ["MAX_DESCRIPTION_CHARS", "MAX_FRONT_MATTER_BYTES", "MAX_LISTED_FILES", "MAX_NAME_CHARS",
           "MAX_SKILL_BYTES", "SKILL_FILE", "Skill", "check_front_matter", "digest", "instructions", "other_files",
           "parse_front_matter", "read_skill"]

SKILL_FILE = "SKILL.md"
MAX_NAME_CHARS = 64  # agentskills.io/specification, "name": max 64 characters
MAX_DESCRIPTION_CHARS = 1024  # "description": max 1024 characters, non-empty
MAX_COMPATIBILITY_CHARS = 500  # "compatibility": max 500 characters
MAX_FRONT_MATTER_BYTES = 16 * 1024  # room for the longest name, description and compatibility
MAX_SKILL_BYTES = MAX_INSTRUCTIONS_BYTES  # the instructions given, per skill (as an AGENTS.md file)
MAX_LISTED_FILES = 200  # other files of a skill named by load_skill
_MAX_WALKED_FILES = 2000  # files counted beyond the listing before "more" stops counting
_WALK_S = 5.0
_OPTIONAL_STRINGS = ("license",)

Source = Literal["given", "workspace", "user"]


class FrontMatterError(Exception):
    """A SKILL.md that is not valid (internal: becomes a warning, never escapes the package)."""


@dataclass(frozen=True)
class Skill:
    """A valid skill found on disk.

    Attributes:
        name: its name (NFKC-normalised, as checked).
        description: its description (as written, surrounding whitespace removed).
        folder: its folder as the tools reach it: absolute; for a workspace skill the path inside
            the workspace, else the real path (symlinks resolved).
        source: ``"given"`` (passed in), ``"workspace"`` (``<workspace>/.agents/skills`` or ``.claude/skills``) or
            ``"user"`` (``${KIMIK3_HOME:-~/.kimik3}/skills``).
        stamp: the file's (device, inode, size, mtime in ns) when it was read.
        fields: the whole front matter.
    """

    name: str
    description: str
    folder: Path
    source: Source
    stamp: tuple[int, int, int, int] = (0, 0, 0, 0)
    fields: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def file(self) -> Path:
        """The ``SKILL.md`` path."""
        return self.folder / SKILL_FILE


def _lines(data: bytes) -> list[bytes]:
    return data.split(b"\n")


def parse_front_matter(data: bytes, complete: bool) -> tuple[dict[str, Any], int, int]:
    """The front matter of a SKILL.md starting with ``data``.

    Args:
        data: the file's first bytes (at most :data:`MAX_FRONT_MATTER_BYTES` and then some).
        complete: whether ``data`` is the whole file.

    Returns:
        (the mapping, the byte offset where the body starts, the body's first line number, 1-based).

    Raises:
        FrontMatterError: no opening or closing ``---`` line, not UTF-8, YAML that does not
            parse, or front matter that is not a mapping.
    """
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
        skip = 3
    else:
        skip = 0
    lines = _lines(data)
    if not lines or lines[0].rstrip(b" \t\r") != b"---":
        raise FrontMatterError("it does not start with a '---' line (YAML front matter with name and description)")
    offset = len(lines[0]) + 1
    for number, line in enumerate(lines[1:], start=2):
        last = number == len(lines)
        if last and not complete:  # a line cut by the read: not a whole line
            break
        if line.rstrip(b" \t\r") == b"---":
            text = data[len(lines[0]) + 1 : offset]
            try:
                loaded = yaml.safe_load(text.decode("utf-8"))
            except UnicodeDecodeError as e:
                raise FrontMatterError(f"its front matter is not UTF-8 ({e.reason} at byte {e.start})") from None
            except yaml.YAMLError as e:
                raise FrontMatterError(f"its front matter is not valid YAML: {' '.join(str(e).split())}") from None
            except RecursionError:
                raise FrontMatterError("its front matter nests too deeply") from None
            if not isinstance(loaded, dict):
                what = "empty" if loaded is None else type(loaded).__name__
                raise FrontMatterError(f"its front matter is not a YAML mapping (it is {what})")
            return loaded, skip + offset + len(line) + 1, number + 1
        offset += len(line) + 1
    if complete:
        raise FrontMatterError("its front matter is not closed by a '---' line")
    raise FrontMatterError(f"its front matter is not closed within its first {MAX_FRONT_MATTER_BYTES} bytes")


def check_front_matter(front: dict[str, Any], folder_name: str) -> tuple[str, str]:
    """(name, description) of a valid front matter for a skill in the folder ``folder_name``.

    Raises:
        FrontMatterError: the first rule of the Agent Skills format it breaks (see the module doc).
    """
    name = front.get("name")
    if "name" not in front:
        raise FrontMatterError("its front matter has no 'name'")
    if not isinstance(name, str):
        raise FrontMatterError(f"'name' must be a string, not {type(name).__name__} (quote it)")
    name = unicodedata.normalize("NFKC", name.strip())
    if not name:
        raise FrontMatterError("'name' is empty")
    if len(name) > MAX_NAME_CHARS:
        raise FrontMatterError(f"'name' has {len(name)} characters; at most {MAX_NAME_CHARS} are allowed")
    if name != name.lower():
        raise FrontMatterError(f"'name' {name!r} must be lowercase")
    if not all(c.isalnum() or c == "-" for c in name):
        raise FrontMatterError(f"'name' {name!r} may hold only lowercase letters, digits and hyphens")
    if name.startswith("-") or name.endswith("-") or "--" in name:
        raise FrontMatterError(f"'name' {name!r} must not start or end with a hyphen nor hold '--'")
    if unicodedata.normalize("NFKC", folder_name) != name:
        raise FrontMatterError(f"'name' {name!r} does not match its folder {folder_name!r}")
    description = front.get("description")
    if "description" not in front:
        raise FrontMatterError("its front matter has no 'description'")
    if not isinstance(description, str):
        raise FrontMatterError(f"'description' must be a string, not {type(description).__name__}")
    if not description.strip():
        raise FrontMatterError("'description' is empty")
    if len(description) > MAX_DESCRIPTION_CHARS:
        raise FrontMatterError(f"'description' has {len(description)} characters; at most "
                               f"{MAX_DESCRIPTION_CHARS} are allowed")
    if "compatibility" in front:
        value = front["compatibility"]
        if not isinstance(value, str) or not 1 <= len(value) <= MAX_COMPATIBILITY_CHARS:
            raise FrontMatterError(f"'compatibility' must be a string of 1-{MAX_COMPATIBILITY_CHARS} characters")
    for key in _OPTIONAL_STRINGS:
        if key in front and not isinstance(front[key], str):
            raise FrontMatterError(f"'{key}' must be a string")
    if "metadata" in front and not isinstance(front["metadata"], dict):
        raise FrontMatterError("'metadata' must be a mapping")
    tools = front.get("allowed-tools")
    if tools is not None and not isinstance(tools, str) and not (
            isinstance(tools, list) and all(isinstance(t, str) for t in tools)):
        raise FrontMatterError("'allowed-tools' must be a string or a list of strings")
    return name, description.strip()


def read_head(ws: Workspace, rel: str) -> tuple[bytes, bool, tuple[int, int, int, int]]:
    """The first bytes of the regular file ``rel`` (opened confined to ``ws``): (bytes, whether
    that is the whole file, its stamp).

    Raises:
        ToolError: as :meth:`Workspace.open_file` (missing, outside, a FIFO, ...).
    """
    fd, _, _ = ws.open_file(rel)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        data = f.read(MAX_FRONT_MATTER_BYTES + 1)
    stamp = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    return data, len(data) <= MAX_FRONT_MATTER_BYTES, stamp


def read_skill(ws: Workspace, rel: str, folder: Path, folder_name: str, source: Source) -> Skill:
    """The skill whose ``SKILL.md`` is ``rel`` inside ``ws``.

    Raises:
        ToolError: the file cannot be opened (see :meth:`Workspace.open_file`).
        FrontMatterError: it breaks the format.
    """
    data, complete, stamp = read_head(ws, rel)
    front, _, _ = parse_front_matter(data, complete)
    name, description = check_front_matter(front, folder_name)
    return Skill(name, description, folder, source, stamp, front)


def instructions(ws: Workspace, rel: str, shown: Path) -> str:
    """The body of the SKILL.md ``rel`` inside ``ws``: at most :data:`MAX_SKILL_BYTES` of it, cut
    on a line boundary with a note naming ``shown`` and the line to read on from.

    Raises:
        ToolError: it cannot be opened, or it is no longer a valid skill file.
    """
    fd, _, _ = ws.open_file(rel)
    with os.fdopen(fd, "rb") as f:
        head = f.read(MAX_FRONT_MATTER_BYTES + 1)
        try:
            _, start, first_line = parse_front_matter(head, len(head) <= MAX_FRONT_MATTER_BYTES)
        except FrontMatterError as e:
            raise ToolError(f"{shown} is no longer a valid skill file: {e}") from None
        f.seek(start)
        body = f.read(MAX_SKILL_BYTES + 1)
        size = os.fstat(fd).st_size
    if len(body) <= MAX_SKILL_BYTES:
        return body.decode("utf-8", "replace").strip()
    kept = body[:MAX_SKILL_BYTES]
    kept = kept[: kept.rfind(b"\n") + 1] or kept
    line = first_line + kept.count(b"\n")
    note = (f"\n\n[{SKILL_FILE} cut: {size - start - len(kept)} more bytes not shown; read_file(\"{shown}\", "
            f"offset={line}) shows the rest]")
    return kept.decode("utf-8", "replace").strip() + note


def digest(text: str) -> str:
    """SHA-256 (hex) of the instructions a skill gave (what a session records of a load)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def other_files(ws: Workspace, rel: str) -> tuple[list[str], int]:
    """(the regular files below the folder ``rel`` of ``ws`` except its top ``SKILL.md``, sorted by
    path, at most :data:`MAX_LISTED_FILES`; how many more were found). Hidden entries and symlinks
    are left out; the walk is confined to the folder and bounded in files and time."""
    try:
        fd, _ = ws.open_dir(rel)
    except ToolError:
        return [], 0
    found: list[str] = []
    try:
        for _, _, child in walk_files(fd, ".", time.monotonic() + _WALK_S):
            if child != SKILL_FILE:
                found.append(child)
            if len(found) >= _MAX_WALKED_FILES:
                break
    finally:
        os.close(fd)
    found.sort(key=lambda p: p.split("/"))
    return found[:MAX_LISTED_FILES], max(0, len(found) - MAX_LISTED_FILES)
