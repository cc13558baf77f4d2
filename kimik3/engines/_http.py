"""What an OpenAI-compatible endpoint sends, below the chat/completions semantics: error statuses
and error objects mapped into kimik3's error tree, ``Retry-After``, and the body of a streaming
answer read as server-sent events under a total deadline (decisions: ``docs/chat-mode.md``).
"""

from __future__ import annotations

import codecs
import datetime
import email.utils
import json
import math
import re
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any, Literal

import anyio

from .._exceptions import (
    APIConnectionError,
    APIResponseValidationError,
    APIStatusError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    EngineError,
    NotFoundError,
    RateLimitError,
    ServiceUnavailableError,
)
from .._text import redact_url
from ._overflow import overflow_error

_NEWLINE = re.compile(r"\r\n|\r|\n")
_KEEPALIVE_EVENTS = frozenset({"ping", "keep-alive", "keepalive", "heartbeat"})
"""SSE ``event:`` names gateways use for keep-alives (Anthropic-style ``event: ping``): skipped."""

__all__ = [
    "error_from_payload", "is_error_payload", "read_events", "retry_after", "status_error", "transport_error", "within",
]

# Error ``type`` / ``code`` words servers put in error objects, by the HTTP status they stand for
# (OpenAI, vLLM / SGLang exception class names, Anthropic-style gateways), lower case, letters only.
_WORD_STATUS = {
    "invalidrequesterror": 400, "badrequesterror": 400, "badrequest": 400, "contextlengthexceeded": 400,
    "authenticationerror": 401, "invalidapikey": 401, "permissionerror": 403, "permissiondenied": 403,
    "notfounderror": 404, "notfound": 404, "modelnotfound": 404,
    "ratelimitexceeded": 429, "ratelimiterror": 429, "ratelimit": 429, "insufficientquota": 429,
    "toomanyrequests": 429, "servererror": 500, "internalservererror": 500, "internalerror": 500,
    "serviceunavailableerror": 503, "serviceunavailable": 503, "overloadederror": 503, "overloaded": 503,
    "timeout": 504, "gatewaytimeout": 504,
}  # fmt: skip


def status_error(
    status: int,
    message: str,
    *,
    body: object = None,
    retry_after: float | None = None,
    response: object = None,
    request_id: str | None = None,
) -> APIStatusError:
    """The typed error for an error status (HTTP, or the ``code`` of an in-band error object).

    400 / 422 -> :class:`BadRequestError` (:class:`ContextLengthExceededError` or
    :class:`RequestTooLargeError`, with the limit the server stated, when the text says so:
    :func:`~kimik3.engines._overflow.overflow_error`), 413 -> :class:`RequestTooLargeError`,
    401 / 403 -> :class:`AuthenticationError`, 404 -> :class:`NotFoundError`, 429 ->
    :class:`RateLimitError`, 5xx -> :class:`ServiceUnavailableError`, else :class:`APIStatusError`.
    """
    too_big = overflow_error(status, message, message + " " + json.dumps(body, default=str), body=body,
                             retry_after=retry_after, response=response, request_id=request_id)
    if too_big is not None:
        return too_big
    cls: type[APIStatusError]
    if status in (400, 422):
        cls = BadRequestError
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
        f"{status}: {message}",
        status_code=status,
        body=body,
        retry_after=retry_after,
        response=response,
        request_id=request_id,
    )


