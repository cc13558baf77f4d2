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
from collections.abc import AsyncGenerator, Iterator, Mapping, Sequence
from contextlib import contextmanager
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
    UserError,
)
from ..formats.k3 import K3Codec, K3Tokenizer, RawChunk
from ..formats.k3._codec import media_scan
from ..formats.k3._media import upload_url
from ..types import ChatRequest, ImagePart, Message, dump_message
from ._base import CallSource, ModelCall, TokenEngine
from ._chat import ChatStreamChecker, field_of

__all__ = ["RemoteEngine", "map_openai_error", "openai_errors"]

log = logging.getLogger("kimik3.engines.remote")

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
        headers = e.response.headers if e.response is not None else {}
        retry_after = _retry_after(headers)
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
        return cls(
            message,
            status_code=status,
            body=body,
            retry_after=retry_after,
            response=e.response,
            request_id=e.request_id or headers.get("x-request-id"),
        )
    return e


@contextmanager
def openai_errors() -> Iterator[None]:
    """The one place ``openai`` exceptions become kimik3's typed errors (:func:`map_openai_error`)."""
    try:
        yield
    except openai.OpenAIError as e:
        raise map_openai_error(e) from e


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


class RemoteEngine(TokenEngine):
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
        UserError: an unknown ``mode``.
        EngineError: raw mode without a tokenizer; (when streaming) images with ``force_raw``.
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
            raise UserError(f"mode must be 'chat' or 'raw', got {mode!r}")
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
            with openai_errors():
                models = await self._client.models.list()
            if not models.data:
                raise EngineError("the endpoint serves no models; pass model=...")
            self._model = models.data[0].id
        return self._model

    async def aclose(self) -> None:
        await self._client.close()

    # -- dispatch ----------------------------------------------------------------------------

    def stream(self, request: ChatRequest) -> ModelCall:
        if self.mode == "raw":
            index = request.prompt_cache.media if request.prompt_cache is not None else None
            if not media_scan(request.messages, index).images:
                return super().stream(request)
            if self.force_raw:
                raise EngineError(
                    "OpenAI-compatible completions endpoints take no images; this raw-mode request "
                    "has images (use mode='chat' or drop force_raw=True)"
                )
            log.warning("kimik3: request has images; completions take none, so it goes through chat mode")
        return ModelCall(self._chat_call(request))

    # -- raw mode ----------------------------------------------------------------------------

    async def generate(
        self, prompt_ids: Sequence[int], request: ChatRequest, *, images: Sequence[Any] = ()
    ) -> AsyncGenerator[RawChunk, None]:
        if images:
            raise EngineError("OpenAI-compatible completions endpoints take no images")
        model = await self._model_name()
        extra_body: dict[str, Any] = {
            "skip_special_tokens": False,
            "spaces_between_special_tokens": False,
            "stop_token_ids": [self.load_tokenizer().end_of_msg_id],
            **request.extra,
        }
        with openai_errors():
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
                        echoed = field_of(choice, "prompt_token_ids")
                        yield RawChunk(
                            text=choice.text or "",
                            finish_reason=choice.finish_reason,
                            prompt_token_ids=echoed if isinstance(echoed, list) else None,
                        )
                    if usage is not None:
                        yield RawChunk(
                            prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens
                        )

    # -- chat mode ---------------------------------------------------------------------------

    def _chat_messages(self, messages: Sequence[Message]) -> list[dict[str, Any]]:
        out = []
        for msg in messages:
            d = dump_message(msg)  # assistant reasoning under both names
            if isinstance(msg.content, list) and any(isinstance(p, ImagePart) for p in msg.content):
                d["content"] = [_upload_part(p, self.allow_local_files) for p in d["content"]]
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
        else:  # self-hosted servers: thinking off via the chat template (docs/k3-format.md § Request parameters)
            extra_body["chat_template_kwargs"] = {"thinking": False}
        extra_body.update(request.extra)
        if extra_body:
            kwargs["extra_body"] = extra_body
        return kwargs

    async def _chat_call(self, request: ChatRequest) -> CallSource:
        if request.prompt_ids is not None:
            raise UserError("chat mode cannot send an encoded prompt; use mode='raw' for prompt_ids")
        request = K3Codec.expand(request, allow_local_files=self.allow_local_files)  # videos as timestamped frames
        model = await self._model_name()
        check = ChatStreamChecker(request.thinking, model)
        with openai_errors():
            stream = await self._client.chat.completions.create(**self._chat_kwargs(request, model))
            async with stream:
                async for chunk in stream:
                    for event in check.feed(chunk):
                        yield event
        for event in check.finish():
            yield event
        yield check.completion()


def _upload_part(part: dict[str, Any], allow_local_files: bool) -> dict[str, Any]:
    """An image part as uploaded: prepared the way K3 sees images (see ``_media.upload_url``)."""
    if part.get("type") != "image_url":
        return part
    url = upload_url(part["image_url"]["url"], allow_local_files=allow_local_files)
    return {**part, "image_url": {**part["image_url"], "url": url}}
