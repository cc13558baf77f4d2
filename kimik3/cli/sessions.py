"""Commands on a recorded session: ``kimik3 show`` (the transcript), ``kimik3 approve`` (decide the
calls a run deferred for approval), ``kimik3 answer`` (answer an MCP server's question a run
stopped on) and ``kimik3 undo`` (restore the files its turns changed)."""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from .._exceptions import KimiK3Error, UserError
from .._text import counted, escaped, printable, shown_call
from ..agents import (
    Allow,
    Deny,
    Edit,
    PendingCall,
    PendingInput,
    SessionLog,
    format_session,
    pending_approvals,
    pending_inputs,
    record_answers,
    record_approvals,
)
from ..harness import undo
from ..tools.coding.api import show_path
from .progress import PlainProgress, progress_view, resume_line
from .recorded import given_again

__all__ = ["answer_command", "approve_command", "show_command", "undo_command"]



T = TypeVar("T")

def _awaiting(ctx: click.Context, plain: PlainProgress, read: Callable[[str], list[T]], session: str,
              what: str) -> list[T]:
    """The calls of ``session`` awaiting ``what`` (``read``: :func:`pending_approvals` or
    :func:`pending_inputs`); exits 1 saying why when it cannot be read or none waits."""
    try:
        found = read(session)
    except KimiK3Error as e:
        plain.error(e)
        ctx.exit(1)
    if not found:
        plain.error(UserError(f"no tool call awaits {what} in {session}"))
        ctx.exit(1)
    return found

@click.command(name="show")
@click.argument("session", type=click.Path(exists=True, dir_okay=False))
@click.option("--reasoning", is_flag=True, help="Unfold the model's reasoning.")
@click.option("--full", is_flag=True, help="Print every line of texts and tool results (default: 12 each).")
@click.pass_context
def show_command(ctx: click.Context, session: str, reasoning: bool, full: bool) -> None:
    """Print a recorded session as a transcript: numbered messages, turns with their usage,
    reasoning folded, tool calls and results (terminal control sequences stripped, as the live
    view does). Continue from message N with `kimik3 resume SESSION --at N`."""
    try:
        text = format_session(session, reasoning=reasoning, max_lines=None if full else 12)
    except KimiK3Error as e:
        progress_view(True).error(e)
        ctx.exit(1)
    click.echo(printable(text), nl=False)  # recorded model text cannot send terminal escapes


def _interactive() -> bool:
    return sys.stdin.isatty()


def _ask(pending: list[PendingCall], decisions: dict[str, Allow | Deny | Edit]) -> None:
    """Ask the person at the terminal about each call in turn, showing its whole arguments."""
    for p in pending:
        click.echo(shown_call(f"{escaped(p.name)} ", p.arguments, f"  id={escaped(p.id)}"), err=True)
        answer = click.prompt("run this call? (y: approve, n: deny, s: leave it waiting)",
                              type=click.Choice(["y", "n", "s"]), err=True)
        if answer != "s":
            decisions[p.id] = Allow() if answer == "y" else Deny()


@click.command(name="approve")
@click.argument("session", type=click.Path(exists=True, dir_okay=False))
@click.option("--allow", multiple=True, metavar="ID", help="Approve this call (repeatable).")
@click.option("--deny", multiple=True, metavar="ID", help="Deny this call (repeatable); the model reads the reason.")
@click.option("--reason", multiple=True, metavar="R",
              help="Why: one for every --deny, or one per --deny in their order (default: denied by the user).")
@click.option("--edit", nargs=2, multiple=True, metavar="ID JSON",
              help="Run this call with these arguments instead, a JSON object (repeatable); the model is told.")
@click.option("--all", "all_", is_flag=True,
              help="Approve every waiting call not named by --deny or --edit (read them first: kimik3 show SESSION).")
