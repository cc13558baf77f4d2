"""What a new user meets first (issue 16), offline: the README's offline snippet, the make targets'
install steps, `kimik3 serve --dry-run`, the CPU KV-cache default, scripted plain answers on the
command line, and failed runs keeping the typed task in their session (issue 40). The same paths against real engines:
tests/real/test_newcomer_*.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kimik3.agents import load_session
from kimik3.cli import main
from kimik3.engines._vllm import cpu_kv_cache_bytes
from tests.real.newcomer import ROOT, offline_snippet, own_tool_snippet, sdk_snippet

MiB, GiB = 2**20, 2**30


def test_readme_offline_snippet_runs_as_written(tmp_path: Path) -> None:
    (tmp_path / "offline.py").write_text(offline_snippet())
    run = subprocess.run([sys.executable, "offline.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stderr
    assert run.stdout == "It is 21.5 °C in Paris. ['user', 'assistant', 'tool', 'assistant']\n"
    assert len([line for line in offline_snippet().splitlines() if line.strip()]) <= 16


def test_readme_own_tool_snippet_adds_a_tool_to_the_coding_harness(tmp_path: Path) -> None:
    # issue 43: harness.agent(tools=[...]) raised a bare TypeError and adding a tool was undocumented
    (tmp_path / "own.py").write_text(own_tool_snippet())
    run = subprocess.run([sys.executable, "own.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stderr
    assert run.stdout == "Done. ['deployed to staging'] True\n"


def test_a_tool_of_ones_own_named_as_a_harness_tool_is_refused(tmp_path: Path) -> None:
    from kimik3 import ScriptedEngine, UserError, tool
    from kimik3.harness import CodingHarness

    @tool
    def bash(command: str) -> str:
        """Not the harness's bash.

        Args:
            command: anything.
        """
        return command

    with pytest.raises(UserError, match="two tools are named 'bash'"):
        CodingHarness(tmp_path, sandbox="none").agent(engine=ScriptedEngine(["x"]), tools=[bash])


def test_readme_sdk_snippet_guards_its_entry_point() -> None:
    code = sdk_snippet()
    assert code.rstrip().endswith('if __name__ == "__main__":  # required: vLLM starts worker processes that re-import this file\n    anyio.run(main)')
    assert code.count("anyio.run(") == 1


def make_plan(target: str) -> str:
    run = subprocess.run(["make", "-n", "-B", target, "VENV=/nonexistent/venv"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_make_demo_installs_only_the_demos_needs() -> None:
    plan = make_plan("demo")
    assert "scripts/setup_engine.sh" in plan and "-e ." in plan
    for other in ("setup_ui.sh", "setup_test_model.sh", "setup_bench.sh", "[dev]", "smollm2"):
        assert other not in plan
    assert '/nonexistent/venv/bin/kimik3 run "What are the first lines of notes.txt and server.cfg?"' in plan


@pytest.mark.parametrize(("target", "needs"), [
    ("test", ["setup_engine.sh", "setup_test_model.sh", "setup_ui.sh", "ruff check", "mypy", "KIMIK3_REQUIRE_ENGINE=1"]),
    ("bench", ["setup_engine.sh", "setup_test_model.sh", "setup_bench.sh", "bench/*.py"]),
    ("serve", ["setup_engine.sh", "kimik3 serve models/k3-tiny --port 8000 --max-model-len 8192"]),
    ("cluster", ["setup_engine.sh", "kimik3 serve models/k3-tiny --replicas 2 --router consistent_hash --port 8000 "
                 "--max-model-len 8192"]),
])
def test_make_test_and_bench_install_what_they_need(target: str, needs: list[str]) -> None:
    plan = make_plan(target)
    for need in needs:
        assert need in plan


@pytest.mark.parametrize(("available", "expected"), [
    (16 * GiB, 2 * GiB),  # capped
    (4 * GiB, 1 * GiB),  # a quarter
    (3 * GiB + 5 * MiB, 769 * MiB),  # a quarter (769.25 MiB), rounded down to whole MiB
    (512 * MiB, 256 * MiB),  # floor
    (0, 256 * MiB),
])
def test_cpu_kv_cache_is_a_quarter_of_available_memory_within_bounds(available: int, expected: int) -> None:
    assert cpu_kv_cache_bytes(available) == expected


def serve_dry_run(*args: str, env: dict[str, str] | None = None) -> list[str]:
    result = CliRunner().invoke(main, ["serve", "models/k3-tiny", "--dry-run", *args], env=env)
    assert result.exit_code == 0, result.output
    return result.output.split()


def test_serve_dry_run_is_vllms_api_server_with_the_kimi_k3_parsers(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("vllm", reason="kimik3 serve needs vLLM (make demo installs it)")
    from kimik3.engines._vllm import _on_cpu

    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    argv = serve_dry_run("--max-model-len", "4096", "--port", "8123")
    assert argv[:14] == [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", "models/k3-tiny",
                         "--host", "127.0.0.1", "--port", "8123", "--trust-remote-code", "--tokenizer-mode",
                         "kimi_k3", "--tool-call-parser", "kimi_k3"]
    # served as "k3-tiny": a "/" in the name reads as a provider prefix to OpenAI-compatible clients
    assert argv[14:19] == ["--reasoning-parser", "kimi_k3", "--enable-auto-tool-choice", "--served-model-name", "k3-tiny"]
    # the cached prompt tokens in usage (kimik3 run's "% cached", eval's cache hits)
    assert argv[19] == "--enable-prompt-tokens-details" and argv.count("--enable-prompt-tokens-details") == 1
    assert argv[-2:] == ["--max-model-len", "4096"]  # the user's flags come last (they win)
    for own in (["--enable-prompt-tokens-details"], ["--no-enable-prompt-tokens-details"],
                ["--enable-prompt-tokens-details=false"]):
        theirs = serve_dry_run(*own)
        assert theirs[-1] == own[0] and sum(a.startswith(("--enable-prompt-tokens", "--no-enable-prompt-tokens"))
                                            for a in theirs) == 1
    named = serve_dry_run("--served-model-name", "tiny")
    assert named.count("--served-model-name") == 1 and named[-2:] == ["--served-model-name", "tiny"]
    if not _on_cpu():
        return
    kv = int(argv[argv.index("--kv-cache-memory-bytes") + 1])
    assert 256 * MiB <= kv <= 2 * GiB and kv % MiB == 0 and "--enforce-eager" in argv
    # the user's own sizing is kept: no second one
    assert "--kv-cache-memory-bytes" not in serve_dry_run(env={"VLLM_CPU_KVCACHE_SPACE": "3"})
    mine = serve_dry_run("--kv-cache-memory-bytes", "1000000")
    assert mine.count("--kv-cache-memory-bytes") == 1 and mine[-1] == "1000000"


def test_serve_replicas_dry_run_is_n_replicas_on_the_next_ports_and_vllm_router(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("vllm", reason="kimik3 serve needs vLLM (make demo installs it)")
    pytest.importorskip("vllm_router", reason="kimik3 serve --replicas needs vllm-router (setup_engine.sh installs it)")
    monkeypatch.chdir(ROOT)
    result = CliRunner().invoke(main, ["serve", "models/k3-tiny", "--replicas", "2", "--router", "sticky_least_loaded",
                                       "--port", "8200", "--dry-run", "--max-model-len", "4096",
                                       "--router-arg", "--log-level", "--router-arg", "debug"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert [line.split(":", 1)[0] for line in lines] == ["replica 0", "replica 1", "router"]
    for i, line in enumerate(lines[:2]):
        argv = line.split(": ", 1)[1].split()
        assert argv[:9] == [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", "models/k3-tiny",
                            "--host", "127.0.0.1", "--port", str(8201 + i)]
        assert "--enable-prefix-caching" in argv and argv.count("--enable-prompt-tokens-details") == 1
        assert argv[-2:] == ["--max-model-len", "4096"]
    router = lines[2].split(": ", 1)[1].split()
    assert router[:15] == [sys.executable, "-m", "vllm_router.launch_router", "--host", "127.0.0.1", "--port", "8200",
                           "--worker-urls", "http://127.0.0.1:8201", "http://127.0.0.1:8202", "--policy",
                           "sticky_least_loaded", "--worker-startup-check-interval", "1", "--prometheus-host"]
    assert router[-2:] == ["--log-level", "debug"]
    bad = CliRunner().invoke(main, ["serve", "models/k3-tiny", "--router", "fastest", "--dry-run"])
    assert bad.exit_code == 2 and "'fastest' is not one of 'consistent_hash'" in bad.output


def run_cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KIMIK3_HOME": str(tmp_path / "home")}
    return subprocess.run([sys.executable, "-m", "kimik3", *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)


def sessions(tmp_path: Path) -> list[Path]:
    folder = tmp_path / "home" / "sessions"
    return sorted(folder.iterdir()) if folder.exists() else []


def test_a_plain_scripted_reply_is_the_answer_on_the_command_line(tmp_path: Path) -> None:
    (tmp_path / "replies.json").write_text(json.dumps(["Hello!"]))
    run = run_cli(tmp_path, "run", "Hi", "--script", "replies.json", "--plain")
    assert run.returncode == 0, run.stderr
    first, *lines = run.stdout.splitlines()
    assert first.startswith("sandbox: ")  # where bash would run its commands
    assert lines[0] == "[turn 1] answer: Hello!"
    assert lines[1].startswith("usage: 1 turn, 0 tool calls, ")
    assert lines[2] == f"session: {sessions(tmp_path)[0]}" and run.stderr == ""


@pytest.mark.parametrize("session", [None, "mine.jsonl"])
def test_a_run_that_never_reached_the_model_keeps_the_task(tmp_path: Path, session: str | None) -> None:
    # issue 40: a session, once created, is never deleted; the typed task stays in it, unanswered
    extra = ["--session", session] if session else []
    run = run_cli(tmp_path, "run", "Hi", "--plain", "--base-url", "http://127.0.0.1:9/v1", "--model", "k3", *extra)
    assert run.returncode == 1
    assert run.stderr.splitlines() == [
        "error: APIConnectionError: cannot reach the endpoint http://127.0.0.1:9/v1: Connection error. "
        "(is the server running? `kimik3 serve MODEL_DIR` starts one)"]
    kept = tmp_path / "mine.jsonl" if session else sessions(tmp_path)[0]
    assert [m.content for m in load_session(kept) if m.role == "user"] == ["Hi"]
    assert run.stdout.splitlines()[-1] == (f"the task is kept, unanswered, in {kept}; continue with: "
                                           f"kimik3 resume {kept} -w {tmp_path} --base-url "
                                           "http://127.0.0.1:9/v1 --model k3")  # kept in its workspace: given again


def test_a_failed_resume_keeps_its_session(tmp_path: Path) -> None:
    (tmp_path / "replies.json").write_text(json.dumps(["Hello!"]))
    assert run_cli(tmp_path, "run", "Hi", "--script", "replies.json", "--plain", "--session", "s.jsonl").returncode == 0
    before = (tmp_path / "s.jsonl").read_text()
    run = run_cli(tmp_path, "resume", "s.jsonl", "And?", "--plain", "--base-url", "http://127.0.0.1:9/v1", "--model", "k3")
    assert run.returncode == 1 and (tmp_path / "s.jsonl").read_text().startswith(before)
    assert run.stdout.splitlines()[-2:] == ["session: s.jsonl", (  # the resume's typed task is kept too
        f"the task is kept, unanswered, in {tmp_path / 's.jsonl'}; continue with: kimik3 resume "
        f"{tmp_path / 's.jsonl'} -w {tmp_path} --base-url http://127.0.0.1:9/v1 --model k3")]


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs git and a checkout")
def test_what_the_readme_writes_into_the_checkout_is_ignored() -> None:
    """The README's SDK snippet writes run-<time>.jsonl (and its copy checkpoints) into the
    current directory, its eval examples --out runs/...: none of it shows as untracked."""
    paths = ["run-20261201-190000.jsonl", "run-20261201-190000.jsonl.checkpoints/turn-2/0.bin",
             "runs/before/eval.json", "runs/k3-tiny/sessions/a/1.jsonl"]
    found = subprocess.run(["git", "check-ignore", "--no-index", *paths], cwd=ROOT, capture_output=True, text=True)
    assert found.stdout.splitlines() == paths
    kept = subprocess.run(["git", "check-ignore", "--no-index", "examples/run.py", "tests/runs_test.py"], cwd=ROOT,
                          capture_output=True, text=True)
    assert (kept.returncode, kept.stdout) == (1, "")
