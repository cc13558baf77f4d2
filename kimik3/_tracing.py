"""OpenTelemetry spans of agent runs, model calls and tool calls, with the GenAI semantic
conventions' attributes (https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-spans/).

``opentelemetry-api`` is an optional extra (``pip install 'kimik3[otel]'``): without it every
function here is a no-op and nothing is imported. With it, spans go to whatever tracer provider
the application configured (none: the API's no-op provider). kimik3 emits:

- ``invoke_agent`` (one per run, INTERNAL): ``gen_ai.operation.name``, ``gen_ai.provider.name``,
  ``gen_ai.agent.name`` (when the agent has one), ``gen_ai.request.model``; at the end
  ``gen_ai.usage.input_tokens`` / ``output_tokens`` summed over the run and ``kimik3.stop_reason``;
- ``chat {model}`` (one per model call, CLIENT, a child of the run): ``gen_ai.operation.name =
  "chat"``, ``gen_ai.provider.name``, ``server.address`` / ``server.port`` (an endpoint's host
  and port only: no credentials), ``gen_ai.request.model`` / ``temperature`` / ``top_p`` /
  ``max_tokens`` / ``seed``, ``gen_ai.response.model`` / ``id`` / ``finish_reasons``,
  ``gen_ai.usage.input_tokens`` / ``output_tokens``;
- ``execute_tool {name}`` (one per tool call, INTERNAL, a child of the run and the current span
  while the tool runs): ``gen_ai.tool.name``, ``gen_ai.tool.call.id``, ``gen_ai.tool.type``.
  The name is the model's choice: it names the span only when it is a declared tool's (and then
  it is one of 1-64 letters, digits, ``_``, ``.``, ``-``); a call to any other name is the span
  ``execute_tool``, its name recorded (cut to 64 characters, others replaced by ``_``) only when
  content capture is on. The call id is cut to 128 characters.
- ``apply_guardrail {name}`` (one per guardrail check, INTERNAL, a child of the run, or of the
  tool call it checks): ``gen_ai.operation.name = "apply_guardrail"``,
  ``gen_ai.guardrail.component.name``, ``gen_ai.guardrail.source`` (``input``, ``output``,
  ``tool_input``, ``tool_output``), ``gen_ai.tool.call.id`` for a tool's check; at the end the
  guardrail's own result, as the GenAI guardrail conventions ask (``gen_ai.guardrail.result.type
  = "tripwire_triggered"``, ``gen_ai.guardrail.result.value`` ``"true"``/``"false"``,
  ``gen_ai.guardrail.result.reason`` its message), on the span and on a
  ``gen_ai.guardrail.result`` event; no allow/deny verdict is inferred (docs/guardrails.md).

Chat spans also carry ``gen_ai.usage.cache_read.input_tokens``,
``gen_ai.usage.cache_creation.input_tokens`` and ``gen_ai.usage.reasoning.output_tokens`` where
the server reported them.

Metrics beside the spans (one meter, ``kimik3``; docs/telemetry.md pins the conventions' version):

- ``gen_ai.client.operation.duration`` (histogram, s): each model call, from its request to its
  last chunk; ``error.type`` on a failed one;
- ``gen_ai.client.token.usage`` (histogram, ``{token}``): each model call whose server reported
  usage (none when it did not: the conventions forbid guessing), ``gen_ai.token.type`` ``input``
  and ``output``. Where the server reported the cache split, the input is recorded as its parts,
  each with ``gen_ai.token.cache``: ``none`` (neither read nor written), ``read`` and, where writes
  were reported, ``creation``; the parts of one call sum to its input tokens. Where the server
  reported ``completion_tokens_details.reasoning_tokens``, the output likewise, with
  ``gen_ai.token.phase`` ``reasoning`` and ``response``.

Both carry ``gen_ai.operation.name``, ``gen_ai.provider.name``, ``gen_ai.request.model`` and
``gen_ai.response.model``. They go to the application's meter provider; with none configured (the
API's proxy provider, or a ``NoOpMeterProvider``) nothing is built nor recorded, and a provider set
later gets the calls from then on (:func:`_metrics_live`, issue 44).

``gen_ai.provider.name`` is :data:`PROVIDER_NAME` (``"moonshot_ai"``, K3's provider: the
conventions list no value for Moonshot AI, so a custom one in the style of ``mistral_ai``).

A failure sets ``error.type`` (the exception's class name, or ``"tool_error"`` for a tool's error
result) and the span status ERROR; the exception's message and traceback are recorded with every
URL in them redacted (:func:`kimik3._text.redact_urls`: no ``user:pw@``, no ``?api-key=`` value).
Message content (``gen_ai.input.messages``,
``gen_ai.output.messages``, ``gen_ai.tool.call.arguments`` / ``result``) is recorded only when
capture is on: :func:`set_capture_content` or the GenAI instrumentations' environment variable
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``; off by default.

:func:`configure_exporter` (``kimik3 run --otel``) exports in a background thread; at exit it
waits at most :data:`EXIT_FLUSH_S` seconds for the last spans, so a dead or slow collector
cannot hold the process (the spans left are dropped, with a line on stderr).
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import re
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from ._text import redact_urls
from .types import AssistantMessage, Message, SystemMessage, TextPart, ToolMessage, UserMessage

__all__ = [
    "EXIT_FLUSH_S",
    "PROVIDER_NAME",
    "Span",
    "agent_run",
    "capture_content",
    "configure_exporter",
    "guardrail_check",
    "model_call",
    "set_capture_content",
    "tool_call",
]

PROVIDER_NAME = "moonshot_ai"
"""``gen_ai.provider.name`` of kimik3's spans."""

