"""Requests K3's endpoint contract says must be rejected raise InvalidRequestError before any
network call (kimik3.formats.k3.check_request, run by every ChatRequest)."""

from __future__ import annotations

from typing import Any

import pytest

from kimik3 import Client, InvalidEffortError, InvalidRequestError, MessageError
from kimik3.engines import ChatRequest
from kimik3.formats.k3 import check_request
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
    # the same name in the request's tools and in a dynamic declaration is two declarations
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
