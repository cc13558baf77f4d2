"""OpenTelemetry metrics of model calls (issue 43 part 4): ``gen_ai.client.token.usage`` with the
input split by ``gen_ai.token.cache`` where the server reported it, and
``gen_ai.client.operation.duration``; read back with the SDK's in-memory metric reader."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="opentelemetry-sdk is not installed")

from opentelemetry import metrics
from opentelemetry.sdk.metrics import Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader

from kimik3 import Agent, Client, EngineError, ScriptedEngine
from kimik3._tracing import DURATION_BUCKETS, TOKEN_BUCKETS
from kimik3.formats.k3 import render_output
from kimik3.types import ChatRequest
from tests.agents.test_cost import UsageEngine  # one engine that reports given usage, for cost and metrics

BASE = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "moonshot_ai"}


@pytest.fixture(scope="module")
def reader() -> InMemoryMetricReader:
    reader = InMemoryMetricReader(preferred_temporality={Histogram: AggregationTemporality.DELTA})
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    if reader not in getattr(metrics.get_meter_provider(), "_all_metric_readers", ()):
        pytest.skip("another meter provider was set in this process")
    return reader


@pytest.fixture
def points(reader: InMemoryMetricReader) -> Iterator[InMemoryMetricReader]:
    reader.get_metrics_data()  # drop what earlier tests recorded (delta temporality)
    yield reader


def collected(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    """Each metric's data points by name."""
    out: dict[str, list[Any]] = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data is not None else ():
        for sm in rm.scope_metrics:
            assert sm.scope.name == "kimik3"
            for m in sm.metrics:
                out.setdefault(m.name, []).extend(m.data.data_points)
    return out


def tokens(data: dict[str, list[Any]]) -> list[tuple[dict[str, Any], int, int]]:
    """``(attributes, sum, count)`` of each ``gen_ai.client.token.usage`` point, sorted."""
    pts = data.get("gen_ai.client.token.usage", [])
    return sorted(((dict(p.attributes), int(p.sum), p.count) for p in pts), key=lambda t: sorted(t[0].items()))


async def test_token_usage_per_call_with_the_cache_split(points: InMemoryMetricReader) -> None:
    answer = render_output({"content": "ok"})
    engine = UsageEngine([answer, answer], [(10_000, 200, 4_000), (12_000, 50, 11_000)], model="kimi-k3")
    client = Client(engine)
    await client.chat([{"role": "user", "content": "a"}])
    await client.chat([{"role": "user", "content": "b"}])
    model = {**BASE, "gen_ai.request.model": "kimi-k3", "gen_ai.response.model": "kimi-k3"}
    # per call: output, and the input as its parts (none + read = prompt_tokens); no creation:
    # this engine reports no cache writes
    assert tokens(collected(points)) == [
        ({**model, "gen_ai.token.cache": "none", "gen_ai.token.type": "input"}, 6_000 + 1_000, 2),
        ({**model, "gen_ai.token.cache": "read", "gen_ai.token.type": "input"}, 4_000 + 11_000, 2),
        ({**model, "gen_ai.token.type": "output"}, 250, 2),
    ]


async def test_duration_of_each_call_and_of_a_failed_one(points: InMemoryMetricReader) -> None:
    client = Client(ScriptedEngine([render_output({"content": "ok"})], model="kimi-k3"))
    await client.chat([{"role": "user", "content": "a"}])
    with pytest.raises(EngineError):
        await client.chat([{"role": "user", "content": "b"}])  # the script is used up
    data = collected(points)
    pts = data["gen_ai.client.operation.duration"]
    by_error = {p.attributes.get("error.type"): p for p in pts}
    assert set(by_error) == {None, "EngineError"}
    assert all(p.count == 1 and p.sum >= 0 for p in pts)
    assert list(by_error[None].explicit_bounds) == list(DURATION_BUCKETS)
    assert dict(by_error["EngineError"].attributes) == {**BASE, "gen_ai.request.model": "kimi-k3",
                                                        "error.type": "EngineError"}
    # the failed call has no completion: no token usage recorded for it
    assert [(a["gen_ai.token.type"], n) for a, _, n in tokens(data)] == [("input", 1), ("output", 1)]


async def test_cache_writes_are_their_own_part_and_unknown_usage_is_not_recorded(points: InMemoryMetricReader) -> None:
    from kimik3._tracing import model_call
    from kimik3.types import ChatCompletion, CompletionTokensDetails, PromptTokensDetails, Usage

    request = ChatRequest(messages=[{"role": "user", "content": "a"}])
    usage = Usage(prompt_tokens=100_000, completion_tokens=1_000, total_tokens=101_000,
                  prompt_tokens_details=PromptTokensDetails(cached_tokens=20_000, cache_write_tokens=50_000))
    done = ChatCompletion(model="kimi-k3.1-pro", choices=[{"message": {"role": "assistant", "content": "ok"},
                                                           "finish_reason": "stop"}], usage=usage)
    with model_call(None, "kimi-k3.1-pro", request) as call:
        call.done(done)
    reasoned = done.model_copy(update={"usage": usage.model_copy(update={
        "completion_tokens_details": CompletionTokensDetails(reasoning_tokens=700)})})
    with model_call(None, "kimi-k3.1-pro", request) as call:
        call.done(reasoned)
    unknown = done.model_copy(update={"usage": Usage(unknown=True)})
    with model_call(None, "kimi-k3.1-pro", request) as call:
        call.done(unknown)
    model = {**BASE, "gen_ai.request.model": "kimi-k3.1-pro", "gen_ai.response.model": "kimi-k3.1-pro"}
    data = collected(points)
    assert tokens(data) == [
        ({**model, "gen_ai.token.cache": "creation", "gen_ai.token.type": "input"}, 100_000, 2),
        ({**model, "gen_ai.token.cache": "none", "gen_ai.token.type": "input"}, 60_000, 2),
        ({**model, "gen_ai.token.cache": "read", "gen_ai.token.type": "input"}, 40_000, 2),
        ({**model, "gen_ai.token.phase": "reasoning", "gen_ai.token.type": "output"}, 700, 1),
        ({**model, "gen_ai.token.phase": "response", "gen_ai.token.type": "output"}, 300, 1),
        ({**model, "gen_ai.token.type": "output"}, 1_000, 1),
    ]
    # every call has a duration, only the first two their tokens (the third's server reported none)
    assert [p.count for p in data["gen_ai.client.operation.duration"]] == [3]


async def test_a_run_records_each_of_its_calls_and_no_cache_split_when_unreported(points: InMemoryMetricReader) -> None:
    answer = render_output({"content": "ok"})
    engine = UsageEngine([answer], [(500, 7, None)], model="kimi-k3")
    await Agent(engine=engine).run("hi")
    data = collected(points)
    model = {**BASE, "gen_ai.request.model": "kimi-k3", "gen_ai.response.model": "kimi-k3"}
    assert tokens(data) == [({**model, "gen_ai.token.type": "input"}, 500, 1),
                            ({**model, "gen_ai.token.type": "output"}, 7, 1)]
    assert {tuple(p.explicit_bounds) for p in data["gen_ai.client.token.usage"]} == {TOKEN_BUCKETS}
