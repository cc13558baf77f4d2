"""``usage.prompt_tokens_details.cached_tokens`` (OpenAI shape): read from a server in chat and
raw mode when it reports it, None when it does not, summed over a run's calls."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from kimik3 import APIResponseValidationError, Client, K3Tokenizer
from kimik3.engines import RemoteCompletionsEngine
from kimik3.types import PromptTokensDetails, Usage
from tests.k3vocab import write_model_dir

from .test_remote_offline import FakeServer, chat_chunk, sse


def _usage(prompt: int, completion: int, cached: int | None) -> dict[str, Any]:
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                             "total_tokens": prompt + completion}
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return usage


def _chat_server(cached: int | None) -> FakeServer:
    return FakeServer(lambda r: sse([
        chat_chunk({"role": "assistant", "content": "ok"}, finish="stop"),
        {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "k3", "choices": [],
         "usage": _usage(120, 3, cached)},
    ]))  # fmt: skip


async def test_chat_mode_reads_cached_tokens() -> None:
    out = await Client(_chat_server(96).engine()).chat([{"role": "user", "content": "Hi"}])
    assert out.usage.prompt_tokens == 120
    assert out.usage.prompt_tokens_details == PromptTokensDetails(cached_tokens=96)
    assert out.usage.cached_tokens == 96


async def test_chat_mode_without_details_reports_none() -> None:
    out = await Client(_chat_server(None).engine()).chat([{"role": "user", "content": "Hi"}])
    assert out.usage.prompt_tokens_details is None and out.usage.cached_tokens == 0


async def test_raw_mode_reads_cached_tokens(tmp_path: Path) -> None:
    text = "<|open|>response<|sep|>Hello<|close|>response<|sep|><|close|>message<|sep|>"

    def respond(request: httpx.Request) -> httpx.Response:
        return sse([
            {"id": "x", "object": "text_completion", "created": 0, "model": "k3",
             "choices": [{"index": 0, "text": text, "finish_reason": "stop"}]},
            {"id": "x", "object": "text_completion", "created": 0, "model": "k3", "choices": [],
             "usage": _usage(99, 20, 64)},
        ])  # fmt: skip

    tok = K3Tokenizer.from_pretrained(write_model_dir(tmp_path / "k3", num_base_tokens=163_584))
    engine = FakeServer(respond).engine(mode="raw", tokenizer=tok, max_model_len=4096)
    out = await Client(engine).chat([{"role": "user", "content": "Hi"}], reasoning_effort="none")
    assert out.message.content == "Hello"
    assert out.usage.prompt_tokens == 99 and out.usage.cached_tokens == 64


def test_usage_sums_cached_tokens_and_keeps_unknown_unknown() -> None:
    a = Usage(prompt_tokens=100, completion_tokens=5, total_tokens=105,
              prompt_tokens_details=PromptTokensDetails(cached_tokens=80))
    b = Usage(prompt_tokens=120, completion_tokens=5, total_tokens=125)  # the engine did not say
    total = a + b
    assert (total.prompt_tokens, total.total_tokens, total.cached_tokens) == (220, 230, 80)
    assert (b + b).prompt_tokens_details is None
    assert Usage.model_validate({"prompt_tokens": 3, "prompt_tokens_details": {"cached_tokens": 2}}).cached_tokens == 2


async def test_a_models_answer_that_is_not_a_model_list_is_typed(tmp_path: Path) -> None:
    """/models answered with the server's event stream (as this one does for every path), HTML or
    another JSON shape is an APIResponseValidationError, not an AttributeError out of
    openai-python's page parser: raised where the model's name is needed from it; for raw mode's
    window (issue 31) kept as the reason /models is unavailable, and the request falls back on
    RAW_MAX_TOKENS_FALLBACK."""
    tok = K3Tokenizer.from_pretrained(write_model_dir(tmp_path / "k3", num_base_tokens=163_584))
    why = "APIResponseValidationError: /models answered with something that is not a model list"
    for body in (b'data: {"x": 1}\n\ndata: [DONE]\n\n', b"<html>hi</html>", b'{"data": [{"object": "model"}]}'):
        server = FakeServer(lambda r, body=body: httpx.Response(200, content=body))
        unnamed = RemoteCompletionsEngine(tokenizer=tok, client=server.engine(mode="raw", tokenizer=tok).endpoint.client)
        with pytest.raises(APIResponseValidationError, match="/models answered with something that is not a model list"):
            await Client(unnamed, max_retries=0).chat([{"role": "user", "content": "Hi"}], reasoning_effort="none")
        engine = server.engine(mode="raw", tokenizer=tok)
        try:
            await Client(engine, max_retries=0).chat([{"role": "user", "content": "Hi"}], reasoning_effort="none")
        except APIResponseValidationError as e:  # this server's completions answer is no stream either
            assert "no server-sent events" in str(e)
        assert engine.endpoint.models_unavailable.startswith(why)
        assert [(r["path"], r["body"].get("max_tokens")) for r in server.requests[-2:]] == [
            ("/v1/models", None), ("/v1/completions", 32_768)]
