"""Running a suite: every missing attempt of every chosen task through the coding harness, up to
``concurrency`` at a time, each result appended to ``results.jsonl`` the moment it is known.

One attempt::

    fresh directory (workspace/ copied, or repo@commit checked out; the task folder copied)
    setup (if any)                 -> exit != 0 (or no checkout): "setup_failed", no run
    CodingHarness(workspace).agent over a TimedClient of the shared engine, session recorded
    the run, cancelled after the task's timeout -> "timeout"
    the answer written to $KIMIK3_EVAL_ANSWER; check (unless timeout / error) -> passed
    the directory removed; the result line appended

``setup``, the agent's ``bash`` and ``check`` each run in a sandbox of the config's policy over
the attempt's workspace (:meth:`EvalConfig.sandbox_for`: bubblewrap by default, where it works);
``setup`` and ``check`` also see the copy of the task folder, the answer and the session, read-only.

An engine that cannot be reached (connection, authentication, 404, 5xx, rate limit after the
client's retries, vLLM missing) stops the whole eval with that error: its attempts are not
results. Any other kimik3 error ends only its attempt (``stop_reason = "error"``). Ctrl-C keeps
every line written; the next run with the same ``--out`` does the rest (an interrupted attempt's
partial session is kept aside, see :meth:`ResultsDir.session_path`).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

import anyio
import anyio.to_thread

from .._exceptions import (
    APIConnectionError,
    APIResponseValidationError,
    AuthenticationError,
    EngineError,
    EngineNotAvailableError,
    EvalError,
    KimiK3Error,
    NotFoundError,
    RateLimitError,
    ServiceUnavailableError,
    ToolError,
)
from .._pricing import Pricing
from .._text import redact_urls
from ..agents import Agent, Budgets, FinalEvent, ModelSettings, RunResult, TurnEndEvent, read_session_records
from ..engines import Engine
from ..harness import FEATURES, CodingHarness, Skills
from ..tools import Tool, Toolset, unwrap_group
from ..tools.coding import Sandbox, SandboxMode
from ..types import AGENTIC_SETTINGS, Message, Usage
from ._report import write_report
from ._results import AttemptResult, ResultsDir
from ._suite import EvalTask, Suite
from ._summary import summarize
from ._timing import TimedClient
from ._validity import count_calls, declared_schemas
from ._workspace import Attempt, CommandResult, prepare_attempt, run_command

if sys.version_info < (3, 11):  # pragma: no cover - a backport anyio depends on there
    from exceptiongroup import BaseExceptionGroup

__all__ = ["EvalConfig", "evaluate", "run_attempt", "run_meta", "run_suite", "write_summary"]

_FATAL = (APIConnectionError, APIResponseValidationError, AuthenticationError, NotFoundError, RateLimitError,
          ServiceUnavailableError, EngineNotAvailableError)


def fatal(e: BaseException) -> bool:
    """An engine error that would fail every attempt alike: the eval stops instead of scoring it."""
    return isinstance(e, _FATAL) or type(e) is EngineError


@dataclass(frozen=True)
class EvalConfig:
    """How every attempt's agent is built.

    Attributes:
        settings: the model settings (None: the agent's defaults).
        tools: ``"full"`` (the default: the harness's read-before-edit, ``multi_edit``,
            ``apply_patch``, background ``bash``, ``task``; what k3-tiny was trained on) or
            ``"core"`` (the six coding tools), as ``kimik3 run --tools``.
        max_turns: caps each task's turn budget.
        max_usd: caps each task's USD budget (``Budgets.usd``; sub-agents' cost included).
        pricing: the agent's prices (:class:`~kimik3.Agent`'s ``pricing``).
        sandbox, network, sandbox_read, sandbox_write, deny_read, allow_env, deny_env: the sandbox policy of
            every command of an attempt, the agent's ``bash`` and the task's ``setup`` and
            ``check`` alike: "auto" (bubblewrap where it works, else Landlock, else none),
            "bwrap" / "landlock" (required) or "none", the network, more paths readable /
            writable / unreadable, the credential variables passed and more variables left out,
            as ``kimik3 run --sandbox --network --allow-read --allow-write --deny-read --allow-env
            --deny-env``
            (:class:`~kimik3.tools.coding.Sandbox`: the one place that leaves credentials out).
        project_instructions: give the model the workspace's ``AGENTS.md``.
        extra_tools: called once per attempt for more tools (MCP servers, the plan tool).
    """

    settings: ModelSettings | None = None
    tools: Literal["core", "full"] = "full"
    max_turns: int | None = None
    max_usd: float | None = None
    pricing: Pricing | Literal["auto"] | None = "auto"
    sandbox: SandboxMode = "auto"
    network: bool = False
    sandbox_read: Sequence[str | os.PathLike[str]] = ()
    sandbox_write: Sequence[str | os.PathLike[str]] = ()
    deny_read: Sequence[str | os.PathLike[str]] = ()
    allow_env: Sequence[str] = ()
    deny_env: Sequence[str] = ()
    project_instructions: bool = True
    extra_tools: Callable[[], Sequence[Tool | Toolset]] | None = None

    def sandbox_for(self, workspace: Path, *, read: Sequence[Path] = ()) -> Sandbox:
        """A sandbox of this policy over ``workspace`` (not started yet), ``read`` visible
        read-only too.

        Raises:
            SandboxUnavailableError: ``sandbox="bwrap"`` where bubblewrap cannot run.
            UserError: a ``sandbox_read`` / ``sandbox_write`` path that does not exist.
        """
        return Sandbox(workspace, self.sandbox, network=self.network, read=[*self.sandbox_read, *read],
                       write=list(self.sandbox_write), deny_read=list(self.deny_read), allow_env=list(self.allow_env),
                       deny_env=list(self.deny_env))

    def budgets(self, task: EvalTask) -> Budgets:
        """The task's budgets, turns capped by :attr:`max_turns`, USD by :attr:`max_usd`."""
        budgets = task.budgets or Budgets()
        if self.max_turns is not None:
            budgets = replace(budgets, turns=min(budgets.turns, self.max_turns))
        if self.max_usd is not None:
            budgets = replace(budgets, usd=min(budgets.usd or self.max_usd, self.max_usd))
        return budgets

    def agent(self, workspace: Path, client: TimedClient, task: EvalTask) -> Agent[str]:
        """The attempt's agent: the coding harness over ``workspace`` (no checkpoints: the
        workspace is thrown away and the session holds every change), its commands in
        :meth:`sandbox_for` ``workspace`` (ended by the harness's hook when the run ends); only the
        workspace's own skills, so the user's ``~/.kimik3/skills`` never change a suite's results."""
        full = self.tools == "full"
        features = set(FEATURES - {"checkpoints"}) if full else set()
        if self.project_instructions:
            features.add("project_instructions")
        harness = CodingHarness(workspace, features=features, sandbox=self.sandbox_for(workspace),
                                skills=Skills(workspace=workspace))  # not the user's own skills
        budgets = self.budgets(task)
        tools, instructions, hooks = harness.parts(client=client, settings=self.settings, budgets=budgets)
        extra = list(self.extra_tools()) if self.extra_tools is not None else []
        return Agent(instructions=instructions, tools=[*tools, *extra], client=client, settings=self.settings,
                     budgets=budgets, hooks=hooks, pricing=self.pricing)


