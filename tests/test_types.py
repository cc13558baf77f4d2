"""Typed messages accept OpenAI dict shapes and dump back to them."""

from __future__ import annotations

import json

import pytest

from kimik3 import AssistantMessage, MessageError, ToolMessage, UnknownContentPartError, UnknownRoleError
from kimik3.types import (
    ImagePart,
    SystemMessage,
    TextPart,
    VideoPart,
    dump_message,
    message_text,
    to_message,
    to_tool_specs,
)


def test_arguments_as_string_or_dict_keep_key_order() -> None:
    as_dict = to_message(
        {"role": "assistant", "content": None, "tool_calls": [{"id": "1", "function": {"name": "f", "arguments": {"b": 1, "a": "x"}}}]}
    )
    as_str = to_message(
        {"role": "assistant", "content": None, "tool_calls": [{"id": "1", "function": {"name": "f", "arguments": '{"b": 1, "a": "x"}'}}]}
    )
    assert isinstance(as_dict, AssistantMessage) and isinstance(as_str, AssistantMessage)
    assert as_dict.tool_calls is not None and as_str.tool_calls is not None
    assert as_dict.tool_calls[0].function.arguments == '{"b": 1, "a": "x"}'
    assert as_str.tool_calls[0].function.parsed_arguments() == {"b": 1, "a": "x"}
    assert list(as_str.tool_calls[0].function.parsed_arguments()) == ["b", "a"]


def test_reasoning_read_from_either_name_and_dumped_under_both() -> None:
    for key in ("reasoning_content", "reasoning"):
        msg = to_message({"role": "assistant", "content": "4", key: "2+2"})
        assert isinstance(msg, AssistantMessage) and msg.reasoning_content == "2+2"
        out = dump_message(msg)
        assert out["reasoning_content"] == "2+2" and out["reasoning"] == "2+2"
        assert out["role"] == "assistant" and out["content"] == "4"


def test_dump_round_trips_openai_shape_and_keeps_extras() -> None:
    raw = {
        "role": "assistant",
        "content": None,
        "reasoning_content": "r",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}],
        "refusal": None,
        "vendor_field": {"k": 1},
    }
    out = dump_message(raw)
    assert out == {
        "role": "assistant",
        "content": None,
        "reasoning_content": "r",
        "reasoning": "r",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}],
        "vendor_field": {"k": 1},
    }
    assert json.loads(json.dumps(out)) == out


def test_content_parts() -> None:
    msg = to_message(
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}},
                {"type": "image", "image": "https://x/y.png"},
                {"type": "video_url", "video_url": "clip.mp4"},
            ],
        }
    )
    assert isinstance(msg.content, list)
    kinds = [type(p) for p in msg.content]
    assert kinds == [TextPart, ImagePart, ImagePart, VideoPart]
    assert isinstance(msg.content[2], ImagePart) and msg.content[2].image_url.url == "https://x/y.png"
    assert message_text(msg.content) == "look"


def test_tool_message_name_alias() -> None:
    msg = to_message({"role": "tool", "tool": "ls", "tool_call_id": "c", "content": "x"})
    assert isinstance(msg, ToolMessage) and msg.name == "ls"


def test_dynamic_tools_system_message() -> None:
    msg = to_message({"role": "system", "tools": [{"type": "function", "function": {"name": "f"}}]})
    assert isinstance(msg, SystemMessage) and msg.tools is not None and msg.tools[0].function.name == "f"


def test_bare_function_tool_spec_is_wrapped() -> None:
    (spec,) = to_tool_specs([{"name": "f", "parameters": {"type": "object"}}])
    assert spec.model_dump(exclude_none=True) == {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}


def test_errors() -> None:
    with pytest.raises(UnknownRoleError):
        to_message({"content": "no role"})
    with pytest.raises(UnknownContentPartError, match="'input_audio'"):
        to_message({"role": "user", "content": [{"type": "input_audio"}]})
    with pytest.raises(MessageError):
        to_message({"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]})
    with pytest.raises(MessageError):
        to_message(["not", "a", "dict"])  # type: ignore[arg-type]
