"""``eval replay``: the requests a session recorded are rebuilt exactly (the engine's own record of
what it was sent is the reference), sent again, and scored like the Vendor Verifier."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import pytest
from click.testing import CliRunner

from kimik3 import Agent, Budgets, Client, ContextPolicy, ModelSettings, ScriptedEngine, SessionError, tool
from kimik3.cli import main
from kimik3.eval import recorded_requests, replay, replay_summary
from kimik3.formats.k3 import render_output
from kimik3.types import Message, UserMessage, dump_message

from .helpers import calls


@tool
def echo(text: str) -> str:
    """Echo text back.

    Args:
        text: what to echo.
    """
    return text


@tool
def count(path: str, limit: int = 10) -> int:
    """Count lines.

    Args:
        path: the file.
        limit: at most this many.
    """
    return 3


def dumped(messages: Any) -> list[dict[str, Any]]:
    return [dump_message(m) for m in messages]


def record_session(path: Path) -> ScriptedEngine:
    """A run with two tool turns, a compaction and a budget's summary turn, recorded in ``path``."""
    turns = [calls(("echo", {"text": f"t{i} " + "word " * 300})) for i in range(3)]

    done = 0

    def script(messages: list[Message]) -> str:
        nonlocal done
        last = messages[-1]
        if isinstance(last, UserMessage) and "Summarise the conversation" in str(last.content):
            return render_output({"content": "SUMMARY: echoed"})
        done += 1
        return turns[done - 1] if done <= len(turns) else "the summary"

    engine = ScriptedEngine(script)
    agent = Agent(instructions="be brief", tools=[echo, count], engine=engine, budgets=Budgets(turns=3),
                  settings=ModelSettings(temperature=0.3, max_tokens=500, reasoning_effort="high"),
                  context=ContextPolicy(context_window=3000, compact_at=0.5, keep_recent_turns=1))
    result = anyio.run(lambda: agent.run("go", session=path))
    assert result.stop_reason == "turn_budget"
    return engine


def test_recorded_requests_are_exactly_what_the_engine_was_sent(tmp_path: Path) -> None:
    session = tmp_path / "s.jsonl"
    engine = record_session(session)
    model_calls = [c for c in engine.calls if "Summarise the conversation" not in str(c.messages[-1].content)]
    assert len(model_calls) < len(engine.calls)  # a compaction happened, and it is no recorded turn
    recorded = recorded_requests(session)
    assert len(recorded) == len(model_calls) == 4
    for rec, sent in zip(recorded, model_calls, strict=True):
        assert rec.request is not None and rec.skipped is None
        assert dumped(rec.request.messages) == dumped(sent.messages)
        assert rec.request.tools == sent.request.tools
        got = rec.request
        assert (got.tool_choice, got.settings.reasoning_effort, got.settings.temperature, got.settings.max_tokens) == (
            sent.request.tool_choice, "high", 0.3, 500)
        assert got.settings == sent.request.settings  # top_p, seed, extra too
    assert [r.request.tool_choice for r in recorded if r.request] == [None, None, None, "none"]  # the summary turn
    assert [r.finish_reason for r in recorded] == ["tool_calls", "tool_calls", "tool_calls", "stop"]


def answers(*texts: str) -> ScriptedEngine:
    return ScriptedEngine(list(texts))


def test_replay_scores_like_the_vendor_verifier(tmp_path: Path) -> None:
    session = tmp_path / "s.jsonl"
    record_session(session)
    recorded = recorded_requests(session)  # tool_calls, tool_calls, tool_calls, stop
    engine = answers(
        calls(("echo", {"text": "again"})),  # TP, same tool, valid
        calls(("count", {"limit": "many"})),  # TP, another tool, invalid (no path, limit not an int)
        "no call",  # FN
        calls(("echo", {"text": "x"})),  # FP (the recorded summary turn called nothing)
    )
    rows = anyio.run(lambda: replay(recorded, Client(engine), concurrency=1))
    assert [(r.recorded_finish, r.replayed_finish, r.replayed_tools, r.arguments_valid) for r in rows] == [
        ("tool_calls", "tool_calls", ["echo"], True), ("tool_calls", "tool_calls", ["count"], False),
        ("tool_calls", "stop", [], None), ("stop", "tool_calls", ["echo"], True)]
    assert rows[1].problems == ["count: arguments do not match the schema: (arguments): 'path' is a required property"]
    s = replay_summary(rows)
    assert (s["tp"], s["fp"], s["fn"], s["tn"]) == (2, 1, 1, 0)
    assert s["tool_call_precision"] == pytest.approx(2 / 3) and s["tool_call_recall"] == pytest.approx(2 / 3)
    assert s["tool_call_f1"] == pytest.approx(2 / 3)
    assert (s["count_finish_reason_tool_calls"], s["count_successful_tool_call"]) == (3, 2)
    assert s["schema_accuracy"] == pytest.approx(2 / 3)
    assert s["tool_names_match"] == pytest.approx(1 / 2) and s["finish_reason_match"] == pytest.approx(2 / 4)
    assert s["finish_reasons"] == {"stop": 1, "tool_calls": 3}


