"""The parts of a K3 tool call the output parser builds (docs/k3-format.md § Typed arguments):
one call being read, its argument values decoded, and the reasons a call cannot run.

A value is read exactly as the model wrote it: a ``string`` value is the raw text, any other
type is JSON-decoded (falling back to the raw text when it does not decode). Only the exact
closer of the value (``<|close|>argument<|sep|>``, ``<|close|>json<|sep|>``) ends it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from json.encoder import encode_basestring
from typing import Any

from ..._exceptions import DuplicateKeyError, JSONLimitError
from ..._json import JSON_MAX_DEPTH, safe_loads, unique_keys
from ._encode import CLOSE, SEP
from ._events import Event, IncompleteToolCall, ParsedToolCall, ToolCallArgumentsDelta, ToolCallDone

__all__ = [
    "CLOSERS", "Call", "ambiguous_value", "closer_overlap", "decode_value", "dumps", "duplicate_key", "lone_surrogate",
]  # fmt: skip

CLOSERS = {"argument": f"{CLOSE}argument{SEP}", "json": f"{CLOSE}json{SEP}"}
"""The exact text that ends a value of each tag; nothing else inside a value ends it."""

_SURROGATE = re.compile("[\ud800-\udfff]")
_JSON_KINDS = {str: "string", list: "array", int: "number", float: "number", bool: "boolean", type(None): "null"}

dumps: Callable[[Any], str] = json.JSONEncoder(ensure_ascii=False).encode
"""``json.dumps(value, ensure_ascii=False)`` without building an encoder per call."""


def closer_overlap(buf: str, start: int, closer: str) -> int:
    """Length of the longest end of ``buf[start:]`` that can still become ``closer`` (held back
    at a chunk end)."""
    i = buf.find("<", max(start, len(buf) - len(closer) + 1))
    while i >= 0:
        if closer.startswith(buf[i:]):
            return len(buf) - i
        i = buf.find("<", i + 1)
    return 0


def lone_surrogate(text: str) -> str | None:
    """The reason ``text`` cannot be written as UTF-8 (a lone UTF-16 surrogate), else None."""
    m = _SURROGATE.search(text)
    return None if m is None else f"it holds a lone UTF-16 surrogate ({m.group()!a}), which is not text"


def decode_value(raw: str, max_depth: int) -> tuple[Any, str | None]:
    """``(value, error)`` of a non-string value: its JSON, else the raw text. JSON beyond the
    shared limits (:func:`~kimik3.formats.k3.safe_loads`: nesting, digits, NaN, lone surrogates)
    is kept as the raw text too, with the reason."""
    try:
        return safe_loads(raw, max_depth, object_pairs_hook=unique_keys), None
    except DuplicateKeyError as e:  # one rule with chat mode (kimik3._json.unique_keys; dynamo #13654)
        return raw, duplicate_key(e.key)
    except JSONLimitError as e:
        return raw, str(e)
    except ValueError:
        return raw, None


def duplicate_key(key: str) -> str:
    """Why a call that gives one argument twice cannot run (the words the model reads; dynamo #13654)."""
    return f"it gives argument {key!r} more than once, so which value is meant cannot be told; give each argument once"


def ambiguous_value(tag: str, key: str) -> str:
    """Why a call whose value holds its own closer's text cannot run (the words the model reads)."""
    what = f"argument {key!r}" if tag == "argument" else "its json arguments block"
    return (
        f"{what} holds the text {CLOSERS[tag]}, which is what ends a value, so where the value ends "
        "cannot be told. Write that text another way (for example split or escaped) and call again"
    )


class Call:
    """One tool call being read.

    Attributes:
        index, id, name: the streaming index, the client id and the tool name.
        parent: the parser state its close (or an interruption) returns to.
        items: the ``(key, value)`` pairs read so far, in order.
        json_parts: every arguments-delta fragment, in order (they join to ``arguments_json``).
        tag: the open value's tag (``"argument"`` / ``"json"``); ``key``, ``string``: its key
            and whether it is a string.
        parts: the open value's raw text, in pieces.
        pending: after a value's closer, the raw text since it (the closer first) until what
            follows shows whether the closer ended the value; None otherwise.
        pending_tag: the index in ``pending`` where a tag after the closer starts.
        closing: the call's close came right after the closer (held in ``pending`` too): what
            follows a call (another call, the tools or message close) confirms both.
        error: why the call cannot run (the first reason), or None.
        raw: for a call written outside the tools section, its raw text (it is kept as text,
            never run); None for a call in the tools section.
        raw_tag: the index in ``raw`` where the last tag started (an interrupting tag is not
            the call's text).
    """

    __slots__ = (
        "closing", "error", "id", "index", "items", "json_parts", "key", "keys", "name", "parent", "parts",
        "pending", "pending_tag", "raw", "raw_tag", "string", "tag", "text_after",
    )  # fmt: skip

    def __init__(self, index: int, id: str, name: str, parent: int, raw: list[str] | None = None) -> None:
        self.index = index
        self.id = id
        self.name = name
        self.parent = parent
        self.items: list[tuple[str, Any]] = []
        self.keys: set[str] = set()
        self.json_parts: list[str] = []
        self.tag = "argument"
        self.key = ""
        self.string = False
        self.parts: list[str] = []
        self.pending: list[str] | None = None
        self.pending_tag = 0
        self.closing = False  # its close came after a value's closer, not yet confirmed
        self.error: str | None = None
        self.raw = raw
        self.raw_tag = 0
        self.text_after = False  # non-blank text came after its close (held in ``pending``)

    # -- building the arguments (each method appends its events to ``out``) --------------------

    def _delta(self, out: list[Event], text: str) -> None:
        if text and self.raw is None:  # a call outside the tools section streams nothing
            self.json_parts.append(text)
            out.append(ToolCallArgumentsDelta(self.index, self.id, text))

    def _key_prefix(self, key: str) -> str:
        return ("{" if not self.json_parts else ", ") + dumps(key) + ": "

    def fail(self, why: str) -> None:
        """The call cannot run: ``why`` (the first reason is kept)."""
        if self.error is None:
            self.error = why

    def start_value(self, out: list[Event], tag: str, attrs: dict[str, str]) -> None:
        """A value's open tag (``argument`` with ``key`` and ``type``, or ``json``)."""
        self.parts = []
        self.pending = None
        self.tag = tag
        if tag == "json":
            self.string = False
            return
        self.key = attrs.get("key", "")
        self.string = attrs.get("type") == "string"
        self._delta(out, self._key_prefix(self.key) + ('"' if self.string else ""))

    def value_text(self, out: list[Event], text: str) -> None:
        """Text of the open value (a string value streams it, JSON-escaped piece by piece)."""
        self.parts.append(text)
        if self.string and self.raw is None:  # (inlined: the hot path of a long string value)
            piece = encode_basestring(text)[1:-1]  # what dumps(text) does for a str, without its frame
            if not piece.isascii():  # a lone surrogate is written as its JSON escape: the text stays UTF-8
                piece = _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", piece)
            if piece:
                self.json_parts.append(piece)
                out.append(ToolCallArgumentsDelta(self.index, self.id, piece))

    def reopen(self, out: list[Event]) -> None:
        """The closer (and what followed it so far) was text of the value: the value goes on,
        and the call fails (where the value ends cannot be told)."""
        assert self.pending is not None
        text = "".join(self.pending)
        self.pending = None
        self.closing = False
        self.fail(ambiguous_value(self.tag, self.key))
        self.value_text(out, text)

    def end_value(self, out: list[Event]) -> None:
        """The open value ended: decode it (docs/k3-format.md § Typed arguments)."""
        raw = "".join(self.parts)
        self.parts = []
        self.pending = None
        if self.tag == "json":
            value, error = decode_value(raw, JSON_MAX_DEPTH)
            if error is not None:
                self.fail(f"its json arguments block: {error}")
            if isinstance(value, dict):
                for key, item in value.items():
                    self._delta(out, self._key_prefix(key) + dumps(item))
                    self._add(key, item)
            else:
                # Decision: a json block that is not an object (a JSON string holding the arguments,
                # a list, text that is not JSON) makes the call a failed one with the reason, like
                # JSON beyond the limits: it is never run without its arguments.
                kind = "not JSON" if value is raw else f"a JSON {_JSON_KINDS.get(type(value), 'value')}, not an object"
                self.fail(f"its json arguments block is {kind}")
        elif self.string:
            self._delta(out, '"')  # a string is the raw text, no unescaping
            self._add(self.key, raw)
            if (why := lone_surrogate(raw)) is not None:
                self.fail(f"argument {self.key!r}: {why}")
        else:
            value, error = decode_value(raw, JSON_MAX_DEPTH - 1)  # it sits inside the arguments object
            if error is not None:
                self.fail(f"argument {self.key!r}: {error}")
            self._delta(out, dumps(value))
            self._add(self.key, value)

    def _add(self, key: str, value: Any) -> None:
        # Decision (dynamo #13654): an argument given twice is not last-wins: which value is meant
        # cannot be told, so the call fails with the reason (the model reads it and calls again).
        if key in self.keys:
            self.fail(duplicate_key(key))
        self.keys.add(key)
        self.items.append((key, value))

    def done(self, out: list[Event]) -> ParsedToolCall:
        """The call closed: its :class:`ParsedToolCall` (failed when ``error`` is set)."""
        self._delta(out, "}" if self.json_parts else "{}")
        arguments_json = "".join(self.json_parts)
        arguments = dict(self.items)
        out.append(ToolCallDone(self.index, self.id, self.name, arguments, arguments_json, self.error))
        return ParsedToolCall(self.index, self.id, self.name, arguments, arguments_json, self.error)

    def incomplete(self) -> IncompleteToolCall:
        """The call never closed: what was read of it."""
        return IncompleteToolCall(self.index, self.id, self.name, dict(self.items))
