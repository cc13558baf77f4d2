"""Tool output text: head + tail truncation of long text, visible escapes for lone surrogates."""

from __future__ import annotations

from .._text import visible_text

__all__ = ["truncate_middle", "visible_text"]


def _marker(n: int) -> str:
    return f"\n... [{n} characters elided] ...\n"


def truncate_middle(text: str, max_chars: int) -> str:
    """Cap ``text`` at ``max_chars`` characters, keeping its head and its tail.

    Text that fits is returned unchanged. Otherwise about half of the budget goes to the head and
    half to the tail, and the middle is replaced by the line::

        \\n... [N characters elided] ...\\n

    where ``N`` is exactly ``len(text)`` minus the characters kept (the newlines that the marker
    replaces are counted in ``N``). The cuts move to line boundaries when that costs at most half
    of the head's (tail's) share, so kept lines are whole where possible. The result, marker
    included, is at most ``max_chars`` long, except when ``max_chars`` is too small to hold the
    marker itself: then the result is the marker alone (everything elided).

    Args:
        text: the text to cap.
        max_chars: the largest result length in characters (>= 0).

    Returns:
        ``text`` itself, or head + marker + tail.

    Raises:
        ValueError: ``max_chars`` is negative.
    """
    if max_chars < 0:
        raise ValueError(f"max_chars must be >= 0, got {max_chars}")
    if len(text) <= max_chars:
        return text
    return _truncate(text, max_chars, 0)


def _truncate(text: str, max_chars: int, extra_elided: int) -> str:
    """Like :func:`truncate_middle`, for a ``text`` that already lost ``extra_elided`` characters
    at a point strictly inside both halves that are kept (used by streaming collectors that keep
    only ``max_chars`` of head and ``max_chars`` of tail: the join always falls in the elided part).
    """
    total = len(text) + extra_elided
    keep = max_chars - len(_marker(total))  # N <= total, so the real marker is no longer
    if keep <= 0:
        return _marker(total)
    head_n = keep // 2
    tail_n = keep - head_n
    head_end = head_n
    if head_end < len(text) and text[head_end] != "\n":
        cut = text.rfind("\n", 0, head_end)
        if cut >= head_n - head_n // 2 and cut > 0:
            head_end = cut  # drop the partial last line (the newline is part of the marker)
    tail_start = len(text) - tail_n
    if tail_start > 0 and text[tail_start - 1] != "\n":
        nl = text.find("\n", tail_start, len(text))
        if nl != -1 and nl + 1 - tail_start <= tail_n // 2:
            tail_start = nl + 1  # drop the partial first line
    head = text[:head_end]
    tail = text[tail_start:]
    return head + _marker(total - len(head) - len(tail)) + tail
