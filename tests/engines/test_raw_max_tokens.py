"""Raw mode always sends an explicit max_tokens: the request's, else what the prompt leaves of the
served context window (``max_model_len`` from /v1/models, or RemoteCompletionsEngine(max_model_len=...)).
A completions endpoint's own default is 16 tokens (issue 16, item 2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from kimik3 import Client, ContextLengthExceededError, K3Tokenizer, UserError
from tests.engines.test_remote_offline import FakeServer, sse
from tests.k3vocab import write_model_dir

TEXT = "ok<|close|>think<|sep|><|open|>response<|sep|>Hi<|close|>response<|sep|><|close|>message<|sep|>"
MESSAGES = [{"role": "user", "content": "Hi"}]


@pytest.fixture
def tok(tmp_path: Path) -> K3Tokenizer:
    return K3Tokenizer.from_pretrained(write_model_dir(tmp_path / "k3", num_base_tokens=163_584))


def server(window: int | None) -> FakeServer:
    def respond(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            card: dict[str, Any] = {"id": "k3", "object": "model", "created": 0, "owned_by": "vllm"}
            if window is not None:
                card["max_model_len"] = window
            other = {"id": "other", "object": "model", "created": 0, "owned_by": "vllm", "max_model_len": 7}
            return httpx.Response(200, json={"object": "list", "data": [other, card]})
        choice = {"index": 0, "text": TEXT, "finish_reason": "stop"}
        return sse([{"id": "x", "object": "text_completion", "created": 0, "model": "k3", "choices": [choice]}])

    return FakeServer(respond)


def paths(s: FakeServer) -> list[str]:
    return [r["path"] for r in s.requests]


async def test_default_max_tokens_is_what_the_prompt_leaves_of_the_servers_window(tok: K3Tokenizer) -> None:
    s = server(4096)
    engine = s.engine(mode="raw", tokenizer=tok)
    client = Client(engine)
    out = await client.chat(MESSAGES, reasoning_effort="low")
    await client.chat(MESSAGES, reasoning_effort="low")
    prompt = tok.encode_messages(MESSAGES, thinking_effort="low")
    assert out.message.content == "Hi"
    assert paths(s) == ["/v1/models", "/v1/completions", "/v1/completions"]  # the window is read once
    assert [r["body"]["max_tokens"] for r in s.requests[1:]] == [4096 - len(prompt)] * 2
    assert engine.max_model_len == 4096  # the model's own card, not the first one listed


async def test_window_given_as_an_option_and_explicit_max_tokens_need_no_lookup(tok: K3Tokenizer) -> None:
    s = server(None)
    await Client(s.engine(mode="raw", tokenizer=tok, max_model_len=1000)).chat(MESSAGES, reasoning_effort="none")
    await Client(s.engine(mode="raw", tokenizer=tok)).chat(MESSAGES, max_tokens=64)
    prompt = tok.encode_messages(MESSAGES, thinking=False)
    assert paths(s) == ["/v1/completions", "/v1/completions"]
    assert [r["body"]["max_tokens"] for r in s.requests] == [1000 - len(prompt), 64]


async def test_unknown_window_is_a_user_error_naming_the_fix(tok: K3Tokenizer) -> None:
    s = server(None)
    with pytest.raises(UserError, match=r"reports no max_model_len .* RemoteCompletionsEngine\(max_model_len=...\) or max_tokens"):
        await Client(s.engine(mode="raw", tokenizer=tok)).chat(MESSAGES)
    assert paths(s) == ["/v1/models"]  # nothing was sent without a max_tokens


@pytest.mark.parametrize("window", [1, 12])
async def test_prompt_filling_the_window_is_context_length_exceeded(tok: K3Tokenizer, window: int) -> None:
    s = server(None)
    prompt = tok.encode_messages(MESSAGES, thinking_effort="max")
    assert len(prompt) > window
    with pytest.raises(ContextLengthExceededError, match=rf"\({len(prompt)} tokens\) fills the context window \({window}\)"):
        await Client(s.engine(mode="raw", tokenizer=tok, max_model_len=window)).chat(MESSAGES)
    assert s.requests == []
