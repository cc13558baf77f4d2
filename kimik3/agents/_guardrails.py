"""Guardrails: checks of a run's input, its final answer and its tool calls that the application
writes, and that can end the run (or replace a tool's result) when they trip.

Four stages, as openai-agents' ``input_guardrail`` / ``output_guardrail`` /
``tool_input_guardrail`` / ``tool_output_guardrail`` (its ``GuardrailFunctionOutput`` is
:class:`GuardrailResult` here)::

    input        check(text: str)                         the task (each new user message), before
                                                          the model sees it
    output       check(output: Any)                       the final answer (text, or the
                                                          output_type instance)
    tool_input   check(name: str, arguments: dict)        a call's arguments (after approval),
                                                          before it runs
    tool_output  check(name: str, result: ToolResult)     a call's result, before the model sees it

A check is sync or async and returns a :class:`GuardrailResult`. When it trips
(``tripwire_triggered``) the run ends with ``stop_reason="guardrail"`` and the trip in
:attr:`RunResult.guardrail` and the session (``on_trip="stop"``, the default), or, for a tool
guardrail with ``on_trip="replace"``, the model reads the guardrail's message as the call's error
result and the run goes on. A check that raises ends the run with its exception (fails closed).

A guardrail is the application's own code: kimik3 never makes a model call for one, and the
approval hook is not one (it decides, a guardrail checks). Each check is an ``apply_guardrail``
span with the guardrail's own result (:func:`kimik3._tracing.guardrail_check`). docs/guardrails.md.
"""

from __future__ import annotations

import contextlib
import inspect
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, TypeAlias

from .. import _tracing
from .._exceptions import UserError
from ..tools import ToolResult, failures
from ..tools.failures import FailureText, default_failure_text
from ..types import Message, TextPart, UserMessage
from ._session import SessionWriter

__all__ = [
    "Guardrail",
    "GuardrailResult",
    "GuardrailStage",
    "GuardrailTrip",
    "Guards",
    "input_guardrail",
    "merge_guardrails",
    "output_guardrail",
    "tool_input_guardrail",
    "tool_output_guardrail",
]

GuardrailStage: TypeAlias = Literal["input", "output", "tool_input", "tool_output"]
"""What a guardrail checks (``gen_ai.guardrail.source`` of its span)."""

OnTrip: TypeAlias = Literal["stop", "replace"]
"""What a tripped guardrail does: end the run, or (tool stages) replace the call's result."""


@dataclass(frozen=True)
class GuardrailResult:
    """What a guardrail's check returns (openai-agents' ``GuardrailFunctionOutput``).

    Attributes:
        tripwire_triggered: the check found what it guards against.
        message: why, in words: the user reads it in :attr:`GuardrailTrip.message`; with
            ``on_trip="replace"`` the model reads it as the call's error result. Keep secrets
            out of it: it is recorded in the session and on the span.
        output_info: anything else the check wants kept (:attr:`GuardrailTrip.output_info`;
            not recorded in the session).
    """

    tripwire_triggered: bool
    message: str | None = None
    output_info: Any = None


@dataclass(frozen=True)
class GuardrailTrip:
    """A guardrail that tripped and ended the run (:attr:`RunResult.guardrail`).

    Attributes:
        name: the guardrail's name.
        stage: what it checked (:data:`GuardrailStage`).
        message: its :attr:`GuardrailResult.message`.
        output_info: its :attr:`GuardrailResult.output_info`.
        call_id: the tool call it checked (tool stages).
    """

    name: str
    stage: GuardrailStage
    message: str | None = None
    output_info: Any = None
    call_id: str | None = None


@dataclass(frozen=True)
class Guardrail:
    """A check at one stage of a run (build it with :func:`input_guardrail` and its siblings).

    Attributes:
        stage: what it checks (:data:`GuardrailStage`; the check's arguments depend on it, see
            the module docstring).
        check: the function (sync or async) returning a :class:`GuardrailResult`.
        name: its name (span, session, :class:`GuardrailTrip`); a run's guardrail replaces the
            agent's of the same name.
        on_trip: ``"stop"`` ends the run; ``"replace"`` (tool stages only) gives the model the
            guardrail's message as the call's error result and goes on.

    Raises:
        UserError: an unknown stage or ``on_trip``, ``"replace"`` on the input or output stage,
            a ``check`` that is not callable.
    """

    stage: GuardrailStage
    check: Callable[..., GuardrailResult | Awaitable[GuardrailResult]]
    name: str
    on_trip: OnTrip = "stop"

    def __post_init__(self) -> None:
        if self.stage not in ("input", "output", "tool_input", "tool_output"):
            raise UserError(f"Guardrail(stage=...) must be input, output, tool_input or tool_output, "
                            f"got {self.stage!r:.40}")
        if self.on_trip not in ("stop", "replace"):
            raise UserError(f"Guardrail(on_trip=...) must be 'stop' or 'replace', got {self.on_trip!r:.40}")
        if self.on_trip == "replace" and not self.stage.startswith("tool_"):
            raise UserError(f"guardrail {self.name!r}: on_trip='replace' is for tool guardrails; an {self.stage} "
                            "guardrail ends the run")
        if not callable(self.check):
            raise UserError(f"guardrail {self.name!r}: check must be callable, got {type(self.check).__name__}")


