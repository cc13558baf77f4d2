"""Issue 40, Deliver 4: nothing typed is lost and every fault ends typed. A hung server ends at
``--request-timeout``; a session, once created, is never deleted by a failure or Ctrl-C (the task
stays, unanswered, with a runnable ``continue with`` line); Ctrl-C exits 130 quietly, also while
the embedded engine starts; every start error of ``VLLMEngine`` is a kimik3 error with its log's tail.

The commands run in child processes (a hang ends at their generous limit, never the test's own
clock) against a stand-in server that accepts connections and never answers.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from kimik3 import EngineError
from kimik3.agents import load_session
from kimik3.cli import main
from kimik3.engines import VLLMEngine
from kimik3.types import AssistantMessage, ToolMessage, UserMessage
from tests.engines.test_serve_processes import gone
from tests.test_cli import answer, call

ROOT = Path(__file__).resolve().parents[1]
_CLEAN = ("KIMIK3_BASE_URL", "KIMIK3_API_KEY", "KIMIK3_MODEL", "KIMIK3_MODEL_PATH", "OPENAI_BASE_URL")


@pytest.fixture
def hung_server() -> Iterator[tuple[str, threading.Event]]:
    """A base URL whose server accepts connections, reads nothing and never answers; the event
    is set once a connection arrived."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    arrived = threading.Event()
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)
            arrived.set()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}/v1", arrived
    finally:
        server.close()
        for conn in held:
            conn.close()


def child_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _CLEAN}
    return {**env, "KIMIK3_HOME": str(home), "PYTHONPATH": str(ROOT)}


def sessions(home: Path) -> list[Path]:
    """The session files under ``home`` (beside each, the checkpoint store's folder: not a session)."""
    folder = home / "sessions"
    return sorted(folder.glob("*.jsonl")) if folder.exists() else []


def test_a_hung_server_ends_at_the_request_timeout_and_the_task_is_kept(
    tmp_path: Path, hung_server: tuple[str, threading.Event]
) -> None:
    url, _ = hung_server
    home, ws = tmp_path / "home", tmp_path / "ws"
    ws.mkdir()
    run = subprocess.run([sys.executable, "-m", "kimik3", "run", "add a test", "--plain", "--base-url", url,
                          "--model", "k3", "--request-timeout", "0.5", "-w", str(ws), "--sandbox", "none"],
                         capture_output=True, text=True, timeout=300, env=child_env(home), cwd=tmp_path)
    assert run.returncode == 1
    assert run.stderr == "error: APITimeoutError: the request exceeded its total timeout\n"
    (session,) = sessions(home)  # kept, never deleted
    assert isinstance(load_session(session)[-1], UserMessage) and load_session(session)[-1].content == "add a test"
    assert run.stdout.splitlines()[-2:] == [
        f"session: {session}",
        f"the task is kept, unanswered, in {session}; continue with: kimik3 resume {session} -w {ws}"]


