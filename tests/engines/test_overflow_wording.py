"""Errors typed by their wording whatever the server and the profile (issue 31): a token overflow
is a ContextLengthExceededError with the window stated, a request over the byte limit a
RequestTooLargeError; the stated window shrinks the engine's; raw mode survives a failing
GET /models; K3 and K3.1 ids and the Kimi Code API's windows."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from kimik3 import (
    BadRequestError,
    Client,
    ContextLengthExceededError,
    K3Tokenizer,
    RemoteEngine,
    RequestTooLargeError,
    UserError,
)
from kimik3._models import model_info
from kimik3.engines import RemoteCompletionsEngine
from kimik3.engines._http import error_from_payload, status_error
from tests.engines.hosted_server import HostedAPI, refused, tokens
from tests.engines.sse_server import Reply, SSEServer, sse
from tests.engines.test_remote_offline import FakeServer
from tests.k3vocab import write_model_dir

HELLO = [{"role": "user", "content": "Hi"}]
TEXT = "ok<|close|>think<|sep|><|open|>response<|sep|>Hi<|close|>response<|sep|><|close|>message<|sep|>"

TOKEN_WORDINGS = [  # (what the server said, limit, requested)
    ("Invalid request: Your request exceeded model token limit: 131072 (requested: 140001)", 131072, 140001),
    ("Your request exceeded model token limit: 262144 (requested: 263932)", 262144, 263932),
    ("Invalid request: Your request exceeded model token limit: 8192", 8192, None),
    ("Your request exceeded model token limit: 262,144 (re quested: 269,030)", 262144, 269030),
    ("This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the "
     "messages, 1000 in the completion). Please reduce the length of the messages or completion.", 4096, 5000),
    ("'max_tokens' or 'max_completion_tokens' is too large: 1000. This model's maximum context length is 32768 "
     "tokens and your request has 32000 input tokens (1000 > 32768 - 32000).", 32768, 32000),
    ("The decoder prompt (length 70000) is longer than the maximum model length of 65536.", 65536, 70000),
    ("The input (9001 tokens) is longer than the model's context length (8192 tokens).", 8192, 9001),
]


@pytest.mark.parametrize(("words", "limit", "requested"), TOKEN_WORDINGS, ids=[w[0][:40] for w in TOKEN_WORDINGS])
def test_a_token_overflow_is_typed_with_the_window_it_states(words: str, limit: int, requested: int | None) -> None:
    for e in (status_error(400, words), error_from_payload({"error": {"message": words, "type": "invalid_request_error"}}),
              error_from_payload({"object": "error", "message": words, "code": 400})):
        assert type(e) is ContextLengthExceededError and e.status_code == 400
        assert (e.limit, e.requested) == (limit, requested)


@pytest.mark.parametrize(("words", "size", "limit"), [
    ("total message size 2100954 exceeds limit 2097152", 2100954, 2097152),
    ("Invalid request: total message size 5000001 exceeds limit 4194304", 5000001, 4194304),
    ("total message size 10 bytes exceeds the limit of 9", 10, 9),
])
def test_a_request_over_the_byte_limit_is_request_too_large(words: str, size: int, limit: int) -> None:
    for e in (status_error(400, words), error_from_payload({"error": {"message": words}, "code": 400})):
        assert type(e) is RequestTooLargeError and isinstance(e, BadRequestError)
        assert (e.size, e.limit, e.status_code) == (size, limit, 400)
        assert not isinstance(e, ContextLengthExceededError)


def test_a_413_is_request_too_large_whatever_its_body() -> None:
    e = status_error(413, "<html><body>413 Request Entity Too Large</body></html>")
    assert type(e) is RequestTooLargeError and (e.size, e.limit, e.status_code) == (None, None, 413)


@pytest.mark.parametrize("words", ["invalid temperature: only 1 is allowed for this model",
                                   "Invalid request: text content is empty", "token budget exhausted"])
def test_other_refusals_stay_bad_requests(words: str) -> None:
    assert type(status_error(400, words)) is BadRequestError


@pytest.mark.parametrize("profile", ["vllm", "sglang", "openai", "moonshot"])
async def test_over_a_socket_whatever_the_profile(profile: str) -> None:
    replies = [refused("Invalid request: Your request exceeded model token limit: 65536 (requested: 70001)"),
               refused("total message size 3000000 exceeds limit 2097152"),
               Reply(parts=sse([{"error": {"message": "Your request exceeded model token limit: 1000 (requested: "
                                           "1200)", "type": "invalid_request_error", "code": 400}}]))]
    async with SSEServer(replies) as server:
        client = Client(RemoteEngine(base_url=server.base_url, model="kimi-k3", profile=profile), max_retries=0)  # type: ignore[arg-type]
        with pytest.raises(ContextLengthExceededError) as tokens:
            await client.chat(HELLO)
        with pytest.raises(RequestTooLargeError) as size:
            await client.chat(HELLO)
        with pytest.raises(ContextLengthExceededError) as in_band:  # an error object in the stream
            await client.chat(HELLO)
    assert (tokens.value.limit, tokens.value.requested) == (65536, 70001)
    assert (size.value.size, size.value.limit) == (3000000, 2097152)
    assert (in_band.value.limit, in_band.value.requested) == (1000, 1200)


@pytest.fixture
def tok(tmp_path: Path) -> K3Tokenizer:
    return K3Tokenizer.from_pretrained(write_model_dir(tmp_path / "k3", num_base_tokens=163_584))


def _completion() -> httpx.Response:
    choice = {"index": 0, "text": TEXT, "finish_reason": "stop"}
    body = f"data: {json.dumps({'id': 'x', 'object': 'text_completion', 'created': 0, 'model': 'k3', 'choices': [choice]})}\n\n"
    return httpx.Response(200, content=(body + "data: [DONE]\n\n").encode(), headers={"content-type": "text/event-stream"})


async def test_a_stated_limit_shrinks_the_engines_window(tok: K3Tokenizer, caplog: pytest.LogCaptureFixture) -> None:
    """catwalk #474: /v1/models advertises 1,048,576, the server accepts 262,144."""
    prompt = len(tok.encode_messages(HELLO, thinking_effort="max"))

    def respond(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            card = {"id": "k3", "object": "model", "created": 0, "owned_by": "x", "max_model_len": 1_048_576}
            return httpx.Response(200, json={"object": "list", "data": [card]})
        if json.loads(request.content)["max_tokens"] > 262_144 - prompt:
            return httpx.Response(400, json={"error": {"message": "Invalid request: Your request exceeded model token "
                                                                  "limit: 262144 (requested: 1048576)"}})
        return _completion()

    server = FakeServer(respond)
    engine = server.engine(mode="raw", tokenizer=tok)
    with caplog.at_level(logging.WARNING, logger="kimik3.engines.remote"):
        with pytest.raises(ContextLengthExceededError):
            await Client(engine, max_retries=0).chat(HELLO)
        out = await Client(engine).chat(HELLO)
    assert out.message.content == "Hi" and engine.max_model_len == 262_144
    assert [r["body"].get("max_tokens") for r in server.requests] == [None, 1_048_576 - prompt, 262_144 - prompt]
    assert [r.getMessage() for r in caplog.records] == [
        "kimik3: the server's limit for 'k3' is 262,144 tokens, not the 1,048,576 it was taken to have; using 262,144 "
        "from now on"]
    given = server.engine(mode="raw", tokenizer=tok, max_model_len=2_000_000)
    given.endpoint.learn_limit("k3", ContextLengthExceededError("x", status_code=400, limit=100_000))
    given.endpoint.learn_limit("k3", ContextLengthExceededError("x", status_code=400, limit=500_000))  # never grows
    assert given.max_model_len == 100_000


@pytest.mark.parametrize("failing", [
    httpx.Response(404, json={"error": {"message": "Not Found"}}),
    httpx.Response(501, text="Not Implemented"),
    httpx.Response(200, text="<html><body>gateway</body></html>", headers={"content-type": "text/html"}),
], ids=["404", "501", "html"])
async def test_raw_mode_falls_back_when_get_models_fails(tok: K3Tokenizer, failing: httpx.Response,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    server = FakeServer(lambda r: failing if r.url.path == "/v1/models" else _completion())
    engine = server.engine(mode="raw", tokenizer=tok)
    client = Client(engine, max_retries=0)
    with caplog.at_level(logging.WARNING, logger="kimik3.engines.remote"):
        for _ in range(3):
            assert (await client.chat(HELLO)).message.content == "Hi"
        await client.chat(HELLO, max_tokens=77)
    assert [(r["path"], r["body"].get("max_tokens")) for r in server.requests] == [
        ("/v1/models", None), ("/v1/completions", 32_768), ("/v1/completions", 32_768), ("/v1/completions", 32_768),
        ("/v1/completions", 77)]  # /models asked once
    (warning,) = caplog.records
    assert "GET /models failed" in warning.getMessage() and "max_tokens=32768" in warning.getMessage()


async def test_raw_mode_without_a_window_where_models_answers_is_still_a_user_error(tok: K3Tokenizer) -> None:
    card = {"id": "k3", "object": "model", "created": 0, "owned_by": "x"}
    server = FakeServer(lambda r: httpx.Response(200, json={"object": "list", "data": [card]}))
    with pytest.raises(UserError, match="reports no max_model_len"):
        await Client(server.engine(mode="raw", tokenizer=tok)).chat(HELLO)


@pytest.mark.parametrize(("model", "base_url", "name", "window"), [
    ("kimi-k3", "https://api.moonshot.ai/v1", "Kimi K3", 1_048_576),
    ("kimi-k3.1-pro", "https://api.moonshot.cn/v1", "Kimi K3.1 Pro", 1_048_576),
    ("Kimi-K3.1-Pro-HighSpeed", None, "Kimi K3.1 Pro highspeed", 1_048_576),
    ("kimi-k3.1-pro-2026-10-23", "https://relay.example/v1", "Kimi K3.1 Pro", 1_048_576),
    ("k3", "https://api.kimi.com/coding/v1", "Kimi K3", 1_048_576),
    ("kimi-k3", "https://api.kimi.com/coding/v1", "Kimi K3", 262_144),
    ("k3-256k", "https://api.kimi.com/coding/v1", "Kimi K3", 262_144),
    ("k3[1m]", "https://api.kimi.com/coding/v1", "Kimi K3", 262_144),
])
def test_k3_and_k31_ids_and_their_windows(model: str, base_url: str | None, name: str, window: int) -> None:
    info = model_info(model, base_url)
    assert info is not None and (info.name, info.window) == (name, window)


@pytest.mark.parametrize(("model", "base_url"), [("k3", "http://127.0.0.1:8000/v1"), ("moonshotai/Kimi-K3", None),
                                                 ("kimi-for-coding", "https://api.kimi.com/coding/v1"), ("", None)])
def test_ids_that_name_no_window(model: str, base_url: str | None) -> None:
    assert model_info(model, base_url) is None


async def test_the_kimi_code_windows_are_honoured_and_the_server_wins(tok: K3Tokenizer) -> None:
    """The Kimi Code API: bare ``k3`` 1,048,576, ``kimi-k3`` 262,144 (CLIProxyAPI #4418); its
    /v1/models' ``context_length`` says what this account gets (262,144 below Allegretto)."""
    listed: list[dict[str, Any]] = []

    def respond(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"object": "list", "data": listed})
        return _completion()

    def engine(model: str) -> RemoteCompletionsEngine:
        client = openai.AsyncOpenAI(base_url="https://api.kimi.com/coding/v1", api_key="sk-kimi-x", max_retries=0,
                                    http_client=httpx.AsyncClient(transport=httpx.MockTransport(respond)))
        return RemoteCompletionsEngine(tokenizer=tok, model=model, client=client)

    for model, window in (("k3", 1_048_576), ("kimi-k3", 262_144)):
        e = engine(model)
        assert e.max_model_len == window  # known before anything was asked
        await Client(e).chat(HELLO)
        assert e.max_model_len == window
    listed.append({"id": "k3", "object": "model", "created": 0, "owned_by": "moonshot", "context_length": 262_144})
    e = engine("k3")
    await Client(e).chat(HELLO)
    assert e.max_model_len == 262_144


async def test_a_hosted_refusal_of_a_long_request_over_the_socket_states_its_window() -> None:
    api = HostedAPI(token_limit=50)
    long = [{"role": "user", "content": "word " * 400}]
    async with SSEServer(api) as server:
        engine = RemoteEngine(base_url=server.base_url, model="kimi-k3", profile="moonshot")
        with pytest.raises(ContextLengthExceededError) as e:
            await Client(engine).chat(long)
        assert (e.value.limit, e.value.requested) == (50, tokens(api.seen[0])) and tokens(api.seen[0]) > 500
        assert engine.endpoint.known_window("kimi-k3") == 50
