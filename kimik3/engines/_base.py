"""The Engine protocol: requests, completions, stream events, and the raw-text engine base.

Two kinds of engine produce a :class:`ChatCompletion`:

- *raw-text* engines (:class:`RawTextEngine`: embedded vLLM, a remote endpoint in raw mode, the
  scripted engine) take K3 prompt token ids that kimik3 encoded and return raw K3 text, which
  kimik3's :class:`~kimik3.formats.k3.StreamParser` turns into events;
- the remote endpoint in chat mode lets the server render and parse, and maps its deltas to the
  same events.

Either way a stream yields :data:`StreamEvent` s and ends with one :class:`Completed`.
"""

from __future__ import annotations

import os
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field, replace
from types import TracebackType
from typing import Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field

from .._exceptions import EngineError, InvalidEffortError
from ..formats.k3 import Event, ParsedOutput, StreamParser
from ..formats.k3._media import MediaIndex, expand_videos, image_prompt_tokens, media_scan, prepare_request_image
from ..formats.k3._tokenizer import K3Tokenizer, PromptEncoder, estimate_tokens
from ..types import AssistantMessage, ImagePart, Message, ToolSpec, to_messages, to_tool_specs

__all__ = [
    "ChatCompletion",
    "ChatRequest",
    "Choice",
    "Completed",
    "Engine",
    "PromptCache",
    "RawChunk",
    "RawTextEngine",
    "ReasoningEffort",
    "StreamEvent",
    "Usage",
    "completion_from_parse",
]

ReasoningEffort = Literal["low", "high", "max", "none"]
"""K3's ``reasoning_effort``: low / high / max (default max); ``"none"`` turns thinking off."""


class Usage(BaseModel):
    """Token usage of one model call (OpenAI shape)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
        )


class Choice(BaseModel):
    """``choices[i]`` of a chat completion."""

    index: int = 0
    message: AssistantMessage
    finish_reason: Literal["stop", "length", "tool_calls"]


class ChatCompletion(BaseModel):
    """An OpenAI-shaped chat completion (one choice).

    Attributes:
        choices: one :class:`Choice` with the assistant message (``reasoning_content``,
            ``content``, ``tool_calls``) and its ``finish_reason``.
        usage: token counts.
        truncated: the output stopped before K3 closed the message (``max_tokens``); an
            incomplete tool call is then dropped, never returned.
        dropped_tool_calls: names of calls that were started but never completed.
        raw_text: the raw K3 output for raw-text engines (None in chat mode).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    id: str = Field(default_factory=lambda: "chatcmpl-" + uuid.uuid4().hex[:24])
    object: Literal["chat.completion"] = "chat.completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str = ""
    choices: list[Choice]
    usage: Usage = Field(default_factory=Usage)
    truncated: bool = False
    dropped_tool_calls: list[str] = Field(default_factory=list)
    raw_text: str | None = None

    @property
    def message(self) -> AssistantMessage:
        """The assistant message of the first choice."""
        return self.choices[0].message

    @property
    def finish_reason(self) -> Literal["stop", "length", "tool_calls"]:
        """The first choice's finish reason."""
        return self.choices[0].finish_reason

    def to_openai(self) -> dict[str, Any]:
        """The plain OpenAI chat-completion dict (reasoning under both field names)."""
        from ..types import dump_message

        return {
            "id": self.id,
            "object": self.object,
            "created": self.created,
            "model": self.model,
            "choices": [
                {"index": c.index, "message": dump_message(c.message), "finish_reason": c.finish_reason}
                for c in self.choices
            ],
            "usage": self.usage.model_dump(),
        }


@dataclass(frozen=True, slots=True)
class Completed:
    """The last event of every stream: the whole completion."""

    completion: ChatCompletion
    type: Literal["completed"] = field(default="completed", init=False)


StreamEvent: TypeAlias = Event | Completed
"""What :meth:`Engine.stream` yields: the parser's events, then one :class:`Completed`."""


