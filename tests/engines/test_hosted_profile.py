"""Endpoint profiles (issue 31): one row per hosted rule, against a loopback stand-in for
Moonshot's API that enforces it (tests/engines/hosted_server.py): the request that breaks it
(the ``vllm`` profile's wire: the request as Moonshot's self-hosted contract writes it) is
refused with the API's words; the request kimik3 sends in the ``moonshot`` profile is accepted,
and its body is checked field by field."""

from __future__ import annotations

import base64
import io
import json
import logging
from typing import Any

import httpx
import openai
import pytest
from PIL import Image

from kimik3 import BadRequestError, Client, InvalidRequestError, MediaError, MessageError, RemoteEngine, UserError
from kimik3.engines._profiles import PROFILES, detect_profile
from tests.engines.hosted_server import HostedAPI, answer, image_rule, schema_rule
from tests.engines.sse_server import SSEServer

CALL = {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather.",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}


def tool(parameters: dict[str, Any], name: str = "t") -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": "A tool.", "parameters": parameters}}


def png_data_url() -> str:
    buf = io.BytesIO()
    Image.new("RGB", (28, 28), (200, 30, 30)).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


# (row, messages, tools, options) whose vllm-profile wire the hosted API refuses with `words`
ROWS: list[tuple[str, list[dict[str, Any]], list[dict[str, Any]], dict[str, Any], str]] = [
    ("assistant tool call with empty content",
     [{"role": "user", "content": "weather?"},
      {"role": "assistant", "content": "", "reasoning_content": "look", "tool_calls": [CALL]},
      {"role": "tool", "tool_call_id": "call_a", "content": "sunny"}], [WEATHER], {},
     "Invalid request: text content is empty"),
    ("assistant tool call with a blank text part",
     [{"role": "user", "content": "weather?"},
      {"role": "assistant", "content": [{"type": "text", "text": " "}], "tool_calls": [CALL]},
      {"role": "tool", "tool_call_id": "call_a", "content": "sunny"}], [WEATHER], {},
     "Invalid request: text content is empty"),
    ("assistant turn of reasoning only",
     [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "", "reasoning_content": "hmm"},
      {"role": "user", "content": "well?"}], [], {},
     "Invalid request: the message at position 1 with role 'assistant' must not be empty"),
    ("empty system message",
     [{"role": "system", "content": ""}, {"role": "user", "content": "hi"}], [], {},
     "Invalid request: the message at position 0 with role 'system' must not be empty"),
    ("dynamic tools system message",
     [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
      {"role": "system", "content": "", "tools": [WEATHER]}], [], {},
     "Invalid request: text content is empty"),
    ("property without type (enum)",
     [{"role": "user", "content": "hi"}], [tool({"type": "object", "properties": {"mode": {"enum": ["a", "b"]}}})],
     {}, "<At path 'properties.mode': type is not defined>"),
    ("property without type (nothing)",
     [{"role": "user", "content": "hi"}], [tool({"type": "object", "properties": {"any": {"description": "x"}}})],
     {}, "<At path 'properties.any': type is not defined>"),
    ("$ref into #/definitions",
     [{"role": "user", "content": "hi"}],
     [tool({"type": "object", "properties": {"f": {"$ref": "#/definitions/F"}},
            "definitions": {"F": {"type": "object", "properties": {"x": {"type": "integer"}}}}})],
     {}, "<At path 'properties.f.$ref': references must start with #/$defs/>"),
    ("$ref with a type beside it",
     [{"role": "user", "content": "hi"}],
     [tool({"type": "object", "properties": {"f": {"$ref": "#/$defs/F", "type": "object"}},
            "$defs": {"F": {"type": "object", "properties": {"x": {"type": "integer"}}}}})],
     {}, "<At path 'properties.f': when using $ref, type should be defined in the referenced schema instead of "
         "the parent schema>"),
    ("anyOf under a typed property",
     [{"role": "user", "content": "hi"}],
     [tool({"type": "object", "properties": {"v": {"type": "string", "anyOf": [{"minLength": 1}, {"format": "uri"}]}}})],
     {}, "<At path 'properties.v': when using anyOf, type should be defined in anyOf items instead of the parent "
         "schema>"),
    ("top-level anyOf",
     [{"role": "user", "content": "hi"}],
     [tool({"type": "object", "anyOf": [{"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
                                        {"type": "object", "properties": {"b": {"type": "integer"}}, "required": ["b"]}]})],
     {}, "<At path 'root': when using anyOf, type should be defined in anyOf items instead of the parent schema>"),
    ("dynamic declaration's schema",
     [{"role": "user", "content": "hi"},
      {"role": "system", "content": "", "tools": [tool({"type": "object", "properties": {"q": {"const": 3}}}, "late")]}],
     [], {}, "Invalid request: text content is empty"),
    ("temperature", [{"role": "user", "content": "hi"}], [], {"temperature": 0.3},
     "invalid temperature: only 1 is allowed for this model"),
    ("temperature at the card default", [{"role": "user", "content": "hi"}], [], {},
     "invalid temperature: only 1 is allowed for this model"),
]


async def _send(api: HostedAPI, profile: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                options: dict[str, Any]) -> tuple[Any, list[dict[str, Any]]]:
    async with SSEServer(api) as server:
        engine = RemoteEngine(base_url=server.base_url, model="kimi-k3", profile=profile)  # type: ignore[arg-type]
        try:
            out = await Client(engine, max_retries=0).chat(messages, tools=tools, **options)
        finally:
            await engine.aclose()
        return out, [r["body"] for r in server.requests]


@pytest.mark.parametrize(("row", "messages", "tools", "options", "words"), ROWS, ids=[r[0] for r in ROWS])
async def test_each_hosted_rule_breaks_the_self_hosted_wire_and_the_moonshot_profile_keeps_it(
    row: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]], options: dict[str, Any], words: str
) -> None:
    with pytest.raises(BadRequestError, match=None) as refused:
        await _send(HostedAPI(), "vllm", messages, tools, options)
    assert words in str(refused.value) and refused.value.status_code == 400
    out, bodies = await _send(HostedAPI(), "moonshot", messages, tools, options)
    assert out.message.content == "ok" and len(bodies) == 1
    body = bodies[0]
    assert not {"temperature", "top_p", "max_tokens"} & set(body)
    for m in body["messages"]:
        assert "reasoning" not in m  # Moonshot's name only: reasoning_content
        if m["role"] in ("assistant", "system") and (m.get("tool_calls") or m.get("tools")):
            assert "content" not in m or m["content"].strip()
    assert schema_rule(body) is None


