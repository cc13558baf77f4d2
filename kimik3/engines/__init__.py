"""Engines: where K3 runs, as transports. Token engines take K3 prompt ids and stream raw K3 text
(:class:`VLLMEngine` in-process, :class:`RemoteCompletionsEngine` over a ``/v1/completions``
endpoint, :class:`ScriptedEngine` for tests); chat engines stream deltas a server parsed
(:class:`RemoteEngine` over a chat-completions endpoint). :class:`ChatForImages` composes the two
for raw mode against a server whose completions take no images. Every ``engine.stream(request)``
returns a :class:`ModelCall`."""

from typing import TYPE_CHECKING

from .._defaults import ReasoningEffort
from ..formats.k3 import PromptCache, RawChunk
from ..types import ChatCompletion, ChatRequest, Choice, Usage
from ._base import NO_COMPLETION as NO_COMPLETION
from ._base import CallSource as CallSource
from ._base import ChatEngine, Engine, ModelCall, TokenEngine
from ._endpoint import OpenAIEndpoint
from ._quiet import kimik3_home as kimik3_home
from ._quiet import output_to as output_to
from ._quiet import vllm_log_path as vllm_log_path
from ._quiet import without_leak_warnings as without_leak_warnings
from ._remote import RemoteEngine
from ._scripted import ScriptedCall, ScriptedEngine

if TYPE_CHECKING:
    from ._completions import ChatForImages, RemoteCompletionsEngine
    from ._preflight import Finding, PreflightReport, preflight
    from ._presets import DEPRECATED_PRESETS as DEPRECATED_PRESETS
    from ._presets import FEATURES, Preset
    from ._vllm import PRESETS, VLLMEngine
    from ._vllm import server_command as server_command
    from ._vllm import start_failure as start_failure

# Imported at first use, not by ``import kimik3`` (start-up time, issue 44 point 5: the completions
# engine, vLLM's engine, its presets and the pre-flight checks are ~10% of it): name -> its module.
_LAZY = {
    "ChatForImages": "._completions", "RemoteCompletionsEngine": "._completions",
    "Finding": "._preflight", "PreflightReport": "._preflight", "preflight": "._preflight",
    "FEATURES": "._presets", "Preset": "._presets", "DEPRECATED_PRESETS": "._presets",
    "PRESETS": "._vllm", "VLLMEngine": "._vllm", "server_command": "._vllm", "start_failure": "._vllm",
}


def __getattr__(name: str) -> object:
    """A lazy name (:data:`_LAZY`), imported on first access and kept."""
    if name not in _LAZY:
        raise AttributeError(f"module 'kimik3.engines' has no attribute {name!r}")
    from importlib import import_module

    obj: object = getattr(import_module(_LAZY[name], __name__), name)
    globals()[name] = obj
    return obj


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))

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