def error_from_payload(payload: Mapping[str, Any], *, retry_after: float | None = None) -> APIStatusError:
    """The typed error for an error object a server sent in a 200 stream.

    Shapes: ``{"error": {"message", "type", "code"}}`` (OpenAI, newer vLLM), ``{"error": "text"}``,
    ``{"object": "error", "message", "type", "code"}`` (vLLM / SGLang ``ErrorResponse``) and
    ``{"detail": ...}`` (FastAPI's ``HTTPException``, see :func:`is_error_payload`). The
    status is the ``code`` when it is an HTTP status (int or digits), else the one ``type`` /
    ``code`` names (``"rate_limit_exceeded"`` -> 429, ``"ServiceUnavailableError"`` -> 503, ...),
    else 500: an unexplained failure of the server mid-answer (retryable).
    """
    err: Any = payload.get("error", payload)
    if not isinstance(err, Mapping):
        err = {"message": str(err)}
    message = err.get("message")
    if (not isinstance(message, str) or not message) and payload.get("detail"):
        detail = payload["detail"]
        message = detail if isinstance(detail, str) else json.dumps(detail, default=str)[:500]
    if not isinstance(message, str) or not message:
        message = json.dumps(dict(payload), default=str)[:500]
    status = 0
    for value in (err.get("code"), err.get("status"), err.get("type"), payload.get("code"), payload.get("detail")):
        if isinstance(value, int) and not isinstance(value, bool) and 400 <= value <= 599:
            status = value
        elif isinstance(value, str) and re.fullmatch(r"\s*[45][0-9][0-9]\s*", value):
            status = int(value)
        elif isinstance(value, str):
            status = _WORD_STATUS.get(re.sub("[^a-z]", "", value.lower()), 0)
        if status:
            break
    return status_error(status or 500, message, body=dict(payload), retry_after=retry_after)


def is_error_payload(payload: Mapping[str, Any]) -> bool:
    """Whether a JSON object a server sent is an error object, not an answer: a truthy ``error``,
    ``"object": "error"``, or a ``detail`` without ``choices`` (FastAPI's error body)."""
    return (
        bool(payload.get("error"))
        or payload.get("object") == "error"
        or (bool(payload.get("detail")) and "choices" not in payload)
    )


def retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds a server asked to wait: ``retry-after-ms``, or ``Retry-After`` as seconds or as an
    HTTP date (RFC 9110 §10.2.3; a date in the past gives 0). None when absent or unreadable.

    Args:
        headers: response headers (case-insensitive mapping, e.g. ``httpx.Headers``).
        now: the current time as a Unix timestamp (default ``time.time()``), for dates.
    """
    value = headers.get("retry-after-ms")
    if value is not None:
        seconds = _number(value)
        if seconds is not None:
            return seconds / 1000
    value = headers.get("retry-after")
    if value is None:
        return None
    seconds = _number(value)
    if seconds is not None:
        return seconds
    try:
        date = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if date.tzinfo is None:  # the obsolete forms (asctime, a "-0000" zone): RFC 9110 reads them as UTC
        date = date.replace(tzinfo=datetime.timezone.utc)
    return max(0.0, date.timestamp() - (time.time() if now is None else now))


def _number(value: str) -> float | None:
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def transport_error(e: BaseException, url: str | None = None) -> EngineError | None:
    """kimik3's error for an httpx-family transport exception (timeouts -> APITimeoutError,
    others -> APIConnectionError naming ``url``, the endpoint's base URL, redacted), None for anything
    else. openai-python uses ``httpx`` or ``httpx2`` depending on its version; both name their
    classes alike."""
    if type(e).__module__.split(".")[0] not in ("httpx", "httpx2", "httpcore", "httpcore2"):
        return None
    names = {c.__name__ for c in type(e).__mro__}
    url = redact_url(url) if url is not None else None
    if "TimeoutException" in names:
        return APITimeoutError(f"the endpoint stopped sending (idle timeout): {e!r}", url=url)
    if names & {"TransportError", "RequestError", "NetworkError", "ProtocolError"}:
        return APIConnectionError(f"the connection to {url or 'the endpoint'} failed: {e!r}", url=url)
    return None


Event = tuple[Literal["chunk", "response", "error", "done"], Any]
"""``("chunk", dict)`` an SSE event's JSON data; ``("response", dict)`` a non-streaming JSON body;
``("error", dict)`` an SSE ``event: error``; ``("done", None)`` the ``[DONE]`` sentinel."""


async def read_events(response: Any, *, deadline: float) -> AsyncIterator[Event]:
    """The events of a streaming answer, read from an ``openai`` streaming response.

    A JSON body (a server that ignored ``stream: true``) is one ``"response"``; ``text/html`` is
    an error page. A leading BOM is dropped; comments and named keep-alive events (``event: ping``)
    are skipped; an event cut off by the end of the body is
    dropped (the WHATWG rule), unless it is complete JSON or ``[DONE]``.

    Args:
        response: ``openai``'s ``AsyncAPIResponse`` (``headers``, ``iter_lines()``, ``read()``).
        deadline: ``anyio.current_time()`` by which the whole answer must have arrived.

    Raises:
        APIResponseValidationError: an HTML page, a body that is not JSON where JSON must be, or a
            body with no server-sent events in it.
        APITimeoutError: the deadline passed.
    """
    ctype = str(response.headers.get("content-type", "")).lower()
    if "html" in ctype:
        body = (await within(deadline, response.read())).decode("utf-8", "replace")
        raise APIResponseValidationError(f"the endpoint answered with an HTML page ({ctype})", body=body[:500])
    if ctype.startswith("application/json"):
        raw = await within(deadline, response.read())
        yield "response", _json(raw.decode("utf-8-sig", "replace"), "the JSON body")
        return
    data: list[str] = []
    name = ""
    junk = ""
    seen = False
    async for line in _lines(response, deadline):
        if line == "":
            if data and name.lower() in _KEEPALIVE_EVENTS:
                seen = True  # a named keep-alive (gateways): not an answer chunk, whatever its data
            elif data:
                seen = True
                yield _event(name, "\n".join(data))
            data, name = [], ""
            continue
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "data":
            data.append(value)
        elif field == "event":
            name = value
        elif field and field not in ("id", "retry") and not junk:
            junk = line  # not SSE; kept for the error message
    if data and name.lower() not in _KEEPALIVE_EVENTS:  # the body ended inside an event: keep it when whole
        text = "\n".join(data)
        if text.strip() == "[DONE]" or _is_json(text):
            seen = True
            yield _event(name, text)
    if not seen and junk:
        raise APIResponseValidationError(f"the answer has no server-sent events: {junk[:200]!r}", body=junk[:500])


async def _lines(response: Any, deadline: float) -> AsyncIterator[str]:
    """The body's lines (ended by CRLF, LF or CR), one deadline-bounded read per network chunk.
    A long line is kept as its pieces until its end arrives (linear in its length)."""
    chunks = response.iter_bytes().__aiter__()
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    rest: list[str] = []  # the unfinished line's pieces; a CR ending one may be half a CRLF
    first = True
    while True:
        try:
            chunk = await within(deadline, chunks.__anext__())
        except StopAsyncIteration:
            break
        text = decoder.decode(chunk)
        if first and text:  # one leading BOM is not part of the first field's name (WHATWG)
            text, first = text.removeprefix("\ufeff"), False
        if "\n" not in text and "\r" not in text and not (rest and rest[-1].endswith("\r")):
            rest.append(text)
            continue
        text = "".join(rest) + text
        cr = text.endswith("\r")  # maybe the first half of a CRLF
        *lines, tail = _NEWLINE.split(text[:-1] if cr else text)
        rest = [tail + "\r"] if cr else [tail]
        for line in lines:
            yield line
    text = "".join(rest) + decoder.decode(b"", final=True)
    if text:  # the last line, ended by a CR or by nothing
        yield text[:-1] if text.endswith("\r") else text


def _event(name: str, data: str) -> Event:
    if data.strip() == "[DONE]":
        return "done", None
    if name == "error":  # its data: an error object, or the error in words
        value = json.loads(data) if _is_json(data) else data
        return "error", value if isinstance(value, Mapping) else {"error": {"message": str(value)}}
    value = _json(data, "a server-sent event's data")
    return "chunk", value


def _json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise APIResponseValidationError(f"{what} is not JSON: {text[:200]!r}", body=text[:500]) from None


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


async def within(deadline: float, awaitable: Any) -> Any:
    """``await awaitable``, raising APITimeoutError when ``deadline`` passes first."""
    with anyio.move_on_after(deadline - anyio.current_time()) as scope:
        return await awaitable
    if scope.cancelled_caught:
        raise APITimeoutError("the request exceeded its total timeout")
    raise AssertionError("unreachable")  # pragma: no cover
