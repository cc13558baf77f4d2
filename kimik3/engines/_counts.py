"""Counts a server sends (tokens in ``usage``, a window in ``/v1/models``, the limit and size an
overflow error states), bounded where they are read: a number no real request can have never
reaches a cost, a budget or a window as if it were true, and never fails as a bare
``OverflowError`` (``float(10**400)``) or ``ValueError`` (Python's limit on converting a
5,000-digit integer to or from text).

The bound is :data:`MAX_COUNT` (``2**53``, the integers a JSON number holds exactly: RFC 8259
§6): a decision, many orders of magnitude above any context window or request size. Beyond it:

- a usage count (``prompt_tokens``, ``completion_tokens``, ``total_tokens``,
  ``prompt_tokens_details.cached_tokens``) is an :class:`~kimik3.APIResponseValidationError`:
  the server's accounting cannot be trusted, so neither can a cost or a budget on it (not
  stated, it would silently read as 0);
- a window or a limit in an error's text is treated as not stated (the error stays typed, the
  number is cut in its message: :func:`cut_numbers`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from .._exceptions import APIResponseValidationError

__all__ = ["MAX_COUNT", "cut_numbers", "shown_int", "stated_count", "usage_count"]

MAX_COUNT = 2**53
"""The largest count (tokens, bytes) read from a server."""

log = logging.getLogger("kimik3.engines")
_ODD: set[tuple[str, str]] = set()  # usage fields already logged as not a count

_MAX_DIGITS = len(str(MAX_COUNT))
_LONG_NUMBER = re.compile(rf"\d[\d,]{{{_MAX_DIGITS + 4},}}")


def shown_int(value: int) -> str:
    """``value`` as text for a message, a long one cut (``123456789012... (401 digits)``); never
    ``str()`` of an integer beyond Python's conversion limit."""
    if value.bit_length() > 2000:  # about 600 digits: str() could pass the limit (640 at its lowest)
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    text = str(value)
    return text if len(text) <= 20 else f"{text[:12]}... ({len(text.lstrip('-'))} digits)"


def cut_numbers(text: str) -> str:
    """``text`` with every run of digits longer than a count can be cut (``99999999... (5000 digits)``)."""
    return _LONG_NUMBER.sub(lambda m: f"{m.group()[:8]}... ({len(m.group())} digits)", text)


def usage_count(usage: Mapping[str, Any], key: str, where: str = "usage") -> int | None:
    """``usage[key]`` when it is an int (not a bool; a float with no fraction, ``10.0``, is its
    int) up to :data:`MAX_COUNT`; None when absent or not a count (a string, ``10.5``, null: not
    stated; logged once per field and process). A negative int is returned as sent: the completion's
    :func:`~kimik3.types._results.clamp_usage` counts it as 0 and says so.

    Raises:
        APIResponseValidationError: an int beyond :data:`MAX_COUNT`: more tokens than any request
            can have (the message names ``where.key`` and the number, cut).
    """
    value = usage.get(key)
    if isinstance(value, float) and value.is_integer():  # 10.0: a JSON writer's way to send 10
        value = int(value) if abs(value) <= MAX_COUNT else MAX_COUNT + 1
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        if (where, key) not in _ODD:  # once per field and process: a server sends the same every time
            _ODD.add((where, key))
            log.warning("kimik3: the server's %s.%s is %s, not a token count: read as not stated",
                        where, key, cut_numbers(repr(value))[:80])
        return None
    if value > MAX_COUNT:
        raise APIResponseValidationError(
            f"the server's {where}.{key} is {shown_int(value)}, more tokens than any request can have "
            f"(at most 2**53): its token counts cannot be trusted for cost or budgets")
    return value


def stated_count(digits: str | None) -> int | None:
    """A count written in a server's text (digits, maybe with thousands separators) as an int;
    None when there is none or it is beyond :data:`MAX_COUNT` (not stated)."""
    if not digits:
        return None
    plain = digits.replace(",", "")
    if not plain.isascii() or not plain.isdigit() or len(plain) > _MAX_DIGITS:
        return None
    value = int(plain)
    return value if value <= MAX_COUNT else None
