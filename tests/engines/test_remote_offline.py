"""RemoteEngine against an in-process fake OpenAI server (httpx.MockTransport): the exact
request bodies kimik3 sends and how it reads replies, streaming and not, chat and raw mode."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import httpx
import openai
import pytest

from kimik3 import (
    AuthenticationError,
    BadRequestError,
    ChatCompletion,
    Client,
    ContextLengthExceededError,
    EngineError,
    K3Tokenizer,
    RateLimitError,
    RemoteEngine,
    ServiceUnavailableError,
)
from kimik3.engines import ChatForImages, RemoteCompletionsEngine
from kimik3.formats.k3 import ContentDelta, ToolCallDone, ToolCallIncomplete
from tests.k3vocab import write_model_dir

Handler = Callable[[httpx.Request], httpx.Response]


def sse(chunks: list[dict[str, Any]]) -> httpx.Response:
    body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    return httpx.Response(200, content=body.encode(), headers={"content-type": "text/event-stream"})


def chat_chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "k3",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def usage_chunk(prompt: int, completion: int) -> dict[str, Any]:
    return {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "k3",
        "choices": [],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    }


def model_card(model: str = "k3", window: int | None = 131_072) -> dict[str, Any]:
    """A ``/v1/models`` entry as vLLM lists one (``max_model_len``: ``window``; none when None)."""
    card: dict[str, Any] = {"id": model, "object": "model", "created": 0, "owned_by": "vllm"}
    if window is not None:
        card["max_model_len"] = window
    return card


Models = list[dict[str, Any]] | Literal["404", "respond"]


class FakeServer:
    """An OpenAI server in process: each request is recorded in :attr:`requests` and answered by
    ``respond``, but for ``GET /v1/models`` where ``models`` answers it apart (counted in
    :attr:`models_asked`, never in :attr:`requests`, never given to ``respond``, so it takes no
    reply a test queued): a list of entries (:func:`model_card`), or ``"404"`` (a server without
    ``/v1/models``); ``"respond"`` (the default) passes it to ``respond`` like any request."""

    def __init__(self, respond: Handler, *, models: Models = "respond") -> None:
        self.requests: list[dict[str, Any]] = []
        self.respond = respond
        self.models = models
        self.models_asked = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if self.models != "respond" and request.method == "GET" and request.url.path == "/v1/models":
            self.models_asked += 1
            if self.models == "404":
                return httpx.Response(404, json={"error": {"message": "Not Found", "type": "NotFoundError"}})
            return httpx.Response(200, json={"object": "list", "data": self.models})
        self.requests.append({"path": request.url.path, "body": json.loads(request.content or b"{}")})
        return self.respond(request)

    def engine(self, *, mode: str = "chat", **kwargs: Any) -> Any:
        """A RemoteEngine (chat) or, with ``mode="raw"``, a RemoteCompletionsEngine over this server
        (model ``"k3"`` unless ``model`` is given)."""
        client = openai.AsyncOpenAI(
            base_url="http://fake/v1",
            api_key="k",
            max_retries=0,
            http_client=httpx.AsyncClient(transport=httpx.MockTransport(self)),
        )
        kwargs.setdefault("model", "k3")
        if mode == "raw":
            return RemoteCompletionsEngine(client=client, **kwargs)
        return RemoteEngine(client=client, **kwargs)


def replies(*turns: list[dict[str, Any]], models: Models | None = None) -> FakeServer:
    """A server that streams ``turns`` one request after another, each a list of SSE chunks;
    ``GET /v1/models`` is answered apart and takes no turn (``models``: see :class:`FakeServer`;
    default: vLLM's list of ``k3`` at 131,072 tokens)."""
    queue = list(turns)

    def respond(request: httpx.Request) -> httpx.Response:
        return sse(queue.pop(0))

    return FakeServer(respond, models=[model_card()] if models is None else models)


HISTORY = [
    {"role": "user", "content": "weather?"},
    {
        "role": "assistant",
        "content": "",
        "reasoning_content": "look it up",
        "tool_calls": [{"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}],
    },
    {"role": "tool", "tool_call_id": "call_a", "content": "sunny"},
]


async def test_chat_mode_sends_reasoning_under_both_names_and_reads_either() -> None:
    server = FakeServer(
        lambda r: sse(
            [
                chat_chunk({"role": "assistant", "reasoning": "It is "}),
                chat_chunk({"reasoning": "sunny."}),
                chat_chunk({"content": "Sunny in "}),
                chat_chunk({"content": "Paris."}, finish="stop"),
                usage_chunk(50, 7),
            ]
        )
    )
    out = await Client(server.engine()).chat(HISTORY, reasoning_effort="high", temperature=1.0, top_p=0.95)
    body = server.requests[0]["body"]
    assert server.requests[0]["path"] == "/v1/chat/completions"
    past = body["messages"][1]
    assert past["reasoning_content"] == "look it up" and past["reasoning"] == "look it up"
    assert past["tool_calls"] == HISTORY[1]["tool_calls"]
    assert body["reasoning_effort"] == "high" and body["stream"] is True
    assert body["temperature"] == 1.0 and body["top_p"] == 0.95
    assert "chat_template_kwargs" not in body
    assert out.message.reasoning_content == "It is sunny." and out.message.content == "Sunny in Paris."
    assert out.usage.prompt_tokens == 50 and out.usage.completion_tokens == 7 and out.finish_reason == "stop"


async def test_chat_mode_thinking_off_uses_chat_template_kwargs() -> None:
    server = FakeServer(lambda r: sse([chat_chunk({"reasoning_content": None, "content": "hi"}, finish="stop")]))
    out = await Client(server.engine()).chat([{"role": "user", "content": "x"}], reasoning_effort="none")
    body = server.requests[0]["body"]
    assert body["chat_template_kwargs"] == {"thinking": False} and "reasoning_effort" not in body
    assert out.message.content == "hi" and out.message.reasoning_content is None


async def test_chat_mode_tool_call_deltas_and_malformed_arguments_kept_as_failed() -> None:
    server = FakeServer(
        lambda r: sse(
            [
                chat_chunk({"reasoning_content": "two calls"}),
                chat_chunk({"tool_calls": [{"index": 0, "id": "s1", "type": "function", "function": {"name": "read", "arguments": '{"pa'}}]}),
                chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'th": "a.txt"}'}}]}),
                chat_chunk({"tool_calls": [{"index": 1, "id": "s2", "type": "function", "function": {"name": "read", "arguments": '{"path": '}}]}),
                chat_chunk({}, finish="tool_calls"),
            ]
        )
    )
    async with Client(server.engine()).stream([{"role": "user", "content": "x"}]) as call:
        events = [e async for e in call]
    done = [e for e in events if isinstance(e, ToolCallDone)]
    assert [(d.id, d.arguments) for d in done] == [("s1", {"path": "a.txt"})]
    assert [e.id for e in events if isinstance(e, ToolCallIncomplete)] == ["s2"]
    completion = call.completion
    assert isinstance(completion, ChatCompletion)
    calls = completion.message.tool_calls
    assert calls is not None and [c.id for c in calls] == ["s1"] and completion.dropped_tool_calls == []
    # the server finished the turn ("tool_calls") with broken arguments: kept as a failed call
    [failed] = completion.failed_tool_calls
    assert (failed.id, failed.name, failed.arguments) == ("s2", "read", '{"path": ')
    assert failed.reason.startswith("arguments are not valid JSON (Expecting value")


