"""Compaction: older turns of a long run replaced by the model's own summary (an empty or cut
summary is never applied); after a failed summary, the run kept inside its window without the
model (old tool results cleared, the oldest turns dropped: :mod:`._clearing`), the reason said."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from ..formats.k3 import PromptCache
from ..types import AssistantMessage, ChatCompletion, Message, UserMessage, dump_message
from ._checks import EMPTY_TURN, answer_text, summary_problem
from ._clearing import clear_results, drop_turns, head_length, shorten_users
from ._prompts import (
    COMPACTION_REQUEST,
    COMPACTION_RETRY,
    CONTINUE_REQUEST,
    INTERRUPTED_REQUEST,
    SUMMARY_NOTE,
    SUMMARY_START,
)
from ._run import _Run
from ._types import AgentEvent, CompactionEvent, ContextPolicy

__all__ = ["Summarize", "compact", "head_problem", "task_problem"]

Summarize = Callable[[_Run, list[Message]], Awaitable[ChatCompletion]]
"""A tool-free model call over the given messages (the agent's, traced under its run)."""

log = logging.getLogger("kimik3.agent")

_ENOUGH = 0.75
"""Clearing chosen by the policy is enough when it leaves the context at most this share of the
threshold (a quarter of it free until the next compaction); else the summary follows."""


async def compact(
    run: _Run, policy: ContextPolicy, summarize: Summarize, *, force: bool = False, max_bytes: int | None = None
) -> AsyncIterator[AgentEvent]:
    """Bring the context down once it reaches ``compact_at`` of the window: old tool results
    cleared first when the policy says so (enough when that leaves a quarter of the threshold
    free), then older turns summarised by the model
    (``summarize``: the model call; compaction knows nothing else of the agent); when the summary
    fails, or is backing off after a failure, without the model: old tool results cleared, then
    the oldest whole turns dropped, and last, while the context is still over the threshold, the
    largest earlier user messages (never this run's task) cut to their start (:mod:`._clearing`).

    The target is half the threshold, so the next compaction is due only after the conversation
    grew by that much again. What is kept verbatim: the system prompt and first task, up to
    ``keep_recent_turns`` recent turns (fewer when they do not fit the target), the user message
    that started this run (``run.task``: never summarised or dropped, whatever room is left;
    :func:`task_problem` ends a run whose task cannot fit at all), and the other user messages
    after the first task (operator instructions, approvals), the most recent first, each that fits
    under the target (a large one left to the summary does not push out smaller older ones). When what must
    stay (the first task, tool declarations) does not fit under the target, the summary stops
    for the run and says so once (a :class:`CompactionEvent` with ``stopped``); clearing and
    dropping go on.

    A summary that fails (empty, reasoning only, cut, or its call failed; asked twice) is never
    applied; the next summary request waits until the history grew by ``summary_retry_growth``
    of the threshold, twice that after two failures in a row, and so on (each is a model call
    over the whole history: issue 41 saw 80 in 193 turns).

    The window is the policy's, else the engine's, the smaller one a server stated winning
    (``run.window``). The summary request is the whole history plus the request when that fits
    (it extends the previous prompt); when it does not, it carries the first task, the older user
    messages (an earlier summary among them) and the most recent older turns that fit
    (:func:`summary_input`), and the run's issues say how many earlier messages the summary could
    not see. Every request it sends fits the window with the tool declarations counted.

    Args:
        force: compact now, whatever the count (a server refused the request as too big).
        max_bytes: the summary request's largest size in bytes (a server's byte limit), as
            its messages' JSON.
    """
    window = run.window(policy.context_window)
    threshold = policy.compact_at * window
    if run.context_tokens < threshold and not force:
        return
    msgs = run.messages
    head = head_length(msgs)
    sizes = [run.message_tokens(m) for m in msgs]
    target = threshold / 2
    # What the messages do not account for (tool declarations, the prompt template) stays
    # after any compaction: the context count minus the messages' own tokens.
    fixed = max(0, run.context_tokens - sum(sizes))
    head_tokens = fixed + sum(sizes[:head])
    task = _task_index(run, head)  # this run's task: kept verbatim wherever the split falls
    task_tokens = sizes[task] if task is not None else 0
    turn_starts = [i for i in range(head, len(msgs)) if isinstance(msgs[i], AssistantMessage)]
    keep = min(policy.keep_recent_turns, len(turn_starts))
    while keep and head_tokens + task_tokens + sum(
            size for i, size in enumerate(sizes[turn_starts[-keep]:], turn_starts[-keep]) if i != task) > target:
        keep -= 1  # a tool call is never separated from its result: whole turns only
    split = turn_starts[-keep] if keep else len(msgs)
    if not force and len(turn_starts) <= policy.keep_recent_turns and keep == len(turn_starts):
        return  # too early: the recent turns are all there is, and they fit
    if split <= head:
        return  # nothing older than what must stay (forced: the caller says why)
    # clearing and dropping never touch the last turn (what the next request goes on from: a
    # result just read, a cut reply to continue), unless this run's task came after it (a resumed
    # conversation goes on from its new task: a result too big that ended the last run can go),
    # but when nothing else is left and the request is over the window (or was refused), its
    # results are cleared too: a run whose one result is bigger than the window goes on
    last = turn_starts[-1] if turn_starts and (task is None or task < turn_starts[-1]) else split
    end = min(split, last)
    if policy.clear_tool_results and (cleared := clear_results(run, end, target)):
        yield CompactionEvent(0, "", cleared_results=cleared)
        if run.context_tokens <= _ENOUGH * threshold:
            return  # enough room until the next one: no summary
    failed = None
    if not run.compaction_stopped and head_tokens > target:
        run.compaction_stopped = True
        reason = (f"compaction stopped: what it must keep (the first task, tool declarations: about "
                  f"{head_tokens:,} tokens) cannot get under half of the {threshold:,.0f}-token threshold")
        log.warning("kimik3: %s", reason)
        yield CompactionEvent(0, "", stopped=reason)
    elif not run.compaction_stopped and not _backing_off(run, policy, threshold):
        async for event in _summarise(run, policy, summarize, window, head, split, max_bytes, task):
            if event.failed is None:
                yield event
                return
            failed = event.failed
    # without the model: old results cleared, then the oldest turns dropped
    cleared = clear_results(run, end, target)
    dropped = drop_turns(run, head, end, target) if run.context_tokens > target else 0
    # last, still over the threshold: the largest old user messages (a task that overflowed) cut
    cut = shorten_users(run, head, threshold) if run.context_tokens > threshold else 0
    over = threshold if force else window  # the request was (or would be) refused with nothing else left:
    if run.context_tokens > over:  # the recent turns' results go, then the last turn's (said too big)
        final = max((i for i, m in enumerate(msgs) if isinstance(m, AssistantMessage)), default=len(msgs))
        cleared += clear_results(run, final, target)  # (indices as they are after dropping)
    if run.context_tokens > over:
        cleared += clear_results(run, len(msgs), target, too_big=True)
    if cut:
        what = f"{cut} earlier user message{'s' * (cut != 1)} cut to {'their' if cut != 1 else 'its'} first " \
               "characters: the context did not fit under the compaction threshold otherwise"
        log.warning("kimik3: %s", what)
        run.issue(what)
    if cleared or dropped or cut:
        why = "the summary failed" if failed else "the summary is backing off after a failure" \
            if not run.compaction_stopped else "the summary cannot run"
        done = (f"compaction without a summary ({why}): {cleared} old tool result{'s' * (cleared != 1)} "
                f"cleared, {dropped} message{'s' * (dropped != 1)} of the oldest turns dropped")
        if failed is not None:  # once a failure; while backing off, RunResult counts what was cleared
            log.warning("kimik3: %s", done)
            run.issue(done)
        yield CompactionEvent(dropped, "", failed=failed, cleared_results=cleared + cut)
    elif failed is not None:
        yield CompactionEvent(0, "", failed=failed)


def head_problem(run: _Run, policy: ContextPolicy) -> str | None:
    """What to say at a run's start when what compaction must always keep (tool declarations,
    the system prompt, the first task) does not fit under half its threshold (None: it fits);
    the run's summaries are stopped then (clearing and dropping still work: a head that fits the
    window leaves room for a resumed run). A head over the window is never cleared, so such a
    conversation cannot be resumed once it fills the window; the message says which."""
    window = run.window(policy.context_window)
    head = head_length(run.messages)
    sizes = [run.message_tokens(m) for m in run.messages]
    fixed = max(0, run.context_tokens - sum(sizes))
    tokens = fixed + sum(sizes[:head])
    target = policy.compact_at * window / 2
    if tokens <= target:
        return None
    run.compaction_stopped = True
    return (f"the prompt's head (tool declarations, instructions and the first task: {tokens:,} tokens) does not "
            f"fit under half of the compaction threshold ({target:,.0f} tokens of the {window:,}-token window): "
            "compaction cannot summarise this conversation, " + (
                "and once it fills the window it cannot be resumed (the head is never cleared)" if tokens >= window
                else "old tool results are cleared and the oldest turns dropped instead, without a summary") +
            "; give fewer tools or shorter instructions or task, or serve a larger window (vLLM --max-model-len)")


def _task_index(run: _Run, head: int) -> int | None:
    """Where the user message that started this run is in the history, when it is after the
    head (None: it is the first task, or the run was given none)."""
    for i in range(len(run.messages) - 1, head - 1, -1):
        if run.messages[i] is run.task:
            return i
    return None


def task_problem(run: _Run, policy: ContextPolicy) -> str | None:
    """Why no request of this run can ever fit its window: what always stays (tool declarations,
    the head, this run's task when it is not the first one) is over the window by itself (None:
    it is not, or the run's task is the first task). Compaction never
    summarises or drops the run's task, so such a run ends with ``context_overflow``."""
    window = run.window(policy.context_window)
    head = head_length(run.messages)
    task = _task_index(run, head)
    if task is None:  # the first task is the head: never summarised, head_problem says when it is too big
        return None
    sizes = [run.message_tokens(m) for m in run.messages]
    fixed = max(0, run.context_tokens - sum(sizes))
    must = fixed + sum(sizes[:head]) + sizes[task]
    if must <= window:
        return None
    return (f"the task does not fit the context window: with what always stays (tool declarations, instructions, "
            f"the first task) it is {must:,} tokens of the {window:,}-token window; the task is never summarised "
            "or dropped, so no request can carry it: give a shorter task, or serve a larger window "
            "(vLLM --max-model-len)")


def _backing_off(run: _Run, policy: ContextPolicy, threshold: float) -> bool:
    """A summary failed and the history has not grown enough since for another request: by
    ``summary_retry_growth`` of the threshold after one failure, doubling with each failure in
    a row (exponential back-off: summary requests grow with the log of the run's length)."""
    if run.summary_failed_at is None:
        return False
    needed: float = policy.summary_retry_growth * threshold * 2.0 ** (run.summary_failures - 1)
    return run.added_tokens - run.summary_failed_at < needed


def _agent_written(m: UserMessage) -> bool:
    """A user message the agent wrote itself (a summary, "continue"): not the user's words."""
    text = m.content if isinstance(m.content, str) else ""
    return text.startswith(SUMMARY_START) or text in (CONTINUE_REQUEST, INTERRUPTED_REQUEST, EMPTY_TURN)


async def _summarise(run: _Run, policy: ContextPolicy, summarize: Summarize, window: int, head: int, split: int,
                     max_bytes: int | None, task: int | None) -> AsyncIterator[CompactionEvent]:
    """The model's summary of ``run.messages[head:split]`` applied (one event), or one event
    with ``failed`` (the history as it was; :attr:`_Run.summary_failed_at` set). The run's task
    (``msgs[task]``) stays verbatim whatever room is left; the other user messages while they
    fit under the target."""
    msgs = run.messages
    sizes = [run.message_tokens(m) for m in msgs]
    fixed = max(0, run.context_tokens - sum(sizes))
    older = msgs[head:split]
    # the summary request must fit the window with room for the summary: max_tokens, else half of
    # what the threshold leaves
    budget = window - (run.settings.max_tokens or window * (1 - policy.compact_at) / 2)
    request_tokens = fixed + run.count.text(COMPACTION_REQUEST)
    given, unseen = summary_input(msgs, head, split, sizes, request_tokens, budget, max_bytes)
    summary: str | None = None
    if unseen == len(older):
        problem = (f"could not be asked: none of the {len(older)} earlier messages fits in a summary request "
                   f"within {budget:,.0f} tokens of the {window:,}-token window")
    else:
        problem = ""
        for attempt in range(2):  # an empty or cut summary is never applied: one retry
            ask = COMPACTION_REQUEST if attempt == 0 else COMPACTION_RETRY.format(problem=problem)
            # the whole history, then the request: this prompt extends the previous one (a prefix
            # cache serves it), and the summary may repeat the recent turns kept below
            run.summaries += 1
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
        run.summary_failed_at = run.added_tokens
        run.summary_failures += 1
        failed = f"compaction's summary {problem}"
        log.warning("kimik3: %s", failed)
        run.issue(failed)
        yield CompactionEvent(0, "", failed=failed)
        return
    run.summary_failed_at, run.summary_failures = None, 0
    if unseen:
        run.issue(f"compaction summarised {len(older) - unseen} of {len(older)} earlier messages: {unseen} "
                  f"older ones did not fit in the summary request and are not in the summary")
    # the user's own later messages stay verbatim, the most recent ones first, each that fits
    mine = msgs[task] if task is not None and task < split else None  # this run's task: always kept
    users = [m for m in older if isinstance(m, UserMessage) and not _agent_written(m) and m is not mine]
    room = (policy.compact_at * window / 2 - fixed - sum(sizes[:head]) - sum(sizes[split:])
            - (run.message_tokens(mine) if mine is not None else 0))
    chosen: list[Message] = []
    for m in reversed(users):  # one too big is skipped: an older, smaller one may still fit
        size = run.message_tokens(m)
        if size <= room:
            room -= size
            chosen.append(m)
    kept = [m for m in older if m is mine or any(m is c for c in chosen)]  # history order
    if len(chosen) < len(users):
        run.issue(f"compaction kept {len(chosen)} of the {len(users)} earlier user messages verbatim (the others "
                  "did not fit; the summary covers them)")
    note = UserMessage(content=SUMMARY_NOTE.format(n=len(older), summary=summary))
    new = [*msgs[:head], note, *kept, *msgs[split:]]
    msgs[:] = new  # in place: the caller's list is the live history
    run.cache = PromptCache()
    run.context_tokens = fixed + sum(run.message_tokens(m) for m in new)
    if run.session is not None:
        run.session.compaction(new, summary)
    yield CompactionEvent(len(older) - len(kept), summary)


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
