"""``CodingHarness``: the coding toolkit plus what long-horizon runs need, assembled once.

Features (:data:`Feature`; all on by default, ``features=`` picks them):
    project_instructions: ``AGENTS.md`` files reach the model (:mod:`._instructions`).
    read_before_edit: edits of unread or changed files are refused (:mod:`._tracking`).
    edit_tools: the multi_edit / apply_patch tools (:mod:`._patch`).
    checkpoints: the workspace recorded around writing turns; ``kimik3 undo`` (:mod:`._checkpoints`).
    background: ``bash(..., background=true)``, ``read_output``, ``stop`` (:mod:`._background`).
    subagents: the ``task`` tool (:mod:`._tasks`).
    skills: Agent Skills, ``load_skill`` and the skills' folders readable (:mod:`._skills`).

Every command (foreground, background, a sub-agent's) runs in one sandbox per run
(:class:`~kimik3.tools.coding.Sandbox`), ended with every process in it when the run ends.
"""

from __future__ import annotations

import os
import shlex
import warnings
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, TypeAlias, cast, get_args

from pydantic import Field

from .._client import Client
from .._exceptions import SessionError, ToolDefinitionError, UserError
from ..agents import CODING_INSTRUCTIONS, Agent, Budgets, ModelSettings, RunHooks, SessionWriter
from ..engines import Engine, kimik3_home
from ..tools import FunctionTool, Tool, ToolResult, Toolset
from ..tools.coding import Sandbox, SandboxMode, coding_tools
from ..tools.coding.api import FILE_TOOL_TIMEOUT_S, config_named
from ._background import BackgroundProcesses, SandboxHooks
from ._checkpoints import Checkpoints
from ._git import global_configs
from ._instructions import ProjectInstructions
from ._patch import EditSpec, FileAccess, apply_patch_text, multi_edit_file
from ._skills import WORKSPACE_SKILL_FOLDERS, Skills
from ._tasks import SubAgents
from ._tracking import ReadTracker

__all__ = ["FEATURES", "CodingHarness", "Feature"]

Feature: TypeAlias = Literal["project_instructions", "read_before_edit", "checkpoints", "background", "subagents",
                             "edit_tools"]
"""A feature of :class:`CodingHarness` (see the module docstring)."""

FEATURES: frozenset[Feature] = frozenset(get_args(Feature))
"""Every feature: the default of ``CodingHarness(features=...)``; ``FEATURES - {"background"}``
turns one off."""

_BACKGROUND_NOTE = (
    " With background=true the command starts in its own process group and the call returns at once "
    'with an id ("bg1", "bg2"...): read what it printed since the last read with read_output(id), end '
    "it with stop(id); every background process is ended when the run ends."
)


def _keep_later_files(sandbox: Sandbox, skills: Skills | None, root: Path) -> None:
    """Keep from every tool what kimik3 reads in later runs where it lies in the workspace
    (issue 40): ``${KIMIK3_HOME:-~/.kimik3}`` (sessions a resume acts on, checkpoint stores undo
    restores from, the user's skills: ``-w $HOME``), git's global configuration
    (:func:`._git.global_configs`), what the workspace's repositories' configs name
    (:func:`~kimik3.tools.coding._kept.config_named`), and the skills: each of the workspace's skills
    folders, ``<root>/.agents/skills`` and ``<root>/.claude/skills`` (made or not; a ``SKILL.md`` the
    model rewrote or added would steer later runs), each skill found
    there (its real folder) and a given skills folder inside the workspace."""
    inside = str(root).rstrip("/") + "/"
    home = os.path.realpath(kimik3_home())
    if home.startswith(inside):
        sandbox.sessions.keep(home, "kimik3's home (sessions, checkpoints, skills of later runs)")
    for config in global_configs():  # -w $HOME: git runs what the user's global config names
        real = os.path.realpath(config)
        if real.startswith(inside):
            sandbox.sessions.keep(real, "git's global configuration (git runs the programs it names)")
    for named in config_named(str(root), global_configs=[str(c) for c in global_configs()]):  # include.path, ...
        sandbox.sessions.keep(named, "what a repository's git configuration names (git reads or runs it)")
    if skills is None:
        return
    folders = [*(root / f for f in WORKSPACE_SKILL_FOLDERS), *skills.folders,
               *(s.folder for s in skills.found.values())]
    for folder in folders:
        if os.path.realpath(folder).startswith(inside):  # kept by its own path: a symlink on the way is kept too
            sandbox.sessions.keep(folder, "an Agent Skill's folder (read into later runs' prompts)")


