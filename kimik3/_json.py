"""The one set of limits on JSON values in tool calls, shared by everything that reads or writes them
(typed messages, the K3 codec, tools, chat-mode checks): a neutral module both sides import.

The K3 parser decodes argument values with :func:`safe_loads`, the encoder re-reads arguments
with it, tools validate with it and chat-mode streams can check server JSON with it, so whatever
one side accepts the other can render: a value inside the limits round-trips through
``json.loads`` / ``json.dumps`` at any call depth, one beyond them is a :class:`JSONLimitError`
with the reason (never a ``RecursionError``, a ``ValueError`` from a 5,000-digit integer, or an
``Infinity`` that is not JSON).

Limits (a decision; no real tool call comes near them):

- nesting: at most :data:`JSON_MAX_DEPTH` (128) arrays / objects deep (the top-level object is 1);
- integers: at most :data:`JSON_MAX_INT_DIGITS` (640) decimal digits (Python's smallest
  ``sys.set_int_max_str_digits`` setting, so ``str(int)`` never fails under any setting);
- numbers: finite (``1e999``, ``NaN`` and ``Infinity`` are refused);
- types: ``dict`` with ``str`` keys, ``list`` / ``tuple``, ``str``, ``int``, ``float``, ``bool``,
  ``None`` (no sets, bytes or objects);
- strings (values and keys): text, so no lone UTF-16 surrogate (JSON's ``"\ud800"`` escape decodes
  to one; it cannot be written as UTF-8, so a session file or a token count would fail on it).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from ._exceptions import DuplicateKeyError, JSONLimitError

__all__ = [
    "JSON_MAX_DEPTH", "JSON_MAX_INT_DIGITS", "DuplicateKeyError", "JSONLimitError", "check_json_limits", "safe_loads",
    "unique_keys",
]  # fmt: skip

JSON_MAX_DEPTH = 128
"""Deepest nesting of arrays / objects accepted (a flat object is depth 1)."""

JSON_MAX_INT_DIGITS = 640
"""Most decimal digits of an integer accepted."""

_INT_BOUND = 10**JSON_MAX_INT_DIGITS
_NESTING_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')  # strings (skipped) and brackets
_SCALARS = (bool, type(None))
_SURROGATE = re.compile("[\ud800-\udfff]")


def _check_text(text: str) -> None:
    if not text.isascii() and (m := _SURROGATE.search(text)) is not None:
        raise JSONLimitError(f"a string holds a lone UTF-16 surrogate ({m.group()!a}), which is not text")


def _int_too_long(value: int) -> bool:
    return bool(abs(value) >= _INT_BOUND)


def check_json_limits(value: Any, max_depth: int = JSON_MAX_DEPTH) -> None:
    """Check that ``value`` is plain JSON data inside the limits (iteratively: any depth is safe).

    Args:
        value: a Python value about to become JSON (tool arguments, an approval's edit, ...).
        max_depth: the nesting allowed (:data:`JSON_MAX_DEPTH`; one less for a value that will
            sit inside an arguments object).

    Raises:
        JSONLimitError: a type JSON cannot hold, a non-string key, nesting deeper than
            :data:`JSON_MAX_DEPTH`, an integer longer than :data:`JSON_MAX_INT_DIGITS` digits,
            a float that is not finite, or a string with a lone UTF-16 surrogate.
    """
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, _SCALARS):
            continue
        if isinstance(item, str):
            _check_text(item)
        elif isinstance(item, int):
            if _int_too_long(item):
                raise JSONLimitError(f"an integer has more than {JSON_MAX_INT_DIGITS} digits")
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise JSONLimitError(f"the number {item!r} is not finite; JSON has no such number")
        elif isinstance(item, (dict, list, tuple)):
            if depth + 1 > max_depth:
                raise JSONLimitError(f"nested deeper than {JSON_MAX_DEPTH} arrays/objects")
            if isinstance(item, dict):
                for key in item:
                    if not isinstance(key, str):
                        raise JSONLimitError(f"an object key is {type(key).__name__} {key!r}, not a string")
                    _check_text(key)
                stack.extend((v, depth + 1) for v in item.values())
            else:
                stack.extend((v, depth + 1) for v in item)
        else:
            raise JSONLimitError(f"a {type(item).__name__} value ({str(item)[:40]}) is not JSON data")


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > JSON_MAX_INT_DIGITS:
        raise JSONLimitError(f"an integer has more than {JSON_MAX_INT_DIGITS} digits ({text[:20]}...)")
    return int(text)


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JSONLimitError(f"the number {text[:40]} is out of range (it would be {value})")
    return value


def _parse_constant(name: str) -> Any:
    raise JSONLimitError(f"{name} is not a JSON number")


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """The ``object_pairs_hook`` for tool-call arguments (chat mode, the required-call JSON
    fallback, raw mode's ``json`` values: one rule): an object that gives a key twice, at any
    depth, is refused, not last-wins (dynamo #13654).

    Raises:
        DuplicateKeyError: a key given twice (its ``key``).
    """
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        raise DuplicateKeyError(next(k for k, _ in pairs if k in seen or seen.add(k)))  # type: ignore[func-returns-value]
    return value


def safe_loads(text: str, max_depth: int = JSON_MAX_DEPTH, *, object_pairs_hook: Any = None) -> Any:
    """``json.loads`` inside the limits of this module.

    Args:
        text: JSON text.
        max_depth: as for :func:`check_json_limits`.
        object_pairs_hook: as for ``json.loads`` (chat mode's arguments: a key given twice).

    Returns:
        The decoded value; ``json.dumps`` of it never fails and never writes ``Infinity``.

    Raises:
        json.JSONDecodeError: the text is not JSON.
        JSONLimitError: valid JSON beyond the limits (the message says which). Both are
            ``ValueError`` s.
    """
    if text.count("[") + text.count("{") > max_depth:
        _check_nesting(text, max_depth)  # before json.loads, whose recursion could fail at any depth
    value = json.loads(text, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_parse_constant,
                       object_pairs_hook=object_pairs_hook)
    check_json_limits(value, max_depth)
    return value


def _check_nesting(text: str, max_depth: int) -> None:
    depth = 0
    for match in _NESTING_TOKENS.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > max_depth:
                raise JSONLimitError(f"nested deeper than {JSON_MAX_DEPTH} arrays/objects")
        elif token in "]}":
            depth -= 1
