"""Replies cut by the output limit: the agent asks the model to continue, or stops the run with
``stop_reason="no_progress"`` (and an issue saying why) when asking again does not help.

A cut reply is answered with :data:`~kimik3.agents._prompts.CONTINUE_REQUEST` (or
:data:`~kimik3.agents._prompts.INTERRUPTED_REQUEST` when the stream ended before the server
finished it). The run stops after :data:`~kimik3._defaults.MAX_CONTINUES` cut replies in a row,
after two when the last was cut before any answer (reasoning only: issue 27, shape (e)), or at
once when the continuation's prompt no longer fits the context window (the cut reply filled it:
the engine's ``ContextLengthExceededError`` is then the run's end, not its error). The output is
the cut replies' text so far (None when they have none, or with an ``output_type``). A reply that
completes the cut ones is the answer with their text before it (:func:`whole_answer`: the output
is the whole answer, issue 41).
"""

from __future__ import annotations

from typing import Any

from .._defaults import MAX_CONTINUES
from ..types import AssistantMessage, ChatCompletion, message_text
from ._checks import answer_text
from ._prompts import CONTINUE_REQUEST, INTERRUPTED_REQUEST
from ._run import _Run
from ._types import ContinueWith, Final

__all__ = ["cut_outcome", "joined", "no_room_to_continue", "whole_answer"]


def cut_outcome(run: _Run, completion: ChatCompletion, message: AssistantMessage,
                output_type: Any) -> ContinueWith | Final:
    """The outcome of a turn whose reply (no tool call) ``completion`` cut: continue, or stop
    (``no_progress``); counts it in ``run.cut_replies`` and keeps its text in ``run.cut_text``.

    Args:
        run: the run (its cut count, text and issues are updated).
        completion: the cut turn's completion (``truncated``; ``interrupted`` when it was not the
            output limit).
        message: its assistant message.
        output_type: the agent's output type (None: text, which the cut text becomes).
    """
    run.cut_replies += 1
    if completion.interrupted is not None:  # not the output limit: never silent
        run.issue(f"the answer was cut by {completion.interrupted}")
    run.cut_answer = joined(run.cut_answer, message_text(message.content))
    run.cut_text = run.cut_answer or None if output_type is None else None
    # asking again does not help: stop, saying so. A reply cut before any answer (reasoning only)
    # gets one retry: twice is no progress.
    if run.cut_replies >= (MAX_CONTINUES if answer_text(message).strip() else 2):
        if completion.interrupted is None:
            run.issue("the model's replies kept being cut by the output limit (max_tokens)")
        return Final(run.cut_text, "no_progress")
    return ContinueWith(CONTINUE_REQUEST if completion.interrupted is None else INTERRUPTED_REQUEST)


def no_room_to_continue(run: _Run) -> Final | None:
    """The end of a run whose model call raised ``ContextLengthExceededError``: after a cut reply
    (the continuation's prompt fills the window) ``no_progress`` with the cut text and an issue;
    None when no reply was cut (the error is the run's: re-raise it)."""
    if not run.cut_replies:
        return None
    run.issue("the reply was cut by max_tokens and the context window has no room to continue it")
    return Final(run.cut_text, "no_progress")


def joined(before: str, after: str) -> str:
    """The answer so far, ``before``, continued by ``after``: ``after`` itself when the model
    started over (it begins with the whole of ``before``), else the two end to end."""
    if before.strip() and after.lstrip().startswith(before.strip()):
        return after
    return before + after


def whole_answer(run: _Run, message: AssistantMessage) -> AssistantMessage:
    """The final answer of a reply that continued cut ones: the cut replies' text with this
    reply's (:func:`joined`), so the output is the whole answer, not only its last part
    (issue 41, N39); ``message`` itself when no reply before it was cut."""
    if not run.cut_replies or not run.cut_answer:
        return message
    return message.model_copy(update={"content": joined(run.cut_answer, message_text(message.content))})
