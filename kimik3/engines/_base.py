"""Engines are transports. A model call is an object.

- :class:`ModelCall`: what every ``stream()`` returns. An async context manager and an async
  iterator of events that, once consumed, holds its :class:`~kimik3.ChatCompletion` (as
  openai-python's ``AsyncStream`` and pydantic-ai's ``StreamedResponse`` do)::

      async with engine.stream(request) as call:
          async for event in call:
              ...
      completion = call.completion

  Leaving the ``async with`` early (or ``await call.aclose()``) aborts the request.
- :class:`TokenEngine`: engines that take K3 prompt ids and generate raw K3 text (embedded vLLM,
  a ``/v1/completions`` endpoint, the scripted engine). They implement one method,
  :meth:`TokenEngine.generate`; K3 itself (prompt ids, images, parsing, usage) is
  :class:`~kimik3.formats.k3.K3Codec`'s job.
- :class:`ChatEngine`: engines whose server renders K3's prompt and parses its output
  (OpenAI chat completions, :class:`~kimik3.engines.RemoteEngine`). They implement
  :meth:`ChatEngine.model_name` and :meth:`ChatEngine.chat_events` (one request's answer as
  events); every stream shape servers send is checked by
  :class:`~kimik3.engines._chat.ChatStreamChecker` (docs/chat-mode.md).
"""

from __future__ import annotations

import contextlib
import os
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, Callable, Sequence
from types import TracebackType
from typing import Any, TypeAlias

from .._exceptions import APIConnectionError, EngineError, MediaError, TokenizerError, UserError
from ..formats.k3 import EncodedPrompt, Event, K3Codec, K3Tokenizer, PromptCache, RawChunk, prepare_request_image
from ..types import ChatCompletion, ChatRequest, ImagePart
from ._chat import ChatStreamChecker
from ._http import Event as WireEvent
from ._http import error_from_payload
from ._profiles import no_cache_lifetime

__all__ = ["CallSource", "ChatEngine", "Engine", "ModelCall", "TokenEngine"]

CallSource: TypeAlias = AsyncGenerator["Event | ChatCompletion", None]
"""What an engine's call generator yields: events, then exactly one completion (last)."""

NO_COMPLETION = "the engine's stream ended without a completion"
"""The :class:`EngineError` of a call source that ended before its completion."""


class ModelCall:
    """One model call: an async context manager and an async iterator of :data:`Event` s that
    holds its :attr:`completion` once the events are consumed.

    Args:
        source: an async generator yielding the call's events and, last, its completion
            (kimik3's engines build it; the completion is never shown as an event).
    """

    def __init__(self, source: CallSource) -> None:
        self._source = source
        self._completion: ChatCompletion | None = None
        self._closed = False
        self._busy = False  # a task awaits the source's next event

    @property
    def source(self) -> CallSource:
        """The generator behind the call (its events, then its completion), for a consumer that
        takes the whole call over instead of iterating it (kimik3's Client and Agent: one layer per
        event, issue 44): it iterates the source to its completion and closes it (a source that
        ends first: ``EngineError(NO_COMPLETION)``); the call itself is then left unused."""
        return self._source

    @property
    def completion(self) -> ChatCompletion:
        """The completion (available once every event was consumed).

        Raises:
            UserError: the call's events were not consumed to the end.
        """
        if self._completion is None:
            raise UserError("the model call is not finished: consume its events (or await call.get()) first")
        return self._completion

    async def get(self) -> ChatCompletion:
        """Consume the remaining events and return the completion (again on a later call).

        Raises:
            UserError: the call was closed before its end, or another task is iterating it.
        """
        with contextlib.suppress(StopAsyncIteration):
            while True:
                await self.__anext__()
        return self.completion

    def __aiter__(self) -> ModelCall:
        """The call's events, once: a loop may stop (``break``) and a later one go on.

        Raises:
            UserError: the events were already consumed to the end (or the call closed); the
                completion is :attr:`completion`.
        """
        if self._closed:
            raise UserError(
                "this model call's events were already consumed (or the call was closed): they are "
                "iterated once; read call.completion"
            )
        return self

    async def __anext__(self) -> Event:
        if self._closed:
            raise StopAsyncIteration
        if self._busy:
            raise UserError("another task is iterating this model call: one consumer per call")
        self._busy = True
        try:
            item = await self._source.__anext__()
        except StopAsyncIteration:
            self._busy = False
            await self.aclose()
            raise EngineError(NO_COMPLETION) from None
        except BaseException:
            self._busy = False
            await self.aclose()
            raise
        self._busy = False
        if self._closed:  # closed by another task while this one awaited: close the source now
            await self._source.aclose()
            raise StopAsyncIteration
        if isinstance(item, ChatCompletion):
            self._completion = item
            await self.aclose()
            raise StopAsyncIteration
        return item

    async def aclose(self) -> None:
        """End the call; a request still running is aborted (idempotent). While another task
        awaits the call's next event, that task closes it when the event arrives."""
        if not self._closed:
            self._closed = True
            if not self._busy:
                await self._source.aclose()

    async def __aenter__(self) -> ModelCall:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


