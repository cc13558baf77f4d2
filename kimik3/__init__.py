"""kimik3: an async Python SDK and agent framework for Moonshot's Kimi K3."""

from contextlib import suppress as _suppress
from typing import TYPE_CHECKING

from ._client import Client
from ._exceptions import (
    AgentError,
    APIConnectionError,
    APIResponseValidationError,
    APIStatusError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    CheckpointError,
    ContextLengthExceededError,
    EngineError,
    EngineNotAvailableError,
    EngineRequestError,
    ImageTooLargeError,
    InvalidArgumentsError,
    InvalidEffortError,
    InvalidRequestError,
    JSONLimitError,
    KimiK3Error,
    MCPServerError,
    MediaDecodeError,
    MediaError,
    MessageError,
    NotFoundError,
    NoVideoStreamError,
    ParserStateError,
    RateLimitError,
    RequestTooLargeError,
    SandboxUnavailableError,
    ServiceUnavailableError,
    SessionError,
    TokenizerError,
    ToolArgumentsError,
    ToolDefinitionError,
    ToolError,
    ToolNameError,
    ToolTimeoutError,
    UnknownContentPartError,
    UnknownRoleError,
    UserError,
    VideoTooLongError,
)
from ._pricing import Pricing
from ._tracing import set_capture_content
from .agents import (
    Agent,
    AgentEvent,
    Allow,
    Budgets,
    CompactionEvent,
    ContentDelta,
    ContextPolicy,
    Defer,
    Deny,
    Edit,
    FinalEvent,
    Guardrail,
    GuardrailResult,
    GuardrailTrip,
    ModelSettings,
    ReasoningDelta,
    RunResult,
    ToolCallApprovedEvent,
    ToolCallArgumentsDelta,
    ToolCallDone,
    ToolCallIncomplete,
    ToolCallStarted,
    ToolResultEvent,
    TurnEndEvent,
    input_guardrail,
    output_guardrail,
    tool_input_guardrail,
    tool_output_guardrail,
)
from .engines import Engine, ModelCall, RemoteEngine, ScriptedEngine
from .formats.k3 import K3Tokenizer, PromptEncoder
from .tools import FunctionTool, Tool, ToolResult, tool
from .types import (
    AssistantMessage,
    ChatCompletion,
    ChatRequest,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    ToolSpec,
    Usage,
    UserMessage,
)

if TYPE_CHECKING:
    from ._verify import verify
    from .engines import RemoteCompletionsEngine, VLLMEngine

__version__ = "0.1.0"

__all__ = [
    "APIConnectionError",
    "APIResponseValidationError",
    "APIStatusError",
    "APITimeoutError",
    "Agent",
    "AgentError",
    "AgentEvent",
    "Allow",
    "AssistantMessage",
    "AuthenticationError",
    "BadRequestError",
    "Budgets",
    "ChatCompletion",
    "ChatRequest",
    "CheckpointError",
    "Client",
    "CompactionEvent",
    "ContentDelta",
    "ContextLengthExceededError",
    "ContextPolicy",
    "Defer",
    "Deny",
    "Edit",
    "Engine",
    "EngineError",
    "EngineNotAvailableError",
    "EngineRequestError",
    "FinalEvent",
    "FunctionTool",
    "Guardrail",
    "GuardrailResult",
    "GuardrailTrip",
    "ImageTooLargeError",
    "InvalidArgumentsError",
    "InvalidEffortError",
    "InvalidRequestError",
    "JSONLimitError",
    "K3Tokenizer",
    "KimiK3Error",
    "MCPServerError",
    "MediaDecodeError",
    "MediaError",
    "Message",
    "MessageError",
    "ModelCall",
    "ModelSettings",
    "NoVideoStreamError",
    "NotFoundError",
    "ParserStateError",
    "Pricing",
    "PromptEncoder",
    "RateLimitError",
    "ReasoningDelta",
    "RemoteCompletionsEngine",
    "RemoteEngine",
    "RequestTooLargeError",
    "RunResult",
    "SandboxUnavailableError",
    "ScriptedEngine",
    "ServiceUnavailableError",
    "SessionError",
    "SystemMessage",
    "TokenizerError",
    "Tool",
    "ToolArgumentsError",
    "ToolCall",
    "ToolCallApprovedEvent",
    "ToolCallArgumentsDelta",
    "ToolCallDone",
    "ToolCallIncomplete",
    "ToolCallStarted",
    "ToolDefinitionError",
    "ToolError",
    "ToolMessage",
    "ToolNameError",
    "ToolResult",
    "ToolResultEvent",
    "ToolSpec",
    "ToolTimeoutError",
    "TurnEndEvent",
    "UnknownContentPartError",
    "UnknownRoleError",
    "Usage",
    "UserError",
    "UserMessage",
    "VLLMEngine",
    "VideoTooLongError",
    "__version__",
    "input_guardrail",
    "output_guardrail",
    "set_capture_content",
    "tool",
    "tool_input_guardrail",
    "tool_output_guardrail",
    "verify",
]

# Names imported at first use, not by ``import kimik3`` (start-up time: ``verify`` pulls in httpx,
# jsonschema, Pillow and PyAV; the completions and vLLM engines their presets and pre-flight
# checks, issue 44 point 5): name -> its module.
_LAZY = {"verify": "._verify", "RemoteCompletionsEngine": ".engines", "VLLMEngine": ".engines"}


def _public(obj: object) -> None:
    """Public names report the package they are used from (docs, reprs, tracebacks), as httpx does."""
    if isinstance(obj, type) or (callable(obj) and hasattr(obj, "__module__")):
        with _suppress(AttributeError, TypeError):  # read-only on a few builtins
            obj.__module__ = "kimik3"


def __getattr__(name: str) -> object:
    """A lazy public name (:data:`_LAZY`), imported on first access and kept."""
    if name not in _LAZY:
        raise AttributeError(f"module 'kimik3' has no attribute {name!r}")
    from importlib import import_module

    obj: object = getattr(import_module(_LAZY[name], __name__), name)
    _public(obj)
    globals()[name] = obj
    return obj


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


for _name in __all__:
    if _name not in _LAZY:
        _public(globals()[_name])
del _name