def _one_line(e: BaseException) -> str:
    """``Type: message`` on one line, URLs redacted (the record may be shared)."""
    text = " ".join(redact_urls(str(e)).split())
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _tool_counts(session: Path, messages: Sequence[Message], cut: int, dropped: int) -> tuple[int, int]:
    """(calls made, valid) from the session's declarations and the run's messages; calls that
    never completed (cut, dropped) were made and are not valid."""
    head: list[Any] = []
    if session.exists() and session.stat().st_size > 0:
        for record in read_session_records(session):
            if record.run_start is not None and isinstance(record.run_start.get("tools"), list):
                head = record.run_start["tools"]
    made, valid = count_calls(messages, declared_schemas(head, messages))
    return made + cut + dropped, valid


async def _task_command(command: str, task: EvalTask, config: EvalConfig, attempt: Attempt, session: Path,
                        env: dict[str, str]) -> CommandResult:
    """``setup`` or ``check`` in a sandbox of the config's policy over the attempt's workspace, the
    copy of the task folder, the answer and the session (once written) visible read-only."""
    inputs = [p for p in (attempt.task_dir, attempt.answer, session) if p.exists()]
    box = config.sandbox_for(attempt.workspace, read=inputs)
    return await run_command(command, box, timeout=task.check_timeout, env=env)


