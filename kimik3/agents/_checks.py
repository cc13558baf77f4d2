"""What the agent does with model output and tool results it cannot use as they are.

Each check returns the words the model sees (so it can retry) and the line
:attr:`~kimik3.RunResult.issues` keeps (so a degraded answer is never reported as a clean one):

- :func:`unrun_calls`: tool calls the model started that never ran: cut by the output limit, never
  closed (raw K3), sent with arguments that are not a JSON object (chat mode), or written outside
  the tools section. The parser / chat checker report them in ``ChatCompletion.dropped_tool_calls``
  and ``misplaced_tool_calls``.
- :func:`summary_problem`: a compaction summary that is empty (reasoning only), cut, or the
  request echoed back.
- :func:`check_images`: a tool result's image that could never be shown to the model (over the
  decompression-bomb limit, corrupt, a path that cannot be read): the result becomes a tool error.
- :func:`failed_call_issue`: the issue line of a call answered with a tool error (the tool raised,
  overran its limit, was denied, unknown, invalid arguments).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import anyio.to_thread

from .._exceptions import MediaError
from ..tools import ToolResult, failures
from ..tools.failures import ERROR_PREFIX, FailureText, default_failure_text
from ..types import AssistantMessage, ChatCompletion, ImagePart, TextPart
from ._prompts import COMPACTION_REQUEST

__all__ = [
    "EMPTY_TURN", "UnrunCall", "answer_text", "check_images", "cut_by", "failed_call_errors", "failed_call_issue",
    "summary_problem", "unrun_calls", "unrun_note",
]  # fmt: skip

EMPTY_TURN = (
    "Your last message had neither an answer nor a tool call that could run. "
    "Answer the task, or call a tool."
)


@dataclass(frozen=True)
class UnrunCall:
    """A tool call the model started that did not run: its tool name and why.

    Attributes:
        name: the tool's name ("" when the model gave none).
        kind: ``"cut"`` (the output limit ended it), ``"dropped"`` (it could not be used),
            ``"tail"`` (the output was cut after the last complete call: a further call may be lost),
            ``"failed"`` (a call that cannot run: arguments a server sent undecodable, a value that
            cannot be read unambiguously, a call read from server text whose tool was not
            declared; answered with a tool error),
            or ``"misplaced"`` (written outside the tools section: kept as text, never run).
        why: what happened, in words, as the model reads it.
        advice: what to do instead.
    """

    name: str
    kind: Literal["cut", "dropped", "tail", "failed", "misplaced"]
    why: str
    advice: str

    def __str__(self) -> str:
        who = f"the call to {self.name!r}" if self.name else "a call without a tool name"
        if self.kind == "tail":
            who = "whatever followed the last complete call"
        return f"{who} {self.why} and did not run"


def unrun_calls(completion: ChatCompletion) -> list[UnrunCall]:
    """The calls of ``completion`` that never ran, from ``dropped_tool_calls`` (in call order).

    When the output was cut (``truncated``), the last dropped call is the one the cut ended; the
    others never closed (raw K3: the message ended or moved on first) or came with arguments that
    are not a JSON object (chat mode, where ``raw_text`` is None). Calls written outside the tools
    section follow (``misplaced_tool_calls``). Output cut after its complete calls with no call
    dropped (cut inside a call's header, say) gives one ``"tail"`` entry.
    """
    names = completion.dropped_tool_calls
    out: list[UnrunCall] = []
    for i, name in enumerate(names):
        if completion.truncated and i == len(names) - 1:
            out.append(UnrunCall(name, "cut", f"was cut by {cut_by(completion)} before it finished",
                                 "Make the call again; if its arguments are long, split the work into smaller calls."
                                 if completion.interrupted is None else "Make the call again."))
        elif completion.raw_text is None:
            out.append(UnrunCall(name, "dropped", "came with arguments that are not one JSON object",
                                 "Make the call again with its arguments as one JSON object."))
        else:
            out.append(UnrunCall(name, "dropped",
                                 "never closed: the message ended or moved on before the call (or one of its "
                                 "argument values) was closed",
                                 "Make the call again, closing each argument and the call."))
    for name in completion.misplaced_tool_calls:
        out.append(UnrunCall(name, "misplaced", "was written outside the tools section, as text",
                             "Tool calls run only inside the tools section: make it again there if it is "
                             "still needed."))
    for f in completion.failed_tool_calls:
        out.append(UnrunCall(f.name, "failed", f"could not be run ({f.reason})", ""))
    if not out and completion.truncated and completion.message.tool_calls:  # e.g. cut in a call's header
        out.append(UnrunCall("", "tail", f"was cut by {cut_by(completion)}",
                             "If you meant to make more calls, make them now."))
    return out


def cut_by(completion: ChatCompletion) -> str:
    """What cut a truncated answer, as a phrase: ``"the output limit (max_tokens)"``, or the
    completion's :attr:`~kimik3.ChatCompletion.interrupted` (``"a closed connection (the stream
    ended with no finish_reason)"``): a connection that closed mid-answer is never reported as
    the output limit."""
    return completion.interrupted or "the output limit (max_tokens)"


def unrun_note(calls: list[UnrunCall]) -> str | None:
    """The user note that tells the model which of its calls did not run, why, and what to do
    (None when there are none; failed calls are left out: each has its tool error)."""
    lines = [f"- {str(c)[0].upper()}{str(c)[1:]}. {c.advice}" for c in calls if c.kind != "failed"]
    return "Some of your tool calls did not run:\n" + "\n".join(lines) if lines else None


def answer_text(message: AssistantMessage) -> str:
    """The text of an assistant message's content (its text parts joined)."""
    if isinstance(message.content, str):
        return message.content
    if isinstance(message.content, list):
        return "".join(p.text for p in message.content if isinstance(p, TextPart))
    return ""


