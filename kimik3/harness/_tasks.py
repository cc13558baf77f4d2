"""Sub-agents: the ``task`` tool hands a self-contained job to a child :class:`~kimik3.Agent`
with its own context, a subset of the parent's tools and its own budgets, over the parent's
client (so one engine serves all; several ``task`` calls in one turn run concurrently, like any
parallel tool calls).

The child's final answer, followed by a line with its turns and token usage, is the tool result.
A child that raises (an engine error, say) gives an error result; one that stops on a budget gives
its summary with a note. A child's cost is the parent run's (:attr:`~kimik3.RunResult.cost`,
charged through :attr:`~kimik3.tools.ToolContext.charge`, also for a child that failed midway: its
finished turns), at the parent's prices, and the parent's ``Budgets(usd=...)`` holds for its
children together: each child's USD budget is at most what is left of it (the parent's spending
and the other running children's shares taken off), so delegating cannot escape it.
When the parent records a session, each child records its own next to it
(``<parent>.task-<n>-<call id>.jsonl``, a new file: a leftover of an earlier run is skipped, never
continued) and the parent's session gets a ``{"child_session": {...}}`` record linking it.

A child is a conversation of its own: its requests carry a routing key of their own (a new one
per child) with the parent's as its parent (``X-Dynamo-Parent-Session-ID``, docs/scale-out.md),
and the settings of the parent's run (so its reasoning effort) under the children's ``settings``.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import re
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .._client import Client
from .._exceptions import ToolError
from ..agents import (
    Agent,
    ApprovalHook,
    Budgets,
    Defer,
    Deny,
    FileStore,
    FinalEvent,
    ModelSettings,
    PendingCall,
    RunHooks,
    RunResult,
    SessionWriter,
    TurnEndEvent,
)
from ..tools import FunctionTool, Tool, ToolContext, ToolResult, failures
from ..types import Routing
from ._store import resolved

__all__ = ["SUBAGENT_INSTRUCTIONS", "SubAgents"]

_MAX_CHILD_NUMBERS = 10_000  # names tried for a child's session file before giving up

SUBAGENT_INSTRUCTIONS = (
    "You are a sub-agent. Another agent gave you one self-contained task. Do it with your tools, "
    "then answer with what that agent needs: the result, concrete facts (paths, names, numbers) and "
    "anything left undone. Your answer is all it will see."
)
"""System prompt of a child agent (the parent's task prompt follows as the user message)."""



CHILD_DEFERRED = ("the approval hook defers this call to a person, and a sub-agent cannot stop to wait for one: "
                  "it was not run; say in your answer what should run, so the parent agent asks")
"""The reason a sub-agent's call is denied when the parent's hook defers it."""


def child_approval(hook: Any) -> ApprovalHook | None:
    """The approval of a sub-agent's calls: the parent run's hook (:attr:`ToolContext.approval`),
    so that a hook deferring a tool governs it in sub-agents too (issue 40: the docs' hook,
    "defer bash", was bypassed through ``task``); a call it defers is denied with
    :data:`CHILD_DEFERRED` (a child runs inside one tool call and cannot wait). None: no hook."""
    if hook is None:
        return None

    async def approve(call: PendingCall) -> Any:
        decision = hook(call)
        if inspect.isawaitable(decision):
            decision = await decision
        return Deny(CHILD_DEFERRED) if isinstance(decision, Defer) else decision

    return approve

class SubAgents(RunHooks):
    """The ``task`` tool and the bookkeeping of its children.

    Args:
        client: the parent's client (shared: one engine).
        tools: the tools children may use (``task`` itself is never among them).
        settings: children's model settings, over the parent run's (default: the parent run's:
            one reasoning effort for the parent and its children).
        budgets: each child's budgets (default 30 turns).
        instructions: children's system prompt.
        per_child: applied to each child's tools (a fresh read-before-edit tracker: what one
            child read does not let another edit it).
        tokens: the tokens all children of a run may spend together (the parent's token budget,
            so delegating cannot escape it); each child's token budget is at most what is left,
            reserved while it runs; past it ``task`` is an error result. None: no shared cap.

    Attributes:
        children: ``(tool call id, child session path or None, RunResult or the exception)``
            of every child of the current run, in completion order.
    """

    def __init__(self, client: Client, tools: Sequence[Tool], *, settings: ModelSettings | None = None,
                 budgets: Budgets | None = None, instructions: str = SUBAGENT_INSTRUCTIONS,
                 tokens: int | None = None, per_child: Callable[[list[Tool]], list[Tool]] | None = None) -> None:
        self.per_child = per_child
        self.client = client
        self.child_tools = {t.name: t for t in tools if t.name != "task"}
        self.settings = settings
        self.budgets = budgets or Budgets(turns=30)
        self.instructions = instructions
        self.tokens = tokens
        self._tokens_left = tokens
        self.children: list[tuple[str, str | None, Any]] = []
        self._session: SessionWriter | None = None
        self._parent: Path | None = None  # the session's path, its folders resolved at the run's start
        self._started = 0
        self._usd_reserved = 0.0  # USD budget shares of the children running now

    async def run_start(self, session: SessionWriter | None) -> None:
        self._session = session
        if session is not None:  # a symlink on the way that a command re-points later is not followed then
            self._parent = resolved(session.path)
        self.children = []
        self._started = 0
        self._tokens_left = self.tokens
        self._usd_reserved = 0.0

    def tool(self) -> Tool:
        """The ``task`` tool."""
        names = ", ".join(sorted(self.child_tools)) or "none"

        async def task(ctx: ToolContext, description: str, prompt: str, tools: list[str] | None = None) -> ToolResult:
            """Delegate a self-contained task to a sub-agent with its own fresh context.

            The sub-agent sees only the prompt (not this conversation) and works with its tools until
            it answers; its answer comes back as this tool's result, followed by a line
            "[sub-agent: N turns, P prompt + C completion tokens]". Several task calls in one turn
            run in parallel. Use it for independent searches or changes whose details you do not
            need to keep in your own context.

            Args:
                description: a short (3-8 word) name for the task.
                prompt: the complete task: everything the sub-agent needs to know and what to report.
                tools: names of the tools the sub-agent may use (default: all of them).
            """
            return await self._run_child(ctx, description, prompt, tools)

        t = FunctionTool(task)
        t.description += f" Tools available to sub-agents: {names}."
        return t

    def _new_child_session(self, call_id: str) -> str:
        """A new, empty file next to the parent's session for a child's session, made here
        (``O_EXCL``: never one that exists; in the session's folder as resolved at the run's start,
        never where a symlink re-pointed since leads): ``<parent>.task-<n>-<call id>.jsonl``, ``n`` the
        next number whose file does not exist yet, so a session a run left there (an earlier run
        of the same session, a resumed one) is never continued by another child (issue 40).

        Raises:
            ToolError: no such file can be made (the folder is not writable, or full of them).
        """
        assert self._parent is not None
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", call_id)[:64]
        parent = self._parent
        for _ in range(_MAX_CHILD_NUMBERS):
            suffix = f"{self._started}-{safe}" if safe else str(self._started)
            path = parent.with_name(f"{parent.stem}.task-{suffix}.jsonl")
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644))
            except FileExistsError:  # a leftover (or a link): the next number
                self._started += 1
                continue
            except OSError as e:
                raise ToolError(f"cannot make the sub-agent's session file {path}: {e.strerror or e}") from e
            return str(path)
        raise ToolError(f"no free sub-agent session name next to {parent} after {_MAX_CHILD_NUMBERS} tries")

    async def _run_child(self, ctx: ToolContext, description: str, prompt: str,
                         tools: list[str] | None) -> ToolResult:
        chosen = list(self.child_tools) if tools is None else tools
        unknown = [n for n in chosen if n not in self.child_tools]
        if unknown:
            raise ToolError(f"unknown tool(s) for a sub-agent: {', '.join(unknown)}; available: "
                            f"{', '.join(sorted(self.child_tools)) or 'none'}")
        budgets, share = self.budgets, 0
        usd = 0.0
        if ctx.usd_left is not None:  # reserve the child's share of what is left of the run's USD budget
            left = ctx.usd_left - self._usd_reserved
            if left <= 0:
                raise ToolError("this run's cost budget (Budgets(usd=...)) is used up; do the rest yourself")
            usd = min(left, budgets.usd if budgets.usd is not None else left)
            budgets = dataclasses.replace(budgets, usd=usd)
        if self._tokens_left is not None:  # reserve the child's share of the run's tokens
            if self._tokens_left <= 0:
                raise ToolError(f"the sub-agents of this run have used up the run's token budget ({self.tokens} "
                                "tokens); do the rest yourself")
            share = min(self._tokens_left, budgets.tokens if budgets.tokens is not None else self._tokens_left)
            self._tokens_left -= share
            budgets = dataclasses.replace(budgets, tokens=share)
        child_tools = [self.child_tools[n] for n in chosen]
        if self.per_child is not None:
            child_tools = self.per_child(child_tools)
        settings = ctx.settings.merged(self.settings) if ctx.settings is not None else self.settings
        parent_key = ctx.routing.key if ctx.routing is not None else None
        child: Agent[str] = Agent(instructions=self.instructions, tools=child_tools, client=self.client,
                                  settings=settings, budgets=budgets, approval=child_approval(ctx.approval),
                                  pricing=ctx.pricing if ctx.charge is not None else "auto",
                                  routing_key=Routing(uuid.uuid4().hex, parent_key))
        path: str | None = None
        self._started += 1
        if self._session is not None and isinstance(self._session.store, FileStore):  # a file beside a file
            # (a session in a store of the user's has no folder: its children go unrecorded);
            # numbered: servers may reuse call ids across turns
            path = self._new_child_session(ctx.tool_call_id)
            self._session.record("child_session", {"tool_call_id": ctx.tool_call_id, "path": path,
                                                   "description": description})
        self._usd_reserved += usd
        result: RunResult[str] | None = None
        spent = 0.0  # the cost of the child's finished turns, should it fail before its result
        try:
            async for event in child.run_stream(prompt, session=path):
                if isinstance(event, TurnEndEvent):
                    spent += event.cost or 0.0
                elif isinstance(event, FinalEvent):
                    result = event.result
        except Exception as e:
            self.children.append((ctx.tool_call_id, path, e))
            return ToolResult.from_failure(failures.subagent_failed(e), ctx.failure_text)
        finally:
            self._usd_reserved -= usd
            cost = result.cost if result is not None and result.cost is not None else spent
            if ctx.charge is not None and cost:
                ctx.charge(cost)  # the parent's cost, which its budget counts
        assert result is not None
        self.children.append((ctx.tool_call_id, path, result))
        u = result.usage
        if self._tokens_left is not None:  # give back what it did not spend
            self._tokens_left += max(share - u.total_tokens, 0)
        note = (f"[sub-agent: {result.turns} turns, {u.prompt_tokens} prompt + {u.completion_tokens} "
                "completion tokens]")
        if result.stop_reason != "completed":
            note = f"[the sub-agent stopped early: {result.stop_reason}]\n{note}"
        return ToolResult(content=f"{result.output or ''}\n{note}")