async def run_attempt(task: EvalTask, number: int, engine: Engine, config: EvalConfig, session: Path,
                      out: Path) -> AttemptResult:
    """Run one attempt of ``task`` (see the module docstring) and return its result.

    Args:
        task: the task.
        number: the attempt's number (1-based).
        engine: the shared engine.
        config: how the agent is built.
        session: the session file to record (must not hold a session yet).
        out: the output directory (``session`` is recorded relative to it).

    Raises:
        The engine errors of :func:`fatal` (the eval stops); cancellation.
    """
    rel = str(session.relative_to(out)) if session.is_relative_to(out) else str(session)
    result = AttemptResult(task=task.name, attempt=number, passed=False, stop_reason="error", session=rel,
                           tags=list(task.tags))
    try:
        attempt = await prepare_attempt(task)
    except (EvalError, OSError) as e:  # a repo that cannot be cloned, a copy that failed: this task's
        result.stop_reason, result.error, result.session = "setup_failed", _one_line(e), None
        return result
    try:
        env = {"KIMIK3_EVAL_ANSWER": str(attempt.answer.resolve()), "KIMIK3_EVAL_SESSION": str(session.resolve()),
               "KIMIK3_EVAL_TASK_DIR": str(attempt.task_dir.resolve()), "KIMIK3_EVAL_STOP_REASON": ""}  # as mounted
        if task.setup is not None:
            try:
                setup = await _task_command(task.setup, task, config, attempt, session, env)
            except ToolError as e:  # the sandbox did not start
                result.stop_reason, result.error, result.session = "setup_failed", f"setup: {_one_line(e)}", None
                return result
            if not setup.ok:
                why = "timed out" if setup.timed_out else f"exited {setup.exit_code}"
                result.stop_reason, result.error = "setup_failed", f"setup {why}"
                result.check_output, result.session = setup.output, None
                return result
        client = TimedClient(engine)
        messages: list[Message] = []
        usage, costs, final = Usage(), [], None
        started = time.monotonic()
        try:  # the harness's run-end hook closes its sandbox, however the run ends
            agent = config.agent(attempt.workspace, client, task)
            with anyio.move_on_after(task.timeout) as scope:
                async for event in agent.run_stream(task.instruction, messages=messages, session=session):
                    if isinstance(event, TurnEndEvent):
                        result.turns += 1
                        usage = usage + event.usage
                        costs.append(event.cost)
                    elif isinstance(event, FinalEvent):
                        final = event.result
            if scope.cancelled_caught and final is None:
                result.stop_reason, result.error = "timeout", f"the run took more than {task.timeout:g} s"
        except KimiK3Error as e:
            if fatal(e):
                raise
            result.error = _one_line(e)
        result.seconds = round(time.monotonic() - started, 3)
        _fill(result, final, usage, costs, client, session, messages)
        if result.stop_reason in ("timeout", "error"):
            return result
        answer = final.output if final is not None and isinstance(final.output, str) else ""
        attempt.answer.write_text(answer, encoding="utf-8")
        env["KIMIK3_EVAL_STOP_REASON"] = result.stop_reason
        try:
            check = await _task_command(task.check, task, config, attempt, session, env)
        except ToolError as e:  # the sandbox did not start: no score
            result.stop_reason, result.error = "error", f"check: {_one_line(e)}"
            return result
        result.check_exit, result.check_timed_out, result.check_output = check.exit_code, check.timed_out, check.output
        result.passed = check.ok
        return result
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(attempt.remove)