def _decorator(stage: GuardrailStage, check: Callable[..., Any] | None, name: str | None, on_trip: OnTrip) -> Any:
    def wrap(fn: Callable[..., Any]) -> Guardrail:
        return Guardrail(stage, fn, name or str(getattr(fn, "__name__", stage)), on_trip)
    return wrap if check is None else wrap(check)


def input_guardrail(check: Callable[[str], Any] | None = None, *, name: str | None = None) -> Any:
    """``@input_guardrail`` (or ``@input_guardrail(name=...)``): a :class:`Guardrail` whose
    ``check(text) -> GuardrailResult`` sees the text of the run's task (each new user message)
    before the model does; a trip ends the run before any model call, the message kept out of
    the history."""
    return _decorator("input", check, name, "stop")


def output_guardrail(check: Callable[[Any], Any] | None = None, *, name: str | None = None) -> Any:
    """``@output_guardrail``: ``check(output) -> GuardrailResult`` sees the final answer (its
    text, or the ``output_type`` instance); a trip withholds it (:attr:`RunResult.output` None).
    The model's message stays in the history and the session (K3 replays it), and text deltas
    were streamed before the check: show the final output, not the stream, when it matters."""
    return _decorator("output", check, name, "stop")


def tool_input_guardrail(check: Callable[[str, dict[str, Any]], Any] | None = None, *, name: str | None = None,
                         on_trip: OnTrip = "stop") -> Any:
    """``@tool_input_guardrail(on_trip="stop" | "replace")``: ``check(name, arguments) ->
    GuardrailResult`` sees each call's arguments (after approval) before it runs; a tripped call
    does not run."""
    return _decorator("tool_input", check, name, on_trip)


def tool_output_guardrail(check: Callable[[str, ToolResult], Any] | None = None, *, name: str | None = None,
                          on_trip: OnTrip = "stop") -> Any:
    """``@tool_output_guardrail(on_trip=...)``: ``check(name, result) -> GuardrailResult`` sees
    each call's :class:`~kimik3.ToolResult` before the model does; a tripped result is never shown."""
    return _decorator("tool_output", check, name, on_trip)


def merge_guardrails(agent: Sequence[Guardrail], run: Sequence[Guardrail] | None) -> list[Guardrail]:
    """The guardrails of a run: the agent's, with the run's merged over them (agent < run, as
    settings): a run's guardrail replaces the agent's of the same name, others are added.

    Raises:
        UserError: something that is not a :class:`Guardrail`; two with one name in one list.
    """
    merged: dict[str, Guardrail] = {}
    for where, given in (("Agent(guardrails=...)", agent), ("run(guardrails=...)", run or ())):
        if isinstance(given, Guardrail) or not isinstance(given, (list, tuple)):
            raise UserError(f"{where} must be a list of guardrails, got {type(given).__name__}")
        names: set[str] = set()
        for g in given:
            if not isinstance(g, Guardrail):
                raise UserError(f"{where} holds {type(g).__name__} {g!r:.60}; make one with @input_guardrail, "
                                "@output_guardrail, @tool_input_guardrail or @tool_output_guardrail")
            if g.name in names:
                raise UserError(f"{where}: two guardrails are named {g.name!r}")
            names.add(g.name)
            merged[g.name] = g  # a run's replaces the agent's in its place
    return list(merged.values())


def _trailing_user_messages(history: Sequence[Message]) -> list[UserMessage]:
    """The user messages at the end of ``history`` (after its last other message)."""
    out: list[UserMessage] = []
    for m in reversed(history):
        if not isinstance(m, UserMessage):
            break
        out.append(m)
    return out[::-1]


def _text(message: UserMessage) -> str:
    if isinstance(message.content, str):
        return message.content
    return "".join(p.text for p in message.content if isinstance(p, TextPart))


