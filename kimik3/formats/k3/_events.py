"""What parsing K3 output produces: typed stream events and the parsed result (docs/k3-format.md
§ Output).

The events are what every model call yields (:class:`~kimik3.formats.k3.StreamParser` for token
engines, the chat checker for chat engines): reasoning and content deltas, and a tool call's
start, argument deltas and end (done, or incomplete when it was cut).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from ...types import AssistantMessage, FunctionCall, ToolCall

__all__ = [
    "ContentDelta",
    "Event",
    "IncompleteToolCall",
    "ParsedOutput",
    "ParsedToolCall",
    "ReasoningDelta",
    "ToolCallArgumentsDelta",
    "ToolCallDone",
    "ToolCallIncomplete",
    "ToolCallStarted",
    "new_tool_call_id",
]


def new_tool_call_id() -> str:
    """A fresh opaque tool-call id, ``"call_"`` + 24 random hex digits (96 bits of ``os.urandom``;
    not through ``uuid.UUID``, whose construction was most of the cost: issue 44).

    K3 emits no call ids (docs/k3-format.md § Output): the client invents them. They are never rendered back.
    """
    return "call_" + os.urandom(12).hex()


# -- results ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ParsedToolCall:
    """One complete tool call (its ``<|close|>call<|sep|>`` was seen).

    Attributes:
        index: 0-based position among the calls *started* in this output (the streaming index;
            equals the position in :attr:`ParsedOutput.tool_calls` unless an earlier call was
            dropped as incomplete).
        id: the client-assigned opaque id.
        name: the tool's name (the ``tool`` attribute, unescaped).
        arguments: the decoded arguments, in the order the model wrote them.
        arguments_json: the JSON object text the OpenAI shape carries; equals
            ``json.dumps(arguments, ensure_ascii=False)`` when the keys are unique (a repeated key
            appears twice, and ``json.loads`` keeps the last value, as :attr:`arguments` does).
            Always inside the limits of :func:`~kimik3.formats.k3.safe_loads`, so the encoder
            renders it.
        error: why the call cannot run, or None: a value beyond the JSON limits of
            :func:`~kimik3.formats.k3.safe_loads` (``1e999``, a 5,000-digit integer, nesting
            deeper than 128, a lone UTF-16 surrogate), or a value that holds its own closer's
            text (where it ends cannot be told; it is read up to the last closer). The value is
            then kept as its raw text (a string, as for any value that does not decode) and the
            agent answers the call with this reason instead of running the tool.
    """

    index: int
    id: str
    name: str
    arguments: dict[str, Any]
    arguments_json: str
    error: str | None = None

    def to_tool_call(self) -> ToolCall:
        """The OpenAI-shaped :class:`~kimik3.types.ToolCall` (arguments as JSON text)."""
        return ToolCall(id=self.id, function=FunctionCall(name=self.name, arguments=self.arguments_json))


@dataclass(frozen=True)
class IncompleteToolCall:
    """A call whose header was complete but whose ``<|close|>call<|sep|>`` never came.

    It is reported, never returned as a call (never executed): the output was cut inside it, or
    another structural tag (a new call, ``<|close|>tools``, the message close, ...) interrupted it.

    Attributes:
        index: the streaming index it was started with.
        id: the id announced in its :class:`ToolCallStarted` event.
        name: the tool's name.
        arguments: the arguments that were complete when it was cut (the cut one is left out).
    """

    index: int
    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ParsedOutput:
    """The parse of one K3 assistant output.

    Attributes:
        reasoning_content: the think channel's text; ``None`` when thinking was off and the model
            opened no think channel, ``""`` when it was on but empty.
        content: the response channel's text (``""`` when none).
        tool_calls: the complete calls, in order.
        truncated: the output stopped before the message closed and the server did not report a
            normal stop (``finish_reason`` ``"length"`` or unknown). An incomplete call is then in
            :attr:`incomplete_tool_calls`, not in :attr:`tool_calls`.
        incomplete_tool_calls: calls dropped because they never closed.
        misplaced_tool_calls: the tool names of calls written outside the tools section (in
            the think or response channel, or between channels): never run, their text kept
            where it was written, as it was written.
    """

    reasoning_content: str | None
    content: str
    tool_calls: tuple[ParsedToolCall, ...] = ()
    truncated: bool = False
    incomplete_tool_calls: tuple[IncompleteToolCall, ...] = ()
    misplaced_tool_calls: tuple[str, ...] = ()

    @property
    def finish_reason(self) -> Literal["tool_calls", "length", "stop"]:
        """The OpenAI-shape finish reason: ``"tool_calls"`` when calls were parsed (even if the
        output was truncated after them: complete calls are kept), else ``"length"`` when
        truncated, else ``"stop"``."""
        if self.tool_calls:
            return "tool_calls"
        return "length" if self.truncated else "stop"

    def to_message(self) -> AssistantMessage:
        """The :class:`~kimik3.types.AssistantMessage` to keep in the history.

        ``content`` and ``reasoning_content`` are kept exactly as parsed (K3 wants every past
        assistant message back with its reasoning, docs/k3-format.md § Messages); ``tool_calls``
        carry the ids and the JSON-text arguments (``None`` when there are none).
        """
        return AssistantMessage(
            content=self.content,
            reasoning_content=self.reasoning_content,
            tool_calls=[c.to_tool_call() for c in self.tool_calls] or None,
        )


# -- events ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    """Text of the think channel. Never contains a byte of a marker."""

    type: Literal["reasoning_delta"] = field(default="reasoning_delta", init=False)
    delta: str


@dataclass(frozen=True, slots=True)
class ContentDelta:
    """Text of the response channel. Never contains a byte of a marker."""

    type: Literal["content_delta"] = field(default="content_delta", init=False)
    delta: str


@dataclass(frozen=True, slots=True)
class ToolCallStarted:
    """A call header is complete: its index, client-assigned id and name are known."""

    type: Literal["tool_call_started"] = field(default="tool_call_started", init=False)
    index: int
    id: str
    name: str


@dataclass(frozen=True, slots=True)
class ToolCallArgumentsDelta:
    """A fragment of the call's arguments JSON text.

    The fragments of one call concatenate to its final :attr:`ParsedToolCall.arguments_json`
    (``{"key": `` when an argument header completes; a string value's JSON-escaped text as it
    arrives; a non-string value's JSON text when it closes; ``}`` when the call closes).
    """

    type: Literal["tool_call_arguments_delta"] = field(default="tool_call_arguments_delta", init=False)
    index: int
    id: str
    delta: str


@dataclass(frozen=True, slots=True)
class ToolCallDone:
    """A call closed: its decoded arguments, and ``error`` when it cannot run (see
    :class:`ParsedToolCall`)."""

    type: Literal["tool_call_done"] = field(default="tool_call_done", init=False)
    index: int
    id: str
    name: str
    arguments: dict[str, Any]
    arguments_json: str
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ToolCallIncomplete:
    """A started call will never be done (cut or interrupted); discard its argument deltas."""

    type: Literal["tool_call_incomplete"] = field(default="tool_call_incomplete", init=False)
    index: int
    id: str
    name: str


Event: TypeAlias = (
    ReasoningDelta
    | ContentDelta
    | ToolCallStarted
    | ToolCallArgumentsDelta
    | ToolCallDone
    | ToolCallIncomplete
)
"""Any event :meth:`StreamParser.feed` / :meth:`StreamParser.finish` return."""
