"""The ``kimik3`` command: run the K3 coding agent, resume its sessions, chat, check a node.

::

    kimik3 run "fix the failing test" --workspace repo --base-url http://127.0.0.1:8000/v1
    kimik3 run "..." --model-path /models/kimi-k3 --preset auto             # embedded vLLM
    kimik3 run "..." --script replies.json                                  # scripted replies
    kimik3 resume ~/.kimik3/sessions/20260101-120000.jsonl "now add a test" --base-url ...
    kimik3 show SESSION                   # a session as a transcript, messages numbered
    kimik3 resume SESSION "try B" --at 7  # fork: continue from message 7 in a new session
    kimik3 approve SESSION --deny ID      # decide the calls a run deferred for approval, then resume
    kimik3 chat --base-url ...            # a REPL; --workspace DIR gives it the coding tools
    kimik3 preflight                      # can this node serve K3? (--preset NAME: env, command)
    kimik3 replay runs/form [--html run.html]   # replay a recorded UI trajectory, or render it
    kimik3 serve models/k3-tiny --max-model-len 8192   # vLLM's OpenAI server with the kimi_k3 parsers
    kimik3 serve models/k3-tiny --replicas 2 --router consistent_hash   # 2 replicas behind vllm-router
    kimik3 eval evals/k3-tiny --out runs/a --model-path models/k3-tiny   # a task suite: pass rate, cost
    kimik3 eval compare runs/a runs/b --max-drop 0.05                    # exit 1: b regressed

Progress goes to stdout. On a terminal it is live (rich): a status line (turn, tool calls,
tokens), reasoning dimmed, tool calls and results as they happen, the answer. Elsewhere (a pipe,
CI) it is plain, flushed lines whose format is kept stable::

    sandbox: bwrap (workspace read-write, the rest read-only, secrets hidden, /tmp private, network off)
                                            first: where bash runs commands (--sandbox)
    [turn 1] text: <content the model wrote beside its tool calls>
    [turn 1] tool read_file {"path": "notes.txt"}
    [turn 1] result read_file: <first non-blank line of the result, at most 100 chars>
    [turn 1] plan [>] <step>                 after an update_plan result (--plan), one per step
    [turn 2] answer: <the final answer>
    stopped: turn_budget (<why>)            only when the run did not complete
    usage: 2 turns, 1 tool call, 1234 tokens, 45% cached, $0.0123
    session: /home/me/.kimik3/sessions/20260101-120000.jsonl

The usage line gives the share of prompt tokens served from the engine's prefix cache only when
the engine reports it, and the USD cost only when the run is priced (Moonshot's hosted model ids,
``kimik3._pricing``, or ``--price``); the live view's status line shows both as the turns go. Tool arguments are
one-line JSON (``json.dumps``), cut after 200 characters with ``...``; the result preview
collapses whitespace and is cut after 100 characters with ``...``. A ``text`` line comes only
when the model wrote text beside its calls; the answer may span several lines.

vLLM's, torch's and Python's logs and warnings are hidden unless ``--verbose`` (what vLLM prints
while it starts goes to ``${KIMIK3_HOME:-~/.kimik3}/logs/vllm.log``). A session file, once
created, is never deleted: a run that fails or is interrupted (Ctrl-C) before the model answered
keeps the task in it, unanswered, and says how to continue it (``kimik3 resume SESSION -w DIR``).

Exit codes: 0 the run ended (answered, or stopped by a budget: said so), 1 an error (a kimik3
error is printed on stderr as one line ``error: <Type>: <message>``; ``chat`` goes on and exits
1 at the end), 2 a usage error, 130 interrupted. This is the only module of kimik3 that knows
about terminals.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from . import __version__
from ._cli_engine import (
    _PRESET_NAMES,
    FiniteFloat,
    _agent,
    _build_engine,
    _engine_options,
    _Options,
    _options,
    _quiet,
    _settings,
    check_prices,
    parse_engine_arg,
)
from ._cli_eval import eval_group
from ._cli_harness import (
    harness_options,
    harness_parts,
    sandbox_from_options,
    sandbox_options,
    skills_from_options,
    undo_command,
)
from ._cli_progress import (
    _STOP_REASONS,
    _degraded_lines,
    _PlainProgress,
    _progress,
    _typed_error,
    resume_line,
)
from ._cli_run import (
    _drive,
    _execute,
    _kept_unanswered,
    _new_session_path,
    _read_task,
    _start,
    approve_command,
    session_workspace,
)
from ._cli_serve import serve
from ._exceptions import KimiK3Error, UserError
from ._pricing import format_usd
from ._text import printable, redact_url, redact_urls
from .agents import (
    Agent,
    RunHooks,
    RunResult,
    SessionWriter,
    fork_session,
    format_session,
    load_session,
    read_session_records,
)
from .engines import FEATURES, Engine, preflight
from .harness import CodingHarness, Skills
from .tools import Tool, Toolset
from .types import AssistantMessage, Message

__all__ = ["build_agent", "build_engine", "engine_options", "main", "parse_engine_arg", "run_script", "start_engine"]


"""Result previews are the first non-blank line of a tool result, cut to this many characters."""
"""Tool-call arguments are shown as one-line JSON, cut to this many characters."""

"""The summary of a degraded run lists at most this many of its issues."""


# -- options ---------------------------------------------------------------------------------




































# -- progress --------------------------------------------------------------------------------


















# -- running ---------------------------------------------------------------------------------












def _run_agent(o: _Options, workspace: str, task: str | None, history: list[Message], session: Path,
               writer: SessionWriter | None = None) -> int:
    """Run the agent; ``writer``: resume's, holding the session already (the run takes it over:
    one open, lock and read of the session, issue 42), closed here if the run never starts."""
    try:
        _quiet(o.verbose)
        progress = _progress(o.plain)
        skills = skills_from_options(workspace, progress.note)
        try:  # the first line: which sandbox runs (the skills' folders readable in it)
            sandbox = sandbox_from_options(workspace, progress.note, skills)
        except KimiK3Error as e:
            progress.error(e)
            if writer is not None:
                writer.close()
            return 1
        engine = _build_engine(o)
        agent = _agent(o, engine, *harness_parts(engine, workspace, _settings(o, engine), progress.note, sandbox,
                                                 skills))
    except BaseException:
        if writer is not None:
            writer.close()
        raise

    existed = session.exists()

    async def main() -> int:
        result: RunResult[Any] | None = None
        try:
            await _start(engine, progress, o.verbose)
            await check_prices(o, engine)  # --max-usd without prices: refused before any model call
            result = await _drive(agent, task, history, session if writer is None else writer, progress)
        finally:
            if writer is not None:
                writer.close()  # the run's own close, or the engine never started (idempotent)
            progress.summary(result, session if session.exists() else None)
            if result is None and not existed and session.exists():  # kept: the task is in it
                _kept_unanswered(session, workspace, progress)
            await engine.aclose()
        return 0

    return _execute(main, progress)


# -- for scripts (examples/coding_agent.py): the CLI's engine, agent and errors -------------

engine_options = _engine_options
"""The engine and model options of ``kimik3 run`` (``--base-url``, ``--model-path``, ``--script``,
``--trust-remote-code``, ``--max-model-len``, ``--temperature``, ...) as a click decorator."""


def build_engine(options: Mapping[str, Any]) -> Engine:
    """The engine ``kimik3 run`` builds, from the keyword arguments of a click command decorated
    with :func:`engine_options` (call it inside that command). Not started: see :func:`start_engine`.
    Hides vLLM's logs and Python warnings unless ``--verbose``.

    Raises:
        click.UsageError: no engine, two engines, options of another engine, raw mode without
            a tokenizer.
    """
    o = _options(dict(options))
    _quiet(o.verbose)
    return _build_engine(o)


def build_agent(options: Mapping[str, Any], engine: Engine, tools: Sequence[Tool | Toolset], instructions: str | None,
                hooks: Sequence[RunHooks] = ()) -> Agent[str]:
    """The agent ``kimik3 run`` builds: ``engine`` with the options' sampling settings
    (``--temperature``, ``--max-tokens``, ...) and turn budget (``--max-turns``); ``tools``,
    ``instructions`` and ``hooks`` as :meth:`kimik3.harness.CodingHarness.parts` gives them."""
    return _agent(_options(dict(options)), engine, tools, instructions, hooks)


async def start_engine(engine: Engine, options: Mapping[str, Any]) -> None:
    """Start an embedded engine now, as ``kimik3 run`` does (prints "starting vLLM ..."; vLLM's
    output goes to ``${KIMIK3_HOME:-~/.kimik3}/logs/vllm.log`` unless ``--verbose``); other
    engines need no start.

    Raises:
        EngineNotAvailableError: vLLM is not installed.
        EngineError: vLLM did not start (whatever vLLM raised, as one typed error).
    """
    await _start(engine, _PlainProgress(), bool(options.get("verbose")))


def run_script(main: Callable[[], Coroutine[Any, Any, int]]) -> int:
    """Run ``main`` on an event loop as the CLI does: its return value is the exit code; a
    kimik3 (or OS) error is printed on stderr as one line ``error: <Type>: <message>`` (exit 1);
    Ctrl-C exits 130. Other exceptions propagate (a bug: the traceback is wanted)."""
    return _execute(main, _PlainProgress())




# -- commands --------------------------------------------------------------------------------


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="kimik3")
def main() -> None:
    """kimik3: the Kimi K3 coding agent and tools on the command line.

    Pick an engine with --base-url (an OpenAI-compatible endpoint serving K3), --model-path
    (K3 embedded with vLLM) or --script (scripted replies, for tests and dry runs).
    """


@main.command()
@click.argument("task")
@click.option("--workspace", "-w", type=click.Path(exists=True, file_okay=False), default=".", show_default=True,
              help="The directory the coding tools work in.")
@click.option("--session", type=click.Path(dir_okay=False), metavar="FILE",
              help="The JSONL session file to write (default: a new one under ${KIMIK3_HOME:-~/.kimik3}/sessions/).")
@_engine_options
@harness_options
@click.pass_context
def run(ctx: click.Context, /, task: str, workspace: str, session: str | None, **params: Any) -> None:
    """Run the coding agent on TASK ("-" reads it from stdin) in a workspace."""
    o = _options(params)
    task = _read_task(task)
    if session is not None and Path(session).exists() and Path(session).stat().st_size > 0:
        raise click.UsageError(f"{session} already holds a session; continue it with: {resume_line(session)}")
    path = Path(session) if session is not None else _new_session_path()
    ctx.exit(_run_agent(o, workspace, task, [], path))


@main.command()
@click.argument("session", type=click.Path(exists=True, dir_okay=False))
@click.argument("task", required=False)
@click.option("--workspace", "-w", type=click.Path(exists=True, file_okay=False),
              help="The directory the coding tools work in (default: the one SESSION records; a different one "
                   "is refused).")
@click.option("--at", "at", type=int, metavar="N",
              help="Fork: continue from message N (0 or more, as `kimik3 show` numbers them) in a new session; "
                   "SESSION is left untouched.")
@_engine_options
@harness_options
@click.pass_context
def resume(ctx: click.Context, /, session: str, task: str | None, workspace: str | None, at: int | None,
           **params: Any) -> None:  # fmt: skip
    """Continue the session in SESSION, with TASK as a new request if given.

    Tool calls a crash left without a result are answered with an error first (as
    Agent.resume does); the session file receives the new messages. With --at N the history up
    to message N is copied into a new session (printed), which receives them instead.
    """
    o = _options(params)
    if task is not None:
        task = _read_task(task)
    progress = _progress(o.plain)
    try:
        if at is not None:
            if at < 0:  # the CLI numbers messages as `kimik3 show` prints them, from 0 (A21)
                count = sum(1 for r in read_session_records(session) if r.index is not None)
                raise UserError(f"--at {at} is out of range: {session} holds messages 0..{count - 1} "
                                "(as `kimik3 show` numbers them)")
            forked = fork_session(session, at, _new_session_path())
            click.echo(f"forked {session} at message {at} into {forked}", err=True)
            session = str(forked)
        writer = SessionWriter(session, create=False)  # the run's: workspace and history from its one read
        try:
            history, workspace = list(writer.messages), session_workspace(writer.log, workspace)
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


@main.command()
@click.option("--workspace", "-w", type=click.Path(exists=True, file_okay=False),
              help="Give the model the coding harness in this directory, as kimik3 run (default: no tools).")
@click.option("--session", type=click.Path(dir_okay=False), metavar="FILE",
              help="The JSONL session file (an existing one is continued; default: a new one under "
                   "${KIMIK3_HOME:-~/.kimik3}/sessions/).")
@_engine_options
@sandbox_options
@click.pass_context
def chat(ctx: click.Context, /, workspace: str | None, session: str | None, **params: Any) -> None:
    """Chat with K3 (a REPL keeping the history; /exit or end of input quits).

    Exits 1 when a turn failed (the error is printed and the chat goes on).
    """
    o = _options(params)
    _quiet(o.verbose)
    progress = _progress(o.plain)
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
    engine = _build_engine(o)
    if harness is not None:  # each turn is a run: what its commands left ends with it (the sandbox's hook)
        agent = _agent(o, engine, *harness.parts(engine=engine, settings=_settings(o, engine)))
    else:
        agent = _agent(o, engine, [], None)
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
            await _start(engine, progress, o.verbose)
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
                        progress.note(f"stopped: {answer.stop_reason} ({_STOP_REASONS.get(answer.stop_reason, '')})")
                    for issue in _degraded_lines(answer):  # a degraded answer never passes for a clean one
                        progress.note(issue)
                except Exception as e:
                    spent += _recorded_cost(path) - recorded  # a failed turn's finished calls count too
                    typed = _typed_error(e)
                    if typed is None:
                        raise
                    progress.error(typed)
                    failed = True
        finally:
            await toolsets.aclose()
            progress.summary(None, path if path.exists() else None)
            await engine.aclose()
        return 1 if failed else 0

    ctx.exit(_execute(main, progress))


def _recorded_cost(session: Path) -> float:
    """USD of the model calls recorded in ``session`` so far (0 when there is none yet, or it
    cannot be read: the chat's cap then counts what the runs returned)."""
    try:
        return sum(r.cost or 0.0 for r in read_session_records(session)) if session.exists() else 0.0
    except (KimiK3Error, OSError):
        return 0.0


@main.command(name="preflight")
@click.option("--weights-dir", type=click.Path(file_okay=False), metavar="DIR",
              help="Where the checkpoint will live (its free space is checked; default $HF_HOME or here).")
@click.option("--preset", type=click.Choice(_PRESET_NAMES), default="auto", show_default=True,
              help="Which launch of vLLM's K3 recipe to check for (auto: the one that fits the GPUs found).")
@click.option("--feature", type=click.Choice(sorted(FEATURES)), multiple=True,
              help="An opt-in feature of the recipe (repeatable).")
@click.option("--gpus", type=click.IntRange(min=1), help="GPUs the launch uses (default: the preset's).")
@click.option("--verbose", "-v", is_flag=True, help="Show vLLM's logs and Python warnings (hidden by default).")
@click.pass_context
def preflight_command(
    ctx: click.Context, weights_dir: str | None, preset: str, feature: tuple[str, ...], gpus: int | None,
    verbose: bool = False,
) -> None:
    """Check whether this node can serve K3 (GPUs, preset, driver, memory, vLLM's kimi_k3 support, disk).

    Prints the preset's environment variables and its ``vllm serve`` command too. Exits 0 when
    nothing failed, 1 otherwise.
    """
    _quiet(verbose)
    try:
        report = preflight(weights_dir=weights_dir, preset=preset, features=feature, gpus_needed=gpus)
    except KimiK3Error as e:
        click.echo(f"kimik3 preflight: {type(e).__name__}: {e}", err=True)
        ctx.exit(1)
    click.echo(str(report))
    ctx.exit(0 if report.ok else 1)


@main.command(name="show")
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
        _progress(True).error(e)
        ctx.exit(1)
    click.echo(printable(text), nl=False)  # recorded model text cannot send terminal escapes


@main.command(name="replay")
@click.argument("trajectory", type=click.Path(exists=True), metavar="FILE")
@click.option("--html", "html_out", type=click.Path(dir_okay=False), metavar="OUT",
              help="Write the recorded run as one HTML page (then nothing is replayed).")
@click.option("--gif", "gif_out", type=click.Path(dir_okay=False), metavar="OUT",
              help="Write the recorded run as an animated GIF (then nothing is replayed).")
@click.option("--url", help="Browser trajectories: open this page instead of the recorded one.")
@click.option("--display", help="X11 trajectories: use this X display instead of the recorded one.")
@click.option("--tolerance", type=FiniteFloat(0, 1), default=0.02, show_default=True,
              help="Largest fraction of differing pixels in a step's target region that still matches.")
@click.option("--timeout", type=FiniteFloat(min=0), default=10.0, show_default=True,
              help="Seconds to wait for the screen to match before each step.")
@click.pass_context
def replay_command(ctx: click.Context, trajectory: str, html_out: str | None, gif_out: str | None, url: str | None,
                   display: str | None, tolerance: float, timeout: float) -> None:  # fmt: skip
    """Replay a recorded UI trajectory (kimik3.tools.ui.TrajectoryRecorder) without a model.

    FILE is the trajectory directory or its trajectory.jsonl. The screen is opened as recorded
    (a headless Chromium page, or the X display) and each step runs once the screen matches the
    recorded screenshot; exits 1 naming the first step that does not. With --html / --gif the
    recorded run is rendered instead (a screenshot too large to decode, over 8K UHD by its header,
    is shown as a note).
    """
    from .tools.ui import computer_for, load_trajectory, render_gif, render_html, replay

    progress = _progress(True)
    try:
        traj = load_trajectory(trajectory)
        if html_out or gif_out:
            for out, render in ((html_out, render_html), (gif_out, render_gif)):
                if out:
                    click.echo(f"wrote {render(traj, out)} ({len(traj.steps)} steps)")
            ctx.exit(0)
        computer = computer_for(traj, url=url, display=display)
    except KimiK3Error as e:
        progress.error(e)
        ctx.exit(1)

    async def main() -> int:
        async with computer:
            steps = await replay(traj, computer, tolerance=tolerance, timeout=timeout,
                                 on_step=lambda s: click.echo(f"step {s.index}: {s.describe()}"))  # fmt: skip
        click.echo(f"replayed {steps} steps")
        return 0

    ctx.exit(_execute(main, progress))


@main.command(name="verify")
@click.option("--base-url", required=True, envvar=["KIMIK3_BASE_URL", "OPENAI_BASE_URL"], metavar="URL",
              help="The endpoint's OpenAI base URL, e.g. http://127.0.0.1:8000/v1 "
                   "(default $KIMIK3_BASE_URL, else $OPENAI_BASE_URL).")
@click.option("--model", metavar="NAME", help="Served model name (default: the first one /models lists).")
@click.option("--api-key", envvar="OPENAI_API_KEY", metavar="KEY", help="API key (default $OPENAI_API_KEY).")
@click.option("--quick", is_flag=True, help="Wire-level checks only (no check that needs a capable model).")
@click.option("--tokenizer", "tokenizer_dir", type=click.Path(exists=True, file_okay=False), metavar="DIR",
              help="The served model's tokenizer directory when it is not K3's vocabulary (e.g. models/k3-tiny).")
@click.option("--no-images", is_flag=True, help="Do not send the image requests.")
@click.option("--max-tokens", type=click.IntRange(min=1), default=1024, show_default=True,
              help="Completion budget of each generation the model checks read.")
@click.option("--concurrency", type=click.IntRange(min=1), default=8, show_default=True, help="Requests in flight.")
@click.option("--timeout", type=FiniteFloat(min=0, min_open=True, max=86400), default=60.0, show_default=True,
              metavar="SECONDS", help="Total time per request, connect to last byte.")
@click.option("--max-body-bytes", type=click.IntRange(min=1024), default=4 * 1024 * 1024, show_default=True,
              metavar="BYTES", help="The largest answer body read (a stream's chunks together); a larger one "
                                    "is a failed row.")
@click.pass_context
def verify_command(ctx: click.Context, base_url: str, model: str | None, api_key: str | None, quick: bool,
                   tokenizer_dir: str | None, no_images: bool, max_tokens: int, concurrency: int,
                   timeout: float, max_body_bytes: int) -> None:  # fmt: skip
    """Check a K3 endpoint against Moonshot's contract: exact prompt_tokens, reasoning round-trip,
    rejected requests, raw mode, and (without --quick) tool calls, JSON output and the walle schemas.

    Prints one row per check with its evidence. Exits 0 when no row failed, 1 otherwise.
    """
    from ._verify import CheckResult, verify

    click.echo(f"kimik3 verify {redact_url(base_url)}{' --quick' if quick else ''} (timeout {timeout:g} s per request)")

    started = time.monotonic()

    def step(text: str) -> None:  # where a long run is, on stderr (a full run takes ~15 minutes: docs/verify.md)
        click.echo(f"... {text} ({time.monotonic() - started:.0f} s)", err=True)

    def row(r: CheckResult) -> None:  # each row as it is decided
        mark = r.status.upper() if r.status == "fail" else r.status
        name = r.check + (" *" if r.needs_model else "")
        click.echo(f"{name:<56}  {mark:<6}  {r.evidence}")  # two spaces at least: names can be long

    try:
        report = verify(base_url, model=model, api_key=api_key, quick=quick, tokenizer=tokenizer_dir,
                        images=not no_images, max_tokens=max_tokens, concurrency=concurrency, timeout=timeout,
                        max_body_bytes=max_body_bytes, progress=row, on_step=step)  # fmt: skip
    except KimiK3Error as e:
        click.echo(f"kimik3 verify: {type(e).__name__}: {' '.join(printable(redact_urls(str(e))).split())}", err=True)
        ctx.exit(1)
    fails = len(report.failures())
    if any(r.needs_model for r in report.rows):
        click.echo("(* needs a capable model)")
    click.echo(f"model: {report.model_line}")
    if report.hint:
        click.echo(f"hint: {report.hint}")
    click.echo("verify: " + ("OK" if report.ok else f"FAILED ({fails} row{'s' if fails != 1 else ''})"))
    ctx.exit(0 if report.ok else 1)


main.add_command(undo_command)
main.add_command(approve_command)
main.add_command(eval_group)
main.add_command(serve)
