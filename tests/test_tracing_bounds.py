"""Tracing that model text and collectors cannot abuse (issue 26, item 6): the required
``gen_ai.provider.name``, tool names the model made up kept out of span names, and a dead or
slow collector that delays exit by ~2 s at most (child processes under a generous limit)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="opentelemetry-sdk is not installed")

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from kimik3 import Agent, ScriptedEngine, tool
from kimik3._tracing import EXIT_FLUSH_S, PROVIDER_NAME, set_capture_content
from kimik3.formats.k3 import render_output

ROOT = str(Path(__file__).resolve().parents[1])
SECRET = "sk-live-0123456789abcdefSECRET"


@pytest.fixture(scope="module")
def provider_exporter() -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


@pytest.fixture
def spans(provider_exporter: InMemorySpanExporter) -> Iterator[InMemorySpanExporter]:
    provider_exporter.clear()
    set_capture_content(None)
    yield provider_exporter
    set_capture_content(None)


@tool
def add(a: int, b: int) -> int:
    """Add."""
    return a + b


def calls(*names: str) -> str:
    return render_output({"reasoning_content": "r", "content": "",
                          "tool_calls": [{"id": "x", "function": {"name": n, "arguments": {"a": 1, "b": 2}}}
                                         for n in names]})  # fmt: skip


def answer(text: str) -> str:
    return render_output({"reasoning_content": "r", "content": text})


# a made-up "tool name" of 5,000+ characters of model text, a secret in it (the input)
MADE_UP = f"please_use_the_key_{SECRET}_" + "and then " * 560 + "\x1b]52;c;aGk=\x07"


@pytest.mark.parametrize("capture", [False, True])
async def test_a_made_up_tool_name_never_names_a_span(spans: InMemorySpanExporter, capture: bool) -> None:
    set_capture_content(capture)
    engine = ScriptedEngine([calls("add", MADE_UP, "x" * 100), answer("3")], model="k3")
    await Agent(tools=[add], engine=engine, name="a").run("1+2?")
    finished = sorted(spans.get_finished_spans(), key=lambda s: s.start_time or 0)
    names = [s.name for s in finished]
    assert names == ["invoke_agent a", "chat k3", "execute_tool add", "execute_tool", "execute_tool", "chat k3"]
    tools = [dict(s.attributes or {}) for s in finished if s.name.startswith("execute_tool")]
    assert tools[0]["gen_ai.tool.name"] == "add"
    everything = json.dumps([{"name": s.name, **dict(s.attributes or {})} for s in finished])
    if capture:  # recorded as content: bounded and sanitised
        assert [t["gen_ai.tool.name"] for t in tools[1:]] == [f"please_use_the_key_{SECRET}_and_then_and_t",
                                                             "x" * 64]
        assert all(len(str(t["gen_ai.tool.name"])) <= 64 for t in tools)
    else:  # content capture off: the model's text is nowhere
        assert all("gen_ai.tool.name" not in t for t in tools[1:])
        assert SECRET not in everything and "and then" not in everything
    assert "\x1b" not in everything
    for t in tools[1:]:
        assert t["error.type"] == "tool_error" and t["gen_ai.operation.name"] == "execute_tool"


async def test_provider_name_is_on_every_run_and_model_call(spans: InMemorySpanExporter) -> None:
    await Agent(tools=[add], engine=ScriptedEngine([calls("add"), answer("3")], model="k3")).run("1+2?")
    finished = spans.get_finished_spans()
    providers = {s.name: dict(s.attributes or {}).get("gen_ai.provider.name") for s in finished}
    assert PROVIDER_NAME == "moonshot_ai"
    assert providers == {"invoke_agent": "moonshot_ai", "chat k3": "moonshot_ai", "execute_tool add": None}


# -- exit with a collector that does not answer ----------------------------------------------


class _SlowCollector(threading.Thread):
    """Accepts OTLP/HTTP connections, reads the request and answers nothing for ten minutes."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]

    def run(self) -> None:
        held = []
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.recv(65536)
            held.append(conn)  # never answered, never closed


@pytest.mark.parametrize("collector", ["black hole", "slow"])
def test_a_dead_or_slow_collector_delays_exit_by_about_two_seconds(tmp_path: Path, collector: str) -> None:
    if collector == "slow":
        server = _SlowCollector()
        server.start()
        port = server.port
    else:  # listens, never accepts: connections complete, nothing reads them
        hole = socket.socket()
        hole.bind(("127.0.0.1", 0))
        hole.listen(16)
        port = hole.getsockname()[1]
    script = tmp_path / "script.json"
    script.write_text(json.dumps([answer("done")]))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIMIK3_", "OTEL_"))}
    # the exporter's own deadline is long here (as a user may set it): only kimik3's exit bound holds
    env.update(KIMIK3_HOME=str(tmp_path / "home"), OTEL_EXPORTER_OTLP_TRACES_TIMEOUT="600", PYTHONPATH=ROOT)
    proc = subprocess.Popen([sys.executable, "-m", "kimik3", "run", "hi", "-w", str(tmp_path), "--script",
                             str(script), "--otel", f"http://127.0.0.1:{port}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
    try:
        assert proc.stdout is not None
        lines = iter(proc.stdout.readline, "")
        assert any("done" in line for line in lines)  # the run's answer: from here on the process is exiting
        # generous for ~2 s of flushing; before, the exit took 30 s and more (41 s with this timeout)
        proc.wait(timeout=15)
        stderr = proc.stderr.read() if proc.stderr is not None else ""
    finally:
        proc.kill()
        proc.wait()
        (server.sock if collector == "slow" else hole).close()
    assert proc.returncode == 0, stderr
    assert (f"kimik3: the OpenTelemetry collector at http://127.0.0.1:{port} did not take the last spans within "
            f"{EXIT_FLUSH_S:g} s; they are dropped") in stderr


def test_exit_flush_waits_for_a_collector_that_answers(tmp_path: Path) -> None:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    got: list[bytes] = []

    class Collector(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            got.append(self.rfile.read(int(self.headers["content-length"])))
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        script = tmp_path / "script.json"
        script.write_text(json.dumps([answer("done")]))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("KIMIK3_", "OTEL_"))}
        env.update(KIMIK3_HOME=str(tmp_path / "home"), PYTHONPATH=ROOT)
        proc = subprocess.run([sys.executable, "-m", "kimik3", "run", "hi", "-w", str(tmp_path), "--script",
                               str(script), "--otel", f"http://127.0.0.1:{httpd.server_address[1]}"],
                              capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert proc.returncode == 0, proc.stderr
    assert "did not take the last spans" not in proc.stderr
    assert len(got) >= 1 and b"invoke_agent" in b"".join(got) and b"moonshot_ai" in b"".join(got)
