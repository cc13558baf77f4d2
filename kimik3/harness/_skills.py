"""Agent Skills (https://agentskills.io): folders of instructions, scripts and resources, disclosed
to the model progressively without breaking the prefix cache.

Where skills are found (the first place that has a name wins; a shadowed one is named in a
warning): the folders passed in (each a skill folder holding a ``SKILL.md``, or a folder of skill
folders), ``<workspace>/.agents/skills/*/SKILL.md``, ``<workspace>/.claude/skills/*/SKILL.md`` (the
Agent Skills client guide's second workspace location, where Claude Code's skills live) and
``${KIMIK3_HOME:-~/.kimik3}/skills/*/SKILL.md``. Workspace skills (both folders) are read through the
coding tools' confined walk: a skill folder there that is a symlink leading out of the workspace is
skipped with a warning. A skill folder among the user's or passed-in folders may be a symlink to
anywhere (they are the user's own choice); inside the folder the walk is confined to it. Each
``SKILL.md`` is checked against the format (:mod:`._skill_files`); a bad one is skipped with one
warning line naming the file.

Disclosure: a tool ``load_skill(name)`` whose description lists every skill's name and
description (the catalog, at most :data:`MAX_CATALOG_BYTES`). It is declared in the prompt's head
only when the run starts with at least one skill: with none, the prompt is exactly what it is
without skills. The catalog of the head is fixed; the folders are looked at again before every
model call, and when what the model is told changed (a skill added, removed, or its description
edited) a new loader is declared with K3's dynamic tool declaration (a message appended to the
history, see :class:`kimik3.Agent`), never by rewriting the head, and under a new name, since a K3
endpoint takes each tool name once per request (:func:`kimik3.formats.k3.check_request`):
``load_skill_2``, ``load_skill_3``, ..., each describing the skills new or changed since the last
list and naming those removed. Every loader loads any skill found now; the first one is
``load_skill`` even when it is declared mid-run (no skill at the start). ``load_skill`` returns the
instructions (the body of ``SKILL.md``), the skill's folder and its other files, which the model
reads with ``read_file`` and runs with ``bash``, by absolute path (:meth:`Skills.read_paths`: the
folders the tools must be able to read; nothing else runs a skill's scripts, so the approval hook
and the sandbox apply as to any command).

Sessions: ``{"skills": {"listed": [...]}}`` at the start of each run whose head has a loader (its
catalog), ``{"skills": {"declared": [...], "tool": "load_skill_2"}}`` for each loader declared
mid-run (the whole catalog the model has from then on), ``{"skills": {"loaded": {...}}}`` for each
load. A continued (or forked) session gets its loaders back from these records, rebuilt as they
were declared, so the resumed run's prompt extends the earlier ones and every name stays declared
once; what changed since is declared at once with the next loader, and a skill the model was
last told of that is gone, or a loaded one whose instructions changed, is named in a warning.
"""

from __future__ import annotations

import logging
import os
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio

from .._exceptions import SessionError, ToolError, UserError
from ..agents import RunHooks, SessionWriter, dynamic_names
from ..tools import FunctionTool, Tool, Toolset
from ..tools.coding.api import FILE_TOOL_TIMEOUT_S, Workspace
from ._skill_files import (
    MAX_DESCRIPTION_CHARS,
    SKILL_FILE,
    FrontMatterError,
    Skill,
    Source,
    check_front_matter,
    digest,
    instructions,
    other_files,
    parse_front_matter,
    read_head,
)

__all__ = ["MAX_CATALOG_BYTES", "WORKSPACE_SKILLS", "WORKSPACE_SKILL_FOLDERS", "Skills", "user_skills_folder"]

log = logging.getLogger("kimik3.skills")

WORKSPACE_SKILLS = ".agents/skills"
WORKSPACE_SKILL_FOLDERS = (WORKSPACE_SKILLS, ".claude/skills")
"""A workspace's skills folders, in the order they are looked at (the first with a name wins):
the Agent Skills client guide's two workspace locations (agentskills.io, "Adding skills support
to your agent": ``.agents/skills`` and the ``.claude/skills`` of Claude Code)."""
MAX_CATALOG_BYTES = 32 * 1024  # the catalog's lines together (as one AGENTS.md file)
MAX_FOLDER_ENTRIES = 1000  # entries of one skills folder looked at
_HEAD = (
    "Load a skill: the full instructions (SKILL.md) of one of the skills below, its folder and the "
    "list of its other files (scripts, references, templates). When a task matches a skill's "
    "description, load the skill before you start and follow its instructions. Read the skill's "
    "files with read_file and run its scripts with bash, by the absolute paths given."
)
_NONE_NOW = "No skills are available now."
_AGAIN = ("Load a skill, as load_skill does: every load_skill tool loads any skill available now. The skills "
          "available changed since they were last listed.")
