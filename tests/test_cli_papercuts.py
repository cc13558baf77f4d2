"""A newcomer's paper cuts (README only): the printed ``continue with:`` line runs as printed
(the session records its engine options, never a credential; resume takes them back, checked as
untrusted data), ``kimik3 undo`` works in the session's workspace from any folder, ``kimik3 show``
shows an undo where it happened, a tool call's ``)`` never stands alone on a wrapped line, and a
run stopped with waiting calls says they wait."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner

from kimik3 import Allow, Defer, ScriptedEngine
from kimik3.agents import PendingCall, SessionLog
from kimik3.cli import engine as cli_engine
from kimik3.cli import main, recorded
from kimik3.harness import FEATURES, CodingHarness
from tests.harness.helpers import calls
from tests.test_cli import answer, call, env_for, invoke, make_repo, progress_lines, write_script

WRITE_B = [call("write_file", {"path": "b.txt", "content": "new\n"}), answer("wrote b.txt")]


def first_run(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A CLI run writing b.txt in a fresh repository: (session, repo, script)."""
    repo, session = make_repo(tmp_path), tmp_path / "s.jsonl"
    script = write_script(tmp_path / "write.json", WRITE_B)
    out = invoke(["run", "write b", "-w", str(repo), "--script", str(script), "--session", str(session), "--plain",
                  "--sandbox", "none"], tmp_path / "home")
    assert out.exit_code == 0, out.output
    assert (repo / "b.txt").read_text() == "new\n"
    return session, repo, script


def header_with(session: Path, **fields: object) -> bytes:
    """Rewrite ``session``'s header with ``fields`` (a forged or older header); its new bytes."""
    lines = session.read_bytes().split(b"\n")
    header = json.loads(lines[0])
    header.update(fields)
    lines[0] = json.dumps(header).encode()
    session.write_bytes(b"\n".join(lines))
    return session.read_bytes()