class PromptCache:
    """Per-conversation incremental prompt encoders (see :class:`~kimik3.PromptEncoder`).

    Hand the same cache with every request of one growing conversation (the Agent does) and
    raw-text engines tokenize only the new turn. Safe to share between engines with the same
    tokenizer; one conversation per cache.
    """

    def __init__(self) -> None:
        self._encoders: dict[tuple[int, str, bool, str | None], PromptEncoder] = {}
        self.media = MediaIndex()
        """The conversation's image and video parts, scanned once per message."""

    def encoder(
        self, tokenizer: K3Tokenizer, tools: Sequence[ToolSpec], thinking: bool, effort: str | None
    ) -> PromptEncoder:
        """The encoder for these settings (created on first use; at most a few are kept)."""
        key = (id(tokenizer), _tools_key(tools), thinking, effort)
        enc = self._encoders.get(key)
        if enc is None or enc.tokenizer is not tokenizer:
            if len(self._encoders) >= 4:  # settings changed mid-conversation: drop the oldest
                self._encoders.pop(next(iter(self._encoders)))
            enc = PromptEncoder(tokenizer, tools, thinking=thinking, thinking_effort=effort)
            self._encoders[key] = enc
        return enc


def _tools_key(tools: Sequence[ToolSpec]) -> str:
    return "\x1f".join(t.model_dump_json(exclude_none=True) for t in tools)


@dataclass
class ChatRequest:
    """One model call, engine-independent.

    Attributes:
        messages: the conversation (typed; dicts are converted).
        tools: declared tools.
        reasoning_effort: ``"low"``, ``"high"``, ``"max"`` (default) or ``"none"`` (thinking off).
        tool_choice: ``"auto"`` (None), ``"required"`` or ``"none"``.
        response_format: ``{"type": "json_object"}`` or ``{"type": "json_schema", ...}``.
        temperature, top_p: sampling; K3's card evaluates with 1.0 / 0.95.
        max_tokens: completion budget (None: the engine's default / the context's remainder).
        seed: sampling seed, where the engine supports one.
        extra: engine-specific extras (vLLM SamplingParams fields; extra JSON body fields).
        prompt_cache: a :class:`PromptCache` for incremental encoding across turns.
        prompt_ids: an already encoded K3 prompt: raw-text engines send it instead of encoding
            ``messages`` ("generate from an encoded prompt"); ``thinking`` must match the prompt's
            generation prefix. Chat-mode endpoints cannot take ids and raise EngineError.
    """

    messages: list[Message]
    tools: list[ToolSpec] = field(default_factory=list)
    reasoning_effort: ReasoningEffort = "max"
    tool_choice: Any = None
    response_format: Any = None
    temperature: float = 1.0
    top_p: float = 0.95
    max_tokens: int | None = None
    seed: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    prompt_cache: PromptCache | None = None
    prompt_ids: Sequence[int] | None = None

    def __post_init__(self) -> None:
        self.messages = to_messages(self.messages)
        self.tools = to_tool_specs(self.tools)
        if self.reasoning_effort not in ("low", "high", "max", "none"):
            raise InvalidEffortError(
                f"reasoning_effort must be low, high, max or none, got {self.reasoning_effort!r}"
            )

    @property
    def thinking(self) -> bool:
        """Thinking is on unless ``reasoning_effort == "none"``."""
        return self.reasoning_effort != "none"

    @property
    def thinking_effort(self) -> str | None:
        """The effort directive to render (None when thinking is off)."""
        return None if self.reasoning_effort == "none" else self.reasoning_effort

    def encoding_options(self) -> dict[str, Any]:
        """The K3 encoder's options for this request (``thinking``, ``thinking_effort``,
        ``tool_choice``, ``response_format``), as keyword arguments of
        :func:`~kimik3.formats.k3.encode_segments` / :func:`~kimik3.formats.k3.render`."""
        return {
            "thinking": self.thinking,
            "thinking_effort": self.thinking_effort,
            "tool_choice": self.tool_choice,
            "response_format": self.response_format,
        }


