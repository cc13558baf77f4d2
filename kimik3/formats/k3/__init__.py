"""Kimi K3's wire format, all of it: tokenizer, prompt encoding (full and incremental), media
tokens, output parsing, and the codec token engines use (docs/k3-format.md).

Pure functions and incremental state machines; no I/O beyond reading a model directory.
``check_request`` and ``TOOL_NAME`` (the request's validity rules, :mod:`kimik3.types`) and the JSON limits
(:mod:`kimik3._json`) are re-exported here under their former names.
"""

from ..._json import JSON_MAX_DEPTH, JSON_MAX_INT_DIGITS, check_json_limits, safe_loads
from ...types import TOOL_NAME, check_request
from ._codec import EncodedPrompt, K3Codec, K3Decoder, PromptCache, PromptEncoder, PromptIds, RawChunk, ids_list
from ._codec import media_scan as media_scan
from ._count import message_tokens
from ._encode import (
    CLOSE,
    END_OF_MSG,
    IMAGE_PLACEHOLDER,
    OPEN,
    SEP,
    THINKING_EFFORTS,
    RenderedMessage,
    Segment,
    ThinkingEffort,
    encode_segments,
    message_segments,
    normalize_messages,
    open_tool_run,
    prompt_header_segments,
    prompt_trailer_segments,
    protocol_bodies,
    render,
    render_output,
)
from ._events import (
    ContentDelta,
    Event,
    IncompleteToolCall,
    ParsedOutput,
    ParsedToolCall,
    ReasoningDelta,
    ToolCallArgumentsDelta,
    ToolCallDone,
    ToolCallIncomplete,
    ToolCallStarted,
    new_tool_call_id,
)
from ._media import image_prompt_tokens as image_prompt_tokens
from ._media import prepare_request_image as prepare_request_image
from ._media import upload_url as upload_url
from ._parse import StreamParser, parse
from ._recover import MarkedText, holds_markup, read_marked
from ._tokenizer import (
    K3_PAT_STR,
    K3Tokenizer,
    default_tokenizer,
    estimate_tokens,
    load_tiktoken_bpe,
    special_token_ids,
)
from ._values import duplicate_key

# Imported `as` themselves and left out of __all__ (the user API): names kimik3's other packages use of
# this package's private modules, so that none imports another package's `_module` (issue 42,
# tests/test_architecture.py).
__all__ = [
    "CLOSE",
    "END_OF_MSG",
    "IMAGE_PLACEHOLDER",
    "K3_PAT_STR",
    "JSON_MAX_DEPTH",
    "JSON_MAX_INT_DIGITS",
    "OPEN",
    "SEP",
    "THINKING_EFFORTS",
    "TOOL_NAME",
    "ContentDelta",
    "EncodedPrompt",
    "Event",
    "IncompleteToolCall",
    "K3Codec",
    "K3Decoder",
    "K3Tokenizer",
    "MarkedText",
    "ParsedOutput",
    "ParsedToolCall",
    "PromptCache",
    "PromptEncoder",
    "PromptIds",
    "RawChunk",
    "ReasoningDelta",
    "RenderedMessage",
    "Segment",
    "StreamParser",
    "ThinkingEffort",
    "ToolCallArgumentsDelta",
    "ToolCallDone",
    "ToolCallIncomplete",
    "ToolCallStarted",
    "check_json_limits",
    "check_request",
    "default_tokenizer",
    "duplicate_key",
    "encode_segments",
    "holds_markup",
    "estimate_tokens",
    "ids_list",
    "load_tiktoken_bpe",
    "message_segments",
    "message_tokens",
    "new_tool_call_id",
    "normalize_messages",
    "open_tool_run",
    "parse",
    "prompt_header_segments",
    "prompt_trailer_segments",
    "protocol_bodies",
    "read_marked",
    "render",
    "render_output",
    "special_token_ids",
    "safe_loads",
]