async def test_what_the_moonshot_profile_sends_exactly() -> None:
    messages = [
        {"role": "system", "content": ""},
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": "", "reasoning_content": "look", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_a", "content": "sunny"},
        {"role": "assistant", "content": "", "reasoning_content": "only thinking"},
        {"role": "system", "content": "", "tools": [tool({"type": "object", "properties": {"q": {"const": 3}}}, "late")]},
        {"role": "user", "content": "and tomorrow?"},
    ]
    out, (body,) = await _send(HostedAPI(), "moonshot", messages, [WEATHER], {"max_tokens": 900})
    assert out.message.content == "ok"
    assert body["messages"] == [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "reasoning_content": "look", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_a", "content": "sunny"},
        {"role": "system", "tools": [tool({"type": "object", "properties": {"q": {"const": 3, "type": "integer"}}},
                                          "late")]},
        {"role": "user", "content": "and tomorrow?"},
    ]
    assert body["max_completion_tokens"] == 900 and body["reasoning_effort"] == "max"
    assert body["tools"] == [WEATHER] and "chat_template_kwargs" not in body


async def test_the_vllm_profile_keeps_the_self_hosted_contract_exactly() -> None:
    messages = [{"role": "user", "content": "hi"},
                {"role": "assistant", "content": "", "reasoning_content": "look", "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "call_a", "content": "sunny"},
                {"role": "system", "content": "", "tools": [tool({"type": "object", "properties": {"q": {}}}, "late")]}]
    api = HostedAPI(rules={})  # a self-hosted server: takes the contract's request
    _, (body,) = await _send(api, "vllm", messages, [WEATHER], {"max_tokens": 900, "temperature": 0.5})
    assert body["messages"][1:] == [
        {"role": "assistant", "content": "", "reasoning_content": "look", "reasoning": "look", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_a", "content": "sunny"},
        {"role": "system", "content": "", "tools": [tool({"type": "object", "properties": {"q": {}}}, "late")]},
    ]
    assert (body["max_tokens"], body["temperature"], body["top_p"]) == (900, 0.5, 0.95)


async def test_rewritten_schemas_exactly() -> None:
    refs = {"type": "object", "properties": {"f": {"$ref": "#/definitions/F", "description": "d", "type": "object"},
                                             "g": {"$ref": "#/components/schemas/G"}},
            "definitions": {"F": {"type": "object", "description": "F", "properties": {"x": {}}}},
            "components": {"schemas": {"G": {"enum": [1, 2.5]}}}}
    top = {"type": "object", "properties": {"common": {"type": "string"}}, "additionalProperties": False,
           "anyOf": [{"type": "object", "properties": {"a": {"type": "string"}, "c": {"type": "integer"}},
                      "required": ["a", "c"]},
                     {"properties": {"b": {"type": "boolean"}, "c": {"type": "string"}}, "required": ["b", "c"]}]}
    _, (body,) = await _send(HostedAPI(), "moonshot", [{"role": "user", "content": "hi"}],
                             [tool(refs, "refs"), tool(top, "top")], {})
    assert body["tools"][0]["function"]["parameters"] == {
        "type": "object", "properties": {"f": {"$ref": "#/$defs/F"}, "g": {"$ref": "#/$defs/G"}},
        "components": {"schemas": {"G": {"enum": [1, 2.5]}}},
        "$defs": {"F": {"type": "object", "description": "F", "properties": {"x": {"type": "string"}}},
                  "G": {"enum": [1, 2.5], "type": "number"}},
    }
    assert body["tools"][1]["function"]["parameters"] == {
        "type": "object", "additionalProperties": False, "required": ["c"],
        "properties": {"common": {"type": "string"}, "a": {"type": "string"},
                       "c": {"anyOf": [{"type": "integer"}, {"type": "string"}]}, "b": {"type": "boolean"}},
    }


@pytest.mark.parametrize(("parameters", "why"), [
    ({"anyOf": [{"type": "string"}, {"type": "object", "properties": {}}]}, "anyOf[0]': a top-level anyOf"),
    ({"type": "object", "properties": {"p": {"$ref": "https://example.com/s.json"}}},
     "properties.p.$ref': a reference outside the schema"),
    ({"type": "object", "properties": {"p": {"$ref": "#/nowhere/X"}}}, "properties.p.$ref': a reference to nothing"),
])
async def test_a_schema_the_hosted_api_cannot_take_is_refused_naming_the_tool_before_any_request(
    parameters: dict[str, Any], why: str
) -> None:
    api = HostedAPI()
    with pytest.raises(InvalidRequestError, match=r"tool 'strange': its parameters cannot be sent to Moonshot's API") as e:
        await _send(api, "moonshot", [{"role": "user", "content": "hi"}], [tool(parameters, "strange")], {})
    assert why in str(e.value) and api.seen == []


async def test_fixed_sampling_is_not_sent_and_a_value_asked_for_is_named_once(caplog: pytest.LogCaptureFixture) -> None:
    api = HostedAPI()
    async with SSEServer(api) as server:
        engine = RemoteEngine(base_url=server.base_url, model="kimi-k3", profile="moonshot")
        client = Client(engine)
        with caplog.at_level(logging.WARNING, logger="kimik3.engines.remote"):
            for _ in range(2):
                await client.chat([{"role": "user", "content": "hi"}], temperature=0.2, top_p=0.5,
                                  extra={"presence_penalty": 0.4, "n": 1, "seed_hint": 7})
            await client.chat([{"role": "user", "content": "hi"}])  # the card's defaults: nothing to say
        bodies = [r["body"] for r in server.requests]
    assert api.refusals == [] and len(bodies) == 3
    assert all(not {"temperature", "top_p", "presence_penalty", "n"} & set(b) for b in bodies)
    assert bodies[0]["seed_hint"] == 7  # other extras still go
    said = [r.getMessage() for r in caplog.records]
    assert said == ["kimik3: Moonshot's API samples K3 at fixed values; n=1, presence_penalty=0.4, temperature=0.2, "
                    "top_p=0.5 is not sent"]


async def test_images_go_inline_and_an_http_image_url_is_refused_before_any_request() -> None:
    api = HostedAPI()
    picture = [{"role": "user", "content": [{"type": "text", "text": "what is it?"},
                                             {"type": "image_url", "image_url": {"url": png_data_url()}}]}]
    _, (body,) = await _send(api, "moonshot", picture, [], {})
    url = body["messages"][0]["content"][1]["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    sent = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
    assert sent.convert("RGB").getpixel((sent.width // 2, sent.height // 2)) == (200, 30, 30)
    uploaded = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "ms://file-abc"}}]}]
    _, (body,) = await _send(api, "moonshot", uploaded, [], {})
    assert body["messages"][0]["content"][0]["image_url"]["url"] == "ms://file-abc"
    linked = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}]
    with pytest.raises(BadRequestError, match="image_url must be a base64 data url"):  # passed on as it is
        await _send(HostedAPI(rules={"images": image_rule}), "vllm", linked, [], {})
    with pytest.raises(MediaError, match=r"takes images as base64 data URLs or ms:// file ids, not http\(s\) URLs"):
        await _send(api, "moonshot", linked, [], {})
    assert len(api.seen) == 2  # the two accepted requests above; nothing of the refused one