def test_sessions_without_declarations_are_skipped_and_bad_ones_are_named(tmp_path: Path) -> None:
    old = tmp_path / "old.jsonl"
    old.write_text("\n".join(json.dumps(x) for x in [
        {"kimik3_session": 1, "created": 0, "tools": ["echo"]},
        {"message": {"role": "user", "content": "hi"}},
        {"message": {"role": "assistant", "content": "hello"}, "usage": {"prompt_tokens": 3}}]) + "\n")
    (rec,) = recorded_requests(old)
    assert rec.request is None and rec.skipped is not None and "no tool declarations" in rec.skipped
    rows = anyio.run(lambda: replay([rec], Client(answers("x"))))
    assert rows[0].skipped == rec.skipped and replay_summary(rows)["skipped"] == 1
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(json.dumps(x) for x in [
        {"kimik3_session": 1, "created": 0},
        {"run_start": {"tools": [{"type": "function", "function": {"name": 5}}], "model": "m", "settings": {}}}]) + "\n")
    with pytest.raises(SessionError, match=r"bad.jsonl:2: the run_start record's tools are not tool declarations"):
        recorded_requests(bad)
    bad.write_text("\n".join(json.dumps(x) for x in [
        {"kimik3_session": 1, "created": 0},
        {"run_start": {"tools": [], "model": "m", "settings": {"temperature": -1}}}]) + "\n")
    with pytest.raises(SessionError, match=r"bad.jsonl:2: the run_start record's settings are not valid"):
        recorded_requests(bad)


@contextmanager
def tool_server() -> Iterator[str]:
    """An OpenAI-style server whose every answer calls ``echo`` with ``{}`` (invalid: no text)."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _json(self, payload: Any) -> None:
            data = json.dumps(payload).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._json({"object": "list", "data": [{"id": "k3", "object": "model"}]})

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["content-length"]))
            call = {"id": "c0", "type": "function", "function": {"name": "echo", "arguments": "{}"}}
            self._json({"choices": [{"index": 0, "finish_reason": "tool_calls",
                                     "message": {"role": "assistant", "content": None, "tool_calls": [call]}}],
                        "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_eval_replay_on_the_command_line(tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    record_session(sessions / "s.jsonl")
    out = tmp_path / "out"
    with tool_server() as url:
        r = CliRunner().invoke(main, ["eval", "replay", str(sessions), "--base-url", url, "--out", str(out),
                                      "--concurrency", "2"], env={"KIMIK3_API_KEY": None})
    lines = r.output.splitlines()
    assert r.exit_code == 0, r.output
    where = str(sessions / "s.jsonl")
    rec = [r.index for r in recorded_requests(sessions / "s.jsonl")]
    why = "echo: arguments do not match the schema: (arguments): 'text' is a required property"
    assert sorted(lines[:4]) == sorted(
        [f"{where}:{i}: recorded tool_calls ['echo'] -> tool_calls ['echo']; {why}" for i in rec[:3]]
        + [f"{where}:{rec[3]}: recorded stop [] -> tool_calls ['echo']; {why}"])
    assert lines[-3:] == ["replayed 4 of 4 requests (0 errors, 0 skipped)",
                          "tool_call_f1: 85.7% (precision 75.0%, recall 100.0%; tp 3, fp 1, fn 0, tn 0)",
                          "schema_accuracy: 0.0% (0/4); tool names match 100.0%; finish reason match 75.0%"]
    rows = [json.loads(x) for x in (out / "replay.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and json.loads((out / "replay-summary.json").read_text())["schema_accuracy"] == 0.0
    with tool_server() as url:
        r = CliRunner().invoke(main, ["eval", "replay", str(sessions), "--base-url", url, "--min-schema-accuracy",
                                      "0.9"], env={"KIMIK3_API_KEY": None})
    assert r.exit_code == 1 and "FAILED: schema_accuracy 0.0% is below 90.0%" in r.output


def test_a_session_name_with_a_newline_cannot_draw_a_replay_line(tmp_path: Path) -> None:
    """Replay's row lines hold recorded text (the session's path, a server's error): a newline in
    it is escaped, so it cannot draw a line of eval's own (issue 40, the escapes kind)."""
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    forged = "s\nreplayed 4 of 4 requests (0 errors, 0 skipped)\n.jsonl"
    record_session(sessions / forged)
    with tool_server() as url:
        r = CliRunner().invoke(main, ["eval", "replay", str(sessions), "--base-url", url],
                               env={"KIMIK3_API_KEY": None})
    assert r.exit_code == 0, r.output
    rows = [line for line in r.output.splitlines() if "recorded" in line]
    assert len(rows) == 4 and all("s\\u000areplayed 4 of 4 requests" in line for line in rows)
    assert [line for line in r.output.splitlines() if line.startswith("replayed")] == [
        "replayed 4 of 4 requests (0 errors, 0 skipped)"]