async def test_chat_mode_recovers_markers_leaked_by_the_server_parser() -> None:
    # a server whose parser missed a skipped think close puts everything into reasoning
    leaked = (
        "plan<|open|>response<|sep|>Reading.<|close|>response<|sep|><|open|>tools<|sep|>"
        '<|open|>call tool="read" index="1"<|sep|><|open|>argument key="path" type="string"<|sep|>a.txt'
        "<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>"
    )
    server = FakeServer(lambda r: sse([chat_chunk({"reasoning": leaked[:20]}), chat_chunk({"reasoning": leaked[20:]}, finish="stop")]))
    read = {"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}
    async with Client(server.engine()).stream([{"role": "user", "content": "x"}], tools=[read]) as call:
        events = [e async for e in call]
    assert "".join(e.delta for e in events if isinstance(e, ContentDelta)) == "Reading."
    completion = call.completion
    assert isinstance(completion, ChatCompletion)
    msg = completion.message
    assert msg.reasoning_content == "plan" and msg.content == "Reading."
    assert msg.tool_calls is not None and msg.tool_calls[0].function.arguments == '{"path": "a.txt"}'
    assert completion.finish_reason == "tool_calls"


@pytest.mark.parametrize(
    ("status", "payload", "headers", "error"),
    [
        (400, {"error": {"message": "This model's maximum context length is 4096 tokens"}}, {}, ContextLengthExceededError),
        (400, {"error": {"message": "tool_choice bad"}}, {}, BadRequestError),
        (401, {"error": {"message": "no key"}}, {}, AuthenticationError),
        (429, {"error": {"message": "slow down"}}, {"retry-after": "0"}, RateLimitError),
        (503, {"error": {"message": "overloaded"}}, {}, ServiceUnavailableError),
    ],
)
async def test_status_errors_are_typed(status: int, payload: dict[str, Any], headers: dict[str, str], error: type[Exception]) -> None:
    server = FakeServer(lambda r: httpx.Response(status, json=payload, headers=headers))
    client = Client(server.engine(), max_retries=1)
    with pytest.raises(error) as info:
        await client.chat([{"role": "user", "content": "x"}])
    assert getattr(info.value, "status_code", None) == status
    retried = status in (429, 503)
    assert len(server.requests) == (2 if retried else 1)
    if status == 429:
        assert getattr(info.value, "retry_after", None) == 0.0


async def test_status_errors_keep_the_response_and_request_id() -> None:
    server = FakeServer(
        lambda r: httpx.Response(400, json={"error": {"message": "bad"}}, headers={"x-request-id": "req-42"})
    )
    with pytest.raises(BadRequestError) as info:
        await Client(server.engine()).chat([{"role": "user", "content": "x"}])
    assert info.value.request_id == "req-42"
    assert isinstance(info.value.response, httpx.Response) and info.value.response.status_code == 400
    assert info.value.response.json() == {"error": {"message": "bad"}}


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    return write_model_dir(tmp_path / "k3", num_base_tokens=163_584)


async def test_raw_mode_sends_ids_and_parses_with_kimik3(model_dir: Path) -> None:
    text = (
        "hmm<|close|>think<|sep|><|open|>response<|sep|>Hello<|close|>response<|sep|>"
        "<|close|>message<|sep|>"
    )

    def respond(request: httpx.Request) -> httpx.Response:
        pieces = [text[i : i + 5] for i in range(0, len(text), 5)]
        chunks: list[dict[str, Any]] = [
            {"id": "x", "object": "text_completion", "created": 0, "model": "k3", "choices": [{"index": 0, "text": p, "finish_reason": None}]}
            for p in pieces
        ]
        chunks[-1]["choices"][0]["finish_reason"] = "stop"
        chunks.append({"id": "x", "object": "text_completion", "created": 0, "model": "k3", "choices": [], "usage": {"prompt_tokens": 99, "completion_tokens": 20, "total_tokens": 119}})
        return sse(chunks)

    server = FakeServer(respond)
    tok = K3Tokenizer.from_pretrained(model_dir)
    engine = server.engine(mode="raw", tokenizer=tok)
    messages = [{"role": "user", "content": "Hi"}]
    out = await Client(engine).chat(messages, max_tokens=64, reasoning_effort="low")
    req = server.requests[0]
    assert req["path"] == "/v1/completions"
    body = req["body"]
    assert body["prompt"] == tok.encode_messages(messages, thinking_effort="low")
    assert body["skip_special_tokens"] is False and body["spaces_between_special_tokens"] is False
    assert body["stop_token_ids"] == [163586] and body["max_tokens"] == 64
    assert out.message.content == "Hello" and out.message.reasoning_content == "hmm"
    assert out.raw_text == text and out.usage.prompt_tokens == 99 and out.usage.completion_tokens == 20


async def test_raw_mode_with_images_raises_or_goes_through_chat_when_composed(
    model_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = FakeServer(lambda r: sse([chat_chunk({"content": "a cat"}, finish="stop")]))
    image_msg = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/cat.png"}}, {"type": "text", "text": "what?"}]}]
    raw = server.engine(mode="raw", tokenizer=str(model_dir))
    with pytest.raises(EngineError, match=r"take no images.*with_chat_for_images"):
        await Client(raw).chat(image_msg)
    assert server.requests == []  # refused before anything was sent
    both = raw.with_chat_for_images()
    assert isinstance(both, ChatForImages) and both.chat.endpoint is raw.endpoint  # one client, one pool
    out = await Client(both).chat(image_msg)
    assert server.requests[0]["path"] == "/v1/chat/completions" and out.message.content == "a cat"
    assert "request has images; completions take none" in caplog.text
    with pytest.raises(EngineError, match="needs the K3 tokenizer"):
        RemoteCompletionsEngine(base_url="http://x/v1", tokenizer=None)
