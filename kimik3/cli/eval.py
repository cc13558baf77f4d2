"""``kimik3 eval``: run a task suite, compare two runs, replay recorded requests (:mod:`kimik3.eval`).

::

    kimik3 eval evals/k3-tiny --out runs/a --model-path models/k3-tiny --temperature 0
    kimik3 eval SUITE --out DIR --base-url URL --concurrency 8 --repeat 3 --tasks 'grep-*'
    kimik3 eval compare runs/a runs/b --max-drop 0.05     # exit 1: B regressed
    kimik3 eval replay ~/.kimik3/sessions/ --base-url URL  # the Vendor Verifier on your traffic

Running prints which sandbox the attempts' commands run in (``--sandbox``, ``--network``,
``--allow-read``, ``--allow-write``, as ``kimik3 run``: setup, the agent's bash and the check
alike), one line per attempt as it ends (a progress bar on a terminal), then the summary;
``--out`` receives ``results.jsonl``, ``summary.json``, ``report.md``, ``report.html`` and the
sessions, and an existing ``--out`` is continued (only the missing attempts run).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import Progress

from .._exceptions import KimiK3Error
from .._pricing import format_usd
from .._text import counted, escaped, printable
from ..engines import Engine, RemoteCompletionsEngine, RemoteEngine
from ..tools import Plan, Tool, Toolset, plan_tool
from .engine import (
    FiniteFloat,
    check_prices,
    engine_from,
    engine_options,
    mcp_server,
    options_from,
    quiet,
    settings_from,
)
from .harness import harness_options
from .progress import PlainProgress
from .run import execute, start_embedded

__all__ = ["eval_group"]


class _EvalGroup(click.Group):
    """``kimik3 eval SUITE ...`` runs a suite; ``compare`` and ``replay`` are subcommands."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("-h", "--help"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


@click.group(cls=_EvalGroup, name="eval")
def eval_group() -> None:
    """Evaluate: `kimik3 eval SUITE --out DIR [engine options]` runs a task suite;
    `kimik3 eval compare A B` gates a regression; `kimik3 eval replay SESSIONS --base-url URL`
    scores an endpoint's tool calls on recorded requests."""


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def _otel(target: str) -> None:
    """``--otel``: export spans as ``kimik3 run`` does."""
    try:
        from .._tracing import configure_exporter

        configure_exporter(target)
    except ImportError as e:
        raise click.UsageError(f"--otel needs the OpenTelemetry SDK ({e}): pip install 'kimik3[otel-export]'") from None


def _one_line(text: str) -> str:
    """A line of eval's holding suite text (a task folder's name, a field): terminal sequences
    dropped, a newline escaped, so the suite cannot draw a line of eval's own (issue 40)."""
    return escaped(printable(text))


def _summary_lines(s: dict[str, Any], out: Path) -> list[str]:
    pass_k = ", ".join(f"pass@{k} {_pct(v)}" for k, v in s["pass_at_k"].items())
    cost = "n/a" if s["cost"] is None else format_usd(s["cost"])
    per_pass = "n/a" if s["cost_per_pass"] is None else format_usd(s["cost_per_pass"])
    return [
        f"pass rate: {_pct(s['pass_rate'])} ({s['passed']}/{counted(s['attempts'], 'attempt')}, "
        f"{counted(s['tasks'], 'task')}; {pass_k})",
        f"cost: {cost} (per pass {per_pass}); cached prompt tokens {_pct(s['cached_share'])}; "
        f"valid tool calls {_pct(s['tool_call_validity'])}; timeouts {s['timeouts']}; errors {s['errors']}",
        f"report: {out / 'report.md'} {out / 'report.html'}",
    ]


@eval_group.command(name="run")
@click.argument("suite", type=click.Path(exists=True, file_okay=False))
@click.option("--out", "out", required=True, type=click.Path(file_okay=False), metavar="DIR",
              help="Where results, sessions and the report go; an existing DIR is continued.")
@click.option("--concurrency", type=click.IntRange(min=1), default=1, show_default=True,
              help="Attempts running at once.")
@click.option("--repeat", type=click.IntRange(min=1), default=1, show_default=True,
              help="Attempts per task (pass@k up to K).")
