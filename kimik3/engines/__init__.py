"""Engines: where K3 runs. One async protocol over a remote OpenAI-compatible endpoint
(:class:`RemoteEngine`), vLLM embedded in-process (:class:`VLLMEngine`) and scripted replies
(:class:`ScriptedEngine`, for tests)."""

from ._base import (
    ChatCompletion,
    ChatRequest,
    Choice,
    Completed,
    Engine,
    PromptCache,
    RawChunk,
    RawTextEngine,
    ReasoningEffort,
    StreamEvent,
    Usage,
)
from ._preflight import Finding, PreflightReport, preflight
from ._remote import RemoteEngine
from ._scripted import ScriptedCall, ScriptedEngine
from ._vllm import PRESETS, VLLMEngine

__all__ = [
    "PRESETS",
    "ChatCompletion",
    "ChatRequest",
    "Choice",
    "Completed",
    "Engine",
    "Finding",
    "PreflightReport",
    "PromptCache",
    "RawChunk",
    "RawTextEngine",
    "ReasoningEffort",
    "RemoteEngine",
    "ScriptedCall",
    "ScriptedEngine",
    "StreamEvent",
    "Usage",
    "VLLMEngine",
    "preflight",
]