def patch_tools(files: FileAccess) -> list[Tool]:
    """``multi_edit`` and ``apply_patch`` over ``files`` (confined to its workspace)."""

    def multi_edit(path: str, edits: list[EditSpec]) -> str:
        """Make several exact replacements in one file, all or nothing: each edit applies to the
        result of the ones before, with edit_file's rules; if one fails, nothing is written.
        Returns "Edited PATH (N replacements in E edits)" and a unified diff of the change.

        Args:
            path: file path, relative to the workspace root.
            edits: the replacements, in order.
        """
        return multi_edit_file(files, path, edits)

    def apply_patch(patch: str) -> str:
        """Apply a unified diff (diff -u / git diff) to one or more files, all or nothing: every
        hunk is checked before anything is written. "--- /dev/null" creates a file, "+++ /dev/null"
        deletes one; "@@" line numbers are hints, context lines must match exactly. Returns
        "Patched N files", then "M PATH", "A PATH" (added) or "D PATH" (deleted) per file.

        Args:
            patch: the diff; paths relative to the workspace root.
        """
        return apply_patch_text(files, patch)

    return [FunctionTool(multi_edit, timeout=FILE_TOOL_TIMEOUT_S),
            FunctionTool(apply_patch, timeout=FILE_TOOL_TIMEOUT_S)]


def background_tools(procs: BackgroundProcesses, bash: Tool) -> list[Tool]:
    """``bash`` with ``background``, ``read_output`` and ``stop``."""

    default = bash.parameters["properties"].get("timeout", {}).get("default", 120)

    async def bash_(command: str, timeout: Annotated[int, Field(ge=1)] = default,
                    background: bool = False) -> ToolResult:
        """Args:
        command: the command line; pipes, &&, redirections and heredocs work.
        timeout: seconds before the command and all its child processes are killed (not used with
            background).
        background: start the command in the background and return at once with its id.
        """
        if background:
            pid = procs.start(command)
            return ToolResult(content=f"Started background process {pid}; read_output(\"{pid}\") shows its "
                                      f"output, stop(\"{pid}\") ends it")
        return await bash.run({"command": command, "timeout": timeout})

    def read_output(id: str) -> str:
        """The output a background process printed since the last read_output, then a status line
        "[ID: running]", "[ID: exited with code N]" or "[ID: stopped]" ("[no new output]" first when
        there is none).

        Args:
            id: the id bash returned, e.g. "bg1".
        """
        return procs.read_output(id)

    async def stop(id: str) -> str:
        """End a background process and everything it started (SIGTERM, then SIGKILL after 2 s);
        returns its last output and status, like read_output.

        Args:
            id: the id bash returned, e.g. "bg1".
        """
        return await procs.stop(id)

    bash_tool = FunctionTool(bash_, name="bash", description=bash.description + _BACKGROUND_NOTE)
    return [bash_tool, FunctionTool(read_output), FunctionTool(stop)]


