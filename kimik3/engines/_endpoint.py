"""An OpenAI-compatible endpoint (self-hosted vLLM / SGLang, or a hosted API), shared by the two
engines that use one: :class:`~kimik3.engines.RemoteEngine` (chat completions: the server renders
and parses K3) and :class:`~kimik3.engines.RemoteCompletionsEngine` (completions: kimik3 does).

:class:`OpenAIEndpoint` owns the ``openai.AsyncOpenAI`` client, the served model's name and
context window (from ``/v1/models`` when not given), and the reading of a streaming answer
(:func:`~kimik3.engines._http.read_events`): an HTML page, a non-JSON event, an in-band error
object or ``event: error`` each raise a typed error, and ``timeout`` is a total deadline beside
``idle_timeout`` (decisions: ``docs/chat-mode.md``). :func:`openai_errors` is the one place
``openai`` exceptions become kimik3's typed errors.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import AsyncExitStack, contextmanager
from typing import TYPE_CHECKING, Any

import anyio

from .._exceptions import APIConnectionError, APIResponseValidationError, APITimeoutError, EngineError, KimiK3Error
from ._http import Event, read_events, retry_after, status_error, transport_error, within

if TYPE_CHECKING:
    import openai

__all__ = ["OpenAIEndpoint", "map_openai_error", "openai_errors"]

log = logging.getLogger("kimik3.engines.remote")


def map_openai_error(e: Exception) -> Exception:
    """Translate an ``openai`` exception into kimik3's typed error (others are returned as is).

    Status errors keep the status, the decoded body, the response, its request id and the
    server's ``Retry-After`` (seconds or an HTTP date); the class follows
    :func:`~kimik3.engines._http.status_error`.
    """
    import openai  # at first use: openai's import is most of kimik3's start-up

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
    import openai

    try:
        yield
    except openai.OpenAIError as e:
        raise map_openai_error(e) from e


def _window(card: Any) -> Any:
    """A /v1/models entry's ``max_model_len`` (a vLLM / SGLang extra field; None when absent)."""
    return getattr(card, "max_model_len", None) or (getattr(card, "model_extra", None) or {}).get("max_model_len")


class OpenAIEndpoint:
    """One OpenAI-compatible endpoint: its client, its served model, and streaming answers read
    under a total deadline. Engines over the same server can share one (one connection pool).

    Args:
        base_url: the endpoint, e.g. ``"http://127.0.0.1:8000/v1"`` (default:
            ``$OPENAI_BASE_URL``).
        api_key: the key (default ``$OPENAI_API_KEY``, else ``"EMPTY"`` for servers without auth).
        model: the served model name (default: the first model ``/v1/models`` lists).
        timeout: seconds for a whole request, from sending it to the last byte of the answer
            (default 600): a total deadline, whatever the server trickles.
        idle_timeout: seconds the server may send nothing at all, headers or body, keep-alive
            comments included (default 300).
        connect_timeout: seconds for connecting (default 10).
        headers: extra HTTP headers.
        client: a ready ``openai.AsyncOpenAI`` (then base_url, api_key, idle / connect timeouts
            and headers are ignored; ``timeout`` still bounds each request).

    Attributes:
        client: the ``openai.AsyncOpenAI`` client (its own retries off: :class:`~kimik3.Client`
            retries, with kimik3's typed errors).
        refuses_both_reasoning_fields: learned from the server, never configured: True once it
            refused a message carrying ``reasoning_content`` and ``reasoning`` together (vLLM's
            Rust frontend); the chat engine then sends one name.
    """

    def __init__(
        self,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        model: str | None = None,
        timeout: float = 600.0,
        idle_timeout: float = 300.0,
        connect_timeout: float = 10.0,
        headers: Mapping[str, str] | None = None,
        client: openai.AsyncOpenAI | None = None,
    ) -> None:
        self._model = model
        self.timeout = timeout
        if client is None:
            import openai  # at first use: openai's import is most of kimik3's start-up

            client = openai.AsyncOpenAI(
                base_url=base_url,
                api_key=api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY",
                timeout=openai.Timeout(min(idle_timeout, timeout), connect=min(connect_timeout, timeout)),
                max_retries=0,  # kimik3.Client retries, with kimik3's typed errors
                default_headers=dict(headers or {}),
            )
        self.client = client
        self._windows: dict[str, int] = {}  # served model -> max_model_len, as /v1/models reported it
        self.refuses_both_reasoning_fields = False

    @property
    def model(self) -> str:
        """The served model's name ("" until it is known)."""
        return self._model or ""

    async def model_name(self) -> str:
        """The served model: the one given, else the first ``/v1/models`` lists (asked once).

        Raises:
            EngineError: the endpoint serves no models.
            APIResponseValidationError: ``/v1/models`` answered with something else than a list.
        """
        if self._model is None:
            models = await self._list_models()
            if not models.data:
                raise EngineError("the endpoint serves no models; pass model=...")
            self._model = models.data[0].id
        return self._model

    def known_window(self, model: str) -> int | None:
        """``max_model_len`` of ``model`` as ``/v1/models`` reported it (None: not asked yet, or
        not reported)."""
        return self._windows.get(model)

    async def window(self, model: str) -> int | None:
        """``max_model_len`` of ``model`` from ``/v1/models`` (asked once; None when the server
        does not report it)."""
        if model not in self._windows:
            await self._list_models()
        return self._windows.get(model)

    async def _list_models(self) -> Any:
        """``GET /models``, its answer checked: a body that is not a model list (an SSE stream,
        an HTML page, JSON of another shape) is an :class:`APIResponseValidationError`. The
        windows it reports are kept."""
        with openai_errors():
            try:
                models = await self.client.models.list()
                data = list(models.data)
                if not all(isinstance(getattr(m, "id", None), str) for m in data):
                    raise TypeError("an entry without a string 'id'")
            except (AttributeError, TypeError, ValueError, KeyError) as e:
                why = f"/models answered with something that is not a model list: {e}"
                raise APIResponseValidationError(why) from e
        for card in data:
            found = _window(card)
            if isinstance(found, int):
                self._windows.setdefault(card.id, found)
        return models

    async def events(self, resource: Any, kwargs: dict[str, Any]) -> AsyncIterator[Event]:
        """POST a streaming request to ``resource`` (``client.chat.completions`` or
        ``client.completions``) and read its answer's events under the total deadline.

        A connection that breaks after something arrived ends the events (the answer is cut:
        the caller sees it truncated); before anything arrived it raises APIConnectionError.
        """
        deadline = anyio.current_time() + self.timeout
        received = False
        try:
            with openai_errors():
                async with AsyncExitStack() as stack:
                    request = resource.with_streaming_response.create(**kwargs)
                    response = await within(deadline, stack.enter_async_context(request))
                    async for event in read_events(response, deadline=deadline):
                        received = True
                        yield event
        except KimiK3Error:
            raise
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

    async def aclose(self) -> None:
        """Close the client (idempotent)."""
        await self.client.close()