class Engine(ABC):
    """An async K3 backend. Use it as ``async with engine: ...`` or call :meth:`aclose`.

    Implementations: :class:`TokenEngine` s (:class:`~kimik3.engines.VLLMEngine`,
    :class:`~kimik3.engines.RemoteCompletionsEngine`, :class:`~kimik3.ScriptedEngine`) and
    :class:`ChatEngine` s (:class:`~kimik3.engines.RemoteEngine`).

    Attributes:
        model: the model name reported in completions.
        tokenizer: the K3 tokenizer when the engine has one loaded (token engines), else None;
            the agent counts tokens with it.
        allow_local_files: let image / video parts name local files (default False: only
            ``data:`` URLs, and http(s) image URLs where the engine passes them on). Set it
            (``engine.allow_local_files = True``) only when every message is trusted: a path in
            a message makes the client read that file and send it to the model.
    """

    model: str = ""
    allow_local_files: bool = False

    @property
    def tokenizer(self) -> K3Tokenizer | None:
        """The engine's K3 tokenizer, when it has one (None by default)."""
        return None

    @abstractmethod
    def stream(
        self,
        request: ChatRequest,
        *,
        prompt_cache: PromptCache | None = None,
        prompt_ids: Sequence[int] | None = None,
    ) -> ModelCall:
        """Start one completion: a :class:`ModelCall` of parser events ending in a completion.

        Leaving its ``async with`` early (or cancelling the consumer) aborts the request.

        Args:
            request: the OpenAI-shaped request.
            prompt_cache: K3's incremental encoding state of the conversation (token engines
                tokenize only its new messages; chat engines have no use for it).
            prompt_ids: an already encoded K3 prompt, sent instead of encoding ``request``'s
                messages (token engines; its generation prefix must match
                ``request.thinking``). Chat engines cannot take ids and raise UserError.

        Raises:
            APIStatusError and subclasses, APIConnectionError, EngineError: engine failures
            (raised while iterating).
        """

    def check_image(self, url: str) -> None:
        """Raise if this engine could never show the image at ``url`` to the model: it is
        prepared the way the engine will prepare it (kept in a cache, so the call does not do the
        work twice; blocking: run it in a worker thread). http(s) URLs are left to the server.

        Raises:
            MediaError: over the decompression-bomb limit, corrupt, or a local path while
                :attr:`allow_local_files` is off.
            OSError: a local path that cannot be read.
        """
        if not url.startswith(("http://", "https://")):
            prepare_request_image(url, allow_local_files=self.allow_local_files)

    async def model_name(self) -> str:
        """The model's name, asked of the server when it is not known yet (an endpoint's first
        ``/v1/models`` entry); by default :attr:`model`.

        Raises:
            APIConnectionError, APIStatusError, EngineError: the server could not say (remote engines).
        """
        return self.model

    async def context_window(self) -> int | None:
        """The context window the engine serves, in tokens, as far as it can tell (a limit a
        server's overflow error stated, ``/v1/models``, vLLM's ``max_model_len``); None when it
        cannot (the default). An :class:`~kimik3.Agent` plans compaction for it unless its
        ``ContextPolicy`` sets one (issue 41)."""
        return None

    async def complete(
        self,
        request: ChatRequest,
        *,
        prompt_cache: PromptCache | None = None,
        prompt_ids: Sequence[int] | None = None,
    ) -> ChatCompletion:
        """Run one completion to the end (non-streaming); arguments as :meth:`stream`."""
        async with self.stream(request, prompt_cache=prompt_cache, prompt_ids=prompt_ids) as call:
            return await call.get()

    async def aclose(self) -> None:  # noqa: B027 - optional hook, nothing to release by default
        """Release the engine's resources (idempotent)."""

    async def __aenter__(self) -> Engine:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


