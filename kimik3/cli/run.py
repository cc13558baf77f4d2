"""``kimik3 run``, ``resume`` and ``chat``: running an agent from the command line, its session
paths, starting an embedded engine quietly, driving the run with progress, and exit codes."""

from __future__ import annotations

import contextlib
import glob
import shlex
import signal
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import Any

import anyio
import click

from .._exceptions import EngineError, KimiK3Error, SessionError, UserError
from .._pricing import format_usd
from ..agents import (
    Agent,
    FinalEvent,
    RunResult,
    SessionLog,
    SessionWriter,
    fork_session,
    load_session,
    read_session_records,
)
from ..engines import Engine, VLLMEngine, kimik3_home, output_to, start_failure, vllm_log_path
from ..harness import CodingHarness, Skills
from ..types import AssistantMessage, Message, UserMessage
from .engine import (
    Options,
    agent_from,
    check_prices,
    engine_from,
    engine_options,
    options_from,
    quiet,
    settings_from,
)
from .harness import harness_options, harness_parts, sandbox_from_options, sandbox_options, skills_from_options
from .progress import STOP_REASONS, ProgressView, degraded_lines, progress_view, resume_line, shell_word, typed_error
from .recorded import EngineHeader, engine_argv, recorded_params, resume_argv

__all__ = ["chat_command", "execute", "resume_command", "run_command", "session_workspace", "start_embedded"]

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
                 progress: ProgressView) -> RunResult[Any]:
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


def execute(main: Callable[[], Coroutine[Any, Any, int]], progress: ProgressView) -> int:
    """Run ``main`` on an event loop; typed errors become one line and exit code 1."""
    try:
        return anyio.run(main)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        return 130
    except Exception as e:
        typed = typed_error(e)
        if typed is None:
            raise
        progress.error(typed)
        return 1


async def start_embedded(engine: Engine, progress: ProgressView, verbose: bool = True) -> None:
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


def _kept_unanswered(session: Path, workspace: str, progress: ProgressView) -> None:
    """After a run or resume that failed or was interrupted before the model answered: the session
    stays (never deleted: the task typed is in it, unanswered); say how to go on."""
    try:
        history = load_session(session)
    except (KimiK3Error, OSError):
        return  # unreadable or gone: nothing to continue
    if history and isinstance(history[-1], UserMessage):
        path, folder = str(session.absolute()), str(Path(workspace).absolute())  # runnable from anywhere
        progress.note(f"the task is kept, unanswered, in {path}; continue with: "
                      f"{resume_line(path, folder, progress.resume_args)}")


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
                           f"{shell_word(str(recorded))})")
    return str(recorded)


def _run_agent(o: Options, workspace: str, task: str | None, history: list[Message], session: Path,
               writer: SessionWriter | None = None) -> int:
    """Run the agent; ``writer``: resume's, holding the session already (the run takes it over:
    one open, lock and read of the session, issue 42), closed here if the run never starts."""
    try:
        quiet(o.verbose)
        progress = progress_view(o.plain)
        skills = skills_from_options(workspace, progress.note)
        try:  # the first line: which sandbox runs (the skills' folders readable in it)
            sandbox = sandbox_from_options(workspace, progress.note, skills)
        except KimiK3Error as e:
            progress.error(e)
            if writer is not None:
                writer.close()
            return 1
        engine = engine_from(o)
        parts = harness_parts(engine, workspace, settings_from(o, engine), progress.note, sandbox, skills)
        argv = engine_argv(o)
        progress.resume_args = resume_argv(argv, session, workspace)
        agent = agent_from(o, engine, parts[0], parts[1], [*parts[2], EngineHeader(argv)])
    except BaseException:
        if writer is not None:
            writer.close()
        raise

    async def main() -> int:
        result: RunResult[Any] | None = None
        try:
            await start_embedded(engine, progress, o.verbose)
            await check_prices(o, engine)  # --max-usd without prices: refused before any model call
            result = await _drive(agent, task, history, session if writer is None else writer, progress)
        finally:
            if writer is not None:
                writer.close()  # the run's own close, or the engine never started (idempotent)
            progress.summary(result, session if session.exists() else None)
            if result is None and session.exists():  # kept: a task typed for this run or a resume is in it
                _kept_unanswered(session, workspace, progress)
            await engine.aclose()
        return 0

    return execute(main, progress)


