"""The ``kimik3`` command: run the K3 coding agent, resume its sessions, chat, check a node.

::

    kimik3 run "fix the failing test" --workspace repo --base-url http://127.0.0.1:8000/v1
    kimik3 run "..." --model-path /models/kimi-k3 --preset auto             # embedded vLLM
    kimik3 run "..." --script replies.json                                  # scripted replies
    kimik3 resume ~/.kimik3/sessions/20260101-120000.jsonl "now add a test" --base-url ...
    kimik3 show SESSION                   # a session as a transcript, messages numbered
    kimik3 resume SESSION "try B" --at 7  # fork: continue from message 7 in a new session
    kimik3 chat --base-url ...            # a REPL; --workspace DIR gives it the coding tools
    kimik3 preflight                      # can this node serve K3? (--preset NAME: env, command)
    kimik3 replay runs/form [--html run.html]   # replay a recorded UI trajectory, or render it
    kimik3 serve models/k3-tiny --max-model-len 4096   # vLLM's OpenAI server with the kimi_k3 parsers

Progress goes to stdout. On a terminal it is live (rich): a status line (turn, tool calls,
tokens), reasoning dimmed, tool calls and results as they happen, the answer. Elsewhere (a pipe,
CI) it is plain, flushed lines whose format is kept stable::

    [turn 1] text: <content the model wrote beside its tool calls>
    [turn 1] tool read_file {"path": "notes.txt"}
    [turn 1] result read_file: <first non-blank line of the result, at most 100 chars>
    [turn 1] plan [>] <step>                 after an update_plan result (--plan), one per step
    [turn 2] answer: <the final answer>
    stopped: turn_budget (<why>)            only when the run did not complete
    usage: 2 turns, 1 tool calls, 1234 tokens
    session: /home/me/.kimik3/sessions/20260101-120000.jsonl

Tool arguments are one-line JSON (``json.dumps``), cut after 200 characters with ``...``; the
result preview collapses whitespace and is cut after 100 characters with ``...``. A ``text`` line
comes only when the model wrote text beside its calls; the answer may span several lines.

vLLM's, torch's and Python's logs and warnings are hidden unless ``--verbose`` (what vLLM prints
while it starts goes to ``${KIMIK3_HOME:-~/.kimik3}/logs/vllm.log``). A run that fails before
the model answered leaves no session file.

Exit codes: 0 the run ended (answered, or stopped by a budget: said so), 1 an error (a kimik3
error is printed on stderr as one line ``error: <Type>: <message>``; ``chat`` goes on and exits
1 at the end), 2 a usage error, 130 interrupted. This is the only module of kimik3 that knows
about terminals.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import sys
import time
import warnings
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar
from urllib.parse import urlsplit

import anyio
import click
from click.core import ParameterSource
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.spinner import Spinner
from rich.text import Text

from . import __version__
from ._cli_harness import harness_options, harness_parts, undo_command
from ._defaults import REASONING_EFFORTS
from ._exceptions import EngineError, KimiK3Error
from ._text import printable
from .agents import (
    CODING_INSTRUCTIONS,
    Agent,
    AgentEvent,
    Budgets,
    CompactionEvent,
    ContentDelta,
    FinalEvent,
    ModelSettings,
    ReasoningDelta,
    RunHooks,
    RunResult,
    ToolCallDone,
    ToolCallIncomplete,
    ToolCallStarted,
    ToolResultEvent,
    TurnEndEvent,
    fork_session,
    format_session,
    load_session,
)
from .engines import FEATURES, PRESETS, Engine, RemoteEngine, ScriptedEngine, VLLMEngine, preflight
from .engines._presets import DEPRECATED_PRESETS
from .tools import PLAN_TOOL_NAME, Plan, Tool, ToolResult, Toolset, plan_tool
from .tools.coding import coding_tools
from .types import AssistantMessage, Message, message_text

__all__ = ["build_agent", "build_engine", "engine_options", "main", "parse_engine_arg", "run_script", "start_engine"]

F = TypeVar("F", bound=Callable[..., Any])

PREVIEW_CHARS = 100
"""Result previews are the first non-blank line of a tool result, cut to this many characters."""
ARGUMENTS_CHARS = 200
"""Tool-call arguments are shown as one-line JSON, cut to this many characters."""

_PRESET_NAMES = [*PRESETS, "auto", "auto-nvfp4", *DEPRECATED_PRESETS]
_EMBEDDED_OPTIONS = ("preset", "tensor_parallel_size", "max_model_len", "enforce_eager",
                     "gpu_memory_utilization", "dtype", "trust_remote_code")
_STOP_REASONS = {
    "turn_budget": "the turn budget ran out, see --max-turns; the answer is the model's summary so far",
    "token_budget": "the token budget ran out; the answer is the model's summary so far",
    "time_budget": "the time budget ran out; the answer is the model's summary so far",
    "invalid_output": "the answer did not match the required output schema",
    "unusable_output": "twice in a row the model's output had neither an answer nor a call that could run",
    "no_progress": "the model's replies were cut by the token limit again and again, see --max-tokens",
}
MAX_ISSUES = 10
"""The summary of a degraded run lists at most this many of its issues."""


# -- options ---------------------------------------------------------------------------------


def parse_engine_arg(text: str) -> tuple[str, Any]:
    """Parse one ``--engine-arg KEY=VALUE`` into a vLLM engine-arg name and value.

    VALUE is read as JSON when it parses (``8`` -> 8, ``0.9`` -> 0.9, ``true`` -> True,
    ``null`` -> None, ``[1, 2]``, ``{"a": 1}``, ``"8"`` -> the string "8"), else it is the raw
    string (``fp8`` -> "fp8"). Dashes in KEY become underscores (``max-num-seqs`` ->
    ``max_num_seqs``), the spelling of ``vllm.AsyncEngineArgs`` fields.

    Raises:
        click.BadParameter: no ``=``, a KEY that is not an identifier, or a KEY that has its own
            option (``model``: ``--model-path``; ``preset``; ``k3_tokenizer``: ``--tokenizer``).
    """
    key, sep, value = text.partition("=")
    key = key.strip().replace("-", "_")
    if not sep or not key.isidentifier():
        raise click.BadParameter(f"expected KEY=VALUE, got {text!r}", param_hint="'--engine-arg'")
    own = {"model": "--model-path", "preset": "--preset", "k3_tokenizer": "--tokenizer"}
    if key in own:
        raise click.BadParameter(f"use {own[key]} instead of {key}=...", param_hint="'--engine-arg'")
    try:
        parsed: Any = json.loads(value)
    except json.JSONDecodeError:
        parsed = value
    return key, parsed


def _engine_arg_callback(ctx: click.Context, param: click.Parameter, values: Sequence[str]) -> list[tuple[str, Any]]:
    return [parse_engine_arg(v) for v in values]


@dataclass
class _Options:
    """The engine and model options every agent command shares."""

    base_url: str | None
    api_key: str | None
    model: str | None
    mode: str
    tokenizer: str | None
    model_path: str | None
    preset: str | None
    feature: tuple[str, ...]
    tensor_parallel_size: int | None
    max_model_len: int | None
    enforce_eager: bool | None
    gpu_memory_utilization: float | None
    dtype: str | None
    trust_remote_code: bool | None
    engine_arg: list[tuple[str, Any]]
    script: str | None
    reasoning_effort: str | None
    max_turns: int | None
    max_tokens: int | None
    temperature: float | None
    top_p: float | None
    seed: int | None
    plain: bool
    mcp: tuple[str, ...] = ()
    otel: str | None = None
    plan: bool = False
    verbose: bool = False


def _engine_options(f: F) -> F:
    options = [
        click.option("--base-url", envvar="KIMIK3_BASE_URL", metavar="URL",
                     help="An OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1 [env KIMIK3_BASE_URL]."),
        click.option("--api-key", envvar="KIMIK3_API_KEY", metavar="KEY",
                     help="The endpoint's API key [env KIMIK3_API_KEY, else OPENAI_API_KEY]."),
        click.option("--model", envvar="KIMIK3_MODEL", metavar="NAME",
                     help="The served model name (default: the endpoint's first model) [env KIMIK3_MODEL]."),
        click.option("--mode", type=click.Choice(["chat", "raw"]), default="chat", show_default=True,
                     help="chat: the server renders and parses K3; raw: kimik3 does (needs --tokenizer)."),
        click.option("--tokenizer", type=click.Path(exists=True, file_okay=False), metavar="DIR",
                     help="A K3 model directory with the tokenizer (raw mode; the embedded engine's "
                          "default is --model-path)."),
        click.option("--model-path", envvar="KIMIK3_MODEL_PATH", type=click.Path(exists=True), metavar="DIR",
                     help="Run K3 embedded with vLLM from this model directory [env KIMIK3_MODEL_PATH]."),
        click.option("--preset", type=click.Choice(_PRESET_NAMES),
                     help="A launch preset of vLLM's K3 recipe, or auto: chosen from this node's GPUs (embedded "
                          "engine; `kimik3 preflight --preset NAME` shows its env and command)."),
        click.option("--feature", type=click.Choice(sorted(FEATURES)), multiple=True,
                     help="An opt-in feature of the recipe on top of --preset (repeatable)."),
        click.option("--tensor-parallel-size", type=click.IntRange(min=1), help="vLLM tensor_parallel_size."),
        click.option("--max-model-len", type=click.IntRange(min=1), help="vLLM max_model_len (tokens)."),
        click.option("--enforce-eager/--no-enforce-eager", default=None, help="vLLM enforce_eager."),
        click.option("--gpu-memory-utilization", type=click.FloatRange(0, 1, min_open=True),
                     help="vLLM gpu_memory_utilization (0-1]."),
        click.option("--dtype", help="vLLM dtype (auto, bfloat16, float16, ...)."),
        click.option("--trust-remote-code", is_flag=True, default=None,
                     help="Let vLLM run the model directory's own tokenizer code (K3 checkpoints need it)."),
        click.option("--engine-arg", multiple=True, metavar="KEY=VALUE", callback=_engine_arg_callback,
                     help="Any other vLLM engine arg (repeatable); VALUE is JSON when it parses, else text. "
                          "Overrides the preset and the options above."),
        click.option("--script", type=click.Path(exists=True, dir_okay=False), metavar="FILE.json",
                     help="Replay a JSON list of raw K3 output texts (ScriptedEngine): tests, dry runs."),
        click.option("--reasoning-effort", type=click.Choice(list(REASONING_EFFORTS)),
                     help="K3's thinking effort (default max); none turns thinking off."),
        click.option("--max-turns", type=click.IntRange(min=1), help="Model calls that may use tools (default 50)."),
        click.option("--max-tokens", type=click.IntRange(min=1), help="Completion tokens per model call."),
        click.option("--temperature", type=click.FloatRange(min=0), help="Sampling temperature (default 1.0)."),
        click.option("--top-p", type=click.FloatRange(0, 1, min_open=True), help="Nucleus sampling (default 1.0)."),
        click.option("--seed", type=int, help="Sampling seed, where the engine supports one."),
        click.option("--plain", is_flag=True, help="Plain progress lines even on a terminal."),
        click.option("--mcp", multiple=True, metavar='"CMD ARGS" | URL', callback=_check_mcp,
                     help="Give the agent the tools of an MCP server (repeatable): a command line started "
                          "over stdio, or a Streamable HTTP URL."),
        click.option("--otel", metavar="console | URL", callback=_check_otel,
                     help="Export OpenTelemetry spans (run, model calls, tool calls) to the console (stderr) "
                          "or an OTLP/HTTP endpoint, e.g. http://127.0.0.1:4318."),
        click.option("--plan", is_flag=True,
                     help="Give the agent the update_plan tool; the live view shows its plan."),
        click.option("--verbose", "-v", is_flag=True,
                     help="Show vLLM's, torch's and Python's logs and warnings (hidden by default)."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _options(params: dict[str, Any]) -> _Options:
    fields = _Options.__dataclass_fields__
    return _Options(**{k: v for k, v in params.items() if k in fields})


def _engine_source(o: _Options) -> str:
    """Which engine the options ask for: "script", "model_path" or "base_url"."""
    ctx = click.get_current_context()
    given = [n for n in ("script", "model_path", "base_url") if getattr(o, n)]
    explicit = [n for n in given if ctx.get_parameter_source(n) == ParameterSource.COMMANDLINE]
    if len(explicit) > 1:
        names = " and ".join("--" + n.replace("_", "-") for n in explicit)
        raise click.UsageError(f"give one engine, not {names}")
    if explicit:
        return explicit[0]
    if given:
        return given[0]
    raise click.UsageError(
        "no engine: pass --base-url URL (an OpenAI-compatible endpoint), --model-path DIR (K3 embedded "
        "with vLLM) or --script FILE.json (scripted replies); or set KIMIK3_BASE_URL / KIMIK3_MODEL_PATH"
    )


def _load_script(path: str) -> list[str]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise click.BadParameter(f"cannot read {path}: {e}", param_hint="'--script'") from None
    if not isinstance(data, list) or not all(isinstance(x, str) for x in data):
        raise click.BadParameter(f"{path} must hold a JSON list of raw K3 output strings", param_hint="'--script'")
    return data


def _quiet(verbose: bool) -> None:
    """Hide vLLM's, torch's and transformers' start-up logs and Python warnings unless ``verbose``.

    Set in the environment too, so vLLM's engine-core process and multiprocessing's resource
    tracker (whose "leaked shared_memory" warning comes at exit) inherit it. Variables the user
    set are kept.
    """
    if verbose:
        return
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    warnings.simplefilter("ignore")
    # vLLM 0.32 warns (e.g. "Triton is installed, but doesn't include CPU backend") before it
    # configures its logging from VLLM_LOGGING_LEVEL; this covers this process.
    logging.getLogger("vllm").setLevel(logging.ERROR)


def _build_engine(o: _Options) -> Engine:
    """The engine the options describe (not started: vLLM starts on first use).

    Raises:
        click.UsageError: no engine, two engines, options of another engine, raw mode without a
            tokenizer, an unreadable script.
    """
    source = _engine_source(o)
    embedded = [n for n in _EMBEDDED_OPTIONS if getattr(o, n) is not None]
    if source == "base_url" and o.mode == "raw" and "max_model_len" in embedded:
        embedded.remove("max_model_len")  # raw mode's context window (default: the server's)
    if o.feature:
        embedded.append("feature")
    if o.engine_arg:
        embedded.append("engine_arg")
    if source != "model_path" and embedded:
        names = ", ".join("--" + n.replace("_", "-") for n in embedded)
        raise click.UsageError(f"{names} apply only to the embedded engine (--model-path)")
    if source == "script":
        assert o.script is not None
        return ScriptedEngine(_load_script(o.script))
    if source == "model_path":
        assert o.model_path is not None
        args: dict[str, Any] = {n: getattr(o, n) for n in _EMBEDDED_OPTIONS[1:] if getattr(o, n) is not None}
        args.update(dict(o.engine_arg))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", DeprecationWarning)  # an old --preset name says what it now means
            engine = VLLMEngine(o.model_path, preset=o.preset, features=o.feature, k3_tokenizer=o.tokenizer, **args)
        for w in caught:
            click.echo(f"warning: {w.message}", err=True)
        if engine.preset is not None and engine.preset.reason:
            click.echo(f"preset {o.preset}: {engine.preset.name} for {engine.preset.reason}", err=True)
        return engine
    if o.mode == "raw" and o.tokenizer is None:
        raise click.UsageError("--mode raw needs --tokenizer DIR (a K3 model directory)")
    mode: Literal["chat", "raw"] = "raw" if o.mode == "raw" else "chat"
    return RemoteEngine(base_url=o.base_url, api_key=o.api_key, model=o.model, mode=mode, tokenizer=o.tokenizer,
                        max_model_len=o.max_model_len if mode == "raw" else None)


def _settings(o: _Options) -> ModelSettings:
    kw: dict[str, Any] = {}
    for name in ("reasoning_effort", "max_tokens", "temperature", "top_p", "seed"):
        value = getattr(o, name)
        if value is not None:
            kw[name] = value
    return ModelSettings(**kw)


def _check_mcp(ctx: click.Context, param: click.Parameter, specs: tuple[str, ...]) -> tuple[str, ...]:
    """``--mcp`` values, checked before anything starts: an http(s) URL with a host, or a command
    line that splits (balanced quotes) into a non-empty command."""
    for spec in specs:
        if spec.startswith(("http://", "https://")):
            if not urlsplit(spec).hostname:
                raise click.BadParameter(f"{spec!r} has no host", param=param)
            continue
        try:
            argv = shlex.split(spec)
        except ValueError as e:  # unbalanced quotes, a trailing backslash
            raise click.BadParameter(f"cannot split {spec!r} into a command line: {e}", param=param) from None
        if not argv or not argv[0]:
            raise click.BadParameter("an empty command", param=param)
    return specs


def _check_otel(ctx: click.Context, param: click.Parameter, target: str | None) -> str | None:
    """``--otel``: ``console`` or an http(s) URL with a host, checked before the run."""
    if target is None or target == "console":
        return target
    parts = urlsplit(target)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise click.BadParameter(
            f"expected 'console' or an http(s) URL such as http://127.0.0.1:4318, got {target!r}", param=param
        )
    return target


def _mcp_server(spec: str) -> Toolset:
    """``--mcp``: a Streamable HTTP URL, or a command line started over stdio."""
    try:
        from .tools import mcp
    except ImportError as e:
        raise click.UsageError(f"--mcp needs the MCP SDK ({e}): pip install 'kimik3[mcp]'") from None
    if spec.startswith(("http://", "https://")):
        return mcp.MCPServerStreamableHTTP(spec)
    argv = shlex.split(spec)
    if not argv or not argv[0]:
        raise click.BadParameter("an empty command", param_hint="'--mcp'")
    return mcp.MCPServerStdio(argv[0], argv[1:])


def _agent(o: _Options, engine: Engine, tools: list[Tool], instructions: str | None,
           hooks: Sequence[RunHooks] = ()) -> Agent[str]:
    budgets = Budgets(turns=o.max_turns) if o.max_turns is not None else None
    if o.otel:
        try:
            from ._tracing import configure_exporter

            configure_exporter(o.otel)
        except ImportError as e:
            raise click.UsageError(f"--otel needs the OpenTelemetry SDK ({e}): "
                                   "pip install 'kimik3[otel-export]'") from None
    extra: list[Tool | Toolset] = [_mcp_server(spec) for spec in o.mcp]
    if o.plan:
        extra.append(plan_tool(Plan()))
    return Agent(instructions=instructions, tools=[*tools, *extra], engine=engine, settings=_settings(o),
                 budgets=budgets, hooks=hooks)


def _home() -> Path:
    """``${KIMIK3_HOME:-~/.kimik3}``."""
    return Path(os.environ.get("KIMIK3_HOME") or "~/.kimik3").expanduser()


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


# -- progress --------------------------------------------------------------------------------


def _preview(result: ToolResult) -> str:
    """The first non-blank line of a result, whitespace collapsed, cut to PREVIEW_CHARS."""
    for line in printable(result.text).splitlines():
        if line.strip():
            line = " ".join(line.split())
            return line if len(line) <= PREVIEW_CHARS else line[:PREVIEW_CHARS] + "..."
    if not isinstance(result.content, str) and result.content:
        return "[image]"
    return "(empty)"


def _arguments(arguments: dict[str, Any]) -> str:
    text = json.dumps(arguments, ensure_ascii=False)
    return text if len(text) <= ARGUMENTS_CHARS else text[:ARGUMENTS_CHARS] + "..."


def _degraded_lines(result: RunResult[Any]) -> list[str]:
    """``degraded: ...`` and the run's issues, for a run whose answer is not clean ([] when it is)."""
    if not result.issues:
        return []
    counts = [f"{n} {what} call{'' if n == 1 else 's'}" for n, what in
              ((result.cut_calls, "cut"), (result.dropped_calls, "dropped"), (result.failed_calls, "failed")) if n]
    issues = f"{len(result.issues)} issue{'' if len(result.issues) == 1 else 's'}"
    lines = [f"degraded: {', '.join([*counts, issues])}", *(f"  {i}" for i in result.issues[:MAX_ISSUES])]
    if len(result.issues) > MAX_ISSUES:
        lines.append(f"  ... and {len(result.issues) - MAX_ISSUES} more")
    return lines


