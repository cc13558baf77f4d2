"""``kimik3.Agent``: the tool loop. Readable in one sitting on purpose.

One run::

    messages = [system instructions, user task]
    loop:
        budget out?  -> one tool-free summary turn, stop
        context near the window (or a request refused as too big)? -> compact older turns (model-written summary;
            after a failed one, without the model: old results cleared, oldest turns dropped; nothing
            left to shrink: stop, "context_overflow")
        tools added since the last call? -> declared by a message appended to the history
        one turn (:meth:`Agent._turn`): a model call (streamed; the assistant message kept
        exactly as received), then one of three named outcomes:
            ToolsRan          tool calls ran concurrently, one result message per call id (a call
                              repeating a loop with the same results is told, then not run, then
                              the run stops, "loop_detected": agents/_loops.py)
            ContinueWith(p)   cut by max_tokens, calls that did not run, a turn with neither an
                              answer nor a call, an answer that failed output_type: ask again
                              (MAX_CONTINUES cut replies in a row, two when the last has no
                              answer text, or no room left in the context window to continue
                              one: stop, "no_progress"; :mod:`._cut`)
            Final(output)     the answer (validated against output_type), or a second unusable
                              turn in a row (stop_reason "unusable_output"): stop

Every message is appended to the JSONL session file as it happens. Guardrails (``_guardrails``)
check the task, each tool call and result, and the answer.

Longer than the project's ~600-line guide on purpose (issue 42, point 5): what is here is the loop
and the calls it makes in order (run, turn, tools, result); each concern it calls is a module of
its own (loops, clearing, compaction, overflow, cut replies, approvals, guardrails, routing), and
splitting the loop itself would scatter the one page a reader follows.
"""

from __future__ import annotations

import logging
import math
import os
import sys
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, nullcontext
from dataclasses import replace
from typing import Any, Generic, Literal, cast

import anyio

from .. import _tracing
from .._checks import check_instance
from .._client import Client
from .._exceptions import EngineError, UserError
from .._pricing import Pricing
from ..engines import NO_COMPLETION, Engine, ModelCall
from ..formats.k3 import K3Tokenizer, ToolCallDone
from ..tools import Tool, ToolResult, Toolset, failures, stray_cancellation, unwrap_group
from ..tools.failures import FailureText, default_failure_text
from ..types import (
    AGENTIC_SETTINGS,
    AssistantMessage,
    ChatCompletion,
    ChatRequest,
    ImagePart,
    Message,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolChoice,
    UserMessage,
)
from . import _arguments
from ._approval import edit_note, pending_call
from ._arguments import check_agent_arguments, output_adapter, run_messages, task_message, validate_output
from ._checks import (
    EMPTY_TURN,
    answer_text,
    check_images,
    cut_by,
    failed_call_errors,
    failed_call_issue,
    unrun_calls,
    unrun_note,
)
from ._compaction import head_problem
from ._cut import cut_outcome, whole_answer
from ._deferred import Approvals, decide, finished, prepare_resume, replayed, settle
from ._dynamic import Toolbox, dynamic_names, restore_declared, undeclared
from ._guardrails import Guardrail, Guards, merge_guardrails
from ._history import nothing_to_do, prune_images, result_message
from ._hooks import AllHooks, RunHooks
from ._inputs import input_waiter
from ._overflow import OVERFLOW, before_turn, overflowed, served_window
from ._prompts import SUMMARY_INSTRUCTIONS
from ._routing import RoutingKey, check_routing_key, conversation_routing
from ._run import _Run
from ._session import SessionWriter, Source
from ._tokens import RunTokens
from ._types import (
    AgentEvent,
    ApprovalHook,
    Budgets,
    ContextPolicy,
    ContinueWith,
    Deny,
    Final,
    FinalEvent,
    ModelSettings,
    OutputT,
    RunResult,
    StopReason,
    ToolCallApprovedEvent,
    ToolResultEvent,
    ToolsRan,
    TurnEndEvent,
    TurnOutcome,
)

if sys.version_info < (3, 11):  # pragma: no cover - a backport anyio depends on there
    from exceptiongroup import BaseExceptionGroup

__all__ = ["Agent"]

log = logging.getLogger("kimik3.agent")

TOOL_GRACE = 0.5  # s past the time budget before the agent ends what tools' own limits did not

INLINE_ONE_CALL = sys.version_info >= (3, 11)
"""A turn's only call to run, of a tool whose code runs only in a worker thread
(:attr:`Tool.in_thread <kimik3.Tool>`: a sync function), runs in the run's own task (no task group:
issue 44). Python 3.11's cancel count tells a ``CancelledError`` the function raised from the run's
cancellation there (:func:`~kimik3.tools._limits.stray_cancellation`); on 3.10 only a task group's
scope can. Code on the event loop (an async tool; an approval hook, a tool guardrail or a
``tool_result`` hook of the user's around the call) keeps a task of its own: it could cancel the task
it runs in (``current_task().cancel()``), which must fail that call alone, not the run."""


