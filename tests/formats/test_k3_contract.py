"""Requests K3's endpoint contract says must be rejected raise InvalidRequestError before any
network call (kimik3.formats.k3.check_request, run by every ChatRequest)."""

from __future__ import annotations

from typing import Any

import pytest

from kimik3 import Client, InvalidEffortError, InvalidRequestError, JSONLimitError, MessageError
from kimik3.engines import ChatRequest
from kimik3.formats.k3 import check_request, render
from kimik3.types import to_messages, to_tool_specs


def _tool(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}


CALL = {"id": "c1", "type": "function", "function": {"name": "a", "arguments": "{}"}}
HI = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("messages", "tools", "match"),
    [
        (HI, [_tool("a"), _tool("a")], "duplicate tool name.*'a'"),
        (HI, [_tool("a"), _tool("b"), _tool("b"), _tool("a")], r"'b', 'a'"),
        ([{"role": "system", "tools": [_tool("w"), _tool("w")]}, *HI], [], "duplicate tool name.*system message #0"),
        ([{"role": "user", "content": "hi", "tools": [_tool("a")]}], [], r"message #0 \(role 'user'\) carries tools"),
        ([*HI, {"role": "assistant", "content": "", "tools": [_tool("a")]}], [], "role 'assistant'"),
        ([*HI, {"role": "assistant", "content": "", "tool_calls": [CALL]}, {"role": "tool", "content": "r", "tools": []}],
         [], "role 'tool'"),
        ([*HI, {"role": "assistant", "content": "", "tool_calls": [CALL]}, {"role": "tool", "content": "r"}],
         [_tool("a")], "tool message #2 has no tool_call_id"),
        ([*HI, {"role": "assistant", "content": "", "tool_calls": [CALL]}, {"role": "tool", "name": "a", "content": "r", "tool_call_id": ""}],
         [_tool("a")], "no tool_call_id"),
        ([{"role": "system", "content": "Be brief.", "tools": [_tool("a")]}, *HI], [], "both tools and content"),
        ([{"role": "developer", "content": [{"type": "text", "text": "x"}], "tools": [_tool("a")]}, *HI], [], "both tools and content"),
    ],
)  # fmt: skip
def test_contract_violations(messages: list[Any], tools: list[Any], match: str) -> None:
    with pytest.raises(InvalidRequestError, match=match):
        check_request(to_messages(messages), to_tool_specs(tools))
    with pytest.raises(InvalidRequestError, match=match):
        ChatRequest(messages=messages, tools=tools)


def test_conforming_requests_pass() -> None:
    msgs = [
        {"role": "system", "tools": [_tool("w")]},  # dynamic tools: content-less system message
        {"role": "system", "content": "Be brief."},
        *HI,
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "c1", "content": "r"},
    ]
    request = ChatRequest(messages=msgs, tools=[_tool("a"), _tool("b")], tool_choice="required")  # type: ignore[arg-type]
    assert len(request.messages) == 5 and [t.function.name for t in request.tools] == ["a", "b"]
    # the same name in the request's tools and in a dynamic declaration: refused (Vendor Verifier)
    with pytest.raises(InvalidRequestError, match=r"duplicate tool name\(s\) in system message #0: 'w'"):
        check_request(to_messages(msgs), to_tool_specs([_tool("w")]))


@pytest.mark.parametrize(
    "options",
    [{"tool_choice": {"type": "function", "function": {"name": "a"}}}, {"tool_choice": "any"},
     {"response_format": {"type": "yaml"}}, {"response_format": {"type": "json_schema"}}],
)  # fmt: skip
def test_unsupported_directives_are_refused_at_request_time(options: dict[str, Any]) -> None:
    with pytest.raises(MessageError):
        ChatRequest(messages=HI, tools=[_tool("a")], **options)  # type: ignore[arg-type]


async def test_refused_before_any_network_call() -> None:
    # port 9 (discard) on loopback: a request that went out would end in APIConnectionError
    client = Client(base_url="http://127.0.0.1:9/v1", model="k3", max_retries=0)
    try:
        with pytest.raises(InvalidRequestError, match="duplicate tool name"):
            await client.chat(HI, tools=[_tool("a"), _tool("a")])
        with pytest.raises(InvalidRequestError, match="no tool_call_id"):
            await client.chat([*HI, {"role": "assistant", "content": "", "tool_calls": [CALL]},
                               {"role": "tool", "content": "r"}])  # fmt: skip
        with pytest.raises(InvalidEffortError):
            await client.chat(HI, reasoning_effort="medium")  # type: ignore[arg-type]
    finally:
        await client.aclose()


