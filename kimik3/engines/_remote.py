"""RemoteEngine: an OpenAI-compatible endpoint (self-hosted vLLM / SGLang, or a hosted API).

Chat mode (default): the server renders K3's prompt and parses its output; kimik3 sends every
past assistant message with ``reasoning_content`` AND ``reasoning`` (vLLM reads only the latter)
and its tool_calls as received, reads replies from either field, and checks the server's parse
(marker text leaking into reasoning or content is re-parsed with kimik3's K3 parser; a tool call
whose arguments are not a JSON object is dropped, never replayed).

Raw mode: kimik3 encodes the prompt to K3 token ids itself, calls ``/v1/completions`` with the ids
(``skip_special_tokens=false``, ``spaces_between_special_tokens=false``, stop at
``<|end_of_msg|>``) and parses the text with kimik3's parser — the path that survives a server
whose K3 parser is old or buggy. Completions endpoints take no images: a raw-mode request with
images goes through chat mode instead (with a warning), or raises when ``force_raw=True``.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal

import openai

from .._exceptions import (
    APIConnectionError,
    APIStatusError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    ContextLengthExceededError,
    EngineError,
    NotFoundError,
    RateLimitError,
    ServiceUnavailableError,
)
from ..formats.k3 import (
    CLOSE,
    END_OF_MSG,
    OPEN,
    SEP,
    ContentDelta,
    ReasoningDelta,
    StreamParser,
    ToolCallArgumentsDelta,
    ToolCallDone,
    ToolCallIncomplete,
    ToolCallStarted,
)
from ..formats.k3._media import expand_videos, media_scan, upload_url
from ..formats.k3._parse import ParsedToolCall
from ..formats.k3._tokenizer import K3Tokenizer
from ..types import AssistantMessage, FunctionCall, ImagePart, Message, ToolCall, dump_message
from ._base import (
    ChatCompletion,
    ChatRequest,
    Choice,
    Completed,
    RawChunk,
    RawTextEngine,
    StreamEvent,
    Usage,
)

__all__ = ["RemoteEngine", "map_openai_error"]

log = logging.getLogger("kimik3.engines.remote")

_MARKERS = (OPEN, CLOSE, SEP, END_OF_MSG)
_CONTEXT_PHRASES = ("maximum context length", "context length", "too long", "max_model_len", "context window")


def map_openai_error(e: Exception) -> Exception:
    """Translate an ``openai`` exception into kimik3's typed error (others are returned as is)."""
    if isinstance(e, openai.APITimeoutError):
        return APITimeoutError(f"request timed out: {e}")
    if isinstance(e, openai.APIConnectionError):
        return APIConnectionError(f"cannot reach the endpoint: {e}")
    if isinstance(e, openai.APIStatusError):
        status = e.status_code
        body = e.body
        message = f"{status}: {e.message}"
        retry_after = _retry_after(e.response.headers if e.response is not None else {})
        cls: type[APIStatusError]
        if status == 400 or status == 422:
            text = str(e.message).lower() + " " + json.dumps(body, default=str).lower()
            cls = ContextLengthExceededError if any(p in text for p in _CONTEXT_PHRASES) else BadRequestError
        elif status in (401, 403):
            cls = AuthenticationError
        elif status == 404:
            cls = NotFoundError
        elif status == 429:
            cls = RateLimitError
        elif status >= 500:
            cls = ServiceUnavailableError
        else:
            cls = APIStatusError
        return cls(message, status_code=status, body=body, retry_after=retry_after)
    return e


def _retry_after(headers: Mapping[str, str]) -> float | None:
    for key in ("retry-after-ms", "retry-after"):
        value = headers.get(key)
        if value is None:
            continue
        try:
            seconds = float(value)
        except ValueError:
            continue
        return seconds / 1000 if key.endswith("ms") else seconds
    return None