@click.pass_context
def approve_command(ctx: click.Context, session: str, allow: tuple[str, ...], deny: tuple[str, ...],
                    reason: tuple[str, ...], edit: tuple[tuple[str, str], ...], all_: bool) -> None:
    """Decide the tool calls that SESSION's run deferred for approval (a Defer() of its approval
    hook; `kimik3 show SESSION` lists them, whole): approve (--allow), deny (--deny) or run with
    other arguments (--edit) each by its id. Without ids it asks about each call at a terminal,
    and elsewhere approves only with --all; calls left undecided keep waiting. The decisions are
    recorded in SESSION, each bound to the arguments shown (a call changed afterwards is refused);
    `kimik3 resume SESSION` then runs each approved call once and the model sees the denials.
    Exits 1 when no call awaits, 2 for an id that does not wait or is named twice, or for no
    decision at all without a terminal or --all.
    """
    plain = PlainProgress()
    pending = _awaiting(ctx, plain, pending_approvals, session, "approval")
    ids = [p.id for p in pending]
    named = [*allow, *deny, *(i for i, _ in edit)]
    for call_id in named:
        if call_id not in ids:
            raise click.UsageError(f"no call {call_id!r} awaits approval in {session}; awaiting: {', '.join(ids)}")
        if named.count(call_id) > 1:
            raise click.UsageError(f"call {call_id!r} is named twice (--allow / --deny / --edit)")
    if len(reason) not in (0, 1, len(deny)):
        raise click.UsageError(f"give one --reason for all {len(deny)} --deny, or one per --deny")
    reasons = dict(zip(deny, reason if len(reason) == len(deny) else reason * len(deny), strict=False))
    decisions: dict[str, Allow | Deny | Edit] = {}
    for call_id, text in edit:
        try:
            arguments = json.loads(text)
        except ValueError as e:
            raise click.UsageError(f"--edit {call_id}: not JSON: {e}") from None
        if not isinstance(arguments, dict):
            raise click.UsageError(f"--edit {call_id}: the arguments must be a JSON object, got {text!r:.60}")
        decisions[call_id] = Edit(arguments)
    for call_id in deny:
        decisions[call_id] = Deny(reasons[call_id]) if call_id in reasons else Deny()
    for call_id in allow:
        decisions[call_id] = Allow()
    rest = [p for p in pending if p.id not in decisions]
    if all_:
        decisions.update((p.id, Allow()) for p in rest)
    elif rest and not named:
        if not _interactive():
            verb = "awaits" if len(rest) == 1 else "await"
            raise click.UsageError(f"{counted(len(rest), 'call')} {verb} approval in {session}: decide each by its id "
                                   "(--allow ID, --deny ID, --edit ID JSON), or approve them all with --all after "
                                   f"reading them (kimik3 show {session})")
        _ask(rest, decisions)
    if decisions:
        try:
            record_approvals(session, decisions, shown=pending)  # the calls shown, not a later read
        except KimiK3Error as e:
            plain.error(e)
            ctx.exit(1)
    for p in pending:
        d = decisions.get(p.id)
        what = ("still waiting: " if d is None else "denied: " if isinstance(d, Deny)
                else shown_call("edited to ", d.arguments, ": ") if isinstance(d, Edit) else "approved: ")
        plain.note(shown_call(f"{what}{escaped(p.name)} ", p.arguments, f"  id={escaped(p.id)}"))
    plain.note(f"continue with: {resume_line(session, extra=given_again(session))}")


def _typed(text: str, kind: object, field: str) -> object:
    """TEXT as the JSON type the question's field asks for (string, integer, number, boolean)."""
    try:
        if kind == "integer":
            return int(text)
        if kind == "number":
            return float(text)
    except ValueError:
        raise click.UsageError(f"the field {field!r} takes {'an integer' if kind == 'integer' else 'a number'}, "
                               f"got {text!r:.60}") from None
    if kind == "boolean":
        if text.lower() not in ("true", "false", "yes", "no"):
            raise click.UsageError(f"the field {field!r} takes true or false, got {text!r:.60}")
        return text.lower() in ("true", "yes")
    return text


def _content(pending: PendingInput, text: str | None, given: str | None, decline: bool) -> dict[str, Any]:
    """``{question key: content or None}`` for every question of ``pending`` from the command line."""
    keys = list(pending.input_requests)
    if decline:
        return dict.fromkeys(keys)
    if given is not None:
        try:
            value = json.loads(given)
        except ValueError as e:
            raise click.UsageError(f"--json: not JSON: {e}") from None
        if len(keys) > 1:  # one object per question
            if not isinstance(value, dict) or set(value) != set(keys):
                raise click.UsageError(f"call {pending.id} asks {len(keys)} questions: --json takes "
                                       f"{{question key: object or null}} for each of {', '.join(keys)}")
            return dict(value)
        if not isinstance(value, dict):
            raise click.UsageError(f"--json: the answer must be a JSON object, got {given!r:.60}")
        return {keys[0]: value}
    request = pending.input_requests[keys[0]]
    params = request.get("params") or {}
    fields = (params.get("requestedSchema") or {}).get("properties") or {}
    if len(keys) == 1 and isinstance(params.get("url"), str):
        raise click.UsageError(f"call {pending.id} asks you to answer at a link: "
                               f"{escaped(params['url'])}: check its host before you open it "
                               "(kimik3 show SESSION names it); once done there, record it with --json '{}' "
                               "(or --decline)")
    if len(keys) > 1 or len(fields) != 1:
        raise click.UsageError(f"call {pending.id} asks for {len(fields)} fields in {len(keys)} question(s): "
                               "answer with --json (TEXT answers a question of one field)")
    (field, spec), = fields.items()
    return {keys[0]: {field: _typed(text or "", spec.get("type") if isinstance(spec, dict) else None, field)}}


