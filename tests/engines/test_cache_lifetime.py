"""``ModelSettings.prompt_cache_lifetime`` (issue 43 part 3): sent as ``prompt_cache_options`` on
Moonshot's hosted profile, refused before any request where the engine has no such option; the
cache writes a server reports read from ``usage`` in its wordings and priced per lifetime."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from kimik3 import Agent, Budgets, Client, ModelSettings, RemoteEngine, ScriptedEngine, UserError
from kimik3._pricing import PRICES
from kimik3.types import CompletionTokensDetails, PromptTokensDetails
from tests.engines.sse_server import Reply, SSEServer, sse

PRO = PRICES["kimi-k3.1-pro"]


def _reply(usage: dict[str, Any]) -> Reply:
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "kimi-k3.1-pro",
             "choices": [{"index": 0, "delta": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]}
    tail = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "kimi-k3.1-pro", "choices": [],
            "usage": {"prompt_tokens": 100_000, "completion_tokens": 1_000, "total_tokens": 101_000, **usage}}
    return Reply(parts=sse([chunk, tail]))


async def _chat(profile: str, usage: dict[str, Any], **options: Any) -> tuple[Any, list[dict[str, Any]]]:
    async with SSEServer(lambda n, body: _reply(usage)) as server:
        engine = RemoteEngine(base_url=server.base_url, model="kimi-k3.1-pro", profile=profile)  # type: ignore[arg-type]
        try:
            out = await Client(engine, max_retries=0).chat([{"role": "user", "content": "hi"}], **options)
        finally:
            await engine.aclose()
        return out, [r["body"] for r in server.requests]


async def test_the_moonshot_profile_sends_the_lifetime_and_one_hour_writes_are_priced_at_4_usd() -> None:
    usage = {"prompt_tokens_details": {"cached_tokens": 20_000, "cache_write_tokens": 50_000}}
    out, (body,) = await _chat("moonshot", usage, prompt_cache_lifetime="1h")
    assert body["prompt_cache_options"] == {"ttl": "1h"}
    assert out.usage.prompt_tokens_details == PromptTokensDetails(
        cached_tokens=20_000, cache_write_tokens=50_000, cache_write_1h_tokens=50_000)
    # 30,000 fresh * $2 + 20,000 cached * $0.20 + 50,000 written for 1 h * $4 + 1,000 out * $10, per 1M
    assert PRO.cost(out.usage) == pytest.approx(0.06 + 0.004 + 0.2 + 0.01, abs=1e-12)


async def test_five_minute_writes_cost_2_usd_and_no_lifetime_sends_no_option() -> None:
    usage = {"prompt_tokens_details": {"cached_tokens": 20_000, "cache_write_tokens": 50_000}}
    out, (body,) = await _chat("moonshot", usage, prompt_cache_lifetime="5m")
    assert body["prompt_cache_options"] == {"ttl": "5m"}
    assert out.usage.cache_write_1h_tokens == 0
    assert PRO.cost(out.usage) == pytest.approx(0.06 + 0.004 + 0.1 + 0.01, abs=1e-12)
    out, (body,) = await _chat("moonshot", usage)
    assert "prompt_cache_options" not in body
    assert out.usage.cache_write_tokens == 50_000 and out.usage.cache_write_1h_tokens == 0


async def test_anthropic_shaped_write_counts_and_their_lifetime_split_are_read() -> None:
    usage = {"prompt_tokens_details": {"cached_tokens": 0}, "cache_creation_input_tokens": 40_000,
             "cache_creation": {"ephemeral_5m_input_tokens": 30_000, "ephemeral_1h_input_tokens": 10_000}}
    out, _ = await _chat("moonshot", usage)
    assert out.usage.prompt_tokens_details == PromptTokensDetails(
        cached_tokens=0, cache_write_tokens=40_000, cache_write_1h_tokens=10_000)
    # no cached-tokens field at all, only writes: still read (the details are known)
    out, _ = await _chat("moonshot", {"cache_creation_input_tokens": 7})
    assert out.usage.prompt_tokens_details == PromptTokensDetails(cached_tokens=0, cache_write_tokens=7)
    # neither: unknown, as before
    out, _ = await _chat("moonshot", {})
    assert out.usage.prompt_tokens_details is None


async def test_moonshots_top_level_cached_tokens_are_cache_reads_priced_at_the_cached_price() -> None:
    # Moonshot's chat completions report cache hits as usage.cached_tokens (platform.kimi.ai/docs/api/chat)
    out, _ = await _chat("moonshot", {"cached_tokens": 60_000})
    assert out.usage.prompt_tokens_details == PromptTokensDetails(cached_tokens=60_000)
    # 40,000 fresh * $2 + 60,000 cached * $0.20 + 1,000 out * $10, per 1M: not 100,000 at the input price
    assert PRO.cost(out.usage) == pytest.approx(0.08 + 0.012 + 0.01, abs=1e-12)
    # the OpenAI-shaped field, where both are sent, wins; with a write count beside it
    out, _ = await _chat("moonshot", {"cached_tokens": 5, "prompt_tokens_details": {"cached_tokens": 7},
                                      "cache_creation_input_tokens": 3})
    assert out.usage.prompt_tokens_details == PromptTokensDetails(cached_tokens=7, cache_write_tokens=3)


@pytest.mark.parametrize("profile", ["vllm", "sglang", "openai"])
async def test_engines_without_the_option_refuse_a_lifetime_before_any_request(profile: str) -> None:
    async with SSEServer(lambda n, body: _reply({})) as server:
        engine = RemoteEngine(base_url=server.base_url, model="k3", profile=profile)  # type: ignore[arg-type]
        try:
            with pytest.raises(UserError) as e:
                await Client(engine, max_retries=0).chat([{"role": "user", "content": "hi"}],
                                                         prompt_cache_lifetime="1h")
        finally:
            await engine.aclose()
        assert server.requests == []
    assert str(e.value) == (
        f"ModelSettings.prompt_cache_lifetime='1h' cannot be sent to a '{profile}'-profile endpoint: only "
        "Moonshot's hosted API (the 'moonshot' profile) takes a prompt cache lifetime; a self-hosted engine keeps "
        "its prefix cache as long as its memory allows. Leave prompt_cache_lifetime unset there")


def test_a_token_engine_refuses_a_lifetime_before_any_call() -> None:
    engine = ScriptedEngine(["hi"], model="kimi-k3.1-pro")
    agent = Agent(engine=engine, settings=ModelSettings(prompt_cache_lifetime="5m"))
    with pytest.raises(UserError, match=r"cannot be sent to ScriptedEngine \(a token engine\)"):
        anyio.run(agent.run, "hi")
    assert engine.calls == []


def test_only_the_two_lifetimes_exist() -> None:
    with pytest.raises(UserError, match=r"ModelSettings.prompt_cache_lifetime must be '5m' or '1h', got '30m'"):
        ModelSettings(prompt_cache_lifetime="30m")  # type: ignore[arg-type]
    merged = ModelSettings(prompt_cache_lifetime="5m").merged(ModelSettings(prompt_cache_lifetime="1h"))
    assert merged.prompt_cache_lifetime == "1h"
    assert ModelSettings(prompt_cache_lifetime="1h").merged(ModelSettings(seed=3)).prompt_cache_lifetime == "1h"


def test_highspeed_has_no_invented_price_and_a_usd_budget_on_it_is_refused_before_any_call() -> None:
    engine = ScriptedEngine(["hi"], model="kimi-k3.1-pro-highspeed")
    with pytest.raises(UserError) as e:
        anyio.run(Agent(engine=engine, budgets=Budgets(usd=1.0)).run, "hi")
    assert engine.calls == []
    assert str(e.value) == (
        "Budgets(usd=...) needs prices: model 'kimi-k3.1-pro-highspeed' is priced apart from kimi-k3.1-pro "
        "(Moonshot, 2026-10-23) and its prices are unknown to kimik3 (no Moonshot page states them); give them with "
        "Agent(pricing=kimik3.Pricing(...)) (on the command line: --price IN,CACHED,OUT)")
    # its run without a budget has no cost (not Pro's)
    result = anyio.run(Agent(engine=ScriptedEngine(["hi"], model="kimi-k3.1-pro-highspeed")).run, "hi")
    assert result.cost is None


async def test_a_usd_budget_on_an_endpoint_whose_model_is_unnamed_is_refused_before_any_chat_request() -> None:
    # issue 40: with no --model the first turn ran (and wrote a file) before the refusal; the
    # model is now asked of the server (/v1/models) first, and the run refused before any chat request
    models = Reply(headers={"content-type": "application/json"},
                   parts=[b'{"object": "list", "data": [{"id": "my-k3", "object": "model"}]}'])
    async with SSEServer(lambda n, body: models if n == 0 else _reply({}), models="respond") as server:
        engine = RemoteEngine(base_url=server.base_url, profile="vllm")
        try:
            with pytest.raises(UserError, match=r"Budgets\(usd=...\) needs prices: model 'my-k3' has none"):
                await Agent(engine=engine, budgets=Budgets(usd=0.3)).run("write a file")
        finally:
            await engine.aclose()
        assert [r["path"] for r in server.requests] == ["/v1/models"]


async def test_reasoning_tokens_are_read_where_the_server_reports_them() -> None:
    out, _ = await _chat("moonshot", {"completion_tokens_details": {"reasoning_tokens": 640}})
    assert out.usage.reasoning_tokens == 640
    out, _ = await _chat("moonshot", {})
    assert out.usage.reasoning_tokens is None and out.usage.completion_tokens_details is None
    reported = out.usage.model_copy(update={"completion_tokens_details": CompletionTokensDetails(reasoning_tokens=5)})
    summed = out.usage + reported
    assert summed.reasoning_tokens == 5


def test_the_command_line_option_reaches_the_settings_and_a_token_engine_refuses_it(tmp_path: Any) -> None:
    import json

    from click.testing import CliRunner

    from kimik3.cli import main

    script = tmp_path / "s.json"
    script.write_text(json.dumps(["hi"]))
    out = CliRunner().invoke(main, ["run", "hi", "--script", str(script), "--prompt-cache-lifetime", "1h", "--plain",
                                    "--sandbox", "none", "-w", str(tmp_path), "--session", str(tmp_path / "s.jsonl")],
                             env={"KIMIK3_HOME": str(tmp_path / "home")})
    assert out.exit_code == 1
    assert out.output.splitlines()[-1] == (
        "error: UserError: ModelSettings.prompt_cache_lifetime='1h' cannot be sent to ScriptedEngine (a token "
        "engine): only Moonshot's hosted API (the 'moonshot' profile) takes a prompt cache lifetime; a self-hosted "
        "engine keeps its prefix cache as long as its memory allows. Leave prompt_cache_lifetime unset there")
    bad = CliRunner().invoke(main, ["run", "hi", "--script", str(script), "--prompt-cache-lifetime", "30m"])
    assert bad.exit_code == 2 and "'30m' is not one of '5m', '1h'" in bad.output