def _fill(result: AttemptResult, final: RunResult[Any] | None, usage: Usage, costs: list[float | None],
          client: TimedClient, session: Path, messages: Sequence[Message]) -> None:
    """The run's numbers into ``result`` (from the final result, else from the turns seen)."""
    if final is not None:
        result.stop_reason = final.stop_reason
        usage, cost = final.usage, final.cost
        result.turns, result.degraded = final.turns, final.degraded
        result.failed_calls, result.cut_calls, result.dropped_calls = (final.failed_calls, final.cut_calls,
                                                                       final.dropped_calls)
    else:
        known = [c for c in costs if c is not None]
        cost = sum(known) if known else None
        result.degraded = True
    result.prompt_tokens, result.completion_tokens = usage.prompt_tokens, usage.completion_tokens
    result.cached_tokens = usage.cached_tokens if usage.prompt_tokens_details is not None else None
    result.cost = cost
    result.ttft_p50 = None if client.ttft_p50 is None else round(client.ttft_p50, 4)
    result.tool_calls, result.valid_tool_calls = _tool_counts(session, messages, result.cut_calls,
                                                              result.dropped_calls)


async def run_suite(
    suite: Suite,
    engine: Engine,
    out: ResultsDir,
    *,
    config: EvalConfig | None = None,
    tasks: Sequence[EvalTask] | None = None,
    repeat: int = 1,
    concurrency: int = 1,
    on_result: Callable[[AttemptResult, int, int], None] | None = None,
) -> list[AttemptResult]:
    """Run the attempts of ``tasks`` (default: all of the suite's) that ``out`` does not hold yet.

    Args:
        suite: the suite.
        engine: the engine every attempt shares (started by the caller).
        out: the opened output directory; each result is appended to it as it ends.
        config: how the agents are built.
        tasks: the tasks to run (:meth:`Suite.select`).
        repeat: attempts per task (1..repeat; those already in ``out`` are skipped).
        concurrency: attempts running at once.
        on_result: called with each new result, the number done so far (this run) and the
            number this run does in all.

    Returns:
        Every result in ``out`` now (earlier runs' included).

    Raises:
        The engine errors of :func:`fatal`, after the attempts that finished were written.
    """
    config = config or EvalConfig()
    done = {(r.task, r.attempt) for r in out.results}
    todo = [(t, n) for t in (tasks if tasks is not None else suite.tasks) for n in range(1, repeat + 1)
            if (t.name, n) not in done]
    limiter = anyio.CapacityLimiter(max(1, concurrency))
    finished = 0

    async def one(task: EvalTask, number: int) -> None:
        nonlocal finished
        async with limiter:
            session = out.session_path(task.name, number)
            result = await run_attempt(task, number, engine, config, session, out.path)
        out.append(result)
        finished += 1
        if on_result is not None:
            on_result(result, finished, len(todo))

    async with anyio.create_task_group() as group:
        for task, number in todo:
            group.start_soon(one, task, number)
    return list(out.results)


