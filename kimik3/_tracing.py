"""OpenTelemetry spans of agent runs, model calls and tool calls, with the GenAI semantic
conventions' attributes (https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-spans/).

``opentelemetry-api`` is an optional extra (``pip install 'kimik3[otel]'``): without it every
function here is a no-op and nothing is imported. With it, spans go to whatever tracer provider
the application configured (none: the API's no-op provider). kimik3 emits:

- ``invoke_agent`` (one per run, INTERNAL): ``gen_ai.operation.name``, ``gen_ai.provider.name``,
  ``gen_ai.agent.name`` (when the agent has one), ``gen_ai.request.model``; at the end
  ``gen_ai.usage.input_tokens`` / ``output_tokens`` summed over the run and ``kimik3.stop_reason``;
- ``chat {model}`` (one per model call, CLIENT, a child of the run): ``gen_ai.operation.name =
  "chat"``, ``gen_ai.provider.name``, ``gen_ai.request.model`` / ``temperature`` / ``top_p`` /
  ``max_tokens`` / ``seed``, ``gen_ai.response.model`` / ``id`` / ``finish_reasons``,
  ``gen_ai.usage.input_tokens`` / ``output_tokens``;
- ``execute_tool {name}`` (one per tool call, INTERNAL, a child of the run and the current span
  while the tool runs): ``gen_ai.tool.name``, ``gen_ai.tool.call.id``, ``gen_ai.tool.type``.
  The name is the model's choice: it names the span only when it is a declared tool's (and then
  it is one of 1-64 letters, digits, ``_``, ``.``, ``-``); a call to any other name is the span
  ``execute_tool``, its name recorded (cut to 64 characters, others replaced by ``_``) only when
  content capture is on. The call id is cut to 128 characters.

``gen_ai.provider.name`` is :data:`PROVIDER_NAME` (``"moonshot_ai"``, K3's provider: the
conventions list no value for Moonshot AI, so a custom one in the style of ``mistral_ai``).

A failure sets ``error.type`` (the exception's class name, or ``"tool_error"`` for a tool's error
result) and the span status ERROR. Message content (``gen_ai.input.messages``,
``gen_ai.output.messages``, ``gen_ai.tool.call.arguments`` / ``result``) is recorded only when
capture is on: :func:`set_capture_content` or the GenAI instrumentations' environment variable
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``; off by default.

:func:`configure_exporter` (``kimik3 run --otel``) exports in a background thread; at exit it
waits at most :data:`EXIT_FLUSH_S` seconds for the last spans, so a dead or slow collector
cannot hold the process (the spans left are dropped, with a line on stderr).
"""

from __future__ import annotations

import importlib
import json
import os
import re
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from .types import AssistantMessage, Message, SystemMessage, TextPart, ToolMessage, UserMessage

__all__ = [
    "EXIT_FLUSH_S",
    "PROVIDER_NAME",
    "Span",
    "agent_run",
    "capture_content",
    "configure_exporter",
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


def _api() -> Any:
    """``opentelemetry.trace``, imported on first use; None when the API is not installed."""
    global _trace
    if _trace is None:
        try:
            _trace = importlib.import_module("opentelemetry.trace")
        except ImportError:
            _trace = False
    return _trace or None


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
    """

    def __init__(self, span: Any = None) -> None:
        self.span = span

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
            if isinstance(error, BaseException):
                self.span.record_exception(error)
            self.span.set_status(trace.Status(trace.StatusCode.ERROR, str(error)[:200]))
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
        super().__init__(span.span)
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
             gen_ai__usage__output_tokens=result.usage.completion_tokens)


def _model_done(span: Span, completion: Any) -> None:
    span.set(
        gen_ai__response__model=completion.model or None,
        gen_ai__response__id=completion.id,
        gen_ai__response__finish_reasons=[completion.finish_reason],
        gen_ai__usage__input_tokens=completion.usage.prompt_tokens,
        gen_ai__usage__output_tokens=completion.usage.completion_tokens,
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
        return nullcontext(_Call(Span(), _run_done))
    name = f"invoke_agent {agent_name}" if agent_name else "invoke_agent"
    span = _start(name, None, "INTERNAL", {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.provider.name": PROVIDER_NAME,
        "gen_ai.agent.name": agent_name,
        "gen_ai.request.model": model or None,
    })
    return _ended(_Call(span, _run_done))


def model_call(parent: Span | None, model: str | None, request: Any) -> AbstractContextManager[_Call]:
    """The ``chat {model}`` span of one model call (``request``: a ``ChatRequest``); call
    ``.done(completion)`` on it."""
    if not _live():
        return nullcontext(_Call(Span(), _model_done))
    span = _start(f"chat {model}" if model else "chat", parent, "CLIENT", {
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
    if not _live():
        return nullcontext(_Call(Span(), _tool_done))
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

    flush = threading.Thread(target=provider.shutdown, name="kimik3-otel-flush", daemon=True)
    flush.start()
    flush.join(EXIT_FLUSH_S)
    if flush.is_alive():
        print(f"kimik3: the OpenTelemetry collector at {target} did not take the last spans within "
              f"{EXIT_FLUSH_S:g} s; they are dropped", file=sys.stderr)  # fmt: skip
