"""A tool message's tokens counted as its framing (once per tool name) plus its text (issue 44):
the same count as encoding the message's segments, for every text and name shape."""

from __future__ import annotations

import pytest

from kimik3.formats.k3 import default_tokenizer, message_tokens
from kimik3.formats.k3._encode import RenderedMessage, message_segments
from kimik3.types import TextPart, ToolMessage

TEXTS = ["x", "def function(value):\n    return value + 13\n", "a" * 48, "b" * 49, "<|open|>message<|sep|>",
         'héllo & "quote" ' * 30, " " * 30_000, "日本語" * 100, "[BOS] [exit code: 0, 0.01 s]"]


def _encoded(message: ToolMessage) -> int:
    tok = default_tokenizer()
    return len(tok.encode_segments(message_segments(RenderedMessage(message, message.name or "tool", 1))))


@pytest.mark.parametrize("name", [None, "read_file", 'we"ird&name'])
@pytest.mark.parametrize("text", TEXTS)
def test_tool_message_count_is_its_encoded_length(text: str, name: str | None) -> None:
    message = ToolMessage(content=text, tool_call_id="c1", name=name)
    assert message_tokens(message, default_tokenizer()) == _encoded(message)


def test_golden_count_and_the_other_shapes() -> None:
    tok = default_tokenizer()
    text = ToolMessage(content="def function(value):\n    return value + 13\n", tool_call_id="c1", name="read_file")
    assert message_tokens(text, tok) == 31  # as counted before this path existed (segment by segment)
    # parts and an empty text take the general path, with the same framing
    parts = ToolMessage(content=[TextPart(text="a"), TextPart(text="b")], tool_call_id="c1", name="read_file")
    empty = ToolMessage(content="", tool_call_id="c1", name="read_file")
    assert message_tokens(parts, tok) == _encoded(parts)
    assert message_tokens(empty, tok) == _encoded(empty) == message_tokens(text, tok) - len(tok.encode_text(
        "def function(value):\n    return value + 13\n"))