FIRST_LOADER = "load_skill"


def _one_line(text: str) -> str:
    """``text`` with control characters and undecodable bytes (surrogates) escaped: one printable line."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def _shown(path: Path) -> str:
    """A path as text a session can hold (undecodable bytes as ``\\xNN``)."""
    return str(path).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def user_skills_folder() -> Path:
    """``${KIMIK3_HOME:-~/.kimik3}/skills``."""
    return Path(os.environ.get("KIMIK3_HOME") or "~/.kimik3").expanduser() / "skills"


@dataclass(frozen=True)
class _Entry:
    """One line of the catalog: what the model is told of a skill."""

    name: str
    description: str
    file: str

    def line(self) -> str:
        return f"- {self.name}: {' '.join(self.description.split())}"

    def record(self) -> dict[str, str]:
        return {"name": self.name, "description": self.description, "file": self.file}


Catalog = tuple[_Entry, ...]
T = TypeVar("T")


def _description(catalog: Catalog) -> str:
    listing = "\n".join(e.line() for e in catalog) if catalog else _NONE_NOW
    return f"{_HEAD}\n\nAvailable skills:\n{listing}" if catalog else f"{_HEAD}\n\n{listing}"


def _loader_name(n: int) -> str:
    """The name of a conversation's loader after ``n`` others: ``load_skill``, ``load_skill_2``, ..."""
    return FIRST_LOADER if n == 0 else f"{FIRST_LOADER}_{n + 1}"


def _lines(catalog: Catalog) -> list[str]:
    """What the model is told of ``catalog``."""
    return [e.line() for e in catalog]


def _changes(before: Catalog, after: Catalog) -> str:
    """A later loader's description: the skills of ``after`` new or changed since ``before``,
    and those of ``before`` removed."""
    was = {e.name: e.line() for e in before}
    changed = [e.line() for e in after if was.get(e.name) != e.line()]
    gone = sorted(set(was) - {e.name for e in after})
    parts = [_AGAIN]
    if changed:
        parts.append("New or changed skills:\n" + "\n".join(changed))
    if gone:
        parts.append(f"Removed skills (loading one gives an error): {', '.join(gone)}")
    parts.append("The other skills listed before are unchanged." if after else _NONE_NOW)
    return "\n\n".join(parts)


def _entries(path: Path, number: int, value: Any) -> Catalog:
    """A recorded catalog, checked (a session file is data from outside)."""
    if not isinstance(value, list):
        raise SessionError(f"{path}:{number}: not a valid skills record: its catalog is not a list")
    out = []
    for item in value:
        ok = isinstance(item, dict) and all(isinstance(item.get(k), str) for k in ("name", "description", "file"))
        if not ok or len(item["description"]) > MAX_DESCRIPTION_CHARS:
            raise SessionError(f"{path}:{number}: not a valid skills record: entry {item!r:.80}")
        try:
            check_front_matter({"name": item["name"], "description": item["description"]}, item["name"])
        except FrontMatterError as e:
            raise SessionError(f"{path}:{number}: not a valid skills record: {e}") from None
        out.append(_Entry(item["name"], item["description"], item["file"]))
    return tuple(out)