@click.option("--tasks", "pattern", metavar="GLOB", help="Only tasks whose name matches GLOB (or with that tag).")
@engine_options
@harness_options
@click.pass_context
def run_command(ctx: click.Context, /, suite: str, out: str, concurrency: int, repeat: int, pattern: str | None,
                **params: Any) -> None:  # fmt: skip
    """Run every task of SUITE (a folder of task folders with task.toml) and score it.

    Each attempt's setup, bash commands and check run in the sandbox --sandbox picks (the
    first line printed says which)."""
    from ..eval import EvalConfig, EvalError, evaluate, load_suite

    o = options_from(params)
    try:
        loaded = load_suite(suite)
        tasks = loaded.select(pattern)
    except (EvalError, KimiK3Error) as e:
        raise click.UsageError(_one_line(str(e))) from None
    plain = PlainProgress()

    def extra() -> Sequence[Tool | Toolset]:
        tools: list[Tool | Toolset] = [mcp_server(spec) for spec in o.mcp]
        return [*tools, plan_tool(Plan())] if o.plan else tools

    config = EvalConfig(settings=o.settings, tools="full" if params.get("tool_set") == "full" else "core",
                        max_turns=o.max_turns, max_usd=o.max_usd, pricing=o.price if o.price is not None else "auto",
                        sandbox=params.get("sandbox") or "auto", network=bool(params.get("network")),
                        sandbox_read=tuple(params.get("allow_read") or ()),
                        sandbox_write=tuple(params.get("allow_write") or ()),
                        deny_read=tuple(params.get("deny_read") or ()), allow_env=tuple(params.get("allow_env") or ()),
                        deny_env=tuple(params.get("deny_env") or ()),
                        project_instructions=not params.get("no_agents_md"),
                        extra_tools=extra if o.mcp or o.plan else None)
    try:
        box = config.sandbox_for(loaded.path)  # described, not started
    except KimiK3Error as e:  # --sandbox bwrap where bubblewrap cannot run: the fix named
        plain.error(e)
        ctx.exit(1)
    quiet(o.verbose)
    engine = engine_from(o)
    config = replace(config, settings=settings_from(o, engine))  # a reply: a quarter of a known window
    plain.note(box.describe())  # the first line: which sandbox runs the commands
    if o.otel:
        _otel(o.otel)
    console = Console(highlight=False)
    bar = Progress(*Progress.get_default_columns(), console=console, transient=True) \
        if console.is_terminal and not o.plain else None
    job = bar.add_task("attempts", total=None) if bar is not None else None

    def line(r: Any, done: int, total: int) -> None:
        what = "passed" if r.passed else f"FAILED ({r.stop_reason}" + (f": {r.error}" if r.error else "") + ")"
        cost = f", {format_usd(r.cost)}" if r.cost is not None else ""
        text = _one_line(f"[{done}/{total}] {r.task} #{r.attempt} {what} · {counted(r.turns, 'turn')}, "
                         f"{r.seconds:.1f} s{cost}")
        if bar is not None and job is not None:
            bar.update(job, completed=done, total=total)
            bar.console.print(text, markup=False)
        else:
            click.echo(text)

    async def main() -> int:
        try:
            await start_embedded(engine, plain, o.verbose)
            await check_prices(o, engine)  # --max-usd without prices: refused before any attempt
            with bar if bar is not None else contextlib.nullcontext():
                summary = await evaluate(loaded, engine, out, config=config, tasks=tasks, repeat=repeat,
                                         concurrency=concurrency, on_result=line)
        finally:
            await engine.aclose()
        for text in _summary_lines(summary, Path(out)):
            click.echo(text)
        return 0

    ctx.exit(execute(main, plain))


@eval_group.command(name="compare")
@click.argument("a", type=click.Path(exists=True))
@click.argument("b", type=click.Path(exists=True))
@click.option("--max-drop", type=FiniteFloat(0, 1), default=0.0, show_default=True,
              help="The largest fall of B's pass rate below A's that still passes (0.05: five points).")
@click.pass_context
def compare_command(ctx: click.Context, a: str, b: str, max_drop: float) -> None:
    """Compare eval B with the baseline A (output directories): per-task changes, aggregate
    deltas and a confidence note. Exits 1 when B's pass rate fell below A's by more than --max-drop."""
    from ..eval import compare

    try:
        result = compare(a, b, max_drop=max_drop)
    except KimiK3Error as e:
        PlainProgress().error(e)
        ctx.exit(1)
    for text in result.lines():
        click.echo(_one_line(text))
    ctx.exit(1 if result.regressed else 0)


def _session_files(paths: Sequence[str]) -> list[Path]:
    files: list[Path] = []
    for p in map(Path, paths):
        files.extend(sorted(p.rglob("*.jsonl")) if p.is_dir() else [p])
    return files


@eval_group.command(name="replay")
@click.argument("sessions", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--base-url", required=True, envvar="KIMIK3_BASE_URL", metavar="URL",
              help="The endpoint to replay against [env KIMIK3_BASE_URL].")
@click.option("--api-key", envvar="KIMIK3_API_KEY", metavar="KEY", help="Its API key [env KIMIK3_API_KEY].")
@click.option("--model", envvar="KIMIK3_MODEL", metavar="NAME", help="The served model (default: the first listed).")
@click.option("--mode", type=click.Choice(["chat", "raw"]), default="chat", show_default=True,
              help="chat: the server renders and parses K3; raw: kimik3 does (needs --tokenizer).")
@click.option("--tokenizer", type=click.Path(exists=True, file_okay=False), metavar="DIR",
              help="The model directory's tokenizer (raw mode).")
