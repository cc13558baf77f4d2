"""The state of one :class:`~kimik3.Agent` run (:class:`_Run`): the live history, usage, clock,
session, prompt cache, the tools of the moment, and what went wrong on the way."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from .. import _tracing
from ..formats.k3 import PromptCache
from ..tools import Tool
from ..types import AssistantMessage, ChatCompletion, Message, SystemMessage, ToolSpec, Usage, message_text
from ._checks import UnrunCall
from ._session import SessionWriter

__all__ = ["_Run"]


class _Run:
    """The state of one run: the live message list, usage, clock, session and prompt cache.

    ``context_tokens`` is THE count of tokens in the context (one definition): the last model
    call's prompt + completion tokens as the engine counted them, plus :meth:`message_tokens` of
    every message added since (after a compaction: of every message).
    """

    def __init__(self, messages: list[Message], session: SessionWriter | None, deps: Any,
                 count: Callable[[str], int]) -> None:
        self.messages = messages
        self.session = session
        self.deps = deps
        self.count = count
        self.usage = Usage()
        self.turns = 0
        self.started = time.monotonic()
        self.cache = PromptCache()
        self.context_tokens = 0
        self.output_retry_used = False  # the one retry of an answer that failed output_type
        self.tools: dict[str, Tool] = {}  # what the model may call now (own tools + toolsets')
        self.specs: list[ToolSpec] = []  # the prompt head's declaration, fixed for the run
        self.span = _tracing.Span()
        self.call_errors: dict[str, str] = {}  # call id -> why its arguments cannot be used
        self.compaction_stopped = False  # compaction cannot bring the context under its threshold
        self.unavailable: list[str] = []  # declared by an earlier run of the conversation, gone now
        self.unusable_turns = 0  # turns in a row with neither an answer nor a call that ran
        self.cut_replies = 0  # replies cut by max_tokens in a row (each answered with "continue")
        self.cut_text: Any = None  # the last cut reply's text (the output when the window ends the run)
        self.failed_calls = self.cut_calls = self.dropped_calls = 0
        self.issues: list[str] = []  # RunResult.issues

    def issue(self, text: str) -> None:
        """Record a problem of this turn (see :attr:`RunResult.issues`)."""
        self.issues.append(f"turn {self.turns}: {text}")

    def unrun(self, calls: list[UnrunCall]) -> list[UnrunCall]:
        """Record calls of this turn that did not run (issues and counts); returns ``calls``."""
        for c in calls:
            self.issue(str(c))
        self.cut_calls += sum(c.kind == "cut" for c in calls)
        self.dropped_calls += sum(c.kind in ("dropped", "failed") for c in calls)
        return calls

    def add(self, message: Message, *, counted: bool = False, usage: Usage | None = None) -> None:
        self.messages.append(message)
        if not counted:
            self.context_tokens += self.message_tokens(message)
        if self.session is not None:
            self.session.message(message, usage)

    def model_turn(self, completion: ChatCompletion, message: AssistantMessage) -> None:
        """Record a model call: its usage, and its message (whose tokens the call counted)."""
        self.usage = self.usage + completion.usage
        self.turns += 1
        self.context_tokens = completion.usage.prompt_tokens + completion.usage.completion_tokens
        self.add(message, counted=True, usage=completion.usage)

    def message_tokens(self, message: Message) -> int:
        """Tokens a message adds to the context: its text, reasoning (once), tool calls and the
        tools a dynamic declaration declares."""
        n = self.count(message_text(message.content)) if message.content else 0
        if isinstance(message, SystemMessage) and message.tools:
            n += self.count(json.dumps([t.model_dump(mode="json", exclude_none=True) for t in message.tools]))
        if isinstance(message, AssistantMessage):
            if message.reasoning_content:
                n += self.count(message.reasoning_content)
            for call in message.tool_calls or ():
                n += self.count(call.function.name) + self.count(call.function.arguments)
        return n