@click.command(name="run")
@click.argument("task")
@click.option("--workspace", "-w", type=click.Path(exists=True, file_okay=False), default=".", show_default=True,
              help="The directory the coding tools work in.")
@click.option("--session", type=click.Path(dir_okay=False), metavar="FILE",
              help="The JSONL session file to write (default: a new one under ${KIMIK3_HOME:-~/.kimik3}/sessions/).")
@engine_options
@harness_options
@click.pass_context
def run_command(ctx: click.Context, /, task: str, workspace: str, session: str | None, **params: Any) -> None:
    """Run the coding agent on TASK ("-" reads it from stdin) in a workspace."""
    o = options_from(params)
    task = _read_task(task)
    if session is not None and Path(session).exists() and Path(session).stat().st_size > 0:
        raise click.UsageError(f"{session} already holds a session; continue it with: {resume_line(session)}")
    path = Path(session) if session is not None else _new_session_path()
    ctx.exit(_run_agent(o, workspace, task, [], path))


@click.command(name="resume")
@click.argument("session", type=click.Path(exists=True, dir_okay=False))
@click.argument("task", required=False)
@click.option("--workspace", "-w", type=click.Path(exists=True, file_okay=False),
              help="The directory the coding tools work in (default: the one SESSION records; a different one "
                   "is refused).")
@click.option("--at", "at", type=int, metavar="N",
              help="Fork: continue from message N (0 or more, as `kimik3 show` numbers them) in a new session; "
                   "SESSION is left untouched.")
@engine_options
@harness_options
@click.pass_context
def resume_command(ctx: click.Context, /, session: str, task: str | None, workspace: str | None, at: int | None,
           **params: Any) -> None:  # fmt: skip
    """Continue the session in SESSION, with TASK as a new request if given.

    Without engine options (--base-url, --model-path, --script, or their environment variables),
    the engine options SESSION's header records are used (said on the first line; never an API
    key: give it by its environment variable). Tool calls a crash left without a result are
    answered with an error first (as Agent.resume does); the session file receives the new
    messages. With --at N the history up to message N is copied into a new session (printed),
    which receives them instead.
    """
    o = options_from(params)
    if task is not None:
        task = _read_task(task)
    progress = progress_view(o.plain)
    try:
        if at is not None:
            if at < 0:  # the CLI numbers messages as `kimik3 show` prints them, from 0 (A21)
                count = sum(1 for r in read_session_records(session) if r.index is not None)
                held = f"messages 0..{count - 1}" if count else "no messages"
                raise UserError(f"--at {at} is out of range: {session} holds {held} (as `kimik3 show` numbers them)")
            forked = fork_session(session, at, _new_session_path())
            click.echo(f"forked {session} at message {at} into {forked}", err=True)
            session = str(forked)
        writer = SessionWriter(session, create=False)  # the run's: workspace and history from its one read
        try:
            history, workspace = list(writer.messages), session_workspace(writer.log, workspace)
            if recorded := recorded_params(writer.log, params, workspace):  # no engine given: the session's own
                o = options_from(params)
                progress.note(f"engine as the session records it: {shlex.join(recorded)}")
        except BaseException:
            writer.close()
            raise
    except KimiK3Error as e:
        progress.error(e)
        ctx.exit(1)
    last = history[-1] if history else None
    if task is None and isinstance(last, AssistantMessage) and not last.tool_calls:
        writer.close()
        raise click.UsageError("the session ends with the agent's answer; give a TASK to continue it")
    ctx.exit(_run_agent(o, workspace, task, history, Path(session), writer))


@click.command(name="chat")
@click.option("--workspace", "-w", type=click.Path(exists=True, file_okay=False),
              help="Give the model the coding harness in this directory, as kimik3 run (default: no tools).")
@click.option("--session", type=click.Path(dir_okay=False), metavar="FILE",
              help="The JSONL session file (an existing one is continued; default: a new one under "
                   "${KIMIK3_HOME:-~/.kimik3}/sessions/).")
