"""The state of one :class:`~kimik3.Agent` run (:class:`_Run`): the live history, usage, clock,
session, prompt cache, the tools of the moment, and what went wrong on the way."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable
from typing import Any, Literal

from .. import _tracing
from .._exceptions import UserError
from .._pricing import Pricing, missing_prices, pricing_for
from ..formats.k3 import PromptCache
from ..tools import InputReplay, Tool, ToolContext
from ..tools.failures import FailureText
from ..types import (
    AGENTIC_SETTINGS,
    AssistantMessage,
    ChatCompletion,
    Message,
    ModelSettings,
    RequestChecker,
    Routing,
    ToolSpec,
    Usage,
)
from ._checks import UnrunCall
from ._dynamic import Declarations
from ._guardrails import Guards
from ._loops import Loop, LoopBreaker
from ._session import SessionWriter
from ._tokens import RunTokens
from ._types import DEFAULT_CONTEXT_WINDOW, Allow, Budgets, Deny, Edit, PendingCall, PendingInput, StopReason

__all__ = ["_Run"]

log = logging.getLogger("kimik3.agent")

_UNCOUNTED = 64
"""Model messages :attr:`_Run.added_tokens` leaves uncounted at most (each holds its message)."""


class _Run:
    """The state of one run: the live message list, usage, clock, session and prompt cache.

    ``context_tokens`` is THE count of tokens in the context (one definition): the last model
    call's prompt + completion tokens as the engine counted them, plus :meth:`message_tokens` of
    every message added since (after a compaction: of every message).
    """

    def __init__(self, messages: list[Message], session: SessionWriter | None, deps: Any,
                 count: RunTokens, settings: ModelSettings = AGENTIC_SETTINGS, budgets: Budgets | None = None) -> None:
        self.messages = messages
        self.settings = settings  # merged: card defaults < client < agent < run
        self.routing: Routing | None = None  # the conversation's routing key (agents/_routing.py)
        self.session = session
        self.deps = deps
        self.count = count
        self.usage = Usage()
        self.turns = 0
        self.started = time.monotonic()
        self.cache = PromptCache()
        self.checker = RequestChecker()  # the run's requests: each message checked once
        self.declarations = Declarations()  # the history's dynamic declarations, each message read once
        self.context_tokens = 0
        self.output_retry_used = False  # the one retry of an answer that failed output_type
        self.tools: dict[str, Tool] = {}  # what the model may call now (own tools + toolsets')
        self.specs: list[ToolSpec] = []  # the prompt head's declaration, fixed for the run
        self.span = _tracing.Span()
        self.call_errors: dict[str, str] = {}  # call id -> why its arguments cannot be used
        self.compaction_stopped = False  # compaction cannot bring the context under its threshold
        self.window_limit: int | None = None  # the window a server's overflow error stated (agents/_overflow.py)
        self.served_window: int | None = None  # the window the engine states (Engine.context_window)
        self._added_tokens = 0  # added_tokens, less the messages still in _uncounted
        self._uncounted: list[Message] = []  # model messages added; counted when added_tokens is read
        self.summary_failed_at: int | None = None  # added_tokens when the last summary failed
        self.summary_failures = 0  # summaries that failed in a row (their back-off doubles)
        self.summaries = self.cleared_results = self.dropped_messages = 0  # compaction's work (RunResult)
        self.overflows = 0  # requests refused as too big in a row, each recovered from (agents/_overflow.py)
        self.unavailable: list[str] = []  # declared by an earlier run of the conversation, gone now
        self.unusable_turns = 0  # turns in a row with neither an answer nor a call that ran
        self.cut_replies = 0  # replies cut by max_tokens in a row (each answered with "continue")
        self.cut_text: Any = None  # the cut replies' text (the output when the window ends the run)
        self.cut_answer = ""  # the text of the cut replies in a row, joined (agents/_cut.py)
        self.failed_calls = self.cut_calls = self.dropped_calls = 0
        self.issues: list[str] = []  # RunResult.issues
        self.cost: float | None = None  # USD of the run's model calls (RunResult.cost)
        # the prices of this run: "auto" until the first completion names its model
        self.pricing: Pricing | Literal["auto"] | None = None
        self.deferred: dict[str, PendingCall] = {}  # calls awaiting a person's decision (RunResult.pending_approvals)
        self.decisions: dict[str, Allow | Deny | Edit] = {}  # recorded decisions on the calls a resume runs
        self.waiting: dict[str, PendingInput] = {}  # calls whose MCP questions await answers (RunResult.pending_inputs)
        self.replays: dict[str, tuple[PendingInput, InputReplay]] = {}  # answered calls a resume replays
        self.guards = Guards()  # the run's guardrails and the trip that ends it (agents/_guardrails.py)
        self.loops = LoopBreaker(budgets or Budgets())  # repeated calls (agents/_loops.py)
        self.loop: Loop | None = None  # the loop that ends the run (stop_reason "loop_detected")
        self.task: Message | None = None  # the user message that started this run: compaction keeps it

    def start(self, pricing: Pricing | Literal["auto"] | None, model: str, settings: Any) -> None:
        """Fix the run's prices (``"auto"``: by the engine's model id, or the first completion's
        when the engine does not know it yet) and record what its requests carry (``run_start``:
        the head's tool declarations, the model, the settings) in the session."""
        self.pricing = (pricing_for(model) if model else "auto") if pricing == "auto" else pricing
        if self.session is not None:
            settings = json.loads(json.dumps(dataclasses.asdict(settings), ensure_ascii=False, default=repr))
            tools = [t.model_dump(mode="json", exclude_none=True) for t in self.specs]
            self.session.record("run_start", {"tools": tools, "model": model, "settings": settings})

    def exhausted(self, budgets: Budgets, model: str) -> StopReason | None:
        """The budget that ran out (None: none did).

        Raises:
            UserError: ``Budgets(usd=...)`` without prices for ``model``.
        """
        b = budgets
        if self.turns >= b.turns:
            return "turn_budget"
        if b.tokens is not None and self.usage.total_tokens >= b.tokens:
            return "token_budget"
        if b.seconds is not None and time.monotonic() - self.started >= b.seconds:
            return "time_budget"
        if b.usd is not None and (self.pricing is None or self.pricing == "auto"):  # "auto": no model named yet
            raise UserError(f"Budgets(usd=...) needs prices: {missing_prices(model)}; give them with "
                            "Agent(pricing=kimik3.Pricing(...)) (on the command line: --price IN,CACHED,OUT)")
        if b.usd is not None and self.cost is not None and self.cost >= b.usd:
            return "cost_budget"
        return None

    def finish(self, result: Any) -> None:
        """The run ended with ``result`` (a :class:`RunResult`): its span gets compaction's counts
        (summaries, cleared results, dropped messages; the caller ends it with the stop reason and
        usage), and the session a ``run_end`` record (stop reason, the last issues)."""
        self.span.set(kimik3__context__summaries=self.summaries, kimik3__context__cleared_results=self.cleared_results,
                      kimik3__context__dropped_messages=self.dropped_messages)
        if self.session is not None:
            self.session.record("run_end", {"stop_reason": result.stop_reason, "issues": result.issues[-20:]})

    def window(self, configured: int | None) -> int:
        """The context window compaction works against: ``configured`` (``ContextPolicy``), else
        the engine's (:attr:`served_window`), else :data:`DEFAULT_CONTEXT_WINDOW`; the smaller
        window a server's overflow error stated during the run wins."""
        base = configured if configured is not None else self.served_window or DEFAULT_CONTEXT_WINDOW
        return base if self.window_limit is None else min(base, self.window_limit)

    def count_context(self) -> None:
        """Count the context from scratch: the prompt's head (tool declarations, the template:
        :meth:`RunTokens.head`) and every message, before the run's first request (a resumed
        history is counted as it is sent, tools included: issue 41)."""
        self.context_tokens = self.count.head(self.specs) + sum(map(self.message_tokens, self.messages))

    def deadline(self, budgets: Budgets) -> float | None:
        """Seconds left of the time budget (None: no time budget)."""
        if budgets.seconds is None:
            return None
        return max(0.0, budgets.seconds - (time.monotonic() - self.started))

    def issue(self, text: str) -> None:
        """Record a problem of this turn (see :attr:`RunResult.issues`)."""
        self.issues.append(f"turn {self.turns}: {text}")

    def unrun(self, calls: list[UnrunCall]) -> list[UnrunCall]:
        """Record calls of this turn that did not run (issues and counts); returns ``calls``."""
        for c in calls:
            self.issue(str(c))
        self.cut_calls += sum(c.kind == "cut" for c in calls)
        self.dropped_calls += sum(c.kind in ("dropped", "failed", "misplaced") for c in calls)
        return calls

    @property
    def added_tokens(self) -> int:
        """Tokens of every message added to the history (:meth:`message_tokens`; compaction's
        summary back-off reads it). A message whose tokens the model call counted already
        (``add(counted=True)``) is counted here only when this is read (most runs never read it:
        issue 44), or once :data:`_UNCOUNTED` of them wait."""
        if self._uncounted:
            self._added_tokens += sum(map(self.message_tokens, self._uncounted))
            self._uncounted.clear()
        return self._added_tokens

    def add(self, message: Message, *, counted: bool = False, completion: ChatCompletion | None = None,
            cost: float | None = None) -> None:
        """Append ``message`` to the history and the session; its tokens join the context count
        unless ``counted`` (a model call's own message: its usage counted it)."""
        self.messages.append(message)
        self.count.keep(self.messages)
        if counted:
            self._uncounted.append(message)
            if len(self._uncounted) >= _UNCOUNTED:  # bounded: the messages are not held past compaction
                _ = self.added_tokens
        else:
            tokens = self.message_tokens(message)
            self._added_tokens += tokens
            self.context_tokens += tokens
        if self.session is not None:
            if completion is None:
                self.session.message(message)
            else:
                self.session.message(message, completion.usage, cost=cost,
                                     finish_reason=completion.recorded_finish_reason)

    def charge(self, completion: ChatCompletion) -> float | None:
        """Add a model call's usage to the run's, and its cost at the run's prices (resolved from
        the completion's model id while they are "auto"); returns the call's cost (None: no prices)."""
        self.usage = self.usage + completion.usage
        if self.pricing == "auto":
            self.pricing = pricing_for(completion.model)
        if self.pricing is None:
            return None
        cost = self.pricing.cost(completion.usage)
        self.cost = (self.cost or 0.0) + cost
        return cost

    def spend(self, usd: float) -> None:
        """Add USD a tool spent on model calls of its own (a sub-agent's run) to the run's cost,
        which its ``Budgets(usd=...)`` counts (:attr:`~kimik3.tools.ToolContext.charge`)."""
        if usd > 0:
            self.cost = (self.cost or 0.0) + usd

    def usd_left(self, budgets: Budgets) -> float | None:
        """What is left of the run's USD budget (None: it has none)."""
        return None if budgets.usd is None else max(0.0, budgets.usd - (self.cost or 0.0))

    def tool_context(self, call_id: str, add_tools: Callable[..., None], failure_text: FailureText,
                     budgets: Budgets, approval: Callable[..., Any] | None = None) -> ToolContext:
        """The :class:`~kimik3.tools.ToolContext` of call ``call_id``: the run's deps, prices, USD
        budget left and :meth:`spend` (a sub-agent's cost counts as the run's), and the agent's
        approval hook (a sub-agent's calls ask it too)."""
        return ToolContext(tool_call_id=call_id, deps=self.deps, add_tools=add_tools, failure_text=failure_text,
                           pricing=self.pricing, usd_left=self.usd_left(budgets), charge=self.spend,
                           routing=self.routing, settings=self.settings, approval=approval)

    def counted(self, completion: ChatCompletion, message: AssistantMessage) -> ChatCompletion:
        """``completion`` with usage a server did not report (``Usage.unknown``: none, or zeros)
        counted here (:meth:`message_tokens` of the prompt's messages and tools, and of the
        answer), so token budgets, cost and compaction never see 0 for a call that used tokens; it
        stays marked unknown."""
        usage = completion.usage
        if not usage.unknown:
            return completion
        prompt = max(usage.prompt_tokens, sum(map(self.message_tokens, self.messages))
                     + self.count.text(json.dumps([s.model_dump(mode="json", exclude_none=True) for s in self.specs])))
        answer = max(usage.completion_tokens, self.message_tokens(message))
        usage = usage.model_copy(update={"prompt_tokens": prompt, "completion_tokens": answer,
                                         "total_tokens": prompt + answer})
        if not self.usage.unknown:
            log.warning("kimik3: the server reported no token usage; kimik3 counts it itself for budgets "
                        "and compaction (RunResult.usage.unknown)")
        return completion.model_copy(update={"usage": usage})

    def model_turn(self, completion: ChatCompletion, message: AssistantMessage) -> float | None:
        """Record a model call: its usage (:meth:`counted`) and cost, and its message (whose
        tokens the call counted) with them; returns the call's cost."""
        completion = self.counted(completion, message)
        cost = self.charge(completion)
        self.turns += 1
        self.overflows = 0
        self.context_tokens = completion.usage.prompt_tokens + completion.usage.completion_tokens
        self.add(message, counted=True, completion=completion, cost=cost)
        return cost

    def message_tokens(self, message: Message) -> int:
        """Tokens a message adds to the context, as K3 encodes it: its framing, text, reasoning,
        tool calls, the tools a dynamic declaration declares, its images' blocks
        (:func:`~kimik3.formats.k3.message_tokens`; counted once per message)."""
        return self.count.message(message)
