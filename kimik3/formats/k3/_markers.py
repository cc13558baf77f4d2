"""The spelling of K3's markers in output text, and tag headers: what both readers of K3 output
(the raw parser, :mod:`._parse`, and chat mode's reading of text a server left markers in,
:mod:`._recover`) scan for (docs/k3-format.md § Tokens).
"""

from __future__ import annotations

from ._encode import CLOSE, END_OF_MSG, OPEN, SEP

__all__ = ["K_CLOSE", "K_EOM", "K_OPEN", "K_SEP", "MARKERS", "MAX_PREFIX", "PREFIXES", "TEXT", "parse_header"]

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
        attrs[words[-1] if words else ""] = _unescape_attr(rest[eq + 2 : end])
        pos = end + 1
    return parts[0], attrs
