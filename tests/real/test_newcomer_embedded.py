"""The paths a new user takes with k3-tiny embedded through vLLM on this CPU (issue 16): the
README's SDK snippet as written (twice: it runs again, issue 35), `make demo`'s command (quiet: nothing on stderr), and
examples/coding_agent.py as its docstring says. Each starts vLLM in a child process, one at a
time, without VLLM_CPU_KVCACHE_SPACE (kimik3 sizes the KV cache). Run under
``flock /tmp/kimik3-engine.lock``."""

from __future__ import annotations

import re
from pathlib import Path

from .conftest import K3_TINY, require_engine
from .newcomer import NOTES_FIRST_LINE, ROOT, new_user_dir, run_python, sdk_snippet

DEMO_ANSWER = [
    '[turn 1] tool read_file {"path": "notes.txt"}',
    '[turn 1] tool read_file {"path": "server.cfg"}',
    f"[turn 1] result read_file: 1 {NOTES_FIRST_LINE}",
    "[turn 1] result read_file: 1 port = 8080",
    f"[turn 2] answer: notes.txt: {NOTES_FIRST_LINE}",
    "server.cfg: port = 8080",
]


def test_readme_sdk_snippet_runs_as_written_and_again(tmp_path: Path) -> None:
    require_engine("VLLMEngine", K3_TINY)
    home = new_user_dir(tmp_path)
    (home / "sdk.py").write_text(sdk_snippet())
    for n in (1, 2):  # a second run in the same directory works too (issue 35: "holds 5 messages")
        run = run_python(home, "sdk.py")
        assert run.returncode == 0, run.stderr[-3000:]
        assert run.stderr == ""  # quiet: vLLM's start-up output went to the log
        assert NOTES_FIRST_LINE in run.stdout and " completed " in run.stdout
        first_call = re.search(r"completion_tokens=(\d+)", run.stdout)
        assert first_call is not None and int(first_call.group(1)) < 300  # the one call's reply ended by itself
        lines = run.stdout.splitlines()
        assert lines.index("final") > next(i for i, line in enumerate(lines) if " completed " in line)
        assert lines[-1] == "server.cfg has 2 lines."  # Agent.resume continued the recorded session
        assert len(list(home.glob("run-*.jsonl"))) == n
    assert (home / ".kimik3" / "logs" / "vllm.log").stat().st_size > 0


def test_make_demo_command_answers_quietly(tmp_path: Path) -> None:
    require_engine("kimik3 run --model-path", K3_TINY)
    makefile = (ROOT / "Makefile").read_text()
    task = re.search(r"^TASK \?= (.*)$", makefile, re.M).group(1)  # type: ignore[union-attr]
    recipe = re.search(r"^demo: .*\n\t(.*)\\\n\t\t(.*)\n", makefile, re.M)
    assert recipe is not None
    args = (recipe.group(1) + recipe.group(2)).replace('"$(TASK)"', "TASK").split()
    assert args[:2] == ["$(VENV)/bin/kimik3", "run"]
    args = [task if a == "TASK" else a for a in args[1:]]
    home = new_user_dir(tmp_path)
    run = run_python(home, "-m", "kimik3", *args)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stderr == ""  # vLLM's, torch's and Python's noise went to the log
    sandbox, *lines = run.stdout.splitlines()
    assert sandbox.startswith("sandbox: ")  # what bash runs in, said before the engine starts
    assert lines[0] == "starting vLLM with models/k3-tiny ..."
    assert lines[1:7] == DEMO_ANSWER
    assert lines[7].startswith("usage: 2 turns, 2 tool calls, ") and lines[8].startswith("session: ")
    log = home / ".kimik3" / "logs" / "vllm.log"
    assert log.stat().st_size > 0


def test_coding_agent_example_as_its_docstring_says(tmp_path: Path) -> None:
    require_engine("examples/coding_agent.py --model-path", K3_TINY)
    doc = (ROOT / "examples" / "coding_agent.py").read_text().split('"""')[1]
    command = next(line for line in doc.splitlines() if line.strip().startswith("python examples/coding_agent.py"))
    follow = doc.splitlines()[doc.splitlines().index(command) + 1]
    argv = (command.rstrip("\\") + follow).split()
    assert argv[1:3] == ["examples/coding_agent.py", '"What']
    task = command.split('"')[1]
    rest = (command.split('"')[2].rstrip("\\") + follow).split()
    home = new_user_dir(tmp_path)
    run = run_python(home, "examples/coding_agent.py", task, *rest)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stderr == ""
    lines = run.stdout.splitlines()
    assert lines[0] == "starting vLLM with models/k3-tiny ..."
    assert 'tool read_file {"path": "notes.txt"}' in lines and 'tool read_file {"path": "server.cfg"}' in lines
    assert f"notes.txt: {NOTES_FIRST_LINE}" in lines
    assert lines[-1].startswith("[completed, 2 turns, ")