TokenizerSource: TypeAlias = "K3Tokenizer | str | os.PathLike[str] | Callable[[], K3Tokenizer] | None"


class TokenEngine(Engine):
    """Base of engines that generate raw K3 text from kimik3-encoded prompt ids.

    Subclasses implement :meth:`generate` (and :meth:`prepare_images` when they take images);
    :meth:`stream` is the codec around it: encode, generate, decode.

    Args:
        tokenizer: the K3 tokenizer, or a model directory to load it from, or a zero-argument
            callable returning one (loaded on first use).
    """

    def __init__(self, tokenizer: TokenizerSource = None) -> None:
        self._tokenizer_source = tokenizer
        self._tokenizer: K3Tokenizer | None = tokenizer if isinstance(tokenizer, K3Tokenizer) else None
        self._codec: K3Codec | None = None

    @property
    def tokenizer(self) -> K3Tokenizer | None:
        """The K3 tokenizer (loaded on first use); None when the engine was given none.

        Raises:
            TokenizerError: the tokenizer's files are missing or inconsistent.
        """
        if self._tokenizer is None and self._tokenizer_source is not None:
            return self.load_tokenizer()
        return self._tokenizer

    def load_tokenizer(self) -> K3Tokenizer:
        """The K3 tokenizer, loaded on first use.

        Raises:
            TokenizerError: no tokenizer configured, or its files are missing.
        """
        if self._tokenizer is None:
            src = self._tokenizer_source
            if src is None:
                raise TokenizerError(f"{type(self).__name__} needs a K3 tokenizer (a model directory)")
            if isinstance(src, K3Tokenizer):
                self._tokenizer = src
            elif callable(src):
                self._tokenizer = src()
            else:
                self._tokenizer = K3Tokenizer.from_pretrained(src)
        return self._tokenizer

    @property
    def codec(self) -> K3Codec:
        """The K3 codec over this engine's tokenizer (loaded on first use; None-tokenizer
        engines count tokens by estimate); built once, again only when the tokenizer or
        :attr:`allow_local_files` changed."""
        tok, local = self.tokenizer, self.allow_local_files
        codec = self._codec
        if codec is None or codec.tokenizer is not tok or codec.allow_local_files != local:
            codec = self._codec = K3Codec(tok, allow_local_files=local)
        return codec

    @abstractmethod
    def generate(
        self, prompt_ids: Sequence[int], request: ChatRequest, *, images: Sequence[Any] = ()
    ) -> AsyncGenerator[RawChunk, None]:
        """Generate raw K3 text for an encoded prompt ("generate from an encoded prompt").

        Args:
            prompt_ids: K3 prompt token ids (e.g. ``self.codec.encode(request).ids``).
            request: sampling settings (temperature, top_p, max_tokens, seed, extra).
            images: prepared images for the prompt's image placeholders, in order.

        Yields:
            :class:`~kimik3.formats.k3.RawChunk` s; the last one carries ``finish_reason``.
            Stops at ``<|end_of_msg|>``. Closing the generator aborts the request.
        """

    def prepare_images(self, parts: Sequence[ImagePart]) -> list[Any]:
        """The images to send with the prompt, one per image part in prompt order (subclasses
        that take images override).

        Raises:
            EngineError: this engine takes no images.
        """
        if parts:
            raise EngineError(f"{type(self).__name__} does not accept images")
        return []

    def stream(
        self,
        request: ChatRequest,
        *,
        prompt_cache: PromptCache | None = None,
        prompt_ids: Sequence[int] | None = None,
    ) -> ModelCall:
        if request.settings.prompt_cache_lifetime is not None:  # kimik3 encodes: no hosted API behind it
            raise UserError(no_cache_lifetime(f"{type(self).__name__} (a token engine)",
                                              request.settings.prompt_cache_lifetime))
        return ModelCall(self._call(request, prompt_cache, prompt_ids))

    def encode(
        self,
        request: ChatRequest,
        *,
        prompt_cache: PromptCache | None = None,
        prompt_ids: Sequence[int] | None = None,
    ) -> EncodedPrompt:
        """The prompt of ``request`` (:meth:`K3Codec.encode`; incremental with ``prompt_cache``,
        as it is with ``prompt_ids``)."""
        return self.codec.encode(request, cache=prompt_cache, prompt_ids=prompt_ids)

    async def _call(
        self, request: ChatRequest, prompt_cache: PromptCache | None, prompt_ids: Sequence[int] | None
    ) -> CallSource:
        prompt = self.encode(request, prompt_cache=prompt_cache, prompt_ids=prompt_ids)
        for part in prompt.images:  # the prompt is encoded here: nothing would fetch the URL
            url = part.image_url.url
            if url.startswith(("http://", "https://")):
                raise MediaError(
                    f"{type(self).__name__} encodes the prompt locally and fetches no image URL ({url[:60]!r}): "
                    "download the image and send a data: URL (only a remote chat server fetches http(s) images)"
                )
        images = self.prepare_images(prompt.images)
        decoder = self.codec.decoder(request, prompt)
        gen = self.generate(prompt.ids, prompt.request, images=images)
        try:
            async for chunk in gen:
                for event in decoder.feed(chunk):
                    yield event
        finally:
            await gen.aclose()
        for event in decoder.finish():
            yield event
        yield decoder.completion(self.model)


