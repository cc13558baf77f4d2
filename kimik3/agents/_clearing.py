"""Keeping a run inside its window without the model (issue 41): old tool results cleared, then
the oldest whole turns dropped.

Clearing is the context-editing strategy of Anthropic's API and Claude Code
(``clear_tool_uses``): each call stays in the history, its result becomes a short stub that says
what was there and how to get it again (:data:`~._prompts.CLEARED_RESULT`). It is batched: once
due, results are cleared oldest first until the context is down to the target (half the
compaction threshold), so the prompt prefix changes rarely and the engine's prefix cache holds
in between. Dropping removes whole turns (an assistant message with its tool results, never one
without the other), oldest first; user messages stay, verbatim (operator instructions,
approvals). The system prompt, the first task and the ``keep_recent_turns`` recent turns are
never touched. Last, when the context is still over the compaction threshold, the largest user
messages after the first task (never the run's own task) are cut to their first characters
(:func:`shorten_users`): an old task too big for the window (a run that ended with
``context_overflow``) would otherwise keep every later run of the conversation from fitting.
"""

from __future__ import annotations

from ..formats.k3 import PromptCache
from ..types import AssistantMessage, Message, ToolCall, ToolMessage, UserMessage
from ._prompts import CLEARED_RESULT, CLEARED_START, CLEARED_TOO_BIG, CLEARED_USER
from ._run import _Run

__all__ = ["clear_results", "drop_turns", "head_length", "recent_start", "shorten_users"]

_SHOWN = 200  # characters of a call's arguments, or of a user message, a stub names


def head_length(msgs: list[Message]) -> int:
    """How many leading messages always stay: the system prompt(s) and the first task."""
    head = 0
    while head < len(msgs) and not isinstance(msgs[head], UserMessage):
        head += 1
    return min(head + 1, len(msgs))


def recent_start(msgs: list[Message], head: int, keep: int) -> int:
    """Where the ``keep`` most recent turns begin (``len(msgs)`` when ``keep`` is 0)."""
    starts = [i for i in range(head, len(msgs)) if isinstance(msgs[i], AssistantMessage)]
    return starts[-keep] if keep and starts else len(msgs)


def _stub(call: ToolCall | None, message: ToolMessage, tokens: int, note: str = CLEARED_RESULT) -> str:
    if call is None:
        what = f"the call {message.tool_call_id!r}"
    else:
        arguments = call.function.arguments
        shown = arguments if len(arguments) <= _SHOWN else arguments[:_SHOWN] + "..."
        what = f"{call.function.name} {shown}"
    return note.format(call=what, tokens=tokens)


def _changed(run: _Run, why: str) -> None:
    """The history was edited in place: a fresh prompt cache, and the session told."""
    run.cache = PromptCache()
    if run.session is not None:
        run.session.compaction(run.messages, why)


def clear_results(run: _Run, end: int, target: float, *, too_big: bool = False) -> int:
    """Replace the results of tool calls in ``run.messages[:end]``, oldest first, by stubs until
    the context is at most ``target`` tokens (those already stubs, or smaller than theirs, stay);
    ``too_big``: the stub says the result does not fit the context (:data:`~._prompts.CLEARED_TOO_BIG`).
    Returns how many were cleared (``run.cleared_results`` counts them too)."""
    msgs = run.messages
    calls: dict[str, ToolCall] = {}
    cleared = 0
    for i in range(end):
        if run.context_tokens <= target:
            break
        m = msgs[i]
        if isinstance(m, AssistantMessage):
            calls.update((c.id, c) for c in m.tool_calls or ())
            continue
        if not isinstance(m, ToolMessage) or (isinstance(m.content, str) and m.content.startswith(CLEARED_START)):
            continue
        before = run.message_tokens(m)
        cleared += _swap(run, i, before, ToolMessage(
            content=_stub(calls.get(m.tool_call_id or ""), m, before, CLEARED_TOO_BIG if too_big else CLEARED_RESULT),
            tool_call_id=m.tool_call_id, name=m.name))
    return _cleared(run, cleared, f"[{cleared} old tool results cleared]")


def _swap(run: _Run, i: int, before: int, stub: Message) -> bool:
    """Put ``stub`` in place of ``run.messages[i]`` (``before`` tokens) when it is smaller;
    whether it was."""
    after = run.message_tokens(stub)
    if after >= before:
        return False
    run.messages[i] = stub
    run.context_tokens -= before - after
    return True


def _cleared(run: _Run, n: int, why: str) -> int:
    """Count ``n`` stubbed messages and tell the session (when there are any); returns ``n``."""
    if n:
        run.cleared_results += n
        _changed(run, why)
    return n


def drop_turns(run: _Run, head: int, end: int, target: float) -> int:
    """Remove the oldest whole turns of ``run.messages[head:end]`` (assistant messages with their
    tool results; user messages stay) until the context is at most ``target`` tokens. Returns
    how many messages were removed (``run.dropped_messages`` counts them too)."""
    msgs = run.messages
    gone: set[int] = set()
    i = head
    while i < end and run.context_tokens > target:
        if not isinstance(msgs[i], AssistantMessage):
            i += 1
            continue
        j = i + 1
        while j < end and isinstance(msgs[j], ToolMessage):
            j += 1
        for k in range(i, j):
            gone.add(k)
            run.context_tokens -= run.message_tokens(msgs[k])
        i = j
    if gone:
        msgs[:] = [m for k, m in enumerate(msgs) if k not in gone]
        run.dropped_messages += len(gone)
        _changed(run, f"[{len(gone)} oldest messages dropped]")
    return len(gone)


def shorten_users(run: _Run, head: int, target: float) -> int:
    """Cut the largest user messages of ``run.messages[head:]`` (never ``run.task``) to a stub
    with their first characters (:data:`~._prompts.CLEARED_USER`) until the context is at most
    ``target`` tokens; those the stub would not make smaller stay. Returns how many were cut
    (``run.cleared_results`` counts them too)."""
    msgs = run.messages
    users = [i for i in range(head, len(msgs)) if isinstance(msgs[i], UserMessage) and msgs[i] is not run.task]
    cut = 0
    for i in sorted(users, key=lambda i: -run.message_tokens(msgs[i])):
        if run.context_tokens <= target:
            break
        m = msgs[i]
        text = m.content if isinstance(m.content, str) else " ".join(getattr(p, "text", "") for p in m.content or ())
        before = run.message_tokens(m)
        stub = UserMessage(content=CLEARED_USER.format(tokens=before, start=text[:_SHOWN] + "..."))
        cut += _swap(run, i, before, stub)
    return _cleared(run, cut, f"[{cut} over-long earlier user messages cut]")