@engine_options
@sandbox_options
@click.pass_context
def chat_command(ctx: click.Context, /, workspace: str | None, session: str | None, **params: Any) -> None:
    """Chat with K3 (a REPL keeping the history; /exit or end of input quits).

    Exits 1 when a turn failed (the error is printed and the chat goes on).
    """
    o = options_from(params)
    quiet(o.verbose)
    progress = progress_view(o.plain)
    harness: CodingHarness | None = None
    if workspace is not None:  # the full coding harness, as `kimik3 run` gives it
        skills = Skills(workspace=workspace, user=True, on_warning=progress.note)
        try:
            sandbox = sandbox_from_options(workspace, progress.note, skills)  # the first line: which sandbox runs
        except KimiK3Error as e:
            progress.error(e)
            ctx.exit(1)
        harness = CodingHarness(workspace, sandbox=sandbox, skills=skills,
                                on_instructions=lambda rel: progress.note(f"project instructions: {rel}"))
    engine = engine_from(o)
    if harness is not None:  # each turn is a run: what its commands left ends with it (the sandbox's hook)
        tools, instructions, hooks = harness.parts(engine=engine, settings=settings_from(o, engine))
        agent = agent_from(o, engine, tools, instructions, [*hooks, EngineHeader(engine_argv(o))])
    else:
        agent = agent_from(o, engine, [], None, [EngineHeader(engine_argv(o))])
    path = Path(session) if session is not None else _new_session_path()
    interactive = sys.stdin.isatty()
    if interactive:
        with contextlib.suppress(ImportError):
            import readline  # noqa: F401 - line editing for input()

    async def main() -> int:
        history: list[Message] = load_session(path) if path.exists() and path.stat().st_size > 0 else []
        failed = False
        toolsets = contextlib.AsyncExitStack()  # MCP servers stay up for the whole chat
        try:
            for toolset in agent.toolsets:
                await toolsets.enter_async_context(toolset)
            await start_embedded(engine, progress, o.verbose)
            await check_prices(o, engine)
            spent = 0.0  # USD of this chat's answers: --max-usd caps the whole chat, not each message
            if interactive:
                progress.note(f"kimik3 chat · {engine.model or 'K3'} · /exit to quit")
            while True:
                try:
                    line = input("you> " if interactive else "")
                except EOFError:
                    break
                if line.strip() in ("/exit", "/quit"):
                    break
                if not line.strip():
                    continue
                if o.max_usd is not None:
                    if spent >= o.max_usd:
                        progress.note(f"the chat's --max-usd {format_usd(o.max_usd)} is spent ({format_usd(spent)}); "
                                      "start a new chat to go on")
                        break
                    agent.budgets = replace(agent.budgets, usd=o.max_usd - spent)  # what is left of the cap
                recorded = _recorded_cost(path)
                try:
                    answer = await _drive(agent, line, history, path, progress)
                    spent += answer.cost or 0.0
                    if answer.stop_reason != "completed":
                        progress.note(f"stopped: {answer.stop_reason} ({STOP_REASONS.get(answer.stop_reason, '')})")
                    for issue in degraded_lines(answer):  # a degraded answer never passes for a clean one
                        progress.note(issue)
                except Exception as e:
                    spent += _recorded_cost(path) - recorded  # a failed turn's finished calls count too
                    typed = typed_error(e)
                    if typed is None:
                        raise
                    progress.error(typed)
                    failed = True
        finally:
            await toolsets.aclose()
            progress.summary(None, path if path.exists() else None)
            await engine.aclose()
        return 1 if failed else 0

    ctx.exit(execute(main, progress))


def _recorded_cost(session: Path) -> float:
    """USD of the model calls recorded in ``session`` and its sub-agents' sessions
    (``<stem>.task-*.jsonl`` beside it: a child's cost is the parent's) so far; a file that is
    not there yet, or cannot be read, counts 0 (the chat's cap then counts what the runs returned)."""
    total = 0.0
    for path in (session, *session.parent.glob(f"{glob.escape(session.stem)}.task-*.jsonl")):
        with contextlib.suppress(KimiK3Error, OSError):
            total += sum(r.cost or 0.0 for r in read_session_records(path)) if path.exists() else 0.0
    return total
