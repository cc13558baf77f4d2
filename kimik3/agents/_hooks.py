"""Run hooks: how harness features (checkpoints, project instructions, background processes,
sub-agents) join an :class:`~kimik3.Agent` run without living in the loop itself.

A hook object serves one run at a time. Every method has a no-op default; override what you need.
Order within a run::

    session_header() -> fields          when the run creates its session file
    run_start(session)                  once, before the first model call
    before_tools(turn, calls)           each turn that called tools, before any runs
    tool_result(call, result) -> result each call's result, before it enters the history
    after_tools(turn, calls)            after the turn's results are in the history
    run_end()                           once, however the run ended (shielded from cancellation)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..tools import ToolResult
from ..types import ToolCall
from ._session import SessionWriter

__all__ = ["RunHooks"]


class RunHooks:
    """Base class of run hooks (see the module docstring for when each method is called)."""

    def session_header(self) -> dict[str, Any]:
        """Fields for the header of a session file the run creates (e.g. the sandbox)."""
        return {}

    async def run_start(self, session: SessionWriter | None) -> None:
        """The run starts; ``session`` is its session writer (None when not recorded)."""

    async def before_tools(self, turn: int, calls: Sequence[ToolCall]) -> None:
        """Turn ``turn`` (1-based model call count) is about to run ``calls``."""

    async def tool_result(self, call: ToolCall, result: ToolResult) -> ToolResult:
        """The result of ``call``; return it, or a replacement the model sees instead."""
        return result

    async def after_tools(self, turn: int, calls: Sequence[ToolCall]) -> None:
        """Turn ``turn``'s calls finished and their results are in the history."""

    async def run_end(self) -> None:
        """The run ended (answered, budget, error or cancellation)."""


class AllHooks(RunHooks):
    """Several hooks called in order, as one."""

    def __init__(self, hooks: Sequence[RunHooks]) -> None:
        self.hooks = list(hooks)

    def session_header(self) -> dict[str, Any]:
        return {k: v for hook in self.hooks for k, v in hook.session_header().items()}

    async def run_start(self, session: SessionWriter | None) -> None:
        for hook in self.hooks:
            await hook.run_start(session)

    async def before_tools(self, turn: int, calls: Sequence[ToolCall]) -> None:
        for hook in self.hooks:
            await hook.before_tools(turn, calls)

    async def tool_result(self, call: ToolCall, result: ToolResult) -> ToolResult:
        for hook in self.hooks:
            result = await hook.tool_result(call, result)
        return result

    async def after_tools(self, turn: int, calls: Sequence[ToolCall]) -> None:
        for hook in self.hooks:
            await hook.after_tools(turn, calls)

    async def run_end(self) -> None:
        for hook in self.hooks:
            await hook.run_end()