EXIT_FLUSH_S = 2.0
"""Seconds :func:`configure_exporter`'s exporter may take to send the last spans at exit."""

_CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_UNSAFE = re.compile(r"[^\w.-]")  # what a tool name may not hold (kimik3's tool-name rule)
_capture: bool | None = None
_trace: Any = None  # the opentelemetry.trace module; False once known to be missing
_instruments: Any = None  # (token usage, operation duration) histograms; False without the API
_quiet_meters: Any = None  # (get_meter_provider, the no-op providers' classes); False without the API

TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)
"""``gen_ai.client.token.usage``'s explicit bucket boundaries (the conventions' advice)."""

DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
"""``gen_ai.client.operation.duration``'s explicit bucket boundaries in seconds (the conventions' advice)."""


def _api() -> Any:
    """``opentelemetry.trace``, imported on first use; None when the API is not installed."""
    global _trace
    if _trace is None:
        try:
            _trace = importlib.import_module("opentelemetry.trace")
        except ImportError:
            _trace = False
    return _trace or None


def _histograms() -> Any:
    """``(token_usage, operation_duration)`` histograms of the ``kimik3`` meter, made on first
    use (the global meter provider's proxy: an SDK provider set later still gets them); None
    without the OpenTelemetry API."""
    global _instruments
    if _instruments is None:
        try:
            metrics = importlib.import_module("opentelemetry.metrics")
        except ImportError:
            _instruments = False
        else:
            meter = metrics.get_meter("kimik3")
            _instruments = (
                meter.create_histogram("gen_ai.client.token.usage", unit="{token}",
                                       description="Number of input and output tokens used.",
                                       explicit_bucket_boundaries_advisory=list(TOKEN_BUCKETS)),
                meter.create_histogram("gen_ai.client.operation.duration", unit="s",
                                       description="GenAI operation duration.",
                                       explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS)),
            )
    return _instruments or None


def _metrics_live() -> bool:
    """Whether a metric would go anywhere: the OpenTelemetry API is installed and a meter provider
    is configured. Without one the API's global provider is its proxy (or a ``NoOpMeterProvider``)
    and kimik3 records nothing: no attribute dicts, no proxy instruments on every model call
    (issue 44). Asked on every call (one global read), so a provider set later, at any time, gets
    the calls from then on (the histograms are made on the first call it sees)."""
    global _quiet_meters
    if _quiet_meters is None:
        try:
            metrics = importlib.import_module("opentelemetry.metrics")
        except ImportError:
            _quiet_meters = False
        else:
            # The proxy is what get_meter_provider() returns while none is set; its class is the
            # API's own (opentelemetry.metrics._internal): where it is not found, every call records.
            proxy = getattr(importlib.import_module("opentelemetry.metrics._internal"), "_ProxyMeterProvider", None)
            _quiet_meters = (metrics.get_meter_provider, (metrics.NoOpMeterProvider, *([proxy] if proxy else [])))
    if not _quiet_meters:
        return False
    get_provider, quiet = _quiet_meters
    return not isinstance(get_provider(), quiet)