class Skills(Toolset, RunHooks):
    """Agent Skills as a toolset (``load_skill``) and run hooks (the session records); see the
    module docstring for where skills are found and how they reach the model.

    Usage::

        skills = Skills(["./skills"])                  # any agent
        agent = Agent(instructions=..., tools=[*tools, skills], engine=engine)
        harness = CodingHarness(root, skills=["./skills"])  # the coding harness (and its defaults)

    Args:
        folders: skill folders, or folders of skill folders, looked at first.
        workspace: a workspace whose ``.agents/skills`` holds skills (read confined to it).
        user: look at ``${KIMIK3_HOME:-~/.kimik3}/skills`` too.
        on_warning: called with each warning line (a skipped skill, a shadowed name, a skill of a
            resumed session that is gone); default: the ``kimik3.skills`` logger. Each line is
            given once.

    One run at a time (as :class:`~kimik3.agents.RunHooks`): the catalog and the records are the
    current run's.

    Attributes:
        found: the skills found by the last look at the folders, by name.
        warnings: every warning line given so far.
        loaded: the names ``load_skill`` loaded in the current run, in order.

    Raises:
        UserError: ``folders`` is one path instead of a list.
    """

    name = "skills"

    def __init__(self, folders: Sequence[str | os.PathLike[str]] = (), *,
                 workspace: str | os.PathLike[str] | None = None, user: bool = False,
                 on_warning: Callable[[str], None] | None = None) -> None:
        if isinstance(folders, (str, os.PathLike)):
            raise UserError(f"Skills takes a list of folders, not one path ({folders!r})")
        self.folders = [Path(os.path.abspath(Path(f).expanduser())) for f in folders]
        self.workspace = Path(workspace).resolve() if workspace is not None else None
        self._ws = Workspace(self.workspace) if self.workspace is not None else None
        self.user = user
        self.on_warning = on_warning
        self.found: dict[str, Skill] = {}
        self.warnings: list[str] = []
        self.loaded: list[str] = []
        self._cache: dict[str, tuple[tuple[int, int, int, int], Skill | str]] = {}
        self._session: SessionWriter | None = None
        self._in_run = False
        self._first_call = True  # get_tools not called yet in this run
        self._loaders: list[Tool] = []  # this conversation's load_skill tools, in declaration order
        self._view: Catalog = ()  # the catalog the model has now (all loaders together)
        self._had: set[str] | None = None  # the loaders the model had at the run's start (None: all)
        self._names: set[str] = set()  # the skills ever listed to the model in it
        self._scanned = False
        self._quiet = False  # warnings held while a worker thread looks at the folders
        self._pending: list[str] = []

    # -- finding skills ---------------------------------------------------------------------

    def _warn(self, line: str) -> None:
        line = _one_line(line)
        if line in self.warnings or line in self._pending:
            return
        if self._quiet:
            self._pending.append(line)
            return
        self.warnings.append(line)
        (self.on_warning or log.warning)(line)

    async def _in_thread(self, work: Callable[[], T]) -> T:
        """``work()`` in a worker thread, its warnings given afterwards in this one."""
        self._quiet = True
        try:
            return await anyio.to_thread.run_sync(work)
        finally:
            self._quiet = False
            pending, self._pending = self._pending, []
            for line in pending:
                self._warn(line)

    def scan(self) -> dict[str, Skill]:
        """Look at the folders now (blocking file I/O); sets and returns :attr:`found`."""
        found: dict[str, Skill] = {}
        for skill in self._candidates():
            known = found.get(skill.name)
            if known is not None:
                self._warn(f"skill {skill.name!r} at {skill.file} is shadowed by the one at {known.file}")
                continue
            found[skill.name] = skill
        self.found, self._scanned = found, True
        return found

    def _candidates(self) -> Iterator[Skill]:
        for folder in self.folders:
            yield from self._outside(folder, "given", missing_ok=False)
        if self._ws is not None:
            for base in WORKSPACE_SKILL_FOLDERS:
                yield from self._in_workspace(self._ws, base)
        if self.user:
            yield from self._outside(user_skills_folder(), "user", missing_ok=True)

    def _read(self, ws: Workspace, rel: str, shown: Path, folder: Path, name: str, source: Source) -> Skill | None:
        """The skill whose ``SKILL.md`` is ``rel`` in ``ws`` (a warning naming ``shown`` if bad)."""
        key = f"{ws.root}\0{rel}\0{name}\0{source}"
        try:
            data, complete, stamp = read_head(ws, rel)
            cached = self._cache.get(key)
            if cached is not None and cached[0] == stamp:
                result = cached[1]
            else:
                try:
                    front, _, _ = parse_front_matter(data, complete)
                    title, description = check_front_matter(front, name)
                    result = Skill(title, description, folder, source, stamp, front)
                except FrontMatterError as e:
                    result = str(e)
                self._cache[key] = (stamp, result)
        except ToolError as e:
            result = str(e)
        except OSError as e:
            result = f"cannot read it: {e.strerror or e}"
        if isinstance(result, str):
            self._warn(f"skill skipped: {shown}: {result}")
            return None
        return result

    def _outside(self, base: Path, source: Source, *, missing_ok: bool) -> Iterator[Skill]:
        """Skills of a folder of the user's: ``base`` itself when it holds a SKILL.md, else its
        sub-folders (symlinks followed: the user's own)."""
        if os.path.isfile(base / SKILL_FILE):
            real = Path(os.path.realpath(base))
            skill = self._read(Workspace(real, "the skill's folder"), SKILL_FILE, base / SKILL_FILE, real,
                               base.name, source)
            if skill is not None:
                yield skill
            return
        real_base = os.path.realpath(base)
        try:
            names = sorted(e.name for e in os.scandir(real_base))
        except FileNotFoundError:
            if not missing_ok:
                self._warn(f"skills folder {base} skipped: it does not exist")
            return
        except OSError as e:
            self._warn(f"skills folder {base} skipped: {e.strerror or e}")
            return
        yield from self._many(base, names, lambda name: self._outside_one(base, name, source))

    def _outside_one(self, base: Path, name: str, source: Source) -> Skill | None:
        real = Path(os.path.realpath(base / name))
        if not os.path.isdir(real) or not os.path.lexists(real / SKILL_FILE):
            return None  # not a skill folder (a README, a folder without SKILL.md)
        return self._read(Workspace(real, "the skill's folder"), SKILL_FILE, base / name / SKILL_FILE, real,
                          name, source)

    def _in_workspace(self, ws: Workspace, base: str) -> Iterator[Skill]:
        """Skills of ``<workspace>/<base>`` (one of :data:`WORKSPACE_SKILL_FOLDERS`), read through the
        confined walk."""
        try:
            fd, _ = ws.open_dir(base)
        except ToolError as e:
            if os.path.lexists(ws.root / base):  # there, but not a folder inside the workspace
                self._warn(f"skills folder {ws.root / base} skipped: {e}")
            return
        try:
            names = sorted(os.listdir(fd))
        except OSError as e:
            self._warn(f"skills folder {ws.root / base} skipped: {e.strerror or e}")
            return
        finally:
            os.close(fd)
        yield from self._many(ws.root / base, names, lambda name: self._workspace_one(ws, base, name))

    def _workspace_one(self, ws: Workspace, base: str, name: str) -> Skill | None:
        rel = f"{base}/{name}"
        shown = ws.root / rel
        try:
            fd, _ = ws.open_dir(rel)
        except ToolError as e:
            if os.path.islink(shown) and not ws.inside(rel):
                self._warn(f"skill skipped: {shown}: it is a symlink leading out of the workspace (a workspace "
                           "skill must lie inside it)")
            elif os.path.isdir(shown):
                self._warn(f"skill skipped: {shown}: {e}")
            return None  # else a file: not a skill folder
        try:
            os.stat(SKILL_FILE, dir_fd=fd, follow_symlinks=False)
        except OSError:
            return None  # a folder without SKILL.md: not a skill
        finally:
            os.close(fd)
        return self._read(ws, f"{rel}/{SKILL_FILE}", shown / SKILL_FILE, shown, name, "workspace")

    def _many(self, base: Path, names: list[str], one: Callable[[str], Skill | None]) -> Iterator[Skill]:
        names = [n for n in names if not n.startswith(".")]
        if len(names) > MAX_FOLDER_ENTRIES:
            self._warn(f"skills folder {base}: only its first {MAX_FOLDER_ENTRIES} of {len(names)} entries were "
                       "looked at")
        for name in names[:MAX_FOLDER_ENTRIES]:
            try:
                skill = one(name)
            except OSError as e:  # e.g. a folder that cannot be searched (EACCES)
                self._warn(f"skill skipped: {base / name}: {e.strerror or e}")
                continue
            if skill is not None:
                yield skill

    def read_paths(self) -> list[Path]:
        """The folders outside the workspace that the tools must be able to read (never write):
        the passed-in folders and the user's skills folder (those that exist, resolved) and the
        real folder of each skill found (the folders are looked at first if they never were).
        :class:`~kimik3.harness.CodingHarness` gives this method to the file tools
        (``coding_tools(read_only=...)``, asked at every call); a sandbox for ``bash`` needs the
        same paths readable inside it."""
        if not self._scanned:
            self.scan()
        candidates = [*self.folders, *([user_skills_folder()] if self.user else [])]
        out = [Path(os.path.realpath(p)) for p in candidates if os.path.isdir(p)]
        out += [s.folder for s in self.found.values() if s.source != "workspace"]
        unique = list(dict.fromkeys(out))
        covered = [*unique, *([self.workspace] if self.workspace is not None else [])]

        def under(p: Path, q: Path) -> bool:  # q holds p (q readable already)
            return p != q and (str(p) + "/").startswith(str(q).rstrip("/") + "/")

        return [p for p in unique if p != self.workspace and not any(under(p, q) for q in covered)]

    # -- the catalog and the tool -----------------------------------------------------------

    def _catalog(self, found: dict[str, Skill]) -> Catalog:
        entries, size, left = [], 0, []
        for name in sorted(found):
            entry = _Entry(name, found[name].description, _shown(found[name].file))
            size += len(entry.line().encode()) + 1
            if size > MAX_CATALOG_BYTES:
                left.append(name)
                continue
            entries.append(entry)
        if left:
            self._warn(f"skills not listed to the model (the catalog's {MAX_CATALOG_BYTES} bytes are used up): "
                       f"{', '.join(left)}")
        return tuple(entries)

    def _loader(self, tool_name: str, description: str) -> Tool:
        """A ``load_skill`` tool named ``tool_name`` (every loader loads any skill found now)."""

        async def load_skill(name: str) -> str:
            """Args:
            name: the skill's name, as listed.
            """
            text, body, skill = await self._in_thread(lambda: self._load(name))
            self.loaded.append(skill.name)
            self._record({"loaded": {"name": skill.name, "file": _shown(skill.file), "sha256": digest(body)}})
            return text

        return FunctionTool(load_skill, name=tool_name, description=description, timeout=FILE_TOOL_TIMEOUT_S)

    def _where(self, skill: Skill) -> tuple[Workspace, str]:
        """(the workspace its files are read in, its folder relative to it)."""
        if skill.source == "workspace" and self._ws is not None:
            return self._ws, skill.folder.relative_to(self._ws.root).as_posix()
        return Workspace(skill.folder, "the skill's folder"), "."

    def _instructions(self, skill: Skill) -> str:
        ws, rel = self._where(skill)
        return instructions(ws, f"{rel}/{SKILL_FILE}" if rel != "." else SKILL_FILE, skill.file)

    def _load(self, name: str) -> tuple[str, str, Skill]:
        """``load_skill``'s (result, instructions, skill) (blocking file I/O)."""
        name = unicodedata.normalize("NFKC", name.strip())
        skill = self.found.get(name)
        if skill is None:
            gone = name in self._names
            why = "is no longer available (its SKILL.md was removed or is no longer valid)" if gone else "is unknown"
            raise ToolError(f"skill {name!r} {why}; available skills: {', '.join(sorted(self.found)) or 'none'}")
        ws, rel = self._where(skill)
        body = self._instructions(skill)
        files, more = other_files(ws, rel)
        lines = [f'<skill_content name="{skill.name}">', body, "", f"Skill directory: {skill.folder}",
                 "Relative paths in this skill are relative to the skill directory; give read_file and bash "
                 "absolute paths."]
        if files:
            lines += ["", "<skill_resources>", *(f"  <file>{f}</file>" for f in files)]
            if more:
                lines.append(f"  [{more}{'+' if len(files) + more >= 2000 else ''} more files not listed]")
            lines.append("</skill_resources>")
        return "\n".join([*lines, "</skill_content>"]), body, skill

    # -- the toolset ------------------------------------------------------------------------

    async def open(self) -> None:
        self.is_open = True

    async def close(self) -> None:
        self.is_open = False

    async def get_tools(self) -> list[Tool]:
        """This conversation's loaders: on the first call of a run the ones the model has already
        (the head's and those its history declares), later all of them, with a new one when the
        catalog changed since the last (:func:`_changes`); ``[]`` while the conversation never
        had a skill. Outside a run: a loader with the catalog of the moment."""
        if not self._in_run:
            catalog = await self._in_thread(lambda: self._catalog(self.scan()))
            return [self._loader(FIRST_LOADER, _description(catalog))] if catalog else []
        if self._first_call:
            self._first_call = False
            return [t for t in self._loaders if self._had is None or t.name in self._had]
        catalog = await self._in_thread(lambda: self._catalog(self.scan()))
        if _lines(catalog) != _lines(self._view):
            name = _loader_name(len(self._loaders))
            self._record({"declared": [e.record() for e in catalog], "tool": name})
            self._add_loader(name, catalog)
        return list(self._loaders)

    def _add_loader(self, name: str, catalog: Catalog) -> None:
        """Append the loader ``name`` telling the model ``catalog`` (in full for the first one,
        else what changed since :attr:`_view`)."""
        text = _description(catalog) if not self._loaders else _changes(self._view, catalog)
        self._loaders.append(self._loader(name, text))
        self._view = catalog
        self._names.update(e.name for e in catalog)

    # -- the run's hooks: the session -------------------------------------------------------

    def _record(self, body: dict[str, Any]) -> None:
        if self._session is not None:
            self._session.record("skills", body)

    async def run_start(self, session: SessionWriter | None) -> None:
        """Look at the folders and fix the run's head: a new conversation's head lists the skills
        found now; a continued session gets its loaders back from its records (gone or changed
        skills warned about) and the model is told what changed since at the next model call."""
        self._session, self.loaded, self._first_call, self._in_run = session, [], True, True
        catalog = await self._in_thread(lambda: self._catalog(self.scan()))
        self._loaders, self._view, self._names, self._had = [], (), set(), None
        if session is None or session.new:
            if catalog:
                self._add_loader(FIRST_LOADER, catalog)
                self._record({"listed": [e.record() for e in catalog]})
            return
        listed = await self._in_thread(lambda: self._resumed(session))
        if listed is not None:
            self._record({"listed": [e.record() for e in listed]})

    async def run_end(self) -> None:
        self._in_run = False

    def _resumed(self, session: SessionWriter) -> Catalog | None:
        """Rebuild a continued session's loaders from its records (each ``listed`` or
        ``declared`` catalog in order, as :meth:`get_tools` made them) and note which of them the
        model has (:attr:`_had`: the last run's head and the history's declarations); warn about
        listed skills that are gone and loaded ones that changed. Returns the head's catalog
        (None: the head has no loader)."""
        loads: dict[str, tuple[str, str]] = {}
        first: Catalog | None = None  # the catalog of the first loader, when it was in a head
        for number, body in session.records("skills"):
            kinds = [k for k in ("listed", "declared", "loaded") if isinstance(body, dict) and k in body]
            kind = kinds[0] if len(kinds) == 1 else ""
            if not kind or set(body) - {kind, *(["tool"] if kind == "declared" else [])}:
                raise SessionError(f"{session.path}:{number}: not a valid skills record")
            value = body[kind]
            if kind in ("listed", "declared"):
                catalog = _entries(session.path, number, value)
                name = _loader_name(len(self._loaders))
                # without "tool": written before loaders had names of their own, the first loader or
                # a change the endpoint never got (its name was taken)
                tool = body.get("tool", name if not self._loaders else None) if kind == "declared" else name
                if tool is None:
                    continue
                if tool != name:
                    raise SessionError(f"{session.path}:{number}: not a valid skills record: it declares "
                                       f"{tool!r:.80}, the session's next loader is {name!r}")
                if kind == "declared" or not self._loaders:  # a later run's listing repeats the head
                    first = catalog if kind == "listed" else first
                    self._add_loader(name, catalog)
            elif kind == "loaded" and isinstance(value, dict) and all(
                    isinstance(value.get(k), str) for k in ("name", "file", "sha256")):
                loads[value["name"]] = (value["file"], value["sha256"])
            else:
                raise SessionError(f"{session.path}:{number}: not a valid skills record ({kind!r})")
        starts = [body for _, body in session.records("run_start") if isinstance(body, dict)]
        head = {t["function"].get("name") for t in (starts[-1].get("tools") or ()) if isinstance(t, dict)
                and isinstance(t.get("function"), dict)} if starts else {FIRST_LOADER}  # fmt: skip
        self._had = {n for n in head if isinstance(n, str)} | dynamic_names(session.messages)
        for entry in self._view:
            if entry.name not in self.found:
                self._warn(f"skill {entry.name!r} of session {session.path} is gone (it was {entry.file}); "
                           "loading it gives an error")
        for name, (file, sha) in loads.items():
            skill = self.found.get(name)
            if skill is None:
                continue
            try:
                now = digest(self._instructions(skill))
            except ToolError:
                now = ""
            if now != sha:
                self._warn(f"skill {name!r} changed since session {session.path} loaded it ({file}); the model "
                           "has the old instructions until it loads the skill again")
        return first if first is not None and FIRST_LOADER in head else None
