"""How much of a growing conversation is unchanged since the last request (:func:`shared_prefix`):
the one rule every per-conversation cache (request checks, media, prompt ids, tool declarations)
reuses its work by, so a turn costs what is new, not the history."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["shared_prefix"]


def shared_prefix(cached: Sequence[Any], messages: Sequence[Any]) -> int:
    """How many leading items of ``messages`` are those of ``cached`` (the same objects, or equal
    ones): a cache built for ``cached[:n]`` holds for ``messages[:n]``.

    The usual case, ``messages`` extending ``cached`` with the same objects, is one list
    comparison in C (identity is checked before equality: a pointer comparison per message, about
    4 ns, against a Python loop's 40); only a changed history (compaction, a pruned image) walks
    to the first difference.

    Args:
        cached: what a cache was built from (a list).
        messages: the messages of this request.

    Returns:
        ``n`` with ``0 <= n <= min(len(cached), len(messages))``.
    """
    n = len(cached)
    if len(messages) >= n:
        head = messages[:n]
        if head == cached if isinstance(head, list) and isinstance(cached, list) else list(head) == list(cached):
            return n
    limit = min(n, len(messages))
    i = 0
    while i < limit and (cached[i] is messages[i] or cached[i] == messages[i]):
        i += 1
    return i