def _record_call(model: str | None, completion: Any, seconds: float, error: str | None) -> None:
    """Record one model call's duration and, when its server reported usage, its tokens."""
    if not _metrics_live():
        return
    histograms = _histograms()
    if histograms is None:
        return
    tokens, duration = histograms
    common = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": PROVIDER_NAME}
    if model:
        common["gen_ai.request.model"] = model
    if completion is not None and completion.model:
        common["gen_ai.response.model"] = completion.model
    duration.record(seconds, {**common, "error.type": error} if error else common)
    if completion is None or completion.usage.unknown:
        return
    usage = completion.usage
    reasoning = usage.reasoning_tokens
    if reasoning is None:
        tokens.record(usage.completion_tokens, {**common, "gen_ai.token.type": "output"})
    else:  # the split the server reported: reasoning, and the rest (the answer and its calls)
        reasoning = min(reasoning, usage.completion_tokens)
        for phase, count in (("reasoning", reasoning), ("response", usage.completion_tokens - reasoning)):
            tokens.record(count, {**common, "gen_ai.token.type": "output", "gen_ai.token.phase": phase})
    details = usage.prompt_tokens_details
    if details is None:
        tokens.record(usage.prompt_tokens, {**common, "gen_ai.token.type": "input"})
        return
    read = min(usage.cached_tokens, usage.prompt_tokens)
    written = min(usage.cache_write_tokens, usage.prompt_tokens - read)
    parts = {"none": usage.prompt_tokens - read - written, "read": read}
    if details.cache_write_tokens is not None:
        parts["creation"] = written
    for cache, count in parts.items():
        tokens.record(count, {**common, "gen_ai.token.type": "input", "gen_ai.token.cache": cache})


def set_capture_content(enabled: bool | None) -> None:
    """Record message content on spans (True), never (False), or as the environment variable
    ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` says (None, the default)."""
    global _capture
    _capture = enabled


def capture_content() -> bool:
    """Whether spans carry message content now (see :func:`set_capture_content`)."""
    if _capture is not None:
        return _capture
    return os.environ.get(_CAPTURE_ENV, "").strip().lower() in ("1", "true", "yes")


