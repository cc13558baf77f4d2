"""The ``kimik3`` command end to end with scripted K3 replies (``--script``) on a real git repo."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result
from rich.console import Console

from kimik3 import Agent, ScriptedEngine, VLLMEngine
from kimik3._exceptions import EngineNotAvailableError
from kimik3.agents import CODING_INSTRUCTIONS, load_session
from kimik3.cli import engine as cli_engine_module
from kimik3.cli import main, parse_engine_arg
from kimik3.cli import progress as cli_progress_module
from kimik3.cli import run as cli_run_module
from kimik3.engines import PRESETS, ChatForImages, RemoteCompletionsEngine, RemoteEngine
from kimik3.formats.k3 import render_output
from kimik3.tools.coding import coding_tools
from tests.k3vocab import write_model_dir

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git for the workspace repository")

# Environment variables that would change what the CLI does (engine choice, rich's terminal detection).
_CLEAN = ("KIMIK3_BASE_URL", "KIMIK3_API_KEY", "KIMIK3_MODEL", "KIMIK3_MODEL_PATH", "FORCE_COLOR", "TTY_COMPATIBLE")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

CALC_BUGGY = "def add(a, b):\n    return a - b\n"
TEST_CALC = 'from calc import add\n\nassert add(2, 3) == 5, f"add(2, 3) == {add(2, 3)}"\nprint("ok")\n'


def call(name: str, arguments: dict[str, Any], reasoning: str = "plan", content: str = "") -> str:
    """A raw K3 output with one tool call."""
    return render_output({"reasoning_content": reasoning, "content": content,
                          "tool_calls": [{"id": "x", "function": {"name": name, "arguments": arguments}}]})


def reads(*paths: str, reasoning: str = "plan", content: str = "") -> str:
    """A raw K3 output reading files in parallel (the full harness refuses edits of unread files)."""
    return render_output({"reasoning_content": reasoning, "content": content, "tool_calls": [
        {"id": f"r{i}", "function": {"name": "read_file", "arguments": {"path": p}}} for i, p in enumerate(paths)]})


def answer(text: str, reasoning: str = "done") -> str:
    return render_output({"reasoning_content": reasoning, "content": text})


FIX_SCRIPT = [
    reads("test_calc.py", "calc.py", reasoning="The test imports add from calc.",
          content="I'll read the failing test and calc.py first."),
    call("edit_file", {"path": "calc.py", "old_string": "return a - b", "new_string": "return a + b"}),
    call("bash", {"command": f"{sys.executable} test_calc.py"}),
    answer("Fixed add in calc.py (it subtracted); test_calc.py passes."),
]
FIX_LINES = [
    "[turn 1] text: I'll read the failing test and calc.py first.",
    '[turn 1] tool read_file {"path": "test_calc.py"}',
    '[turn 1] tool read_file {"path": "calc.py"}',
    "[turn 1] result read_file: 1 from calc import add",
    "[turn 1] result read_file: 1 def add(a, b):",
    '[turn 2] tool edit_file {"path": "calc.py", "old_string": "return a - b", "new_string": "return a + b"}',
    "[turn 2] result edit_file: Edited calc.py (1 replacement)",
    f"[turn 3] tool bash {json.dumps({'command': f'{sys.executable} test_calc.py'})}",
    "[turn 3] result bash: ok",
    "[turn 4] answer: Fixed add in calc.py (it subtracted); test_calc.py passes.",
]
FIX_ROLES = ["system", "user", "assistant", "tool", "tool", "assistant", "tool", "assistant", "tool", "assistant"]


def git(repo: Path, *args: str) -> str:
    cmd = ["git", "-C", str(repo), "-c", "user.name=kimik3", "-c", "user.email=kimik3@example.com", *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def make_repo(tmp_path: Path) -> Path:
    """A git repository with a buggy calc.py and its failing test, committed."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "calc.py").write_text(CALC_BUGGY)
    (repo / "test_calc.py").write_text(TEST_CALC)
    (repo / ".gitignore").write_text("__pycache__/\n")  # running the test writes bytecode (unless PYTHONDONTWRITEBYTECODE)
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "calc with a bug")
    return repo