def _one_line(e: BaseException) -> str:
    message = " ".join(str(e).split())
    return f"{type(e).__name__}: {message}" if message else type(e).__name__


class _Progress(Protocol):
    def start(self) -> None: ...
    def event(self, event: AgentEvent) -> None: ...
    def stop(self) -> None: ...
    def note(self, text: str) -> None: ...
    def summary(self, result: RunResult[Any] | None, session: Path | None) -> None: ...
    def error(self, e: BaseException) -> None: ...


class _PlainProgress:
    """Flushed plain lines (not a terminal): the stable format of the module docstring."""

    def __init__(self) -> None:
        self.turn = 1
        self.tool_calls = 0
        self._text = ""  # content of the current turn not yet shown

    def _echo(self, line: str) -> None:
        click.echo(printable(line))  # flushes; model text cannot send terminal escapes

    def start(self) -> None:
        self.turn = 1
        self._text = ""

    def event(self, event: AgentEvent) -> None:
        if isinstance(event, ContentDelta):
            self._text += event.delta
        elif isinstance(event, ToolCallDone):
            if self._text.strip():
                self._echo(f"[turn {self.turn}] text: {self._text.strip()}")
            self._text = ""
            self._echo(f"[turn {self.turn}] tool {event.name} {_arguments(event.arguments)}")
        elif isinstance(event, ToolCallIncomplete):
            self._echo(f"[turn {self.turn}] dropped an incomplete call to {event.name}")
        elif isinstance(event, ToolResultEvent):
            self.tool_calls += 1
            self._echo(f"[turn {self.turn}] result {event.name}: {_preview(event.result)}")
            if event.name == PLAN_TOOL_NAME and not event.result.is_error:
                for line in event.result.text.splitlines()[1:]:
                    self._echo(f"[turn {self.turn}] plan {line}")
        elif isinstance(event, TurnEndEvent):
            text = message_text(event.message.content).strip()
            if not event.message.tool_calls:
                self._echo(f"[turn {event.turn}] answer: {text or '(no text)'}")
            elif self._text.strip():
                self._echo(f"[turn {event.turn}] text: {self._text.strip()}")
            self._text = ""
            self.turn = event.turn + 1
        elif isinstance(event, CompactionEvent):
            what = event.stopped or event.failed or f"compacted {event.removed_messages} earlier messages"
            self._echo(f"[turn {self.turn}] {what}")

    def stop(self) -> None:
        pass

    def note(self, text: str) -> None:
        self._echo(text)

    def summary(self, result: RunResult[Any] | None, session: Path | None) -> None:
        if result is not None:
            if result.stop_reason != "completed":
                self._echo(f"stopped: {result.stop_reason} ({_STOP_REASONS.get(result.stop_reason, '')})")
            for line in _degraded_lines(result):
                self._echo(line)
            self._echo(f"usage: {result.turns} turns, {self.tool_calls} tool calls, "
                       f"{result.usage.total_tokens} tokens")
        if session is not None:
            self._echo(f"session: {session}")

    def error(self, e: BaseException) -> None:
        click.echo(f"error: {_one_line(e)}", err=True)


