"""RemoteEngine: an OpenAI-compatible endpoint (self-hosted vLLM / SGLang, or a hosted API).

Chat mode (default): the server renders K3's prompt and parses its output; kimik3 sends every
past assistant message with ``reasoning_content`` AND ``reasoning`` (vLLM's Python frontend reads
only the latter, SGLang and hosted APIs the former; ``""`` for a tool-call turn without reasoning)
and its tool_calls as received; the server's answer goes through
:class:`~kimik3.engines._chat.ChatStreamChecker`, chat mode's checker. vLLM's Rust frontend
(``vllm-rs``, which vLLM's K3 recipe turns on with ``VLLM_USE_RUST_FRONTEND=1``) takes the two
names as aliases and refuses a message carrying both ("duplicate field `reasoning`"): on that 400
the engine switches to ``reasoning`` alone, says so in a warning, and sends the request again
(``reasoning_field`` picks one name from the start).

Raw mode: kimik3 encodes the prompt to K3 token ids itself, calls ``/v1/completions`` with the ids
(``skip_special_tokens=false``, ``spaces_between_special_tokens=false``, stop at
``<|end_of_msg|>``) and parses the text with kimik3's parser — the path that survives a server
whose K3 parser is old or buggy. Completions endpoints take no images: a raw-mode request with
images goes through chat mode instead (with a warning), or raises when ``force_raw=True``.

Both modes read the answer's body themselves (:func:`~kimik3.engines._http.read_events`): an HTML
page, a non-JSON event, an in-band error object or ``event: error`` each raise a typed error, and
``timeout`` is a total deadline beside ``idle_timeout`` (decisions: ``docs/chat-mode.md``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Mapping, Sequence
from contextlib import AsyncExitStack, contextmanager
from typing import Any, Literal

import anyio
import openai

from .._exceptions import (
    APIConnectionError,
    APIResponseValidationError,
    APITimeoutError,
    BadRequestError,
    ContextLengthExceededError,
    EngineError,
    UserError,
)
from ..formats.k3 import K3Codec, K3Tokenizer, RawChunk
from ..formats.k3._codec import media_scan
from ..formats.k3._media import upload_url
from ..types import ChatRequest, ImagePart, Message, dump_message
from ._base import CallSource, ModelCall, TokenEngine
from ._chat import ChatStreamChecker, prompt_details
from ._http import error_from_payload, is_error_payload, read_events, retry_after, status_error, transport_error, within

__all__ = ["RemoteEngine", "map_openai_error", "openai_errors"]

log = logging.getLogger("kimik3.engines.remote")

ReasoningField = Literal["both", "reasoning", "reasoning_content"]
_REASONING_FIELDS = ("both", "reasoning", "reasoning_content")
_DUPLICATE_REASONING = "duplicate field `reasoning"  # serde's words in vllm-rs's 400 (either name first)

def map_openai_error(e: Exception) -> Exception:
    """Translate an ``openai`` exception into kimik3's typed error (others are returned as is).

    Status errors keep the status, the decoded body, the response, its request id and the
    server's ``Retry-After`` (seconds or an HTTP date); the class follows
    :func:`~kimik3.engines._http.status_error`.
    """
    if isinstance(e, openai.APITimeoutError):
        return APITimeoutError(f"request timed out: {e}")
    if isinstance(e, openai.APIConnectionError):
        return APIConnectionError(f"cannot reach the endpoint: {e}")
    if isinstance(e, openai.APIStatusError):
        headers = e.response.headers if e.response is not None else {}
        message = str(e.message)
        if isinstance(e.body, str) and e.body and e.body not in message:  # a text body: openai keeps only the code
            message = f"{message} - {e.body[:2000]}"
        return status_error(
            e.status_code,
            message,
            body=e.body,
            retry_after=retry_after(headers),
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


def _window(card: Any) -> Any:
    """A /v1/models entry's ``max_model_len`` (a vLLM / SGLang extra field; None when absent)."""
    return getattr(card, "max_model_len", None) or (getattr(card, "model_extra", None) or {}).get("max_model_len")


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
        max_model_len: the served context window in tokens (default: ``max_model_len`` of the
            model in ``/v1/models``, which vLLM and SGLang report). Raw mode always sends an
            explicit ``max_tokens``: the request's, else what the prompt leaves of this window
            (a completions endpoint's own default is 16 tokens).
        timeout: seconds for a whole request, from sending it to the last byte of the answer
            (default 600): a total deadline, whatever the server trickles.
        idle_timeout: seconds the server may send nothing at all, headers or body, keep-alive
            comments included (default 300).
        connect_timeout: seconds for connecting (default 10).
        headers: extra HTTP headers.
        reasoning_field: the name(s) past assistant reasoning goes out under: ``"both"``
            (default: ``reasoning_content`` and ``reasoning``, read by every server kimik3 knows
            but vllm-rs, from which the engine falls back to ``"reasoning"`` by itself),
            ``"reasoning"`` or ``"reasoning_content"``. Read back as the attribute of that name.
        client: a ready ``openai.AsyncOpenAI`` (then base_url, api_key, idle / connect timeouts
            and headers are ignored; ``timeout`` still bounds each request).

    Raises:
        UserError: an unknown ``mode`` or ``reasoning_field``.
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
        max_model_len: int | None = None,
        timeout: float = 600.0,
        idle_timeout: float = 300.0,
        connect_timeout: float = 10.0,
        headers: Mapping[str, str] | None = None,
        reasoning_field: ReasoningField = "both",
        client: openai.AsyncOpenAI | None = None,
    ) -> None:
        super().__init__(tokenizer)
        if mode not in ("chat", "raw"):
            raise UserError(f"mode must be 'chat' or 'raw', got {mode!r}")
        if reasoning_field not in _REASONING_FIELDS:
            raise UserError(f"reasoning_field must be one of {', '.join(_REASONING_FIELDS)}; got {reasoning_field!r}")
        self.reasoning_field: ReasoningField = reasoning_field
        if mode == "raw" and tokenizer is None:
            raise EngineError("RemoteEngine raw mode needs the K3 tokenizer (tokenizer=<model dir>)")
        self.mode = mode
        self.force_raw = force_raw
        self._model = model
        self.timeout = timeout
        self.max_model_len = max_model_len
        self._client = client or openai.AsyncOpenAI(
            base_url=base_url,
            api_key=api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY",
            timeout=openai.Timeout(min(idle_timeout, timeout), connect=min(connect_timeout, timeout)),
            max_retries=0,  # kimik3.Client retries, with kimik3's typed errors
            default_headers=dict(headers or {}),
        )

    @property
    def model(self) -> str:  # type: ignore[override]
        return self._model or ""

    async def _model_name(self) -> str:
        if self._model is None:
            models = await self._list_models()
            if not models.data:
                raise EngineError("the endpoint serves no models; pass model=...")
            self._model = models.data[0].id
            if self.max_model_len is None:
                window = _window(models.data[0])
                self.max_model_len = window if isinstance(window, int) else None
        return self._model

    async def _list_models(self) -> Any:
        """``GET /models``, its answer checked: a body that is not a model list (an SSE stream,
        an HTML page, JSON of another shape) is an :class:`APIResponseValidationError`."""
        with openai_errors():
            try:
                models = await self._client.models.list()
                data = list(models.data)
                if not all(isinstance(getattr(m, "id", None), str) for m in data):
                    raise TypeError("an entry without a string 'id'")
            except (AttributeError, TypeError, ValueError, KeyError) as e:
                why = f"/models answered with something that is not a model list: {e}"
                raise APIResponseValidationError(why) from e
        return models

    async def _raw_max_tokens(self, model: str, prompt_tokens: int) -> int:
        """What the prompt leaves of the context window (raw mode's default ``max_tokens``).

        Raises:
            UserError: the window is unknown (the server does not report ``max_model_len``).
            ContextLengthExceededError: the prompt fills the window.
        """
        if self.max_model_len is None:
            models = await self._list_models()
            window = next((_window(m) for m in models.data if m.id == model), None)
            if not isinstance(window, int):
                raise UserError(
                    f"raw mode needs max_tokens or the context window: {model!r} reports no max_model_len "
                    "in /v1/models; pass RemoteEngine(max_model_len=...) or max_tokens"
                )
            self.max_model_len = window
        left = self.max_model_len - prompt_tokens
        if left < 1:
            raise ContextLengthExceededError(
                f"the prompt ({prompt_tokens} tokens) fills the context window ({self.max_model_len})",
                status_code=None,
            )
        return left

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
        max_tokens = request.max_tokens
        if max_tokens is None:
            max_tokens = await self._raw_max_tokens(model, len(prompt_ids))
        extra_body: dict[str, Any] = {
            "skip_special_tokens": False,
            "spaces_between_special_tokens": False,
            "stop_token_ids": [self.load_tokenizer().end_of_msg_id],
            **request.extra,
        }
        kwargs: dict[str, Any] = {
            "model": model,
            "prompt": list(prompt_ids),
            "max_tokens": max_tokens,
            "temperature": request.temperature,
            "top_p": request.top_p,
            "seed": request.seed,
            "stream": True,
            "stream_options": {"include_usage": True},
            "extra_body": extra_body,
        }
        async for kind, data in self._events(self._client.completions, kwargs):
            if kind == "done":
                return
            if kind == "error":
                raise error_from_payload(data)
            for chunk in _raw_chunks(data):
                yield chunk

    async def _events(self, resource: Any, kwargs: dict[str, Any]) -> AsyncIterator[tuple[str, Any]]:
        """POST a streaming request and read its answer's events under the total deadline.

        A connection that breaks after something arrived ends the events (the answer is cut:
        the caller sees it truncated); before anything arrived it raises APIConnectionError.
        """
        deadline = anyio.current_time() + self.timeout
        received = False
        try:
            async with AsyncExitStack() as stack:
                request = resource.with_streaming_response.create(**kwargs)
                response = await within(deadline, stack.enter_async_context(request))
                async for event in read_events(response, deadline=deadline):
                    received = True
                    yield event
        except openai.OpenAIError as e:
            raise map_openai_error(e) from e
        except Exception as e:
            mapped = transport_error(e)
            if mapped is None:
                raise
            if received and not isinstance(mapped, APITimeoutError):
                log.warning("kimik3: the connection broke mid-answer (%s); the answer is cut", mapped)
                return
            raise mapped from e
        if not received:
            raise APIConnectionError("the endpoint closed the answer before sending anything")

    # -- chat mode ---------------------------------------------------------------------------

    def _chat_messages(self, messages: Sequence[Message]) -> list[dict[str, Any]]:
        out = []
        for msg in messages:
            d = dump_message(msg)  # reasoning under both names ("" for a tool-call turn without)
            if self.reasoning_field != "both" and "reasoning" in d:
                d.pop("reasoning_content" if self.reasoning_field == "reasoning" else "reasoning")
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
        while True:
            chat = ChatStreamChecker.for_request(request, model)
            done = False
            try:
                async for kind, data in self._events(self._client.chat.completions, self._chat_kwargs(request, model)):
                    if kind == "done":
                        done = True
                        break
                    if kind == "error":
                        raise error_from_payload(data)
                    for event in chat.feed_response(data) if kind == "response" else chat.feed(data):
                        yield event
            except BadRequestError as e:
                if chat.received or self.reasoning_field != "both" or _DUPLICATE_REASONING not in str(e):
                    raise
                log.warning("kimik3: the endpoint refuses reasoning under both field names (vLLM's Rust "
                            "frontend); sending it as 'reasoning' only from now on: %s", e)
                self.reasoning_field = "reasoning"
                continue
            break
        if not chat.received:
            raise APIConnectionError("the endpoint ended the answer before sending any chunk")
        for event in chat.finish(done=done):
            yield event
        yield chat.completion()


