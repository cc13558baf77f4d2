"""RemoteCompletionsEngine: raw mode, K3 behind an OpenAI-compatible ``/v1/completions`` endpoint.

kimik3 encodes the prompt to K3 token ids itself, sends the ids (``skip_special_tokens=false``,
``spaces_between_special_tokens=false``, stop at ``<|end_of_msg|>``) and parses the text with
kimik3's parser: the path that survives a server whose K3 parser is old or buggy. It is a
:class:`~kimik3.engines.TokenEngine` like the embedded vLLM engine, reading the answer with the
same :class:`~kimik3.engines.OpenAIEndpoint` as :class:`~kimik3.engines.RemoteEngine`.

Completions endpoints take no images: a request with images raises :class:`~kimik3.EngineError`.
To send those through the server's chat endpoint instead, compose the two engines explicitly:
:class:`ChatForImages` (``RemoteCompletionsEngine(...).with_chat_for_images()``) routes each
request with images to a :class:`~kimik3.engines.RemoteEngine` over the same endpoint, with a
warning, and every other request to the completions engine.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._defaults import RAW_MAX_TOKENS_FALLBACK
from .._exceptions import APIResponseValidationError, ContextLengthExceededError, EngineError, UserError
from ..formats.k3 import K3Tokenizer, PromptCache, RawChunk, ids_list
from ..formats.k3._codec import media_scan
from ..types import ChatRequest
from ._base import ChatEngine, Engine, ModelCall, TokenEngine, TokenizerSource
from ._counts import usage_count
from ._endpoint import OpenAIEndpoint
from ._http import error_from_payload, is_error_payload
from ._remote import RemoteEngine
from ._routing import DEFAULT_ROUTING_HEADERS
from ._usage import prompt_details

if TYPE_CHECKING:  # openai is imported by OpenAIEndpoint, at first use (start-up time)
    import openai

__all__ = ["ChatForImages", "RemoteCompletionsEngine"]

log = logging.getLogger("kimik3.engines.remote")


class RemoteCompletionsEngine(TokenEngine):
    """A K3 token engine over an OpenAI-compatible completions endpoint (raw mode).

    Args:
        tokenizer: the K3 tokenizer (or its model directory): kimik3 encodes the prompt.
        base_url, api_key, model, timeout, idle_timeout, connect_timeout, headers, client: the
            endpoint, as for :class:`~kimik3.engines.RemoteEngine`.
        max_model_len: the served context window in tokens (default: ``max_model_len`` of the
            model in ``/v1/models``, which vLLM and SGLang report). Every request carries an
            explicit ``max_tokens``: the request's, else what the prompt leaves of this window
            (a completions endpoint's own default is 16 tokens). A server whose overflow error
            states a smaller window shrinks it. Where ``/v1/models`` fails (404, 501, an HTML
            page) and nothing else knows the window, a request without ``max_tokens`` gets
            :data:`~kimik3._defaults.RAW_MAX_TOKENS_FALLBACK` (32,768), said once in a warning.
        endpoint: an :class:`~kimik3.engines.OpenAIEndpoint` shared with another engine (then
            the connection arguments are ignored).
        routing_headers, routing_user: what carries a request's routing key to a router, as for
            :class:`~kimik3.engines.RemoteEngine`.

    Attributes:
        endpoint: the :class:`~kimik3.engines.OpenAIEndpoint`.

    Raises:
        EngineError: no tokenizer; (when streaming) a request with images.
    """

    def __init__(
        self,
        *,
        tokenizer: TokenizerSource,
        base_url: str | None = None,
        api_key: str | None = None,
        model: str | None = None,
        max_model_len: int | None = None,
        timeout: float = 600.0,
        idle_timeout: float = 300.0,
        connect_timeout: float = 10.0,
        headers: Mapping[str, str] | None = None,
        client: openai.AsyncOpenAI | None = None,
        endpoint: OpenAIEndpoint | None = None,
        routing_headers: Sequence[str] | None = DEFAULT_ROUTING_HEADERS,
        routing_user: bool = True,
    ) -> None:
        if tokenizer is None:
            raise EngineError("RemoteCompletionsEngine needs the K3 tokenizer (tokenizer=<model dir>): "
                              "kimik3 encodes the prompt")
        super().__init__(tokenizer)
        self._max_model_len = max_model_len
        self._fallback_said = False
        self.endpoint = endpoint or OpenAIEndpoint(
            base_url=base_url, api_key=api_key, model=model, timeout=timeout, idle_timeout=idle_timeout,
            connect_timeout=connect_timeout, headers=headers, client=client, routing_headers=routing_headers,
            routing_user=routing_user,
        )  # fmt: skip

    @property
    def model(self) -> str:  # type: ignore[override]
        return self.endpoint.model

    async def model_name(self) -> str:
        return await self.endpoint.model_name()

    @property
    def max_model_len(self) -> int | None:
        """The context window: the one given, else what ``/v1/models`` reported (None before
        it was asked, or when the server does not say); never above a limit the server's
        overflow error stated."""
        model = self.endpoint.model
        if self._max_model_len is None:
            return self.endpoint.known_window(model) if model else None
        limit = self.endpoint.stated_limit(model) if model else None
        return self._max_model_len if limit is None else min(limit, self._max_model_len)

    async def context_window(self) -> int | None:
        """:attr:`max_model_len`, ``/v1/models`` asked once when it was not given.

        Raises:
            APIConnectionError: the endpoint cannot be reached.
        """
        if self._max_model_len is not None:
            return self.max_model_len
        return await self.endpoint.window(await self.model_name())

    def with_chat_for_images(self, **chat: Any) -> ChatForImages:
        """This engine, with requests that hold images sent through a
        :class:`~kimik3.engines.RemoteEngine` over the same endpoint (``chat``: its other
        arguments, e.g. ``reasoning_field``)."""
        return ChatForImages(self, RemoteEngine(endpoint=self.endpoint, **chat))

    async def aclose(self) -> None:
        await self.endpoint.aclose()

    async def _max_tokens(self, model: str, prompt_tokens: int) -> int:
        """What the prompt leaves of the context window (the default ``max_tokens``); where
        ``/v1/models`` failed and the window is unknown, :data:`RAW_MAX_TOKENS_FALLBACK` (one
        warning).

        Raises:
            UserError: the window is unknown (the server does not report ``max_model_len``).
            ContextLengthExceededError: the prompt fills the window.
        """
        window = self.max_model_len if self._max_model_len is not None else await self.endpoint.window(model)
        if window is None and self.endpoint.models_unavailable is not None:
            if not self._fallback_said:
                self._fallback_said = True
                log.warning("kimik3: GET /models failed (%s), so %r's context window is unknown; raw-mode requests "
                            "without max_tokens send max_tokens=%d (pass max_tokens, or "
                            "RemoteCompletionsEngine(max_model_len=...))", self.endpoint.models_unavailable, model,
                            RAW_MAX_TOKENS_FALLBACK)  # fmt: skip
            return RAW_MAX_TOKENS_FALLBACK
        if window is None:
            raise UserError(
                f"raw mode needs max_tokens or the context window: {model!r} reports no max_model_len "
                "in /v1/models; pass RemoteCompletionsEngine(max_model_len=...) or max_tokens"
            )
        left = window - prompt_tokens
        if left < 1:
            raise ContextLengthExceededError(
                f"the prompt ({prompt_tokens} tokens) fills the context window ({window})", status_code=None,
                limit=window, requested=prompt_tokens,
            )
        return left

    async def generate(
        self, prompt_ids: Sequence[int], request: ChatRequest, *, images: Sequence[Any] = ()
    ) -> AsyncGenerator[RawChunk, None]:
        if images:
            raise EngineError("OpenAI-compatible completions endpoints take no images")
        model = await self.endpoint.model_name()
        s = request.settings
        max_tokens = s.max_tokens
        if max_tokens is None:
            max_tokens = await self._max_tokens(model, len(prompt_ids))
        extra_body: dict[str, Any] = {
            "skip_special_tokens": False,
            "spaces_between_special_tokens": False,
            "stop_token_ids": [self.load_tokenizer().end_of_msg_id],
            **s.extra,
        }
        kwargs: dict[str, Any] = {
            "model": model,
            "prompt": ids_list(prompt_ids),
            "max_tokens": max_tokens,
            "temperature": s.temperature,
            "top_p": s.top_p,
            "seed": s.seed,
            "stream": True,
            "stream_options": {"include_usage": True},
            "extra_body": extra_body,
        }
        try:
            async for kind, data in self.endpoint.events(self.endpoint.client.completions, kwargs, request.routing):
                if kind == "done":
                    return
                if kind == "error":
                    raise error_from_payload(data)
                for chunk in _raw_chunks(data):
                    yield chunk
        except ContextLengthExceededError as e:  # an in-band overflow states the window too
            self.endpoint.learn_limit(model, e)
            raise

    def stream(
        self,
        request: ChatRequest,
        *,
        prompt_cache: PromptCache | None = None,
        prompt_ids: Sequence[int] | None = None,
    ) -> ModelCall:
        """As :meth:`TokenEngine.stream`.

        Raises:
            EngineError: the request has images (at once, before anything is sent).
        """
        if prompt_ids is None and media_scan(request.messages, prompt_cache.media if prompt_cache else None).images:
            raise EngineError(
                "OpenAI-compatible completions endpoints take no images; this request has images (send it "
                "through a chat engine: RemoteCompletionsEngine(...).with_chat_for_images())"
            )
        return super().stream(request, prompt_cache=prompt_cache, prompt_ids=prompt_ids)


class ChatForImages(Engine):
    """Two engines as one: requests with images go to ``chat`` (a warning says so), every other
    request to ``engine``. The documented way to run raw mode against a server whose completions
    endpoint takes no images (:meth:`RemoteCompletionsEngine.with_chat_for_images`).

    Args:
        engine: the token engine for requests without images.
        chat: the chat engine for requests with images.

    Attributes:
        allow_local_files: read and set on both engines.
    """

    def __init__(self, engine: TokenEngine, chat: ChatEngine) -> None:
        self.engine = engine
        self.chat = chat

    @property
    def model(self) -> str:  # type: ignore[override]
        return self.engine.model or self.chat.model

    async def model_name(self) -> str:
        return await self.engine.model_name()

    async def context_window(self) -> int | None:
        return await self.engine.context_window()

    @property
    def tokenizer(self) -> K3Tokenizer | None:
        return self.engine.tokenizer

    @property
    def allow_local_files(self) -> bool:
        return self.engine.allow_local_files

    @allow_local_files.setter
    def allow_local_files(self, value: bool) -> None:
        self.engine.allow_local_files = self.chat.allow_local_files = value

    def stream(
        self,
        request: ChatRequest,
        *,
        prompt_cache: PromptCache | None = None,
        prompt_ids: Sequence[int] | None = None,
    ) -> ModelCall:
        if prompt_ids is None and media_scan(request.messages, prompt_cache.media if prompt_cache else None).images:
            log.warning("kimik3: request has images; completions take none, so it goes through chat completions")
            return self.chat.stream(request)
        return self.engine.stream(request, prompt_cache=prompt_cache, prompt_ids=prompt_ids)

    async def aclose(self) -> None:
        await self.engine.aclose()
        await self.chat.aclose()


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
        out.append(RawChunk(prompt_tokens=usage_count(usage, "prompt_tokens"),
                            completion_tokens=usage_count(usage, "completion_tokens"),
                            cached_tokens=details.cached_tokens if details is not None else None))
    return out
