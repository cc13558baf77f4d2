"""The `kimik3` command's engine options: the click options shared by run / resume / chat, and
building the engine, model settings, MCP servers and the agent from them."""

from __future__ import annotations

import json
import logging
import math
import os
import re
import shlex
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import click
from click.core import ParameterSource

from .._defaults import MAX_REPLY_TOKENS, REASONING_EFFORTS
from .._exceptions import KimiK3Error, UserError
from .._pricing import Pricing, missing_prices, pricing_for
from .._text import printable
from ..agents import (
    Agent,
    Budgets,
    ModelSettings,
    RunHooks,
)
from ..engines import (
    DEPRECATED_PRESETS,
    FEATURES,
    PRESETS,
    ChatForImages,
    Engine,
    RemoteCompletionsEngine,
    RemoteEngine,
    ScriptedEngine,
    VLLMEngine,
)
from ..tools import Plan, Tool, Toolset, plan_tool

F = TypeVar("F", bound=Callable[..., Any])


PRESET_NAMES = [*PRESETS, "auto", "auto-nvfp4", *DEPRECATED_PRESETS]


_EMBEDDED_OPTIONS = ("preset", "tensor_parallel_size", "max_model_len", "enforce_eager",
                     "gpu_memory_utilization", "dtype", "trust_remote_code")


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
class Options:
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
    max_turns: int | None
    plain: bool
    max_usd: float | None = None
    price: Pricing | None = None
    mcp: tuple[str, ...] = ()
    mcp_timeout: float | None = None
    request_timeout: float | None = None
    otel: str | None = None
    plan: bool = False
    verbose: bool = False
    settings: ModelSettings = field(default_factory=ModelSettings)
    """--reasoning-effort, --temperature, --top-p, --max-tokens, --seed (the agent level)."""


class FiniteFloat(click.FloatRange):
    """:class:`click.FloatRange` that also refuses ``nan``, ``inf`` and ``-inf`` (click lets them
    through: NaN compares false with every bound): a usage error (exit 2), as for a number out of
    range. Every float option of the CLI is one."""

    name = "finite float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


def _price(ctx: click.Context, param: click.Parameter, value: str | None) -> Pricing | None:
    """``--price IN,CACHED,OUT[,WRITE[,WRITE_1H]]``: a :class:`~kimik3.Pricing` (USD per 1M
    tokens; WRITE and WRITE_1H: prompt-cache writes of 5 minutes and 1 hour)."""
    if value is None:
        return None
    try:
        numbers = [float(x) for x in value.split(",")]
        if not 3 <= len(numbers) <= 5:
            raise ValueError
        writes = dict(zip(("cache_write", "cache_write_1h"), numbers[3:], strict=False))
        return Pricing(input=numbers[0], cached_input=numbers[1], output=numbers[2], **writes)
    except (ValueError, KimiK3Error):
        raise click.BadParameter(f"expected INPUT,CACHED,OUTPUT[,CACHE_WRITE[,CACHE_WRITE_1H]] in USD per 1M tokens "
                                 f"(e.g. 3,0.3,15 or 2,0.2,10,2,4), got {value!r}", param=param) from None


async def check_prices(o: Options, engine: Engine) -> None:
    """Refuse ``--max-usd`` before any model call when the model has no known price and no
    ``--price`` gives one (docs/cost.md: the cap needs prices).

    Raises:
        UserError: the refusal, naming the model and ``--price``.
    """
    if o.max_usd is None or o.price is not None:
        return
    model = engine.model or await engine.model_name()
    if pricing_for(model) is None:
        raise UserError(f"--max-usd needs prices: {missing_prices(model)}; give them with --price IN,CACHED,OUT "
                        "(USD per 1M tokens, e.g. --price 2,0.2,10)")


