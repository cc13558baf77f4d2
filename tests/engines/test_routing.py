"""The routing key on the wire (issue 32, item 1): what a remote engine sends a router for a request's
:class:`~kimik3.types.Routing`, in chat and raw mode, over a real socket (sse_server): the headers
vllm-router, SGLang's gateway and Dynamo read, the body's ``user``, Dynamo's parent header on a
sub-agent's request, nothing without a key, configurable names, and a server that refuses ``user``."""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any

import pytest

from kimik3 import BadRequestError, K3Tokenizer, RemoteEngine, ScriptedEngine, UserError
from kimik3.engines import Engine, RemoteCompletionsEngine
from kimik3.engines._routing import DEFAULT_ROUTING_HEADERS, names_user_field
from kimik3.formats.k3 import render_output
from kimik3.types import ChatRequest, Routing
from tests.engines.sse_server import Reply, SSEServer, sse
from tests.engines.test_chat_transcripts import d
from tests.k3vocab import write_model_dir

KEY = "0f3c9a1b2d4e5f60718293a4b5c6d7e8"
ROUTER_HEADERS = ("x-session-id", "x-smg-routing-key", "x-dynamo-session-id", "x-dynamo-parent-session-id",
                  "x-user-id")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model_dir(tmp_path_factory.mktemp("k3") / "k3", num_base_tokens=163_584)


@functools.cache
def load_tokenizer(model_dir: Path) -> K3Tokenizer:
    return K3Tokenizer.from_pretrained(model_dir)


def ok(mode: str) -> Reply:
    if mode == "raw":
        chunk = {"id": "x", "object": "text_completion",
                 "choices": [{"index": 0, "text": render_output({"reasoning_content": "r", "content": "ok"}),
                              "finish_reason": "stop"}]}
        return Reply(parts=sse([chunk]))
    return Reply(parts=sse([d({"content": "ok"}, "stop")]))


def engine(server: SSEServer, mode: str, model_dir: Path, **routing: Any) -> Engine:
    if mode == "raw":
        return RemoteCompletionsEngine(base_url=server.base_url, model="k3", tokenizer=load_tokenizer(model_dir),
                                       max_model_len=8192, **routing)
    return RemoteEngine(base_url=server.base_url, model="k3", **routing)


def request(routing: Routing | None) -> ChatRequest:
    return ChatRequest(messages=[{"role": "user", "content": "hi"}], routing=routing)  # type: ignore[list-item]


def sent(server: SSEServer) -> list[tuple[dict[str, str], Any]]:
    """(the router headers, the body's user or None) of each request."""
    return [({k: v for k, v in r["headers"].items() if k in ROUTER_HEADERS}, r["body"].get("user"))
            for r in server.requests]


@pytest.mark.parametrize("mode", ["chat", "raw"])
async def test_the_key_goes_out_under_every_routers_name_and_as_user(mode: str, model_dir: Path) -> None:
    async with SSEServer([ok(mode)]) as server:
        e = engine(server, mode, model_dir)
        for routing in (Routing(KEY), Routing("child-1", parent=KEY), None):
            assert (await e.complete(request(routing))).message.content == "ok"
    assert server.requests[0]["path"] == ("/v1/completions" if mode == "raw" else "/v1/chat/completions")
    assert sent(server) == [
        ({"x-session-id": KEY, "x-smg-routing-key": KEY, "x-dynamo-session-id": KEY}, KEY),
        # a sub-agent's request: its own key, and its parent's under Dynamo's parent header
        ({"x-session-id": "child-1", "x-smg-routing-key": "child-1", "x-dynamo-session-id": "child-1",
          "x-dynamo-parent-session-id": KEY}, "child-1"),
        ({}, None),  # no key: nothing (a router places the request by its own rule)
    ]


@pytest.mark.parametrize("mode", ["chat", "raw"])
async def test_the_names_are_configurable_and_none_turns_them_off(mode: str, model_dir: Path) -> None:
    async with SSEServer([ok(mode)]) as server:
        await engine(server, mode, model_dir, routing_headers=("X-User-ID",)).complete(request(Routing(KEY, "p")))
        await engine(server, mode, model_dir, routing_headers=None).complete(request(Routing(KEY)))
        await engine(server, mode, model_dir, routing_headers=None, routing_user=False).complete(request(Routing(KEY)))
    assert sent(server) == [({"x-user-id": KEY}, KEY), ({}, KEY), ({}, None)]  # X-User-ID has no parent pair