@click.option("--concurrency", type=click.IntRange(min=1), default=4, show_default=True, help="Requests in flight.")
@click.option("--temperature", type=FiniteFloat(min=0), help="Override the recorded temperature.")
@click.option("--max-tokens", type=click.IntRange(min=1), help="Override the recorded max_tokens.")
@click.option("--out", type=click.Path(file_okay=False), metavar="DIR",
              help="Write replay.jsonl (one row per request) and replay-summary.json here.")
@click.option("--min-f1", type=FiniteFloat(0, 1), help="Exit 1 when tool_call_f1 is below this.")
@click.option("--min-schema-accuracy", type=FiniteFloat(0, 1), help="Exit 1 when schema_accuracy is below this.")
@click.option("--request-timeout", type=FiniteFloat(min=0, min_open=True, max=86400), default=600.0,
              show_default=True, metavar="SECONDS", help="Time limit of each request, sending to last byte.")
@click.pass_context
def replay_command(ctx: click.Context, sessions: tuple[str, ...], base_url: str, api_key: str | None,
                   model: str | None, mode: str, tokenizer: str | None, concurrency: int, temperature: float | None,
                   max_tokens: int | None, out: str | None, min_f1: float | None,
                   min_schema_accuracy: float | None, request_timeout: float) -> None:  # fmt: skip
    """Send the model requests recorded in SESSIONS (files, or folders searched for *.jsonl) to
    an endpoint again and score each answer's structure against the recorded one: tool call
    made or not, tool names, arguments valid against the declared schemas, finish reasons.
    Exits 1 when a request failed or a --min-* threshold is not met."""
    from .. import Client
    from ..eval import recorded_requests, replay, replay_summary

    if mode == "raw" and tokenizer is None:
        raise click.UsageError("--mode raw needs --tokenizer DIR (a K3 model directory)")
    plain = PlainProgress()
    try:
        requests = [r for f in _session_files(sessions) for r in recorded_requests(f)]
    except KimiK3Error as e:
        plain.error(e)
        ctx.exit(1)
    if not requests:
        raise click.UsageError("the sessions hold no recorded model request")
    engine: Engine = RemoteEngine(base_url=base_url, api_key=api_key, model=model, timeout=request_timeout)
    if mode == "raw":
        engine = RemoteCompletionsEngine(base_url=base_url, api_key=api_key, model=model, tokenizer=tokenizer,
                                         timeout=request_timeout).with_chat_for_images()

    def row(r: Any) -> None:  # recorded and server text escaped: a newline in it cannot draw a line of ours
        if r.error or r.skipped:
            click.echo(_one_line(f"{r.session}:{r.index}: {'error' if r.error else 'skipped'}: {r.error or r.skipped}"))
        elif (r.replayed_finish, sorted(r.replayed_tools)) != (r.recorded_finish, sorted(r.recorded_tools)) \
                or r.problems:
            click.echo(_one_line(f"{r.session}:{r.index}: recorded {r.recorded_finish} {r.recorded_tools} -> "
                                 f"{r.replayed_finish} {r.replayed_tools}" + "".join(f"; {p}" for p in r.problems)))

    async def main() -> int:
        async with engine:
            rows = await replay(requests, Client(engine), concurrency=concurrency, temperature=temperature,
                                max_tokens=max_tokens, on_row=row)
        s = replay_summary(rows)
        if out is not None:
            folder = Path(out)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "replay.jsonl").write_text("".join(json.dumps(r.to_json(), ensure_ascii=False) + "\n"
                                                         for r in rows), encoding="utf-8")
            (folder / "replay-summary.json").write_text(json.dumps(s, indent=2) + "\n", encoding="utf-8")
        click.echo(f"replayed {s['replayed']} of {counted(s['requests'], 'request')} ({counted(s['errors'], 'error')}, "
                   f"{s['skipped']} skipped)")
        click.echo(f"tool_call_f1: {_pct(s['tool_call_f1'])} (precision {_pct(s['tool_call_precision'])}, "
                   f"recall {_pct(s['tool_call_recall'])}; tp {s['tp']}, fp {s['fp']}, fn {s['fn']}, tn {s['tn']})")
        click.echo(f"schema_accuracy: {_pct(s['schema_accuracy'])} ({s['count_successful_tool_call']}/"
                   f"{s['count_finish_reason_tool_calls']}); tool names match {_pct(s['tool_names_match'])}; "
                   f"finish reason match {_pct(s['finish_reason_match'])}")
        failed = s["errors"] > 0
        for name, minimum in (("tool_call_f1", min_f1), ("schema_accuracy", min_schema_accuracy)):
            if minimum is not None and (s[name] is None or s[name] < minimum):
                click.echo(f"FAILED: {name} {_pct(s[name])} is below {minimum:.1%}")
                failed = True
        return 1 if failed else 0

    ctx.exit(execute(main, plain))