def engine_options(f: F) -> F:
    """The engine and model options of ``kimik3 run`` (``--base-url``, ``--model-path``, ``--script``,
    ``--trust-remote-code``, ``--max-model-len``, ``--temperature``, ...) as a click decorator
    (public as :func:`kimik3.cli.engine_options`, for scripts: examples/coding_agent.py)."""
    options = [
        click.option("--base-url", envvar="KIMIK3_BASE_URL", metavar="URL",
                     help="An OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1 [env KIMIK3_BASE_URL]."),
        click.option("--api-key", envvar="KIMIK3_API_KEY", metavar="KEY",
                     help="The endpoint's API key [env KIMIK3_API_KEY, else MOONSHOT_API_KEY for Moonshot's API, "
                          "else OPENAI_API_KEY]."),
        click.option("--model", envvar="KIMIK3_MODEL", metavar="NAME",
                     help="The served model name (default: the endpoint's first model) [env KIMIK3_MODEL]."),
        click.option("--mode", type=click.Choice(["chat", "raw"]), default="chat", show_default=True,
                     help="chat: the server renders and parses K3; raw: kimik3 does (needs --tokenizer)."),
        click.option("--tokenizer", type=click.Path(exists=True, file_okay=False), metavar="DIR",
                     help="A K3 model directory with the tokenizer (raw mode; the embedded engine's "
                          "default is --model-path)."),
        click.option("--model-path", envvar="KIMIK3_MODEL_PATH", type=click.Path(exists=True), metavar="DIR",
                     help="Run K3 embedded with vLLM from this model directory [env KIMIK3_MODEL_PATH]."),
        click.option("--preset", type=click.Choice(PRESET_NAMES),
                     help="A launch preset of vLLM's K3 recipe, or auto: chosen from this node's GPUs (embedded "
                          "engine; `kimik3 preflight --preset NAME` shows its env and command)."),
        click.option("--feature", type=click.Choice(sorted(FEATURES)), multiple=True,
                     help="An opt-in feature of the recipe on top of --preset (repeatable)."),
        click.option("--tensor-parallel-size", type=click.IntRange(min=1), help="vLLM tensor_parallel_size."),
        click.option("--max-model-len", type=click.IntRange(min=1), help="vLLM max_model_len (tokens)."),
        click.option("--enforce-eager/--no-enforce-eager", default=None, help="vLLM enforce_eager."),
        click.option("--gpu-memory-utilization", type=FiniteFloat(0, 1, min_open=True),
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
        click.option("--max-usd", type=FiniteFloat(min=0, min_open=True), metavar="USD",
                     help="End the run gracefully (a summary turn) once its model calls, sub-agents' included, "
                          "cost this much (needs prices: Moonshot's hosted model ids, or --price)."),
        click.option("--price", callback=_price, metavar="IN,CACHED,OUT",
                     help="USD per 1M input, cached input and output tokens, then optionally cache writes of 5 "
                          "minutes and 1 hour (IN,CACHED,OUT,WRITE,WRITE_1H; default: Moonshot's hosted prices "
                          "by model id; none for self-hosted models)."),
        click.option("--max-tokens", type=click.IntRange(min=1), help="Completion tokens per model call."),
        click.option("--temperature", type=FiniteFloat(min=0), help="Sampling temperature (default 1.0)."),
        click.option("--top-p", type=FiniteFloat(0, 1, min_open=True), help="Nucleus sampling (default 1.0)."),
        click.option("--seed", type=int, help="Sampling seed, where the engine supports one."),
        click.option("--prompt-cache-lifetime", type=click.Choice(["5m", "1h"]),
                     help="How long Moonshot's API keeps the prompt in its cache (K3.1 bills writes: $2/M for 5m, "
                          "$4/M for 1h); other engines refuse it."),
        click.option("--plain", is_flag=True, help="Plain progress lines even on a terminal."),
        click.option("--mcp", multiple=True, metavar='[PREFIX=]"CMD ARGS" | URL', callback=_check_mcp,
                     help="Give the agent the tools of an MCP server (repeatable): a command line started "
                          "over stdio, or a Streamable HTTP URL; PREFIX= names its tools PREFIX_<name> (two "
                          "servers, or a server and a built-in tool, with one tool name are refused)."),
        click.option("--mcp-timeout", type=FiniteFloat(min=0, min_open=True, max=86400), metavar="SECONDS",
                     help="Time limit of each MCP request: opening a server, a tool listing, a tool call "
                          "(default 60)."),
        click.option("--request-timeout", type=FiniteFloat(min=0, min_open=True, max=86400), metavar="SECONDS",
                     help="Time limit of each model request to --base-url, sending to last byte (default 600); "
                          "a hung server then ends the run with an APITimeoutError (a retry is a new request)."),
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


def options_from(params: dict[str, Any]) -> Options:
    """The command's options; the ModelSettings fields among them become :attr:`Options.settings`."""
    names = {f.name for f in fields(ModelSettings)}
    settings = ModelSettings.of(**{k: v for k, v in params.items() if k in names})
    known = {f.name for f in fields(Options)} - {"settings"}
    return Options(**{k: v for k, v in params.items() if k in known}, settings=settings)


def _engine_source(o: Options) -> str:
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


def quiet(verbose: bool) -> None:
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


def engine_from(o: Options) -> Engine:
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
    if source != "base_url" and o.request_timeout is not None:
        raise click.UsageError("--request-timeout applies only to an endpoint (--base-url)")
    timeout = 600.0 if o.request_timeout is None else o.request_timeout  # the engines' own default
    if source == "script":
        assert o.script is not None
        return ScriptedEngine(_load_script(o.script))
    if source == "model_path":
        assert o.model_path is not None
        args: dict[str, Any] = {n: getattr(o, n) for n in _EMBEDDED_OPTIONS[1:] if getattr(o, n) is not None}
        args.update(dict(o.engine_arg))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", DeprecationWarning)  # an old --preset name says what it now means
            engine = VLLMEngine(o.model_path, preset=o.preset, features=o.feature, k3_tokenizer=o.tokenizer,
                                verbose=o.verbose, **args)
        for w in caught:
            click.echo(f"warning: {w.message}", err=True)
        if engine.preset is not None and engine.preset.reason:
            click.echo(f"preset {o.preset}: {engine.preset.name} for {engine.preset.reason}", err=True)
        return engine
    if o.mode != "raw":
        return RemoteEngine(base_url=o.base_url, api_key=o.api_key, model=o.model, timeout=timeout)
    if o.tokenizer is None:
        raise click.UsageError("--mode raw needs --tokenizer DIR (a K3 model directory)")
    raw = RemoteCompletionsEngine(base_url=o.base_url, api_key=o.api_key, model=o.model, tokenizer=o.tokenizer,
                                  max_model_len=o.max_model_len, timeout=timeout)
    return raw.with_chat_for_images()  # completions take no images: those go through chat completions


def _window(engine: Engine | None) -> int | None:
    """The engine's context window when the options gave it (``--max-model-len``, a preset's, an
    ``--engine-arg``), else None (the model's or the server's own: unknown here)."""
    if isinstance(engine, ChatForImages):
        engine = engine.engine
    if isinstance(engine, VLLMEngine):
        window = engine.engine_args.get("max_model_len")
        return window if isinstance(window, int) else None
    if isinstance(engine, RemoteCompletionsEngine):
        return engine.max_model_len
    return None


def settings_from(o: Options, engine: Engine | None) -> ModelSettings:
    """The options' model settings (:attr:`Options.settings`); without ``--max-tokens``, a reply
    gets at most a quarter of a known context window (:data:`~kimik3._defaults.MAX_REPLY_TOKENS`
    at most), so a reply that would run to the window is cut and reported (``no_progress``), not
    an error."""
    window = _window(engine)
    if o.settings.max_tokens is not None or window is None:
        return o.settings
    return ModelSettings(max_tokens=max(1, min(MAX_REPLY_TOKENS, window // 4))).merged(o.settings)


_MCP_PREFIX = re.compile(r"([A-Za-z][A-Za-z0-9_-]{0,31})=(?=\S)")


def _mcp_spec(spec: str) -> tuple[str | None, str]:
    """``--mcp [PREFIX=]CMD|URL``: the tool prefix (None without one) and the server's spec."""
    match = _MCP_PREFIX.match(spec)
    return (match.group(1), spec[match.end():]) if match else (None, spec)


def _check_mcp(ctx: click.Context, param: click.Parameter, specs: tuple[str, ...]) -> tuple[str, ...]:
    """``--mcp`` values, checked before anything starts: an http(s) URL with a host, or a command
    line that splits (balanced quotes) into a non-empty command, each after an optional
    ``PREFIX=`` (the server's tool prefix); two servers with one prefix are refused."""
    prefixes = [p for p, _ in map(_mcp_spec, specs) if p is not None]
    if len(set(prefixes)) != len(prefixes):
        raise click.BadParameter(f"two servers have one prefix: {', '.join(sorted(prefixes))}", param=param)
    for spec in (s for _, s in map(_mcp_spec, specs)):
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


def _terminal_input(request: Any) -> dict[str, Any] | None:
    """An MCP server's input request (:class:`kimik3.tools.mcp.InputRequest`) asked on the
    terminal (stderr): the server's question, then each property of its form (typed as its schema
    says), or the URL to visit; None when the person declines."""
    tool = f", tool {printable(request.tool)!r}" if request.tool else ""
    where = f"MCP server {printable(request.server)!r}{tool}"
    click.echo(f"\n{where} asks: {printable(request.message)}", err=True)
    if request.url is not None:
        click.echo(f"open {printable(request.url)} and answer there", err=True)
        return {} if click.confirm("done", default=True, err=True) else None
    if not click.confirm("answer", default=True, err=True):
        return None
    schema = request.schema or {}
    answer: dict[str, Any] = {}
    for name, prop in (schema.get("properties") or {}).items():
        prop = prop if isinstance(prop, dict) else {}
        kind = {"integer": int, "number": float, "boolean": bool}.get(str(prop.get("type")), str)
        label = printable(str(prop.get("title") or name))
        answer[name] = click.prompt(label, type=kind, default=prop.get("default"), err=True)
    return answer


def mcp_server(spec: str, timeout: float | None = None) -> Toolset:
    """``--mcp``: a Streamable HTTP URL, or a command line started over stdio; ``timeout``:
    ``--mcp-timeout`` (None: the MCP default). A server's request for input during a call is
    asked on the terminal when stdin is one; unattended (no input handler), a 2026-07-28
    ``input_required`` call waits in the session and the run stops with ``input_required``
    (``kimik3 answer``, then ``kimik3 resume``); an older server's mid-call request fails the call."""
    try:
        from ..tools import mcp
    except ImportError as e:
        raise click.UsageError(f"--mcp needs the MCP SDK ({e}): pip install 'kimik3[mcp]'") from None
    limit = mcp.DEFAULT_TIMEOUT_S if timeout is None else timeout
    ask = _terminal_input if sys.stdin is not None and sys.stdin.isatty() else None
    prefix, spec = _mcp_spec(spec)
    if spec.startswith(("http://", "https://")):
        return mcp.MCPServerStreamableHTTP(spec, timeout=limit, input_handler=ask, tool_prefix=prefix, name=prefix)
    argv = shlex.split(spec)
    if not argv or not argv[0]:
        raise click.BadParameter("an empty command", param_hint="'--mcp'")
    return mcp.MCPServerStdio(argv[0], argv[1:], timeout=limit, input_handler=ask, tool_prefix=prefix, name=prefix)


def agent_from(o: Options, engine: Engine, tools: Sequence[Tool | Toolset], instructions: str | None,
               hooks: Sequence[RunHooks] = ()) -> Agent[str]:
    """The agent of ``run`` / ``resume`` / ``chat``: ``engine`` with the options' settings, budgets
    (``--max-turns``, ``--max-usd``), ``--mcp`` servers, ``--plan`` and ``--otel`` exporter, and
    ``tools``, ``instructions``, ``hooks`` as the harness gives them."""
    budgets = Budgets(usd=o.max_usd) if o.max_turns is None else Budgets(turns=o.max_turns, usd=o.max_usd)
    if o.otel:
        try:
            from .._tracing import configure_exporter

            configure_exporter(o.otel)
        except ImportError as e:
            raise click.UsageError(f"--otel needs the OpenTelemetry SDK ({e}): "
                                   "pip install 'kimik3[otel-export]'") from None
    extra: list[Tool | Toolset] = [mcp_server(spec, o.mcp_timeout) for spec in o.mcp]
    if o.plan:
        extra.append(plan_tool(Plan()))
    return Agent(instructions=instructions, tools=[*tools, *extra], engine=engine, settings=settings_from(o, engine),
                 budgets=budgets, hooks=hooks, pricing=o.price if o.price is not None else "auto")
