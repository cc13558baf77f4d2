"""The curated public API: exactly these names, each importable and documented (like httpx)."""

from __future__ import annotations

import importlib
import inspect

import kimik3

EXPECTED = [
    "APIConnectionError", "APIResponseValidationError", "APIStatusError", "APITimeoutError", "Agent", "AgentError", "AgentEvent",
    "Allow", "AssistantMessage", "AuthenticationError", "BadRequestError", "Budgets", "ChatCompletion",
    "ChatRequest", "CheckpointError", "Client", "CompactionEvent", "ContentDelta", "ContextLengthExceededError",
    "ContextPolicy", "Defer", "Deny", "Edit", "Engine", "EngineError", "EngineNotAvailableError",
    "EngineRequestError", "FinalEvent", "FunctionTool", "Guardrail", "GuardrailResult", "GuardrailTrip", "ImageTooLargeError", "InvalidArgumentsError",
    "InvalidEffortError", "InvalidRequestError", "JSONLimitError", "K3Tokenizer", "KimiK3Error", "MCPServerError", "MediaDecodeError", "MediaError", "Message",
    "MessageError", "ModelCall", "ModelSettings", "NoVideoStreamError", "NotFoundError",
    "ParserStateError", "Pricing", "PromptEncoder", "RateLimitError", "ReasoningDelta", "RemoteCompletionsEngine",
    "RemoteEngine", "RequestTooLargeError", "RunResult", "SandboxUnavailableError", "ScriptedEngine", "ServiceUnavailableError", "SessionError",
    "SystemMessage",
    "TokenizerError", "Tool", "ToolArgumentsError", "ToolCall", "ToolCallApprovedEvent",
    "ToolCallArgumentsDelta", "ToolCallDone", "ToolCallIncomplete", "ToolCallStarted",
    "ToolDefinitionError", "ToolError", "ToolMessage", "ToolNameError", "ToolResult", "ToolResultEvent",
    "ToolSpec", "ToolTimeoutError", "TurnEndEvent", "UnknownContentPartError", "UnknownRoleError", "Usage", "UserError",
    "UserMessage", "VLLMEngine", "VideoTooLongError", "__version__", "input_guardrail", "output_guardrail", "set_capture_content",
    "tool",
    "tool_input_guardrail", "tool_output_guardrail", "verify",
]  # fmt: skip


def test_exported_names_are_exactly_these() -> None:
    assert kimik3.__all__ == EXPECTED
    assert sorted(kimik3.__all__) == kimik3.__all__


def test_every_public_name_is_documented() -> None:
    for name in kimik3.__all__:
        obj = getattr(kimik3, name)
        if name in ("__version__", "Message", "AgentEvent"):  # a string, and type aliases
            continue
        assert inspect.getdoc(obj), f"kimik3.{name} has no docstring"


def test_every_error_is_a_kimik3_error() -> None:
    for name in kimik3.__all__:
        obj = getattr(kimik3, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, kimik3.KimiK3Error), name


def test_subpackages_have_sorted_all() -> None:
    for mod in ("kimik3.formats.k3", "kimik3.engines", "kimik3.agents", "kimik3.tools", "kimik3.media"):
        names = importlib.import_module(mod).__all__
        assert len(set(names)) == len(names), mod
        for name in names:
            assert hasattr(importlib.import_module(mod), name), f"{mod}.{name}"


def test_public_names_report_the_package() -> None:
    for name in ("Agent", "Client", "ChatCompletion", "K3Tokenizer", "ModelCall", "UserError", "ToolCallDone", "tool"):
        assert getattr(kimik3, name).__module__ == "kimik3", name
