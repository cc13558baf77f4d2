"""Typed, OpenAI-shaped chat messages, content parts, tool calls and tool specs (pydantic v2),
the request of one model call (:class:`ChatRequest`, with its validity rules
:func:`check_request` (a growing conversation's, each message once: :class:`RequestChecker`) and
its :class:`ModelSettings`) and its result (:class:`ChatCompletion`, :class:`Choice`, :class:`Usage`).

Every model accepts the OpenAI chat-completions dict shapes people already have and dumps back to
them (:meth:`Message.to_openai`-style via :func:`dump_message`):

- ``function.arguments`` may be a JSON string or a dict; it is stored as the JSON string, key order
  kept, because that is what the OpenAI shape carries and what K3 renders argument by argument.
- Reasoning is read from ``reasoning_content`` or ``reasoning`` (vLLM renamed the field) and dumped
  under both names with the same value.
- Unknown extra keys are kept and dumped back (nothing the caller sent is lost).
- Text that is not valid Unicode (lone surrogates, e.g. a file name read with
  ``surrogateescape``) is escaped visibly when a message is built, so every engine can encode it:
  ``U+DC80``-``U+DCFF`` become ``\\xNN`` (the undecodable byte), other lone surrogates
  ``\\udNNN`` (message contents, text parts and reasoning): the file name ``b"caf\\xe9.txt"``
  decoded with ``surrogateescape`` reaches the model as the text ``caf\\xe9.txt``.

Use :func:`to_message` / :func:`to_messages` to turn dicts (or models) into typed messages; an
unknown role raises :class:`~kimik3.UnknownRoleError`, an unknown content part
:class:`~kimik3.UnknownContentPartError`.
"""

from ._messages import (
    AssistantMessage,
    Content,
    ContentPart,
    FailedToolCall,
    FunctionCall,
    FunctionSpec,
    ImagePart,
    ImageURL,
    Message,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolMessage,
    ToolSpec,
    UserMessage,
    VideoPart,
    VideoURL,
    dump_message,
    dump_messages,
    message_text,
    to_message,
    to_messages,
    to_tool_specs,
)
from ._prefix import shared_prefix as shared_prefix
from ._request import (
    TOOL_NAME,
    ChatRequest,
    JSONSchemaFormat,
    RequestChecker,
    ResponseFormat,
    ToolChoice,
    check_request,
    response_format_schema,
    tool_choice_directive,
)
from ._results import CLOSED_MID_ANSWER as CLOSED_MID_ANSWER
from ._results import ChatCompletion, Choice, CompletionTokensDetails, FinishReason, PromptTokensDetails, Usage
from ._results import clamp_usage as clamp_usage
from ._routing import ROUTING_KEY, Routing
from ._settings import AGENTIC_SETTINGS, SINGLE_STEP_SETTINGS, ModelSettings

# Imported `as` themselves and left out of __all__ (the user API): names kimik3's other packages use of
# this package's private modules, so that none imports another package's `_module` (issue 42,
# tests/test_architecture.py).
__all__ = [
    "AGENTIC_SETTINGS",
    "ROUTING_KEY",
    "SINGLE_STEP_SETTINGS",
    "TOOL_NAME",
    "AssistantMessage",
    "ChatCompletion",
    "ChatRequest",
    "Choice",
    "CompletionTokensDetails",
    "Content",
    "ContentPart",
    "FailedToolCall",
    "FinishReason",
    "FunctionCall",
    "FunctionSpec",
    "ImagePart",
    "ImageURL",
    "JSONSchemaFormat",
    "Message",
    "ModelSettings",
    "PromptTokensDetails",
    "RequestChecker",
    "ResponseFormat",
    "Routing",
    "SystemMessage",
    "TextPart",
    "ToolCall",
    "ToolChoice",
    "ToolMessage",
    "ToolSpec",
    "Usage",
    "UserMessage",
    "VideoPart",
    "VideoURL",
    "check_request",
    "dump_message",
    "dump_messages",
    "message_text",
    "response_format_schema",
    "to_message",
    "to_messages",
    "to_tool_specs",
    "tool_choice_directive",
]
