"""The paths a new user takes against a served k3-tiny (issue 16): `kimik3 serve` (tested by
starting it and sending a chat request), `kimik3 run` in chat and raw mode (raw without
--max-tokens), the README's SDK snippet with its RemoteEngine line, and examples/coding_agent.py.
Run under ``flock /tmp/kimik3-engine.lock``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from kimik3.tools.coding import coding_tools

from .conftest import K3_TINY, free_port, require_engine, stop_server
from .newcomer import NOTES_FIRST_LINE, ROOT, new_user_dir, run_python, sdk_snippet

TASK = "What is the first line of notes.txt?"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`kimik3 serve models/k3-tiny --max-model-len 8192` as the README says; its base URL."""
    require_engine("kimik3 serve", K3_TINY)
    port = free_port()
    log_path = tmp_path_factory.mktemp("serve") / "serve.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("VLLM_CPU_KVCACHE_SPACE", None)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "kimik3", "serve", "models/k3-tiny", "--port", str(port),
                                 "--max-model-len", "8192"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"kimik3 serve exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(base + "/health", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"kimik3 serve not ready in 300 s:\n{log_path.read_text()[-3000:]}") from None
            time.sleep(1)
    try:
        yield base + "/v1"
    finally:
        stop_server(proc)
    assert "--kv-cache-memory-bytes" in log_path.read_text(errors="replace").splitlines()[0]


def test_kimik3_serve_answers_a_chat_request_with_the_kimi_k3_parsers(served: str) -> None:
    tools = [t.spec.model_dump(exclude_none=True) for t in coding_tools(ROOT / "examples" / "sample_workspace")]
    body = {"model": "k3-tiny", "messages": [{"role": "user", "content": TASK}], "tools": tools,
            "temperature": 0, "max_tokens": 300}
    req = urllib.request.Request(served + "/chat/completions", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        reply = json.load(r)
    choice = reply["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    (call,) = choice["message"]["tool_calls"]
    assert call["function"]["name"] == "read_file" and json.loads(call["function"]["arguments"]) == {"path": "notes.txt"}
    with urllib.request.urlopen(served + "/models", timeout=30) as r:
        card = json.load(r)["data"][0]
    assert card["id"] == "k3-tiny"  # kimik3 serve names it (no "/": clients read one as a provider prefix)
    assert card["max_model_len"] == 8192  # raw mode's default window


@pytest.mark.parametrize("mode", ["chat", "raw"])
def test_kimik3_run_against_the_server_without_max_tokens(served: str, tmp_path: Path, mode: str) -> None:
    home = new_user_dir(tmp_path)
    raw = ["--mode", "raw", "--tokenizer", "models/k3-tiny"] if mode == "raw" else []
    run = run_python(home, "-m", "kimik3", "run", TASK, "-w", "examples/sample_workspace", "--plain",
                     "--temperature", "0", "--base-url", served, *raw)
    assert run.returncode == 0, run.stderr
    sandbox, *lines = run.stdout.splitlines()
    assert sandbox.startswith("sandbox: ")  # what bash runs in, said before the first turn
    assert lines[:2] == ['[turn 1] tool read_file {"path": "notes.txt"}',
                         f"[turn 1] result read_file: 1 {NOTES_FIRST_LINE}"]
    assert lines[2].startswith("[turn 2] answer: ") and NOTES_FIRST_LINE in run.stdout
    assert not any(line.startswith("stopped:") for line in lines)
    assert lines[-2].startswith("usage: 2 turns, 1 tool call, ")
    assert run.stderr == ""


def test_readme_sdk_snippet_with_its_remote_engine_line(served: str, tmp_path: Path) -> None:
    code = sdk_snippet()
    vllm_line = next(line for line in code.splitlines() if "engine = VLLMEngine(" in line)
    remote_line = next(line for line in code.splitlines() if "# engine = RemoteEngine(" in line)
    code = code.replace(vllm_line, "").replace(remote_line, remote_line.replace("# engine", "engine"))
    code = code.replace("http://127.0.0.1:8000/v1", served)
    home = new_user_dir(tmp_path)
    (home / "sdk.py").write_text(code)
    run = run_python(home, "sdk.py")
    assert run.returncode == 0, run.stderr
    assert NOTES_FIRST_LINE in run.stdout and " completed " in run.stdout
    lines = run.stdout.splitlines()
    assert lines[-2:] == ["final", "server.cfg has 2 lines."]  # the streamed follow-up, then Agent.resume's answer
    assert len(list(home.glob("run-*.jsonl"))) == 1


def test_coding_agent_example_against_the_server(served: str, tmp_path: Path) -> None:
    home = new_user_dir(tmp_path)
    run = run_python(home, "examples/coding_agent.py", TASK, "examples/sample_workspace",
                     "--base-url", served, "--temperature", "0")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[:2] == ['tool read_file {"path": "notes.txt"}', f"  ->      1\t{NOTES_FIRST_LINE}"]
    assert NOTES_FIRST_LINE in "\n".join(lines[2:-1])  # the answer quotes it
    assert lines[-1].startswith("[completed, 2 turns, ")
