"""The plan tool: the agent keeps a short list of steps with their status (the to-do list
coding agents keep: Claude Code's TodoWrite, Codex's ``update_plan``, kimi-cli's SetTodoList),
and the CLI's live view shows it.

The tool takes the whole plan each time (steps are few; replacing is simpler for the model than
editing by index) in Codex's shape: ``update_plan(plan=[{"step": ..., "status": "pending" |
"in_progress" | "completed"}], explanation=...)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

from pydantic import BaseModel, Field, field_validator

from .._exceptions import ToolArgumentsError
from .._text import printable
from ._tool import FunctionTool, Tool

__all__ = ["PLAN_TOOL_NAME", "Plan", "PlanStep", "find_plan", "plan_tool"]

PLAN_TOOL_NAME = "update_plan"
_MARKS = {"completed": "[x]", "in_progress": "[>]", "pending": "[ ]"}


class PlanStep(BaseModel):
    """A step of the plan and its status."""

    step: str = Field(min_length=1, description="what to do, one short sentence")
    status: Literal["pending", "in_progress", "completed"] = "pending"

    @field_validator("step")
    @classmethod
    def _one_line(cls, value: str) -> str:
        """One line of printable text (whitespace runs, newlines included, become one space):
        a step cannot draw other plan lines or terminal escapes in the CLI's view."""
        text = " ".join(printable(value).split())
        if not text:
            raise ValueError("a step needs visible text")
        return text


class Plan:
    """The agent's plan: state kept by the ``update_plan`` tool (:func:`plan_tool`).

    Attributes:
        steps: the current steps, in order.
        explanation: the model's note with its last update ("" if none).
        listeners: called with the plan after every update (the CLI redraws its live view).
    """

    def __init__(self) -> None:
        self.steps: list[PlanStep] = []
        self.explanation = ""
        self.listeners: list[Callable[[Plan], None]] = []

    def update(self, plan: list[PlanStep], explanation: str = "") -> str:
        """Replace the whole plan. Keep it short (3-8 steps); exactly one step is in_progress
        while you work, mark steps completed as soon as they are done, and send the full list
        every time. Use it for tasks with several steps; skip it for one-step requests.

        Args:
            plan: every step, in order, with its status.
            explanation: optional note on what changed and why.

        Returns:
            The plan as text: a first line "plan updated: N of M steps completed", then one line
            per step, "[x]" completed, "[>]" in progress, "[ ]" pending.
        """
        running = [s.step for s in plan if s.status == "in_progress"]
        if len(running) > 1:
            raise ToolArgumentsError(f"only one step may be in_progress at a time, got {len(running)}: {running}")
        self.steps = list(plan)
        self.explanation = explanation
        for listener in self.listeners:
            listener(self)
        return self.render()

    def render(self) -> str:
        """The plan as text (see :meth:`update`); ``"plan: empty"`` before the first update."""
        if not self.steps:
            return "plan: empty"
        done = sum(s.status == "completed" for s in self.steps)
        lines = [f"plan updated: {done} of {len(self.steps)} steps completed"]
        lines += [f"{_MARKS[s.status]} {s.step}" for s in self.steps]
        return "\n".join(lines)


def plan_tool(plan: Plan | None = None) -> Tool:
    """The ``update_plan`` tool bound to ``plan`` (a new :class:`Plan` when omitted; get it back
    with :func:`find_plan`)."""
    return FunctionTool((plan or Plan()).update, name=PLAN_TOOL_NAME)


def find_plan(tools: Sequence[object]) -> Plan | None:
    """The :class:`Plan` behind the ``update_plan`` tool among ``tools``, if there is one."""
    for t in tools:
        if isinstance(t, FunctionTool) and t.name == PLAN_TOOL_NAME:
            owner = getattr(t.function, "__self__", None)
            if isinstance(owner, Plan):
                return owner
    return None