@click.command(name="answer")
@click.argument("session", type=click.Path(exists=True, dir_okay=False))
@click.argument("call_id", metavar="ID")
@click.argument("text", required=False)
@click.option("--json", "given", metavar="JSON",
              help="The answer as a JSON object of the question's fields (several questions: {key: object or null}).")
@click.option("--decline", is_flag=True, help="Decline the call's questions (the server is told so).")
@click.pass_context
def answer_command(ctx: click.Context, session: str, call_id: str, text: str | None, given: str | None,
                   decline: bool) -> None:
    """Answer the question an MCP server asked during SESSION's run, when no one could answer it
    there (the run stopped with input_required; `kimik3 show SESSION` lists the questions): TEXT
    answers a question of one field, --json JSON any form, --decline declines. The answer is
    recorded in SESSION, bound to the exact question shown (a question or call changed
    afterwards is refused); `kimik3 resume SESSION` then replays the call once with it. Exits 1
    when no call awaits an answer, 2 for an id that does not wait or an answer that does not fit.
    """
    plain = PlainProgress()
    waiting = _awaiting(ctx, plain, pending_inputs, session, "an answer")
    pending = next((p for p in waiting if p.id == call_id), None)
    if pending is None:
        raise click.UsageError(f"no call {call_id!r} awaits an answer in {session}; awaiting: "
                               f"{', '.join(p.id for p in waiting)}")
    if sum((text is not None, given is not None, decline)) != 1:
        raise click.UsageError("give one answer: TEXT, --json JSON or --decline")
    answers = _content(pending, text, given, decline)
    try:
        record_answers(session, {pending.id: answers}, shown=[pending])  # bound to the questions shown
    except UserError as e:  # the call waits (read above): the answer does not fit its question
        raise click.UsageError(str(e)) from None
    except KimiK3Error as e:
        plain.error(e)
        ctx.exit(1)
    for line in pending.shown():
        plain.note(line)
    plain.note(printable(f"answered: {json.dumps(answers, ensure_ascii=False)}" if not decline else "declined"))
    plain.note(f"continue with: {resume_line(session, extra=given_again(session))}")


@click.command(name="undo")
@click.argument("session", type=click.Path(exists=True, dir_okay=False))
@click.option("--to", "to_turn", type=click.IntRange(min=0), default=0, show_default=True,
              help="Go back to the workspace as it was after this turn (0: before the run's first change).")
@click.option("--workspace", "-w", type=click.Path(exists=True, file_okay=False),
              help="The workspace the session ran in (default: the one SESSION records, else the current "
                   "folder); undo refuses checkpoints recorded for another one.")
@click.option("--force", is_flag=True, help="Overwrite files that changed after the agent's last turn.")
@click.option("--partial", is_flag=True,
              help="Restore what the checkpoints cover even when some changes are not covered (a nested "
                   "repository, bash outside git); those are listed as not undone.")
@click.pass_context
def undo_command(ctx: click.Context, session: str, to_turn: int, workspace: str | None, force: bool,
                 partial: bool) -> None:
    """Undo the file changes a session's turns made after --to TURN, in the workspace SESSION
    records (as resume does; from any folder), or the one -w gives.

    Only files those turns changed are restored (from the checkpoints in SESSION); your other
    changes, the git index and HEAD stay as they are. Nothing outside the workspace is touched
    and no symlink is followed; if anything cannot be restored, nothing is. Prints one line per
    path: "restored PATH", or "removed PATH" for a file the undone turns created (and, with
    --partial, one "not undone" line on stderr per change the checkpoints do not cover).
    """
    skipped: list[str] = []

    class _Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            skipped.append(record.getMessage().removeprefix("kimik3 undo: "))

    handler = _Collect(logging.WARNING)
    logger = logging.getLogger("kimik3.harness")
    logger.addHandler(handler)
    try:
        if workspace is None:  # the session's own workspace, as resume works in (issue: undo from another folder)
            recorded = SessionLog.read(session).workspace()
            workspace = str(recorded) if recorded is not None else "."
        paths = undo(session, to_turn, force=force, partial=partial, workspace=workspace)
    except KimiK3Error as e:
        click.echo(f"error: {e}", err=True)
        ctx.exit(1)
    finally:
        logger.removeHandler(handler)
    root = Path(workspace).resolve()
    for p in paths:  # a file the undone turns created is gone again: "removed", not "restored"
        click.echo(f"{'restored' if os.path.lexists(root / p) else 'removed'} {show_path(p)}")
    for line in skipped:
        click.echo(line, err=True)