def _raw_chunks(data: Any) -> list[RawChunk]:
    """The raw-mode chunks of one ``text_completion`` chunk (or a whole non-streaming body)."""
    if not isinstance(data, Mapping):
        raise APIResponseValidationError(f"a chunk that is not a JSON object: {data!r:.200}", body=str(data)[:500])
    if is_error_payload(data):
        raise error_from_payload(data)
    out: list[RawChunk] = []
    choices = data.get("choices") or []
    for choice in choices if isinstance(choices, list) else ():
        if not isinstance(choice, Mapping) or choice.get("index") not in (0, None):
            continue
        text = choice.get("text")
        if text is not None and not isinstance(text, str):
            raise APIResponseValidationError(f"'text' is not text: {text!r:.200}")
        echoed = choice.get("prompt_token_ids")
        reason = choice.get("finish_reason")
        out.append(
            RawChunk(
                text=text or "",
                finish_reason=reason if isinstance(reason, str) else None,
                prompt_token_ids=echoed if isinstance(echoed, list) else None,
            )
        )
    # usage where servers put it: choices[0].usage (Kimi's API) first, else the chunk's own
    usages = [c.get("usage") for c in choices if isinstance(c, Mapping) and c.get("index") in (0, None)]
    usage = next((u for u in (*usages, data.get("usage")) if isinstance(u, Mapping)), None)
    if usage is not None:
        details = prompt_details(usage)
        out.append(RawChunk(prompt_tokens=usage.get("prompt_tokens"), completion_tokens=usage.get("completion_tokens"),
                            cached_tokens=details.cached_tokens if details is not None else None))
    return out


def _upload_part(part: dict[str, Any], allow_local_files: bool) -> dict[str, Any]:
    """An image part as uploaded: prepared the way K3 sees images (see ``_media.upload_url``)."""
    if part.get("type") != "image_url":
        return part
    url = upload_url(part["image_url"]["url"], allow_local_files=allow_local_files)
    return {**part, "image_url": {**part["image_url"], "url": url}}
