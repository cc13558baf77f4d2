"""The failure texts the model reads, in one place: every tool-error result the agent, a tool or
the harness hands the model, built here and worded by one replaceable formatter (openai-agents'
``failure_error_function``).

A failure is data, :class:`ToolFailure` (its kind, what happened in words, the exception when one
was raised); the text the model reads is ``formatter(failure)``, by default
:func:`default_failure_text`: ``"Error: " + failure.message``. ``Agent(failure_text=...)`` replaces
the formatter for everything of its runs (it reaches tools through
:attr:`~kimik3.tools.ToolContext.failure_text`); the constructors below hold the words of each
kind, so the text the model is tuned on is edited here and nowhere else.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, TypeAlias

from ._limits import STRAY_NOTE

__all__ = [
    "ERROR_PREFIX",
    "FailureKind",
    "FailureText",
    "ToolFailure",
    "approval_failed",
    "default_failure_text",
    "denied",
    "edit_not_json",
    "exception",
    "finished_unrecorded",
    "guardrail_blocked",
    "interrupted",
    "interrupted_by_stop",
    "kept_write",
    "loop_blocked",
    "no_decision",
    "not_run",
    "orphaned",
    "refused",
    "stray_cancellation",
    "subagent_failed",
    "tool_reported",
    "unknown_tool",
    "unshowable_image",
]

FailureKind: TypeAlias = Literal[
    "exception", "stray_cancellation", "unknown_tool", "not_run", "interrupted", "orphaned", "approval_failed",
    "denied", "edit_not_json", "no_decision", "unshowable_image", "refused", "subagent_failed", "tool_reported",
    "guardrail",
    "loop",
]  # fmt: skip
"""What went wrong: a tool raised (``exception``; its own ``CancelledError``:
``stray_cancellation``), no such tool, arguments that could not be used (``not_run``), the run's
cancellation or time budget ended the call (``interrupted``), a crash left it without a result
(``orphaned``), the approval hook failed, denied, edited into non-JSON or gave no decision, an
image the model cannot be shown, a harness rule refused the call (``refused``), a sub-agent
failed, the tool itself reported an error (``tool_reported``: an MCP ``isError`` result), a
tool guardrail tripped on the call (``guardrail``), or the loop breaker did not run a call the
model kept repeating (``loop``, :mod:`kimik3.agents._loops`)."""


@dataclass(frozen=True)
class ToolFailure:
    """A failure the model reads as a tool's error result.

    Attributes:
        kind: what went wrong (:data:`FailureKind`).
        message: what happened, in words, without the ``"Error: "`` prefix.
        error: the exception, when one was raised.
    """

    kind: FailureKind
    message: str
    error: BaseException | None = None


FailureText: TypeAlias = Callable[[ToolFailure], str]
"""Words a failure as the text the model reads (``Agent(failure_text=...)``)."""


ERROR_PREFIX = "Error: "
"""What :func:`default_failure_text` puts before a failure's message."""


def default_failure_text(failure: ToolFailure) -> str:
    """``"Error: <message>"``: what kimik3 sends by default (e.g. ``"Error: ToolTimeoutError: grep
    did not finish within 60 s and was abandoned"``)."""
    return ERROR_PREFIX + failure.message


