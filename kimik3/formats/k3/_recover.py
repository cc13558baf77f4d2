"""K3 markup a chat server left in a text field: held while it streams, read back as structure
only when it is K3 structure (docs/chat-mode.md § Leaked markup).

In chat mode the server parses K3's output, but servers leak: a missed think close sends the rest
of the message as reasoning (vLLM #57689: a response-only answer streamed as reasoning, markers
included), a marker spelled as ordinary text sends the reasoning into the answer (SGLang #32677),
a request without tools gets its tools section back as content (SGLang #39583). Text a server
parsed is also legitimately full of ``<`` and quoted markers. The rule, built on the raw parser
(:class:`~kimik3.formats.k3.StreamParser`) so that every K3 rule lives in this package:

- :class:`MarkedText` passes a field's text through at once, except a trailing partial marker
  (held until the next piece; released intact at the end) and everything from the first complete
  marker on, exact or a near-miss (``<|sep|``, ``<| sep |>``: :func:`~._markers.near_marker`),
  held to the end of the stream.
- :func:`read_marked` then parses the field's whole text with the raw parser. When the parse is
  :attr:`~kimik3.formats.k3.StreamParser.regular` (every marker part of a well-formed K3
  structure, nothing ignored, dropped, cut or failed; the model slips of the spec's list aside),
  the held text was K3 structure and its parse is the answer; otherwise it was text, and is
  released intact.
"""

from __future__ import annotations

import re

from ._events import ParsedOutput
from ._markers import find_marker
from ._parse import StreamParser

__all__ = ["MarkedText", "holds_markup", "read_marked"]


class MarkedText:
    """One text field of a chat server's answer (its reasoning or its content), as it streams.

    Attributes:
        sent: the pieces passed on so far.
        held: the text from the first complete marker on, held to the end (None until a marker
            appears).
    """

    __slots__ = ("held", "sent", "tail")

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.tail = ""  # a partial marker at the end of the text so far
        self.held: list[str] | None = None

    def feed(self, text: str) -> str:
        """The next piece of the field; returns what can be passed on now ("" while held)."""
        if self.held is not None:
            self.held.append(text)
            return ""
        buf = self.tail + text
        self.tail = ""
        first, found = find_marker(buf)
        if found:
            self.held = [buf[first:]]
        else:
            self.tail = buf[first:]  # may still become a marker (exact or a near-miss)
        buf = buf[:first]
        if buf:
            self.sent.append(buf)
        return buf

    def release(self) -> str:
        """The held text, as plain text (the end of the stream)."""
        text = self.tail + "".join(self.held or ())
        self.tail, self.held = "", None
        if text:
            self.sent.append(text)
        return text

    @property
    def text(self) -> str:
        """Everything passed on so far."""
        return "".join(self.sent)


def read_marked(sent: str, held: str, *, thinking: bool, cut: bool = False,
                after_tools: bool = False, think_closed: bool = False) -> ParsedOutput | None:
    """The parse of a field's text ``sent + held`` when ``held`` is K3 structure, else None.

    The raw parser reads it in its tolerant mode (chat mode only; :class:`StreamParser`
    ``tolerant``): markers spelled a little wrong (:func:`~._markers.near_marker`), a bare channel
    tag without its sep, and a marker sequence cut by the end of the answer are read as the
    structure they are; the parse is then taken only when it is regular.

    Args:
        sent: the field's text already passed on (no marker in it).
        held: the text from its first marker (exact or a near-miss) on.
        thinking: where the text starts: in the think channel (True: a reasoning field, or
            content a server never split the reasoning off) or in the response channel.
        cut: the answer was cut (``finish_reason`` ``length``, or a closed stream): a tag the
            text ends inside was cut there (SGLang #33097: ``"deep thought<|close|>"``).
        after_tools: the server returned calls of its own: a tools section in the text is a
            second one, its calls never run (issue 40, N08).

        think_closed: a reasoning field the server ended (it sent an answer after it): its end
            is a think close, so a tools section opened in it was inside the think channel, its
            calls never run (:meth:`StreamParser.think_closed`).

    Returns:
        The :class:`~kimik3.formats.k3.ParsedOutput` (its reasoning starts with ``sent`` when
        ``thinking``, its content otherwise), or None when the parse is not regular: then the
        held text is text (a quoted marker, a ``<|`` that is not structure) and stays as it is.
    """
    if _quoted(sent + held):
        return None
    parser = StreamParser(thinking, tolerant=True, after_tools=after_tools)
    parser.feed(sent + held)
    if think_closed:
        parser.think_closed()
    parser.finish("length" if cut else "stop")
    return parser.result() if parser.regular else None


_CODE = re.compile(r"^ {0,3}(`{3,}|~{3,})[^\n]*\n.*?^ {0,3}\1[ \t]*$|(`+)(?!`).+?(?<!`)\2(?!`)", re.M | re.S)
"""A closed Markdown code fence (``` or ~~~ at a line start, up to its closing line) or code span."""


def _markers(text: str) -> tuple[list[int], list[int]]:
    """Where the markers (exact or near-miss) of ``text`` start: ``(outside code, inside code)``
    (code: a closed Markdown code fence or code span, :data:`_CODE`)."""
    code = [m.span() for m in _CODE.finditer(text)]
    outside: list[int] = []
    inside: list[int] = []
    pos, found = find_marker(text)
    while found:
        (inside if any(a <= pos < b for a, b in code) else outside).append(pos)
        pos, found = find_marker(text, pos + 1)
    return outside, inside


def _quoted(text: str) -> bool:
    """Whether a marker of ``text`` stands inside Markdown code: then the field quotes markup
    (docs, an example), and the whole field is text (issue 41, item 3: a fence quoting markup)."""
    return bool(_markers(text)[1])


def holds_markup(text: str) -> bool:
    """Whether ``text`` holds a K3 marker (exact or a near-miss) outside Markdown code: in chat
    mode, markup left in a field that could not be read as structure (or prose quoting one: they
    cannot be told apart). A marker inside a code span or fence is quoted: text, no issue."""
    return bool(_markers(text)[0])
