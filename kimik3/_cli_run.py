"""Running an agent from the `kimik3` command: session paths, starting the engine quietly,
driving the run with progress, exit codes, and ``kimik3 approve`` (split out of cli.py)."""

from __future__ import annotations

import json
import shlex
import signal
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import anyio
import click

from ._cli_progress import (
    _PlainProgress,
    _Progress,
    _typed_error,
    resume_line,
)
from ._exceptions import EngineError, KimiK3Error, SessionError, UserError
from ._text import counted, shown_call
from .agents import (
    Agent,
    Allow,
    Deny,
    Edit,
    FinalEvent,
    PendingCall,
    RunResult,
    SessionLog,
    SessionWriter,
    load_session,
    pending_approvals,
    record_approvals,
)
from .engines import Engine, VLLMEngine
from .engines._quiet import kimik3_home, output_to, vllm_log_path
from .engines._vllm import start_failure
from .types import Message, UserMessage

_home = kimik3_home


def _new_session_path() -> Path:
    """A new file under ``${KIMIK3_HOME:-~/.kimik3}/sessions/``, named by the local time."""
    home = _home()
    (home / "sessions").mkdir(parents=True, exist_ok=True)  # the default place: made on purpose
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = home / "sessions" / f"{stamp}.jsonl"
    n = 2
    while path.exists():
        path = home / "sessions" / f"{stamp}-{n}.jsonl"
        n += 1
    return path


def _read_task(task: str) -> str:
    if task == "-":
        task = sys.stdin.read()
    if not task.strip():
        raise click.UsageError("the task is empty")
    return task


async def _drive(agent: Agent[str], task: str | None, messages: list[Message], session: Path | SessionWriter,
                 progress: _Progress) -> RunResult[Any]:
    """One run, its events shown by ``progress`` (``session``: a file, or resume's writer, which
    the run takes over)."""
    result: RunResult[Any] | None = None
    progress.start()
    try:
        async for event in agent.run_stream(task, messages=messages, session=session):  # type: ignore[arg-type]
            progress.event(event)
            if isinstance(event, FinalEvent):
                result = event.result
    finally:
        progress.stop()
    assert result is not None
    return result


def _execute(main: Callable[[], Coroutine[Any, Any, int]], progress: _Progress) -> int:
    """Run ``main`` on an event loop; typed errors become one line and exit code 1."""
    try:
        return anyio.run(main)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        return 130
    except Exception as e:
        typed = _typed_error(e)
        if typed is None:
            raise
        progress.error(typed)
        return 1


async def _start(engine: Engine, progress: _Progress, verbose: bool = True) -> None:
    """Start an embedded engine now, so a model that does not load is one clear error.

    Unless ``verbose``, what vLLM and its processes write to stdout / stderr while it starts (and
    later, from the processes started then) goes to ``${KIMIK3_HOME:-~/.kimik3}/logs/vllm.log``
    (:mod:`kimik3.engines._quiet`; the engine's own ``verbose=False`` does the same).

    Raises:
        KeyboardInterrupt: Ctrl-C while it started (vLLM's processes got it too and the start
            failed for it: an interruption, exit 130, not an engine error).
        EngineError: it did not start (:meth:`~kimik3.engines.VLLMEngine.start`).
    """
    if not isinstance(engine, VLLMEngine):
        return
    log = None if verbose else engine.log_path or vllm_log_path()
    progress.note(f"starting vLLM with {engine.engine_args['model']} ...")
    with _sigint_seen() as seen:
        try:
            with output_to(log if engine.log_path is None else None):  # a quiet engine redirects itself
                await engine.start()
        except Exception as e:
            if seen:
                raise KeyboardInterrupt from None
            if isinstance(e, KimiK3Error):
                raise
            raise EngineError(start_failure(e, log)) from e
    if seen:  # started all the same: the run is not wanted
        raise KeyboardInterrupt


@contextmanager
def _sigint_seen() -> Iterator[list[int]]:
    """A list that gets an item when SIGINT arrives inside the block (the handler before it still
    runs: asyncio's cancels the main task). Outside the main thread: never filled."""
    seen: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield seen
        return
    previous = signal.getsignal(signal.SIGINT)

    def handler(signum: int, frame: FrameType | None) -> None:
        seen.append(signum)
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, handler)
    try:
        yield seen
    finally:
        signal.signal(signal.SIGINT, previous)


def _kept_unanswered(session: Path, workspace: str, progress: _Progress) -> None:
    """After a run that failed or was interrupted before the model answered: the session it
    created stays (never deleted: the task typed is in it, unanswered); say how to go on."""
    try:
        history = load_session(session)
    except (KimiK3Error, OSError):
        return  # unreadable or gone: nothing to continue
    if history and isinstance(history[-1], UserMessage):
        path, folder = str(session.absolute()), str(Path(workspace).absolute())  # runnable from anywhere
        progress.note(f"the task is kept, unanswered, in {path}; continue with: "
                      f"kimik3 resume {shlex.quote(path)} -w {shlex.quote(folder)}")


def session_workspace(log: SessionLog, given: str | None) -> str:
    """The workspace a resumed run works in (issue 40): the one the session's header records
    (:meth:`~kimik3.agents.SessionLog.workspace`, resolved), else ``given``, else "." for a
    session of no coding harness.

    Raises:
        SessionError: ``given`` is another folder than the recorded one (both named; the fix
            printed runs as printed); the recorded folder is gone; a malformed ``"workspace"``;
            a coding-harness session (its header records its ``sandbox``) that records no
            workspace, without ``given`` (it is never run in whatever folder this is).
    """
    recorded = log.workspace()
    if recorded is None:
        if given is None and "sandbox" in log.header:
            raise SessionError(f"session {log.path} records no workspace (written before sessions recorded theirs); "
                               f"nothing was run: give the folder it worked in ({resume_line(log.path)} -w FOLDER)")
        return given if given is not None else "."
    if not recorded.is_dir():
        raise SessionError(f"session {log.path} works in {str(recorded)!a}, which is no longer a folder; nothing "
                           "was run")
    if given is not None and Path(given).resolve() != recorded:
        raise SessionError(f"session {log.path} works in {str(recorded)!a}, not in {str(Path(given).resolve())!a}; "
                           f"nothing was run: continue it there ({resume_line(log.path)}, or with -w "
                           f"{shlex.quote(str(recorded))})")
    return str(recorded)


def _interactive() -> bool:
    return sys.stdin.isatty()


def _ask(pending: list[PendingCall], decisions: dict[str, Allow | Deny | Edit]) -> None:
    """Ask the person at the terminal about each call in turn, showing its whole arguments."""
    for p in pending:
        click.echo(shown_call(f"{p.name} ", p.arguments, f"  id={p.id}"), err=True)
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
    plain = _PlainProgress()
    try:
        pending = pending_approvals(session)
    except KimiK3Error as e:
        plain.error(e)
        ctx.exit(1)
    if not pending:
        plain.error(UserError(f"no tool call awaits approval in {session}"))
        ctx.exit(1)
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
            raise click.UsageError(f"{counted(len(rest), 'call')} await approval in {session}: decide each by its id "
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
        plain.note(shown_call(f"{what}{p.name} ", p.arguments, f"  id={p.id}"))
    plain.note(f"continue with: {resume_line(session)}")
