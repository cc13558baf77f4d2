"""Engines: where K3 runs, as transports. Token engines take K3 prompt ids and stream raw K3 text
(:class:`VLLMEngine` in-process, :class:`RemoteEngine` in raw mode, :class:`ScriptedEngine` for
tests); chat engines stream deltas a server parsed (:class:`RemoteEngine` in chat mode). Every
``engine.stream(request)`` returns a :class:`ModelCall`."""

from .._defaults import ReasoningEffort
from ..formats.k3 import PromptCache, RawChunk
from ..types import ChatCompletion, ChatRequest, Choice, Usage
from ._base import Engine, ModelCall, TokenEngine
from ._preflight import Finding, PreflightReport, preflight
from ._presets import FEATURES, Preset
from ._remote import RemoteEngine
from ._scripted import ScriptedCall, ScriptedEngine
from ._vllm import PRESETS, VLLMEngine

RawTextEngine = TokenEngine
"""The former name of :class:`TokenEngine`."""

__all__ = [
    "FEATURES",
    "PRESETS",
    "ChatCompletion",
    "ChatRequest",
    "Choice",
    "Engine",
    "Finding",
    "ModelCall",
    "PreflightReport",
    "Preset",
    "PromptCache",
    "RawChunk",
    "RawTextEngine",
    "ReasoningEffort",
    "RemoteEngine",
    "ScriptedCall",
    "ScriptedEngine",
    "TokenEngine",
    "Usage",
    "VLLMEngine",
    "preflight",
]
