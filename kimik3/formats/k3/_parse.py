"""K3 output parsing: raw generated text -> reasoning, content and tool calls (docs/k3-format.md § Output).

The model's output (the text generated after the generation prompt, decoded with
``skip_special_tokens=False`` so the markers arrive contiguous) is a tag stream::

    [reasoning]<|close|>think<|sep|>                       thinking on (the prompt opened think)
    <|open|>response<|sep|>[text]<|close|>response<|sep|>   the prompt opened response when off
    [<|open|>tools<|sep|> (call)+ <|close|>tools<|sep|>]
    <|close|>message<|sep|><|end_of_msg|>        (call: docs/k3-format.md § Typed arguments)

:class:`StreamParser` is one incremental state machine; :func:`parse` is that machine fed the
whole text at once, so streaming gives exactly the non-streaming result for every chunking.

Values are read exactly as written (:class:`StreamParser`, Values). Work is linear: each
character is scanned once (a partial marker held at a chunk end, at most 23, once more).

Longer than the ~600-line guide on purpose (issue 42, point 5): the module is one state machine,
and a quarter of it is the rules its docstrings and comments state (values, recovery, decisions,
the transition table of :meth:`StreamParser._tag`). Every method reads and moves the same state (the
channel, the open call, the held tail and header, :attr:`StreamParser.regular`); split across
modules, one state's handling would be spread over files sharing every attribute. What stands
apart is elsewhere: the markers' spelling and near misses in :mod:`._markers`, a call and its
values in :mod:`._values`, the events in :mod:`._events`, chat mode's reading of leaked markup in
:mod:`._recover`.
"""

from __future__ import annotations

from collections.abc import Callable

from ..._exceptions import ParserStateError
from ._encode import END_OF_MSG, OPEN, SEP
from ._events import (
    ContentDelta,
    Event,
    IncompleteToolCall,
    ParsedOutput,
    ParsedToolCall,
    ReasoningDelta,
    ToolCallIncomplete,
    ToolCallStarted,
    new_tool_call_id,
)
from ._markers import (
    BARE_TAGS,
    K_CLOSE,
    K_EOM,
    K_OPEN,
    K_SEP,
    MARKERS,
    MAX_PREFIX,
    PREFIXES,
    TEXT,
    near_marker,
    near_prefix,
    parse_header,
)
from ._values import CLOSERS, Call, closer_overlap

__all__ = ["StreamParser", "parse"]

# -- machine states ----------------------------------------------------------------------------
# Legend of the parser's states (where the text being read goes):
#   _THINK     inside the think channel: text is reasoning
#   _RESPONSE  inside the response channel: text is content
#   _TOP       between channels, inside the message: non-blank text is content (decision)
#   _TOOLS     inside <tools>, outside any call: text is dropped
#   _CALL      inside a call, before its first value: blank text is dropped; other text fails the call
#   _ARG       inside an <argument>: text is the value (streamed when its type is string)
#   _JSON      inside a <json> block (the encoder's fallback for unparsable arguments)
#   _AFTER     after a value's closer: held until what follows shows whether the closer ended it
#   _DONE      the message is over: everything after is ignored
_THINK, _RESPONSE, _TOP, _TOOLS, _CALL, _ARG, _JSON, _AFTER, _DONE = range(9)
_CHANNEL_TAGS = ("think", "response", "tools", "call")