def _described(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def exception(exc: BaseException) -> ToolFailure:
    """A tool raised ``exc``: ``"<ExceptionType>: <message>"`` (the type alone for an empty message)."""
    return ToolFailure("exception", _described(exc), exc)


def stray_cancellation(exc: BaseException) -> ToolFailure:
    """A ``CancelledError`` the tool (or a hook) raised itself while nothing cancelled it
    (:func:`~kimik3.tools._limits.stray_cancellation`)."""
    return ToolFailure("stray_cancellation", f"{_described(exc)} {STRAY_NOTE}", exc)


def unknown_tool(name: str, known: list[str], *, declared_earlier: bool = False) -> ToolFailure:
    """The model called ``name``, which the run does not have (``declared_earlier``: an earlier
    run of the conversation had it)."""
    why = " was declared in an earlier run and is not available now" if declared_earlier else ""
    return ToolFailure("unknown_tool", f"unknown tool {name!r}{why}; available tools: {', '.join(known) or 'none'}")


def not_run(why: str) -> ToolFailure:
    """The call's arguments could not be used (beyond the JSON limits, or sent broken by a server)."""
    return ToolFailure("not_run", f"the call was not run: {why}")


def interrupted(*, by_time_budget: bool) -> ToolFailure:
    """The run's time budget ran out, or the run was cancelled, before the call finished."""
    if by_time_budget:
        return ToolFailure("interrupted", "the run's time budget ran out before the tool call finished")
    return ToolFailure("interrupted", "the tool call was cancelled before it finished")


def interrupted_by_stop() -> ToolFailure:
    """An approved call (:mod:`kimik3.agents._deferred`) had started when its run stopped (a crash,
    ``kill -9``) and its result was never recorded; it is not run again: the model decides."""
    return ToolFailure("interrupted", "the run stopped while this call was running and its result was lost; it may "
                                      "have done some or all of its work: check before calling it again")


def finished_unrecorded() -> ToolFailure:
    """A call had returned (journaled ``tool_finished``: :mod:`kimik3.agents._deferred`) when its
    run stopped, before its result was recorded; it is not run again (issue 40)."""
    return ToolFailure("interrupted", "this call finished, but the run stopped before its result was recorded, so "
                                      "the result is lost: check what it did before calling it again")
def loop_blocked(loop: str, *, ends_run: bool) -> ToolFailure:
    """The loop breaker did not run the call: it repeats ``loop`` (what, how many times) with the
    same results each time (``ends_run``: the run ends after this turn, ``loop_detected``)."""
    then = ("the run ends now (loop detected)" if ends_run
            else "do something else: use the results you have, change the arguments, or answer")
    return ToolFailure("loop", f"the call was not run: you repeated {loop}; its result is already in the "
                               f"conversation above; {then}")


def orphaned(why: str) -> ToolFailure:
    """A crash left a call of the history without a result (answered when the run continues)."""
    return ToolFailure("orphaned", why)


def approval_failed(exc: Exception) -> ToolFailure:
    """The approval hook raised."""
    return ToolFailure("approval_failed", f"the approval check failed: {exc}", exc)


def denied(reason: str) -> ToolFailure:
    """The approval hook denied the call (:class:`~kimik3.agents.Deny`)."""
    return ToolFailure("denied", f"the user denied this call: {reason}")


def edit_not_json(exc: Exception) -> ToolFailure:
    """The approval hook's :class:`~kimik3.agents.Edit` holds arguments that are not JSON data."""
    return ToolFailure("edit_not_json", f"the approval's edited arguments are not JSON data: {exc}", exc)


def no_decision() -> ToolFailure:
    """The approval hook returned something else than Allow / Deny / Edit."""
    return ToolFailure("no_decision", "the approval check gave no decision")


def unshowable_image(exc: BaseException) -> ToolFailure:
    """The tool's result holds an image the model could never be shown."""
    return ToolFailure("unshowable_image",
                       f"the tool's result holds an image the model cannot be shown: {_described(exc)}", exc)


def refused(why: str) -> ToolFailure:
    """A harness rule refused the call before it ran (read-before-edit)."""
    return ToolFailure("refused", why)


def kept_write(path: str, what: str) -> ToolFailure:
    """A file tool was asked to write (or delete, or make a folder in) ``what`` kimik3 or git act on
    later (git control data, a checkpoint store, a workspace skill: ``kimik3.tools.coding._kept``);
    ``path`` as the tool was given it. Issue 40."""
    return ToolFailure("refused", f"{path} is {what}; kimik3 or git act on it after this run, so no tool may write "
                                  "it (the file tools refuse, and bash finds it read-only). Change the work tree's "
                                  "files instead")


def subagent_failed(exc: Exception) -> ToolFailure:
    """A sub-agent's run raised."""
    return ToolFailure("subagent_failed", f"the sub-agent failed: {_described(exc)}", exc)


def tool_reported(text: str | None) -> ToolFailure:
    """The tool itself reported an error (an MCP ``isError`` result), ``text`` being its words
    (None: it gave none, a generic sentence)."""
    return ToolFailure("tool_reported", "the MCP tool reported an error" if text is None else text)


def guardrail_blocked(name: str, stage: str, message: str | None) -> ToolFailure:
    """A tool guardrail (:mod:`kimik3.agents._guardrails`) tripped on the call's arguments
    (``tool_input``: it did not run) or its result (``tool_output``: withheld from the model)."""
    what = "the call was not run" if stage == "tool_input" else "the tool's result was withheld"
    return ToolFailure("guardrail", f"{what}: guardrail {name!r} tripped" + (f": {message}" if message else ""))