class Guards:
    """The guardrails of one run and what they found (the first trip that ends it).

    Args:
        guardrails: the run's merged guardrails (:func:`merge_guardrails`).
        span: the run's span (parent of the input and output checks' spans).
        session: the run's session writer (a trip is recorded there).
        failure_text: how the model reads a replaced tool result.
    """

    def __init__(self, guardrails: Sequence[Guardrail] = (), span: _tracing.Span | None = None,
                 session: SessionWriter | None = None, failure_text: FailureText = default_failure_text) -> None:
        self.guardrails = list(guardrails)
        self.span = span
        self.session = session
        self.failure_text = failure_text
        self.trip: GuardrailTrip | None = None

    def checks(self, stage: GuardrailStage) -> bool:
        """Whether any guardrail checks ``stage`` (``"tool_input"``, ``"tool_output"``, ...)."""
        return any(g.stage == stage for g in self.guardrails)

    def _of(self, stage: GuardrailStage) -> list[Guardrail]:
        return [g for g in self.guardrails if g.stage == stage]

    async def _run(self, g: Guardrail, args: tuple[Any, ...], content: Any, call_id: str | None = None
                   ) -> GuardrailResult:
        parent = None if g.stage.startswith("tool_") else self.span  # tool checks: under the call's span
        with _tracing.guardrail_check(parent, g.name, g.stage, content, call_id=call_id) as span:
            result = g.check(*args)
            if inspect.isawaitable(result):
                result = await result
            if not isinstance(result, GuardrailResult):
                raise UserError(f"guardrail {g.name!r} returned {type(result).__name__} {result!r:.60}; a guardrail "
                                "returns GuardrailResult(tripwire_triggered=..., message=...)")
            span.done(result)
        return result

    def _tripped(self, g: Guardrail, result: GuardrailResult, call_id: str | None = None) -> GuardrailTrip:
        trip = GuardrailTrip(g.name, g.stage, result.message, result.output_info, call_id)
        if g.on_trip == "stop" and self.trip is None:
            self.trip = trip
            if self.session is not None:
                self.session.record("guardrail", {"name": g.name, "stage": g.stage, "message": result.message,
                                                  "call_id": call_id})
        return trip

    async def check_input(self, task: UserMessage | None, history: Sequence[Message]) -> bool:
        """Check the run's new user messages: ``task``, or without one the user messages that
        end ``history`` (a conversation the caller continues). True when nothing tripped (the
        task may enter the history)."""
        new = [task] if task is not None else _trailing_user_messages(history)
        for message in new:
            text = _text(message)
            for g in self._of("input"):
                result = await self._run(g, (text,), text)
                if result.tripwire_triggered:
                    self._tripped(g, result)
                    return False
        return True

    async def final(self, result: Any) -> Any:
        """The run's :class:`RunResult`, or, when an output guardrail trips on its output, the
        same result without the output, ``stop_reason="guardrail"`` and the trip."""
        if result.output is None or result.stop_reason == "guardrail":
            return result
        for g in self._of("output"):
            checked = await self._run(g, (result.output,), result.output)
            if checked.tripwire_triggered:
                return replace(result, output=None, stop_reason="guardrail", guardrail=self._tripped(g, checked))
        return result

    async def check_tool_input(self, call_id: str, name: str, arguments: dict[str, Any] | str) -> ToolResult | None:
        """Check a call's arguments (a JSON object's text is parsed; other text is handed over as
        it is) before it runs: None (run it), or the error result the model reads instead (the
        guardrail's message)."""
        checks = self._of("tool_input")
        if not checks:  # none: the arguments are not parsed for nothing (issue 44)
            return None
        if isinstance(arguments, str):
            with contextlib.suppress(ValueError):
                arguments = json.loads(arguments)
        for g in checks:
            result = await self._run(g, (name, arguments), arguments, call_id)
            if result.tripwire_triggered:
                return self._blocked(g, result, call_id)
        return None

    async def check_tool_output(self, call_id: str, name: str, result: ToolResult) -> ToolResult:
        """Check a call's result before the model sees it: it, or the error result that replaces it."""
        for g in self._of("tool_output"):
            checked = await self._run(g, (name, result), result.text, call_id)
            if checked.tripwire_triggered:
                return self._blocked(g, checked, call_id)
        return result

    def _blocked(self, g: Guardrail, result: GuardrailResult, call_id: str) -> ToolResult:
        self._tripped(g, result, call_id)
        return ToolResult.from_failure(failures.guardrail_blocked(g.name, g.stage, result.message), self.failure_text)