class Agent(Generic[OutputT]):
    """A K3 agent: instructions, typed tools and a loop that runs them.

    ``await agent.run(task)`` returns a :class:`RunResult`; ``agent.run_stream(task)`` yields typed
    events (reasoning and text deltas, tool call started / done with full arguments, tool results,
    turn ends, compactions) and a final :class:`FinalEvent`.

    Guarantees (each is tested):
        - Every past assistant message is replayed with its reasoning and tool calls exactly as
          received (K3 requires it); messages the agent writes itself carry empty reasoning.
        - The parallel calls of one turn run concurrently in an anyio task group (a turn's only
          call of a sync tool runs in the run's own task: :data:`INLINE_ONE_CALL`); a failing tool
          gives its error result, the others still finish; results go into the history in call
          order. Cancelling the run cancels and awaits every tool and still leaves one result
          message for every call id.
        - Bad model output never crashes the run nor poisons the history: a call that never
          completed (cut by ``max_tokens``, never closed, written outside the tools section) never
          runs and is named to the model in a note so it can retry; a call that cannot run (a
          value that cannot be read unambiguously, undecodable arguments), an unknown tool or
          invalid arguments become a tool-error result the model sees. A tool's own ``CancelledError`` is its error
          result; only the run's cancellation cancels tools.
        - A turn that failed is never reported as success: a turn with neither an answer nor a
          call that ran is asked again once, then the run stops with ``unusable_output``; an
          empty or cut compaction summary is never applied; :attr:`RunResult.degraded` and
          :attr:`RunResult.issues` say what went wrong on the way.
        - A budget that runs out ends the run gracefully: one tool-free summary turn, then a
          result whose ``stop_reason`` says which budget. Tools get the rest of the time budget
          as their time limit (a sync tool blocked in a system call is abandoned).
        - Tools that appear during a run are declared in the history (:meth:`add_tools`), never
          in the prompt's head: earlier prompts stay prefixes of later ones.
        - Runs, model calls and tool calls are OpenTelemetry spans (:mod:`kimik3._tracing`).

    Args:
        instructions: the system prompt.
        tools: :class:`~kimik3.Tool` s, plain typed functions (wrapped with :meth:`Tool.from_function`),
            or :class:`~kimik3.tools.Toolset` s such as :class:`kimik3.tools.mcp.MCPServerStdio` (an unopened
            one is opened for each run; one that is a :class:`RunHooks` too, as ``Skills``, gets its calls).
        engine: where K3 runs (wrapped in a :class:`~kimik3.Client` with its retries); or
        client: a ready client.
        settings: the agent's :class:`~kimik3.ModelSettings`, merged over the client's and K3's
            card defaults for agentic work (temperature 1.0, top_p 1.0, effort max); a run's
            ``settings=`` merges over them (model < agent < run).
        max_turns: shortcut for ``budgets.turns``.
        budgets: :class:`Budgets` (turns, tokens, wall time).
        context: :class:`ContextPolicy` (result cap, compaction, screenshot pruning).
        output_type: a pydantic model the final answer must match (sent as K3's json_schema
            response format, validated, retried once with the error shown to the model).
        approval: called before each tool call: :class:`Allow`, :class:`Deny` (reason shown to
            the model), :class:`Edit` (run with other arguments) or :class:`Defer` (a person
            decides later, in any process: :meth:`resume` with ``approvals=``).
        tokenizer: a K3 tokenizer or model directory for exact token accounting; default: the
            engine's, else K3's real vocabulary shipped with kimik3
            (:func:`~kimik3.formats.k3.default_tokenizer`): exact counts against any K3 endpoint.
        deps: handed to tools that take a :class:`~kimik3.tools.ToolContext`.
        name: the agent's name (``gen_ai.agent.name`` on its spans).
        hooks: :class:`~kimik3.agents.RunHooks` at the run's seams (:mod:`kimik3.harness`).
        pricing: USD prices per 1M tokens for :attr:`RunResult.cost` and ``Budgets(usd=...)``:
            ``"auto"`` (Moonshot's hosted prices by the model id, :mod:`kimik3._pricing`; none
            for other ids), a :class:`~kimik3.Pricing`, or None (no cost counted).
        failure_text: words every failure the model reads as a tool's error result (an unknown
            tool, a denial, a tool that raised or overran, ...): a function of a
            :class:`~kimik3.tools.ToolFailure`, as openai-agents' ``failure_error_function``
            (default ``"Error: <message>"``; every text is in :mod:`kimik3.tools._failures`).
        routing_key: what each request of a conversation carries for a router (docs/scale-out.md):
            ``"auto"`` (the session's own; forks, sub-agents get theirs), a key, a ``Routing``, None.
        guardrails: :class:`~kimik3.agents.Guardrail` s checking every run's input, final answer
            and tool calls (``@input_guardrail``, ...; docs/guardrails.md); a run's
            ``guardrails=`` merge over them by name.

    Raises:
        UserError: neither or both of ``engine`` and ``client``; duplicate tool names (for a
            toolset's tools: when a run starts or its list changes); ``Budgets(usd=...)`` without
            prices (``pricing=None`` here; with "auto", when a run's model has no price).
    """

    def __init__(
        self,
        *,
        instructions: str | None = None,
        tools: Sequence[Tool | Toolset | Callable[..., Any]] = (),
        engine: Engine | None = None,
        client: Client | None = None,
        settings: ModelSettings | None = None,
        max_turns: int | None = None,
        budgets: Budgets | None = None,
        context: ContextPolicy | None = None,
        output_type: type[OutputT] | None = None,
        approval: ApprovalHook | None = None,
        tokenizer: K3Tokenizer | str | os.PathLike[str] | None = None,
        deps: Any = None,
        name: str | None = None,
        hooks: Sequence[RunHooks] = (),
        pricing: Pricing | Literal["auto"] | None = "auto",
        failure_text: FailureText | None = None,
        routing_key: RoutingKey = "auto",
        guardrails: Sequence[Guardrail] = (),
    ) -> None:
        check_agent_arguments(engine=engine, client=client, instructions=instructions, tools=tools, settings=settings,
                              budgets=budgets, context=context, approval=approval, tokenizer=tokenizer, pricing=pricing,
                              failure_text=failure_text)
        self.client = client if client is not None else Client(cast(Engine, engine))
        self.instructions = instructions
        self.name = name
        self._toolbox = Toolbox(tools)
        self.tools, self.toolsets = self._toolbox.tools, self._toolbox.toolsets
        self.settings = settings or ModelSettings()
        budgets = budgets or Budgets()
        if max_turns is not None:
            budgets = replace(budgets, turns=max_turns)
        self.budgets = budgets
        self.pricing = pricing
        self.context = context or ContextPolicy()
        self.output_type = output_type
        self._output_adapter = output_adapter(output_type)
        # Fixed for the agent's life: built once, not on every model call.
        self._specs = [t.spec for t in self.tools.values()]
        self._response_format = _arguments.response_format_for(self._output_adapter, output_type)
        self.approval = approval
        self.deps = deps
        self.hooks = AllHooks([*hooks, *self._toolbox.hooks(hooks)])
        self.failure_text: FailureText = failure_text or default_failure_text
        self.routing_key = check_routing_key(routing_key)
        self.guardrails = merge_guardrails(guardrails, None)
        self._tokenizer = (tokenizer if isinstance(tokenizer, K3Tokenizer) or tokenizer is None
                           else K3Tokenizer.from_pretrained(tokenizer))

    # -- public ------------------------------------------------------------------------------

    def add_tools(self, *tools: Tool | Callable[..., Any]) -> None:
        """Give the agent more tools, between runs or during one (``ToolContext.add_tools``).

        Before the model's next turn they are declared with K3's dynamic tool declaration, a
        message ``{"role": "system", "content": "", "tools": [...]}`` appended to the history
        (as are a toolset's new tools); the prompt's head (the tools the run started with) stays,
        so the engine's prefix cache holds. The same tool object again does nothing.

        Raises:
            UserError: another tool already has the name.
        """
        self._toolbox.add(*tools)

    async def run(
        self,
        task: str | Sequence[TextPart | ImagePart] | None = None,
        *,
        messages: list[Message] | None = None,
        session: Source | None = None,
        settings: ModelSettings | None = None,
        guardrails: Sequence[Guardrail] | None = None,
    ) -> RunResult[OutputT]:
        """Run the agent on ``task`` until it answers or a budget runs out.

        Args:
            task: the user's request (text or content parts); None to continue ``messages``.
            messages: the conversation to continue, extended IN PLACE as the run goes (so it
                holds the history even if the run is cancelled). A new list when omitted.
                OpenAI-shaped dicts (``{"role": "user", "content": "hi"}``) are converted to
                typed messages in place, as :meth:`Client.chat` converts them.
            session: a JSONL file that receives every message as it happens (its directory must
                exist; the run holds an exclusive lock on it, see :class:`SessionWriter`), or a
                :class:`~kimik3.agents.SessionStore` keeping the session elsewhere.
            settings: this run's :class:`~kimik3.ModelSettings`: the fields it sets win over the
                agent's (which win over the client's and the card's) for this run only.
            guardrails: this run's guardrails, merged over the agent's (one of the same name
                replaces the agent's); a tripped one ends the run with ``stop_reason="guardrail"``.

        Returns:
            The :class:`RunResult`.

        Raises:
            UserError: nothing to do (no task, and no conversation or one that ends with the agent's
                answer), or an argument of the wrong type (``task`` not text or parts, ``session`` not a path).
            MessageError: a ``messages`` dict that is not a valid message.
            SessionError: the session file is in use by another run (named), is not a session,
                is not a regular file, or its directory does not exist; nothing is written then.
            KeyboardInterrupt: raised by a tool or the approval hook, as itself (every call still
                gets its result message first).
            Engine errors (:class:`~kimik3.APIStatusError`, ...) that survived the client's
            retries. Tool errors never escape: the model sees them.
        """
        result: RunResult[OutputT] | None = None
        async for event in self.run_stream(task, messages=messages, session=session, settings=settings,
                                           guardrails=guardrails):
            if isinstance(event, FinalEvent):
                result = event.result
        assert result is not None
        return result

    async def resume(
        self, path: Source, task: str | None = None, *, settings: ModelSettings | None = None,
        approvals: Approvals | None = None, guardrails: Sequence[Guardrail] | None = None,
        answers: Mapping[str, Mapping[str, dict[str, Any] | None]] | None = None,
    ) -> RunResult[OutputT]:
        """Continue the session recorded in ``path`` (appending to it).

        ``approvals`` (``{call id: Allow() | Deny(reason) | Edit(arguments)}``) decide the calls
        the approval hook deferred (:attr:`RunResult.pending_approvals`): recorded first, then
        each approved call runs once (:mod:`kimik3.agents._deferred`: across crashes too), a
        denied one gets its error result; undecided ones keep the run at ``approval_required``.
        ``answers`` (``{call id: {request key: content dict, or None to decline}}``) answer the
        MCP servers' questions calls stopped on (:attr:`RunResult.pending_inputs`): recorded
        first, bound to the questions, then each answered call is replayed once with them as
        its ``inputResponses`` (:mod:`kimik3.agents._inputs`); unanswered ones keep the run at
        ``input_required``. Calls a crash left without a result get an error result; then the
        run continues (with ``task`` as a new user message, if given).

        Raises:
            UserError: no ``task`` and the session ends with the agent's answer (nothing to do); a
                ``task`` while calls await a decision or answers; bad ``approvals``
                (:func:`.record_approvals`) or ``answers`` (:func:`.record_answers`).
            SessionError: an unreadable session file (the line is named), or one another run is
                writing (the holder is named). A torn last line of a crash is dropped, never an error.
        """
        writer = SessionWriter(path, create=False)  # the run's writer: the one read and lock of a resume
        try:
            prepare_resume(writer, approvals or {}, task, answers)
        except BaseException:
            writer.close()
            raise
        return await self.run(task, messages=list(writer.messages), session=writer, settings=settings,  # type: ignore[arg-type]
                              guardrails=guardrails)

    async def run_stream(
        self,
        task: str | Sequence[TextPart | ImagePart] | None = None,
        *,
        messages: list[Message] | None = None,
        session: Source | None = None,
        settings: ModelSettings | None = None,
        guardrails: Sequence[Guardrail] | None = None,
    ) -> AsyncIterator[AgentEvent]:
        """:meth:`run`, yielding :data:`AgentEvent` s; the last one is a :class:`FinalEvent`."""
        writer = session if isinstance(session, SessionWriter) else None  # resume's: read once, before approvals
        try:
            check_instance("run(settings=...)", settings, ModelSettings, "a ModelSettings")
            run_guardrails = merge_guardrails(self.guardrails, guardrails)
            history = run_messages(messages, session)
            user = task_message(task) if task is not None else None
            if user is None and (why := nothing_to_do(history)):
                raise UserError(why)
        except BaseException:
            if writer is not None:
                writer.close()
            raise
        run_settings = AGENTIC_SETTINGS.merged(self.client.settings).merged(self.settings).merged(settings)
        if writer is not None:
            writer.continues(history)
        elif session is not None:
            header = {"instructions": self.instructions, "tools": sorted(self.tools), **self.hooks.session_header()}
            writer = SessionWriter.for_run(session, header, history)
        run = _Run(history, writer, self.deps, RunTokens(self._tokenizer, self.client), run_settings, self.budgets)
        try:
            await self.hooks.run_start(writer)
            async with AsyncExitStack() as stack:
                run.span = stack.enter_context(_tracing.agent_run(self.name, self.client.model))
                run.guards = Guards(run_guardrails, run.span, writer, self.failure_text)
                await self._toolbox.open(stack)  # toolsets not open yet: for this run only
                await self._sync_tools(run, start=True)
                model = self.client.model
                if self.budgets.usd is not None and self.pricing == "auto" and not model:
                    model = await self.client.engine.model_name()  # a USD budget needs prices before any call
                run.start(self.pricing, model, run.settings)
                run.count_context()  # the head's tool declarations and a resumed history, counted now
                if not history and self.instructions:
                    run.add(SystemMessage(content=self.instructions))
                async for event in settle(run, self._run_tools, self.hooks, self.failure_text, task=user is not None):
                    yield event  # the calls a crash or a deferral left without a result
                if await run.guards.check_input(user, run.messages) and user is not None:
                    run.add(user)  # a task an input guardrail tripped on never enters the history
                    run.task = user  # never summarised or dropped (agents/_compaction.py)
                run.served_window = await served_window(self.client, self.context)  # the task is kept first
                if (problem := head_problem(run, self.context)) is not None:
                    log.warning("kimik3: %s", problem)
                    run.issue(problem)
                run.routing = conversation_routing(self.routing_key, writer, run.messages, run.settings)
                async for event in self._loop(run):
                    if isinstance(event, FinalEvent):
                        event = FinalEvent(await run.guards.final(event.result))  # output guardrails
                        run.finish(event.result)
                        run.span.done(event.result)
                    yield event
        finally:
            with anyio.CancelScope(shield=True):
                await self.hooks.run_end()
            if writer is not None:
                writer.close()

    # -- the loop ----------------------------------------------------------------------------

    async def _loop(self, run: _Run) -> AsyncIterator[AgentEvent]:
        while True:
            if run.guards.trip is not None:  # a guardrail tripped (agents/_guardrails.py)
                yield FinalEvent(self._result(run, None, "guardrail"))
                return
            if run.deferred or run.waiting:  # calls await a person's decision or answers: stop; a resume goes on
                yield FinalEvent(self._result(run, None, "approval_required" if run.deferred else "input_required"))
                return
            exhausted = run.exhausted(self.budgets, self.client.model)
            if exhausted is not None:
                async for event in self._final_turn(run, exhausted):
                    yield event
                return
            outcome: TurnOutcome | None = None  # none: the request was too big, made smaller (send it again)
            async for before in before_turn(run, self.context, self._summarize):  # compaction (agents/_overflow.py)
                if isinstance(before, Final):
                    outcome = before
                else:
                    yield before
            if outcome is None:
                try:
                    async for item in self._turn(run):  # the turn's events pass no other layer (issue 44)
                        if isinstance(item, (ToolsRan, ContinueWith, Final)):
                            outcome = item
                        else:
                            yield item
                except OVERFLOW as e:  # too big: made smaller, the turn is sent again
                    async for after in overflowed(run, self.context, e, self._summarize):
                        if isinstance(after, (ToolsRan, ContinueWith, Final)):
                            outcome = after
                        else:
                            yield after
            if isinstance(outcome, ContinueWith):
                run.add(UserMessage(content=outcome.prompt))
            elif isinstance(outcome, Final):
                yield FinalEvent(self._result(run, outcome.output, outcome.stop_reason))
                return

    async def _turn(self, run: _Run) -> AsyncIterator[AgentEvent | TurnOutcome]:
        """One turn: a model call, its tools; ends with its named :data:`TurnOutcome` (calls that did
        not run are named to the model; a turn with no answer and no call is never the answer)."""
        await self._sync_tools(run)
        # the call's source, not the call: each event passes one wrapper less (issue 44)
        source = self._model_call(run, self._request(run)).source  # too big: agents/_overflow.py
        try:
            async for event in source:
                if isinstance(event, ChatCompletion):
                    completion = event
                    break
                if isinstance(event, ToolCallDone) and event.error is not None:
                    run.call_errors[event.id] = event.error  # kept, but answered with the reason
                yield event
            else:
                raise EngineError(NO_COMPLETION)
        finally:
            await source.aclose()
        message = completion.message
        if completion.failed_tool_calls:  # a chat server's undecodable calls: kept with {}, answered with why
            run.call_errors.update(failed_call_errors(completion))
            calls = [*(message.tool_calls or ()), *(f.to_tool_call() for f in completion.failed_tool_calls)]
            message = message.model_copy(update={"tool_calls": calls})
        cost = run.model_turn(completion, message)  # the message exactly as received
        for issue in completion.issues:  # what the engine repaired or left (usage clamped, leaked markup)
            run.issue(issue)
        note = unrun_note(run.unrun(unrun_calls(completion)))  # issues and counts recorded
        if message.tool_calls:
            run.cut_replies, run.cut_answer = 0, ""
            await self.hooks.before_tools(run.turns, message.tool_calls)
            try:
                said = {f.id for f in completion.failed_tool_calls}  # their issue is recorded already
                async for tool_event in self._run_tools(run, message.tool_calls, said):
                    yield tool_event
            finally:  # a cancelled turn's changes are recorded too
                if self.hooks.hooks:  # no hook: nothing to shield (issue 44: no cancel scope a turn)
                    with anyio.CancelScope(shield=True):
                        await self.hooks.after_tools(run.turns, message.tool_calls)
            yield TurnEndEvent(run.turns, message, completion.usage, cost)
            run.unusable_turns = 0
            if run.loop is not None:  # the model went on past every warning (agents/_loops.py)
                run.issue(f"loop detected: the model repeated {run.loop}; the run ended")
                yield Final(None, "loop_detected")
                return
            yield ContinueWith(note) if note else ToolsRan()
            return
        yield TurnEndEvent(run.turns, message, completion.usage, cost)
        if note is None and completion.truncated:  # continue, or stop: no progress
            yield cut_outcome(run, completion, message, self.output_type)
            return
        if note is None and not answer_text(message).strip():
            run.issue("the model's message had neither an answer nor a tool call")
            note = EMPTY_TURN
        if note is not None:
            run.unusable_turns += 1
            yield ContinueWith(note) if run.unusable_turns < 2 else Final(None, "unusable_output")
            return
        run.unusable_turns = 0
        output, error = validate_output(self._output_adapter, whole_answer(run, message))
        if error is not None and not run.output_retry_used:
            run.output_retry_used = True
            yield ContinueWith(f"Your answer does not match the required JSON schema: {error}. "
                               "Answer again with only the JSON object.")
            return
        yield Final(output, "completed" if error is None else "invalid_output")

    def _request(self, run: _Run, *, tool_choice: ToolChoice | None = None,
                 messages: list[Message] | None = None) -> ChatRequest:
        return ChatRequest(messages=messages if messages is not None else run.messages, tools=run.specs,
                           settings=run.settings, tool_choice=tool_choice, response_format=self._response_format,
                           routing=run.routing, checker=run.checker)

    def _model_call(self, run: _Run, request: ChatRequest) -> ModelCall:
        """The run's model call: the client's one path (retries, the ``chat`` span under the run's
        span), incremental with the run's prompt cache."""
        return self.client.stream_request(request, prompt_cache=run.cache, trace_parent=run.span)

    async def _summarize(self, run: _Run, messages: list[Message]) -> ChatCompletion:
        """A tool-free model call over ``messages`` (compaction's), traced under the run."""
        request = self._request(run, tool_choice="none", messages=messages)
        return await self.client.complete(request, trace_parent=run.span)

    async def _sync_tools(self, run: _Run, *, start: bool = False) -> None:
        """Update the run's tool table from the agent's tools and its toolsets; at the start of a
        run fix the head's declaration, later declare new or changed tools dynamically."""
        run.tools, from_toolsets = await self._toolbox.current()
        if start:  # a tool the history declares already stays declared there: the head is the earlier one's
            known = dynamic_names(run.messages)
            run.specs = [s for s in (*self._specs, *(t.spec for t in from_toolsets)) if s.function.name not in known]
            own = len(self._toolbox.tools)
            run.unavailable = restore_declared(self._toolbox, run.tools, run.messages)
            if len(self._toolbox.tools) != own:  # a tool search knew some: restored
                run.tools, from_toolsets = await self._toolbox.current()
            if run.unavailable:
                log.warning("kimik3: tools %s were declared in an earlier run of this conversation and are not "
                            "available now (give them with Agent.add_tools); calls to them get an error",
                            ", ".join(map(repr, run.unavailable)))  # fmt: skip
        new = undeclared(run.tools, run.specs, run.messages, run.declarations)
        if new:
            run.add(SystemMessage(content="", tools=new))

    # -- tools -------------------------------------------------------------------------------

    async def _run_tools(self, run: _Run, calls: Sequence[ToolCall], said: set[str]) -> AsyncIterator[AgentEvent]:
        steps, results, stop = run.loops.screen(calls, self.failure_text)  # a call repeating a loop is not run
        run.loop = stop or run.loop
        approved: list[ToolCallApprovedEvent | None] = [None] * len(calls)
        deadline = run.deadline(self.budgets)
        interrupts: list[BaseException] = []

        async def one(call: ToolCall, i: int, *, scoped: bool = True) -> None:
            await self._one_tool(run, call, results, approved, i, scoped=scoped)
            if approved[i] is not None and results[i] is not None:  # it ran: journaled as it ends
                finished(run, call)

        async def child(call: ToolCall, i: int) -> None:
            try:
                await one(call, i)
            except (KeyboardInterrupt, SystemExit) as e:
                # Not raised in this child task: asyncio would re-raise it out of its loop at
                # once, skipping the loop's clean shutdown. The run's own task raises it below.
                interrupts.append(e)
                group.cancel_scope.cancel()

        # Tools get the rest of the budget as their limit; this scope ends what that did not (a hook).
        # Without a time budget there is no scope (issue 44: nothing could cancel it).
        scope = None if deadline is None else anyio.move_on_after(deadline + TOOL_GRACE)
        todo = [i for i, result in enumerate(results) if result is None]
        try:
            with scope if scope is not None else nullcontext():
                lone = run.tools.get(calls[todo[0]].function.name) if len(todo) == 1 else None
                if INLINE_ONE_CALL and lone is not None and lone.in_thread and self._no_code_on_loop(run):
                    # issue 44: no task group
                    await one(calls[todo[0]], todo[0], scoped=False)
                else:
                    async with anyio.create_task_group() as group:
                        for i in todo:
                            group.start_soon(child, calls[i], i)
            if interrupts:
                raise interrupts[0]  # KeyboardInterrupt reaches the caller as itself
        except BaseExceptionGroup as group_error:
            # Whatever else escaped a tool reaches the caller as itself when it is alone, not
            # wrapped in the task group's BaseExceptionGroup.
            raise unwrap_group(group_error) from None
        finally:
            # Whatever happened (a cancelled run, the time budget), every call id gets a result
            # message, in call order, so the history stays valid for the next request.
            for i, call in enumerate(calls):
                result = results[i]
                if result is None and (call.id in run.deferred or call.id in run.waiting):
                    continue  # no result: it waits for a decision or answers (a resume gives them)
                if result is None:
                    why = failures.interrupted(by_time_budget=scope is not None and scope.cancel_called)
                    result = ToolResult.from_failure(why, self.failure_text)
                result = run.loops.answered(steps[i], result)  # told what it repeats, at loop_warn
                results[i] = result
                run.failed_calls += result.is_error
                if result.is_error and call.id not in said:  # raw and chat mode alike (RunResult.degraded)
                    run.issue(failed_call_issue(call.function.name, result.text))
                run.add(result_message(result, call, self.context.max_result_chars))
            prune_images(run.messages, self.context.max_images, self.context.image_slack)
            run.loops.trim()
        for i, call in enumerate(calls):
            result = results[i]
            if result is None:  # deferred
                continue
            ran = approved[i]
            if ran is not None:
                yield ran
            yield ToolResultEvent(call.id, call.function.name, result)

    def _no_code_on_loop(self, run: _Run) -> bool:
        """Whether a call's step runs no code of the user's on the event loop besides the tool: no
        approval hook, no tool guardrail, no :meth:`RunHooks.tool_result` but kimik3's own. Such
        code could cancel the task it runs in (``current_task().cancel()``), which must fail
        that call alone: it keeps a task of its own (:data:`INLINE_ONE_CALL`)."""
        return (self.approval is None and not run.guards.checks("tool_input") and not run.guards.checks("tool_output")
                and all(type(h).tool_result.__module__.startswith("kimik3.") for h in self.hooks.hooks))

    async def _one_tool(self, run: _Run, call: ToolCall, results: list[ToolResult | None],
                        approved: list[ToolCallApprovedEvent | None], i: int, *, scoped: bool) -> None:
        with _tracing.tool_call(run.span, call.id, call.function.name, call.function.arguments,
                                declared=call.function.name in run.tools) as span:
            try:
                await self._call_tool(run, call, results, approved, i)
            except BaseException as e:  # a CancelledError the tool or the hook raised itself: its error
                if not stray_cancellation(e, scoped=scoped):
                    raise  # the run's own cancellation (or KeyboardInterrupt...) cancels the tools
                results[i] = ToolResult.from_failure(failures.stray_cancellation(e), self.failure_text)
            span.done(results[i])

    async def _call_tool(self, run: _Run, call: ToolCall, results: list[ToolResult | None],
                         approved: list[ToolCallApprovedEvent | None], i: int) -> None:
        name = call.function.name
        tool = run.tools.get(name)
        if tool is None and not isinstance(run.decisions.get(call.id), Deny):  # a denial says why, tool or not
            unknown = failures.unknown_tool(name, sorted(run.tools), declared_earlier=name in run.unavailable)
            results[i] = ToolResult.from_failure(unknown, self.failure_text)
            return
        error = run.call_errors.pop(call.id, None)
        if error is not None:  # a value beyond the JSON limits, or arguments a server sent broken
            results[i] = ToolResult.from_failure(failures.not_run(error), self.failure_text)
            return
        recorded = call.id in run.decisions
        replay = replayed(run, call)  # a call answered in the session: replayed with its answers
        decision = replay[0] if replay else await decide(run, self.approval, call, self.failure_text)
        if decision is None:  # deferred (Defer): recorded in the session; a resume decides it
            return
        if isinstance(decision, ToolResult):  # denied, or the check failed: the model sees why
            results[i] = decision
            return
        blocked = await run.guards.check_tool_input(call.id, name, decision.arguments)
        if blocked is not None:  # a tool guardrail tripped: the call does not run
            results[i] = blocked
            return
        assert tool is not None  # only a recorded denial got here without one
        approved[i] = decision
        context = run.tool_context(call.id, self.add_tools, self.failure_text, self.budgets, self.approval)
        if (run.session is not None or replay) and (replay or recorded or not decision.edited):
            # a hook's live edit is in no record: its questions cannot wait; no session, no record (issue 44: skipped)
            arguments = decision.arguments if isinstance(decision.arguments, dict) else pending_call(call).arguments
            context = replace(context, defer_input=input_waiter(run, call, arguments),
                              input_replay=replay[1] if replay else None)
        left = run.deadline(self.budgets)  # rounded up to 0.1 s: the error names a readable limit
        limits = [t for t in (tool.timeout, left if left is None else math.ceil(left * 10) / 10) if t is not None]
        result = await tool.run(decision.arguments, context, timeout=min(limits) if limits else None)
        if call.id in run.waiting:  # its MCP server's questions wait for a person (recorded): no result yet
            return
        result = await check_images(result, self.client.check_image, self.failure_text)  # the model can't see it
        result = await self.hooks.tool_result(call, edit_note(result, decision))
        results[i] = await run.guards.check_tool_output(call.id, name, result)

    # -- the last turn, the result --------------------------------------------------------------

    async def _final_turn(self, run: _Run, reason: StopReason) -> AsyncIterator[AgentEvent]:
        """One tool-free turn for a summary, then the result. Compacted first when due and made
        smaller when the server refuses it as too big, as any turn (agents/_overflow.py); when
        nothing can be made smaller, the result has no output and still ``reason``, an issue says
        why (was: ContextLengthExceededError out of Agent.run, issue 41)."""
        instructions = SystemMessage(content=SUMMARY_INSTRUCTIONS)
        ended = False  # nothing could be made small enough
        while not ended:
            async for before in before_turn(run, self.context, self._summarize):
                if isinstance(before, Final):
                    ended = True
                else:
                    yield before
            if ended:
                break
            if run.messages[-1] is not instructions:  # added once; again if compaction summarised it
                run.add(instructions)
            try:
                async with self._model_call(run, self._request(run, tool_choice="none")) as call:
                    async for event in call:
                        yield event
                break
            except OVERFLOW as e:
                async for after in overflowed(run, self.context, e, self._summarize):
                    if isinstance(after, Final):
                        ended = True
                    elif not isinstance(after, (ToolsRan, ContinueWith)):
                        yield after
        if ended:
            yield FinalEvent(self._result(run, None, reason))
            return
        completion = call.completion
        message = completion.message
        if message.tool_calls:  # tools are off for this turn: keep the words, drop the calls
            message = AssistantMessage(content=message.content, reasoning_content=message.reasoning_content)
        cost = run.model_turn(completion, message)
        yield TurnEndEvent(run.turns, message, completion.usage, cost)
        if not answer_text(message).strip():
            cut = f" (cut by {cut_by(completion)})" if completion.truncated else ""
            run.issue(f"the summary turn gave no text{cut}")
        output, _ = validate_output(self._output_adapter, message)
        yield FinalEvent(self._result(run, output, reason))

    def _result(self, run: _Run, output: Any, reason: StopReason) -> RunResult[OutputT]:
        path = str(run.session.path) if run.session is not None else None
        return RunResult(output=output, messages=run.messages, usage=run.usage, turns=run.turns,
                         stop_reason=reason, session_path=path, failed_calls=run.failed_calls,
                         cut_calls=run.cut_calls, dropped_calls=run.dropped_calls, issues=list(run.issues),
                         cost=run.cost, pending_approvals=list(run.deferred.values()),
                         pending_inputs=list(run.waiting.values()), guardrail=run.guards.trip,
                         summaries=run.summaries, cleared_results=run.cleared_results,
                         dropped_messages=run.dropped_messages)