class _RichProgress:
    """Live progress on a terminal: a status line, dimmed reasoning, tool calls, the answer."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.turn = 1
        self.tool_calls = 0
        self.tokens = 0
        self.phase = "waiting for the model"
        self._started = time.monotonic()
        self._buf = ""
        self._style = ""
        self._kind: str | None = None
        self._spinner = Spinner("dots", style="cyan")
        self._live: Live | None = None
        self.plan = ""  # the last update_plan result, shown above the status line

    def __rich__(self) -> RenderableType:
        elapsed = time.monotonic() - self._started
        status = (f"turn {self.turn} · {self.tool_calls} tool calls · {self.tokens:,} tokens · "
                  f"{elapsed:.0f}s · {self.phase}")
        self._spinner.update(text=Text(status, style="dim"))
        parts: list[RenderableType] = [Text(self._buf, style=self._style)] if self._buf else []
        if self.plan:
            parts.append(Text(self.plan, style="cyan"))
        return Group(*parts, self._spinner) if parts else self._spinner

    def _print(self, renderable: RenderableType) -> None:
        self.console.print(renderable)

    def start(self) -> None:
        self.turn = 1
        self._started = time.monotonic()
        self.phase = "waiting for the model"
        self._live = Live(self, console=self.console, transient=True, refresh_per_second=8,
                          redirect_stdout=False, redirect_stderr=False)
        self._live.start()

    def stop(self) -> None:
        self._flush()
        if self._live is not None:
            self._live.stop()
            self._live = None

    def _flush(self) -> None:
        if self._buf:
            self._print(Text(self._buf, style=self._style))
        self._buf = ""

    def _stream(self, kind: str, delta: str) -> None:
        delta = printable(delta)  # model text cannot send terminal escapes
        if kind != self._kind:
            self._flush()
            if self._kind == "reasoning" and kind == "content":
                self._print(Text(""))
            self._kind = kind
            self._style = "dim" if kind == "reasoning" else ""
            self.phase = "thinking" if kind == "reasoning" else "answering"
        self._buf += delta
        *lines, self._buf = self._buf.split("\n")
        for line in lines:
            self._print(Text(line, style=self._style))
        width = max(20, self.console.width - 1)
        while len(self._buf) > width:  # commit long lines as they wrap
            cut = self._buf.rfind(" ", 0, width)
            cut = cut if cut > 0 else width
            self._print(Text(self._buf[:cut], style=self._style))
            self._buf = self._buf[cut:].lstrip(" ")

    def event(self, event: AgentEvent) -> None:
        if isinstance(event, ReasoningDelta):
            self._stream("reasoning", event.delta)
        elif isinstance(event, ContentDelta):
            self._stream("content", event.delta)
        elif isinstance(event, ToolCallStarted):
            self._flush()
            self._kind = None
            self.phase = f"calling {event.name}"
        elif isinstance(event, ToolCallDone):
            self._print(Text.assemble(("→ ", "cyan"), (printable(event.name), "bold cyan"), " ",
                                      (_arguments(event.arguments), "dim")))
            self.phase = "running tools"
        elif isinstance(event, ToolCallIncomplete):
            self._print(Text(f"dropped an incomplete call to {printable(event.name)}", style="yellow"))
        elif isinstance(event, ToolResultEvent):
            self.tool_calls += 1
            mark, style = ("✗", "red") if event.result.is_error else ("✓", "green")
            self._print(Text.assemble(("  " + mark + " ", style), (printable(event.name), "bold"), ": ",
                                      (_preview(event.result), "dim")))
            if event.name == PLAN_TOOL_NAME and not event.result.is_error:
                self.plan = printable(event.result.text)
        elif isinstance(event, TurnEndEvent):
            self._flush()
            self._kind = None
            self.tokens += event.usage.total_tokens
            self.turn = event.turn + 1
            self.phase = "waiting for the model"
        elif isinstance(event, FinalEvent):
            self.turn = event.result.turns
            self.phase = "done"
        elif isinstance(event, CompactionEvent):
            text = event.stopped or event.failed or f"compacted {event.removed_messages} earlier messages"
            self._print(Text(text, style="dim yellow"))

    def note(self, text: str) -> None:
        self._print(Text(text, style="dim"))

    def summary(self, result: RunResult[Any] | None, session: Path | None) -> None:
        if result is not None:
            if result.stop_reason != "completed":
                why = _STOP_REASONS.get(result.stop_reason, "")
                self._print(Text(f"stopped: {result.stop_reason} ({why})", style="bold yellow"))
            for line in _degraded_lines(result):
                self._print(Text(line, style="yellow"))
            self._print(Text(f"{result.turns} turns · {self.tool_calls} tool calls · "
                             f"{result.usage.total_tokens:,} tokens", style="dim"))
        if session is not None:
            self._print(Text(f"session: {session}", style="dim"))

    def error(self, e: BaseException) -> None:
        Console(stderr=True).print(Text(f"error: {_one_line(e)}", style="bold red"))


def _progress(plain: bool) -> _Progress:
    console = Console(highlight=False)
    if console.is_terminal and not plain:
        return _RichProgress(console)
    return _PlainProgress()


# -- running ---------------------------------------------------------------------------------


def _typed_error(e: BaseException) -> BaseException | None:
    """The kimik3 (or OS) error behind ``e``, unwrapping exception groups; None for others."""
    if isinstance(e, (KimiK3Error, OSError)):
        return e
    inner = getattr(e, "exceptions", None)
    if isinstance(inner, tuple):
        for sub in inner:
            found = _typed_error(sub)
            if found is not None:
                return found
    return None


async def _drive(agent: Agent[str], task: str | None, messages: list[Message], session: Path,
                 progress: _Progress) -> RunResult[Any]:
    """One run, its events shown by ``progress``."""
    result: RunResult[Any] | None = None
    progress.start()
    try:
        async for event in agent.run_stream(task, messages=messages, session=session):
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
    later, from the processes started then: the engine core, its workers, multiprocessing's
    resource tracker) goes to ``${KIMIK3_HOME:-~/.kimik3}/logs/vllm.log`` instead: vLLM 0.32
    prints warnings before its logging is configured, where ``VLLM_LOGGING_LEVEL`` cannot reach.
    """
    if not isinstance(engine, VLLMEngine):
        return
    log = None if verbose else _home() / "logs" / "vllm.log"
    progress.note(f"starting vLLM with {engine.engine_args['model']} ...")
    try:
        with _output_to(log):
            await engine.start()
    except KimiK3Error:
        raise
    except Exception as e:  # vLLM raises anything from ValueError to RuntimeError here
        where = f" (vLLM's log: {log})" if log is not None else ""
        raise EngineError(f"vLLM did not start: {e}{where}") from e