def test_ctrl_c_during_the_first_answer_exits_130_and_keeps_the_task(
    tmp_path: Path, hung_server: tuple[str, threading.Event]
) -> None:
    url, arrived = hung_server
    home, own = tmp_path / "home", tmp_path / "mine.jsonl"
    child = subprocess.Popen([sys.executable, "-m", "kimik3", "run", "the typed task", "--plain", "--base-url", url,
                              "--model", "k3", "--session", str(own), "-w", str(tmp_path), "--sandbox", "none"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env(home),
                             cwd=tmp_path, start_new_session=True)
    try:
        assert arrived.wait(120), "the request never arrived"
        os.killpg(child.pid, signal.SIGINT)  # a terminal's Ctrl-C: the whole foreground group
        out, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 130 and err == "interrupted\n"
    assert [m.content for m in load_session(own) if isinstance(m, UserMessage)] == ["the typed task"]
    assert out.splitlines()[-1] == (f"the task is kept, unanswered, in {own}; continue with: "
                                    f"kimik3 resume {own} -w {tmp_path} --base-url {url} --model k3")


def test_request_timeout_is_for_an_endpoint(tmp_path: Path) -> None:
    (tmp_path / "s.json").write_text('["x"]')
    r = CliRunner().invoke(main, ["run", "x", "--script", str(tmp_path / "s.json"), "--request-timeout", "5"],
                           env={"KIMIK3_HOME": str(tmp_path / "home")})
    assert r.exit_code == 2 and "--request-timeout applies only to an endpoint (--base-url)" in r.output
    r = CliRunner().invoke(main, ["run", "x", "--base-url", "http://127.0.0.1:9/v1", "--request-timeout", "nan"])
    assert r.exit_code == 2 and "'nan' is not a finite number." in r.output
    for command in ("run", "resume", "chat"):
        assert "--request-timeout SECONDS" in CliRunner().invoke(main, [command, "--help"]).output
    for command in ("run", "replay"):
        assert "--request-timeout SECONDS" in CliRunner().invoke(main, ["eval", command, "--help"]).output


# -- the embedded engine's start -------------------------------------------------------------

_FAKE_START = """
import os, subprocess, sys, time
from kimik3.engines import VLLMEngine

def _build(self):  # vLLM's start: an engine process (same process group) that Ctrl-C ends
    core = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    open(os.environ["STARTED"], "w").close()
    core.wait()
    raise RuntimeError("Engine core initialization failed. See root cause above. Failed core proc(s): {}")

VLLMEngine._build = _build
from kimik3.cli import main
main(sys.argv[1:], prog_name="kimik3")
"""


def test_ctrl_c_while_the_embedded_engine_starts_exits_130_quietly(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    started = tmp_path / "started"
    child = subprocess.Popen([sys.executable, "-c", _FAKE_START, "run", "hi", "--plain", "--model-path", str(model),
                              "-w", str(tmp_path), "--sandbox", "none"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**child_env(tmp_path / "home"), "STARTED": str(started)}, cwd=tmp_path,
                             start_new_session=True)
    try:
        for _ in range(1200):
            if started.exists() or child.poll() is not None:
                break
            time.sleep(0.1)
        assert started.exists(), child.communicate()
        os.killpg(child.pid, signal.SIGINT)
        out, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 130, (out, err)
    assert err == "interrupted\n"  # not "vLLM did not start", no traceback
    assert sessions(tmp_path / "home") == []  # nothing was typed into a session yet


@pytest.mark.parametrize("error", [
    OSError(24, "Too many open files"),
    RuntimeError("Engine core initialization failed. See root cause above."),
    "validation",
], ids=["OSError", "RuntimeError", "ValidationError"])
async def test_every_start_error_is_an_engine_error_with_the_log_tail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: BaseException | str
) -> None:
    if error == "validation":  # what pydantic raises for an engine arg of the wrong type
        import pydantic

        try:
            pydantic.TypeAdapter(int).validate_python("many")
        except pydantic.ValidationError as e:
            error = e
    assert isinstance(error, BaseException)
    monkeypatch.setenv("KIMIK3_HOME", str(tmp_path / "home"))
    engine = VLLMEngine(str(tmp_path))
    assert engine.log_path is not None
    engine.log_path.parent.mkdir(parents=True)
    engine.log_path.write_text("".join(f"line {i}\n" for i in range(30)) + "ERROR \x1b[31mcuda\x1b[0m: out of memory\n")

    def fail(self: VLLMEngine) -> None:
        raise error

    monkeypatch.setattr(VLLMEngine, "_build", fail)
    with pytest.raises(EngineError) as info:
        await engine.start()
    first, where, *tail = str(info.value).splitlines()
    assert first == f"vLLM did not start: {type(error).__name__}: {str(error).splitlines()[0]}"
    assert where == f"the last lines of vLLM's log {engine.log_path}:"
    assert tail == [f"  line {i}" for i in range(21, 30)] + ["  ERROR cuda: out of memory"]
    await engine.aclose()


async def test_an_embedded_start_leaves_nothing_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # vLLM's ZMQ sockets (VLLM_RPC_BASE_PATH, TMPDIR) and torch's compile cache go where kimik3
    # says; the private folder is gone after aclose
    for name in ("TMPDIR", "VLLM_RPC_BASE_PATH", "TORCHINDUCTOR_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KIMIK3_HOME", str(tmp_path / "home"))
    seen: dict[str, str] = {}

    class FakeLLM:
        def shutdown(self) -> None:
            pass

    def build(self: VLLMEngine) -> FakeLLM:
        with __import__("kimik3.engines._presets", fromlist=["applied_env"]).applied_env(self._temp_env()):
            seen.update({k: os.environ[k] for k in ("TMPDIR", "VLLM_RPC_BASE_PATH", "TORCHINDUCTOR_CACHE_DIR")})
            Path(os.environ["VLLM_RPC_BASE_PATH"], "engine-core.sock").write_text("")
        return FakeLLM()

    monkeypatch.setattr(VLLMEngine, "_build", build)
    before = set(os.listdir("/tmp"))
    engine = VLLMEngine(str(tmp_path))
    await engine.start()
    private = Path(seen["TMPDIR"])
    assert seen["VLLM_RPC_BASE_PATH"] == str(private) and private.name.startswith("kimik3-vllm-")
    assert seen["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "home" / "cache" / "torchinductor")
    assert (private / "engine-core.sock").exists()
    await engine.aclose()
    # other processes may use /tmp meanwhile: what a start of kimik3 would leave is looked for
    left = {n for n in set(os.listdir("/tmp")) - before if n.startswith(("kimik3-vllm-", "torchinductor_"))}
    assert not private.exists() and left == set()


@pytest.mark.parametrize("at", ["-1", "-3", "-99", "3", "99"])
def test_resume_at_a_message_out_of_range_is_a_user_error_naming_the_range(tmp_path: Path, at: str) -> None:
    # A21: --at -1 forked silently at the last message (Python's negative index), printed as
    # "message -1"; the CLI numbers messages as `kimik3 show` does, 0..N-1
    (tmp_path / "s.json").write_text('["Hello!", "Again."]')
    env = {"KIMIK3_HOME": str(tmp_path / "home"), **{k: None for k in _CLEAN}}
    session = str(tmp_path / "one.jsonl")
    first = CliRunner().invoke(main, ["run", "Hi", "--script", str(tmp_path / "s.json"), "--plain", "--session",
                                      session, "-w", str(tmp_path), "--sandbox", "none"], env=env)
    assert first.exit_code == 0, first.output
    r = CliRunner().invoke(main, ["resume", session, "more", "--at", at, "--script", str(tmp_path / "s.json"),
                                  "-w", str(tmp_path), "--sandbox", "none"], env=env)
    assert r.exit_code == 1
    name = f"--at {at}" if at.startswith("-") else f"message {at}"
    tail = " (as `kimik3 show` numbers them)" if at.startswith("-") else ""
    assert r.stderr == f"error: UserError: {name} is out of range: {session} holds messages 0..2{tail}\n"
    assert sessions(tmp_path / "home") == []  # no fork written


@pytest.mark.parametrize("at", ["0", "-1"])
def test_resume_at_in_a_session_without_messages_says_it_holds_none(tmp_path: Path, at: str) -> None:
    # a variant of A21 (a40c): a session holding only its header said "holds messages 0..-1"
    (tmp_path / "s.json").write_text('["Hello!"]')
    env = {"KIMIK3_HOME": str(tmp_path / "home"), **{k: None for k in _CLEAN}}
    session = tmp_path / "empty.jsonl"
    session.write_text('{"kimik3_session": 1, "created": 1, "id": "e0"}\n')
    r = CliRunner().invoke(main, ["resume", str(session), "more", "--at", at, "--script", str(tmp_path / "s.json"),
                                  "-w", str(tmp_path), "--sandbox", "none"], env=env)
    name, tail = (f"--at {at}", " (as `kimik3 show` numbers them)") if at == "-1" else (f"message {at}", "")
    assert (r.exit_code, r.stderr) == (1, f"error: UserError: {name} is out of range: {session} holds no messages{tail}\n")
    assert sessions(tmp_path / "home") == []


# -- variants: Ctrl-C at another moment, a resume's typed task ------------------------------------


def _script(path: Path, *outputs: str) -> Path:
    path.write_text(json.dumps(list(outputs)))
    return path


def test_ctrl_c_while_a_tool_runs_exits_130_keeps_the_task_and_leaves_no_process(tmp_path: Path) -> None:
    # the Ctrl-C comes while the first turn's bash command runs (not during an answer): the task
    # and the call stay, the call answered as cancelled (it was: its command, in a session of its
    # own out of the terminal's group, is ended with kimik3); a resume goes on from there
    ws, home, own = tmp_path / "ws", tmp_path / "home", tmp_path / "mine.jsonl"
    ws.mkdir()
    script = _script(tmp_path / "s.json", call("bash", {"command": "echo $$ > pid.txt; exec sleep 300"}),
                     answer("done"))
    child = subprocess.Popen([sys.executable, "-m", "kimik3", "run", "the typed task", "--plain", "--script",
                              str(script), "--session", str(own), "-w", str(ws), "--sandbox", "none"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env(home),
                             cwd=tmp_path, start_new_session=True)
    try:
        for _ in range(1200):
            if ((ws / "pid.txt").exists() and (ws / "pid.txt").read_text().strip()) or child.poll() is not None:
                break
            time.sleep(0.1)
        sleeper = int((ws / "pid.txt").read_text())
        os.killpg(child.pid, signal.SIGINT)
        out, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 130 and err == "interrupted\n", (out, err)
    assert gone([sleeper]) == []
    history = load_session(own)
    assert [m.content for m in history if isinstance(m, UserMessage)] == ["the typed task"]
    assert [c.function.name for m in history if isinstance(m, AssistantMessage) for c in m.tool_calls or []] == ["bash"]
    cancelled = "Error: the tool call was cancelled before it finished"
    assert [m.content for m in history if isinstance(m, ToolMessage)] == [cancelled]
    again = subprocess.run([sys.executable, "-m", "kimik3", "resume", str(own), "--plain", "--sandbox", "none",
                            "--script", str(_script(tmp_path / "s2.json", answer("resumed")))],
                           capture_output=True, text=True, timeout=300, env=child_env(home), cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert [m.content for m in load_session(own) if isinstance(m, ToolMessage)] == [cancelled]
    assert load_session(own)[-1].content == "resumed"


def test_a_resumes_typed_task_is_kept_at_a_hung_server_with_a_runnable_continue_line(
    tmp_path: Path, hung_server: tuple[str, threading.Event]
) -> None:
    # a resume given a new task (not a new session): the task stays, unanswered, and the printed
    # line, run as printed, answers it in the session's workspace
    url, _ = hung_server
    home, ws, own = tmp_path / "home", tmp_path / "w s", tmp_path / "it's.jsonl"
    ws.mkdir()
    first = subprocess.run([sys.executable, "-m", "kimik3", "run", "Hi", "--plain", "--script",
                            str(_script(tmp_path / "a.json", answer("Hello!"))), "--session", str(own), "-w", str(ws),
                            "--sandbox", "none"], capture_output=True, text=True, timeout=300, env=child_env(home))
    assert first.returncode == 0, first.stderr
    before = own.read_bytes()
    run = subprocess.run([sys.executable, "-m", "kimik3", "resume", str(own), "And?", "--plain", "--base-url", url,
                          "--model", "k3", "--request-timeout", "0.5", "--sandbox", "none"],
                         capture_output=True, text=True, timeout=300, env=child_env(home), cwd=tmp_path)
    assert run.returncode == 1
    assert run.stderr == "error: APITimeoutError: the request exceeded its total timeout\n"
    assert own.read_bytes().startswith(before) and load_session(own)[-1] == UserMessage(content="And?")
    line = f"kimik3 resume {shlex.quote(str(own))} -w {shlex.quote(str(ws))}"  # the recorded engine: a.json
    assert run.stdout.splitlines()[-1] == f"the task is kept, unanswered, in {own}; continue with: {line}"
    _script(tmp_path / "a.json", answer("And so."))
    other = tmp_path / "elsewhere"
    other.mkdir()
    done = subprocess.run(["bash", "-c", line.replace("kimik3 ", f"{shlex.quote(sys.executable)} -m kimik3 ", 1)],
                          capture_output=True, text=True, timeout=300, env=child_env(home), cwd=other)
    assert done.returncode == 0, done.stderr
    assert [m.content for m in load_session(own)][-2:] == ["And?", "And so."]


def _on_a_full_disk(tmp_path: Path, free_kib: int, *argv: str) -> subprocess.CompletedProcess[str]:
    """``kimik3 ARGV`` with ``tmp_path / "disk"`` a 256 KiB tmpfs of which ``free_kib`` KiB are
    free (a real ENOSPC: a mount namespace of its own, through ``unshare``); what the disk holds
    at the end is copied to ``tmp_path / "after"``. Skips where the kernel allows no such mount."""
    disk = tmp_path / "disk"
    disk.mkdir()
    fill = 256 - free_kib
    shell = (f'mount -t tmpfs -o size=256k none "$1" || exit 99; dd if=/dev/zero of="$1/fill" bs=1k count={fill} '
             f'2>/dev/null; d=$1; shift; "$@"; rc=$?; rm "$d/fill"; cp -a "$d" "$d/../after"; exit $rc')
    run = subprocess.run(["unshare", "-rm", "sh", "-c", shell, "sh", str(disk), sys.executable, "-m", "kimik3", *argv],
                         capture_output=True, text=True, timeout=300, env=child_env(disk / "home"), cwd=tmp_path)
    if run.returncode == 99 or shutil.which("unshare") is None:
        pytest.skip(f"no tmpfs in a user namespace here: {run.stderr.strip()}")
    return run


@pytest.mark.parametrize("free_kib", [0, 76])  # no room for the header; room for the task, not the answer
def test_a_real_full_disk_is_one_typed_line_never_a_0_byte_session(tmp_path: Path, free_kib: int) -> None:
    script = _script(tmp_path / "big.json", answer("done " * 30000))  # 150 kB: more than what is free
    own = tmp_path / "disk" / "s.jsonl"
    run = _on_a_full_disk(tmp_path, free_kib, "run", "the typed task", "--plain", "--sandbox", "none",
                          "-w", str(tmp_path), "--script", str(script), "--session", str(own))
    assert run.returncode == 1
    assert run.stderr == (f"error: SessionError: cannot write session {own}: No space left on device; nothing of "
                          "this record was kept\n")
    kept = tmp_path / "after" / "s.jsonl"
    if free_kib == 0:
        assert not kept.exists() and "session:" not in run.stdout  # nothing was written: no file at all
        return
    assert [m.content for m in load_session(kept) if isinstance(m, UserMessage)] == ["the typed task"]
    assert run.stdout.splitlines()[-1] == (f"the task is kept, unanswered, in {own}; continue with: "
                                           f"kimik3 resume {own} -w {tmp_path} --script {script}")


def test_ctrl_c_while_a_resumes_engine_starts_exits_130_and_keeps_the_session_and_its_task(tmp_path: Path) -> None:
    # variant: the Ctrl-C comes while `kimik3 resume SESSION TASK` starts its embedded engine:
    # quiet 130, the session untouched byte for byte (the new task is not written before the
    # engine runs, as `run` writes no session before it: it is still the command line's)
    model, home, own = tmp_path / "model", tmp_path / "home", tmp_path / "s.jsonl"
    model.mkdir()
    first = subprocess.run([sys.executable, "-m", "kimik3", "run", "Hi", "--plain", "--script",
                            str(_script(tmp_path / "a.json", answer("Hello!"))), "--session", str(own), "-w",
                            str(tmp_path), "--sandbox", "none"], capture_output=True, text=True, timeout=300,
                           env=child_env(home))
    assert first.returncode == 0, first.stderr
    before = own.read_bytes()
    started = tmp_path / "started"
    child = subprocess.Popen([sys.executable, "-c", _FAKE_START, "resume", str(own), "And?", "--plain",
                              "--model-path", str(model), "--sandbox", "none"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**child_env(home), "STARTED": str(started)}, cwd=tmp_path, start_new_session=True)
    try:
        for _ in range(1200):
            if started.exists() or child.poll() is not None:
                break
            time.sleep(0.1)
        assert started.exists(), child.communicate()
        os.killpg(child.pid, signal.SIGINT)
        out, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 130 and err == "interrupted\n", (out, err)
    assert own.read_bytes().startswith(before)
    assert own.read_bytes() == before and out.splitlines()[-1] == f"session: {own}"


def test_kill_9_of_kimik3_run_as_a_tool_ends_never_says_the_call_did_not_finish(tmp_path: Path) -> None:
    # variant through the CLI: `kimik3 run` killed -9 the moment its bash call's effect is on
    # disk (before or after its result is recorded: the race is the point); the resumed model
    # reads the result, or that it finished with its result lost, or that its outcome is
    # unknown; never that it did not finish, and the call never runs again
    ws, home, own = tmp_path / "ws", tmp_path / "home", tmp_path / "s.jsonl"
    ws.mkdir()
    script = _script(tmp_path / "s.json", call("bash", {"command": "echo ran >> effect.txt"}), answer("done"))
    child = subprocess.Popen([sys.executable, "-m", "kimik3", "run", "the typed task", "--plain", "--script",
                              str(script), "--session", str(own), "-w", str(ws), "--sandbox", "none"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=child_env(home), cwd=tmp_path)
    try:
        for _ in range(60000):  # the limit of a hang (10 minutes), not a speed claim
            if (ws / "effect.txt").exists() or child.poll() is not None:
                break
            time.sleep(0.01)
    finally:
        child.kill()
        child.wait(timeout=120)
    assert (ws / "effect.txt").read_text() == "ran\n"
    last = load_session(own)[-1]
    if not (isinstance(last, AssistantMessage) and not last.tool_calls):  # else the run ended before the kill
        again = subprocess.run([sys.executable, "-m", "kimik3", "resume", str(own), "--plain", "--sandbox", "none",
                                "--script", str(_script(tmp_path / "s2.json", answer("resumed")))],
                               capture_output=True, text=True, timeout=300, env=child_env(home), cwd=tmp_path)
        assert again.returncode == 0, again.stderr
    (result,) = [m.content for m in load_session(own) if isinstance(m, ToolMessage)]
    assert result in ("[exit code: 0]", "Error: this call finished, but the run stopped before its result was "
                      "recorded, so the result is lost: check what it did before calling it again",
                      "Error: the run stopped before this call's result was recorded; whether it ran, and how far, "
                      "is unknown: check before calling it again") or str(result).startswith("[exit code: 0"), result
    assert "did not finish" not in own.read_text() and "cancelled" not in str(result)
    assert (ws / "effect.txt").read_text() == "ran\n"  # never run again


def test_the_continue_line_of_a_session_in_its_workspace_gives_the_engine_again_and_runs_as_printed(
        tmp_path: Path) -> None:
    # variant: a session kept in the workspace (`--session ws/s.jsonl -w ws`): resume takes no
    # engine options from such a file (the agent's tools could rewrite it), so the printed line
    # gives them itself; run as printed by bash from another folder, it answers the task
    ws, home = tmp_path / "my ws", tmp_path / "home"
    ws.mkdir()
    own = ws / "s.jsonl"
    script = _script(tmp_path / "empty.json")  # no reply: the run fails, the task is kept
    run = subprocess.run([sys.executable, "-m", "kimik3", "run", "the typed task", "--plain", "--script", str(script),
                          "--session", str(own), "-w", str(ws), "--sandbox", "none"],
                         capture_output=True, text=True, timeout=300, env=child_env(home), cwd=tmp_path)
    assert run.returncode == 1
    line = f"kimik3 resume {shlex.quote(str(own))} -w {shlex.quote(str(ws))} --script {script}"
    assert run.stdout.splitlines()[-1] == f"the task is kept, unanswered, in {own}; continue with: {line}"
    _script(script, answer("answered"))
    done = subprocess.run(["bash", "-c", line.replace("kimik3 ", f"{shlex.quote(sys.executable)} -m kimik3 ", 1)],
                          capture_output=True, text=True, timeout=300, env=child_env(home), cwd=home.parent.parent)
    assert done.returncode == 0, done.stderr
    assert [m.content for m in load_session(own)][-2:] == ["the typed task", "answered"]


@pytest.mark.parametrize(("args", "first"), [
    ({"max_model_len": 10**9}, "vLLM did not start: ValidationError: 1 validation error for ModelConfig"),
    ({"max_num_seqs": "many"}, "vLLM did not start: TypeError: '<' not supported between instances of 'int' and "
                               "'str'"),
    ({}, "vLLM did not start: ValueError: The repository"),  # k3-tiny's code without trust_remote_code
], ids=["too-long", "wrong-type", "remote-code"])
async def test_the_real_vllm_refusing_its_arguments_is_an_engine_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: dict[str, object], first: str) -> None:
    # variant with the real vLLM (its config checks fail before any process starts): whatever it
    # raises is an EngineError naming it, and the private temporary folder goes with aclose
    pytest.importorskip("vllm", reason="vLLM is not installed (make install)")
    model = ROOT / "models" / "k3-tiny"
    if not (model / "config.json").exists():
        pytest.skip("models/k3-tiny is not installed (make install)")
    monkeypatch.setenv("KIMIK3_HOME", str(tmp_path / "home"))
    engine = VLLMEngine(str(model), **({"trust_remote_code": True} if args else {}), **args)
    with pytest.raises(EngineError) as info:
        await engine.start()
    assert str(info.value).startswith(first), str(info.value)[:300]
    private = engine._temp
    await engine.aclose()
    assert private is not None and not Path(private).exists()


def test_ctrl_c_during_verify_exits_130_quietly(tmp_path: Path, hung_server: tuple[str, threading.Event]) -> None:
    # attacker variant (x40b): `kimik3 verify` left Ctrl-C to click ("Aborted!", exit 1); every
    # command now ends an interruption as run does (the group's own handler)
    url, arrived = hung_server
    child = subprocess.Popen([sys.executable, "-m", "kimik3", "verify", "--base-url", url, "--model", "k3"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=child_env(tmp_path / "home"), cwd=tmp_path, start_new_session=True)
    try:
        assert arrived.wait(120), "the request never arrived"
        os.killpg(child.pid, signal.SIGINT)
        out, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 130, (out, err)
    assert err.splitlines()[-1] == "interrupted" and "Aborted" not in err and "Traceback" not in err, err
    assert out == f"kimik3 verify {url} (timeout 60 s per request)\n"


def test_ctrl_c_at_approves_question_exits_130_quietly_and_decides_nothing(tmp_path: Path) -> None:
    # attacker variant (x40b): click's prompt turns Ctrl-C into Abort ("Aborted!", exit 1)
    import pty

    from tests.agents.test_deferred import deferred_session

    session, _ = deferred_session(tmp_path)
    before = session.read_bytes()
    main_fd, terminal = pty.openpty()
    child = subprocess.Popen([sys.executable, "-m", "kimik3", "approve", str(session)], stdin=terminal,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env(tmp_path / "home"),
                             cwd=tmp_path, start_new_session=True)
    os.close(terminal)
    try:
        assert child.stderr is not None
        shown = b""
        while b"run this call?" not in shown:  # click's prompt is on stderr
            data = os.read(child.stderr.fileno(), 4096)
            assert data, shown
            shown += data
        for _ in range(60):  # a Ctrl-C; again while it has not ended (one sent as the prompt is written can go unseen)
            os.killpg(child.pid, signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(2)
                break
        out, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
        os.close(main_fd)
    assert child.returncode == 130 and err.strip() == b"interrupted", (shown, out, err)
    assert session.read_bytes() == before
