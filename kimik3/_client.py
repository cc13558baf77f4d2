"""``kimik3.Client``: one chat API over every engine, with retries and typed errors."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Iterable, Mapping
from types import TracebackType
from typing import Any, TypedDict

import anyio
from typing_extensions import Unpack

from ._exceptions import APIConnectionError, RateLimitError, ServiceUnavailableError
from .engines._base import ChatCompletion, ChatRequest, Completed, Engine, PromptCache, ReasoningEffort, StreamEvent
from .types import Message, ToolSpec

__all__ = ["ChatOptions", "Client", "chat_request"]

_RETRYABLE = (RateLimitError, ServiceUnavailableError, APIConnectionError)


class ChatOptions(TypedDict, total=False):
    """Options of :meth:`Client.chat` / :meth:`Client.stream` (see :class:`ChatRequest`).

    Defaults follow K3's model card: reasoning_effort "max", temperature 1.0, top_p 0.95.
    """

    tools: Iterable[ToolSpec | Mapping[str, Any] | Any] | None
    reasoning_effort: ReasoningEffort
    tool_choice: Any
    response_format: Any
    temperature: float
    top_p: float
    max_tokens: int | None
    seed: int | None
    extra: Mapping[str, Any] | None
    prompt_cache: PromptCache | None


def chat_request(messages: Iterable[Message | Mapping[str, Any]], **options: Unpack[ChatOptions]) -> ChatRequest:
    """The :class:`ChatRequest` for :meth:`Client.chat`'s arguments.

    Raises:
        TypeError: an unknown option (a typo would otherwise be ignored silently).
        MessageError (and subclasses), InvalidEffortError: invalid messages or options.
    """
    unknown = sorted(set(options) - set(ChatOptions.__annotations__))
    if unknown:
        raise TypeError(f"unexpected option(s) {', '.join(unknown)}; expected {', '.join(ChatOptions.__annotations__)}")
    tools = options.get("tools")
    extra = options.get("extra")
    return ChatRequest(
        messages=list(messages),  # type: ignore[arg-type]  # converted in __post_init__
        tools=list(tools or ()),  # type: ignore[arg-type]  # normalised in __post_init__
        reasoning_effort=options.get("reasoning_effort", "max"),
        tool_choice=options.get("tool_choice"),
        response_format=options.get("response_format"),
        temperature=options.get("temperature", 1.0),
        top_p=options.get("top_p", 0.95),
        max_tokens=options.get("max_tokens"),
        seed=options.get("seed"),
        extra=dict(extra or {}),
        prompt_cache=options.get("prompt_cache"),
    )


class Client:
    """The K3 chat client: the same call against a remote endpoint or an embedded engine.

    ``await client.chat(messages, ...)`` returns an OpenAI-shaped :class:`ChatCompletion`;
    ``client.stream(...)`` yields the parser's typed events and a final ``Completed``. Defaults
    follow K3's model card (temperature 1.0, top_p 0.95, reasoning_effort "max").

    Retries: 429, 5xx and connection errors (timeouts included) are retried ``max_retries``
    times with exponential backoff (0.5 s doubling to 8 s, 25% jitter), honouring the server's
    ``Retry-After``; a stream is retried only before its first event. Everything else raises at
    once with a typed error (:class:`~kimik3.ContextLengthExceededError`,
    :class:`~kimik3.BadRequestError`, ...).

    Args:
        engine: any :class:`~kimik3.engines.Engine`. Without one, ``base_url``/``api_key``/
            ``model`` build a :class:`~kimik3.engines.RemoteEngine` (chat mode).
        max_retries: retries after the first attempt (default 2, like openai-python).
    """

    def __init__(
        self,
        engine: Engine | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        model: str | None = None,
        max_retries: int = 2,
    ) -> None:
        if engine is None:
            from .engines._remote import RemoteEngine

            engine = RemoteEngine(base_url=base_url, api_key=api_key, model=model)
        self.engine = engine
        self.max_retries = max_retries

    async def chat(
        self, messages: Iterable[Message | Mapping[str, Any]], **options: Unpack[ChatOptions]
    ) -> ChatCompletion:
        """One completion.

        Args:
            messages: OpenAI-shaped dicts or typed messages; every past assistant message must
                carry its ``reasoning_content`` and ``tool_calls`` as received (K3 requires it).
            **options: :class:`ChatOptions`: tools, reasoning_effort (low / high / max, or "none"
                for thinking off), tool_choice ("auto" / "required" / "none"), response_format,
                temperature, top_p, max_tokens, seed, extra (engine-specific), prompt_cache.

        Returns:
            The completion (``.message``, ``.finish_reason``, ``.usage``).

        Raises:
            MessageError (and subclasses): messages K3's format cannot express.
            ContextLengthExceededError, BadRequestError, AuthenticationError, NotFoundError,
            RateLimitError, ServiceUnavailableError, APIConnectionError, APITimeoutError.
        """
        return await self.complete(chat_request(messages, **options))

    async def stream(
        self, messages: Iterable[Message | Mapping[str, Any]], **options: Unpack[ChatOptions]
    ) -> AsyncIterator[StreamEvent]:
        """Stream one completion: reasoning / content / tool-call events, then ``Completed``.

        Same arguments and errors as :meth:`chat`. Breaking out of the loop (or cancelling)
        aborts the request.
        """
        async for event in self._stream_with_retries(chat_request(messages, **options)):
            yield event

    async def complete(self, request: ChatRequest) -> ChatCompletion:
        """:meth:`chat` for a prepared :class:`ChatRequest` (retries included)."""
        async for event in self._stream_with_retries(request):
            if isinstance(event, Completed):
                return event.completion
        raise AssertionError("unreachable")  # pragma: no cover

    async def stream_request(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        """:meth:`stream` for a prepared :class:`ChatRequest` (retries included)."""
        async for event in self._stream_with_retries(request):
            yield event

    async def _stream_with_retries(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        attempt = 0
        while True:
            started = False
            stream = self.engine.stream(request)
            try:
                async for event in stream:
                    started = True
                    yield event
                return
            except _RETRYABLE as e:
                if started or attempt >= self.max_retries:
                    raise
                delay = _backoff(attempt, getattr(e, "retry_after", None))
                attempt += 1
            finally:
                await stream.aclose()  # type: ignore[attr-defined]
            await anyio.sleep(delay)

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
    """openai-python's schedule: 0.5 s * 2**attempt capped at 8 s, minus up to 25% jitter;
    a server's Retry-After (up to 60 s) wins."""
    if retry_after is not None and 0 <= retry_after <= 60:
        return float(retry_after)
    return min(0.5 * 2.0**attempt, 8.0) * (1 - 0.25 * random.random())
