"""Each attempt's commands in the sandbox of the eval's policy: the task's ``setup`` and ``check``
as the agent's ``bash`` (the workspace writable; the task folder copy, the answer and the session
read-only; nothing else written), their timeouts, no process left behind (the host's /proc), and
``sandbox="none"``, where the same commands may write anywhere (that is the point of it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from kimik3 import ScriptedEngine
from kimik3.eval import EvalConfig, evaluate, load_suite, read_results

from ..procs import MODES, alive_with, marker, needs_bwrap
from .helpers import by_task, calls, tree_hash, write_task

ROOT = Path(__file__).resolve().parents[2]


def run(suite: Path, out: Path, engine: Any, mode: Any = "auto", **kw: Any) -> dict[str, Any]:
    loaded = load_suite(suite)
    return anyio.run(lambda: evaluate(loaded, engine, out, config=EvalConfig(sandbox=mode, **kw)))


def writes(targets: dict[str, str]) -> str:
    """A shell script trying to append to each target, printing ``NAME wrote`` or ``NAME refused``."""
    return "; ".join(f'if (echo pwned >> {path}) 2>/dev/null; then echo "{name} wrote"; else echo "{name} refused"; fi'
                     for name, path in targets.items())


@pytest.mark.parametrize("mode", MODES)
def test_the_check_writes_only_its_workspace_and_reads_its_inputs(tmp_path: Path, host_dir: Path, mode: str) -> None:
    suite = tmp_path / "suite"
    targets = {"task.toml": '"$KIMIK3_EVAL_TASK_DIR/task.toml"', "task-new": '"$KIMIK3_EVAL_TASK_DIR/new.txt"',
               "answer": '"$KIMIK3_EVAL_ANSWER"', "outside": f"{host_dir}/x.txt", "workspace": "mine.txt"}
    reads = ('cat "$KIMIK3_EVAL_ANSWER"; echo; grep -c kimik3_session "$KIMIK3_EVAL_SESSION"; '
             'cat "$KIMIK3_EVAL_TASK_DIR/helper.txt"; cat data.txt')
    folder = write_task(suite, "t", "Say hi.", writes(targets) + "; " + reads, {"data.txt": "the data\n"})
    (folder / "helper.txt").write_text("the helper\n")
    before = tree_hash(suite)
    out = tmp_path / "out"
    summary = run(suite, out, ScriptedEngine(["hi there"]), mode)
    (r,), _ = read_results(out / "results.jsonl")
    wrote = "wrote" if mode == "none" else "refused"
    answer = "hi therepwned\n" if mode == "none" else "hi there"
    assert (r.passed, r.check_exit) == (True, 0)
    assert r.check_output == (f"task.toml {wrote}\ntask-new {wrote}\nanswer {wrote}\noutside {wrote}\n"
                              f"workspace wrote\n{answer}\n1\nthe helper\n"
                              "the data\n")
    assert [p.name for p in host_dir.iterdir()] == (["x.txt"] if mode == "none" else [])
    assert tree_hash(suite) == before  # the suite's own files, in either mode: the check had copies
    # what ran is recorded as the harness reports it: eval.json, the summary, the attempt's session
    meta = json.loads((out / "eval.json").read_text())
    if mode == "bwrap":
        assert meta["sandbox"] == summary["sandbox"] == ("sandbox: bwrap (workspace read-write, the rest read-only, "
                                                         "secrets hidden, /tmp private, network off)")
        assert meta["sandbox_policy"] == {"mode": "bwrap", "network": False, "read": [], "write": []}
    else:
        assert meta["sandbox"] == summary["sandbox"] == "sandbox: none (commands run unsandboxed, with your rights)"
        assert meta["sandbox_policy"] == {"mode": "none"}
    header = json.loads((out / "sessions" / "t" / "1.jsonl").read_text().splitlines()[0])
    assert header["sandbox"]["mode"] == mode and header["sandbox"]["requested"] == mode
    assert "| sandbox | " + summary["sandbox"].removeprefix("sandbox: ") + " |" in (out / "report.md").read_text()


@needs_bwrap
def test_setup_runs_in_the_sandbox_too(tmp_path: Path, host_dir: Path) -> None:
    suite = tmp_path / "suite"
    folder = write_task(suite, "a-fixture", "Go.", "cmp -s fixture.txt \"$KIMIK3_EVAL_TASK_DIR/fixture.txt\"",
                        setup='cp "$KIMIK3_EVAL_TASK_DIR/fixture.txt" . && touch made-by-setup')
    (folder / "fixture.txt").write_text("from the task folder\n")
    write_task(suite, "b-escape", "Go.", "true", setup=f"echo x > {host_dir}/planted.txt")
    engine = ScriptedEngine(by_task({"Go.": [calls(("bash", {"command": "ls"})), "done"]}))
    run(suite, tmp_path / "out", engine, "bwrap")
    a, b = read_results(tmp_path / "out" / "results.jsonl")[0]
    assert (a.task, a.passed, a.stop_reason) == ("a-fixture", True, "completed")
    listing = [m.content for c in engine.calls for m in c.messages if m.role == "tool"]
    assert listing and listing[0].startswith("fixture.txt\nmade-by-setup\n")  # the agent saw what setup made
    assert (b.task, b.passed, b.stop_reason, b.error, b.session) == ("b-escape", False, "setup_failed",
                                                                     "setup exited 1", None)
    assert "Read-only file system" in b.check_output and list(host_dir.iterdir()) == []
    assert len(engine.calls) == 2  # b's agent never ran


@pytest.mark.parametrize("mode", MODES)
def test_no_process_of_setup_the_agent_or_the_check_outlives_its_attempt(tmp_path: Path, mode: str) -> None:
    suite = tmp_path / "suite"
    m_setup, m_bash, m_check, m_timeout = marker(), marker(), marker(), marker()
    write_task(suite, "a", "Start it.", f"setsid sleep {m_check} & (sleep {m_check} &); true",
               setup=f"setsid sleep {m_setup} &")
    write_task(suite, "b", "Hang.", f"(setsid sleep {m_timeout} &); sleep {m_timeout}", check_timeout=1)
    replies = {"Start it.": [calls(("bash", {"command": f"(setsid sleep {m_bash} &); echo started"})), "started"],
               "Hang.": ["ok"]}
    summary = run(suite, tmp_path / "out", ScriptedEngine(by_task(replies)), mode)
    a, b = sorted(read_results(tmp_path / "out" / "results.jsonl")[0], key=lambda r: r.task)
    assert (a.passed, a.check_exit) == (True, 0)
    assert (b.passed, b.check_exit, b.check_timed_out, b.stop_reason) == (False, None, True, "completed")
    assert summary["check_timeouts"] == 1
    assert {m: alive_with(m) for m in (m_setup, m_bash, m_check, m_timeout)} == {
        m_setup: [], m_bash: [], m_check: [], m_timeout: []}


@pytest.mark.parametrize("mode", MODES)
def test_a_run_cancelled_by_its_timeout_leaves_no_process(tmp_path: Path, mode: str) -> None:
    suite = tmp_path / "suite"
    mark = marker()
    write_task(suite, "slow", "Serve.", "true", timeout=1)

    async def hang(task: str, turn: int) -> None:
        if turn == 1:
            await anyio.sleep(60)

    replies = {"Serve.": [calls(("bash", {"command": f"(setsid sleep {mark} &); echo up"})), "never"]}
    run(suite, tmp_path / "out", ScriptedEngine(by_task(replies, hang)), mode)
    (r,), _ = read_results(tmp_path / "out" / "results.jsonl")
    assert (r.stop_reason, r.passed) == ("timeout", False)
    assert alive_with(mark) == []


@needs_bwrap
def test_the_shipped_suite_sets_up_and_checks_in_the_sandbox(tmp_path: Path) -> None:
    suite = load_suite(ROOT / "evals" / "k3-tiny")
    out = tmp_path / "out"
    anyio.run(lambda: evaluate(suite, ScriptedEngine(lambda messages: "I do not know."), out,
                               config=EvalConfig(sandbox="bwrap"), concurrency=4))
    results, _ = read_results(out / "results.jsonl")
    assert len(results) == len(suite.tasks) and {r.stop_reason for r in results} == {"completed"}
    # every check ran and judged (none could not see its inputs or write its workspace): cmp exits
    # 2 for a file the agent never wrote
    for r in results:
        assert r.check_exit in (0, 1, 2), (r.task, r.check_exit, r.check_output)
        assert not any(s in r.check_output for s in ("Read-only", "No such file", "Permission denied")), r.task


def test_a_sandbox_that_cannot_start_fails_its_attempt_with_the_reason(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from kimik3.tools.coding import Sandbox

    suite = tmp_path / "suite"
    write_task(suite, "a-setup", "A.", "true", setup="true")
    write_task(suite, "b-check", "B.", "true")
    monkeypatch.setattr(Sandbox, "_argv", lambda self: (["/nonexistent/python"], b""))
    summary = run(suite, tmp_path / "out", ScriptedEngine(by_task({"A.": ["a"], "B.": ["b"]})), "none")
    a, b = read_results(tmp_path / "out" / "results.jsonl")[0]
    assert (a.stop_reason, a.passed, a.error) == ("setup_failed", False, "setup: ToolError: cannot start the command "
                                                  "supervisor (/nonexistent/python): [Errno 2] No such file or "
                                                  "directory: '/nonexistent/python'")
    assert (b.stop_reason, b.passed, b.check_exit) == ("error", False, None)
    assert b.error is not None and b.error.startswith("check: ToolError: cannot start the command supervisor")
    assert summary["errors"] == 2