def run_meta(suite: Suite, engine: Engine, config: EvalConfig) -> dict[str, Any]:
    """What ``eval.json`` records of a run (JSON values): the suite and its digest, the model,
    the tools, settings, turn and USD caps, prices and sandbox policy (a continued run must match them),
    and the sandbox as the harness describes it (``sandbox``: the line of
    :meth:`~kimik3.tools.coding.Sandbox.describe`, e.g. ``sandbox: bwrap (workspace read-write,
    ...)``; ``sandbox_policy``: what runs, ``{"mode": "bwrap", "network": false, "read": [...],
    "write": [...]}`` or ``{"mode": "none"}``, ``"auto"`` resolved).

    Raises:
        SandboxUnavailableError: ``sandbox="bwrap"`` where bubblewrap cannot run.
        UserError: a ``sandbox_read`` / ``sandbox_write`` path that does not exist.
    """
    settings = asdict(AGENTIC_SETTINGS.merged(config.settings))  # what the agent's requests carry
    settings = json.loads(json.dumps(settings, default=repr))
    pricing = asdict(config.pricing) if isinstance(config.pricing, Pricing) else config.pricing
    box = config.sandbox_for(suite.path)  # described, never started
    policy = {k: v for k, v in box.info().items() if k not in ("requested", "reason")}
    return {"suite": suite.name, "suite_path": str(suite.path), "suite_digest": suite.digest, "model": engine.model,
            "tools": config.tools, "settings": settings, "max_turns": config.max_turns, "pricing": pricing,
            "max_usd": config.max_usd, "sandbox": box.describe(), "sandbox_policy": policy}


async def evaluate(
    suite: Suite,
    engine: Engine,
    out: str | os.PathLike[str],
    *,
    config: EvalConfig | None = None,
    tasks: Sequence[EvalTask] | None = None,
    repeat: int = 1,
    concurrency: int = 1,
    on_result: Callable[[AttemptResult, int, int], None] | None = None,
) -> dict[str, Any]:
    """Run a suite into the output directory ``out`` (continuing it when it exists) and write
    ``summary.json``, ``report.md`` and ``report.html`` there, also when the run is interrupted
    or stopped by an engine error (then over the attempts that finished). The engine's model
    is known first (:meth:`~kimik3.engines.Engine.model_name`: an endpoint's served model when
    none was given), so ``eval.json`` and the report name it.

    Args: as :func:`run_suite`; ``out`` is a directory path (made when missing).

    Returns:
        The summary (:func:`~kimik3.eval.summarize`).

    Raises:
        EvalError: ``out`` belongs to another suite or options, or is being written.
        The engine errors of :func:`fatal`.
    """
    config = config or EvalConfig()
    await engine.model_name()  # an endpoint's served model, so eval.json names it (not "")
    folder = ResultsDir(out, run_meta(suite, engine, config))
    try:
        try:
            await run_suite(suite, engine, folder, config=config, tasks=tasks, repeat=repeat, concurrency=concurrency,
                            on_result=on_result)
        except BaseExceptionGroup as group:  # the attempts' engine error: as itself
            raise _first(group) from None
        finally:
            summary = summarize(folder.results, folder.meta)
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(write_summary, summary, folder.path)
    finally:
        folder.close()
    return summary


def _first(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """What to raise for a task group's failures: a KeyboardInterrupt, else the first kimik3 error
    (several attempts hit the same dead engine at once), else :func:`unwrap_group`'s."""
    leaves: list[BaseException] = []
    pending: list[BaseException] = [group]
    while pending:
        exc = pending.pop(0)
        if isinstance(exc, BaseExceptionGroup):
            pending.extend(exc.exceptions)
        else:
            leaves.append(exc)
    for kind in (KeyboardInterrupt, KimiK3Error):
        for leaf in leaves:
            if isinstance(leaf, kind):
                return leaf
    return unwrap_group(group)


def write_summary(summary: dict[str, Any], folder: Path) -> None:
    """``summary.json`` (renamed into place), ``report.md`` and ``report.html`` in ``folder``."""
    path = folder / "summary.json"
    tmp = path.with_name("summary.json.tmp")
    tmp.write_text(json.dumps(summary, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    write_report(summary, folder)
