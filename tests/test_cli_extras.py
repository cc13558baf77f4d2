"""``kimik3 run/chat`` with ``--plan``, ``--mcp`` and ``--otel`` (scripted K3 replies)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from rich.console import Console

from kimik3 import ScriptedEngine
from kimik3.agents import ToolResultEvent
from kimik3.cli import engine as cli_engine_module
from kimik3.cli import main
from kimik3.cli import progress as cli_progress_module
from kimik3.formats.k3 import render_output
from kimik3.tools import ToolResult

_CLEAN = ("KIMIK3_BASE_URL", "KIMIK3_API_KEY", "KIMIK3_MODEL", "KIMIK3_MODEL_PATH", "FORCE_COLOR", "TTY_COMPATIBLE")
MCP_SERVER = f"{sys.executable} {Path(__file__).parent / 'tools' / 'mcp_server.py'} stdio"


def call(name: str, arguments: dict[str, Any]) -> str:
    return render_output({"reasoning_content": "r", "content": "",
                          "tool_calls": [{"id": "x", "function": {"name": name, "arguments": arguments}}]})


def answer(text: str) -> str:
    return render_output({"reasoning_content": "r", "content": text})


def invoke(args: list[str], home: Path, input: str | None = None) -> Result:
    env: dict[str, str | None] = {k: None for k in _CLEAN}
    env["KIMIK3_HOME"] = str(home)
    return CliRunner().invoke(main, args, input=input, env=env, catch_exceptions=False)


def script(tmp_path: Path, outputs: list[str]) -> str:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(outputs))
    return str(path)


def progress_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("[turn ")]


PLAN = [{"step": "read calc.py", "status": "in_progress"}, {"step": "fix it"}]


def test_run_with_plan_prints_the_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engines: list[ScriptedEngine] = []

    class Recording(ScriptedEngine):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            engines.append(self)

    monkeypatch.setattr(cli_engine_module, "ScriptedEngine", Recording)
    s = script(tmp_path, [call("update_plan", {"plan": PLAN}), answer("ok")])
    result = invoke(["run", "plan it", "-w", str(tmp_path), "--script", s, "--plan"], tmp_path / "home")
    assert result.exit_code == 0, result.output
    assert progress_lines(result.stdout) == [
        f"[turn 1] tool update_plan {json.dumps({'plan': PLAN})}",
        "[turn 1] result update_plan: plan updated: 0 of 2 steps completed",
        "[turn 1] plan [>] read calc.py",
        "[turn 1] plan [ ] fix it",
        "[turn 2] answer: ok",
    ]
    names = [t.function.name for t in engines[0].calls[0].request.tools]
    assert names == ["bash", "read_file", "write_file", "edit_file", "grep", "glob", "multi_edit", "apply_patch",
                     "read_output", "stop", "task", "update_plan"]
    # without --plan the coding agent's tools are unchanged (the full harness's: k3-tiny was trained on them)
    engines.clear()
    plain = invoke(["run", "x", "-w", str(tmp_path), "--script", script(tmp_path, [answer("ok")])], tmp_path / "home")
    assert plain.exit_code == 0
    assert [t.function.name for t in engines[0].calls[0].request.tools] == names[:-1]


def test_the_live_view_shows_the_plan() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=80, color_system=None)
    progress = cli_progress_module._RichProgress(console)
    text = "plan updated: 1 of 2 steps completed\n[x] read calc.py\n[>] fix it"
    progress.event(ToolResultEvent("c1", "update_plan", ToolResult(content=text)))
    console.print(progress)
    shown = out.getvalue()
    assert "[x] read calc.py\n[>] fix it\n" in shown
    progress.event(ToolResultEvent("c2", "update_plan", ToolResult(content="Error: bad", is_error=True)))
    assert progress.plan == text  # an error result leaves the plan as it was


@pytest.mark.parametrize("limit", [[], ["--mcp-timeout", "30"]])
def test_run_with_an_mcp_server(tmp_path: Path, limit: list[str]) -> None:
    s = script(tmp_path, [call("add", {"a": 40, "b": 2}), answer("42")])
    result = invoke(["run", "add", "-w", str(tmp_path), "--script", s, "--mcp", MCP_SERVER, *limit], tmp_path / "home")
    assert result.exit_code == 0, result.output
    assert progress_lines(result.stdout) == [
        '[turn 1] tool add {"a": 40, "b": 2}',
        "[turn 1] result add: 42",
        "[turn 2] answer: 42",
    ]


def test_chat_keeps_one_mcp_server_process_for_every_turn(tmp_path: Path) -> None:
    s = script(tmp_path, [call("pid", {}), answer("a"), call("pid", {}), answer("b")])
    result = invoke(["chat", "--script", s, "--mcp", MCP_SERVER], tmp_path / "home", input="one\ntwo\n")
    assert result.exit_code == 0, result.output
    pids = [line.rsplit(" ", 1)[1] for line in progress_lines(result.stdout) if "result pid:" in line]
    assert len(pids) == 2 and pids[0] == pids[1] and pids[0].isdigit()


@pytest.mark.parametrize(
    ("spec", "code", "message"),
    [
        ("kimik3-no-such-server --flag", 1, "error: MCPServerError: cannot open the MCP server "
                                            "'kimik3-no-such-server': FileNotFoundError"),
        ("''", 2, "an empty command"),
    ],
)
def test_a_bad_mcp_server_is_one_clean_error(tmp_path: Path, spec: str, code: int, message: str) -> None:
    s = script(tmp_path, [answer("never")])
    result = invoke(["run", "x", "-w", str(tmp_path), "--script", s, "--mcp", spec], tmp_path / "home")
    assert result.exit_code == code
    assert message in result.stderr


def test_otel_console_exports_the_spans(tmp_path: Path) -> None:
    pytest.importorskip("opentelemetry.sdk")
    s = script(tmp_path, [call("glob", {"pattern": "*.none"}), answer("nothing")])
    env = {k: v for k, v in os.environ.items() if k not in _CLEAN}
    env["KIMIK3_HOME"] = str(tmp_path / "home")
    proc = subprocess.run([sys.executable, "-m", "kimik3", "run", "look", "-w", str(tmp_path), "--script", s,
                           "--otel", "console"], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    spans = json.loads("[" + proc.stderr.replace("}\n{", "},\n{") + "]")
    assert [sp["name"] for sp in spans] == ["chat scripted-k3", "execute_tool glob", "chat scripted-k3",
                                            "invoke_agent"]
    assert spans[1]["attributes"]["gen_ai.tool.name"] == "glob"
    assert spans[2]["attributes"]["gen_ai.response.finish_reasons"] == ["stop"]
    assert spans[3]["attributes"]["kimik3.stop_reason"] == "completed"
    assert {sp["context"]["trace_id"] for sp in spans} == {spans[3]["context"]["trace_id"]}


def test_otel_exports_to_an_otlp_http_endpoint(tmp_path: Path) -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    received: list[tuple[str, str, bytes]] = []

    class Collector(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append((self.path, self.headers["Content-Type"], body))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        s = script(tmp_path, [answer("hi")])
        env = {k: v for k, v in os.environ.items() if k not in _CLEAN}
        env["KIMIK3_HOME"] = str(tmp_path / "home")
        url = f"http://127.0.0.1:{server.server_address[1]}"
        proc = subprocess.run([sys.executable, "-m", "kimik3", "run", "hello", "-w", str(tmp_path), "--script", s,
                               "--otel", url], capture_output=True, text=True, env=env, timeout=300)
    finally:
        server.shutdown()
    assert proc.returncode == 0, proc.stderr
    assert [(path, kind) for path, kind, _ in received] == [("/v1/traces", "application/x-protobuf")]
    export = ExportTraceServiceRequest.FromString(received[0][2])
    (resource_spans,) = export.resource_spans
    service = {a.key: a.value.string_value for a in resource_spans.resource.attributes}["service.name"]
    names = sorted(span.name for scope in resource_spans.scope_spans for span in scope.spans)
    assert service == "kimik3" and names == ["chat scripted-k3", "invoke_agent"]


def test_the_views_show_no_model_escapes_or_forged_plan_lines(capsys: pytest.CaptureFixture[str]) -> None:
    from kimik3.agents import TurnEndEvent
    from kimik3.engines import Usage
    from kimik3.formats.k3 import ContentDelta
    from kimik3.types import AssistantMessage

    plain = cli_progress_module.PlainProgress()
    plain.event(ToolResultEvent("c1", "ls\x1b[2J", ToolResult(content="\x1b[31mred\x1b[0m file\x07")))
    plain.event(ContentDelta(delta="done \x1b]0;pwned\x07now"))
    plain.event(TurnEndEvent(1, AssistantMessage(content="done \x1b]0;pwned\x07now"), Usage()))
    assert capsys.readouterr().out.splitlines() == ["[turn 1] result ls: red file", "[turn 1] answer: done now"]
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=80, color_system=None)
    rich = cli_progress_module._RichProgress(console)
    rich.event(ContentDelta(delta="hi \x1b[31mthere\x1b[0m\n"))
    rich.event(ToolResultEvent("c1", "update_plan", ToolResult(content="plan updated\n[ ] a\x1b[1A\x1b[2K[x] b")))
    console.print(rich)
    assert "\x1b" not in out.getvalue() and "hi there\n" in out.getvalue() and "[ ] a[x] b\n" in out.getvalue()


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--mcp", "python3 'unbalanced", "Invalid value for '--mcp': cannot split \"python3 'unbalanced\" into a "
                                         "command line: No closing quotation"),
        ("--mcp", "python3 x\\", "Invalid value for '--mcp': cannot split 'python3 x\\\\' into a command line: "
                                 "No escaped character"),
        ("--mcp", "http://", "Invalid value for '--mcp': 'http://' has no host"),
        ("--mcp-timeout", "0", "Invalid value for '--mcp-timeout': 0.0 is not in the range"),
        ("--otel", "notaurl", "Invalid value for '--otel': expected 'console' or an http(s) URL such as "
                              "http://127.0.0.1:4318, got 'notaurl'"),
        ("--otel", "ftp://x", "got 'ftp://x'"),
        ("--otel", "", "got ''"),
        ("--otel", "https://", "got 'https://'"),
    ],
)
@pytest.mark.parametrize("command", ["run", "chat"])
def test_bad_mcp_and_otel_values_are_usage_errors_up_front(
    tmp_path: Path, command: str, flag: str, value: str, message: str
) -> None:
    s = script(tmp_path, [answer("never")])
    args = [command, "x"] if command == "run" else [command]
    result = invoke([*args, "-w", str(tmp_path), "--script", s, flag, value], tmp_path / "home", input="hi\n")
    assert result.exit_code == 2, result.output
    assert ("Traceback" not in result.output and result.exception is None) or isinstance(result.exception, SystemExit)
    assert result.stderr.strip().splitlines()[-1].startswith("Error: ") and message in result.stderr
    assert not (tmp_path / "home" / "sessions").exists()  # nothing ran
