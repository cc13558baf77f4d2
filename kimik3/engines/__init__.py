"""Engines: where K3 runs, as transports. Token engines take K3 prompt ids and stream raw K3 text
(:class:`VLLMEngine` in-process, :class:`RemoteCompletionsEngine` over a ``/v1/completions``
endpoint, :class:`ScriptedEngine` for tests); chat engines stream deltas a server parsed
(:class:`RemoteEngine` over a chat-completions endpoint). :class:`ChatForImages` composes the two
for raw mode against a server whose completions take no images. Every ``engine.stream(request)``
returns a :class:`ModelCall`."""

from .._defaults import ReasoningEffort
from ..formats.k3 import PromptCache, RawChunk
from ..types import ChatCompletion, ChatRequest, Choice, Usage
from ._base import ChatEngine, Engine, ModelCall, TokenEngine
from ._completions import ChatForImages, RemoteCompletionsEngine
from ._endpoint import OpenAIEndpoint
from ._preflight import Finding, PreflightReport, preflight
from ._presets import FEATURES, Preset
from ._remote import RemoteEngine
from ._scripted import ScriptedCall, ScriptedEngine
from ._vllm import PRESETS, VLLMEngine

__all__ = [
    "FEATURES",
    "PRESETS",
    "ChatCompletion",
    "ChatEngine",
    "ChatForImages",
    "ChatRequest",
    "Choice",
    "Engine",
    "Finding",
    "ModelCall",
    "OpenAIEndpoint",
    "PreflightReport",
    "Preset",
    "PromptCache",
    "RawChunk",
    "ReasoningEffort",
    "RemoteCompletionsEngine",
    "RemoteEngine",
    "ScriptedCall",
    "ScriptedEngine",
    "TokenEngine",
    "Usage",
    "VLLMEngine",
    "preflight",
]
