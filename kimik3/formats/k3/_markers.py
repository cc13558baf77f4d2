"""The spelling of K3's markers in output text, and tag headers: what both readers of K3 output
(the raw parser, :mod:`._parse`, and chat mode's reading of text a server left markers in,
:mod:`._recover`) scan for (docs/k3-format.md § Tokens).
"""

from __future__ import annotations

import re
import sys

from ._encode import CLOSE, END_OF_MSG, OPEN, SEP

__all__ = [
    "BARE_TAGS", "K_CLOSE", "K_EOM", "K_OPEN", "K_SEP", "MARKERS", "MAX_PREFIX", "PREFIXES", "TEXT", "find_marker",
    "near_marker", "near_prefix", "parse_header",
]  # fmt: skip

K_OPEN, K_CLOSE, K_SEP, K_EOM = 0, 1, 2, 3
MARKERS: tuple[tuple[str, int], ...] = (
    (OPEN, K_OPEN),
    (CLOSE, K_CLOSE),
    (SEP, K_SEP),
    (END_OF_MSG, K_EOM),
)
"""Each marker's text and kind, in the order the lexer tries them."""

TEXT = (OPEN, CLOSE, SEP, END_OF_MSG)
"""A marker's text by kind."""

PREFIXES = frozenset(m[:i] for m, _ in MARKERS for i in range(1, len(m)))
"""Every proper prefix of a marker: the text a chunk may end with while it can still become one."""

MAX_PREFIX = max(len(m) for m, _ in MARKERS) - 1

# -- markers a server left spelled a little wrong (chat mode only: formats/k3/_recover.py) ----------
# In chat mode the model sometimes writes a marker out of ordinary text tokens instead of the one
# token, and gets it a little wrong (SGLang #33530: "<|sep|the answer is 4", a sep without its
# ">", then "<|sep|<|sep|>"): a near-miss is "<", one of the four names, and around it at most
# two "|" a side, at most one space on each side of each run of "|" and maybe the ">", with at
# least one "|" and at least two of the three delimiters ("<|sep|", "<|sep>", "<sep|>",
# "<||sep|>", "<| sep |>", "<|sep| >", "< |sep|>"); a near-miss sep directly followed by a real
# one is one sep. The raw parser never reads near-misses (in raw
# output a marker is one token); chat mode reads them only where the whole text then parses as
# regular K3 structure, so prose that mentions one stays text.
_NEAR = re.compile(r"< ?(\|{0,2}) ?(open|close|sep|end_of_msg) ?(\|{0,2})((?: ?>)?)")
_KINDS = {"open": K_OPEN, "close": K_CLOSE, "sep": K_SEP, "end_of_msg": K_EOM}
_MAY_BECOME = re.compile(r"<[| ]{0,3}[a-z_]{0,10}[| ]{0,3}")
_NEAR_PREFIX = re.compile(r"< ?\|{0,2} ?([a-z_]*)((?: ?\|{0,2} ?)?)")
MAX_NEAR = len("< || end_of_msg || >")
"""The longest near-miss marker (before an absorbed real sep)."""

BARE_TAGS = frozenset({"think", "response", "tools", "message"})
"""K3's channel tag names: a header that is one of them alone (no attributes) is a whole tag,
even when the server left it without its sep (senpi #1092: ``<|close|>think`` at the end of the
text; SGLang #32567: ``<|close|>think<|open|>response<|sep|>``)."""


def near_marker(text: str, pos: int) -> tuple[int, int] | None:
    """``(kind, length)`` of a near-miss marker at ``text[pos]`` (a ``<``), else None (an exact
    marker is not a near-miss)."""
    m = _NEAR.match(text, pos)
    if m is None:
        return None
    left, name, right, gt = m.groups()
    pipes = len(left) + len(right)
    if pipes == 0 or pipes + bool(gt) < 2 or m.group() == TEXT[_KINDS[name]]:
        return None
    end = m.end()
    if name == "sep" and text.startswith(SEP, end):  # "<|sep|<|sep|>": a slip, then the real one
        end += len(SEP)
    return _KINDS[name], end - pos


def near_prefix(text: str) -> bool:
    """Whether ``text`` (from a ``<`` to the end of the text) is the start of a near-miss marker
    cut there (``"<| clo"``, ``"<||close"``, ``"<close |"``): it holds a ``|`` and is a prefix of a
    spelling :func:`near_marker` reads. Chat mode drops it from the end of an answer cut by a
    length finish, as it drops an exact marker's prefix (SGLang #33097)."""
    m = _NEAR_PREFIX.fullmatch(text)
    if m is None or "|" not in text or len(text) > MAX_NEAR:
        return False
    name, after = m.groups()
    return name in _KINDS if after else any(k.startswith(name) for k in _KINDS)


def find_marker(text: str, pos: int = 0) -> tuple[int, bool]:
    """Where the first marker (exact or near-miss) starts in ``text[pos:]``: ``(index, True)``;
    else ``(index, False)`` where the end of the text could still become one (held back while it
    streams), or ``(len(text), False)``."""
    j = text.find("<", pos)
    while j >= 0:
        if any(text.startswith(m, j) for m in TEXT) or near_marker(text, j) is not None:
            return j, True
        if len(text) - j <= MAX_NEAR and _MAY_BECOME.fullmatch(text, j):
            return j, False
        j = text.find("<", j + 1)
    return len(text), False


def _unescape_attr(value: str) -> str:
    # docs/k3-format.md § Typed arguments: "&quot;" first, then "&amp;" (the reverse of the encoder's order).
    return value.replace("&quot;", '"').replace("&amp;", "&")


def parse_header(header: str) -> tuple[str, dict[str, str]]:
    """``(tag name, attributes)`` of a header ``name k="v" k2="v2"`` (attribute values unescaped).

    Scanned once with ``str.find`` (a backtracking regex would be quadratic on a long malformed
    header). A key is the last word before ``="``; values hold no raw ``"``.
    """
    parts = header.split(None, 1)
    if not parts:
        return "", {}
    attrs: dict[str, str] = {}
    rest = parts[1] if len(parts) > 1 else ""
    pos = 0
    while (eq := rest.find('="', pos)) >= 0 and (end := rest.find('"', eq + 2)) >= 0:
        words = rest[pos:eq].split()
        # interned: a tool's name is every call's (one string, not one a call held in its history)
        attrs[words[-1] if words else ""] = sys.intern(_unescape_attr(rest[eq + 2 : end]))
        pos = end + 1
    return parts[0], attrs
