"""Budgets, context policy, approval decisions, run results, turn outcomes and the
events of the Agent (the agent owns its event vocabulary: model deltas are re-exported here and
from ``kimik3``). :class:`ModelSettings` (:mod:`kimik3.types`) is re-exported here too."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeAlias

from typing_extensions import TypeVar

from .._checks import check_int, check_number
from .._exceptions import UserError
from .._text import escaped, shown_call, shown_link
from ..formats.k3 import (
    ContentDelta,
    ReasoningDelta,
    ToolCallArgumentsDelta,
    ToolCallDone,
    ToolCallIncomplete,
    ToolCallStarted,
)
from ..tools import ToolResult
from ..types import AssistantMessage, Message, ModelSettings, Usage
from ._guardrails import GuardrailTrip

__all__ = [
    "AgentEvent",
    "Allow",
    "ApprovalDecision",
    "ApprovalHook",
    "Budgets",
    "CompactionEvent",
    "ContentDelta",
    "ContextPolicy",
    "ContinueWith",
    "DEFAULT_CONTEXT_WINDOW",
    "Defer",
    "Deny",
    "Edit",
    "Final",
    "FinalEvent",
    "ModelSettings",
    "OutputT",
    "PendingCall",
    "ReasoningDelta",
    "RunResult",
    "StopReason",
    "ToolCallApprovedEvent",
    "ToolCallArgumentsDelta",
    "ToolCallDone",
    "ToolCallIncomplete",
    "ToolCallStarted",
    "ToolResultEvent",
    "ToolsRan",
    "TurnEndEvent",
    "TurnOutcome",
]

OutputT = TypeVar("OutputT", default=str)

DEFAULT_CONTEXT_WINDOW = 131_072
"""The window compaction plans for when neither ``ContextPolicy.context_window`` nor the engine
states one (vendor-validated K3 launches serve 131,072-196,608)."""

StopReason = Literal[
    "completed", "turn_budget", "token_budget", "time_budget", "cost_budget", "invalid_output", "unusable_output",
    "no_progress", "approval_required", "input_required", "guardrail", "loop_detected", "context_overflow",
]
"""Why a run ended: the model answered (``completed``), a budget ran out (turns, tokens, time or
cost: :class:`Budgets`; the agent then ran one tool-free summary turn), the answer failed
``output_type`` validation twice, twice in a row a turn gave neither an answer nor a call that
could run (``unusable_output``: e.g. every call never closed, or every call was cut by the output
limit), or
(``no_progress``) :data:`~kimik3._defaults.MAX_CONTINUES` replies in a row were cut by
``max_tokens`` without a tool call, or two when the last was cut before any answer (reasoning
only), or a cut reply left the context window no room to continue (an issue says so); the output
is the last reply's text, None when it has none. ``loop_detected``: the model kept making the same
call, or the same short cycle of calls, with the same results past ``Budgets.loop_stop`` (it was
told at ``loop_warn``, its calls were not run from ``loop_block``; :mod:`kimik3.agents._loops`);
output None, an issue names the loop. ``context_overflow``: the server refused the request as too
long and nothing was left to make smaller (old tool results cleared, old turns dropped, a summary
tried): output None, an issue says why; the session can be resumed. ``approval_required``: the approval hook deferred
tool calls to a person (:class:`Defer`); they are in :attr:`RunResult.pending_approvals` (output
None), ``Agent.resume(session, approvals=...)`` goes on. ``input_required``: an MCP server asked a
question no one could answer during the run (no input handler); the calls wait in the session
with it (:attr:`RunResult.pending_inputs`, output None) and ``Agent.resume(session, answers=...)``
replays them with the answers (calls awaiting approval as well: ``approval_required``, both lists
filled). ``guardrail``: a guardrail tripped
(:attr:`RunResult.guardrail` says which, and why; :mod:`kimik3.agents._guardrails`)."""


@dataclass(frozen=True)
class Budgets:
    """Limits of one run; when one runs out the agent ends gracefully (one tool-free summary
    turn, then a :class:`RunResult` whose ``stop_reason`` says which).

    Attributes:
        turns: model calls that may request tools (default 50).
        tokens: total tokens (prompt + completion, summed over model calls), or None.
        seconds: wall time of the run, or None. Each tool call gets the rest of it as its time
            limit (:meth:`~kimik3.tools.Tool.run`): one still running then is cancelled (async)
            or abandoned in its thread (sync) and answered with an error result.
        usd: cost of the run's model calls in USD (:attr:`RunResult.cost`, at the agent's
            :class:`~kimik3.Pricing`), or None. Checked before each model call, like the token
            budget: the call that crosses it finishes, then the summary turn (its cost comes on
            top) and ``stop_reason="cost_budget"``. The agent needs prices for it: an agent
            without any (``pricing=None``, or a model id outside :data:`kimik3._pricing.PRICES`)
            raises :class:`~kimik3.UserError`.
        loop_warn: the same call (tool name and arguments as canonical JSON), or the same cycle
            of up to ``loop_cycle`` calls, made this many times in a row with the same results:
            its result tells the model what it repeated and that it has the result already
            (default 3; :mod:`kimik3.agents._loops`, issue 41).
        loop_block: ... this many times: the call is not run, an error result says why (default 5).
        loop_stop: ... this many times: the run ends with ``stop_reason="loop_detected"``
            (default 8), but only once the model was shown a blocked call (a note, with
            ``loop_block=None``) in an earlier turn: identical calls made together in one turn
            are blocked, not stopped, the first time. A call with other arguments, or the same call whose result
            changed (polling output that grows), is no repetition. None switches a stage off
            (``loop_warn=None, loop_block=None, loop_stop=None``: no loop breaker); equal values
            are allowed (the block's error result is then the warning); a stop with neither a
            warning nor a block before it is refused.
        loop_cycle: the longest cycle of calls looked for (default 3: A, A, A ...; A, B, A, B ...;
            A, B, C, A, B, C ...).
    """

    turns: int = 50
    tokens: int | None = None
    seconds: float | None = None
    usd: float | None = None
    loop_warn: int | None = 3
    loop_block: int | None = 5
    loop_stop: int | None = 8
    loop_cycle: int = 3

    def __post_init__(self) -> None:
        """Raises UserError: turns < 1, tokens < 1, seconds <= 0, usd <= 0, loop_warn < 2,
        loop_block < loop_warn, loop_stop < loop_block or loop_warn (those set), loop_stop set with
        loop_warn and loop_block both None, loop_cycle < 1, or a value of the wrong type."""
        check_int("Budgets.turns (max_turns)", self.turns, minimum=1)
        check_int("Budgets.tokens", self.tokens, minimum=1, optional=True)
        check_number("Budgets.seconds", self.seconds, above=0, optional=True)
        check_number("Budgets.usd", self.usd, above=0, optional=True)
        check_int("Budgets.loop_warn", self.loop_warn, minimum=2, optional=True)
        check_int("Budgets.loop_block", self.loop_block, minimum=self.loop_warn or 2, optional=True)
        check_int("Budgets.loop_stop", self.loop_stop, minimum=self.loop_block or self.loop_warn or 2, optional=True)
        if self.loop_stop is not None and self.loop_warn is None and self.loop_block is None:
            raise UserError("Budgets.loop_stop needs loop_warn or loop_block: the run would end on a loop the "
                            "model was never warned of (set one, or loop_stop=None)")
        check_int("Budgets.loop_cycle", self.loop_cycle, minimum=1)


@dataclass(frozen=True)
class ContextPolicy:
    """How the agent keeps a long history inside the context window.

    Attributes:
        max_result_chars: each tool result's text is capped here (head + tail + the number of
            elided characters, :func:`kimik3.tools.truncate_middle`).
        context_window: the model's context in tokens; None (default): the engine's
            (:meth:`~kimik3.engines.Engine.context_window`: vLLM's ``max_model_len``,
            ``/v1/models``), else :data:`DEFAULT_CONTEXT_WINDOW`. A smaller window a server's
            overflow error states wins either way.
        compact_at: compact when the context reaches this fraction of the window. Compaction
            brings it down to half of that: old tool results cleared first when
            ``clear_tool_results``, then the model's summary of older turns; a summary that fails
            (empty, reasoning only, cut) is not asked again until the history grew by
            ``summary_retry_growth`` of the threshold (doubling with each failure in a row),
            and meanwhile the run stays inside the
            window without the model: old tool results cleared, then the oldest whole turns
            dropped, last the largest earlier user messages cut to their start
            (:mod:`kimik3.agents._clearing`; issue 41).
        keep_recent_turns: model turns kept verbatim by compaction (older ones are summarised by
            the model; a tool call is never separated from its result). User messages after
            the first task are kept verbatim too (operator instructions, approvals) when they fit.
        clear_tool_results: clear old tool results (each becomes a stub naming the call, so the
            model can call it again) before asking the model for a summary: cheaper, and the
            prompt's older part stays as it was (Anthropic's context editing). Default False:
            clearing only after a failed summary.
        summary_retry_growth: after a failed summary, the share of the compaction threshold the
            history must grow by before the model is asked again (default 1.0), doubled after
            each further failure in a row.
        max_images: keep only this many most recent images in tool results (older screenshots
            become a text note); None keeps all.
        image_slack: images beyond ``max_images`` allowed before pruning (None: ``max_images``).
            Pruning is batched so the prompt prefix stays cache-stable: nothing changes until
            ``max_images + image_slack`` is exceeded, then the oldest drop down to
            ``max_images``. 0 prunes on every new image (each prompt then rewrites old turns).
    """

    max_result_chars: int = 30_000
    context_window: int | None = None
    compact_at: float = 0.8
    keep_recent_turns: int = 4
    max_images: int | None = None
    image_slack: int | None = None
    clear_tool_results: bool = False
    summary_retry_growth: float = 1.0

    def __post_init__(self) -> None:
        """Raises UserError: a value of the wrong type or out of range."""
        check_int("ContextPolicy.max_result_chars", self.max_result_chars, minimum=1)
        check_int("ContextPolicy.context_window", self.context_window, minimum=1, optional=True)
        check_number("ContextPolicy.summary_retry_growth", self.summary_retry_growth, minimum=0)
        if not isinstance(self.clear_tool_results, bool):
            raise UserError(f"ContextPolicy.clear_tool_results must be True or False, got {self.clear_tool_results!r}")
        check_number("ContextPolicy.compact_at", self.compact_at, above=0, maximum=1)
        check_int("ContextPolicy.keep_recent_turns", self.keep_recent_turns, minimum=0)
        check_int("ContextPolicy.max_images", self.max_images, minimum=0, optional=True)
        check_int("ContextPolicy.image_slack", self.image_slack, minimum=0, optional=True)


@dataclass(frozen=True)
class PendingCall:
    """A tool call awaiting approval: its id, tool name and parsed arguments."""

    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class PendingInput:
    """A tool call stopped on an MCP server's questions that wait for a person's answer
    (MCP 2026-07-28 ``input_required``, no input handler; :mod:`kimik3.agents._inputs`).

    Attributes:
        id: the call's id.
        name: the tool's name (the model's).
        arguments: the arguments it ran with (and is replayed with).
        server: the MCP server's name.
        input_requests: ``{key: request}`` as the server sent them: each an
            ``{"method": "elicitation/create", "params": {"message": ..., "requestedSchema": {...}}}``
            (form mode) or with ``"url"`` (URL mode).
        request_state: the server's opaque ``requestState`` (echoed with the answers).
    """

    id: str
    name: str
    arguments: dict[str, Any]
    server: str
    input_requests: dict[str, Any]
    request_state: str | None = None

    def shown(self, head: str = "", *, whole: bool = False) -> list[str]:
        """What a person answering is shown: ``head``, the call as an approval shows it (its
        tool and arguments whole, escaped: answering a server's "Confirm?" lets the call run
        with them), then each of :meth:`questions` on a line indented by four spaces."""
        call = shown_call(f"{head}{escaped(self.name)} ", self.arguments, f"  id={escaped(self.id)}")
        return [call, *(f"    {line}" for line in self.questions(whole=whole))]

    def questions(self, *, whole: bool = False) -> list[str]:
        """One line per question, as a person is shown it (``kimik3 show``, ``run``, ``answer``):
        ``inp asks (book, id=call_..., question KEY): MESSAGE [name*: string]`` (form mode: the
        fields to give, ``*`` marking required ones, an enum's values after ``=``) or ``[open URL
        (host HOST) ...]`` (URL mode: the host said apart, IDNA-encoded, so a look-alike link shows
        where it leads). Every character a terminal would hide or act on, newlines included, is
        escaped (``\\u000a``: the text is the server's, so it cannot draw a line of its own such
        as ``approved: ...``); a message over :data:`QUESTION_SHOWN` characters and fields past
        the first :data:`FIELDS_SHOWN` are cut, saying how much, unless ``whole`` (``kimik3 show
        --full``; the whole stays in the session's ``input_required`` record)."""
        lines = []
        for key, request in self.input_requests.items():
            params = _object(request.get("params") if isinstance(request, dict) else None)
            message = str(params.get("message"))
            if len(message) > QUESTION_SHOWN and not whole:
                message = f"{message[:QUESTION_SHOWN]}... (cut: {len(message)} characters in all)"
            url = params.get("url")
            form = _fields(params.get("requestedSchema"), whole)
            wanted = f" [{shown_link(url)}]" if isinstance(url, str) else f" [{form}]"
            said = f"{self.server} asks ({self.name}, id={self.id}, question {key}): {message}{wanted}"
            lines.append(escaped(said))
        return lines


QUESTION_SHOWN = 1000
"""An MCP server's question is shown up to this many characters (:meth:`PendingInput.questions`)."""
FIELDS_SHOWN = 20
"""The fields of a question's form shown (:meth:`PendingInput.questions`); the others are counted."""


def _fields(schema: Any, whole: bool) -> str:
    """``name*: type`` for the properties of a form's schema (the first :data:`FIELDS_SHOWN`
    unless ``whole``)."""
    schema = _object(schema)
    required = schema["required"] if isinstance(schema.get("required"), list) else []
    fields = list(_object(schema.get("properties")).items())
    shown = []
    for name, spec in fields if whole else fields[:FIELDS_SHOWN]:
        spec = _object(spec)
        enum = spec.get("enum")
        values = f"={'|'.join(map(str, enum if whole else enum[:FIELDS_SHOWN]))}" if isinstance(enum, list) else ""
        shown.append(f"{name}{'*' * (name in required)}: {spec.get('type', 'any')}{values}")
    more = len(fields) - len(shown)
    return ", ".join(shown) + (f", ... ({more} more fields: kimik3 show SESSION --full)" if more > 0 else "")


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class Allow:
    """Run the call as the model made it."""


@dataclass(frozen=True)
class Deny:
    """Do not run the call; the model sees ``reason`` as the tool's error result."""

    reason: str = "denied by the user"


@dataclass(frozen=True)
class Edit:
    """Run the call with these arguments instead (the model sees a note that they were edited)."""

    arguments: dict[str, Any]


@dataclass(frozen=True)
class Defer:
    """Decide later, in any process: the call does not run now. The run records it in its
    session (which it needs) and, once the turn's other calls are done, stops cleanly with
    ``stop_reason="approval_required"`` and the call in :attr:`RunResult.pending_approvals`;
    ``Agent.resume(session, approvals={call_id: Allow() | Deny(reason) | Edit(arguments)})``
    (or ``kimik3 approve`` then ``kimik3 resume``) goes on (:mod:`kimik3.agents._deferred`)."""


ApprovalDecision: TypeAlias = Allow | Deny | Edit | Defer
ApprovalHook: TypeAlias = Callable[[PendingCall], "ApprovalDecision | Awaitable[ApprovalDecision]"]
"""Called before every tool call (sync or async)."""


@dataclass
class RunResult(Generic[OutputT]):
    """The outcome of :meth:`Agent.run`.

    Attributes:
        output: the final answer: its text, or an ``output_type`` instance (None when the answer
            never validated).
        messages: the whole conversation as typed messages (assistant messages exactly as the
            model produced them).
        usage: tokens summed over every model call of the run.
        turns: model calls made in this run.
        stop_reason: why the run ended (:data:`StopReason`).
        session_path: the JSONL session file, when the run recorded one.
        failed_calls: tool calls answered with an error result (the tool raised or overran its
            time limit, invalid arguments, an unknown tool, a denial, a cancelled call).
        cut_calls: tool calls cut by the output limit (``max_tokens``); they never ran.
        dropped_calls: tool calls the model started that could not run (never closed, written
            outside the tools section, or a server sent arguments that are not a JSON object).
        issues: one line per problem of the run, in order (``"turn 2: the call to 'write' was
            cut by the output limit (max_tokens) and did not run"``): failed, cut and dropped
            calls, unusable turns, compactions that kept the history.
        cost: USD spent on the run's model calls (compaction summaries included) at the agent's
            :class:`~kimik3.Pricing` (:meth:`Pricing.cost`: cached prompt tokens at the cached
            price); None when the agent has no prices (a self-hosted engine without
            ``pricing=``), sub-agents' (the ``task`` tool's) included.
        pending_approvals: with ``stop_reason="approval_required"``, the tool calls the approval
            hook deferred (:class:`Defer`), in call order: each call's id, tool name and
            arguments; decide them with ``Agent.resume(session, approvals={id: ...})``.
        pending_inputs: with ``stop_reason="input_required"`` (or ``approval_required``), the tool
            calls whose MCP server's questions wait for a person's answer (:class:`PendingInput`),
            in call order; answer them with ``Agent.resume(session, answers={id: {key: ...}})``.
        guardrail: with ``stop_reason="guardrail"``, the guardrail that tripped, its stage and
            message (:class:`~kimik3.agents.GuardrailTrip`); None otherwise.
        summaries: compaction summary requests made (each a model call over the history).
        cleared_results: old tool results compaction replaced by stubs (:mod:`kimik3.agents._clearing`),
            and earlier user messages cut to their start when nothing else made the context fit
            (an old task too big for the window; an issue says so).
        dropped_messages: messages of the oldest turns compaction dropped without a summary.
    """

    output: OutputT | None
    messages: list[Message]
    usage: Usage
    turns: int
    stop_reason: StopReason
    session_path: str | None = None
    failed_calls: int = 0
    cut_calls: int = 0
    dropped_calls: int = 0
    issues: list[str] = field(default_factory=list)
    cost: float | None = None
    pending_approvals: list[PendingCall] = field(default_factory=list)
    pending_inputs: list[PendingInput] = field(default_factory=list)
    guardrail: GuardrailTrip | None = None
    summaries: int = 0
    cleared_results: int = 0
    dropped_messages: int = 0

    @property
    def degraded(self) -> bool:
        """True unless the answer is clean: the run ended ``completed`` and nothing went wrong on
        the way (no failed, cut or dropped call, no unusable turn, no failed compaction). A
        degraded answer may still be right; :attr:`issues` says what happened."""
        return self.stop_reason != "completed" or bool(self.issues)


@dataclass(frozen=True, slots=True)
class ToolCallApprovedEvent:
    """A tool call passed approval and ran with these final arguments (the model's, or an
    :class:`Edit`'s). Arrives with the turn's results, before its :class:`ToolResultEvent`."""

    call_id: str
    name: str
    arguments: dict[str, Any] | str
    edited: bool = False
    type: Literal["tool_call_approved"] = field(default="tool_call_approved", init=False)


@dataclass(frozen=True, slots=True)
class ToolResultEvent:
    """A tool call finished (results arrive in call order once the turn's calls are done)."""

    call_id: str
    name: str
    result: ToolResult
    type: Literal["tool_result"] = field(default="tool_result", init=False)


@dataclass(frozen=True, slots=True)
class TurnEndEvent:
    """A model turn ended (after its tools ran); ``cost``: the model call's USD cost (None
    without prices, see :attr:`RunResult.cost`)."""

    turn: int
    message: AssistantMessage
    usage: Usage
    cost: float | None = None
    type: Literal["turn_end"] = field(default="turn_end", init=False)


@dataclass(frozen=True, slots=True)
class CompactionEvent:
    """Older turns were replaced by the model's summary, or (``summary`` "") old tool results were
    cleared (``cleared_results``, with earlier user messages cut as a last resort) and the oldest
    turns dropped (``removed_messages``); or nothing was removed:
    with ``stopped`` set, compaction cannot bring the context under its threshold and stops for
    this run; with ``failed`` set, the summary came back empty or cut twice (or its call failed)
    and the history was kept as it was."""

    removed_messages: int
    summary: str
    stopped: str | None = None
    failed: str | None = None
    cleared_results: int = 0
    type: Literal["compaction"] = field(default="compaction", init=False)


@dataclass(frozen=True, slots=True)
class FinalEvent(Generic[OutputT]):
    """The last event of :meth:`Agent.run_stream`."""

    result: RunResult[OutputT]
    type: Literal["final"] = field(default="final", init=False)


AgentEvent: TypeAlias = (
    ReasoningDelta
    | ContentDelta
    | ToolCallStarted
    | ToolCallArgumentsDelta
    | ToolCallDone
    | ToolCallIncomplete
    | ToolCallApprovedEvent
    | ToolResultEvent
    | TurnEndEvent
    | CompactionEvent
    | FinalEvent[Any]
)
"""What :meth:`Agent.run_stream` yields."""


# -- the named outcomes of one turn ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ToolsRan:
    """The turn called tools; their results are in the history: the loop goes on."""


@dataclass(frozen=True, slots=True)
class ContinueWith:
    """The turn needs another model call, with this user prompt first (a reply cut by the
    output limit, calls of the turn that did not run, a turn with neither an answer nor a call,
    an answer that failed ``output_type``)."""

    prompt: str


@dataclass(frozen=True, slots=True)
class Final:
    """The run is over: the final output (or None) and why it stopped."""

    output: Any
    stop_reason: StopReason


TurnOutcome: TypeAlias = ToolsRan | ContinueWith | Final
"""How one turn of :class:`~kimik3.Agent` ended."""