async def test_a_named_tool_choice_is_refused_before_any_request_with_kimik3s_advice() -> None:
    api = HostedAPI()
    named = {"type": "function", "function": {"name": "get_weather"}}
    advice = "to force one tool, declare only that tool and use tool_choice='required'"
    with pytest.raises(MessageError, match=advice):  # typed: every profile
        await _send(api, "moonshot", [{"role": "user", "content": "hi"}], [WEATHER], {"tool_choice": named})
    with pytest.raises(MessageError, match=advice):  # smuggled in the extras: the moonshot profile
        await _send(api, "moonshot", [{"role": "user", "content": "hi"}], [WEATHER], {"extra": {"tool_choice": named}})
    assert api.seen == []


async def test_thinking_off_per_profile() -> None:
    hello = [{"role": "user", "content": "hi"}]
    for profile, kwargs in (("vllm", {"thinking": False}), ("sglang", {"thinking": False}),
                            ("openai", {"thinking": False, "enable_thinking": False})):
        async with SSEServer(lambda n, body: answer({"content": "ok"}, 1)) as server:  # a self-hosted server
            engine = RemoteEngine(base_url=server.base_url, model="k3", profile=profile)  # type: ignore[arg-type]
            await Client(engine).chat(hello, reasoning_effort="none")
            (request,) = server.requests
        assert request["body"]["chat_template_kwargs"] == kwargs and "reasoning_effort" not in request["body"]
    api = HostedAPI()
    with pytest.raises(UserError, match=r"always runs K3 with thinking on .* reasoning_effort='none' cannot be sent"):
        await _send(api, "moonshot", hello, [], {"reasoning_effort": "none"})
    assert api.seen == []


