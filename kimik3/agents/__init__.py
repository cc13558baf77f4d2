"""Agents: :class:`Agent` (the tool loop) with its settings, budgets, context policy, approval
decisions, results, turn outcomes and events (model deltas included: the agent owns its event
vocabulary, so consumers never import :mod:`kimik3.formats`)."""

from ._agent import Agent
from ._deferred import pending_approvals, record_approvals
from ._dynamic import dynamic_names as dynamic_names
from ._fork import fork_session, format_session
from ._guardrails import (
    Guardrail,
    GuardrailResult,
    GuardrailStage,
    GuardrailTrip,
    input_guardrail,
    output_guardrail,
    tool_input_guardrail,
    tool_output_guardrail,
)
from ._hooks import RunHooks
from ._prefix import PrefixStats, prefix_stats
from ._prompts import CODING_INSTRUCTIONS, SUMMARY_INSTRUCTIONS
from ._session import SessionLog, SessionRecord, SessionWriter, load_session, read_session_records
from ._session_store import FileStore, MemoryStore, SessionStore
from ._types import (
    AgentEvent,
    Allow,
    ApprovalDecision,
    ApprovalHook,
    Budgets,
    CompactionEvent,
    ContentDelta,
    ContextPolicy,
    ContinueWith,
    Defer,
    Deny,
    Edit,
    Final,
    FinalEvent,
    ModelSettings,
    PendingCall,
    ReasoningDelta,
    RunResult,
    StopReason,
    ToolCallApprovedEvent,
    ToolCallArgumentsDelta,
    ToolCallDone,
    ToolCallIncomplete,
    ToolCallStarted,
    ToolResultEvent,
    ToolsRan,
    TurnEndEvent,
    TurnOutcome,
)

# Imported `as` themselves and left out of __all__ (the user API): names kimik3's other packages use of
# this package's private modules, so that none imports another package's `_module` (issue 42,
# tests/test_architecture.py).
__all__ = [
    "CODING_INSTRUCTIONS",
    "SUMMARY_INSTRUCTIONS",
    "Agent",
    "AgentEvent",
    "Allow",
    "ApprovalDecision",
    "ApprovalHook",
    "Budgets",
    "CompactionEvent",
    "ContentDelta",
    "ContextPolicy",
    "ContinueWith",
    "Defer",
    "Deny",
    "Edit",
    "FileStore",
    "Final",
    "FinalEvent",
    "Guardrail",
    "GuardrailResult",
    "GuardrailStage",
    "GuardrailTrip",
    "MemoryStore",
    "ModelSettings",
    "PendingCall",
    "PrefixStats",
    "ReasoningDelta",
    "RunHooks",
    "RunResult",
    "SessionLog",
    "SessionRecord",
    "SessionStore",
    "SessionWriter",
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
    "fork_session",
    "format_session",
    "input_guardrail",
    "load_session",
    "output_guardrail",
    "pending_approvals",
    "prefix_stats",
    "read_session_records",
    "record_approvals",
    "tool_input_guardrail",
    "tool_output_guardrail",
]
