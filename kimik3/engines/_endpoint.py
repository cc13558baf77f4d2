"""An OpenAI-compatible endpoint (self-hosted vLLM / SGLang, or a hosted API), shared by the two
engines that use one: :class:`~kimik3.engines.RemoteEngine` (chat completions: the server renders
and parses K3) and :class:`~kimik3.engines.RemoteCompletionsEngine` (completions: kimik3 does).

:class:`OpenAIEndpoint` owns the ``openai.AsyncOpenAI`` client, the served model's name and
context window (from ``/v1/models`` when not given), and the reading of a streaming answer
(:func:`~kimik3.engines._http.read_events`): an HTML page, a non-JSON event, an in-band error
object or ``event: error`` each raise a typed error, and ``timeout`` is a total deadline beside
``idle_timeout`` (decisions: ``docs/chat-mode.md``). :func:`openai_errors` is the one place
``openai`` exceptions become kimik3's typed errors. Each request carries its conversation's
routing key for a router in front of several replicas (:mod:`._routing`, docs/scale-out.md).

The context window of a served model is, in this order: the limit a server stated when a request
overflowed (it wins: a ``/v1/models`` may advertise 1,048,576 for a server that accepts 262,144,
catwalk #474), what ``/v1/models`` reports (``max_model_len``, vLLM and SGLang; ``context_length``,
Moonshot's APIs and OpenRouter), else what :mod:`kimik3._models` knows of the id on that host.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import AsyncExitStack, contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from .._exceptions import (
    APIConnectionError,
    APIResponseValidationError,
    APIStatusError,
    APITimeoutError,
    BadRequestError,
    ContextLengthExceededError,
    EngineError,
    KimiK3Error,
)
from .._models import MOONSHOT_HOSTS, host_of, model_info
from .._text import redact_secrets, redact_url, url_secrets
from ..types import Routing
from ._counts import MAX_COUNT, shown_int
from ._http import Event, is_error_payload, read_events, retry_after, status_error, transport_error, within
from ._routing import DEFAULT_ROUTING_HEADERS, check_routing_headers, names_user_field, routing_headers

if TYPE_CHECKING:
    import openai

__all__ = ["OpenAIEndpoint", "default_api_key", "map_openai_error", "openai_errors"]

log = logging.getLogger("kimik3.engines.remote")
E = TypeVar("E", bound=BaseException)


def map_openai_error(e: Exception, base_url: str | None = None) -> Exception:
    """Translate an ``openai`` exception into kimik3's typed error (others are returned as is).

    A connection error or timeout names ``base_url`` (the endpoint's; else the URL of the
    request that failed) in its message and :attr:`~kimik3.APIConnectionError.url`: a dead
    server reads ``cannot reach the endpoint http://127.0.0.1:8000/v1: Connection error.``
    The URL is redacted (:func:`kimik3._text.redact_url`: no ``user:pw@``, no ``?api-key=``
    value), as everywhere kimik3 shows one.
    Status errors keep the status, the decoded body, the response, its request id and the
    server's ``Retry-After`` (seconds or an HTTP date); the class follows
    :func:`~kimik3.engines._http.status_error`.
    """
    import openai  # at first use: openai's import is most of kimik3's start-up

    if isinstance(e, openai.APIConnectionError):  # APITimeoutError is one
        url = redact_url(base_url or _request_url(e))
        if isinstance(e, openai.APITimeoutError):
            return APITimeoutError(f"the request to {url} timed out: {e}", url=url)
        return APIConnectionError(f"cannot reach the endpoint {url}: {e}", url=url)
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


def _request_url(e: Exception) -> str:
    request = getattr(e, "request", None)
    url = getattr(request, "url", None)
    return str(url) if url is not None else "(unknown URL)"


@contextmanager
def openai_errors(base_url: str | None = None, api_key: str | None = None) -> Iterator[None]:
    """The one place ``openai`` exceptions become kimik3's typed errors (:func:`map_openai_error`;
    ``base_url``: the endpoint's, named by connection errors). The credentials ``base_url``
    carries and ``api_key`` (the one sent with it) are gone from the error's message and body,
    and from the ``openai`` error it is raised from, also where the server echoed them (its path
    and query, the key alone, its ``Authorization`` header)."""
    import openai

    also = _keys(api_key)
    try:
        yield
    except openai.OpenAIError as e:
        mapped = map_openai_error(_without_secrets(e, base_url, also), base_url)
        raise _without_secrets(mapped, base_url, also) from e


def _keys(api_key: str | None) -> tuple[str, ...]:
    """``api_key`` as a credential to hide (:func:`~kimik3._text.redact_secrets` keeps a placeholder)."""
    return (api_key,) if api_key else ()


def _scrubbed(value: Any, base_url: str | None, also: Sequence[str] = ()) -> Any:
    """``value`` (text, or JSON of dicts and lists) with the credentials of ``base_url`` and
    ``also`` (:func:`~kimik3._text.redact_secrets`) gone, where a server echoed the request (issue 40)."""
    if isinstance(value, str):
        return redact_secrets(value, base_url, also)
    if isinstance(value, Mapping):
        return {k: _scrubbed(v, base_url, also) for k, v in value.items()}
    return [_scrubbed(v, base_url, also) for v in value] if isinstance(value, list) else value


def _without_secrets(e: E, base_url: str | None, also: Sequence[str] = ()) -> E:
    """``e`` with the credentials of ``base_url`` and ``also`` gone from its message and body
    (:func:`_scrubbed`)."""
    if also or (base_url is not None and url_secrets(base_url)):
        e.args = tuple(_scrubbed(a, base_url, also) for a in e.args)
        for name in ("message", "body"):
            if isinstance(getattr(e, name, None), (str, dict, list)):
                setattr(e, name, _scrubbed(getattr(e, name), base_url, also))
    return e


def default_api_key(base_url: str | None) -> str:
    """The key an endpoint gets when none is given: ``$MOONSHOT_API_KEY`` (the name Moonshot's
    quickstart uses) first for Moonshot's API (``base_url``, else ``$OPENAI_BASE_URL``, on
    ``api.moonshot.ai`` / ``api.moonshot.cn``); else ``$OPENAI_API_KEY``; else ``"EMPTY"`` (a
    server without auth)."""
    url = base_url or os.environ.get("OPENAI_BASE_URL")
    if host_of(url) in MOONSHOT_HOSTS:
        return os.environ.get("MOONSHOT_API_KEY") or os.environ.get("OPENAI_API_KEY") or "EMPTY"
    return os.environ.get("OPENAI_API_KEY") or "EMPTY"


def _window(card: Any) -> Any:
    """A /v1/models entry's window: ``max_model_len`` (vLLM / SGLang) or ``context_length``
    (Moonshot's APIs, OpenRouter); None when absent."""
    extra = getattr(card, "model_extra", None) or {}
    for name in ("max_model_len", "context_length"):
        found = getattr(card, name, None) or extra.get(name)
        if found:
            return found
    return None


class OpenAIEndpoint:
    """One OpenAI-compatible endpoint: its client, its served model, and streaming answers read
    under a total deadline. Engines over the same server can share one (one connection pool).

    Args:
        base_url: the endpoint, e.g. ``"http://127.0.0.1:8000/v1"`` (default:
            ``$OPENAI_BASE_URL``).
        api_key: the key (default: :func:`default_api_key`: ``$MOONSHOT_API_KEY`` for Moonshot's
            API, else ``$OPENAI_API_KEY``, else ``"EMPTY"`` for servers without auth).
        model: the served model name (default: the first model ``/v1/models`` lists).
        timeout: seconds for a whole request, from sending it to the last byte of the answer
            (default 600): a total deadline, whatever the server trickles.
        idle_timeout: seconds the server may send nothing at all, headers or body, keep-alive
            comments included (default 300).
        connect_timeout: seconds for connecting (default 10).
        headers: extra HTTP headers.
        client: a ready ``openai.AsyncOpenAI`` (then base_url, api_key, idle / connect timeouts
            and headers are ignored; ``timeout`` still bounds each request).
        routing_headers: the headers that carry a request's routing key (its
            :class:`~kimik3.types.Routing`) to a router: default ``x-session-id``,
            ``x-smg-routing-key``, ``x-dynamo-session-id`` (:mod:`._routing`); None sends none.
        routing_user: also send the key as the body's OpenAI ``user`` field (default True).

    Attributes:
        client: the ``openai.AsyncOpenAI`` client (its own retries off: :class:`~kimik3.Client`
            retries, with kimik3's typed errors).
        refuses_both_reasoning_fields: learned from the server, never configured: True once it
            refused a message carrying ``reasoning_content`` and ``reasoning`` together (vLLM's
            Rust frontend); the chat engine then sends one name.
        models_unavailable: why ``GET /models`` failed (a 404, a 501, an HTML page), once it
            did; it is not asked again (None: it answered, or was not asked).
        refuses_user_field: learned from the server: True once it answered a request carrying
            ``user`` with a 400 naming the field; later requests go without it.

    Raises:
        UserError: ``routing_headers`` that are not a sequence of HTTP header names.
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
        routing_headers: Sequence[str] | None = DEFAULT_ROUTING_HEADERS,
        routing_user: bool = True,
    ) -> None:
        self.routing_headers = check_routing_headers(routing_headers)
        self.routing_user = routing_user
        self.refuses_user_field = False
        self._model = model
        self.timeout = timeout
        if client is None:
            import openai  # at first use: openai's import is most of kimik3's start-up

            client = openai.AsyncOpenAI(
                base_url=base_url,
                api_key=api_key or default_api_key(base_url),
                timeout=openai.Timeout(min(idle_timeout, timeout), connect=min(connect_timeout, timeout)),
                max_retries=0,  # kimik3.Client retries, with kimik3's typed errors
                default_headers=dict(headers or {}),
            )
        self.client = client
        self._windows: dict[str, int] = {}  # served model -> max_model_len, as /v1/models reported it
        self._limits: dict[str, int] = {}  # served model -> the window a server's overflow error stated
        self.refuses_both_reasoning_fields = False
        self.models_unavailable: str | None = None
        self._listed = False  # /v1/models answered once

    @property
    def base_url(self) -> str:
        """The endpoint's base URL as its client sends to it, without a trailing ``/``
        (``"http://127.0.0.1:8000/v1"``)."""
        return str(self.client.base_url).rstrip("/")

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
        """The context window of ``model`` as far as it is known without asking (see the module
        docstring: a stated limit, else ``/v1/models``' figure once asked, else
        :mod:`kimik3._models`' for the id); None when nothing says."""
        reported = self._windows.get(model)
        if reported is None:
            info = model_info(model, str(self.client.base_url))
            reported = info.window if info is not None else None
        limit = self._limits.get(model)
        if limit is None:
            return reported
        return limit if reported is None else min(limit, reported)

    def listed_window(self, model: str) -> int | None:
        """The window ``/v1/models`` stated for ``model`` (None: not asked yet, failed, the model
        is not listed, or its entry states none)."""
        return self._windows.get(model)

    def stated_limit(self, model: str) -> int | None:
        """The window a server's overflow error stated for ``model`` (None: none did)."""
        return self._limits.get(model)

    async def window(self, model: str) -> int | None:
        """The context window of ``model`` (:meth:`known_window`), ``/v1/models`` asked first,
        once. A ``/v1/models`` that fails (404, 501, an HTML page) is kept in
        :attr:`models_unavailable` and not asked again; the window is then what else is known
        (the caller says so: raw mode falls back on a default ``max_tokens`` with a warning).

        Raises:
            APIConnectionError: the endpoint cannot be reached at all.
        """
        if not self._listed and self.models_unavailable is None:
            try:
                await self._list_models()
            except (APIStatusError, APIResponseValidationError) as e:
                self.models_unavailable = f"{type(e).__name__}: {str(e)[:300]}"
        return self.known_window(model)

    def learn_limit(self, model: str, error: ContextLengthExceededError) -> None:
        """Keep the window ``error`` states for ``model`` (it shrinks, never grows), saying once
        when it is below what was known."""
        if not model or error.limit is None:
            return
        before = self.known_window(model)
        if model in self._limits and self._limits[model] <= error.limit:
            return
        self._limits[model] = error.limit
        if before is not None and error.limit < before:
            log.warning("kimik3: the server's limit for %r is %s tokens, not the %s it was taken to have; "
                        "using %s from now on", model, f"{error.limit:,}", f"{before:,}", f"{error.limit:,}")

    async def _list_models(self) -> Any:
        """``GET /models``, its answer checked: a body that is not a model list (an SSE stream,
        an HTML page, JSON of another shape) is an :class:`APIResponseValidationError`. The
        windows it reports are kept."""
        with openai_errors(self.base_url, self.client.api_key):
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
            if isinstance(found, int) and not isinstance(found, bool) and 0 < found <= MAX_COUNT:
                self._windows.setdefault(card.id, found)
            elif isinstance(found, int) and not isinstance(found, bool) and found > MAX_COUNT:
                log.warning("kimik3: /models gives %r a window of %s tokens, beyond any real one; not used",
                            card.id, shown_int(found))
        self._listed = True
        return models

    def routed(self, kwargs: dict[str, Any], routing: Routing | None) -> dict[str, Any]:
        """``kwargs`` with ``routing``'s headers (``extra_headers``) and ``user`` added, as this
        endpoint sends them (nothing without a routing)."""
        if routing is None:
            return kwargs
        out = dict(kwargs)
        headers = routing_headers(routing, self.routing_headers)
        if headers:
            out["extra_headers"] = {**out.get("extra_headers", {}), **headers}
        if self.routing_user and not self.refuses_user_field and "user" not in out:
            out["user"] = routing.key
        return out

    async def events(self, resource: Any, kwargs: dict[str, Any], routing: Routing | None = None
                     ) -> AsyncIterator[Event]:
        """POST a streaming request to ``resource`` (``client.chat.completions`` or
        ``client.completions``) and read its answer's events under the total deadline.

        ``routing`` goes out as :meth:`routed` says; a server that answers a 400 naming the body's
        ``user`` field gets the request again without it, and never the field again (a warning
        says so). A connection that breaks after something arrived ends the events (the answer
        is cut: the caller sees it truncated); before anything arrived it raises
        APIConnectionError.
        """
        sent = self.routed(kwargs, routing)
        try:
            async for event in self._events(resource, sent):
                yield event
        except BadRequestError as e:  # raised before any event: the server refused the request
            if "user" not in sent or "user" in kwargs or not names_user_field(e):
                raise
            log.warning("kimik3: the endpoint refuses the 'user' field; sending the routing key in headers only "
                        "from now on: %s", e)
            self.refuses_user_field = True  # learned of the server, not configured
            async for event in self._events(resource, self.routed(kwargs, routing)):
                yield event

    async def _events(self, resource: Any, kwargs: dict[str, Any]) -> AsyncIterator[Event]:
        deadline = anyio.current_time() + self.timeout
        received = False
        try:
            with openai_errors(self.base_url, self.client.api_key):
                async with AsyncExitStack() as stack:
                    request = resource.with_streaming_response.create(**kwargs)
                    response = await within(deadline, stack.enter_async_context(request))
                    also = _keys(self.client.api_key)
                    secret = bool(also or (self.base_url and url_secrets(self.base_url)))
                    async for kind, data in read_events(response, deadline=deadline):
                        received = True
                        if secret and isinstance(data, Mapping) and (kind == "error" or is_error_payload(data)):
                            data = _scrubbed(data, self.base_url, also)  # an error its reader raises: no credential
                        yield kind, data
        except ContextLengthExceededError as e:
            self.learn_limit(str(kwargs.get("model") or ""), e)
            raise
        except KimiK3Error:
            raise
        except Exception as e:
            mapped = transport_error(e, self.base_url)
            if mapped is None:
                raise
            if received and not isinstance(mapped, APITimeoutError):
                log.warning("kimik3: the connection broke mid-answer (%s); the answer is cut", mapped)
                return
            raise mapped from e
        if not received:
            shown = redact_url(self.base_url)
            raise APIConnectionError(f"the endpoint {shown} closed the answer before sending anything", url=shown)

    async def aclose(self) -> None:
        """Close the client (idempotent)."""
        await self.client.close()