class Engine(ABC):
    """An async K3 backend. Use it as ``async with engine: ...`` or call :meth:`aclose`.

    Implementations: :class:`~kimik3.engines.RemoteEngine`, :class:`~kimik3.engines.VLLMEngine`,
    :class:`~kimik3.ScriptedEngine`.
    """

    model: str = ""

    @abstractmethod
    def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        """Stream one completion: parser events, then one :class:`Completed`.

        Cancelling the consumer (or closing the iterator) aborts the request on the engine.

        Raises:
            APIStatusError and subclasses, APIConnectionError, EngineError: engine failures.
        """

    async def complete(self, request: ChatRequest) -> ChatCompletion:
        """Run one completion to the end (non-streaming)."""
        stream = self.stream(request)
        try:
            async for event in stream:
                if isinstance(event, Completed):
                    return event.completion
        finally:
            await _aclose(stream)
        raise EngineError(f"{type(self).__name__}.stream() ended without a completion")

    async def aclose(self) -> None:  # noqa: B027 - optional hook, nothing to release by default
        """Release the engine's resources (idempotent)."""

    async def __aenter__(self) -> Engine:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


async def _aclose(it: AsyncIterator[Any]) -> None:
    close = getattr(it, "aclose", None)
    if close is not None:
        await close()


@dataclass(frozen=True, slots=True)
class RawChunk:
    """A piece of raw K3 output from a raw-text engine.

    Attributes:
        text: newly generated text (markers included, contiguous).
        finish_reason: set on the last chunk (``"stop"`` or ``"length"``).
        completion_tokens: total generated tokens so far, when the engine knows.
        prompt_tokens: the prompt's token count, when the engine reports it.
        prompt_token_ids: the prompt ids as the engine received them, when it echoes them
            (vLLM does): proof that kimik3's exact ids reached the engine.
    """

    text: str = ""
    finish_reason: str | None = None
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    prompt_token_ids: Sequence[int] | None = None