class Span:
    """A kimik3 span: an OpenTelemetry span, or nothing when the API is not installed.

    Attributes:
        span: the ``opentelemetry.trace.Span`` (None without the API).
        quiet: made while no tracer provider was configured: its child spans are not built either
            (a run's spans are all traced or none; a provider set later traces the next run).
    """

    def __init__(self, span: Any = None, *, quiet: bool = False) -> None:
        self.span = span
        self.quiet = quiet

    @property
    def recording(self) -> bool:
        """Whether attributes set on this span go anywhere (a configured SDK, not the no-op)."""
        return self.span is not None and bool(self.span.is_recording())

    def set(self, **attributes: Any) -> None:
        """Set attributes; ``gen_ai__usage__input_tokens=3`` sets ``gen_ai.usage.input_tokens``
        (``__`` stands for ``.``); None values are skipped."""
        if self.span is None:
            return
        for key, value in attributes.items():
            if value is not None:
                self.span.set_attribute(key.replace("__", "."), value)

    def end(self, error: BaseException | str | None = None) -> None:
        """End the span; ``error`` (an exception, or an ``error.type`` value) marks it failed."""
        if self.span is None:
            return
        if error is not None:
            trace = _api()
            kind = error if isinstance(error, str) else type(error).__name__
            self.span.set_attribute("error.type", kind)
            if isinstance(error, BaseException):  # its message and traceback, URLs redacted
                import traceback

                stack = "".join(traceback.format_exception(type(error), error, error.__traceback__))
                self.span.record_exception(error, attributes={"exception.message": redact_urls(str(error)),
                                                              "exception.stacktrace": redact_urls(stack)})
            self.span.set_status(trace.Status(trace.StatusCode.ERROR, redact_urls(str(error))[:200]))
        self.span.end()

    @contextmanager
    def current(self) -> Iterator[None]:
        """Make this span the current one inside the block (for spans of code it calls)."""
        if self.span is None:
            yield
            return
        with _api().use_span(self.span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
            yield


def _live() -> bool:
    """Whether a span would go anywhere: the OpenTelemetry API is installed and a tracer
    provider is configured (without one the API's proxy provider hands out no-op spans, so
    kimik3 builds none: no attribute dicts, no context managers on every call, issue 44)."""
    trace = _api()
    return trace is not None and not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def _quiet(parent: Span | None) -> bool:
    """Whether a child of ``parent`` is built as no span: its parent was made without a tracer
    provider (asked once a run, not on every call: issue 44), or none is configured now."""
    return (parent is not None and parent.quiet) or not _live()


def _start(name: str, parent: Span | None, kind: str, attributes: dict[str, Any]) -> Span:
    trace = _api()
    if trace is None:
        return Span()
    tracer = trace.get_tracer("kimik3")
    context = trace.set_span_in_context(parent.span) if parent is not None and parent.span is not None else None
    attrs = {k: v for k, v in attributes.items() if v is not None}
    return Span(tracer.start_span(name, context=context, kind=getattr(trace.SpanKind, kind), attributes=attrs))


class _Call(Span):
    """The span of a run, model call or tool call, ended by the context manager that made it;
    :meth:`done` records the outcome (a ``RunResult``, ``ChatCompletion`` or ``ToolResult``)."""

    def __init__(self, span: Span, on_done: Any) -> None:
        super().__init__(span.span, quiet=span.quiet)
        self.outcome: Any = None
        self._on_done = on_done

    def done(self, outcome: Any) -> None:
        self.outcome = outcome
        if self.recording:
            self._on_done(self, outcome)


@contextmanager
def _ended(span: _Call) -> Iterator[_Call]:
    """End ``span`` on leaving: failed with the exception's type, ``"cancelled"`` when
    cancelled (or left without an outcome), else as :meth:`_Call.done` recorded."""
    try:
        yield span
    except Exception as e:
        span.end(e)
        raise
    except BaseException:
        span.end("cancelled")
        raise
    if span.outcome is None:
        span.end("cancelled")
    elif getattr(span.outcome, "is_error", False):
        span.end("tool_error")
    else:
        span.end()


def _run_done(span: Span, result: Any) -> None:
    span.set(kimik3__stop_reason=result.stop_reason, gen_ai__usage__input_tokens=result.usage.prompt_tokens,
             gen_ai__usage__output_tokens=result.usage.completion_tokens, **_cache_usage(result.usage))


def _cache_usage(usage: Any) -> dict[str, int | None]:
    """The spans' cache split of ``usage``: read and written tokens where reported (else None)."""
    details = usage.prompt_tokens_details
    return {"gen_ai__usage__cache_read__input_tokens": usage.cached_tokens if details is not None else None,
            "gen_ai__usage__cache_creation__input_tokens": details.cache_write_tokens if details is not None else None,
            "gen_ai__usage__reasoning__output_tokens": usage.reasoning_tokens}


def _model_done(span: Span, completion: Any) -> None:
    span.set(
        gen_ai__response__model=completion.model or None,
        gen_ai__response__id=completion.id,
        gen_ai__response__finish_reasons=[completion.recorded_finish_reason],
        gen_ai__usage__input_tokens=completion.usage.prompt_tokens,
        gen_ai__usage__output_tokens=completion.usage.completion_tokens,
        **_cache_usage(completion.usage),
    )
    if capture_content():
        span.set(gen_ai__output__messages=json.dumps(_messages([completion.message]), ensure_ascii=False))


def _tool_done(span: Span, result: Any) -> None:
    if capture_content():
        span.set(gen_ai__tool__call__result=result.text)


def agent_run(agent_name: str | None, model: str | None) -> AbstractContextManager[_Call]:
    """The ``invoke_agent`` span of one run (a child of the caller's current span); call
    ``.done(run_result)`` on it."""
    if not _live():
        return nullcontext(_Call(Span(quiet=True), _run_done))
    name = f"invoke_agent {agent_name}" if agent_name else "invoke_agent"
    span = _start(name, None, "INTERNAL", {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.provider.name": PROVIDER_NAME,
        "gen_ai.agent.name": agent_name,
        "gen_ai.request.model": model or None,
    })
    return _ended(_Call(span, _run_done))


@contextmanager
def model_call(parent: Span | None, model: str | None, request: Any, server: str | None = None) -> Iterator[_Call]:
    """The ``chat {model}`` span of one model call (``request``: a ``ChatRequest``; ``server``:
    the endpoint's base URL, of which only ``server.address`` / ``server.port`` are recorded,
    never its userinfo, path or query); call ``.done(completion)`` on it. On leaving, the call's
    metrics are recorded (the module docstring). No span under a ``parent`` made without a tracer
    provider (:attr:`Span.quiet`)."""
    started = time.monotonic()
    error: str | None = None
    call: _Call | None = None
    try:
        with _model_span(parent, model, request, server) as call:
            yield call
    except Exception as e:
        error = type(e).__name__
        raise
    except BaseException:
        error = "cancelled"
        raise
    finally:
        outcome = call.outcome if call is not None else None
        if error is None and outcome is None:
            error = "cancelled"  # left without a completion, as the span says
        _record_call(model, outcome, time.monotonic() - started, error)


def _model_span(parent: Span | None, model: str | None, request: Any,
                server: str | None) -> AbstractContextManager[_Call]:  # fmt: skip
    if _quiet(parent):  # no tracer provider: no span to build (each would be a no-op; issue 44)
        return nullcontext(_Call(Span(quiet=True), _model_done))
    address, port = _server(server)
    span = _start(f"chat {model}" if model else "chat", parent, "CLIENT", {
        "server.address": address,
        "server.port": port,
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": PROVIDER_NAME,
        "gen_ai.request.model": model or None,
        "gen_ai.request.temperature": request.settings.temperature,
        "gen_ai.request.top_p": request.settings.top_p,
        "gen_ai.request.max_tokens": request.settings.max_tokens,
        "gen_ai.request.seed": request.settings.seed,
        "gen_ai.conversation.id": request.routing.key if request.routing is not None else None,
    })
    if span.recording and capture_content():
        span.set(gen_ai__input__messages=json.dumps(_messages(request.messages), ensure_ascii=False))
    return _ended(_Call(span, _model_done))


def _server(url: str | None) -> tuple[str | None, int | None]:
    """(host, port) of an endpoint's URL, as the conventions' ``server.address`` / ``server.port``."""
    if not url:
        return None, None
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        return parts.hostname or None, parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:
        return None, None


def _tool_name(name: str) -> str:
    """``name`` as a tool name: at most 64 characters, none but letters, digits, ``_ . -``."""
    return _UNSAFE.sub("_", name[:64]) or "_"


def tool_call(parent: Span | None, call_id: str, name: str, arguments: Any, *,
              declared: bool = True) -> AbstractContextManager[_Call]:  # fmt: skip
    """The ``execute_tool {name}`` span of one tool call, current inside the block; call
    ``.done(tool_result)`` on it (an error result marks the span failed).

    Args:
        parent: the run's span.
        call_id: the call's id (cut to 128 characters).
        name: the tool name the model chose.
        arguments: the call's arguments (recorded only with content capture on).
        declared: ``name`` is one of the run's tools; otherwise it is model text, kept out of the
            span name and recorded (bounded) only with content capture on.
    """
    if _quiet(parent):
        return nullcontext(_Call(Span(quiet=True), _tool_done))
    return _tool_call(parent, call_id, name, arguments, declared)


@contextmanager
def _tool_call(parent: Span | None, call_id: str, name: str, arguments: Any, declared: bool) -> Iterator[_Call]:
    capture = capture_content()
    known = _tool_name(name) if declared else None
    span = _start(f"execute_tool {known}" if known else "execute_tool", parent, "INTERNAL", {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": known or (_tool_name(name) if capture else None),
        "gen_ai.tool.call.id": call_id[:128],
        "gen_ai.tool.type": "function",
    })
    if span.recording and capture:
        text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
        span.set(gen_ai__tool__call__arguments=text)
    with _ended(_Call(span, _tool_done)) as call, call.current():
        yield call


def _guardrail_done(span: Span, result: Any, *, name: str, source: str) -> None:
    attributes = {
        "gen_ai.guardrail.component.name": name,
        "gen_ai.guardrail.source": source,
        "gen_ai.guardrail.result.type": "tripwire_triggered",
        "gen_ai.guardrail.result.value": "true" if result.tripwire_triggered else "false",
        "gen_ai.guardrail.result.reason": result.message,
    }
    attributes = {k: v for k, v in attributes.items() if v is not None}
    span.set(**{k.replace(".", "__"): v for k, v in attributes.items()})
    span.span.add_event("gen_ai.guardrail.result", attributes)


def guardrail_check(parent: Span | None, name: str, source: str, content: Any, *,
                    call_id: str | None = None) -> AbstractContextManager[_Call]:
    """The ``apply_guardrail {name}`` span of one guardrail check; call ``.done(result)`` on it
    with the guardrail's own result (an object with ``tripwire_triggered`` and ``message``),
    recorded as given (the conventions: "MUST NOT infer an allow or deny verdict").

    Source: the OpenTelemetry GenAI guardrail conventions (docs/gen-ai/gen-ai-guardrails.md of
    open-telemetry/semantic-conventions-genai, Development status, against semconv v1.44.0).

    Args:
        parent: the run's span, or None for the current span (a tool call's, for tool checks).
        name: the guardrail's name (``gen_ai.guardrail.component.name``).
        source: ``input``, ``output``, ``tool_input`` or ``tool_output`` (``gen_ai.guardrail.source``).
        content: what is checked; recorded (``gen_ai.guardrail.content.input.value``, JSON) only
            with content capture on.
        call_id: the tool call a tool guardrail checks.
    """
    span = _start(f"apply_guardrail {name}", parent, "INTERNAL", {
        "gen_ai.operation.name": "apply_guardrail",
        "gen_ai.guardrail.component.name": name,
        "gen_ai.guardrail.source": source,
        "gen_ai.tool.call.id": call_id[:128] if call_id is not None else None,
    })
    if span.recording and capture_content():
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False, default=str)
        span.set(gen_ai__guardrail__content__input__value=text)
    return _ended(_Call(span, functools.partial(_guardrail_done, name=name, source=source)))


