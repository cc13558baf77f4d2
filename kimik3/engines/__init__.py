"""Engines: where K3 runs, as transports. Token engines take K3 prompt ids and stream raw K3 text
(:class:`VLLMEngine` in-process, :class:`RemoteCompletionsEngine` over a ``/v1/completions``
endpoint, :class:`ScriptedEngine` for tests); chat engines stream deltas a server parsed
(:class:`RemoteEngine` over a chat-completions endpoint). :class:`ChatForImages` composes the two
for raw mode against a server whose completions take no images. Every ``engine.stream(request)``
returns a :class:`ModelCall`."""

from .._defaults import ReasoningEffort
from ..formats.k3 import PromptCache, RawChunk
from ..types import ChatCompletion, ChatRequest, Choice, Usage
from ._base import CallSource as CallSource
from ._base import ChatEngine, Engine, ModelCall, TokenEngine
from ._completions import ChatForImages, RemoteCompletionsEngine
from ._endpoint import OpenAIEndpoint
from ._preflight import Finding, PreflightReport, preflight
from ._presets import DEPRECATED_PRESETS as DEPRECATED_PRESETS
from ._presets import FEATURES, Preset
from ._quiet import kimik3_home as kimik3_home
from ._quiet import output_to as output_to
from ._quiet import vllm_log_path as vllm_log_path
from ._quiet import without_leak_warnings as without_leak_warnings
from ._remote import RemoteEngine
from ._scripted import ScriptedCall, ScriptedEngine
from ._vllm import PRESETS, VLLMEngine
from ._vllm import server_command as server_command
from ._vllm import start_failure as start_failure

# Imported `as` themselves and left out of __all__ (the user API): names kimik3's other packages use of
# this package's private modules, so that none imports another package's `_module` (issue 42,
# tests/test_architecture.py).
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