@contextlib.contextmanager
def _output_to(path: Path | None) -> Iterator[None]:
    """File descriptors 1 and 2 (this process's and its new children's) go to ``path`` (appended)."""
    if path is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = (os.dup(1), os.dup(2))
    with open(path, "ab") as f:
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, copy in zip((1, 2), saved, strict=True):
            os.dup2(copy, fd)
            os.close(copy)


def _run_agent(o: _Options, workspace: str, task: str | None, history: list[Message], session: Path) -> int:
    _quiet(o.verbose)
    engine = _build_engine(o)
    progress = _progress(o.plain)
    agent = _agent(o, engine, *harness_parts(engine, workspace, _settings(o), progress.note))

    existed = session.exists()

    async def main() -> int:
        result: RunResult[Any] | None = None
        try:
            await _start(engine, progress, o.verbose)
            result = await _drive(agent, task, history, session, progress)
        finally:
            if result is None and not existed:
                _drop_unanswered(session)
            progress.summary(result, session if session.exists() else None)
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


def build_agent(options: Mapping[str, Any], engine: Engine, tools: list[Tool], instructions: str | None) -> Agent[str]:
    """The agent ``kimik3 run`` builds: ``engine`` with the options' sampling settings
    (``--temperature``, ``--max-tokens``, ...) and turn budget (``--max-turns``)."""
    return _agent(_options(dict(options)), engine, tools, instructions)


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