def _deep(n: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(n):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


@pytest.mark.parametrize(
    ("response_format", "error", "match"),
    [
        ({"type": "json_schema", "json_schema": {"name": "answer"}}, InvalidRequestError,
         r"needs a 'schema' object \(a JSON Schema\), got no 'schema'"),
        ({"type": "json_schema", "json_schema": {"name": "a", "schema": "object"}}, InvalidRequestError,
         "got a str 'schema'"),
        ({"type": "json_schema", "json_schema": {"name": "a", "schema": None}}, InvalidRequestError, "got no 'schema'"),
        ({"type": "json_schema", "json_schema": {"name": "a", "schema": {"enum": {1, 2}}}}, JSONLimitError,
         r"a set value \(\{1, 2\}\) is not JSON data"),
        ({"type": "json_schema", "json_schema": {"schema": {1: "a", "b": 2}}}, JSONLimitError,
         "an object key is int 1, not a string"),
        ({"type": "json_schema", "json_schema": {"schema": _deep(3000)}}, JSONLimitError,
         "nested deeper than 128 arrays/objects"),
        ({"type": "json_schema", "json_schema": {"json_schema": {"enum": [b"x"]}}}, JSONLimitError, "a bytes value"),
    ],
)  # fmt: skip
def test_bad_json_schema_response_format_is_typed(response_format: Any, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        ChatRequest(messages=HI, response_format=response_format)
    with pytest.raises(error, match=match):
        render(HI, response_format=response_format)


def test_json_schema_under_schema_or_vllms_json_schema_key_renders_the_same() -> None:
    schema = {"type": "object", "properties": {"b": {"type": "string"}, "a": {"type": "number"}}}
    openai = render(HI, response_format={"type": "json_schema", "json_schema": {"name": "r", "schema": schema}})
    vllm = render(HI, response_format={"type": "json_schema", "json_schema": {"name": "r", "json_schema": schema}})
    assert openai == vllm
    assert '{"properties":{"a":{"type":"number"},"b":{"type":"string"}},"type":"object"}' in openai


def test_tool_schema_that_is_not_json_is_typed() -> None:
    tool = {"type": "function", "function": {"name": "a", "parameters": {"type": "object", "properties": _deep(300)}}}
    with pytest.raises(JSONLimitError, match="nested deeper than 128"):
        render(HI, [tool])


@pytest.mark.parametrize(
    ("messages", "tools"),
    [(HI, []), ([{"role": "system", "tools": []}, *HI], []), ([{"role": "system", "content": "x", "tools": []}, *HI], [])],
)  # fmt: skip
def test_tool_choice_required_without_declared_tools_is_refused(messages: list[Any], tools: list[Any]) -> None:
    with pytest.raises(InvalidRequestError, match="tool_choice 'required' with no tools declared"):
        ChatRequest(messages=messages, tools=tools, tool_choice="required")


def test_tool_choice_required_with_only_dynamic_tools_passes() -> None:
    request = ChatRequest(messages=[{"role": "system", "tools": [_tool("w")]}, *HI], tool_choice="required")
    assert request.tool_choice == "required"
    ChatRequest(messages=HI, tool_choice="none")  # none/auto without tools: nothing to refuse


@pytest.mark.parametrize("role", ["system", "developer"])
def test_empty_tools_with_content_is_a_plain_system_message(role: str) -> None:
    with_empty = render([{"role": role, "content": "Be brief.", "tools": []}, *HI])
    plain = render([{"role": "system", "content": "Be brief."}, *HI])
    assert with_empty == plain
    assert '<|open|>message role="system"<|sep|>Be brief.<|close|>message<|sep|><|end_of_msg|>' in plain
    assert "tool-declare" not in with_empty
    ChatRequest(messages=[{"role": role, "content": "Be brief.", "tools": []}, *HI])
    # with tools declared, content is still refused (the reference would drop one of them)
    with pytest.raises(InvalidRequestError, match="carries both tools and content"):
        ChatRequest(messages=[{"role": role, "content": "Be brief.", "tools": [_tool("w")]}, *HI])
    # without content, `tools: []` keeps the reference's (empty) dynamic declaration
    assert 'type="tool-declare"' in render([{"role": role, "tools": []}, *HI])


@pytest.mark.parametrize(("messages", "got"), [(None, "NoneType"), ("hi", "str"), ({"role": "user"}, "dict"), (5, "int")])
def test_messages_that_are_not_a_list_are_typed(messages: Any, got: str) -> None:
    with pytest.raises(MessageError, match=f"messages must be a list of messages, got {got}"):
        ChatRequest(messages=messages)
