"""K3 output parsing: raw generated text -> reasoning, content and tool calls (docs/k3-format.md § Output).

The model's output (the text generated after the generation prompt, decoded with
``skip_special_tokens=False`` so the markers arrive contiguous) is a tag stream::

    [reasoning]<|close|>think<|sep|>                       thinking on (the prompt opened think)
    <|open|>response<|sep|>[text]<|close|>response<|sep|>   the prompt opened response when off
    [<|open|>tools<|sep|> (call)+ <|close|>tools<|sep|>]
    <|close|>message<|sep|><|end_of_msg|>

    call := <|open|>call tool="N" index="k"<|sep|>
            (<|open|>argument key="K" type="T"<|sep|>V<|close|>argument<|sep|>)*
            <|close|>call<|sep|>

:class:`StreamParser` is one incremental state machine; :func:`parse` is that machine fed the
whole text at once, so streaming gives exactly the non-streaming result for every chunking.

Work is linear in the output length: each character is scanned once by the marker lexer (a
partial marker at a chunk end is at most 13 characters and is re-scanned once), text is kept as
lists of pieces joined once, and string arguments are JSON-escaped piece by piece.

The unavoidable ambiguity: K3's markers are single special tokens, but a parser of *text* sees only
their spelling. Text that spells a marker (for example a string argument holding a file that
documents this format, where the model wrote ``<|close|>argument<|sep|>`` as plain BPE) cannot be
told from a real marker, and is parsed as one. Only a token-id level parser could tell them apart.
What a text parser can do is notice the damage: a value closed early leaves non-blank text, or a
second close, inside the call outside any value; such a call is dropped as incomplete (reported,
never run with a cut argument).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ..._exceptions import JSONLimitError, ParserStateError
from ..._json import JSON_MAX_DEPTH, safe_loads
from ._encode import CLOSE, END_OF_MSG, OPEN, SEP
from ._events import (
    ContentDelta,
    Event,
    IncompleteToolCall,
    ParsedOutput,
    ParsedToolCall,
    ReasoningDelta,
    ToolCallArgumentsDelta,
    ToolCallDone,
    ToolCallIncomplete,
    ToolCallStarted,
    new_tool_call_id,
)

__all__ = ["StreamParser", "parse"]


# -- lexer tables ----------------------------------------------------------------------------

_K_OPEN, _K_CLOSE, _K_SEP, _K_EOM = 0, 1, 2, 3
_MARKERS: tuple[tuple[str, int], ...] = (
    (OPEN, _K_OPEN),
    (CLOSE, _K_CLOSE),
    (SEP, _K_SEP),
    (END_OF_MSG, _K_EOM),
)
# Every proper prefix of a marker: the text a chunk may end with while it can still become one.
_PREFIXES = frozenset(m[:i] for m, _ in _MARKERS for i in range(1, len(m)))
_MAX_PREFIX = max(len(m) for m, _ in _MARKERS) - 1

# -- machine states ----------------------------------------------------------------------------

# Legend of the parser's states (where the text being read goes):
#   _THINK     inside the think channel: text is reasoning
#   _RESPONSE  inside the response channel: text is content
#   _TOP       between channels, inside the message: non-blank text is content (decision)
#   _TOOLS     inside <tools>, outside any call: text is dropped
#   _CALL      inside a call, outside any value: blank text is dropped; other text breaks the call
#   _ARG       inside an <argument>: text is the value (streamed when its type is string)
#   _JSON      inside a <json> block (the encoder's fallback for unparsable arguments)
#   _DONE      the message is over: everything after is ignored
_THINK, _RESPONSE, _TOP, _TOOLS, _CALL, _ARG, _JSON, _DONE = range(8)

def _unescape_attr(value: str) -> str:
    # docs/k3-format.md § Typed arguments: "&quot;" first, then "&amp;" (the reverse of the encoder's order).
    return value.replace("&quot;", '"').replace("&amp;", "&")


def _parse_header(header: str) -> tuple[str, dict[str, str]]:
    # `name k="v" k2="v2"`: scanned once with str.find (a backtracking regex would be quadratic on
    # a long malformed header). A key is the last word before `="`; values have no raw `"`.
    parts = header.split(None, 1)
    if not parts:
        return "", {}
    attrs: dict[str, str] = {}
    rest = parts[1] if len(parts) > 1 else ""
    pos = 0
    while (eq := rest.find('="', pos)) >= 0 and (end := rest.find('"', eq + 2)) >= 0:
        words = rest[pos:eq].split()
        attrs[words[-1] if words else ""] = _unescape_attr(rest[eq + 2 : end])
        pos = end + 1
    return parts[0], attrs


def _decode_value(raw: str, max_depth: int) -> tuple[Any, str | None]:
    """``(value, error)``. docs/k3-format.md § Typed arguments: non-string types are JSON, else the
    raw text; JSON beyond the shared limits (:func:`safe_loads`) also falls back, with the reason."""
    try:
        return safe_loads(raw, max_depth), None
    except JSONLimitError as e:
        return raw, str(e)
    except ValueError:
        return raw, None


_JSON_KINDS = {str: "string", list: "array", int: "number", float: "number", bool: "boolean", type(None): "null"}
_dumps: Callable[[Any], str] = json.JSONEncoder(ensure_ascii=False).encode
"""``json.dumps(value, ensure_ascii=False)`` without building an encoder per call."""


class _Call:
    __slots__ = (
        "arg_key", "arg_parts", "arg_string", "broken", "error", "id", "index", "items", "json_parts", "name",
        "parent",
    )  # fmt: skip

    def __init__(self, index: int, id: str, name: str, parent: int) -> None:
        self.index = index
        self.id = id
        self.name = name
        self.parent = parent  # the state a close (or an interruption) returns to
        self.items: list[tuple[str, Any]] = []
        self.json_parts: list[str] = []  # every arguments-delta fragment, in order
        self.arg_key = ""
        self.arg_string = False
        self.arg_parts: list[str] = []
        self.error: str | None = None  # the first value beyond the JSON limits, if any
        self.broken = False  # marker text ended a value early: dropped at its close, never run


class StreamParser:
    """Incremental parser of K3 output text; :func:`parse` is this fed all at once.

    Feed text deltas as they arrive; each :meth:`feed` returns the typed events the new text
    completes. Call :meth:`finish` at the end of the stream, then :meth:`result`.

    Guarantees:
        - For every chunking of the same text, :meth:`result` is the same (ids aside, which come
          from ``id_factory`` in call order), and equal to :func:`parse` of the whole text.
        - No byte of a marker appears in a reasoning or content delta. A partial marker at a
          chunk end is held back only while it can still become a marker.
        - The argument deltas of a call concatenate to its ``arguments_json``; string values are
          streamed while they arrive.
        - Total work is linear in the output length.

    Recovery (docs/k3-format.md § Known model slips):
        - ``<|close|>think<|sep|>`` omitted: a later channel tag (open/close ``response``, open
          ``tools``/``call``, close ``message``) ends the reasoning; the text before it stays
          reasoning.
        - Think channel skipped (the output starts with ``<|open|>response<|sep|>`` or
          ``<|open|>tools<|sep|>``): reasoning is ``""`` and the text is the answer.
        - ``<|close|>response<|sep|>`` / ``<|close|>tools<|sep|>`` omitted: the next channel tag or
          the message close ends them.
        - Output cut (by ``max_tokens``) inside a call: complete calls are kept; the cut one is
          reported in ``incomplete_tool_calls`` (and a :class:`ToolCallIncomplete` event), never
          returned as a call. A missing ``<|close|>argument<|sep|>`` is implied by the next
          argument or by ``<|close|>call<|sep|>``.
        - A partial marker at the very end is dropped (markers are single tokens: a partial one is
          an artefact of a cut stream).
        - Text after the message close (``<|close|>message<|sep|>``, ``<|end_of_msg|>`` or the
          open of another ``message``) is ignored.

    Decisions where the spec is silent (kept in code comments too):
        - Text between channels (after a channel closed, outside any tag) is content when it has
          non-whitespace (the model forgot ``<|open|>response<|sep|>``); whitespace-only runs
          there are layout and dropped. Text inside ``tools`` but outside a call, and blank text
          inside a call outside any value, are dropped.
        - Non-blank text inside a call outside any value, or a close of a value that is not open,
          is what marker text inside a string argument leaves behind (it closed the value early):
          the call is dropped as incomplete at its close, never run with a cut argument.
        - With ``thinking=False`` a think channel opened anyway is parsed as reasoning
          (``reasoning_content`` becomes a string); a stray ``<|close|>think<|sep|>`` is ignored.
        - A call header without a ``tool`` attribute gives the name ``""``; the model's ``index``
          attribute is ignored (calls are numbered in order). A ``json`` block inside a call (the
          encoder's fallback for unparsable arguments) adds its keys when it decodes to an
          object; otherwise the call is a failed one (``error``: "its json arguments block is a JSON
          string, not an object"), never run without its arguments. An
          ``<|open|>call`` outside ``tools`` is accepted.
        - A call counts only once its ``<|close|>call<|sep|>`` is seen. A call interrupted by
          another structural tag (a new call, ``<|close|>tools<|sep|>``, a channel open, the
          message close) is dropped as incomplete like a cut one: running a call whose end was never
          confirmed risks running it with a cut argument. The output is not ``truncated`` for that.
        - A tag header interrupted by another marker, an unknown tag and a stray ``<|sep|>`` are
          ignored.

    Args:
        thinking: whether the prompt opened the think channel (thinking on) or the response
            channel (off). Must match the request.
        id_factory: makes each call's id (default :func:`new_tool_call_id`); pass a counter for
            deterministic replays and tests.
    """

    def __init__(self, thinking: bool = True, *, id_factory: Callable[[], str] | None = None) -> None:
        self._id_factory = id_factory or new_tool_call_id
        self._state = _THINK if thinking else _RESPONSE
        self._reasoning: list[str] | None = [] if thinking else None
        self._content: list[str] = []
        self._calls: list[ParsedToolCall] = []
        self._incomplete: list[IncompleteToolCall] = []
        self._call: _Call | None = None
        self._next_index = 0
        self._tail = ""  # held-back partial marker (at most _MAX_PREFIX chars)
        self._header: list[str] | None = None  # pieces of a tag header awaiting its <|sep|>
        self._header_open = False
        self._top_ws: list[str] = []  # whitespace between channels, held until we know its fate
        self._top_live = False  # non-whitespace text seen between channels since the last marker
        self._out: list[Event] = []
        self._closed = False  # the message closed
        self._finished = False
        self._truncated = False
        self._result: ParsedOutput | None = None

    # -- public ----------------------------------------------------------------------------

    def feed(self, delta: str) -> list[Event]:
        """Consume the next piece of output text.

        Args:
            delta: any number of characters (may split a marker anywhere).

        Returns:
            The events this text completes, in order.

        Raises:
            ParserStateError: called after :meth:`finish`.
        """
        if self._finished:
            raise ParserStateError("StreamParser.feed() called after finish()")
        if self._state == _DONE or not delta:
            return []  # text after the message close is ignored
        out: list[Event] = []
        self._out = out
        buf = self._tail + delta if self._tail else delta
        self._tail = ""
        n = len(buf)
        start = 0  # start of the text not yet handed on
        pos = 0
        find = buf.find
        startswith = buf.startswith
        while True:
            j = find("<", pos)
            if j < 0:
                break
            for marker, kind in _MARKERS:
                if startswith(marker, j):
                    if j > start:
                        self._text(buf[start:j])
                    start = pos = j + len(marker)
                    self._marker(kind)
                    if self._state == _DONE:
                        return out
                    break
            else:
                if n - j <= _MAX_PREFIX and buf[j:] in _PREFIXES:
                    # may still become a marker: hold back (this is the only text re-scanned)
                    if j > start:
                        self._text(buf[start:j])
                    self._tail = buf[j:]
                    return out
                pos = j + 1
        if start < n:
            self._text(buf[start:] if start else buf)
        return out

    def finish(self, finish_reason: str | None = None) -> list[Event]:
        """End the stream.

        Args:
            finish_reason: the server's finish reason, when known. An unclosed message is
                reported as truncated unless the server reports a normal stop (anything but
                ``"length"`` or ``None``).

        Returns:
            The last events (:class:`ToolCallIncomplete` for a call cut by the end); ``[]`` when
            already finished.
        """
        if self._finished:
            return []
        out: list[Event] = []
        self._out = out
        # Decision: a partial marker at the very end of raw token output is dropped, not text
        # (see class docstring); an unterminated tag header and held whitespace between channels
        # are dropped too.
        self._tail = ""
        self._header = None
        self._top_ws.clear()
        if self._call is not None:
            self._abandon_call()
        self._finished = True
        self._truncated = not self._closed and finish_reason in (None, "length")
        return out

    def result(self) -> ParsedOutput:
        """The parse of everything fed (calls :meth:`finish` first when it was not called)."""
        if not self._finished:
            self.finish()
        if self._result is None:
            self._result = ParsedOutput(
                reasoning_content=None if self._reasoning is None else "".join(self._reasoning),
                content="".join(self._content),
                tool_calls=tuple(self._calls),
                truncated=self._truncated,
                incomplete_tool_calls=tuple(self._incomplete),
            )
        return self._result

    # -- text ------------------------------------------------------------------------------

    def _text(self, s: str) -> None:
        if self._header is not None:
            self._header.append(s)
            return
        state = self._state
        if state == _THINK:
            assert self._reasoning is not None
            self._reasoning.append(s)
            self._out.append(ReasoningDelta(s))
        elif state == _RESPONSE:
            self._content.append(s)
            self._out.append(ContentDelta(s))
        elif state == _ARG:
            call = self._call
            assert call is not None
            call.arg_parts.append(s)
            if call.arg_string:
                self._args_delta(call, _dumps(s)[1:-1])  # JSON escaping is per character
        elif state == _JSON:
            assert self._call is not None
            self._call.arg_parts.append(s)
        elif state == _TOP:
            # Decision (spec silent): text between channels is content when it has
            # non-whitespace (a forgotten <|open|>response<|sep|>); whitespace-only runs
            # between tags are layout, held until the next marker decides, then dropped.
            if self._top_live:
                self._emit_content(s)
            elif s.isspace():
                self._top_ws.append(s)
            else:
                self._top_live = True
                self._top_ws.append(s)
                self._emit_content("".join(self._top_ws))
                self._top_ws.clear()
        elif state == _CALL and not s.isspace():
            # Decision: a value closed early by marker text leaves its rest here; the call is broken.
            assert self._call is not None
            self._call.broken = True
        # _TOOLS, blank _CALL text: text outside a call / between values is dropped (decision).

    def _emit_content(self, s: str) -> None:
        self._content.append(s)
        self._out.append(ContentDelta(s))

    # -- markers and tags --------------------------------------------------------------------

    def _marker(self, kind: int) -> None:
        self._top_ws.clear()
        self._top_live = False
        if kind == _K_SEP:
            header = self._header
            if header is not None:  # a stray <|sep|> outside a header is ignored
                self._header = None
                self._tag(self._header_open, "".join(header))
        elif kind == _K_EOM:
            self._header = None
            self._end_message()
        else:  # open / close; an unfinished header before it is dropped
            self._header = []
            self._header_open = kind == _K_OPEN

    def _tag(self, is_open: bool, header: str) -> None:
        # Transitions on a complete tag (state -> tag -> new state); anything not listed is ignored:
        #   any          open/close message  -> _DONE (end of the message; a new message is a slip)
        #   _CALL/_ARG/_JSON  open argument|json -> _ARG/_JSON (an open value is closed first)
        #   _ARG/_JSON   close argument|json -> _CALL (_CALL: a second close, the call is broken)
        #   _CALL/_ARG/_JSON  close call     -> the call is committed (abandoned when broken)
        #                                       -> _TOOLS or _TOP (its parent)
        #   _CALL/_ARG/_JSON  open think|response|tools|call, close tools
        #                                    -> the call is abandoned (incomplete), then as below
        #   any          open think          -> _THINK (reasoning starts even with thinking off)
        #   any          open response       -> _RESPONSE
        #   any          open tools          -> _TOOLS
        #   _TOOLS/other open call           -> _CALL (parent _TOOLS, or _TOP for a call outside tools)
        #   _THINK       close think         -> _TOP
        #   _RESPONSE/_THINK  close response -> _TOP (a think close omitted)
        #   _TOOLS       close tools         -> _TOP
        name, attrs = _parse_header(header)
        if name == "message":
            # Close of the message, or (a slip) the open of another one: the message is over.
            self._end_message()
            return
        state = self._state
        if state in (_CALL, _ARG, _JSON):
            call = self._call
            assert call is not None
            if name in ("argument", "json"):
                if state != _CALL:
                    self._end_value(call)  # a missing close of the previous value is implied
                if is_open:
                    self._start_value(call, name, attrs)
                elif state == _CALL:  # a second close: marker text closed the value early
                    call.broken = True
                return
            if name == "call" and not is_open:
                if state != _CALL:
                    self._end_value(call)
                if call.broken:
                    self._abandon_call()
                else:
                    self._commit_call(call)
                return
            if not (name in ("think", "response", "tools", "call") and (is_open or name == "tools")):
                return  # unknown tag, stray close think/response/call: ignored
            # Another channel or call starts (or tools close) before this call closed: the call is
            # dropped as incomplete and the tag handled where the call was opened.
            self._abandon_call()
            state = self._state
        if is_open:
            if name == "think":
                if self._reasoning is None:  # thinking off but the model thinks anyway (decision)
                    self._reasoning = []
                self._state = _THINK
            elif name == "response":
                self._state = _RESPONSE
            elif name == "tools":
                self._state = _TOOLS
            elif name == "call":
                # Decision: a call outside <|open|>tools<|sep|> is accepted.
                self._open_call(attrs, _TOOLS if state == _TOOLS else _TOP)
            return
        if (
            (name == "think" and state == _THINK)
            or (name == "response" and state in (_RESPONSE, _THINK))  # think close omitted
            or (name == "tools" and state == _TOOLS)
        ):
            self._state = _TOP

    def _end_message(self) -> None:
        if self._call is not None:
            self._abandon_call()
        self._state = _DONE
        self._closed = True

    # -- calls -------------------------------------------------------------------------------

    def _args_delta(self, call: _Call, text: str) -> None:
        if text:
            call.json_parts.append(text)
            self._out.append(ToolCallArgumentsDelta(call.index, call.id, text))

    def _open_call(self, attrs: dict[str, str], parent: int) -> None:
        call = _Call(self._next_index, self._id_factory(), attrs.get("tool", ""), parent)
        self._next_index += 1
        self._call = call
        self._state = _CALL
        self._out.append(ToolCallStarted(call.index, call.id, call.name))

    def _key_prefix(self, call: _Call, key: str) -> str:
        return ("{" if not call.json_parts else ", ") + _dumps(key) + ": "

    def _start_value(self, call: _Call, tag: str, attrs: dict[str, str]) -> None:
        call.arg_parts = []
        if tag == "json":
            self._state = _JSON
            return
        call.arg_key = attrs.get("key", "")
        call.arg_string = attrs.get("type") == "string"
        self._args_delta(call, self._key_prefix(call, call.arg_key) + ('"' if call.arg_string else ""))
        self._state = _ARG

    def _end_value(self, call: _Call) -> None:
        raw = "".join(call.arg_parts)
        call.arg_parts = []
        if self._state == _JSON:
            value, error = _decode_value(raw, JSON_MAX_DEPTH)
            if error is not None and call.error is None:
                call.error = f"its json arguments block: {error}"
            if isinstance(value, dict):
                for key, item in value.items():
                    self._args_delta(call, self._key_prefix(call, key) + _dumps(item))
                    call.items.append((key, item))
            elif call.error is None:
                # Decision: a json block that is not an object (a JSON string holding the arguments,
                # a list, text that is not JSON) makes the call a failed one with the reason, like
                # JSON beyond the limits: it is never run without its arguments.
                kind = "not JSON" if value is raw else f"a JSON {_JSON_KINDS.get(type(value), 'value')}, not an object"
                call.error = f"its json arguments block is {kind}"
        elif call.arg_string:
            self._args_delta(call, '"')  # docs/k3-format.md § Typed arguments: a string is the raw text, no unescaping
            call.items.append((call.arg_key, raw))
        else:
            value, error = _decode_value(raw, JSON_MAX_DEPTH - 1)  # it sits inside the arguments object
            if error is not None and call.error is None:
                call.error = f"argument {call.arg_key!r}: {error}"
            self._args_delta(call, _dumps(value))
            call.items.append((call.arg_key, value))
        self._state = _CALL

    def _commit_call(self, call: _Call) -> None:
        self._args_delta(call, "}" if call.json_parts else "{}")
        arguments_json = "".join(call.json_parts)
        arguments = dict(call.items)
        self._calls.append(ParsedToolCall(call.index, call.id, call.name, arguments, arguments_json, call.error))
        self._out.append(ToolCallDone(call.index, call.id, call.name, arguments, arguments_json, call.error))
        self._call = None
        self._state = call.parent

    def _abandon_call(self) -> None:
        call = self._call
        assert call is not None
        self._incomplete.append(IncompleteToolCall(call.index, call.id, call.name, dict(call.items)))
        self._out.append(ToolCallIncomplete(call.index, call.id, call.name))
        self._call = None
        self._state = call.parent


def parse(
    text: str,
    *,
    thinking: bool = True,
    finish_reason: str | None = None,
    id_factory: Callable[[], str] | None = None,
) -> ParsedOutput:
    """Parse one complete K3 output (docs/k3-format.md § Output), recovering from the model slips it lists.

    Args:
        text: the generated text after the generation prompt, decoded with
            ``skip_special_tokens=False`` (markers contiguous). ``<|end_of_msg|>`` may be present.
        thinking: whether thinking was on for the request (the prompt opened ``think``).
        finish_reason: the server's finish reason when known (``"length"`` marks truncation; a
            normal stop with an unclosed message is not reported as truncated).
        id_factory: makes tool-call ids (default :func:`new_tool_call_id`).

    Returns:
        The :class:`ParsedOutput`; never raises on malformed output (see :class:`StreamParser`
        for the recovery rules, the decisions where the spec is silent, and the one ambiguity:
        marker text inside a string argument cannot be told from a real marker).
    """
    parser = StreamParser(thinking, id_factory=id_factory)
    parser.feed(text)
    parser.finish(finish_reason)
    return parser.result()
