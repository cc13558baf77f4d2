"""Text helpers shared by messages, tools and the CLI: visible escapes for lone surrogates
(:func:`visible_text`) and terminal-safe model text (:func:`printable`). A leaf module: it
imports nothing of kimik3."""

from __future__ import annotations

import re

__all__ = ["printable", "visible_text"]

_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def visible_text(text: str) -> str:
    """``text`` as valid UTF-8: each lone surrogate becomes a visible escape.

    Surrogates ``U+DC80``-``U+DCFF`` (undecodable bytes kept by ``surrogateescape``, e.g. a file
    name ``caf\\xe9.txt`` from :func:`os.listdir`) become ``\\xNN`` (the byte); other lone
    surrogates become ``\\udNNN``. Text without surrogates is returned as is.
    """
    if text.isascii() or not _SURROGATE_RE.search(text):
        return text

    def escape(m: re.Match[str]) -> str:
        code = ord(m.group())
        return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"

    return _SURROGATE_RE.sub(escape, text)


# terminal escape sequences (CSI, OSC, two-character), C0/C1 controls but tab and newline, and
# the bidirectional overrides: what could recolour, move the cursor or reorder a terminal line
_UNPRINTABLE = re.compile(
    r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[ -/]*[0-~])?"
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]"
)


def printable(text: str) -> str:
    """``text`` without terminal escape sequences, control characters (tab and newline stay)
    and bidirectional overrides: model-provided text that a terminal shows as it is.

    Example: ``printable("a\\x1b[31mb\\rc")`` is ``"abc"``.
    """
    return _UNPRINTABLE.sub("", text)
