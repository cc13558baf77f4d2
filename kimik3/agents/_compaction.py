"""Compaction: older turns of a long run replaced by the model's own summary (an empty or cut
summary is never applied), or the history kept and the reason said."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from ..formats.k3 import PromptCache
from ..types import AssistantMessage, ChatCompletion, Message, UserMessage
from ._checks import answer_text, summary_problem
from ._prompts import COMPACTION_REQUEST, COMPACTION_RETRY
from ._run import _Run
from ._types import AgentEvent, CompactionEvent, ContextPolicy

__all__ = ["Summarize", "compact"]

Summarize = Callable[[_Run, list[Message]], Awaitable[ChatCompletion]]
"""A tool-free model call over the given messages (the agent's, traced under its run)."""

log = logging.getLogger("kimik3.agent")


async def compact(run: _Run, policy: ContextPolicy, summarize: Summarize) -> AsyncIterator[AgentEvent]:
    """Summarise older turns once the context reaches ``compact_at`` of the window, with
    ``summarize`` (the model call; compaction knows nothing else of the agent).

    What is kept verbatim (the system prompt and first task, then up to ``keep_recent_turns``
    recent turns) is shrunk until its count is at most half the threshold, so the next
    compaction is due only after the conversation grew by that much again. When what must
    stay (the first task, tool declarations) does not fit under that, compaction stops for
    the run and says so once (a :class:`CompactionEvent` with ``stopped``) instead of
    calling the model on every turn.
    """
    threshold = policy.compact_at * policy.context_window
    if run.context_tokens < threshold or run.compaction_stopped:
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
    if len(turn_starts) <= policy.keep_recent_turns and keep == len(turn_starts):
        return  # too early: the recent turns are all there is, and they fit
    older = msgs[head:split]
    summary: str | None = None
    problem = ""
    for attempt in range(2):  # an empty or cut summary is never applied: one retry
        ask = COMPACTION_REQUEST if attempt == 0 else COMPACTION_RETRY.format(problem=problem)
        # the whole history, then the request: this prompt extends the previous one (a prefix
        # cache serves it), and the summary may repeat the recent turns kept below
        try:
            completion = await summarize(run, [*msgs, UserMessage(content=ask)])
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
    note = UserMessage(content=f"[Summary of {len(older)} earlier messages, written by you]\n{summary}")
    new = [*msgs[:head], note, *msgs[split:]]
    msgs[:] = new  # in place: the caller's list is the live history
    run.cache = PromptCache()
    run.context_tokens = fixed + sum(run.message_tokens(m) for m in new)
    if run.session is not None:
        run.session.compaction(new, summary)
    yield CompactionEvent(len(older), summary)