class RawTextEngine(Engine):
    """Base of engines that generate raw K3 text from kimik3-encoded prompt ids.

    Subclasses implement :meth:`generate`. :meth:`stream` encodes the request with the K3
    tokenizer (incrementally when the request carries a :class:`PromptCache`), generates, and
    parses with :class:`~kimik3.formats.k3.StreamParser`.

    Args:
        tokenizer: the K3 tokenizer, or a model directory to load it from, or a zero-argument
            callable returning one (loaded on first use).
    """

    def __init__(
        self, tokenizer: K3Tokenizer | str | os.PathLike[str] | Callable[[], K3Tokenizer] | None = None
    ) -> None:
        self._tokenizer_source = tokenizer
        self._tokenizer: K3Tokenizer | None = tokenizer if isinstance(tokenizer, K3Tokenizer) else None

    @property
    def tokenizer(self) -> K3Tokenizer:
        """The K3 tokenizer (loaded on first use).

        Raises:
            TokenizerError: no tokenizer configured, or its files are missing.
        """
        if self._tokenizer is None:
            src = self._tokenizer_source
            if src is None:
                from .._exceptions import TokenizerError

                raise TokenizerError(f"{type(self).__name__} needs a K3 tokenizer (a model directory)")
            if isinstance(src, K3Tokenizer):
                self._tokenizer = src
            elif callable(src):
                self._tokenizer = src()
            else:
                self._tokenizer = K3Tokenizer.from_pretrained(src)
        return self._tokenizer

    def encode(self, request: ChatRequest) -> Sequence[int]:
        """The K3 prompt ids of a request (incremental with ``request.prompt_cache``)."""
        tok = self.tokenizer
        if request.prompt_cache is not None:
            enc = request.prompt_cache.encoder(tok, request.tools, request.thinking, request.thinking_effort)
            return enc.encode(
                request.messages, tool_choice=request.tool_choice, response_format=request.response_format
            )
        return tok.encode_messages(request.messages, request.tools, **request.encoding_options())

    @abstractmethod
    def generate(
        self, prompt_ids: Sequence[int], request: ChatRequest, *, images: Sequence[Any] = ()
    ) -> AsyncIterator[RawChunk]:
        """Generate raw K3 text for an encoded prompt ("generate from an encoded prompt").

        Args:
            prompt_ids: K3 prompt token ids (e.g. from :meth:`encode`).
            request: sampling settings (temperature, top_p, max_tokens, seed, extra).
            images: prepared images for the prompt's image placeholders, in order.

        Yields:
            :class:`RawChunk` s; the last one carries ``finish_reason``. Stops at
            ``<|end_of_msg|>``. Cancellation aborts the request.
        """

    def prepare_images(self, parts: Sequence[ImagePart]) -> list[Any]:
        """The images to send with the prompt, one per image part in prompt order (subclasses
        that take images override)."""
        if parts:
            raise EngineError(f"{type(self).__name__} does not accept images")
        return []

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        index = request.prompt_cache.media if request.prompt_cache is not None else None
        media = media_scan(request.messages, index)
        if media.has_video:
            request = replace(request, messages=expand_videos(request.messages))
            media = media_scan(request.messages)
        images = self.prepare_images(media.images)
        prompt_ids = request.prompt_ids if request.prompt_ids is not None else self.encode(request)
        parser = StreamParser(request.thinking)
        raw: list[str] = []
        finish_reason: str | None = None
        completion_tokens: int | None = None
        prompt_tokens: int | None = None
        gen = self.generate(prompt_ids, request, images=images)
        try:
            async for chunk in gen:
                if chunk.text:
                    raw.append(chunk.text)
                    for event in parser.feed(chunk.text):
                        yield event
                if chunk.finish_reason is not None:
                    finish_reason = chunk.finish_reason
                if chunk.completion_tokens is not None:
                    completion_tokens = chunk.completion_tokens
                if chunk.prompt_tokens is not None:
                    prompt_tokens = chunk.prompt_tokens
        finally:
            await _aclose(gen)
        for event in parser.finish(finish_reason):
            yield event
        text = "".join(raw)
        if completion_tokens is None:
            completion_tokens = self._count(text)
        if prompt_tokens is None:  # the engine did not say: count the expanded image blocks
            prompt_tokens = len(prompt_ids) + self._image_tokens(media.images)
        usage = Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)
        usage.total_tokens = usage.prompt_tokens + usage.completion_tokens
        yield Completed(completion_from_parse(parser.result(), usage=usage, model=self.model, raw_text=text))

    def _image_tokens(self, parts: Sequence[ImagePart]) -> int:
        """Extra prompt tokens of the images: each placeholder token becomes a whole block."""
        if not parts:
            return 0
        tok = self._tokenizer
        extra = 0
        for part in parts:
            url = part.image_url.url
            if url.startswith(("http://", "https://")):
                continue  # size unknown until the server fetches it
            prepared = prepare_request_image(url)
            width, height = prepared.size
            extra += image_prompt_tokens(tok, width, height, prepared.token_count) - 1
        return extra

    def _count(self, text: str) -> int:
        if self._tokenizer is None and self._tokenizer_source is None:
            return estimate_tokens(text)  # no tokenizer: a documented estimate
        return len(self.tokenizer.encode_control(text)) if text else 0


def completion_from_parse(
    parsed: ParsedOutput, *, usage: Usage, model: str, raw_text: str | None
) -> ChatCompletion:
    """Build the completion for a parsed K3 output."""
    return ChatCompletion(
        model=model,
        choices=[Choice(message=parsed.to_message(), finish_reason=parsed.finish_reason)],
        usage=usage,
        truncated=parsed.truncated,
        dropped_tool_calls=[c.name for c in parsed.incomplete_tool_calls],
        raw_text=raw_text,
    )
