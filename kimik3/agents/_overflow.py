"""A request the server refused as too big, recovered from inside the run.

- a token overflow (:class:`~kimik3.ContextLengthExceededError`): the window the server stated
  becomes the run's (``_Run.window``: compaction works against it from now on; a server that
  states none has a window below the refused request's tokens, and that bounds it), and the run
  compacts at once;
- a request over the server's byte limit (:class:`~kimik3.RequestTooLargeError`, Moonshot's
  "total message size N exceeds limit M"): the oldest images leave the context first (each
  becomes the note :data:`~kimik3.agents._history.IMAGE_DROPPED`), as many as cover what the
  request is over by; with no image left to drop, the run compacts, its summary request kept
  under the byte limit (a 413 states none: under the refused request's size).

Then the turn is sent again. What was dropped is one of the run's issues (the result is
degraded, never silently); when nothing could be made smaller, or after
:data:`~kimik3._defaults.MAX_OVERFLOW_RECOVERIES` refusals in a row, the run ends with
``stop_reason="context_overflow"`` (never an exception out of ``Agent.run``: issue 41).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator

from .._client import Client
from .._defaults import MAX_OVERFLOW_RECOVERIES
from .._exceptions import ContextLengthExceededError, KimiK3Error, RequestTooLargeError
from ..types import ImagePart, Message, TextPart, ToolMessage, UserMessage, dump_message
from ._compaction import Summarize, compact, task_problem
from ._cut import no_room_to_continue
from ._history import IMAGE_DROPPED
from ._run import _Run
from ._types import DEFAULT_CONTEXT_WINDOW, AgentEvent, CompactionEvent, ContextPolicy, Final, TurnOutcome

__all__ = ["OVERFLOW", "before_turn", "drop_oldest_images", "overflowed", "recover", "served_window"]

log = logging.getLogger("kimik3.agent")

OVERFLOW = (ContextLengthExceededError, RequestTooLargeError)
"""The errors a run recovers from by making its request smaller."""

_MARGIN = 0.05
"""Images dropped cover what the request was over by plus this share of the limit."""


async def before_turn(run: _Run, policy: ContextPolicy, summarize: Summarize) -> AsyncIterator[AgentEvent | Final]:
    """What comes before a turn's request: the run compacts first when due (its events).

    A run whose task cannot fit the window with what always stays (:func:`task_problem`) ends
    at once: a :class:`Final` with ``context_overflow`` and an issue saying so, and no request is
    sent (compaction never summarises the task away: issue 41).

    With :func:`overflowed`, what the agent's loop wraps around each turn (not a generator around
    the turn itself: each of the turn's events would cross one more frame, issue 44).
    """
    if (why := task_problem(run, policy)) is not None:  # no request could carry the task: none is sent
        log.warning("kimik3: %s", why)
        run.issue(why)
        yield Final(None, "context_overflow")
        return
    async for event in compact(run, policy, summarize):
        yield event


async def overflowed(
    run: _Run, policy: ContextPolicy, error: ContextLengthExceededError | RequestTooLargeError, summarize: Summarize
) -> AsyncIterator[AgentEvent | TurnOutcome]:
    """After a turn's request the server refused as too big (``error``): the request made smaller
    (:func:`recover`, its events), and the loop sends the turn again. When nothing can be made
    smaller the run ends, never raises: after a cut reply whose continuation no longer fits,
    :func:`~kimik3.agents._cut.no_room_to_continue`'s ``no_progress``; else ``context_overflow``
    (output None, an issue says why; the session can be resumed with a new task: its history is
    as it was, compacted as far as it went).
    """
    try:
        async for event in recover(run, policy, error, summarize):
            yield event
    except OVERFLOW as again:
        end = no_room_to_continue(run) if isinstance(again, ContextLengthExceededError) else None
        if end is None:
            why = (f"the request does not fit the server's limit and nothing is left to make smaller "
                   f"(old tool results cleared, old turns dropped, a summary tried): {again}")
            log.warning("kimik3: %s", why)
            run.issue(why)
            end = Final(None, "context_overflow")
        yield end


async def recover(
    run: _Run, policy: ContextPolicy, error: ContextLengthExceededError | RequestTooLargeError, summarize: Summarize
) -> AsyncIterator[AgentEvent]:
    """Make the run's next request smaller after ``error`` (the module's docstring), yielding
    compaction's events; the caller then sends the turn again.

    A server that states a window below the one the request was sized for (``/v1/models``
    advertising 1,048,576 where 262,144 is served, catwalk #474) refuses a request whose prompt
    fits: its window becomes the run's, and when the context is below its compaction threshold
    the turn is sent again as it is (the engine sizes ``max_tokens`` to the stated window), once.

    Raises:
        ContextLengthExceededError, RequestTooLargeError: ``error`` itself, when nothing could
            be made smaller or it came :data:`MAX_OVERFLOW_RECOVERIES` times in a row.
    """
    run.overflows += 1
    if run.overflows > MAX_OVERFLOW_RECOVERIES:
        raise error
    max_bytes = None
    if isinstance(error, RequestTooLargeError):
        dropped = drop_oldest_images(run.messages, _excess(error))
        if dropped:
            what = (f"the server refused the request as too large ({_sizes(error)}): the {dropped} oldest "
                    f"image{'s' if dropped != 1 else ''} left the context")
            log.warning("kimik3: %s", what)
            run.issue(what)
            return
        # the summary request must be smaller than what was refused: under the stated limit, else
        # under the refused request's own size (a 413 states none)
        max_bytes = int((error.limit or _nbytes(run.messages)) * (1 - _MARGIN))
    else:
        # the stated window; where the server states none, the refused request's size bounds it
        limit = error.limit or error.requested or run.context_tokens
        before = run.window(policy.context_window)
        run.window_limit = limit if run.window_limit is None else min(run.window_limit, limit)
        if (run.overflows == 1 and error.limit is not None and error.limit < before
                and run.context_tokens < policy.compact_at * error.limit):
            return  # the prompt fits the stated window: only the output room was sized for a larger one
    compacted = False
    async for event in compact(run, policy, summarize, force=True, max_bytes=max_bytes):
        compacted = compacted or (isinstance(event, CompactionEvent)
                                  and (event.removed_messages > 0 or event.cleared_results > 0))
        yield event
    if not compacted:
        raise error


async def served_window(client: Client, policy: ContextPolicy) -> int | None:
    """The engine's context window for a run (:meth:`~kimik3.engines.Engine.context_window`);
    None when the policy sets one or the engine cannot tell (then
    :data:`~kimik3.agents.DEFAULT_CONTEXT_WINDOW`, said in a warning when asking failed)."""
    if policy.context_window is not None:
        return None
    try:
        return await client.engine.context_window()
    except KimiK3Error as e:  # the first request will say the same, typed
        log.warning("kimik3: the engine's context window is unknown (%s); compaction plans for %s tokens",
                    e, f"{DEFAULT_CONTEXT_WINDOW:,}")
        return None


def _nbytes(messages: list[Message]) -> int:
    """The messages' size as JSON, in bytes (what a byte limit measures)."""
    return sum(len(json.dumps(dump_message(m), ensure_ascii=False).encode()) for m in messages)


def _excess(error: RequestTooLargeError) -> int | None:
    """Bytes the request is over its limit by, plus a margin (None: the server did not say)."""
    if error.size is None or error.limit is None:
        return None
    return max(1, error.size - error.limit) + int(error.limit * _MARGIN)


def _sizes(error: RequestTooLargeError) -> str:
    if error.size is not None and error.limit is not None:
        return f"{error.size:,} bytes, over its limit of {error.limit:,}"
    return f"HTTP {error.status_code}" if error.status_code else "its size limit"


def drop_oldest_images(messages: list[Message], excess: int | None) -> int:
    """Replace the oldest images of user and tool messages by :data:`IMAGE_DROPPED` until the
    dropped data URLs add up to ``excess`` bytes (None: the size is not known, the oldest half
    of the images go, at least one). Messages are replaced, not mutated. Returns how many."""
    spots = [(i, j) for i, m in enumerate(messages) if isinstance(m, (UserMessage, ToolMessage))
             and isinstance(m.content, list) for j, p in enumerate(m.content) if isinstance(p, ImagePart)]  # fmt: skip
    if not spots:
        return 0
    chosen: list[tuple[int, int]] = []
    freed = 0
    for spot in spots:
        if excess is None and len(chosen) >= max(1, len(spots) // 2):
            break
        if excess is not None and freed >= excess:
            break
        chosen.append(spot)
        part = messages[spot[0]].content[spot[1]]  # type: ignore[index]
        freed += len(part.image_url.url) if isinstance(part, ImagePart) else 0
    for i in sorted({i for i, _ in chosen}):
        msg = messages[i]
        assert isinstance(msg, (UserMessage, ToolMessage)) and isinstance(msg.content, list)
        drop = {j for k, j in chosen if k == i}
        parts = [TextPart(text=IMAGE_DROPPED) if j in drop else p for j, p in enumerate(msg.content)]
        messages[i] = msg.model_copy(update={"content": parts})
    return len(chosen)