def run_test(repo: Path) -> subprocess.CompletedProcess[str]:
    # -B: no calc.pyc from this run, whose mtime and size an edit in the same second would match
    # (the agent's python would then run the stale bytecode)
    return subprocess.run([sys.executable, "-B", "test_calc.py"], cwd=repo, capture_output=True, text=True)


def write_script(path: Path, outputs: list[str]) -> Path:
    path.write_text(json.dumps(outputs))
    return path


def env_for(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _CLEAN}
    env["KIMIK3_HOME"] = str(home)
    return env


def invoke(args: list[str], home: Path, input: str | None = None) -> Result:
    env: dict[str, str | None] = {k: None for k in _CLEAN}
    env["KIMIK3_HOME"] = str(home)
    return CliRunner().invoke(main, args, input=input, env=env, catch_exceptions=False)


def progress_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("[turn ")]


def session_of(stdout: str) -> Path:
    (line,) = [line for line in stdout.splitlines() if line.startswith("session: ")]
    return Path(line.removeprefix("session: "))


def roles(session: Path) -> list[str]:
    lines = session.read_text().splitlines()
    assert json.loads(lines[0])["kimik3_session"] == 1
    records = [json.loads(line) for line in lines[1:]]
    return [r["message"]["role"] for r in records if "message" in r]  # checkpoint records between


def kimik3_command() -> list[str]:
    script = Path(sys.executable).parent / "kimik3"
    return [str(script)] if script.exists() else [sys.executable, "-m", "kimik3"]


# -- run -------------------------------------------------------------------------------------


