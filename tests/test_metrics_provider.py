"""Token metrics only where a meter provider is configured (issue 44): with none (the API's proxy
provider) or a ``NoOpMeterProvider``, a model call builds no instruments and records nothing; a
provider set after ``import kimik3``, even after calls were made without one, gets every call from
then on. Each case runs in a fresh interpreter: the global meter provider can be set once a process.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk", reason="opentelemetry-sdk is not installed")

ROOT = Path(__file__).resolve().parents[1]

PRELUDE = """
import json, anyio
from opentelemetry import metrics
from opentelemetry.sdk.metrics import Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader
from kimik3 import Agent, Client, ScriptedEngine, tool, _tracing
from kimik3.formats.k3 import render_output

ANSWER = render_output({"content": "ok"})
client = Client(ScriptedEngine([ANSWER] * 3, model="kimi-k3"))

def chat(text):
    return anyio.run(client.chat, [{"role": "user", "content": text}])

def points(reader):
    out = []
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data is not None else ():
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                for p in m.data.data_points:
                    out.append([m.name, p.attributes.get("gen_ai.token.type"), int(p.sum) if "token" in m.name else None,
                                p.count])
    return sorted(out, key=lambda x: (x[0], str(x[1])))

out = {}
"""


def child(code: str) -> dict[str, object]:
    """The JSON the last line of a fresh ``python -c PRELUDE + code`` prints (120 s at most)."""
    proc = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(code)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def test_a_provider_set_after_calls_without_one_gets_the_calls_from_then_on() -> None:
    out = child("""
        first = chat("a")  # no provider yet: the API's proxy
        out["instruments_before"] = _tracing._instruments is None
        reader = InMemoryMetricReader(preferred_temporality={Histogram: AggregationTemporality.DELTA})
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
        second = chat("b")
        out["usage"] = [second.usage.prompt_tokens, second.usage.completion_tokens]
        out["points"] = points(reader)
        chat("c")
        out["then"] = points(reader)
        print(json.dumps(out))
    """)
    prompt, completion = out["usage"]  # type: ignore[misc]
    assert out["instruments_before"] is True  # the call without a provider made no instrument
    one_call = [["gen_ai.client.operation.duration", None, None, 1],
                ["gen_ai.client.token.usage", "input", prompt, 1],
                ["gen_ai.client.token.usage", "output", completion, 1]]
    assert out["points"] == one_call  # the second call only: the first one went nowhere
    assert [p[0::3] for p in out["then"]] == [p[0::3] for p in one_call]  # type: ignore[index]


def test_a_no_op_provider_records_nothing_and_an_agent_run_still_works() -> None:
    out = child("""
        metrics.set_meter_provider(metrics.NoOpMeterProvider())
        @tool
        def echo(text: str) -> str:
            "Echo."
            return text
        call = render_output({"content": "", "tool_calls": [{"id": "c1", "function": {"name": "echo", "arguments": {"text": "hi"}}}]})
        result = anyio.run(Agent(tools=[echo], engine=ScriptedEngine([call, ANSWER])).run, "go")
        out["run"] = [result.stop_reason, result.output, result.turns]
        out["instruments"] = _tracing._instruments is None
        print(json.dumps(out))
    """)
    assert out == {"run": ["completed", "ok", 2], "instruments": True}