def summary_problem(completion: ChatCompletion) -> str | None:
    """Why a compaction summary cannot replace the history (None when it can): cut, empty, or
    the request itself echoed back (spacing aside)."""
    if completion.truncated:
        return f"was cut by {cut_by(completion)}"
    text = answer_text(completion.message)
    if not text.strip():
        only_reasoning = bool(completion.message.reasoning_content)
        return "came back empty (no text, only reasoning)" if only_reasoning else "came back empty"
    if " ".join(text.split()) == COMPACTION_REQUEST:  # the request echoed back: no summary of anything
        return "came back as the request itself (echoed, nothing summarised)"
    return None


async def check_images(result: ToolResult, check: Callable[[str], None],
                       text: FailureText = default_failure_text) -> ToolResult:
    """``result``, or a tool error when one of its images could never be shown to the model.

    ``check`` is the engine's :meth:`~kimik3.engines.Engine.check_image` (through
    :meth:`kimik3.Client.check_image`): each local or ``data:`` image is prepared the way the
    engine will prepare it (cached; in a worker thread), so a local path is refused unless the
    engine allows local files. http(s) images are left to the server.

    Returns:
        ``result`` itself, or ``ToolResult(is_error=True, content="Error: the tool's result holds an
        image the model cannot be shown: ImageTooLargeError: ...")`` (worded by ``text``) followed
        by the result's text.
    """
    if isinstance(result.content, str):
        return result
    for part in result.content:
        if not isinstance(part, ImagePart) or part.image_url.url.startswith(("http://", "https://")):
            continue
        try:
            await anyio.to_thread.run_sync(functools.partial(check, part.image_url.url))
        except (MediaError, OSError) as e:  # OSError: a path that cannot be read
            why = text(failures.unshowable_image(e))
            return ToolResult(content=f"{why}\n{result.text}" if result.text else why, is_error=True)
    return result


def failed_call_errors(completion: ChatCompletion) -> dict[str, str]:
    """``{call id: why}`` for a chat server's calls with undecodable arguments: the reason, what
    was sent (300 characters at most) and what to do; the agent answers each with it."""
    errors = {}
    for failed in completion.failed_tool_calls:
        sent = failed.arguments if len(failed.arguments) <= 300 else failed.arguments[:300] + "..."
        errors[failed.id] = (f"{failed.reason}. The arguments you sent: {sent}. "
                             "Call the tool again with its arguments as one JSON object.")
    return errors


_MAX_ISSUE_ERROR = 300  # characters of a failed call's error text kept in its issue line


def failed_call_issue(name: str, error: str) -> str:
    """The :attr:`~kimik3.RunResult.issues` line of a call answered with a tool error: ``"the call
    to 'grep' failed: ToolTimeoutError: grep did not finish within 60 s ..."`` (the error's first
    line, ``Error: `` left out, at most 300 characters)."""
    first = error.removeprefix(ERROR_PREFIX).strip().split("\n", 1)[0]
    if len(first) > _MAX_ISSUE_ERROR:
        first = first[:_MAX_ISSUE_ERROR] + "..."
    who = f"the call to {name!r}" if name else "a call without a tool name"
    return f"{who} failed: {first}" if first else f"{who} failed"
