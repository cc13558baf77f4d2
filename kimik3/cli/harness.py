"""The coding harness on the command line: the options of ``kimik3 run`` / ``resume`` / ``chat`` / ``eval``.

``kimik3 run`` always records checkpoints (``kimik3 undo`` needs them: :mod:`kimik3.cli.sessions`) and
gives the model the workspace's ``AGENTS.md`` files (``--no-agents-md`` opts out; each file is listed as it loads).
``--tools full`` (the default; what k3-tiny v3 was trained on) gives the full coding harness
(:class:`kimik3.harness.CodingHarness`): the six coding tools with read-before-edit,
``multi_edit``, ``apply_patch``, background ``bash`` with ``read_output`` / ``stop`` and the
``task`` sub-agent tool; ``--tools core`` keeps the six coding tools alone, unchanged.
``--sandbox`` (``run``, ``resume``, ``chat``, ``eval``) picks where ``bash`` runs its commands; the first
line printed says which sandbox is active (``docs/sandbox.md``).
Agent Skills come from ``<workspace>/.agents/skills`` and ``.claude/skills``,
``${KIMIK3_HOME:-~/.kimik3}/skills`` and each ``--skills DIR`` (looked at first); ``--no-skills`` turns
them off; a skipped skill is one line.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeVar

import click

from ..agents import CODING_INSTRUCTIONS, ModelSettings, RunHooks
from ..engines import Engine
from ..harness import FEATURES, CodingHarness, Feature, Skills
from ..tools import Tool, Toolset
from ..tools.coding import Sandbox

__all__ = ["harness_options", "harness_parts", "sandbox_from_options", "sandbox_options", "skills_from_options"]

F = TypeVar("F", bound=Callable[..., Any])


def sandbox_options(f: F) -> F:
    """``--sandbox``, ``--network``, ``--allow-read``, ``--allow-write``, ``--deny-read``, ``--allow-env``,
    ``--deny-env`` (``run``, ``resume``, ``chat``, ``eval``)."""
    options = [
        click.option("--sandbox", type=click.Choice(["auto", "bwrap", "landlock", "none"]), default="auto",
                     show_default=True,
                     help="Where bash runs commands. bwrap: bubblewrap, the workspace writable, the rest read-only, "
                          "secrets (~/.ssh, ~/.aws, ...) hidden, /tmp private, no network; landlock: the same rules "
                          "with the kernel's Landlock (paths stay visible; no PID isolation); none: unsandboxed; "
                          "auto: bwrap where it works, else landlock, else none (the first line says which)."),
        click.option("--network", is_flag=True, help="Let sandboxed commands reach the network (default: none)."),
        click.option("--allow-read", multiple=True, type=click.Path(exists=True), metavar="PATH",
                     help="Let sandboxed commands read PATH too: in /tmp, or a secret such as ~/.npmrc named "
                          "exactly (repeatable)."),
        click.option("--allow-write", multiple=True, type=click.Path(exists=True), metavar="PATH",
                     help="Let sandboxed commands write PATH too, e.g. a cache directory (repeatable)."),
        click.option("--deny-read", multiple=True, type=click.Path(exists=True), metavar="PATH",
                     help="Keep PATH unreadable in the sandbox, like ~/.ssh (repeatable)."),
        click.option("--allow-env", multiple=True, metavar="NAME",
                     help="Pass the credential variable NAME (an API key, a token) to sandboxed commands; others "
                          "are left out (repeatable)."),
        click.option("--deny-env", multiple=True, metavar="NAME",
                     help="Leave the variable NAME out of sandboxed commands' environment too: a credential of "
                          "yours that kimik3 does not recognise by its name or value (repeatable)."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def sandbox_from_options(workspace: str, note: Callable[[str], None], skills: Skills | bool = False) -> Sandbox:
    """The sandbox the command's options ask for, the folders of ``skills`` readable in it too;
    ``note`` gets the line that says which runs (first, before the skills' warnings).

    Raises:
        SandboxUnavailableError: ``--sandbox bwrap`` / ``landlock`` where it cannot run (the fix named).
    """
    params = click.get_current_context().params
    held: list[str] = []
    extra = []
    if isinstance(skills, Skills):
        said, skills.on_warning = skills.on_warning, held.append
        extra = skills.read_paths()
        skills.on_warning = said
    box = Sandbox(workspace, params.get("sandbox") or "auto", network=bool(params.get("network")),
                  read=[*(params.get("allow_read") or ()), *extra], write=list(params.get("allow_write") or ()),
                  deny_read=list(params.get("deny_read") or ()), allow_env=list(params.get("allow_env") or ()),
                  deny_env=list(params.get("deny_env") or ()))
    note(box.describe())
    for line in held:
        note(line)
    return box


def harness_options(f: F) -> F:
    """The harness options of ``run`` / ``resume`` / ``eval``: :func:`sandbox_options`, ``--no-agents-md``,
    ``--tools``."""
    f = sandbox_options(f)
    f = click.option("--no-skills", "no_skills", is_flag=True,
                     help="Give the model no Agent Skills (not even the workspace's or ~/.kimik3/skills').")(f)
    f = click.option("--skills", "skill_folders", multiple=True, type=click.Path(exists=True, file_okay=False),
                     metavar="DIR", help="A skill folder (with a SKILL.md) or a folder of them, looked at before "
                                         "<workspace>/.agents/skills, .claude/skills and ~/.kimik3/skills "
                                         "(repeatable).")(f)
    f = click.option("--no-agents-md", "no_agents_md", is_flag=True,
                     help="Do not give the model the workspace's AGENTS.md files.")(f)
    return click.option("--tools", "tool_set", type=click.Choice(["core", "full"]), default="full",
                        show_default=True,
                        help="full: the coding harness (the six coding tools with read-before-edit, multi_edit, "
                             "apply_patch, background bash, read_output, stop and task sub-agents); core: the six "
                             "coding tools alone.")(f)


def skills_from_options(workspace: str, note: Callable[[str], None]) -> Skills | Literal[False]:
    """The skills ``--skills`` / ``--no-skills`` ask for (False: none); ``note`` gets each warning.

    Raises:
        click.UsageError: ``--skills`` with ``--no-skills``.
    """
    params = click.get_current_context().params
    folders: Sequence[str] = params.get("skill_folders") or ()
    if folders and params.get("no_skills"):
        raise click.UsageError("--skills and --no-skills exclude each other")
    return False if params.get("no_skills") else Skills(folders, workspace=workspace, user=True, on_warning=note)


def harness_parts(engine: Engine, workspace: str, settings: ModelSettings, note: Callable[[str], None],
                  sandbox: Sandbox | None = None,
                  skills: Skills | bool = True) -> tuple[list[Tool | Toolset], str | None, list[RunHooks]]:
    """(tools, instructions, hooks) of ``run`` / ``resume``'s coding agent, from the command's
    options (``sandbox``: made by :func:`sandbox_from_options` when not given; ``skills`` True:
    made by :func:`skills_from_options`).

    Raises:
        click.UsageError: ``--skills`` with ``--no-skills``.
    """
    params = click.get_current_context().params
    full = params.get("tool_set", "full") == "full"
    features: set[Feature] = set(FEATURES) if full else {"project_instructions", "checkpoints"}
    if params.get("no_agents_md"):
        features.discard("project_instructions")
    if skills is True:
        skills = skills_from_options(workspace, note)
    harness = CodingHarness(workspace, features=features,
                            on_instructions=lambda rel: note(f"project instructions: {rel}"), skills=skills,
                            sandbox=sandbox if sandbox is not None else sandbox_from_options(workspace, note, skills))
    return harness.parts(engine=engine, instructions=CODING_INSTRUCTIONS, settings=settings)