class StreamParser:
    """Incremental parser of K3 output text; :func:`parse` is this fed all at once.

    Feed text deltas as they arrive; each :meth:`feed` returns the typed events the new text
    completes. Call :meth:`finish` at the end of the stream, then :meth:`result`.

    Guarantees: for every chunking the same :meth:`result` (ids aside, from ``id_factory`` in
    call order), equal to :func:`parse` of the whole text; no byte of a marker read as structure
    in a reasoning or content delta (a partial marker at a chunk end is held only while it can
    still become one; a call outside the tools section keeps its text as written); a call's
    argument deltas concatenate to its ``arguments_json``, string values streamed as they
    arrive; work linear in the output.

    Values (docs/k3-format.md § Typed arguments), kept exactly as written (Moonshot's encoder
    writes a string value raw): only the exact closer (``<|close|>argument<|sep|>``; ``json``
    blocks: ``<|close|>json<|sep|>``) ends a value; ``<|open|>``, ``<|sep|>``, ``<|close|>`` and
    anything else, partial markers, would-be headers are text of it, so ``render_output`` then
    :func:`parse` gives back every value that does not hold its closer. After a closer only blank
    text, the next value's open tag or the call's close may follow, and after that close what
    may follow a call (another call, the tools or message close); anything else shows the closer
    was text of the value, which runs on to the next closer, and the call fails (``error``:
    never run). Non-blank text between a call's header and its first value fails it too.

    Recovery (docs/k3-format.md § Known model slips): a missed think close (a later channel tag
    ends the reasoning), a skipped think channel (the text is the answer), a missed response or
    tools close (the next channel tag or the message close ends them), output cut inside a call
    (complete calls kept; the cut one in ``incomplete_tool_calls``, a :class:`ToolCallIncomplete`
    event, never returned), a partial marker at the very end (text: markers are single tokens),
    text after the message close (ignored).

    Decisions where the spec is silent (docs/k3-format.md § Decisions where the sources are
    silent; code comments): non-blank text between channels is content, blank is layout; text in
    ``tools`` outside a call is dropped; a call outside the tools section is never run (its text
    stays as written, its name in ``misplaced_tool_calls``); a think channel opened with thinking
    off is reasoning; a call without ``tool`` is named ``""`` and ``index`` is ignored; a ``json``
    block adds its keys when it decodes to an object, else the call fails; a call interrupted
    before its first value is dropped as incomplete; an interrupted header, an unknown tag and a
    stray ``<|sep|>`` are ignored.

    Args:
        thinking: whether the prompt opened the think channel (thinking on) or the response
            channel (off). Must match the request.
        id_factory: makes each call's id (default :func:`new_tool_call_id`); pass a counter for
            deterministic replays and tests.
        tolerant: chat mode's reading of markup a server left in its text (:mod:`._recover`),
            never raw output: a marker spelled a little wrong (:func:`~._markers.near_marker`:
            ``<|sep|``, ``<| sep |>``; SGLang #33530), a bare channel tag followed by a marker
            instead of its sep (SGLang #32567), a stray channel close with nothing but blank
            after it (senpi #1092), a partial marker and a tag the text ends inside (SGLang
            #33097; any tag when ``finish`` says the output was cut, else a bare channel tag)
            are read as the slips they are and keep :attr:`regular`; a stray close or bare tag
            at the end only when the output was cut or other tags were read (else it may be
            prose quoting a marker), a partial marker at a cut end is dropped (a near-miss's
            start with a ``|`` too: :func:`~._markers.near_prefix`), and a channel opened after
            answer text is not regular (issue 41, attack round); a sep right after a sep is one;
            text between two calls (B07) and
            a call in whole tags that fails on its values (a key given twice) keep it regular.
        after_tools: a tools section came before this text (chat mode: the server returned
            calls), so a tools section in it is a second one: its calls never run (issue 40, N08).
    """

    def __init__(self, thinking: bool = True, *, id_factory: Callable[[], str] | None = None,
                 tolerant: bool = False, after_tools: bool = False) -> None:
        self._id_factory = id_factory or new_tool_call_id
        self._tolerant = tolerant
        self._stray: tuple[int, int] | None = None  # tolerant: (content, reasoning) pieces at a stray close
        self._state = _THINK if thinking else _RESPONSE
        self._reasoning: list[str] | None = [] if thinking else None
        self._content: list[str] = []
        self._calls: list[ParsedToolCall] = []
        self._incomplete: list[IncompleteToolCall] = []
        self._misplaced: list[str] = []
        self._call: Call | None = None
        self._closer = ""  # the open value's closer
        self._next_index = 0
        self._tail = ""  # held-back partial marker (or partial closer, inside a value)
        self._header: list[str] | None = None  # pieces of a tag header awaiting its <|sep|>
        self._header_open = False
        self._top_ws: list[str] = []  # whitespace between channels, held until we know its fate
        self._top_live = False  # non-whitespace text seen between channels since the last marker
        self._out: list[Event] = []
        self._closed = False  # the message closed
        self._tools_seen = after_tools  # a tools section was opened: K3 writes one, a second one is text
        self._think_tools: int | None = None  # a tools section opened in the think channel: its first call
        self._void_tools: int | None = None  # inside a tools section that is not one: the state its close returns to
        self._after_close = 0  # non-blank characters after the message close
        self._finished = False
        self._truncated = False
        self._result: ParsedOutput | None = None
        self.regular = True
        """Every marker so far was part of well-formed K3 structure, nothing ignored, dropped, cut or
        failed (the spec's model slips aside): chat mode's test for markup a server left in a field."""

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
        if not delta:
            return []
        if self._state == _DONE:
            self._ignored(delta)
            return []
        out: list[Event] = []
        self._out = out
        buf = self._tail + delta if self._tail else delta
        self._tail = ""
        if self._state in (_ARG, _JSON) and "<" not in buf:  # the hot path: a long value streaming
            self._value_text(buf)
            return out
        pos, n = 0, len(buf)
        while pos < n:
            pos = self._lex_value(buf, pos) if self._state in (_ARG, _JSON) else self._lex(buf, pos)
            if self._state == _DONE:
                self._ignored(buf[pos:])
                break
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
        if self._state == _AFTER and self._call is not None and self._call.closing:
            self._confirm(self._call)  # the output ended after a call's close: it closed
        tail, self._tail = self._tail, ""
        cut = finish_reason in (None, "length")
        if tail and self._tolerant and cut and self._state not in (_ARG, _JSON):
            pass  # chat mode, a cut answer: a marker cut to a prefix ("answer<|close") is dropped
        elif tail:  # a partial marker at the very end is text (decision, see class docstring)
            self.regular = self.regular and self._tolerant  # (a model slip of the spec's list)
            if self._state in (_ARG, _JSON):
                self._value_text(tail)
            else:
                self._text(tail)
        if self._header is not None:  # an unfinished tag is dropped
            # tolerant: a marker sequence cut by the end (SGLang #33097: "deep thought<|close|>",
            # "the answer<|close|>response" at a length finish), or a bare tag left without its sep
            # at the end (senpi #1092: "it is done<|close|>think\n") is K3 structure, dropped, cut
            # or not (prose quoting a marker does so in Markdown code, which is never read, or with
            # text after it, which stays: the stray-close rule below)
            bare = "".join(self._header).strip() in BARE_TAGS
            if not (self._tolerant and (cut or bare)):
                self.regular = False
            self._header = None
        self._top_ws.clear()
        if self._call is not None:
            self._drop_call()
        if self._stray is not None:  # text after a stray channel close: it was not a slip at the end
            content, reasoning = self._stray
            after = "".join(self._content[content:]) + "".join((self._reasoning or [])[reasoning:])
            if after.strip():  # text after it: prose quoting a marker, not a slip at the end
                self.regular = False
        self._finished = True
        self._truncated = not self._closed and finish_reason in (None, "length")
        if self._after_close:
            self.regular = False
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
                misplaced_tool_calls=tuple(self._misplaced),
            )
        return self._result

    # -- lexers ------------------------------------------------------------------------------
    def _lex(self, buf: str, pos: int) -> int:
        """Markers and text from ``pos``; returns where it stopped (the end, or where a value
        starts or reopens: the rest is lexed as value text)."""
        n = len(buf)
        start = pos
        find = buf.find
        startswith = buf.startswith
        while True:
            j = find("<", pos)
            if j < 0:
                break
            for marker, kind in MARKERS:
                if startswith(marker, j):
                    if kind == K_SEP and self._tolerant and j == start and startswith(SEP, j - len(SEP)) and (
                            j >= len(SEP) and self._state != _AFTER):
                        start = pos = j + len(SEP)  # tolerant: a sep written twice is one (as "<|sep|<|sep|>")
                        break
                    if j > start:
                        self._text(buf[start:j])
                        if self._state in (_ARG, _JSON):  # the text reopened a value
                            return j
                    if not self._marker(kind):  # it reopened a value: the marker is value text
                        return j
                    start = pos = j + len(marker)
                    if self._state in (_ARG, _JSON, _DONE):
                        return pos
                    break
            else:
                near = near_marker(buf, j) if self._tolerant else None
                if near is not None:  # chat mode: a marker the server left spelled a little wrong
                    kind, size = near
                    if j > start:
                        self._text(buf[start:j])
                        if self._state in (_ARG, _JSON):
                            return j
                    if not self._marker(kind):
                        return j
                    start = pos = j + size
                    if self._state in (_ARG, _JSON, _DONE):
                        return pos
                    continue
                if (n - j <= MAX_PREFIX and buf[j:] in PREFIXES) or (self._tolerant and near_prefix(buf[j:])):
                    # may still become a marker (tolerant: a near-miss too): hold back (the only text re-scanned)
                    if j > start:
                        self._text(buf[start:j])
                        if self._state in (_ARG, _JSON):
                            return j
                    self._tail = buf[j:]
                    return n
                pos = j + 1
        if start < n:
            self._text(buf[start:] if start else buf)
        return n

    def _lex_value(self, buf: str, pos: int) -> int:
        """Value text from ``pos`` up to the value's exact closer; returns the position after it
        (or the end, holding back a partial closer)."""
        closer = self._closer
        k = buf.find(closer, pos)
        if k < 0:
            n = len(buf)
            hold = closer_overlap(buf, pos, closer) if buf.find("<", max(pos, n - len(closer) + 1)) >= 0 else 0
            end = n - hold
            if end > pos:
                self._value_text(buf[pos:end])
            if hold:
                self._tail = buf[end:]
            return n
        if k > pos:
            self._value_text(buf[pos:k])
        call = self._call
        assert call is not None
        self._raw(closer)
        call.pending = [closer]
        self._state = _AFTER
        return k + len(closer)

    def _raw(self, s: str) -> None:
        call = self._call
        if call is not None and call.raw is not None:
            call.raw.append(s)

    # -- text ------------------------------------------------------------------------------
    def _text(self, s: str) -> None:
        state = self._state
        if self._header is not None:
            self._header.append(s)
            if state == _AFTER:
                assert self._call is not None and self._call.pending is not None
                self._call.pending.append(s)
            self._raw(s)
            return
        if state == _THINK:
            assert self._reasoning is not None
            self._reasoning.append(s)
            self._out.append(ReasoningDelta(s))
        elif state == _RESPONSE:
            self._content.append(s)
            self._out.append(ContentDelta(s))
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
        elif state == _AFTER:
            call = self._call
            assert call is not None and call.pending is not None
            self._raw(s)
            if s.isspace():  # layout between values, unless what follows shows otherwise
                call.pending.append(s)
            elif call.closing:  # text after the call's close: held until what follows decides (B07)
                call.pending.append(s)
                call.text_after = True
            else:  # text after a closer: the closer was text of the value
                self._reopen()
                self._value_text(s, raw=False)
        elif state == _CALL:
            self._raw(s)
            if not s.isspace():  # Decision: text before the first value fails the call
                self._fail(self._call, "it has text outside any argument")
        elif state == _TOOLS and not s.isspace():
            self.regular = False  # text inside tools, outside a call, is dropped (decision)

    def _value_text(self, s: str, raw: bool = True) -> None:
        call = self._call
        assert call is not None
        if raw and call.raw is not None:
            call.raw.append(s)
        call.value_text(self._out, s)

    def _emit_content(self, s: str) -> None:
        self._content.append(s)
        self._out.append(ContentDelta(s))

    def _ignored(self, s: str) -> None:
        # Text after the message close is ignored (docs/k3-format.md § Known model slips): its size is kept.
        self._after_close += len(s.replace(END_OF_MSG, "").strip())

    # -- markers and tags --------------------------------------------------------------------
    def _marker(self, kind: int) -> bool:
        """Handle one marker; False when it reopened a value and must be lexed as value text."""
        if self._state == _AFTER:
            return self._marker_after(kind)
        self._top_ws.clear()
        self._top_live = False
        call = self._call
        if kind == K_SEP:
            self._raw(SEP)
            header = self._header
            if header is None:  # a stray <|sep|> outside a header is ignored; in chat mode one that
                # starts a field is the end of a marker cut by the field's start (reasoning
                # "plan<|close|>think", content "<|sep|>the answer"): K3 structure, read
                if not (self._tolerant and not self._calls and not "".join(self._content).strip()
                        and not "".join(self._reasoning or ()).strip()):
                    self.regular = False
                return True
            self._header = None
            self._tag(self._header_open, "".join(header))
        elif kind == K_EOM:
            if self._header is not None and not self._bare_header():
                self.regular = False
            self._header = None
            self._end_message(by_tag=False)
        else:  # open / close; an unfinished header before it is dropped
            if self._header is not None and not self._bare_header():
                self.regular = False
            call = self._call
            if call is not None and call.raw is not None:
                call.raw_tag = len(call.raw)
            self._raw(TEXT[kind])
            self._header = []
            self._header_open = kind == K_OPEN
        return True

    def _bare_header(self) -> bool:
        """Tolerant (chat mode): an open header that is a bare K3 tag name, followed by a marker
        instead of its sep (SGLang #32567: ``<|close|>think<|open|>response<|sep|>``), is a whole
        tag: applied now; True when it was."""
        header = self._header
        if not self._tolerant or header is None or (text := "".join(header).strip()) not in BARE_TAGS:
            return False
        self._header = None
        self._tag(self._header_open, text)  # a channel tag: never into a value
        return True

    def _marker_after(self, kind: int) -> bool:
        # After a value's closer: the next value's open tag or the call's close confirm it; a
        # second closer moves it on; anything else shows it was text of the value.
        call = self._call
        assert call is not None and call.pending is not None
        pending = call.pending
        header = self._header
        if kind in (K_OPEN, K_CLOSE) and header is None:
            call.pending_tag = len(pending)
            pending.append(TEXT[kind])
            if call.raw is not None:
                call.raw_tag = len(call.raw)
            self._raw(TEXT[kind])
            self._header = []
            self._header_open = kind == K_OPEN
            return True
        if kind == K_EOM and header is None and call.closing:  # the message ends after the call
            self._confirm(call)
            self._end_message(by_tag=False)
            return True
        if kind != K_SEP or header is None:  # a stray <|sep|>, <|end_of_msg|>, an interrupted header
            self._header = None
            self._reopen()
            return False
        self._header = None
        self._raw(SEP)
        text = "".join(header)
        name, attrs = parse_header(text)
        if not self._header_open and text == call.tag:  # a second closer: it may be the real one
            del pending[call.pending_tag :]
            self._reopen()
            call.pending = [self._closer]
            self._state = _AFTER
        elif call.closing:  # after the call's close: what may follow a call confirms both closes
            if name == "message" or (self._header_open and name in _CHANNEL_TAGS) or (
                    not self._header_open and name == "tools"):
                self._confirm(call)
                self._tag(self._header_open, text)
            else:
                pending.append(SEP)
                self._reopen()
        elif self._header_open and name in CLOSERS:
            self._end_value(call)
            self._start_value(call, name, attrs)
        elif not self._header_open and name == "call":
            if call.raw is not None:  # outside the tools section: it never runs, nothing to confirm
                self._end_value(call)
                self._close_call(call)
            else:  # held until what follows the call confirms it (a closer spelled in the value?)
                pending.append(SEP)
                call.closing = True
        else:
            pending.append(SEP)
            self._reopen()
        return True

    def _confirm(self, call: Call) -> None:
        """What followed a call's close confirms it, and its last value's closer: commit (text
        between it and what followed is dropped, as text in the tools section outside a call)."""
        call.closing = False
        if call.text_after and not self._tolerant:  # (tolerant: B07, a slip of the spec's list)
            self.regular = False
        self._end_value(call)
        self._close_call(call)

    def _tag(self, is_open: bool, header: str) -> None:
        # Transitions on a complete tag (state -> tag -> new state); anything not listed is ignored:
        #   any          open/close message  -> _DONE (end of the message; a new message is a slip)
        #   _CALL        open argument|json  -> _ARG/_JSON
        #   _CALL        close call          -> the call is committed (failed when damaged) -> its parent
        #   _CALL        close argument|json -> the call fails (a close without a value)
        #   _CALL        open think|response|tools|call, close tools
        #                                    -> the call is dropped (incomplete), then as below
        #   any          open think          -> _THINK (reasoning starts even with thinking off)
        #   any          open response       -> _RESPONSE
        #   any          open tools          -> _TOOLS; in _THINK, or after a tools section: a section
        #                                       that is not one (calls never run), its close -> back
        #   _TOOLS       open call           -> _CALL (parent _TOOLS)
        #   _THINK/_RESPONSE/_TOP  open call -> _CALL, a call outside the tools section: kept as
        #                                       text of the channel, never run (parent: that state)
        #   _THINK       close think         -> _TOP
        #   _RESPONSE/_THINK  close response -> _TOP (a think close omitted)
        #   _TOOLS       close tools         -> _TOP
        # (_ARG/_JSON see no tags: only their closer ends them; _AFTER: see _marker_after.)
        name, attrs = parse_header(header)
        if name == "message":
            # Close of the message, or (a slip) the open of another one: the message is over.
            self._end_message(by_tag=True)
            return
        state = self._state
        if state == _CALL:
            call = self._call
            assert call is not None
            if name in CLOSERS:
                if is_open:
                    self._start_value(call, name, attrs)
                else:
                    self._fail(call, f"it closes {name!r} with no value open")
                return
            if name == "call" and not is_open:
                self._close_call(call)
                return
            if not (name in _CHANNEL_TAGS and (is_open or name == "tools")):
                self.regular = False
                return  # unknown tag, stray close think/response: ignored
            # Another channel or call starts (or tools close) before this call's first value:
            # the call is dropped as incomplete and the tag handled where the call was opened.
            self._drop_call(by_tag=True)
            state = self._state
        if is_open and self._tolerant and name in ("think", "response") and state == _RESPONSE and any(
                t.strip() for t in self._content):  # chat mode: K3 never opens a channel inside its answer's
            self.regular = False  # text: prose quoting the tag ("K3 uses <|open|>response<|sep|> to ...")
        if is_open:
            if name == "think":
                if self._reasoning is None:  # thinking off but the model thinks anyway (decision)
                    self._reasoning = []
                self._state = _THINK
            elif name == "response":
                self._think_tools = None
                self._state = _RESPONSE
            elif name == "tools":
                # Decision (issue 40, N08): K3 writes one tools section, after the think channel. A
                # second one, or one opened inside the think channel, is not one: its calls are
                # outside the tools section (text of where they stand, never run) and its close
                # returns there; the first section after the think channel is the tools section.
                # A section opened inside the think channel ends it (the think close omitted:
                # docs/k3-format.md § Known model slips) unless a think close follows it: then it
                # was inside the think channel and its calls are taken back (:meth:`_inside_think`).
                if self._tools_seen and state != _TOOLS:
                    self._void_tools = state if state == _THINK else _TOP
                    self._state = self._void_tools
                    return
                if self._tools_seen:  # an open tag repeated inside the section changes nothing
                    return
                if state == _THINK:
                    self._think_tools = len(self._calls)
                self._tools_seen = True
                self._state = _TOOLS
            elif name == "call":
                self._open_call(attrs, header, state)
            else:
                self.regular = False
            return
        if name == "tools" and self._void_tools is not None and state == self._void_tools:
            self._void_tools = None  # the close of a tools section that was not one
        elif name == "think" and self._think_tools is not None and state in (_TOP, _TOOLS):
            self._inside_think()
        elif (
            (name == "think" and state == _THINK)
            or (name == "response" and state in (_RESPONSE, _THINK))  # think close omitted
            or (name == "tools" and state == _TOOLS)
        ):
            self._state = _TOP
        elif self._tolerant and name in BARE_TAGS:  # a stray channel close: a slip only at the end
            if self._stray is None:  # (senpi #1092: "it is done<|close|>think" after the answer)
                self._stray = (len(self._content), len(self._reasoning or ()))
            self._state = _TOP  # blank text after it is layout
        else:
            self.regular = False

    def think_closed(self) -> None:
        """Chat mode: the server ended the think channel here (it sent the answer after this
        reasoning), as a think close would: a tools section opened in the reasoning was inside
        the think channel (:meth:`_inside_think`)."""
        if self._think_tools is not None and self._state in (_TOP, _TOOLS):
            self._inside_think()

    def _inside_think(self) -> None:
        """A think close after a tools section opened in the think channel: that section was
        inside it (issue 41, N08 kind): its calls never run (misplaced; a
        :class:`ToolCallIncomplete` follows each one's done event) and the first tools section
        after this close is the tools section."""
        start, self._think_tools = self._think_tools, None
        assert start is not None
        taken, self._calls = self._calls[start:], self._calls[:start]
        for call in taken:
            self._misplaced.append(call.name)
            self._out.append(ToolCallIncomplete(call.index, call.id, call.name))
        self._tools_seen = False
        self._state = _TOP

    def _end_message(self, *, by_tag: bool) -> None:
        if self._call is not None:
            self._drop_call(by_tag=by_tag)
        self._state = _DONE
        self._closed = True

    # -- calls -------------------------------------------------------------------------------
    def _open_call(self, attrs: dict[str, str], header: str, parent: int) -> None:
        name = attrs.get("tool", "")
        self._state = _CALL
        if parent != _TOOLS:  # Decision: a call outside the tools section is text, never run
            self._call = Call(-1, "", name, parent, [OPEN, header, SEP])
            return
        self._call = Call(self._next_index, self._id_factory(), name, parent)
        self._next_index += 1
        self._out.append(ToolCallStarted(self._call.index, self._call.id, name))

    def _start_value(self, call: Call, tag: str, attrs: dict[str, str]) -> None:
        call.start_value(self._out, tag, attrs)
        self._closer = CLOSERS[tag]
        self._state = _JSON if tag == "json" else _ARG

    def _reopen(self) -> None:
        call = self._call
        assert call is not None
        self.regular = False
        self._state = _JSON if call.tag == "json" else _ARG
        call.reopen(self._out)

    def _end_value(self, call: Call) -> None:
        call.end_value(self._out)
        self._state = _CALL

    def _fail(self, call: Call | None, why: str) -> None:
        assert call is not None
        self.regular = False
        call.fail(why)

    def _close_call(self, call: Call) -> None:
        self._call = None
        self._state = call.parent
        if call.raw is not None:
            self._misplaced_text(call, call.raw)
            return
        if call.error is not None and not self._tolerant:  # (tolerant: a value the model got wrong, in
            self.regular = False  # whole structure, is a failed call it reads: a key twice, bad JSON)
        self._calls.append(call.done(self._out))

    def _drop_call(self, *, by_tag: bool = False) -> None:
        """The call never closed (cut, or interrupted: ``by_tag``): reported, never run."""
        call = self._call
        assert call is not None
        self._call = None
        self._state = call.parent
        if call.raw is not None:  # an interrupting tag is not the call's text
            self._misplaced_text(call, call.raw[: call.raw_tag] if by_tag else call.raw)
            return
        self.regular = False
        self._incomplete.append(call.incomplete())
        self._out.append(ToolCallIncomplete(call.index, call.id, call.name))

    def _misplaced_text(self, call: Call, raw: list[str]) -> None:
        self._misplaced.append(call.name)
        text = "".join(raw)
        if self._state == _THINK:
            assert self._reasoning is not None
            self._reasoning.append(text)
            self._out.append(ReasoningDelta(text))
        elif self._state == _RESPONSE:
            self._emit_content(text)
        else:
            self._text(text)  # between channels: content, as any text there


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
        for the value rule, the recovery rules and the decisions where the spec is silent).
    """
    parser = StreamParser(thinking, id_factory=id_factory)
    parser.feed(text)
    parser.finish(finish_reason)
    return parser.result()

