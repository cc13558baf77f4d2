"""Past reasoning's field names in chat mode: both by default, one where a server refuses both.

vLLM's Rust frontend (vllm-rs 0.33, turned on by vLLM's K3 recipe) reads ``reasoning_content`` as
an alias of ``reasoning`` and answers a message carrying both with a 400 "duplicate field
`reasoning`" (pinned against the real binary in tests/formats/test_k3_vllm_rs_oracle.py).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from kimik3 import BadRequestError, Client, RemoteEngine, UserError
from tests.engines.sse_server import Reply, SSEServer, sse
from tests.engines.test_chat_transcripts import d

HISTORY: list[dict[str, Any]] = [
    {"role": "user", "content": "q"},
    {"role": "assistant", "content": "a", "reasoning_content": "thought"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "r"},
    {"role": "user", "content": "again"},
]
# the body vllm-rs sends (axum's JSON rejection text, serde's words)
VLLM_RS_400 = (b"Failed to deserialize the JSON body into the target type: messages[1]: duplicate field "
               b"`reasoning` at line 1 column 230")


def rust_frontend(n: int, body: dict[str, Any]) -> Reply:
    """Refuses any message with both names, like vllm-rs; otherwise answers "ok"."""
    if any("reasoning" in m and "reasoning_content" in m for m in body["messages"]):
        return Reply(status=400, headers={"content-type": "text/plain"}, parts=[VLLM_RS_400])
    return Reply(parts=sse([d({"content": "ok"}, "stop")]))


def assistant_keys(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [{k: m[k] for k in ("reasoning", "reasoning_content") if k in m}
            for m in body["messages"] if m["role"] == "assistant"]


async def test_both_names_by_default() -> None:
    async with SSEServer([Reply(parts=sse([d({"content": "ok"}, "stop")]))]) as server:
        out = await Client(RemoteEngine(base_url=server.base_url, model="k3")).chat(HISTORY)
    assert out.message.content == "ok"
    assert assistant_keys(server.requests[0]["body"]) == [
        {"reasoning": "thought", "reasoning_content": "thought"}, {"reasoning": "", "reasoning_content": ""}]


async def test_a_rust_frontend_400_switches_to_one_name_and_sends_again(caplog: pytest.LogCaptureFixture) -> None:
    async with SSEServer(rust_frontend) as server:
        engine = RemoteEngine(base_url=server.base_url, model="k3")
        client = Client(engine, max_retries=0)  # the switch is not a retry: it happens with retries off
        first = await client.chat(HISTORY)
        second = await client.chat(HISTORY)
    assert (first.message.content, second.message.content) == ("ok", "ok")
    assert engine.reasoning_field == "both"  # the configuration is never rewritten
    assert engine.endpoint.refuses_both_reasoning_fields and engine.wire_reasoning_field == "reasoning"
    assert [r["body"]["messages"][1].keys() >= {"reasoning", "reasoning_content"} for r in server.requests] == [
        True, False, False]  # one refused request, then one name for good
    assert assistant_keys(server.requests[1]["body"]) == [{"reasoning": "thought"}, {"reasoning": ""}]
    assert "sending it as 'reasoning' only" in caplog.text


@pytest.mark.parametrize("field", ["reasoning", "reasoning_content"])
async def test_one_name_chosen_up_front(field: str) -> None:
    async with SSEServer(rust_frontend) as server:
        out = await Client(RemoteEngine(base_url=server.base_url, model="k3", reasoning_field=field)).chat(HISTORY)  # type: ignore[arg-type]
    assert out.message.content == "ok" and len(server.requests) == 1
    assert assistant_keys(server.requests[0]["body"]) == [{field: "thought"}, {field: ""}]


async def test_other_400s_are_not_taken_for_it() -> None:
    body = json.dumps({"error": {"message": "messages[1]: unknown field `reasonin`", "type": "BadRequestError",
                                 "code": 400}}).encode()
    async with SSEServer([Reply(status=400, headers={"content-type": "application/json"}, parts=[body])]) as server:
        engine = RemoteEngine(base_url=server.base_url, model="k3")
        with pytest.raises(BadRequestError, match="unknown field"):
            await Client(engine, max_retries=0).chat(HISTORY)
    assert engine.wire_reasoning_field == "both" and len(server.requests) == 1


def test_an_unknown_field_name_is_misuse() -> None:
    with pytest.raises(UserError, match="reasoning_field must be one of both, reasoning, reasoning_content"):
        RemoteEngine(base_url="http://127.0.0.1:9/v1", model="k3", reasoning_field="thoughts")  # type: ignore[arg-type]


async def test_a_plain_text_400_keeps_its_words() -> None:
    """openai-python keeps only "Error code: 400" as the message of a streamed text body; kimik3's
    error carries the server's words (the evidence)."""
    async with SSEServer([Reply(status=400, headers={"content-type": "text/plain"}, parts=[b"prompt too long"])]) as s:
        with pytest.raises(BadRequestError) as info:
            await Client(RemoteEngine(base_url=s.base_url, model="k3"), max_retries=0).chat(HISTORY)
    assert str(info.value).endswith("Error code: 400 - prompt too long")
