"""Tool-call arguments a server passes through: decoded strictly, within limits, and repaired only
where the intent is unambiguous (see ``docs/chat-mode.md``)."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

from .._exceptions import DuplicateKeyError, JSONLimitError
from .._json import safe_loads, unique_keys
from ..formats.k3 import ParsedToolCall, duplicate_key

__all__ = ["Escaper", "decode_arguments", "escape_controls", "json_calls"]

_SPECIAL = re.compile(r'["\\\x00-\x1f{}\[\]]')
_ESCAPES = {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


class Escaper:
    """Escapes raw control characters inside JSON strings, piece by piece (a server that passes
    a model's raw newline through); the output of the pieces concatenates to the repaired text.
    It also counts open brackets outside strings (``depth``), so that whether the text so far can
    be a whole JSON value is known without decoding it (decoding on every piece is quadratic)."""

    __slots__ = ("depth", "in_string", "skip")

    def __init__(self) -> None:
        self.in_string = False
        self.skip = False  # the next character is escaped by a backslash
        self.depth = 0  # open {/[ minus closing }/] outside strings

    def feed(self, text: str) -> str:
        out: list[str] = []
        last = 0
        skip_to = 1 if self.skip else 0
        self.skip = False
        for m in _SPECIAL.finditer(text):
            i = m.start()
            if i < skip_to:
                continue
            c = m.group()
            if not self.in_string:
                self.in_string = c == '"'
                self.depth += 1 if c in "{[" else -1 if c in "}]" else 0
            elif c in "{}[]":
                continue
            elif c == '"':
                self.in_string = False
            elif c == "\\":
                if i + 1 < len(text):
                    skip_to = i + 2
                else:
                    self.skip = True
            else:
                out.append(text[last:i])
                out.append(_ESCAPES.get(c) or f"\\u{ord(c):04x}")
                last = i + 1
        if not out:
            return text
        out.append(text[last:])
        return "".join(out)


def escape_controls(text: str) -> str:
    return Escaper().feed(text)


def decode_arguments(text: str) -> tuple[dict[str, Any] | None, str]:
    """Decode tool-call arguments strictly, within kimik3's JSON limits (:mod:`kimik3._json`).

    Returns:
        ``(arguments, "")`` for a JSON object, else ``(None, reason)`` with the reason in words
        (not JSON, not an object, beyond the limits: nesting, integer digits, NaN / Infinity, a
        string with a lone UTF-16 surrogate escape such as ``"\\ud800"``, a key given twice in one
        object: which value is meant cannot be told, dynamo #13654).
    """
    try:
        value = safe_loads(text, object_pairs_hook=unique_keys)
    except DuplicateKeyError as e:
        return None, duplicate_key(e.key)
    except JSONLimitError as e:
        return None, f"arguments beyond kimik3's JSON limits: {e}"
    except json.JSONDecodeError as e:
        return None, f"arguments are not valid JSON ({e})"
    if not isinstance(value, dict):
        return None, f"arguments are JSON but not an object ({type(value).__name__})"
    return value, ""


_FENCE = re.compile(r"```[ \t]*(?:json)?[ \t]*\n(.*?)\n?[ \t]*```", re.S | re.I)
"""One Markdown code fence around JSON (a model that answers ``required`` in Markdown)."""


def json_calls(text: str) -> list[ParsedToolCall] | None:
    """The calls in content a server sent for ``tool_choice="required"`` instead of calls, else None.

    Content that is one ``{"name": ..., "parameters": {...}}`` object (``"arguments"`` too, as an
    object or JSON text; SGLang #33192; or wrapped in OpenAI's ``{"type": "function", "function":
    {...}}``), or a JSON array of them (SGLang's constrained fallback for ``required``), either
    maybe in one Markdown code fence: every item must be such an object, or
    the content is the answer. A call whose arguments do not decode (a key given twice, say) is
    returned with its ``error``: a failed call, never the answer.

    Returns:
        The calls (``index`` -1 and ``id`` "": the caller numbers them), or None.
    """
    body = text.strip()
    if (fence := _FENCE.fullmatch(body)) is not None:
        body = fence.group(1).strip()
    if not body.startswith(("{", "[")):
        return None
    twice: str | None = None  # a key given twice anywhere: every call of this content fails with it
    try:
        value = json.loads(body, strict=False, object_pairs_hook=unique_keys)  # a raw newline, as servers send it
    except DuplicateKeyError as e:
        twice = e.key
        try:
            value = json.loads(body, strict=False)  # its shape, to name the calls that fail
        except (ValueError, RecursionError):
            return None
    except (ValueError, RecursionError):
        return None
    calls = [_json_call(item) for item in (value if isinstance(value, list) else [value])]
    if not calls or any(c is None for c in calls):
        return None
    return [c if twice is None else replace(c, error=duplicate_key(twice)) for c in calls if c is not None]


def _json_call(value: Any) -> ParsedToolCall | None:
    if isinstance(value, dict) and isinstance(value.get("function"), dict) and set(value) <= {"type", "id", "function"}:
        value = value["function"]  # OpenAI's tool-call shape: {"type": "function", "function": {...}}
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or set(value) - {
            "name", "parameters", "arguments", "type"}:
        return None
    args = value.get("parameters", value.get("arguments", {}))
    text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
    arguments, reason = decode_arguments(text)
    if arguments is None:
        return ParsedToolCall(-1, "", value["name"], {}, text, reason)
    return ParsedToolCall(-1, "", value["name"], arguments, json.dumps(arguments, ensure_ascii=False))