def _parts(content: Any) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "content": content}] if content else []
    return [{"type": "text", "content": p.text} if isinstance(p, TextPart) else {"type": p.type} for p in content]


def _messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Messages in the GenAI conventions' JSON shape (role + typed parts)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if isinstance(m, ToolMessage):
            text = m.content if isinstance(m.content, str) else "".join(p.get("content", "") for p in _parts(m.content))
            out.append({"role": "tool", "parts": [{"type": "tool_call_response", "id": m.tool_call_id,
                                                   "response": text}]})
        elif isinstance(m, AssistantMessage):
            parts = [{"type": "reasoning", "content": m.reasoning_content}] if m.reasoning_content else []
            parts += _parts(m.content)
            parts += [{"type": "tool_call", "id": c.id, "name": c.function.name, "arguments": c.function.arguments}
                      for c in m.tool_calls or ()]
            out.append({"role": "assistant", "parts": parts})
        elif isinstance(m, (SystemMessage, UserMessage)):
            out.append({"role": m.role, "parts": _parts(m.content)})
    return out


def configure_exporter(target: str) -> None:
    """Install a global tracer provider that exports kimik3's spans (used by ``kimik3 --otel``).

    Spans are exported in batches by a background thread; at exit the last batch gets at most
    :data:`EXIT_FLUSH_S` seconds (a dead or slow collector delays exit by no more).

    Args:
        target: ``"console"`` (spans printed to stderr as JSON) or an OTLP/HTTP endpoint such as
            ``http://127.0.0.1:4318`` (``/v1/traces`` is appended when the URL has no path).

    Raises:
        ImportError: ``opentelemetry-sdk`` (and for OTLP ``opentelemetry-exporter-otlp-proto-http``)
            not installed.
    """
    import atexit
    import sys

    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

    exporter: SpanExporter
    if target == "console":
        exporter = ConsoleSpanExporter(out=sys.stderr)
    else:
        from urllib.parse import urlsplit

        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        endpoint = target if urlsplit(target).path.strip("/") else target.rstrip("/") + "/v1/traces"
        exporter = OTLPSpanExporter(endpoint=endpoint)
    # shut down by _flush_at_exit, not the SDK's own unbounded atexit hook
    provider = TracerProvider(resource=Resource.create({"service.name": "kimik3"}), shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    atexit.register(_flush_at_exit, provider, target)


def _flush_at_exit(provider: Any, target: str) -> None:
    """Send the last spans at exit, waiting at most :data:`EXIT_FLUSH_S` (a daemon thread: one
    stuck on a collector that never answers does not keep the process)."""
    import sys
    import threading

    from ._text import redact_url

    flush = threading.Thread(target=provider.shutdown, name="kimik3-otel-flush", daemon=True)
    flush.start()
    flush.join(EXIT_FLUSH_S)
    if flush.is_alive():
        print(f"kimik3: the OpenTelemetry collector at {redact_url(target)} did not take the last spans within "
              f"{EXIT_FLUSH_S:g} s; they are dropped", file=sys.stderr)  # fmt: skip
