"""Agents: :class:`Agent` (the tool loop) with its settings, budgets, context policy, approval
decisions, results and events."""

from ._agent import Agent
from ._prompts import CODING_INSTRUCTIONS, SUMMARY_INSTRUCTIONS
from ._session import SessionWriter, load_session
from ._types import (
    AgentEvent,
    Allow,
    ApprovalDecision,
    ApprovalHook,
    Budgets,
    CompactionEvent,
    ContextPolicy,
    Deny,
    Edit,
    FinalEvent,
    ModelSettings,
    PendingCall,
    RunResult,
    StopReason,
    ToolResultEvent,
    TurnEndEvent,
)

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
    "ContextPolicy",
    "Deny",
    "Edit",
    "FinalEvent",
    "ModelSettings",
    "PendingCall",
    "RunResult",
    "SessionWriter",
    "StopReason",
    "ToolResultEvent",
    "TurnEndEvent",
    "load_session",
]