class RemoteEngine(RawTextEngine):
    """A K3 engine over ``openai.AsyncOpenAI``.

    Args:
        base_url: the endpoint, e.g. ``"http://127.0.0.1:8000/v1"`` (default:
            ``$OPENAI_BASE_URL``).
        api_key: the key (default ``$OPENAI_API_KEY``, else ``"EMPTY"`` for servers without auth).
        model: the served model name (default: the first model ``/v1/models`` lists).
        mode: ``"chat"`` (server renders and parses) or ``"raw"`` (kimik3 encodes and parses;
            needs ``tokenizer``).
        force_raw: in raw mode, raise instead of falling back to chat mode for image requests.
        tokenizer: the K3 tokenizer (or its model directory) for raw mode.
        timeout: seconds for a whole request (default 600); ``connect_timeout`` for connecting.
        headers: extra HTTP headers.
        client: a ready ``openai.AsyncOpenAI`` (then base_url, api_key, timeouts and headers are
            ignored).

    Raises:
        EngineError: raw mode without a tokenizer (when first used).
    """

    def __init__(
        self,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        model: str | None = None,
        mode: Literal["chat", "raw"] = "chat",
        force_raw: bool = False,
        tokenizer: K3Tokenizer | str | os.PathLike[str] | None = None,
        timeout: float = 600.0,
        connect_timeout: float = 10.0,
        headers: Mapping[str, str] | None = None,
        client: openai.AsyncOpenAI | None = None,
    ) -> None:
        super().__init__(tokenizer)
        if mode not in ("chat", "raw"):
            raise ValueError(f"mode must be 'chat' or 'raw', got {mode!r}")
        if mode == "raw" and tokenizer is None:
            raise EngineError("RemoteEngine raw mode needs the K3 tokenizer (tokenizer=<model dir>)")
        self.mode = mode
        self.force_raw = force_raw
        self._model = model
        self._client = client or openai.AsyncOpenAI(
            base_url=base_url,
            api_key=api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY",
            timeout=openai.Timeout(timeout, connect=connect_timeout),
            max_retries=0,  # kimik3.Client retries, with kimik3's typed errors
            default_headers=dict(headers or {}),
        )

    @property
    def model(self) -> str:  # type: ignore[override]
        return self._model or ""

    async def _model_name(self) -> str:
        if self._model is None:
            try:
                models = await self._client.models.list()
            except openai.OpenAIError as e:
                raise map_openai_error(e) from e
            if not models.data:
                raise EngineError("the endpoint serves no models; pass model=...")
            self._model = models.data[0].id
        return self._model

    async def aclose(self) -> None:
        await self._client.close()

    # -- dispatch ----------------------------------------------------------------------------

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        if self.mode == "raw":
            index = request.prompt_cache.media if request.prompt_cache is not None else None
            if not media_scan(request.messages, index).images:
                async for event in super().stream(request):
                    yield event
                return
            if self.force_raw:
                raise EngineError(
                    "OpenAI-compatible completions endpoints take no images; this raw-mode request "
                    "has images (use mode='chat' or drop force_raw=True)"
                )
            log.warning("kimik3: request has images; completions take none, so it goes through chat mode")
        async for event in self._stream_chat(request):
            yield event

    # -- raw mode ----------------------------------------------------------------------------

    async def generate(
        self, prompt_ids: Sequence[int], request: ChatRequest, *, images: Sequence[Any] = ()
    ) -> AsyncIterator[RawChunk]:
        if images:
            raise EngineError("OpenAI-compatible completions endpoints take no images")
        model = await self._model_name()
        extra_body: dict[str, Any] = {
            "skip_special_tokens": False,
            "spaces_between_special_tokens": False,
            "stop_token_ids": [self.tokenizer.end_of_msg_id],
            **request.extra,
        }
        try:
            stream = await self._client.completions.create(
                model=model,
                prompt=list(prompt_ids),
                max_tokens=request.max_tokens,
                temperature=request.temperature,
                top_p=request.top_p,
                seed=request.seed,
                stream=True,
                stream_options={"include_usage": True},
                extra_body=extra_body,
            )
            async with stream:
                async for chunk in stream:
                    usage = chunk.usage
                    if chunk.choices:
                        choice = chunk.choices[0]
                        echoed = _field(choice, "prompt_token_ids")
                        yield RawChunk(
                            text=choice.text or "",
                            finish_reason=choice.finish_reason,
                            prompt_token_ids=echoed if isinstance(echoed, list) else None,
                        )
                    if usage is not None:
                        yield RawChunk(
                            prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens
                        )
        except openai.OpenAIError as e:
            raise map_openai_error(e) from e

    # -- chat mode ---------------------------------------------------------------------------

    def _chat_messages(self, messages: Sequence[Message]) -> list[dict[str, Any]]:
        out = []
        for msg in messages:
            d = dump_message(msg)  # assistant reasoning under both names
            if isinstance(msg.content, list) and any(isinstance(p, ImagePart) for p in msg.content):
                d["content"] = [_upload_part(p) for p in d["content"]]
            out.append(d)
        return out

    def _chat_kwargs(self, request: ChatRequest, model: str) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "model": model,
            "messages": self._chat_messages(request.messages),
            "temperature": request.temperature,
            "top_p": request.top_p,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        extra_body: dict[str, Any] = {}
        if request.max_tokens is not None:
            kwargs["max_tokens"] = request.max_tokens
        if request.seed is not None:
            kwargs["seed"] = request.seed
        if request.tools:
            kwargs["tools"] = [t.model_dump(mode="json", exclude_none=True) for t in request.tools]
        if request.tool_choice is not None:
            kwargs["tool_choice"] = request.tool_choice
        if request.response_format is not None:
            kwargs["response_format"] = request.response_format
        if request.thinking:
            kwargs["reasoning_effort"] = request.reasoning_effort
        else:  # self-hosted servers turn thinking off through the chat template (spec §4)
            extra_body["chat_template_kwargs"] = {"thinking": False}
        extra_body.update(request.extra)
        if extra_body:
            kwargs["extra_body"] = extra_body
        return kwargs

    async def _stream_chat(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        if request.prompt_ids is not None:
            raise EngineError("chat mode cannot send an encoded prompt; use mode='raw' for prompt_ids")
        index = request.prompt_cache.media if request.prompt_cache is not None else None
        if media_scan(request.messages, index).has_video:
            request = replace(request, messages=expand_videos(request.messages))
        model = await self._model_name()
        check = _ChatChecker(request.thinking)
        usage = Usage()
        finish_reason: str | None = None
        try:
            stream = await self._client.chat.completions.create(**self._chat_kwargs(request, model))
            async with stream:
                async for chunk in stream:
                    if chunk.usage is not None:
                        usage = Usage(
                            prompt_tokens=chunk.usage.prompt_tokens,
                            completion_tokens=chunk.usage.completion_tokens,
                            total_tokens=chunk.usage.total_tokens,
                        )
                    if not chunk.choices:
                        continue
                    choice = chunk.choices[0]
                    delta = choice.delta
                    reasoning = _field(delta, "reasoning_content") or _field(delta, "reasoning")
                    for event in check.reasoning(reasoning or ""):
                        yield event
                    for event in check.content(delta.content or ""):
                        yield event
                    for tc in delta.tool_calls or ():
                        for event in check.tool_call_delta(tc.index, tc.id, tc.function):
                            yield event
                    if choice.finish_reason is not None:
                        finish_reason = choice.finish_reason
        except openai.OpenAIError as e:
            raise map_openai_error(e) from e
        for event in check.finish(finish_reason):
            yield event
        yield Completed(check.completion(finish_reason, usage=usage, model=model))


def _field(obj: Any, name: str) -> Any:
    value = getattr(obj, name, None)
    if value is None and getattr(obj, "model_extra", None):
        value = obj.model_extra.get(name)
    return value


def _upload_part(part: dict[str, Any]) -> dict[str, Any]:
    """An image part as uploaded: prepared the way K3 sees images (see ``_media.upload_url``)."""
    if part.get("type") != "image_url":
        return part
    return {**part, "image_url": {**part["image_url"], "url": upload_url(part["image_url"]["url"])}}


class _ChatChecker:
    """Maps a chat-mode stream to kimik3 events and checks it.

    The server's reasoning and content deltas each run through a K3 StreamParser (starting in the
    think and response channel): text without markers passes through unchanged; marker text a
    server parser leaked is parsed (tool calls found there are recovered). Server tool-call
    arguments must form a JSON object, else the call is dropped (never replayed into history).
    """

    def __init__(self, thinking: bool) -> None:
        self._reasoning = StreamParser(thinking=True) if thinking else None
        self._content = StreamParser(thinking=False)
        self._calls: dict[int, dict[str, Any]] = {}
        self._order: list[int] = []
        self._recovered: list[ParsedToolCall] = []
        self._reasoning_text: list[str] = []
        self._content_text: list[str] = []

    def _route(self, events: list[Any]) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        for ev in events:
            if isinstance(ev, ReasoningDelta):
                self._reasoning_text.append(ev.delta)
                out.append(ev)
            elif isinstance(ev, ContentDelta):
                self._content_text.append(ev.delta)
                out.append(ev)
            # recovered tool events are emitted at the end, after the server's own calls
        return out

    def reasoning(self, text: str) -> list[StreamEvent]:
        if not text:
            return []
        if self._reasoning is None:  # thinking off but the server sent reasoning: keep it
            self._reasoning_text.append(text)
            return [ReasoningDelta(text)]
        return self._route(self._reasoning.feed(text))

    def content(self, text: str) -> list[StreamEvent]:
        return self._route(self._content.feed(text)) if text else []

    def tool_call_delta(self, index: int, call_id: str | None, function: Any) -> list[StreamEvent]:
        slot = self._calls.get(index)
        out: list[StreamEvent] = []
        name = getattr(function, "name", None) if function is not None else None
        args = getattr(function, "arguments", None) if function is not None else None
        if slot is None:
            slot = self._calls[index] = {"id": call_id or "", "name": name or "", "args": []}
            self._order.append(index)
            if slot["id"] and slot["name"]:
                slot["started"] = True
                out.append(ToolCallStarted(index, slot["id"], slot["name"]))
        else:
            slot["id"] = slot["id"] or call_id or ""
            slot["name"] = slot["name"] or name or ""
            if not slot.get("started") and slot["id"] and slot["name"]:
                slot["started"] = True
                out.append(ToolCallStarted(index, slot["id"], slot["name"]))
        if args:
            slot["args"].append(args)
            if slot.get("started"):
                out.append(ToolCallArgumentsDelta(index, slot["id"], args))
        return out

    def finish(self, finish_reason: str | None) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        for parser in (self._reasoning, self._content):
            if parser is None:
                continue
            out.extend(self._route(parser.feed("")))
            parser.finish("stop")
            # calls a server parser left as marker text (e.g. after a missing think close)
            self._recovered.extend(parser.result().tool_calls)
        self.final_calls: list[ToolCall] = []
        self.dropped: list[str] = []
        for index in self._order:
            slot = self._calls[index]
            raw = "".join(slot["args"]) or "{}"
            call_id = slot["id"] or f"call_{index}"
            try:
                value = json.loads(raw)
            except json.JSONDecodeError:
                value = None
            if not isinstance(value, dict) or not slot["name"]:
                self.dropped.append(slot["name"])
                out.append(ToolCallIncomplete(index, call_id, slot["name"]))
                continue
            if not slot.get("started"):
                out.append(ToolCallStarted(index, call_id, slot["name"]))
                out.append(ToolCallArgumentsDelta(index, call_id, raw))
            out.append(ToolCallDone(index, call_id, slot["name"], value, raw))
            self.final_calls.append(ToolCall(id=call_id, function=FunctionCall(name=slot["name"], arguments=raw)))
        base = (max(self._order) + 1) if self._order else 0
        for k, call in enumerate(self._recovered):
            index = base + k
            out.append(ToolCallStarted(index, call.id, call.name))
            out.append(ToolCallArgumentsDelta(index, call.id, call.arguments_json))
            out.append(ToolCallDone(index, call.id, call.name, call.arguments, call.arguments_json))
            self.final_calls.append(call.to_tool_call())
        return out

    def completion(self, finish_reason: str | None, *, usage: Usage, model: str) -> ChatCompletion:
        reasoning = "".join(self._reasoning_text) if (self._reasoning is not None or self._reasoning_text) else None
        message = AssistantMessage(
            content="".join(self._content_text),
            reasoning_content=reasoning,
            tool_calls=self.final_calls or None,
        )
        if self.final_calls:
            reason: Literal["stop", "length", "tool_calls"] = "tool_calls"
        elif finish_reason == "length":
            reason = "length"
        else:
            reason = "stop"
        if usage.total_tokens == 0:
            usage.total_tokens = usage.prompt_tokens + usage.completion_tokens
        return ChatCompletion(
            model=model,
            choices=[Choice(message=message, finish_reason=reason)],
            usage=usage,
            truncated=finish_reason == "length",
            dropped_tool_calls=self.dropped,
        )