def test_run_fixes_the_failing_test_as_a_subprocess(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    assert run_test(repo).returncode == 1  # the bug is real
    script = write_script(tmp_path / "fix.json", FIX_SCRIPT)
    home = tmp_path / "home"
    proc = subprocess.run([*kimik3_command(), "run", "fix the failing test", "--workspace", str(repo),
                           "--script", str(script)], capture_output=True, text=True, env=env_for(home), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert progress_lines(proc.stdout) == FIX_LINES
    assert proc.stdout.splitlines()[-2].startswith("usage: 4 turns, 4 tool calls, ")
    session = session_of(proc.stdout)
    assert session.parent == home / "sessions"
    assert re.fullmatch(r"\d{8}-\d{6}(-\d+)?\.jsonl", session.name)
    assert roles(session) == FIX_ROLES
    messages = load_session(session)
    assert messages[1].content == "fix the failing test"
    # the workspace really changed: the test passes, only calc.py differs from the commit
    done = run_test(repo)
    assert done.returncode == 0 and done.stdout == "ok\n"
    assert git(repo, "status", "--porcelain") == " M calc.py\n"
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"


def test_run_in_process_with_an_explicit_session_file(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    script = write_script(tmp_path / "fix.json", FIX_SCRIPT)
    session = tmp_path / "s" / "fix.jsonl"
    # a session path in a directory that does not exist: an error, and no directory is made
    missing = invoke(["run", "fix it", "-w", str(repo), "--script", str(script), "--session", str(session)],
                     tmp_path / "home")
    assert missing.exit_code == 1
    assert missing.stderr == f"error: SessionError: cannot open session {session}: no such directory\n"
    assert not session.parent.exists()
    session.parent.mkdir()
    result = invoke(["run", "fix it", "-w", str(repo), "--script", str(script), "--session", str(session)],
                    tmp_path / "home")
    assert result.exit_code == 0, result.output
    assert progress_lines(result.stdout) == FIX_LINES
    assert session_of(result.stdout) == session and roles(session) == FIX_ROLES
    assert not (tmp_path / "home").exists()  # no default session was made
    assert run_test(repo).returncode == 0
    # the same file again is refused: it already holds a session
    again = invoke(["run", "again", "-w", str(repo), "--script", str(script), "--session", str(session)],
                   tmp_path / "home")
    assert again.exit_code == 2 and f"kimik3 resume {session}" in again.stderr


def test_resume_continues_the_session_with_python_dash_m(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    session = tmp_path / "fix.jsonl"
    first = invoke(["run", "fix it", "-w", str(repo), "--script", str(write_script(tmp_path / "fix.json", FIX_SCRIPT)),
                    "--session", str(session)], tmp_path / "home")
    assert first.exit_code == 0
    more = write_script(tmp_path / "more.json", [
        call("read_file", {"path": "calc.py"}),
        answer("add returns a + b now."),
    ])
    proc = subprocess.run([sys.executable, "-m", "kimik3", "resume", str(session), "show me the fix",
                           "--script", str(more)], cwd=repo, capture_output=True, text=True,
                          env=env_for(tmp_path / "home"), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert progress_lines(proc.stdout) == [
        '[turn 1] tool read_file {"path": "calc.py"}',
        "[turn 1] result read_file: 1 def add(a, b):",
        "[turn 2] answer: add returns a + b now.",
    ]
    assert session_of(proc.stdout) == session
    assert roles(session) == [*FIX_ROLES, "user", "assistant", "tool", "assistant"]
    messages = load_session(session)
    assert messages[len(FIX_ROLES)].content == "show me the fix"
    assert messages[-2].content == "     1\tdef add(a, b):\n     2\t    return a + b"  # read in the cwd workspace


def test_resume_without_a_task_after_an_answer_is_a_usage_error(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    session = tmp_path / "fix.jsonl"
    script = write_script(tmp_path / "fix.json", FIX_SCRIPT)
    assert invoke(["run", "fix it", "-w", str(repo), "--script", str(script), "--session", str(session)],
                  tmp_path / "home").exit_code == 0
    result = invoke(["resume", str(session), "--script", str(script)], tmp_path / "home")
    assert result.exit_code == 2 and "give a TASK to continue it" in result.stderr


def test_a_script_that_runs_out_is_one_clean_error_line(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    script = write_script(tmp_path / "short.json", [call("read_file", {"path": "calc.py"})])
    result = invoke(["run", "fix it", "-w", str(repo), "--script", str(script)], tmp_path / "home")
    assert result.exit_code == 1
    assert result.stderr == "error: EngineError: ScriptedEngine ran out of responses after 1 call(s)\n"
    assert progress_lines(result.stdout) == [
        '[turn 1] tool read_file {"path": "calc.py"}',
        "[turn 1] result read_file: 1 def add(a, b):",
    ]
    session = session_of(result.stdout)  # the partial session is kept for a resume
    assert roles(session) == ["system", "user", "assistant", "tool"]
    assert "Traceback" not in result.output


def test_a_budget_stop_exits_0_and_says_so(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    script = write_script(tmp_path / "s.json", [call("read_file", {"path": "calc.py"}), answer("Not done: fix calc.py.")])
    result = invoke(["run", "fix it", "-w", str(repo), "--script", str(script), "--max-turns", "1"], tmp_path / "home")
    assert result.exit_code == 0
    first, *lines = result.stdout.splitlines()
    assert first.startswith("sandbox: ")  # the first line says where bash runs
    assert lines[2] == "[turn 2] answer: Not done: fix calc.py."
    assert lines[3].startswith("stopped: turn_budget (the turn budget ran out")
    assert roles(session_of(result.stdout))[-2:] == ["system", "assistant"]  # the summary instruction, the answer


# -- a remote endpoint -------------------------------------------------------------------------


@pytest.fixture
def endpoint() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A local OpenAI-compatible server whose chat completions stream "pong" (with reasoning)."""
    bodies: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            base = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "k3"}
            chunks = [
                {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "reasoning_content": "A ping."}}]},
                {**base, "choices": [{"index": 0, "delta": {"content": "pong"}, "finish_reason": "stop"}]},
                {**base, "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}},
            ]
            body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", bodies
    finally:
        server.shutdown()
        server.server_close()


def test_run_against_a_remote_endpoint_passes_the_model_settings(
    tmp_path: Path, endpoint: tuple[str, list[dict[str, Any]]]
) -> None:
    url, bodies = endpoint
    result = invoke(["run", "ping", "-w", str(tmp_path), "--base-url", url, "--model", "k3", "--api-key", "sk-test",
                     "--reasoning-effort", "low", "--temperature", "0.6", "--top-p", "0.9", "--max-tokens", "64",
                     "--seed", "7"], tmp_path / "home")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[1:3] == ["[turn 1] answer: pong", "usage: 1 turn, 0 tool calls, 12 tokens"]
    (body,) = bodies
    assert {k: body[k] for k in ("model", "reasoning_effort", "temperature", "top_p", "max_tokens", "seed")} == {
        "model": "k3", "reasoning_effort": "low", "temperature": 0.6, "top_p": 0.9, "max_tokens": 64, "seed": 7}
    assert [t["function"]["name"] for t in body["tools"]] == [  # the full coding harness, by default
        "bash", "read_file", "write_file", "edit_file", "grep", "glob", "multi_edit", "apply_patch", "read_output",
        "stop", "task"]
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    messages = load_session(session_of(result.stdout))
    assert messages[-1].content == "pong" and getattr(messages[-1], "reasoning_content", None) == "A ping."


def test_an_unreachable_endpoint_is_one_clean_error_line(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = invoke(["run", "ping", "-w", str(tmp_path), "--base-url", f"http://127.0.0.1:{port}/v1", "--model", "k3"],
                    tmp_path / "home")
    assert result.exit_code == 1
    assert result.stderr == (f"error: APIConnectionError: cannot reach the endpoint http://127.0.0.1:{port}/v1: "
                             "Connection error. (is the server running? `kimik3 serve MODEL_DIR` starts one)\n")
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.output


# -- chat ------------------------------------------------------------------------------------


def test_chat_keeps_the_history_across_turns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engines: list[ScriptedEngine] = []

    class Recording(ScriptedEngine):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            engines.append(self)

    monkeypatch.setattr(cli_engine_module, "ScriptedEngine", Recording)
    script = write_script(tmp_path / "chat.json", [answer("Hi!"), answer("You said hello.")])
    session = tmp_path / "chat.jsonl"
    result = invoke(["chat", "--script", str(script), "--session", str(session)], tmp_path / "home",
                    input="hello\n\nwhat did I say?\n/exit\nnever read\n")
    assert result.exit_code == 0, result.output
    assert progress_lines(result.stdout) == ["[turn 1] answer: Hi!", "[turn 1] answer: You said hello."]
    assert result.stdout.splitlines()[-1] == f"session: {session}"
    (engine,) = engines
    second = engine.calls[1].request
    assert [(m.role, m.content) for m in second.messages] == [
        ("user", "hello"), ("assistant", "Hi!"), ("user", "what did I say?")]
    assert second.tools == []  # no --workspace: no tools
    assert roles(session) == ["user", "assistant", "user", "assistant"]


def test_chat_with_a_workspace_has_the_coding_tools_and_eof_quits(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    script = write_script(tmp_path / "chat.json", [call("glob", {"pattern": "*.py"}), answer("Two Python files.")])
    result = invoke(["chat", "-w", str(repo), "--script", str(script)], tmp_path / "home", input="what is here?\n")
    assert result.exit_code == 0, result.output
    assert progress_lines(result.stdout) == [
        '[turn 1] tool glob {"pattern": "*.py"}',
        "[turn 1] result glob: calc.py",
        "[turn 2] answer: Two Python files.",
    ]
    assert roles(session_of(result.stdout)) == ["system", "user", "assistant", "tool", "assistant"]


def test_chat_reports_a_failed_turn_and_exits_1(tmp_path: Path) -> None:
    script = write_script(tmp_path / "chat.json", [answer("one")])
    result = invoke(["chat", "--script", str(script)], tmp_path / "home", input="a\nb\n")
    assert result.exit_code == 1
    assert progress_lines(result.stdout) == ["[turn 1] answer: one"]
    assert result.stderr == "error: EngineError: ScriptedEngine ran out of responses after 1 call(s)\n"


# -- engines and options ---------------------------------------------------------------------


def test_parse_engine_arg_values() -> None:
    assert parse_engine_arg("max_num_seqs=8") == ("max_num_seqs", 8)
    assert parse_engine_arg("kv-cache-dtype=fp8") == ("kv_cache_dtype", "fp8")
    assert parse_engine_arg("enable_prefix_caching=true") == ("enable_prefix_caching", True)
    assert parse_engine_arg("swap_space=0.5") == ("swap_space", 0.5)
    assert parse_engine_arg("seed=null") == ("seed", None)
    assert parse_engine_arg('served_model_name="8"') == ("served_model_name", "8")
    assert parse_engine_arg("cuda_graph_sizes=[1, 2, 4]") == ("cuda_graph_sizes", [1, 2, 4])
    assert parse_engine_arg('hf_overrides={"rope_theta": 50000}') == ("hf_overrides", {"rope_theta": 50000})
    assert parse_engine_arg("tokenizer_mode=auto=x") == ("tokenizer_mode", "auto=x")
    assert parse_engine_arg("download_dir=") == ("download_dir", "")
    for bad in ("max_num_seqs", "=8", "no spaces=1", "model=/x", "preset=k3-mxfp4-hopper"):
        with pytest.raises(click.BadParameter):
            parse_engine_arg(bad)


def build(args: list[str]) -> Any:
    ctx = cli_run_module.run_command.make_context("run", ["task", *args])
    with ctx:
        return cli_engine_module.engine_from(cli_engine_module.options_from(ctx.params))


def test_embedded_engine_args_from_options_preset_and_engine_args(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    engine = build(["--model-path", str(tmp_path), "--preset", "k3-mxfp4-hopper", "--tensor-parallel-size", "2",
                    "--max-model-len", "4096", "--enforce-eager", "--gpu-memory-utilization", "0.85",
                    "--dtype", "bfloat16", "--engine-arg", "max_num_seqs=4", "--engine-arg", "max-model-len=2048",
                    "--feature", "text_only"])
    assert isinstance(engine, VLLMEngine)
    assert engine.engine_args == {**PRESETS["k3-mxfp4-hopper"].engine_args, "language_model_only": True,
                                  "tensor_parallel_size": 2, "max_model_len": 2048,
                                  "enforce_eager": True, "gpu_memory_utilization": 0.85, "dtype": "bfloat16",
                                  "max_num_seqs": 4, "model": str(tmp_path)}
    assert engine._llm is None  # not started
    assert "VLLM_CPU_KVCACHE_SPACE" not in os.environ  # VLLMEngine sizes the CPU KV cache itself


def settings(args: list[str]) -> Any:
    ctx = cli_run_module.run_command.make_context("run", ["task", *args])
    with ctx:
        o = cli_engine_module.options_from(ctx.params)
        return cli_engine_module.engine_from(o), cli_engine_module.settings_from(o, cli_engine_module.engine_from(o))


def test_a_reply_gets_a_quarter_of_a_known_window_unless_max_tokens_says(tmp_path: Path) -> None:
    engine, s = settings(["--model-path", str(tmp_path), "--max-model-len", "8192"])
    assert isinstance(engine, VLLMEngine) and engine.verbose is False and s.max_tokens == 2048
    assert settings(["--model-path", str(tmp_path), "--max-model-len", "1000000"])[1].max_tokens == 32768
    assert settings(["--model-path", str(tmp_path), "--max-model-len", "8192", "--max-tokens", "100"])[1].max_tokens == 100
    assert settings(["--model-path", str(tmp_path)])[1].max_tokens is None  # the window is the model's: vLLM caps
    assert settings(["--base-url", "http://127.0.0.1:9/v1"])[1].max_tokens is None  # chat mode: the server's
    raw = ["--base-url", "http://127.0.0.1:9/v1", "--mode", "raw", "--tokenizer", "models/k3-tiny"]
    assert settings([*raw, "--max-model-len", "4096"])[1].max_tokens == 1024
    assert settings(["--model-path", str(tmp_path), "-v"])[0].verbose is True


def test_old_preset_name_warns_on_stderr_and_auto_says_what_it_found(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = build(["--model-path", str(tmp_path), "--preset", "k3-nvfp4-b300"])
    assert engine.preset.name == "k3-nvfp4-blackwell"
    err = capsys.readouterr().err
    assert err.startswith("warning: K3 preset 'k3-nvfp4-b300' is deprecated and now means 'k3-nvfp4-blackwell': ")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sh, cat = shutil.which("sh"), shutil.which("cat")
    monkeypatch.setenv("PATH", str(bin_dir))  # no nvidia-smi / amd-smi
    with pytest.raises(EngineNotAvailableError, match=r"no K3 mxfp4 preset fits this node \(no GPU found\)"):
        build(["--model-path", str(tmp_path), "--preset", "auto"])
    recorded = Path(__file__).parent / "data" / "engines" / "b300x8_nvidia_smi_query.csv"
    smi = bin_dir / "nvidia-smi"  # answers with a B300 node's recorded output
    smi.write_text(f"#!{sh}\nexec {cat} {recorded}\n")
    smi.chmod(0o755)
    engine = build(["--model-path", str(tmp_path), "--preset", "auto", "--feature", "spec_decoding"])
    assert engine.preset.name == "k3-mxfp4-blackwell" and engine.preset.features == ("spec_decoding",)
    assert capsys.readouterr().err == ("preset auto: k3-mxfp4-blackwell for 8 x NVIDIA B300 SXM6 AC (compute "
                                       "capability 10.3): blackwell with 8+ GPUs\n")


def test_engine_choice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = write_script(tmp_path / "s.json", [answer("x")])
    for name in _CLEAN:
        monkeypatch.delenv(name, raising=False)
    remote = build(["--base-url", "http://127.0.0.1:9/v1", "--model", "k3", "--api-key", "k"])
    assert isinstance(remote, RemoteEngine) and remote.model == "k3"  # chat completions
    assert str(remote.endpoint.client.base_url) == "http://127.0.0.1:9/v1/"
    raw = build(["--base-url", "http://127.0.0.1:9/v1", "--model", "k3", "--mode", "raw", "--tokenizer",
                 str(write_model_dir(tmp_path / "k3"))])
    assert isinstance(raw, ChatForImages) and isinstance(raw.engine, RemoteCompletionsEngine)
    assert raw.chat.endpoint is raw.engine.endpoint and raw.model == "k3"
    monkeypatch.setenv("KIMIK3_BASE_URL", "http://127.0.0.1:9/v1")
    assert isinstance(build([]), RemoteEngine)  # from the environment
    assert isinstance(build(["--script", str(script)]), ScriptedEngine)  # the command line wins


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "no engine: pass --base-url URL"),
        (["--base-url", "http://x/v1", "--script", "S"], "give one engine, not --script and --base-url"),
        (["--script", "S", "--preset", "k3-mxfp4-hopper"], "--preset apply only to the embedded engine"),
        (["--script", "S", "--feature", "text_only"], "--feature apply only to the embedded engine"),
        (["--script", "S", "--engine-arg", "a=1"], "--engine-arg apply only to the embedded engine"),
        (["--base-url", "http://x/v1", "--mode", "raw"], "--mode raw needs --tokenizer DIR"),
        (["--model-path", ".", "--engine-arg", "oops"], "expected KEY=VALUE, got 'oops'"),
        (["--script", "BAD"], "must hold a JSON list of raw K3 output strings"),
        (["--script", "S", "--reasoning-effort", "medium"], "'medium' is not one of"),
    ],
)
def test_usage_errors_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    (tmp_path / "S").write_text(json.dumps([answer("x")]))
    (tmp_path / "BAD").write_text(json.dumps({"not": "a list"}))
    args = [str(tmp_path / a) if a in ("S", "BAD") else a for a in args]
    result = invoke(["run", "task", "-w", str(tmp_path), *args], tmp_path / "home")
    assert result.exit_code == 2
    assert message in " ".join(result.stderr.split()), result.stderr


def test_preflight_fails_on_this_cpu_machine(tmp_path: Path) -> None:
    if shutil.which("nvidia-smi") or shutil.which("amd-smi"):
        pytest.skip("this machine has nvidia-smi / amd-smi; the test is about a CPU-only machine")
    result = invoke(["preflight", "--weights-dir", str(tmp_path)], tmp_path / "home")
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines[0].startswith("[FAIL] preset: auto: no K3 mxfp4 preset fits this node (no GPU found).")
    assert "[FAIL] gpus: no GPU found (nvidia-smi and amd-smi missing or failing)" in lines
    assert lines[-1] == "preflight: NOT READY"


# -- the terminal view and the example ---------------------------------------------------------


async def test_terminal_progress_streams_reasoning_dimmed_and_shows_tools(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100, color_system="standard")
    progress = cli_progress_module._RichProgress(console)
    engine = ScriptedEngine([call("read_file", {"path": "calc.py"}, "Look at calc.\nThen fix."),
                             answer("All good.\nBye.", reasoning="It is fine.")], chunk_size=3)
    agent = cli_run_module.Agent(instructions="x", tools=coding_tools(repo), engine=engine)
    result = await cli_run_module._drive(agent, "check", [], tmp_path / "s.jsonl", progress)
    progress.summary(result, tmp_path / "s.jsonl")
    raw = out.getvalue()
    assert "\x1b[2mLook at calc.\x1b[0m" in raw and "\x1b[2mIt is fine.\x1b[0m" in raw  # reasoning is dim
    text = _ANSI.sub("", raw)
    for expected in ('→ read_file {"path": "calc.py"}', "✓ read_file: 1 def add(a, b):", "All good.", "Bye.",
                     f"session: {tmp_path / 's.jsonl'}", "2 turns · 1 tool call"):
        assert expected in text


async def test_example_is_import_safe_and_runs_a_scripted_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = make_repo(tmp_path)
    path = Path(__file__).resolve().parents[1] / "examples" / "coding_agent.py"
    spec = importlib.util.spec_from_file_location("coding_agent_example", path)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)  # import-safe: nothing runs
    assert capsys.readouterr().out == ""
    engine = ScriptedEngine(FIX_SCRIPT)
    agent = Agent(instructions=CODING_INSTRUCTIONS, tools=coding_tools(repo), engine=engine)
    assert await example.main("fix the failing test", engine, agent) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:8] == [
        'tool read_file {"path": "test_calc.py"}',
        'tool read_file {"path": "calc.py"}',
        "  -> " + "     1\tfrom calc import add",
        "  -> " + "     1\tdef add(a, b):",
        'tool edit_file {"path": "calc.py", "old_string": "return a - b", "new_string": "return a + b"}',
        "  -> Edited calc.py (1 replacement)",
        f"tool bash {json.dumps({'command': f'{sys.executable} test_calc.py'})}",
        "  -> ok",
    ]
    assert out[-2:] == ["Fixed add in calc.py (it subtracted); test_calc.py passes.", out[-1]]
    assert out[-1].startswith("[completed, ") and run_test(repo).returncode == 0
    assert re.fullmatch(r"\[completed, 4 turns, \d+ tokens\]", out[-1])
    # one turn: "1 turn", not "1 turns"
    one = ScriptedEngine([answer("Nothing to fix.")])
    agent = Agent(instructions=CODING_INSTRUCTIONS, tools=coding_tools(repo), engine=one)
    assert await example.main("is it fixed?", one, agent) == 0
    assert re.fullmatch(r"\[completed, 1 turn, \d+ tokens\]", capsys.readouterr().out.splitlines()[-1])


# -- degraded runs -----------------------------------------------------------------------------


def test_a_degraded_run_says_what_went_wrong(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    both = render_output({"reasoning_content": "r", "content": "", "tool_calls": [
        {"id": "1", "function": {"name": "read_file", "arguments": {"path": "calc.py"}}},
        {"id": "2", "function": {"name": "write_file", "arguments": {"path": "new.py", "content": "x = 1"}}}]})
    cut = both[: both.index("x = 1")]  # the write is cut by the output limit inside its content
    script = write_script(tmp_path / "s.json", [cut, answer("Read calc.py; new.py is not written.")])
    result = invoke(["run", "read and write", "-w", str(repo), "--script", str(script)], tmp_path / "home")
    assert result.exit_code == 0
    first, *lines = result.stdout.splitlines()
    assert first.startswith("sandbox: ")  # the first line says where bash runs
    assert lines[:4] == [
        '[turn 1] tool read_file {"path": "calc.py"}',
        "[turn 1] dropped an incomplete call to write_file",
        "[turn 1] result read_file: 1 def add(a, b):",
        "[turn 2] answer: Read calc.py; new.py is not written.",
    ]
    assert lines[4:6] == [
        "degraded: 1 cut call, 1 issue",
        "  turn 1: the call to 'write_file' was cut by the output limit (max_tokens) before it finished and did not run",
    ]
    assert lines[6].startswith("usage: 2 turns, 1 tool call, ")
    assert not (repo / "new.py").exists()


def test_an_unusable_run_stops_and_says_so(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    empty = "plan<|close|>think<|sep|><|close|>message<|sep|>"
    script = write_script(tmp_path / "s.json", [empty, empty])
    result = invoke(["run", "do it", "-w", str(repo), "--script", str(script)], tmp_path / "home")
    assert result.exit_code == 0
    first, *lines = result.stdout.splitlines()
    assert first.startswith("sandbox: ")  # the first line says where bash runs
    assert lines[2:6] == [
        "stopped: unusable_output (twice in a row the model's output had neither an answer nor a call that could run)",
        "degraded: 2 issues",
        "  turn 1: the model's message had neither an answer nor a tool call",
        "  turn 2: the model's message had neither an answer nor a tool call",
    ]


def test_chat_says_when_an_answer_is_degraded(tmp_path: Path) -> None:
    empty = "plan<|close|>think<|sep|><|close|>message<|sep|>"
    script = write_script(tmp_path / "chat.json", [empty, answer("Hi!")])
    result = invoke(["chat", "--script", str(script), "--session", str(tmp_path / "c.jsonl")], tmp_path / "home",
                    input="hello\n/exit\n")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[:4] == ["[turn 1] answer: (no text)", "[turn 2] answer: Hi!", "degraded: 1 issue",
                         "  turn 1: the model's message had neither an answer nor a tool call"]



def test_a_compaction_that_kept_the_history_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    from kimik3.agents import CompactionEvent

    progress = cli_progress_module.PlainProgress()
    why = "compaction kept the full history: the summary came back empty (no text, only reasoning)"
    progress.event(CompactionEvent(0, "", failed=why))
    progress.event(CompactionEvent(7, "SUMMARY"))
    progress.event(CompactionEvent(0, "", cleared_results=12))  # ContextPolicy(clear_tool_results=True)
    progress.event(CompactionEvent(6, "", failed="compaction's summary came back empty", cleared_results=1))
    assert capsys.readouterr().out.splitlines() == [
        f"[turn 1] {why}", "[turn 1] compacted 7 earlier messages", "[turn 1] cleared 12 old tool results",
        "[turn 1] compaction's summary came back empty; cleared 1 old tool result, dropped 6 messages of the oldest "
        "turns"]


def test_run_says_a_loop_ended_the_run(tmp_path: Path) -> None:
    """Issue 41: the same read, again and again, ends the run with loop_detected, said on the CLI."""
    repo = make_repo(tmp_path)
    script = write_script(tmp_path / "loop.json", [call("read_file", {"path": "calc.py"})] * 12)
    session = tmp_path / "loop.jsonl"
    result = invoke(["run", "fix it", "-w", str(repo), "--script", str(script), "--session", str(session)],
                    tmp_path / "home")
    assert ("stopped: loop_detected (the model kept repeating the same tool calls with the same results; the run "
            "was stopped)") in result.stdout
    ends = [json.loads(line)["run_end"] for line in session.read_text().splitlines() if '"run_end"' in line]
    assert [e["stop_reason"] for e in ends] == ["loop_detected"]