async def test_a_server_that_refuses_user_is_sent_the_request_again_without_it(
        caplog: pytest.LogCaptureFixture) -> None:
    def strict(n: int, body: dict[str, Any]) -> Reply:  # an OpenAI-compatible server with a strict schema
        if "user" in body:
            return Reply(status=400, headers={"content-type": "application/json"}, parts=[
                b'{"error": {"message": "1 validation error: body.user Extra inputs are not permitted (\'user\')", '
                b'"type": "BadRequestError", "code": 400}}'])
        return ok("chat")

    async with SSEServer(strict) as server:
        e = RemoteEngine(base_url=server.base_url, model="k3")
        with caplog.at_level(logging.WARNING, logger="kimik3.engines.remote"):
            first = await e.complete(request(Routing(KEY)))
        second = await e.complete(request(Routing(KEY)))
    assert (first.message.content, second.message.content) == ("ok", "ok")
    assert [u for _, u in sent(server)] == [KEY, None, None]  # learned once: never sent again
    assert all(h["x-session-id"] == KEY for h, _ in sent(server))  # the headers still carry the key
    assert e.endpoint.refuses_user_field
    said = [r.getMessage() for r in caplog.records if r.name == "kimik3.engines.remote"]
    assert len(said) == 1 and said[0].startswith("kimik3: the endpoint refuses the 'user' field; sending the routing "
                                                 "key in headers only from now on: 400")


async def test_a_400_about_something_else_is_raised_as_it_is() -> None:
    refused = Reply(status=400, headers={"content-type": "application/json"},
                    parts=[b'{"error": {"message": "the user message is too long", "code": 400}}'])
    async with SSEServer([refused]) as server:
        e = RemoteEngine(base_url=server.base_url, model="k3")
        with pytest.raises(BadRequestError, match="the user message is too long"):
            await e.complete(request(Routing(KEY)))
    assert len(server.requests) == 1 and not e.endpoint.refuses_user_field


def test_names_user_field_reads_the_servers_words() -> None:
    assert names_user_field(ValueError("unknown field `user`, expected one of `model`"))  # serde
    assert names_user_field(ValueError("body -> 'user': Extra inputs are not permitted"))  # pydantic
    assert names_user_field(ValueError('Unrecognized request argument supplied: "user"'))
    assert not names_user_field(ValueError("the user message must not be empty"))


@pytest.mark.parametrize(("names", "why"), [
    ("x-session-id", "not the string"),
    (("x-session-id", "X-Session-ID"), "names a header twice"),
    (("x session",), "is not an HTTP header name"),
    (("x-ok", 5), "is not an HTTP header name"),
])
def test_bad_header_names_are_refused(names: Any, why: str) -> None:
    with pytest.raises(UserError, match=why):
        RemoteEngine(base_url="http://127.0.0.1:9/v1", model="k3", routing_headers=names)


@pytest.mark.parametrize("key", ["", "a b", "line\r\nX-Injected: 1", "é", "k" * 257, 5])
def test_a_key_that_is_no_header_value_is_refused(key: Any) -> None:
    with pytest.raises(UserError, match="1 to 256 visible ASCII characters"):
        Routing(key)
    with pytest.raises(UserError, match="1 to 256 visible ASCII characters"):
        Routing("ok", parent=key)


def test_a_request_takes_a_routing_only() -> None:
    with pytest.raises(UserError, match=r"ChatRequest\(routing=...\) must be a Routing"):
        ChatRequest(messages=[{"role": "user", "content": "hi"}], routing=KEY)  # type: ignore[arg-type, list-item]
    assert DEFAULT_ROUTING_HEADERS == ("x-session-id", "x-smg-routing-key", "x-dynamo-session-id")


async def test_a_token_engine_takes_the_key_and_sends_nothing() -> None:
    # an engine in this process (ScriptedEngine here, VLLMEngine alike) has no router to tell: the
    # request is served as it would be without a key
    with_key, without = ScriptedEngine(["ok"]), ScriptedEngine(["ok"])
    a = await with_key.complete(request(Routing(KEY)))
    b = await without.complete(request(None))
    assert (a.message, a.usage) == (b.message, b.usage)
    assert with_key.calls[0].prompt == without.calls[0].prompt
    assert with_key.calls[0].request.routing == Routing(KEY)
