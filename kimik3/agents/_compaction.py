"""Compaction: older turns of a long run replaced by the model's own summary (an empty or cut
summary is never applied), or the history kept and the reason said."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from ..formats.k3 import PromptCache
from ..types import AssistantMessage, ChatCompletion, Message, UserMessage, dump_message
from ._checks import answer_text, summary_problem
from ._prompts import COMPACTION_REQUEST, COMPACTION_RETRY
from ._run import _Run
from ._types import AgentEvent, CompactionEvent, ContextPolicy

__all__ = ["Summarize", "compact"]

Summarize = Callable[[_Run, list[Message]], Awaitable[ChatCompletion]]
"""A tool-free model call over the given messages (the agent's, traced under its run)."""

log = logging.getLogger("kimik3.agent")


async def compact(
    run: _Run, policy: ContextPolicy, summarize: Summarize, *, force: bool = False, max_bytes: int | None = None
) -> AsyncIterator[AgentEvent]:
    """Summarise older turns once the context reaches ``compact_at`` of the window, with
    ``summarize`` (the model call; compaction knows nothing else of the agent).

    What is kept verbatim (the system prompt and first task, then up to ``keep_recent_turns``
    recent turns) is shrunk until its count is at most half the threshold, so the next
    compaction is due only after the conversation grew by that much again. When what must
    stay (the first task, tool declarations) does not fit under that, compaction stops for
    the run and says so once (a :class:`CompactionEvent` with ``stopped``) instead of
    calling the model on every turn.

    The window is the policy's, or the smaller one a server stated (``run.window``). The
    summary request is the whole history plus the request when that fits the threshold (it
    extends the previous prompt); when it does not (a server refused the history as too big),
    it carries the first task, the older user messages (an earlier summary among them) and the
    most recent older turns that fit (:func:`summary_input`), and the run's issues say how many
    earlier messages the summary could not see.

    Args:
        force: compact now, whatever the count (a server refused the request as too big).
        max_bytes: the summary request's largest size in bytes (a server's byte limit), as
            its messages' JSON.
    """
    window = run.window(policy.context_window)
    threshold = policy.compact_at * window
    if run.compaction_stopped or (run.context_tokens < threshold and not force):
        return
    msgs = run.messages
    head = 0  # keep the system prompt(s) and the first user task
    while head < len(msgs) and not isinstance(msgs[head], UserMessage):
        head += 1
    head += 1
    sizes = [run.message_tokens(m) for m in msgs]
    target = threshold / 2
    # What the messages do not account for (tool declarations, the prompt template) stays
    # after any compaction: the context count minus the messages' own tokens.
    fixed = max(0, run.context_tokens - sum(sizes))
    head_tokens = fixed + sum(sizes[:head])
    if head_tokens > target:
        run.compaction_stopped = True
        reason = (f"compaction stopped: what it must keep (the first task, tool declarations: about "
                  f"{head_tokens:,} tokens) cannot get under half of the {threshold:,.0f}-token threshold")
        log.warning("kimik3: %s", reason)
        yield CompactionEvent(0, "", stopped=reason)
        return
    turn_starts = [i for i in range(head, len(msgs)) if isinstance(msgs[i], AssistantMessage)]
    keep = min(policy.keep_recent_turns, len(turn_starts))
    while keep and head_tokens + sum(sizes[turn_starts[-keep] :]) > target:
        keep -= 1  # a tool call is never separated from its result: whole turns only
    split = turn_starts[-keep] if keep else len(msgs)
    if not force and len(turn_starts) <= policy.keep_recent_turns and keep == len(turn_starts):
        return  # too early: the recent turns are all there is, and they fit
    older = msgs[head:split]
    if not older:
        return  # nothing older than what must stay (forced: the caller says why)
    # the summary request must fit the window with room for the summary: max_tokens, else half of
    # what the threshold leaves
    budget = window - (run.settings.max_tokens or window * (1 - policy.compact_at) / 2)
    request_tokens = fixed + run.count.text(COMPACTION_REQUEST)
    given, unseen = summary_input(msgs, head, split, sizes, request_tokens, budget, max_bytes)
    if unseen == len(older):
        failed = (f"compaction kept the full history: none of the {len(older)} earlier messages fits in a "
                  f"summary request within {budget:,.0f} tokens of the {window:,}-token window")
        log.warning("kimik3: %s", failed)
        run.issue(failed)
        yield CompactionEvent(0, "", failed=failed)
        return
    summary: str | None = None
    problem = ""
    for attempt in range(2):  # an empty or cut summary is never applied: one retry
        ask = COMPACTION_REQUEST if attempt == 0 else COMPACTION_RETRY.format(problem=problem)
        # the whole history, then the request: this prompt extends the previous one (a prefix
        # cache serves it), and the summary may repeat the recent turns kept below
        try:
            completion = await summarize(run, [*given, UserMessage(content=ask)])
        except Exception as e:  # compaction is an optimisation: never the reason a run dies
            problem = f"could not be made ({type(e).__name__}: {e})"
            break
        run.charge(completion)
        problem = summary_problem(completion) or ""
        if not problem:
            summary = answer_text(completion.message)
            break
    if summary is None:
        failed = f"compaction kept the full history: the summary {problem}"
        log.warning("kimik3: %s", failed)
        run.issue(failed)
        yield CompactionEvent(0, "", failed=failed)
        return
    if unseen:
        run.issue(f"compaction summarised {len(older) - unseen} of {len(older)} earlier messages: {unseen} "
                  f"older ones did not fit in the summary request and are not in the summary")
    note = UserMessage(content=f"[Summary of {len(older)} earlier messages, written by you]\n{summary}")
    new = [*msgs[:head], note, *msgs[split:]]
    msgs[:] = new  # in place: the caller's list is the live history
    run.cache = PromptCache()
    run.context_tokens = fixed + sum(run.message_tokens(m) for m in new)
    if run.session is not None:
        run.session.compaction(new, summary)
    yield CompactionEvent(len(older), summary)


def summary_input(
    msgs: Sequence[Message],
    head: int,
    split: int,
    sizes: Sequence[int],
    fixed: int,
    budget: float,
    max_bytes: int | None = None,
) -> tuple[list[Message], int]:
    """The messages a summary request carries, and how many of the older ones it leaves out.

    The whole history when its count (``fixed`` tokens beside the messages, ``sizes`` of each)
    is within ``budget`` and its JSON within ``max_bytes``; else the head (``msgs[:head]``), the
    user messages among the older ones (``msgs[head:split]``: an earlier compaction's summary,
    the user's follow-ups) while they fit, oldest first, and the most recent older assistant and
    tool messages that fit with them (whole turns: a tool result never without its call).

    Args:
        msgs: the history.
        head: how many leading messages always stay (system prompts, the first task).
        split: where the recent turns that compaction keeps begin.
        sizes: each message's tokens.
        fixed: tokens beside the messages (tool declarations, the template, the request).
        budget: the request's largest size in tokens.
        max_bytes: its largest size in bytes as its messages' JSON (None: no byte limit).

    Returns:
        ``(messages, unseen)``: the request's messages in history order, and how many of
        ``msgs[head:split]`` are not among them.
    """
    def nbytes(m: Message) -> int:
        return len(json.dumps(dump_message(m), ensure_ascii=False).encode()) if max_bytes is not None else 0

    def fits(tokens: float, size: int) -> bool:
        return tokens <= budget and (max_bytes is None or size <= max_bytes)

    if fits(fixed + sum(sizes), sum(map(nbytes, msgs))):
        return list(msgs), 0
    tokens: float = fixed + sum(sizes[:head])
    size = sum(map(nbytes, msgs[:head]))
    chosen = set(range(head))
    for i in range(head, split):  # user messages first: small, and what the user or a summary said
        if isinstance(msgs[i], UserMessage) and fits(tokens + sizes[i], size + nbytes(msgs[i])):
            chosen.add(i)
            tokens, size = tokens + sizes[i], size + nbytes(msgs[i])
    start = split
    turn_tokens: float = 0
    turn_size = 0
    for i in range(split - 1, head - 1, -1):  # then the most recent turns, whole
        if isinstance(msgs[i], UserMessage):
            continue
        turn_tokens, turn_size = turn_tokens + sizes[i], turn_size + nbytes(msgs[i])
        if not isinstance(msgs[i], AssistantMessage):
            continue  # a tool result: only with its call
        if not fits(tokens + turn_tokens, size + turn_size):
            break
        tokens, size, turn_tokens, turn_size, start = tokens + turn_tokens, size + turn_size, 0, 0, i
    chosen.update(i for i in range(start, split) if not isinstance(msgs[i], UserMessage))
    given = [m for i, m in enumerate(msgs[:split]) if i in chosen]
    return given, split - head - (len(given) - head)
