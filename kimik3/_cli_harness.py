"""The coding harness on the command line: ``kimik3 run`` / ``resume`` options and ``kimik3 undo``.

``kimik3 run`` always records checkpoints (``kimik3 undo`` needs them) and gives the model the
workspace's ``AGENTS.md`` files (``--no-agents-md`` opts out; each file is listed as it loads).
``--tools full`` (the default; what k3-tiny v3 was trained on) gives the full coding harness
(:class:`kimik3.harness.CodingHarness`): the six coding tools with read-before-edit,
``multi_edit``, ``apply_patch``, background ``bash`` with ``read_output`` / ``stop`` and the
``task`` sub-agent tool; ``--tools core`` keeps the six coding tools alone, unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from .agents import CODING_INSTRUCTIONS, ModelSettings, RunHooks
from .engines import Engine
from .harness import CodingHarness, undo
from .tools import Tool

__all__ = ["harness_options", "harness_parts", "undo_command"]

F = TypeVar("F", bound=Callable[..., Any])


def harness_options(f: F) -> F:
    """The harness options of ``run`` / ``resume``."""
    f = click.option("--no-agents-md", "no_agents_md", is_flag=True,
                     help="Do not give the model the workspace's AGENTS.md files.")(f)
    return click.option("--tools", "tool_set", type=click.Choice(["core", "full"]), default="full",
                        show_default=True,
                        help="full: the coding harness (the six coding tools with read-before-edit, multi_edit, "
                             "apply_patch, background bash, read_output, stop and task sub-agents); core: the six "
                             "coding tools alone.")(f)


def harness_parts(engine: Engine, workspace: str, settings: ModelSettings,
                  note: Callable[[str], None]) -> tuple[list[Tool], str | None, list[RunHooks]]:
    """(tools, instructions, hooks) of ``run`` / ``resume``'s coding agent, from the command's options."""
    params = click.get_current_context().params
    full = params.get("tool_set", "full") == "full"
    harness = CodingHarness(workspace, project_instructions=not params.get("no_agents_md"),
                            read_before_edit=full, background=full, subagents=full, edit_tools=full,
                            on_instructions=lambda rel: note(f"project instructions: {rel}"))
    return harness.parts(engine=engine, instructions=CODING_INSTRUCTIONS, settings=settings)


@click.command(name="undo")
@click.argument("session", type=click.Path(exists=True, dir_okay=False))
@click.option("--to", "to_turn", type=click.IntRange(min=0), default=0, show_default=True,
              help="Go back to the workspace as it was after this turn (0: before the run's first change).")
@click.option("--force", is_flag=True, help="Overwrite files that changed after the agent's last turn.")
@click.pass_context
def undo_command(ctx: click.Context, session: str, to_turn: int, force: bool) -> None:
    """Undo the file changes a session's turns made after --to TURN.

    Only files those turns changed are restored (from the checkpoints in SESSION); your other
    changes, the git index and HEAD stay as they are. Prints one line per restored path.
    """
    from ._exceptions import KimiK3Error

    try:
        paths = undo(session, to_turn, force=force)
    except KimiK3Error as e:
        click.echo(f"error: {e}", err=True)
        ctx.exit(1)
    for p in paths:
        click.echo(f"restored {p}")
