"""``kimik3.Client``: one chat API over every engine, with retries and typed errors."""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any

import anyio

from . import _tracing
from ._checks import check_instance, check_int
from ._defaults import MAX_RETRIES, RETRY_AFTER_MAX, RETRY_BACKOFF_INITIAL, RETRY_BACKOFF_MAX, RETRY_JITTER
from ._exceptions import APIConnectionError, EngineError, RateLimitError, ServiceUnavailableError
from ._tracing import Span
from .engines import NO_COMPLETION, CallSource, Engine, ModelCall, RemoteEngine
from .formats.k3 import K3Tokenizer, PromptCache
from .types import ChatCompletion, ChatRequest, Message, ModelSettings, ResponseFormat, ToolChoice, ToolSpec

__all__ = ["Client"]

_RETRYABLE = (RateLimitError, ServiceUnavailableError, APIConnectionError)


class Client:
    """The K3 chat client: the same call against a remote endpoint or an embedded engine.

    ``await client.chat(messages, ...)`` returns an OpenAI-shaped :class:`ChatCompletion`;
    ``client.stream(...)`` returns a :class:`~kimik3.engines.ModelCall`::

        async with client.stream(messages) as call:
            async for event in call:   # reasoning / content / tool-call events
                ...
        call.completion                # the ChatCompletion

    Settings: K3's card defaults for one call (temperature 1.0, top_p 0.95, reasoning_effort
    "max"), then the client's ``settings``, then the call's (``settings=`` and the shorthand
    keywords ``temperature=0, max_tokens=300, ...``), each level's fields winning over the one
    before (:class:`~kimik3.ModelSettings`). An :class:`~kimik3.Agent` over this client merges
    the client's settings under its own the same way.

    Retries: 429, 5xx and connection errors (timeouts included) are retried ``max_retries``
    times with exponential backoff (0.5 s doubling to 8 s, 25% jitter), honouring the server's
    ``Retry-After``; a stream is retried only before its first event. A ``Retry-After`` over
    60 s (``RETRY_AFTER_MAX``) raises the error at once, its ``retry_after`` set, instead of
    retrying early. Everything else raises at once with a typed error (:class:`~kimik3.ContextLengthExceededError`,
    :class:`~kimik3.BadRequestError`, ...).

    Args:
        engine: any :class:`~kimik3.engines.Engine`. Without one, ``base_url``/``api_key``/
            ``model`` build a :class:`~kimik3.engines.RemoteEngine` (chat mode).
        max_retries: retries after the first attempt (default 2, like openai-python).
        settings: the model level of :class:`~kimik3.ModelSettings` for every call through the
            client (an agent's and a call's own settings win over it).

    Raises:
        UserError: an argument of the wrong type.
    """

    def __init__(
        self,
        engine: Engine | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        model: str | None = None,
        max_retries: int = MAX_RETRIES,
        settings: ModelSettings | None = None,
    ) -> None:
        check_instance("Client(engine=...)", engine, Engine, "an Engine (ScriptedEngine, VLLMEngine, RemoteEngine)")
        check_int("Client(max_retries=...)", max_retries, minimum=0)
        check_instance("Client(settings=...)", settings, ModelSettings, "a ModelSettings")
        if engine is None:
            engine = RemoteEngine(base_url=base_url, api_key=api_key, model=model)
        self.engine = engine
        self.max_retries = max_retries
        self.settings = settings or ModelSettings()

    def request(
        self,
        messages: Iterable[Message | Mapping[str, Any]],
        *,
        tools: Iterable[ToolSpec | Mapping[str, Any] | Any] | None = None,
        tool_choice: ToolChoice | None = None,
        response_format: ResponseFormat | Mapping[str, Any] | None = None,
        settings: ModelSettings | None = None,
        **options: Any,
    ) -> ChatRequest:
        """The :class:`ChatRequest` :meth:`chat` sends for these arguments (settings merged:
        card defaults < the client's < ``settings`` < ``options``).

        Raises:
            UserError: an unknown option (a typo is never ignored silently), also a TypeError;
                a bad setting.
            MessageError (and subclasses): invalid messages, tools or directives.
        """
        check_instance("settings", settings, ModelSettings, "a ModelSettings")
        merged = self.settings.merged(settings).merged(ModelSettings.of(**options) if options else None)
        return ChatRequest(
            messages=list(messages),  # type: ignore[arg-type]  # converted in __post_init__
            tools=list(tools or ()),  # type: ignore[arg-type]  # normalised in __post_init__
            settings=merged,
            tool_choice=tool_choice,
            response_format=response_format,
        )

    async def chat(
        self,
        messages: Iterable[Message | Mapping[str, Any]],
        *,
        tools: Iterable[ToolSpec | Mapping[str, Any] | Any] | None = None,
        tool_choice: ToolChoice | None = None,
        response_format: ResponseFormat | Mapping[str, Any] | None = None,
        settings: ModelSettings | None = None,
        prompt_cache: PromptCache | None = None,
        **options: Any,
    ) -> ChatCompletion:
        """One completion.

        Args:
            messages: OpenAI-shaped dicts or typed messages; every past assistant message must
                carry its ``reasoning_content`` and ``tool_calls`` as received (K3 requires it).
            tools: tool declarations (:class:`ToolSpec`, OpenAI dicts, or tools).
            tool_choice: "auto" (None) / "required" / "none".
            response_format: ``{"type": "json_object"}`` or ``{"type": "json_schema", ...}``.
            settings: this call's :class:`~kimik3.ModelSettings`.
            prompt_cache: K3's incremental encoding state of a growing conversation, handed to
                the engine call (token engines then tokenize only the new messages).
            **options: :class:`~kimik3.ModelSettings` fields as keywords (``temperature=0``,
                ``max_tokens=300``, ``reasoning_effort="none"`` for thinking off, ...); they
                win over ``settings``.

        Returns:
            The completion (``.message``, ``.finish_reason``, ``.usage``).

        Raises:
            MessageError (and subclasses): messages K3's format cannot express.
            ContextLengthExceededError, BadRequestError, AuthenticationError, NotFoundError,
            RateLimitError, ServiceUnavailableError, APIConnectionError, APITimeoutError.
        """
        request = self.request(messages, tools=tools, tool_choice=tool_choice, response_format=response_format,
                               settings=settings, **options)
        return await self.complete(request, prompt_cache=prompt_cache)

    def stream(
        self,
        messages: Iterable[Message | Mapping[str, Any]],
        *,
        tools: Iterable[ToolSpec | Mapping[str, Any] | Any] | None = None,
        tool_choice: ToolChoice | None = None,
        response_format: ResponseFormat | Mapping[str, Any] | None = None,
        settings: ModelSettings | None = None,
        prompt_cache: PromptCache | None = None,
        **options: Any,
    ) -> ModelCall:
        """Start one completion: a :class:`~kimik3.engines.ModelCall` of reasoning / content /
        tool-call events; ``call.completion`` once consumed.

        Same arguments and errors as :meth:`chat` (the request errors at once; engine errors
        while iterating). Leaving the ``async with`` early (or cancelling) aborts the request.
        """
        request = self.request(messages, tools=tools, tool_choice=tool_choice, response_format=response_format,
                               settings=settings, **options)
        return self.stream_request(request, prompt_cache=prompt_cache)

    async def complete(
        self, request: ChatRequest, *, prompt_cache: PromptCache | None = None, trace_parent: Span | None = None
    ) -> ChatCompletion:
        """:meth:`chat` for a prepared :class:`ChatRequest`; arguments as :meth:`stream_request`."""
        async with self.stream_request(request, prompt_cache=prompt_cache, trace_parent=trace_parent) as call:
            return await call.get()

    def stream_request(
        self, request: ChatRequest, *, prompt_cache: PromptCache | None = None, trace_parent: Span | None = None
    ) -> ModelCall:
        """:meth:`stream` for a prepared :class:`ChatRequest`: the one path of every model call
        (retries and tracing included).

        Args:
            request: the request.
            prompt_cache: handed to the engine call (:meth:`Engine.stream
                <kimik3.engines.Engine.stream>`).
            trace_parent: the span the call's ``chat {model}`` span is a child of (an agent
                passes its run's; default: the current span). Spans follow the OpenTelemetry
                GenAI conventions (:mod:`kimik3._tracing`; a no-op without OpenTelemetry).
        """
        return ModelCall(self._traced(request, prompt_cache, trace_parent))

    async def _traced(self, request: ChatRequest, prompt_cache: PromptCache | None, parent: Span | None) -> CallSource:
        """The call's events under its ``chat`` span, the engine call retried as
        :meth:`_retry_delay` says (one generator: each event passes one layer, issue 44)."""
        endpoint = getattr(self.engine, "endpoint", None)  # a remote engine's: its host and port go on the span
        with _tracing.model_call(parent, self.model, request, getattr(endpoint, "base_url", None)) as span:
            attempt = 0
            while True:
                started = False
                try:
                    source = self.engine.stream(request, prompt_cache=prompt_cache).source  # no second wrapper
                    try:
                        async for item in source:
                            if isinstance(item, ChatCompletion):
                                completion = item
                                break
                            started = True
                            yield item
                        else:
                            raise EngineError(NO_COMPLETION)
                    finally:
                        await source.aclose()
                    break
                except _RETRYABLE as e:
                    delay = self._retry_delay(e, started, attempt)
                    if delay is None:
                        raise
                    attempt += 1
                await anyio.sleep(delay)
            span.done(completion)
        yield completion  # after the span ended: the consumer closes the source on it

    @property
    def model(self) -> str:
        """The engine's model name ("" until a server names it)."""
        return self.engine.model

    @property
    def tokenizer(self) -> K3Tokenizer | None:
        """The engine's K3 tokenizer, when it has one."""
        return self.engine.tokenizer

    @property
    def allow_local_files(self) -> bool:
        """Whether the engine reads image / video parts that name local files."""
        return self.engine.allow_local_files

    def check_image(self, url: str) -> None:
        """Raise if the engine could never show the image at ``url`` to the model
        (:meth:`Engine.check_image <kimik3.engines.Engine.check_image>`; blocking: run it in a
        worker thread)."""
        self.engine.check_image(url)

    def _retry_delay(self, error: BaseException, started: bool, attempt: int) -> float | None:
        """Seconds to wait before retrying a call that raised ``error`` (one of the retryable
        errors); None (raise it) when the call had started streaming, the retries are used up, or
        the server's Retry-After is over :data:`RETRY_AFTER_MAX`."""
        wait = getattr(error, "retry_after", None)
        if started or attempt >= self.max_retries or (wait is not None and wait > RETRY_AFTER_MAX):
            return None
        return _backoff(attempt, wait)

    async def aclose(self) -> None:
        """Close the engine."""
        await self.engine.aclose()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


def _backoff(attempt: int, retry_after: float | None) -> float:
    """openai-python's schedule (:mod:`kimik3._defaults`): 0.5 s * 2**attempt capped at 8 s,
    minus up to 25% jitter; a server's Retry-After (up to 60 s) wins."""
    if retry_after is not None and 0 <= retry_after <= RETRY_AFTER_MAX:
        return float(retry_after)
    delay = min(RETRY_BACKOFF_INITIAL * 2.0**attempt, RETRY_BACKOFF_MAX)
    return delay * (1 - RETRY_JITTER * random.random())