def test_resume_with_no_engine_options_runs_on_the_engine_the_session_records(tmp_path: Path) -> None:
    session, repo, script = first_run(tmp_path)
    assert SessionLog.read(session).header["engine"] == ["--script", str(script.resolve())]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = subprocess.run([sys.executable, "-m", "kimik3", "resume", str(session), "write it again", "--plain",
                           "--sandbox", "none"], cwd=elsewhere, capture_output=True, text=True,
                          env=env_for(tmp_path / "home"), timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"engine as the session records it: --script {shlex.quote(str(script.resolve()))}"
    assert progress_lines(proc.stdout)[-1] == "[turn 2] answer: wrote b.txt"
    assert (repo / "b.txt").read_text() == "new\n" and not (elsewhere / "b.txt").exists()  # the session's workspace
    # an explicit engine wins, and nothing is said of the recorded one (variant)
    other = write_script(tmp_path / "other.json", [answer("the other engine")])
    out = invoke(["resume", str(session), "once more", "--script", str(other), "--plain", "--sandbox", "none"],
                 tmp_path / "home")
    assert out.exit_code == 0, out.output
    assert "engine as the session records it" not in out.output
    assert progress_lines(out.stdout) == ["[turn 1] answer: the other engine"]


def test_the_recorded_engine_options_carry_no_credential(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    served = recorded.recorded_command.make_context("kimik3 run", [
        "--base-url", "http://user:pw@127.0.0.1:8000/v1?api-key=s3cret&model=k3", "--api-key", "sk-secret",
        "--model", "kimi-k3", "--request-timeout", "30"])
    assert recorded.engine_argv(cli_engine.options_from(served.params)) == [
        "--base-url", "http://***@127.0.0.1:8000/v1?api-key=***&model=k3", "--model", "kimi-k3",
        "--request-timeout", "30.0"]
    embedded = recorded.recorded_command.make_context("kimik3 run", [
        "--model-path", str(model), "--max-model-len", "4096", "--trust-remote-code", "--no-enforce-eager",
        "--engine-arg", "hf_token=hf_abc", "--engine-arg", "max-num-seqs=8", "--engine-arg", "kv_cache_dtype=fp8"])
    assert recorded.engine_argv(cli_engine.options_from(embedded.params)) == [
        "--model-path", str(model), "--max-model-len", "4096", "--no-enforce-eager", "--trust-remote-code",
        "--engine-arg", "max_num_seqs=8", "--engine-arg", 'kv_cache_dtype="fp8"']


def test_a_base_url_recorded_redacted_is_refused_naming_what_to_give(tmp_path: Path) -> None:
    session, _, _ = first_run(tmp_path)
    before = header_with(session, engine=["--base-url", "http://***@127.0.0.1:8000/v1", "--model", "k3"])
    out = invoke(["resume", str(session), "again", "--plain", "--sandbox", "none"], tmp_path / "home")
    assert out.exit_code == 1
    assert out.stderr == (f"error: SessionError: session {session} ran on http://***@127.0.0.1:8000/v1, whose "
                          "credentials are not recorded; nothing was run: give the engine options (--base-url URL "
                          "...)\n")
    assert session.read_bytes() == before


@pytest.mark.parametrize(("engine", "what"), [
    (["--mcp", "sh -c evil"], "holds '--mcp', not one of the engine options (--base-url, --model, --mode, "
                              "--tokenizer, --model-path, --preset, --feature, --tensor-parallel-size, "
                              "--max-model-len, --enforce-eager, --no-enforce-eager, --gpu-memory-utilization, "
                              "--dtype, --trust-remote-code, --engine-arg, --script, --request-timeout)"),
    ("--script x", "must be a list of at most 64 strings"),
    (["--model", 5], "holds 5, not a printable string of at most 4096 characters"),
    (["--model", "k3\x1b[2J"], "holds 'k3\\x1b[2J', not a printable string of at most 4096 characters"),
    (["--model"], "ends with --model without its value"),
    (["--model", "k3"] * 33, "must be a list of at most 64 strings"),
])
def test_a_forged_engine_record_is_refused_before_anything_runs(tmp_path: Path, engine: object, what: str) -> None:
    session, _, _ = first_run(tmp_path)
    before = header_with(session, engine=engine)
    out = invoke(["resume", str(session), "again", "--plain", "--sandbox", "none"], tmp_path / "home")
    assert out.exit_code == 1
    assert out.stderr == f'error: SessionError: {session}:1: malformed session header: "engine" {what}\n'
    assert session.read_bytes() == before


def test_recorded_options_that_no_longer_hold_are_one_typed_line(tmp_path: Path) -> None:
    session, _, script = first_run(tmp_path)
    script.unlink()
    out = invoke(["resume", str(session), "again", "--plain", "--sandbox", "none"], tmp_path / "home")
    assert out.exit_code == 1
    assert out.stderr == (f"error: SessionError: session {session} records engine options that do not hold now "
                          f"(Invalid value for '--script': File '{script}' does not exist.); nothing was run: give "
                          "the engine options\n")


def test_undo_works_in_the_recorded_workspace_from_any_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    session, repo, _ = first_run(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    (other / "b.txt").write_text("not the agent's\n")
    monkeypatch.chdir(other)
    refused = CliRunner().invoke(main, ["undo", str(session), "-w", "."])  # -w given and another: refused
    assert refused.exit_code == 1
    assert refused.stderr.endswith(f"the checkpoint of turn 1 is for the workspace {str(repo.resolve())!r}, not "
                                   f"{str(other.resolve())!r}; undo restores only the workspace it is run for "
                                   "(--workspace); nothing was changed\n")
    assert (repo / "b.txt").exists()
    out = CliRunner().invoke(main, ["undo", str(session)])
    assert out.exit_code == 0, out.output
    assert out.stdout == "removed b.txt\n"
    assert not (repo / "b.txt").exists()
    assert (other / "b.txt").read_text() == "not the agent's\n"  # the folder it was run from: untouched
    # show: the undo in its place, after the turns it undid, before the totals
    shown = CliRunner().invoke(main, ["show", str(session)]).stdout.splitlines()
    assert shown[-3:-1] == ["    wrote b.txt", "--- undone: the file changes after turn 0 (kimik3 undo --to 0): b.txt"]
    assert shown[-1].startswith("2 turns; total usage: ")


def test_show_names_at_most_ten_undone_paths_and_survives_a_malformed_undo(tmp_path: Path) -> None:
    session, _, _ = first_run(tmp_path)
    with session.open("a") as f:
        f.write(json.dumps({"undo": {"to": 1, "paths": [f"f{i}.txt" for i in range(12)]}}) + "\n")
        f.write(json.dumps({"undo": {"to": "1", "paths": []}}) + "\n")
    shown = CliRunner().invoke(main, ["show", str(session)]).stdout.splitlines()
    assert shown[-3:-1] == [
        "--- undone: the file changes after turn 1 (kimik3 undo --to 1): f0.txt, f1.txt, f2.txt, f3.txt, f4.txt, "
        "f5.txt, f6.txt, f7.txt, f8.txt, f9.txt and 2 more",
        '--- undo (a malformed record: {"to": "1", "paths": []})']


@pytest.mark.parametrize("size", [30, 60, 72, 120, 250])
def test_a_wrapped_tool_call_keeps_its_closing_parenthesis_with_its_arguments(tmp_path: Path, size: int) -> None:
    repo, session = make_repo(tmp_path), tmp_path / "s.jsonl"
    command = "echo " + "x" * (size - 5)
    script = write_script(tmp_path / "s.json", [call("bash", {"command": command}), answer("done")])
    assert invoke(["run", "echo", "-w", str(repo), "--script", str(script), "--session", str(session), "--plain",
                   "--sandbox", "none"], tmp_path / "home").exit_code == 0
    call_id = SessionLog.read(session).messages[2].tool_calls[0].id  # type: ignore[union-attr]
    shown = CliRunner().invoke(main, ["show", str(session)]).stdout.splitlines()
    at = next(i for i, line in enumerate(shown) if line.startswith("    -> bash("))
    arguments = json.dumps({"command": command})
    head = "    -> bash("
    lines = {30: 1, 120: 2, 250: 4}.get(size, 2)
    if size == 30:  # all of it fits on one line
        assert shown[at] == f"{head}{arguments})  id={call_id}"
    elif size < 100:  # ")" follows the arguments; the id goes on the next line
        assert len(head + arguments) + 1 <= 100 < len(head + arguments) + 3 + len(f"id={call_id}")
        assert shown[at:at + 2] == [f"{head}{arguments})", f"        id={call_id}"]
    elif size == 120:  # the arguments wrap; their last piece carries the ")" and the id
        first = 99 - len(head)
        assert shown[at:at + 2] == [head + arguments[:first], f"        {arguments[first:]})  id={call_id}"]
    else:  # wrapped, and the id does not fit after the ")": the id alone on the next line
        first, second = 99 - len(head), 99 - len(head) + 91
        assert shown[at:at + 4] == [head + arguments[:first], f"        {arguments[first:second]}",
                                    f"        {arguments[second:]})", f"        id={call_id}"]
    assert all(len(line) <= 100 for line in shown[at:at + lines])
    assert shown[at + lines].startswith("[3] tool bash result for ")
    assert not any(line.lstrip().startswith(")") for line in shown)


@pytest.mark.parametrize(("commands", "counted"), [(["ls"], "0 tool calls run, 1 waits"),
                                                     (["ls", "pwd"], "0 tool calls run, 2 wait")])
def test_a_run_stopped_with_waiting_calls_counts_them_as_waiting(tmp_path: Path, commands: list[str],
                                                                 counted: str) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    session = tmp_path / "s.jsonl"

    def defer_bash(call: PendingCall) -> Allow | Defer:
        return Defer() if call.name == "bash" else Allow()

    agent = CodingHarness(ws, features=FEATURES - {"background", "checkpoints", "subagents", "skills"},
                          sandbox="none").agent(engine=ScriptedEngine([calls(*(("bash", {"command": c}) for c in commands))]),
                                                approval=defer_bash)
    assert anyio.run(lambda: agent.run("list", session=session)).stop_reason == "approval_required"
    script = write_script(tmp_path / "more.json", [answer("never asked")])
    out = invoke(["resume", str(session), "--script", str(script), "--plain", "--sandbox", "none"], tmp_path / "home")
    usage = [line for line in out.stdout.splitlines() if line.startswith("usage: ")]
    assert usage == [f"usage: 0 turns, {counted}, 0 tokens"], out.output
    assert out.stdout.splitlines()[-1] == f"continue with: kimik3 resume {shlex.quote(str(session.resolve()))}"