def _drop_unanswered(session: Path) -> None:
    """Remove a session file this run created when the model never answered in it (the run
    failed before: no engine, a dead endpoint), so failed starts leave no sessions behind."""
    try:
        if not any(isinstance(m, AssistantMessage) for m in load_session(session)):
            session.unlink()
    except (KimiK3Error, OSError):
        pass  # unreadable or already gone: leave it as it is


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
        raise click.UsageError(f"{session} already holds a session; continue it with: kimik3 resume {session}")
    path = Path(session) if session is not None else _new_session_path()
    ctx.exit(_run_agent(o, workspace, task, [], path))


@main.command()
@click.argument("session", type=click.Path(exists=True, dir_okay=False))
@click.argument("task", required=False)
@click.option("--workspace", "-w", type=click.Path(exists=True, file_okay=False), default=".", show_default=True,
              help="The directory the coding tools work in.")
@click.option("--at", "at", type=int, metavar="N",
              help="Fork: continue from message N (as `kimik3 show` numbers them) in a new session; "
                   "SESSION is left untouched.")
@_engine_options
@harness_options
@click.pass_context
def resume(ctx: click.Context, /, session: str, task: str | None, workspace: str, at: int | None,
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
            forked = fork_session(session, at, _new_session_path())
            click.echo(f"forked {session} at message {at} into {forked}", err=True)
            session = str(forked)
        history = load_session(session)
    except KimiK3Error as e:
        progress.error(e)
        ctx.exit(1)
    last = history[-1] if history else None
    if task is None and isinstance(last, AssistantMessage) and not last.tool_calls:
        raise click.UsageError("the session ends with the agent's answer; give a TASK to continue it")
    ctx.exit(_run_agent(o, workspace, task, history, Path(session)))


@main.command()
@click.option("--workspace", "-w", type=click.Path(exists=True, file_okay=False),
              help="Give the model the coding tools in this directory (default: no tools).")
@click.option("--session", type=click.Path(dir_okay=False), metavar="FILE",
              help="The JSONL session file (an existing one is continued; default: a new one under "
                   "${KIMIK3_HOME:-~/.kimik3}/sessions/).")
@_engine_options
@click.pass_context
def chat(ctx: click.Context, /, workspace: str | None, session: str | None, **params: Any) -> None:
    """Chat with K3 (a REPL keeping the history; /exit or end of input quits).

    Exits 1 when a turn failed (the error is printed and the chat goes on).
    """
    o = _options(params)
    _quiet(o.verbose)
    engine = _build_engine(o)
    tools = coding_tools(workspace) if workspace is not None else []
    agent = _agent(o, engine, tools, CODING_INSTRUCTIONS if workspace is not None else None)
    path = Path(session) if session is not None else _new_session_path()
    progress = _progress(o.plain)
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
                try:
                    answer = await _drive(agent, line, history, path, progress)
                    if answer.stop_reason != "completed":
                        progress.note(f"stopped: {answer.stop_reason} ({_STOP_REASONS.get(answer.stop_reason, '')})")
                    for issue in _degraded_lines(answer):  # a degraded answer never passes for a clean one
                        progress.note(issue)
                except Exception as e:
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
    reasoning folded, tool calls and results. Continue from message N with
    `kimik3 resume SESSION --at N`."""
    try:
        text = format_session(session, reasoning=reasoning, max_lines=None if full else 12)
    except KimiK3Error as e:
        _progress(True).error(e)
        ctx.exit(1)
    click.echo(text, nl=False)


@main.command(name="replay")
@click.argument("trajectory", type=click.Path(exists=True), metavar="FILE")
@click.option("--html", "html_out", type=click.Path(dir_okay=False), metavar="OUT",
              help="Write the recorded run as one HTML page (then nothing is replayed).")
@click.option("--gif", "gif_out", type=click.Path(dir_okay=False), metavar="OUT",
              help="Write the recorded run as an animated GIF (then nothing is replayed).")
@click.option("--url", help="Browser trajectories: open this page instead of the recorded one.")
@click.option("--display", help="X11 trajectories: use this X display instead of the recorded one.")
@click.option("--tolerance", type=click.FloatRange(0, 1), default=0.02, show_default=True,
              help="Largest fraction of differing pixels in a step's target region that still matches.")
@click.option("--timeout", type=click.FloatRange(min=0), default=10.0, show_default=True,
              help="Seconds to wait for the screen to match before each step.")
@click.pass_context
def replay_command(ctx: click.Context, trajectory: str, html_out: str | None, gif_out: str | None, url: str | None,
                   display: str | None, tolerance: float, timeout: float) -> None:  # fmt: skip
    """Replay a recorded UI trajectory (kimik3.tools.ui.TrajectoryRecorder) without a model.

    FILE is the trajectory directory or its trajectory.jsonl. The screen is opened as recorded
    (a headless Chromium page, or the X display) and each step runs once the screen matches the
    recorded screenshot; exits 1 naming the first step that does not. With --html / --gif the
    recorded run is rendered instead.
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
@click.option("--base-url", required=True, envvar="OPENAI_BASE_URL", metavar="URL",
              help="The endpoint's OpenAI base URL, e.g. http://127.0.0.1:8000/v1 (default $OPENAI_BASE_URL).")
@click.option("--model", metavar="NAME", help="Served model name (default: the first one /models lists).")
@click.option("--api-key", envvar="OPENAI_API_KEY", metavar="KEY", help="API key (default $OPENAI_API_KEY).")
@click.option("--quick", is_flag=True, help="Wire-level checks only (no check that needs a capable model).")
@click.option("--tokenizer", "tokenizer_dir", type=click.Path(exists=True, file_okay=False), metavar="DIR",
              help="The served model's tokenizer directory when it is not K3's vocabulary (e.g. models/k3-tiny).")
@click.option("--no-images", is_flag=True, help="Do not send the image requests.")
@click.option("--max-tokens", type=click.IntRange(min=1), default=1024, show_default=True,
              help="Completion budget of each generation the model checks read.")
@click.option("--concurrency", type=click.IntRange(min=1), default=8, show_default=True, help="Requests in flight.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True, max=86400), default=60.0, show_default=True,
              metavar="SECONDS", help="Total time per request, connect to last byte.")
@click.pass_context
def verify_command(ctx: click.Context, base_url: str, model: str | None, api_key: str | None, quick: bool,
                   tokenizer_dir: str | None, no_images: bool, max_tokens: int, concurrency: int,
                   timeout: float) -> None:  # fmt: skip
    """Check a K3 endpoint against Moonshot's contract: exact prompt_tokens, reasoning round-trip,
    rejected requests, raw mode, and (without --quick) tool calls, JSON output and the walle schemas.

    Prints one row per check with its evidence. Exits 0 when no row failed, 1 otherwise.
    """
    from ._verify import CheckResult, verify
    from .formats.k3 import K3Tokenizer

    click.echo(f"kimik3 verify {base_url}{' --quick' if quick else ''} (timeout {timeout:g} s per request)")

    def row(r: CheckResult) -> None:  # each row as it is decided
        mark = r.status.upper() if r.status == "fail" else r.status
        click.echo(f"{r.check + (' *' if r.needs_model else ''):<50}{mark:<8}{r.evidence}")

    try:
        tokenizer = K3Tokenizer.from_pretrained(tokenizer_dir) if tokenizer_dir else None
        report = verify(base_url, model=model, api_key=api_key, quick=quick, tokenizer=tokenizer,
                        images=not no_images, max_tokens=max_tokens, concurrency=concurrency, timeout=timeout,
                        progress=row)  # fmt: skip
    except KimiK3Error as e:
        click.echo(f"kimik3 verify: {type(e).__name__}: {' '.join(str(e).split())}", err=True)
        ctx.exit(1)
    fails = len(report.failures())
    click.echo(f"(* needs a capable model; model {report.model})")
    click.echo("verify: " + ("OK" if report.ok else f"FAILED ({fails} row{'s' if fails != 1 else ''})"))
    ctx.exit(0 if report.ok else 1)


main.add_command(undo_command)


@main.command(context_settings={"ignore_unknown_options": True})
@click.argument("model_dir", type=click.Path(exists=True))
@click.argument("vllm_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--host", default="127.0.0.1", show_default=True, help="The address to listen on.")
@click.option("--port", type=click.IntRange(1, 65535), default=8000, show_default=True, help="The port.")
@click.option("--dry-run", is_flag=True, help="Print the command instead of running it.")
def serve(model_dir: str, vllm_args: tuple[str, ...], host: str, port: int, dry_run: bool) -> None:
    """Serve a K3 model directory with vLLM's OpenAI-compatible server, ready for kimik3.

    Runs ``python -m vllm.entrypoints.openai.api_server`` with vLLM's kimi_k3 tokenizer mode,
    tool-call and reasoning parsers (chat mode) and, on a CPU, --enforce-eager and a KV-cache
    size kimik3 picks (as VLLMEngine does). Any other vLLM server flag goes after MODEL_DIR,
    e.g. ``kimik3 serve models/k3-tiny --max-model-len 4096``. Then: ``kimik3 run TASK
    --base-url http://HOST:PORT/v1`` (chat mode) or ``--mode raw --tokenizer MODEL_DIR``.
    """
    from .engines._vllm import server_command

    try:
        cmd = server_command(model_dir, *vllm_args, host=host, port=port)
    except KimiK3Error as e:
        click.echo(f"error: {_one_line(e)}", err=True)
        sys.exit(1)
    click.echo(" ".join(cmd), err=not dry_run)
    if dry_run:
        return
    sys.stdout.flush()
    os.execv(cmd[0], cmd)  # the server replaces this process: its signals and exit code are vLLM's