@pytest.mark.parametrize(("base_url", "profile"), [
    ("https://api.moonshot.ai/v1", "moonshot"), ("https://api.moonshot.cn/v1", "moonshot"),
    ("https://API.Kimi.com/coding/v1", "moonshot"), ("http://127.0.0.1:8000/v1", "vllm"),
    ("http://localhost:30000/v1", "vllm"), ("http://10.1.2.3:8000/v1", "vllm"), ("http://[::1]:8000/v1", "vllm"),
    ("http://vllm:8000/v1", "vllm"), ("http://gpu-box.local/v1", "vllm"), ("https://api.neuralwatt.com/v1", "openai"),
    ("https://openrouter.ai/api/v1", "openai"), ("http://8.8.8.8/v1", "openai"), ("https://api.moonshot.ai.evil.com/v1",
                                                                                  "openai"),
])
def test_the_profile_is_chosen_by_host(base_url: str, profile: str) -> None:
    assert detect_profile(base_url) == profile
    assert RemoteEngine(base_url=base_url, model="m").profile == profile


async def test_an_engine_over_a_ready_client_takes_the_profile_of_the_clients_host() -> None:
    api = HostedAPI()

    def respond(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        reply = api(0, body)
        content = b"".join(p for p in reply.parts if isinstance(p, bytes))
        return httpx.Response(reply.status, content=content, headers=reply.headers)

    client = openai.AsyncOpenAI(base_url="https://api.kimi.com/coding/v1", api_key="sk-kimi-x", max_retries=0,
                                http_client=httpx.AsyncClient(transport=httpx.MockTransport(respond)))
    engine = RemoteEngine(client=client, model="k3")
    assert engine.profile == "moonshot" and engine.reasoning_field == "reasoning_content"
    out = await Client(engine).chat([{"role": "user", "content": "hi"}, {"role": "assistant", "content": ""},
                                     {"role": "user", "content": "hello?"}], temperature=0.7)
    assert out.message.content == "ok" and api.refusals == []
    assert RemoteEngine(client=client, model="k3", profile="vllm").profile == "vllm"  # given wins
    assert RemoteEngine(client=client, model="k3", reasoning_field="both").reasoning_field == "both"


def test_an_unknown_profile_is_a_user_error() -> None:
    with pytest.raises(UserError, match="profile must be one of vllm, sglang, openai, moonshot; got 'hosted'"):
        RemoteEngine(base_url="http://127.0.0.1:1/v1", profile="hosted")  # type: ignore[arg-type]
    assert sorted(PROFILES) == ["moonshot", "openai", "sglang", "vllm"]


@pytest.mark.parametrize(("base_url", "env", "key"), [
    ("https://api.moonshot.ai/v1", {"MOONSHOT_API_KEY": "sk-moon", "OPENAI_API_KEY": "sk-oai"}, "sk-moon"),
    ("https://api.moonshot.cn/v1", {"OPENAI_API_KEY": "sk-oai"}, "sk-oai"),
    (None, {"OPENAI_BASE_URL": "https://api.moonshot.ai/v1", "MOONSHOT_API_KEY": "sk-moon"}, "sk-moon"),
    ("http://127.0.0.1:8000/v1", {"MOONSHOT_API_KEY": "sk-moon", "OPENAI_API_KEY": "sk-oai"}, "sk-oai"),
    ("https://api.moonshot.ai.evil.com/v1", {"MOONSHOT_API_KEY": "sk-moon"}, "EMPTY"),
    ("http://127.0.0.1:8000/v1", {}, "EMPTY"),
])  # fmt: skip
def test_the_default_key_is_moonshots_on_moonshots_hosts(
    base_url: str | None, env: dict[str, str], key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("MOONSHOT_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    engine = RemoteEngine(base_url=base_url, model="kimi-k3")
    assert engine.endpoint.client.api_key == key