class ChatEngine(Engine):
    """Base of engines whose server renders K3's prompt and parses its output (OpenAI chat
    completions): kimik3 sends the OpenAI-shaped request and checks the server's answer with
    :class:`~kimik3.engines._chat.ChatStreamChecker` (every stream shape servers send, calls a
    server parser leaked into text recovered; docs/chat-mode.md).

    Subclasses implement :meth:`model_name` and :meth:`chat_events`; :meth:`stream` is the
    checker around them. Videos reach :meth:`chat_events` already sampled into timestamped frames.
    """

    @abstractmethod
    async def model_name(self) -> str:
        """The served model's name (asked of the server when needed)."""

    @abstractmethod
    def chat_events(self, request: ChatRequest, model: str) -> AsyncGenerator[WireEvent, None]:
        """Send ``request`` and yield its answer: ``("chunk", dict)`` per streamed chunk,
        ``("response", dict)`` for a whole non-streaming body, ``("error", dict)`` for an
        in-band error event, ``("done", None)`` for the end marker.

        Raises:
            APIStatusError and subclasses, APIConnectionError, APITimeoutError: the request failed.
        """

    def stream(
        self,
        request: ChatRequest,
        *,
        prompt_cache: PromptCache | None = None,
        prompt_ids: Sequence[int] | None = None,
    ) -> ModelCall:
        return ModelCall(self._call(request, prompt_ids))

    async def _call(self, request: ChatRequest, prompt_ids: Sequence[int] | None) -> CallSource:
        if prompt_ids is not None:
            raise UserError(f"{type(self).__name__} is a chat engine: the server encodes the prompt, so it cannot "
                            "send prompt_ids; use a token engine (RemoteCompletionsEngine, VLLMEngine)")
        request = K3Codec.expand(request, allow_local_files=self.allow_local_files)  # videos as timestamped frames
        model = await self.model_name()
        chat = ChatStreamChecker.for_request(request, model)
        done = False
        async with contextlib.aclosing(self.chat_events(request, model)) as events:
            async for kind, data in events:
                if kind == "done":
                    done = True
                    break
                if kind == "error":
                    raise error_from_payload(data)
                for event in chat.feed_response(data) if kind == "response" else chat.feed(data):
                    yield event
        if not chat.received:
            raise APIConnectionError("the endpoint ended the answer before sending any chunk")
        for event in chat.finish(done=done):
            yield event
        yield chat.completion()