class WorkspaceHook(RunHooks):
    """Keeps a session in its workspace (issue 40): a new session's header records the workspace
    (``"workspace": "/abs/root"``); a run continuing a session recorded for another one is
    refused before anything runs, naming both (``kimik3 resume`` picks the recorded one when
    ``-w`` is not given)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def session_header(self) -> dict[str, Any]:
        return {"workspace": str(self.root)}

    async def run_start(self, session: SessionWriter | None) -> None:
        """Raises:
            SessionError: the session records another workspace than this harness's, or a
                malformed one (:meth:`~kimik3.agents.SessionLog.workspace`).
        """
        recorded = session.log.workspace() if session is not None and not session.new else None
        if recorded is not None and recorded != self.root.resolve():  # both resolved: any spelling of one folder
            where = shlex.quote(str(session.path.resolve())) if session is not None else "SESSION"
            raise SessionError(f"session {session.path if session else ''} works in {str(recorded)!a}, not in "
                               f"{str(self.root)!a}; nothing was run: continue it there (kimik3 resume {where} -w "
                               f"{shlex.quote(str(recorded))})")


class CodingHarness:
    """The coding tools of a workspace with the long-horizon features, and the hooks they need.

    Usage::

        harness = CodingHarness("/repo")
        agent = harness.agent(engine=engine)
        result = await agent.run("fix the failing test", session="run.jsonl")

    Args:
        root: the workspace root.
        features: the features on (:data:`FEATURES`, all, by default; see the module docstring).
            Without background, subagents and edit_tools, the tools (names, descriptions,
            schemas) are exactly :func:`~kimik3.tools.coding.coding_tools`'s. The former
            switches (``background=False``, ...) still work, with a DeprecationWarning.
        on_instructions: called with each ``AGENTS.md`` path as it reaches the model.
        bash_timeout, max_output_chars, write_hard_links, network, sandbox_read, sandbox_write:
            as :func:`~kimik3.tools.coding.coding_tools`.
        sandbox: "auto", "bwrap", "none" or a :class:`~kimik3.tools.coding.Sandbox` (see
            :func:`~kimik3.tools.coding.coding_tools`); its hooks end it when a run ends and
            record it in the session header.
        subagent_budgets: each child's budgets.
        skills: Agent Skills (:class:`~kimik3.harness.Skills`): True (the default) finds them in
            ``<root>/.agents/skills``, ``<root>/.claude/skills`` and ``${KIMIK3_HOME:-~/.kimik3}/skills``; a
            list of folders looks there first, then in those three; a :class:`Skills` is used as it is; False: none.
            With no skill found, the prompt is exactly as without skills. The skills' folders
            (:meth:`Skills.read_paths`) are readable by the file tools and, read-only, inside the
            sandbox this harness makes (a :class:`~kimik3.tools.coding.Sandbox` given is used as it
            is: give it ``read=skills.read_paths()``).

    Attributes:
        features: the features on.

    Raises:
        ToolDefinitionError: ``root`` is not a directory.
        SandboxUnavailableError: ``sandbox="bwrap"`` where bubblewrap cannot run.
        UserError: an unknown feature; ``bash_timeout`` is not a whole number of seconds from 1
            to a week; ``skills`` is one path instead of a list.
    """

    def __init__(self, root: str | os.PathLike[str], *, features: Iterable[Feature] = FEATURES,
                 on_instructions: Callable[[str], None] | None = None, bash_timeout: int = 120,
                 max_output_chars: int = 30_000, write_hard_links: bool = False,
                 subagent_budgets: Budgets | None = None, sandbox: SandboxMode | Sandbox = "auto",
                 network: bool = False, sandbox_read: Sequence[str | os.PathLike[str]] = (),
                 sandbox_write: Sequence[str | os.PathLike[str]] = (),
                 skills: bool | Sequence[str | os.PathLike[str]] | Skills = True, **switches: bool) -> None:
        self.features = _features(features, switches)
        on = self.features.__contains__
        self.root = Path(root).resolve()
        if not self.root.is_dir():
            raise ToolDefinitionError(f"workspace root {str(root)!r} is not a directory")
        self.skills: Skills | None
        if isinstance(skills, Skills):
            self.skills = skills
        elif skills is False:
            self.skills = None
        else:
            self.skills = Skills(() if skills is True else skills, workspace=self.root, user=True)
        skill_folders = self.skills.read_paths() if self.skills is not None else []
        self.sandbox = sandbox if isinstance(sandbox, Sandbox) else Sandbox(
            self.root, sandbox, network=network, read=[*sandbox_read, *skill_folders], write=sandbox_write)
        _keep_later_files(self.sandbox, self.skills, self.root)
        base = coding_tools(root, bash_timeout=bash_timeout, max_output_chars=max_output_chars,
                            write_hard_links=write_hard_links, sandbox=self.sandbox,
                            read_only=self.skills.read_paths if self.skills is not None else ())
        self.instructions = ProjectInstructions(self.root, on_load=on_instructions) if on("project_instructions") \
            else None
        self.processes = (BackgroundProcesses(self.root, max_output_chars=max_output_chars, sandbox=self.sandbox)
                          if on("background") else None)
        self.checkpoints = Checkpoints(self.root, kept=self.sandbox.sessions) if on("checkpoints") else None
        self.read_before_edit = on("read_before_edit")
        self.subagents = on("subagents")
        self.subagent_budgets = subagent_budgets
        tools = list(base)
        if on("edit_tools"):
            tools += patch_tools(FileAccess(self.root, hard_links=write_hard_links, sessions=self.sandbox.sessions))
        if self.processes is not None:  # bash in its place; read_output and stop at the end
            at = next(i for i, t in enumerate(tools) if t.name == "bash")
            bash, *more = background_tools(self.processes, tools[at])
            tools[at] = bash
            tools += more
        self.base_tools = tools
        self.tracker = ReadTracker(self.root) if self.read_before_edit else None
        self.tools = self.tracker.wrap(tools) if self.tracker is not None else tools

    def parts(self, *, engine: Engine | None = None, client: Client | None = None,
              instructions: str | None = CODING_INSTRUCTIONS, settings: ModelSettings | None = None,
              budgets: Budgets | None = None) -> tuple[list[Tool | Toolset], str | None, list[RunHooks]]:
        """(tools, instructions, hooks) for an :class:`~kimik3.Agent` over ``engine`` / ``client``
        (sub-agents use it): the root ``AGENTS.md`` is appended to ``instructions``; the
        children of a run spend at most ``budgets.tokens`` together (the parent's token budget).
        The tools end with the :class:`Skills` toolset (also a run hook, which the agent calls)."""
        if self.instructions is not None:
            self.instructions.reset()
            instructions = self.instructions.system_prompt(instructions)
        hooks: list[RunHooks] = [WorkspaceHook(self.root)]  # first: a session of another workspace runs nothing
        hooks += [h for h in (self.checkpoints, self.instructions, self.processes, self.tracker) if h is not None]
        hooks.append(SandboxHooks(self.sandbox))  # last: after the background processes' own stop
        tools: list[Tool | Toolset] = list(self.tools)
        if self.subagents and (client is None) != (engine is None):
            shared = client if client is not None else Client(cast(Engine, engine))
            root = self.root
            subs = SubAgents(shared, self.base_tools, settings=settings, budgets=self.subagent_budgets,
                             tokens=budgets.tokens if budgets is not None else None,
                             per_child=(lambda ts: ReadTracker(root).wrap(ts)) if self.read_before_edit else None)
            hooks.append(subs)
            tools.append(subs.tool())
        if self.skills is not None:
            tools.append(self.skills)
        return tools, instructions, hooks

    def agent(self, *, engine: Engine | None = None, client: Client | None = None,
              instructions: str | None = CODING_INSTRUCTIONS, settings: ModelSettings | None = None,
              budgets: Budgets | None = None, tools: Sequence[Tool | Toolset] = (),
              hooks: Sequence[RunHooks] = (), **kwargs: Any) -> Agent[str]:
        """An :class:`~kimik3.Agent` with the harness's tools, hooks and instructions (see
        :meth:`parts`). One run at a time.

        Args:
            tools: tools of your own (``@kimik3.tool`` functions, :class:`~kimik3.tools.Tool` s,
                toolsets such as an MCP server), declared after the harness's. They run in this
                process as written: not in the sandbox, not checkpointed (undo does not cover
                what they write), not given to ``task``'s sub-agents.
            hooks: run hooks of your own, after the harness's.
            (the rest): as :class:`~kimik3.Agent` takes them.

        Raises:
            UserError: neither or both of ``engine`` and ``client``; a tool of yours named as one
                of the harness's (``two tools are named 'bash'``).
        """
        own, instructions, own_hooks = self.parts(engine=engine, client=client, instructions=instructions,
                                                  settings=settings, budgets=budgets)
        return Agent(instructions=instructions, tools=[*own, *tools], engine=engine, client=client,
                     settings=settings, budgets=budgets, hooks=[*own_hooks, *hooks], **kwargs)


def _features(features: Iterable[Feature], switches: dict[str, bool]) -> frozenset[Feature]:
    """The feature set of ``features`` and the former boolean switches (deprecated).

    Raises:
        UserError: an unknown feature or keyword.
    """
    if isinstance(features, str):
        raise UserError(f"CodingHarness(features=...) takes a set of features, not the string {features!r:.60}")
    chosen: set[str] = set(features)
    unknown = sorted(chosen - FEATURES) + sorted(set(switches) - FEATURES)
    if unknown:
        raise UserError(f"unknown CodingHarness feature(s) {', '.join(map(repr, unknown))}; "
                        f"the features: {', '.join(sorted(FEATURES))}")
    if switches:
        warnings.warn("CodingHarness(name=bool) is deprecated: pass features=FEATURES - {...}",
                      DeprecationWarning, stacklevel=3)
        chosen = {f for f in chosen if switches.get(f, True)} | {f for f, on in switches.items() if on}
    return frozenset(cast(set[Feature], chosen))
