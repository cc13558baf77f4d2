"""Errors that say a request is too big, read from their wording whatever the server: a token
overflow (:class:`~kimik3.ContextLengthExceededError`, with the window the server stated) or a
request over the server's byte limit (:class:`~kimik3.RequestTooLargeError`).

The wordings, as servers send them (each is a test in ``tests/engines/test_overflow_wording.py``,
with other numbers):

=====================================================================  ==============================
wording                                                                  server
=====================================================================  ==============================
``Your request exceeded model token limit: 262144 (requested: 263932)``  Moonshot's hosted API, Kimi
                                                                         Code API (CLIProxyAPI #4418;
                                                                         older: no ``requested``)
``total message size 2100954 exceeds limit 2097152``                     Moonshot's hosted API, in
                                                                         bytes (kimi-code #1862)
``This model's maximum context length is 4096 tokens. However, you       vLLM, OpenAI
requested 5000 tokens ...``
``... maximum context length is 4096 tokens and your request has 3500    vLLM (newer)
input tokens ...``
``The decoder prompt (length 5000) is longer than the maximum model      vLLM's engine
length of 4096``
``The input (5000 tokens) is longer than the model's context length      SGLang
(4096 tokens)``
HTTP 413 (``Request Entity Too Large``, ``Payload Too Large``)           proxies in front of any server
=====================================================================  ==============================

Numbers may carry thousands separators (``262,144``); a terminal's line wrap inside a word
(``re quested``) is read through. A number beyond :data:`~kimik3.engines._counts.MAX_COUNT`
(``2**53``) is not stated (``limit`` / ``size`` None) and is cut in the error's message.
"""

from __future__ import annotations

import re

from .._exceptions import APIStatusError, ContextLengthExceededError, RequestTooLargeError
from ._counts import cut_numbers, stated_count

__all__ = ["CONTEXT_PHRASES", "overflow_error", "parse_token_limit"]

CONTEXT_PHRASES = (
    "maximum context length", "context length", "context_length", "too long", "max_model_len", "context window",
    "model token limit", "maximum model length",
)  # fmt: skip
"""Lower-case phrases that make a 400 a :class:`~kimik3.ContextLengthExceededError`."""

_SIZE_PHRASES = ("total message size", "request entity too large", "payload too large")

_N = r"(\d[\d,]*)"
_TOKEN_LIMITS = (  # (pattern of the limit, pattern of what was requested) in the same message
    (rf"model\s+token\s+limit\s*:?\s*{_N}", rf"re\s*quested\s*:?\s*{_N}"),
    (rf"maximum\s+context\s+length\s+is\s+{_N}", rf"(?:you\s+requested|your\s+request\s+has)\s+{_N}"),
    (rf"maximum\s+model\s+length\s+of\s+{_N}", rf"\(\s*length\s+{_N}\s*\)"),
    (rf"context\s+length\s*\(\s*{_N}\s+tokens?\s*\)", rf"input\s*\(\s*{_N}\s+tokens?\s*\)"),
    (rf"max_model_len\s*[=:(]?\s*{_N}", rf"(?:requested|length)\s*[=:(]?\s*{_N}"),
)
_SIZE = re.compile(rf"total\s+message\s+size\s+{_N}\s+(?:bytes\s+)?exceeds\s+(?:the\s+)?limit\s+(?:of\s+)?{_N}", re.I)


def parse_token_limit(text: str) -> tuple[int | None, int | None]:
    """``(limit, requested)`` in tokens from an overflow message (see the module's table);
    ``(None, None)`` when it names no limit."""
    for limit_pattern, requested_pattern in _TOKEN_LIMITS:
        found = re.search(limit_pattern, text, re.I)
        if found is not None:
            asked = re.search(requested_pattern, text, re.I)
            return stated_count(found.group(1)), stated_count(asked.group(1)) if asked is not None else None
    return None, None


def overflow_error(
    status: int,
    message: str,
    text: str,
    *,
    body: object = None,
    retry_after: float | None = None,
    response: object = None,
    request_id: str | None = None,
) -> APIStatusError | None:
    """The typed error for a status whose wording says the request is too big, else None.

    Args:
        status: the HTTP status (400 / 422 / 413; others give None).
        message: the error's message (``"<status>: "`` is put in front).
        text: everything the server said (message and body as JSON), searched for the wording.
        body, retry_after, response, request_id: kept on the error, as for any status error.

    Returns:
        :class:`~kimik3.RequestTooLargeError` (413, or "total message size N exceeds limit M":
        ``size`` and ``limit`` in bytes), :class:`~kimik3.ContextLengthExceededError` (a 400 or
        422 worded as a token overflow, with ``limit`` / ``requested`` when stated), or None;
        a number beyond ``2**53`` is not stated, and cut in the message.
    """
    lower, message = text.lower(), cut_numbers(message)
    if status == 413 or (status in (400, 422) and any(p in lower for p in _SIZE_PHRASES)):
        found = _SIZE.search(text)
        size, limit = (stated_count(found.group(1)), stated_count(found.group(2))) if found else (None, None)
        return RequestTooLargeError(
            f"{status}: {message}", status_code=status, body=body, retry_after=retry_after, response=response,
            request_id=request_id, limit=limit, size=size,
        )  # fmt: skip
    if status in (400, 422) and any(p in lower for p in CONTEXT_PHRASES):
        limit, requested = parse_token_limit(text)
        return ContextLengthExceededError(
            f"{status}: {message}", status_code=status, body=body, retry_after=retry_after, response=response,
            request_id=request_id, limit=limit, requested=requested,
        )  # fmt: skip
    return None
