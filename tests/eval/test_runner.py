"""Running suites offline (ScriptedEngine through the real K3 parser, the real coding harness,
real check commands): results lines, the summary they add up to, resuming, concurrency,
timeouts, failures, Ctrl-C, and a suite that is never written."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from kimik3 import APIConnectionError, BadRequestError, ContextLengthExceededError, Pricing, ScriptedEngine
from kimik3.eval import EvalConfig, EvalError, ResultsDir, evaluate, load_suite, read_results, summarize
from kimik3.formats.k3 import RawChunk
from kimik3.types import ChatRequest

from .helpers import answer_has, by_task, calls, tree_hash, write_task


def simple_suite(root: Path) -> Path:
    suite = root / "suite"
    write_task(suite, "answer", "What is the first line of notes.txt?", answer_has("alpha line"),
               {"notes.txt": "alpha line\nbeta\n"}, tags=["first_line"])
    write_task(suite, "write", "Copy the first line of notes.txt into first.txt.",
               "printf 'alpha line\\n' | cmp -s - first.txt", {"notes.txt": "alpha line\nbeta\n"})
    write_task(suite, "wrong", "What is 2 + 2?", "grep -qxF 4 \"$KIMIK3_EVAL_ANSWER\"", tags=["plain"])
    return suite


REPLIES = {
    "What is the first line of notes.txt?": [calls(("read_file", {"path": "notes.txt"})),
                                             "The first line is: alpha line"],
    "Copy the first line of notes.txt into first.txt.": [
        calls(("read_file", {"path": "notes.txt"})),
        calls(("write_file", {"path": "first.txt", "content": "alpha line\n"})),
        "Done."],
    "What is 2 + 2?": ["5"],
}


def run(suite: Path, out: Path, engine: Any, **kw: Any) -> dict[str, Any]:
    loaded = load_suite(suite)
    return anyio.run(lambda: evaluate(loaded, engine, out, **kw))


def test_an_eval_scores_each_attempt_and_the_summary_is_its_lines(tmp_path: Path) -> None:
    suite = simple_suite(tmp_path)
    before = tree_hash(suite)
    digest = load_suite(suite).digest
    out = tmp_path / "out"
    summary = run(suite, out, ScriptedEngine(by_task(REPLIES)))
    results, _ = read_results(out / "results.jsonl")
    got = {r.task: r for r in results}
    assert [(r.task, r.attempt, r.passed, r.stop_reason, r.turns) for r in sorted(results, key=lambda r: r.task)] == [
        ("answer", 1, True, "completed", 2), ("write", 1, True, "completed", 3), ("wrong", 1, False, "completed", 1)]
    assert got["wrong"].check_exit == 1 and got["answer"].check_exit == 0
    assert got["write"].tool_calls == 2 and got["write"].valid_tool_calls == 2
    assert got["answer"].tags == ["first_line"] and got["answer"].session == "sessions/answer/1.jsonl"
    assert got["answer"].cached_tokens is None and got["answer"].cost is None  # scripted: no cache, no price
    assert got["answer"].prompt_tokens > 0 and got["answer"].ttft_p50 is not None
    # each session holds its attempt: the task, then the model's turns
    lines = [json.loads(x) for x in (out / got["write"].session).read_text().splitlines()]
    assert lines[0]["kimik3_session"] == 1
    assert [x["message"]["role"] for x in lines if "message" in x] == [
        "system", "user", "assistant", "tool", "assistant", "tool", "assistant"]
    # the summary is exactly what its lines add up to, and is on disk
    assert summary == summarize(results, json.loads((out / "eval.json").read_text()))
    assert json.loads((out / "summary.json").read_text()) == json.loads(json.dumps(summary))
    assert (summary["tasks"], summary["attempts"], summary["passed"]) == (3, 3, 2)
    assert summary["pass_rate"] == pytest.approx(2 / 3) and summary["pass_at_k"] == {"1": pytest.approx(2 / 3)}
    assert summary["tool_calls"] == 3 and summary["tool_call_validity"] == 1.0
    assert summary["loops"] == 0 and "| loops detected | 0 |" in (out / "report.md").read_text()
    assert summary["cached_share"] is None and summary["cost_per_pass"] is None
    assert summary["per_task"]["wrong"] == {"attempts": 1, "passed": 0, "pass_rate": 0.0, "cost": None,
                                            "mean_turns": 1.0, "timeouts": 0, "errors": 0, "loops": 0,
                                            "tags": ["plain"]}
    assert "| wrong | plain | 0/1 | 0.0% |" in (out / "report.md").read_text()
    # the suite's own files were never written (the agent wrote first.txt into its copy)
    assert tree_hash(suite) == before and load_suite(suite).digest == digest
    assert not (suite / "write" / "workspace" / "first.txt").exists()


def test_the_check_sees_the_answer_session_stop_reason_and_a_copy_of_the_task(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    check = ('test "$(cat "$KIMIK3_EVAL_ANSWER")" = "hi there" && test "$KIMIK3_EVAL_STOP_REASON" = completed '
             '&& grep -q kimik3_session "$KIMIK3_EVAL_SESSION" && test -f "$KIMIK3_EVAL_TASK_DIR/task.toml" '
             '&& test -f "$KIMIK3_EVAL_TASK_DIR/helper.sh" && ! test -e "$KIMIK3_EVAL_TASK_DIR/workspace" '
             '&& test "$KIMIK3_EVAL_TASK_DIR" != ' + str(suite / "t") + ' && test -f data.txt && echo PASSED')
    folder = write_task(suite, "t", "Say hi.", check, {"data.txt": "x\n"})
    (folder / "helper.sh").write_text("echo helper\n")
    run(suite, tmp_path / "out", ScriptedEngine(["hi there"]))
    (result,), _ = read_results(tmp_path / "out" / "results.jsonl")
    assert (result.passed, result.check_exit, result.check_output) == (True, 0, "PASSED\n")


def test_an_existing_out_continues_only_the_missing_attempts(tmp_path: Path) -> None:
    suite = simple_suite(tmp_path)
    out = tmp_path / "out"
    first = ScriptedEngine(by_task(REPLIES))
    run(suite, out, first)
    assert len(first.calls) == 6
    second = ScriptedEngine(by_task(REPLIES))
    summary = run(suite, out, second, repeat=2)  # attempt 2 of each task only
    assert len(second.calls) == 6
    results, _ = read_results(out / "results.jsonl")
    assert sorted((r.task, r.attempt) for r in results) == [(t, n) for t in ("answer", "write", "wrong") for n in (1, 2)]
    assert summary["attempts"] == 6 and summary["pass_at_k"] == {"1": pytest.approx(2 / 3), "2": pytest.approx(2 / 3)}
    third = ScriptedEngine(by_task(REPLIES))
    run(suite, out, third, repeat=2)  # nothing left to do
    assert third.calls == []


def test_a_torn_last_line_is_cut_and_its_attempt_runs_again(tmp_path: Path) -> None:
    suite = simple_suite(tmp_path)
    out = tmp_path / "out"
    run(suite, out, ScriptedEngine(by_task(REPLIES)))
    path = out / "results.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:2]) + lines[2][:37])  # a kill -9 in the middle of the last write
    torn = json.loads(lines[2])["task"]
    engine = ScriptedEngine(by_task(REPLIES))
    run(suite, out, engine)
    results, keep = read_results(path)
    assert keep == len(path.read_bytes()) and len(results) == 3
    assert results[-1].task == torn and results[:2] == read_results(path)[0][:2]
    assert {m.content for c in engine.calls for m in c.messages if m.role == "user"} == {torn_instruction(suite, torn)}


def torn_instruction(suite: Path, task: str) -> str:
    return next(t.instruction for t in load_suite(suite).tasks if t.name == task)


def test_an_out_of_another_suite_or_other_options_is_refused(tmp_path: Path) -> None:
    suite = simple_suite(tmp_path)
    out = tmp_path / "out"
    run(suite, out, ScriptedEngine(by_task(REPLIES)))
    loaded = load_suite(suite)
    engine = ScriptedEngine(by_task(REPLIES))
    with pytest.raises(EvalError, match="tools: 'full' there, 'core' now"):
        anyio.run(lambda: evaluate(loaded, engine, out, config=EvalConfig(tools="core")))
    (suite / "answer" / "workspace" / "notes.txt").write_text("changed\n")
    with pytest.raises(EvalError, match="suite_digest"):
        anyio.run(lambda: evaluate(load_suite(suite), engine, out))
    assert engine.calls == []
    with ResultsDir(out / "second", {"suite_digest": "x"}) as _, pytest.raises(EvalError, match="another eval"):
        ResultsDir(out / "second", {"suite_digest": "x"})


def test_bad_result_lines_are_named(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    good = {"task": "a", "attempt": 1, "passed": True, "stop_reason": "completed"}
    for bad, why in (({**good, "passed": "yes"}, "`passed` must be bool"), ({**good, "attempt": 0}, "attempt >= 1"),
                     ({"task": "a"}, "`attempt` is missing"), ({**good, "cost": True}, "`cost` must be float | None"),
                     ({**good, "tags": [1]}, "list of strings")):
        path.write_text(json.dumps(good | {"attempt": 2}) + "\n" + json.dumps(bad) + "\n")
        with pytest.raises(EvalError, match=rf"results.jsonl:2: .*{why}"):
            read_results(path)
    path.write_text(json.dumps(good) + "\n" + json.dumps(good) + "\n")
    with pytest.raises(EvalError, match="a second result for a attempt 1"):
        read_results(path)


def test_attempts_run_concurrently_up_to_the_limit(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    replies = {}
    for i in range(6):
        write_task(suite, f"t{i}", f"Say {i}.", answer_has(str(i)))
        replies[f"Say {i}."] = [str(i)]
    running, most = 0, 0

    async def slow(task: str, turn: int) -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await anyio.sleep(0.2)
        running -= 1

    summary = run(suite, tmp_path / "out", ScriptedEngine(by_task(replies, slow)), concurrency=3)
    assert most == 3 and summary["passed"] == 6


def test_a_run_past_its_timeout_fails_with_timeout_and_its_session_is_kept(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    write_task(suite, "slow", "Wait.", "true", timeout=0.5)

    async def hang(task: str, turn: int) -> None:
        await anyio.sleep(60)

    summary = run(suite, tmp_path / "out", ScriptedEngine(by_task({"Wait.": ["never"]}, hang)))
    (r,), _ = read_results(tmp_path / "out" / "results.jsonl")
    assert (r.passed, r.stop_reason, r.check_exit, r.degraded) == (False, "timeout", None, True)
    assert r.error == "the run took more than 0.5 s"
    assert summary["timeouts"] == 1
    roles = [json.loads(x).get("message", {}).get("role") for x in (tmp_path / "out" / r.session).read_text().splitlines()]
    assert roles[-2:] == ["system", "user"]


def test_a_failing_setup_skips_the_run(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    write_task(suite, "s", "Go.", "true", setup="echo not ready; exit 3")
    engine = ScriptedEngine(["x"])
    summary = run(suite, tmp_path / "out", engine)
    (r,), _ = read_results(tmp_path / "out" / "results.jsonl")
    assert (r.passed, r.stop_reason, r.error, r.check_output, r.session) == (
        False, "setup_failed", "setup exited 3", "not ready\n", None)
    assert engine.calls == [] and summary["errors"] == 1


def test_an_error_of_one_attempt_is_its_result_and_the_others_go_on(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    write_task(suite, "a-long", "Too long.", "true")
    write_task(suite, "b-ok", "Say ok.", answer_has("ok"))

    async def fail(task: str, turn: int) -> None:
        if task == "Too long.":
            raise BadRequestError("the request is malformed", status_code=400)

    run(suite, tmp_path / "out", ScriptedEngine(by_task({"Too long.": ["x"], "Say ok.": ["ok"]}, fail)))
    results, _ = read_results(tmp_path / "out" / "results.jsonl")
    assert [(r.task, r.passed, r.stop_reason, r.error) for r in results] == [
        ("a-long", False, "error", "BadRequestError: the request is malformed"),
        ("b-ok", True, "completed", None)]


def test_a_run_that_no_longer_fits_its_window_is_its_own_stop_reason(tmp_path: Path) -> None:
    """Issue 41: an overflow nothing can shrink ends the run (context_overflow), not the attempt with an error."""
    suite = tmp_path / "suite"
    write_task(suite, "a-long", "Too long.", "false")

    async def fail(task: str, turn: int) -> None:
        raise ContextLengthExceededError("the prompt has 9000 tokens; the window is 4096", status_code=400)

    run(suite, tmp_path / "out", ScriptedEngine(by_task({"Too long.": ["x"]}, fail)))
    results, _ = read_results(tmp_path / "out" / "results.jsonl")
    assert [(r.task, r.passed, r.stop_reason, r.error) for r in results] == [("a-long", False, "context_overflow", None)]


def test_an_engine_that_cannot_be_reached_stops_the_eval_keeping_what_finished(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    for name in ("a", "b", "c"):
        write_task(suite, name, f"Task {name}.", "true")

    async def down(task: str, turn: int) -> None:
        if task == "Task b.":
            raise APIConnectionError("connection refused")

    with pytest.raises(APIConnectionError, match="connection refused"):
        run(suite, tmp_path / "out", ScriptedEngine(by_task({f"Task {n}.": ["done"] for n in "abc"}, down)))
    results, _ = read_results(tmp_path / "out" / "results.jsonl")
    assert [r.task for r in results] == ["a"]  # b is no result: the next run does it
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["attempts"] == 1


def test_an_interrupted_eval_keeps_its_lines_and_the_next_run_finishes(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    for name in ("a", "b"):
        write_task(suite, name, f"Task {name}.", "true")
    replies = {f"Task {n}.": ["done"] for n in "ab"}

    async def block_b(task: str, turn: int) -> None:
        if task == "Task b.":
            await anyio.sleep(60)

    loaded = load_suite(suite)
    out = tmp_path / "out"

    async def main() -> None:
        async with anyio.create_task_group() as group:
            def cancel(*_: Any) -> None:
                group.cancel_scope.cancel()  # Ctrl-C once task a is written; b is mid-run

            group.start_soon(lambda: evaluate(loaded, ScriptedEngine(by_task(replies, block_b)), out,
                                              concurrency=2, on_result=cancel))

    anyio.run(main)
    results, _ = read_results(out / "results.jsonl")
    assert [r.task for r in results] == ["a"]
    assert json.loads((out / "summary.json").read_text())["attempts"] == 1
    assert (out / "sessions" / "b" / "1.jsonl").exists()  # b's partial session
    run(suite, out, ScriptedEngine(by_task(replies)))
    results, _ = read_results(out / "results.jsonl")
    assert [r.task for r in results] == ["a", "b"]
    assert (out / "sessions" / "b" / "1.interrupted-1.jsonl").exists()  # kept aside, never overwritten
    assert results[1].passed


class UsageEngine(ScriptedEngine):
    """Reports (prompt, completion, cached) usage per call, as vLLM does."""

    def __init__(self, responses: Any, usage: tuple[int, int, int]) -> None:
        super().__init__(responses, model="local")
        self.usage = usage

    async def generate(self, prompt_ids: Sequence[int], request: ChatRequest, *, images: Sequence[Any] = ()) -> Any:
        async for chunk in super().generate(prompt_ids, request, images=images):
            if chunk.finish_reason is not None:
                p, c, cached = self.usage
                chunk = RawChunk(finish_reason=chunk.finish_reason, prompt_tokens=p, completion_tokens=c,
                                 cached_tokens=cached)
            yield chunk


def test_cost_cache_share_and_tool_call_validity_add_up(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    write_task(suite, "t", "Read it.", "true", {"a.txt": "x\n"})
    replies = {"Read it.": [calls(("read_file", {"path": "a.txt"}), ("read_file", {"limit": 3})), "done"]}
    price = Pricing(input=2.0, cached_input=0.5, output=10.0)
    summary = run(suite, tmp_path / "out", UsageEngine(by_task(replies), (1000, 100, 600)),
                  config=EvalConfig(pricing=price))
    (r,), _ = read_results(tmp_path / "out" / "results.jsonl")
    per_call = (400 * 2.0 + 600 * 0.5 + 100 * 10.0) / 1e6  # 0.0021
    assert r.cost == pytest.approx(2 * per_call) and summary["cost_per_pass"] == pytest.approx(2 * per_call)
    assert (r.prompt_tokens, r.cached_tokens, r.completion_tokens) == (2000, 1200, 200)
    assert summary["cached_share"] == pytest.approx(0.6)
    assert (r.tool_calls, r.valid_tool_calls, r.failed_calls) == (2, 1, 1)  # read_file without its path
    assert summary["tool_call_validity"] == 0.5


def test_max_turns_caps_the_tasks_budget(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    write_task(suite, "t", "Loop.", "true", {"a.txt": "x\n"}, budgets={"turns": 5})
    loop = calls(("read_file", {"path": "a.txt"}))
    engine = ScriptedEngine(by_task({"Loop.": [loop, loop, "summary"]}))
    run(suite, tmp_path / "out", engine, config=EvalConfig(max_turns=2))
    (r,), _ = read_results(tmp_path / "out" / "results.jsonl")
    assert (r.stop_reason, r.turns, r.passed) == ("turn_budget", 3, True)


def test_a_repo_task_works_on_a_checkout_of_its_commit(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    repo = suite / "_repos" / "calc"
    repo.mkdir(parents=True)

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout

    git("init", "-q")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "T")
    (repo / "version.txt").write_text("v1\n")
    git("add", "-A")
    git("commit", "-qm", "one")
    first = git("rev-parse", "HEAD").strip()
    (repo / "version.txt").write_text("v2\n")
    git("commit", "-qam", "two")
    write_task(suite, "pinned", "Which version?", 'test "$(cat version.txt)" = v1 && git rev-parse HEAD',
               repo="../_repos/calc", commit=first)
    before = tree_hash(suite)
    run(suite, tmp_path / "out", ScriptedEngine(["v1"]))
    (r,), _ = read_results(tmp_path / "out" / "results.jsonl")
    assert r.passed and r.check_output.strip() == first
    assert tree_hash(suite) == before  # the source repository was only read


def test_a_tasks_cost_budget_ends_its_run_and_the_check_still_scores_it(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    write_task(suite, "t", "Read it.", "true", {"a.txt": "x\n"}, budgets={"usd": 0.001})
    loop = calls(("read_file", {"path": "a.txt"}))
    price = Pricing(input=2.0, cached_input=0.5, output=10.0)  # 0.0021 a call: over budget after one
    summary = run(suite, tmp_path / "out", UsageEngine(by_task({"Read it.": [loop, "what I found"]}), (1000, 100, 600)),
                  config=EvalConfig(pricing=price))
    (r,), _ = read_results(tmp_path / "out" / "results.jsonl")
    assert (r.stop_reason, r.turns, r.passed, r.degraded) == ("cost_budget", 2, True, True)
    assert r.cost == pytest.approx(0.0042) and summary["stop_reasons"] == {"cost_budget": 1}


def test_a_run_the_loop_breaker_ended_is_counted(tmp_path: Path) -> None:
    """Issue 41: loop_detected is an attempt's stop reason and the summary's ``loops`` count."""
    suite = tmp_path / "suite"
    write_task(suite, "a-loop", "Loop.", "false")
    write_task(suite, "b-ok", "Say ok.", answer_has("ok"))
    again = calls(("read_file", {"path": "a.txt"}))
    summary = run(suite, tmp_path / "out", ScriptedEngine(by_task({"Loop.": [again] * 12, "Say ok.": ["ok"]})))
    results, _ = read_results(tmp_path / "out" / "results.jsonl")
    assert [(r.task, r.stop_reason, r.turns) for r in results] == [("a-loop", "loop_detected", 8),
                                                                   ("b-ok", "completed", 1)]
    assert summary["loops"] == 1 and summary["per_task"]["a-loop"]["loops"] == 1
    assert summary["stop_reasons"] == {"completed": 1, "loop_detected": 1}
    assert "| loops detected | 1 |" in (tmp_path / "out" / "report.md").read_text()
