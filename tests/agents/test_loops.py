"""The loop breaker (issue 41, deliverable 1): the same call, or the same short cycle of calls,
repeated with the same results is told, then not run, then ends the run with
``stop_reason="loop_detected"``; calls that differ (paging) or results that change (polling) never
trip it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kimik3 import Agent, ScriptedEngine, UserError, tool
from kimik3.agents import Budgets, ToolResultEvent
from kimik3.agents._loops import LoopBreaker, call_key
from kimik3.formats.k3 import render_output
from kimik3.types import FunctionCall, Message, ToolCall, ToolMessage


def call(name: str, **arguments: Any) -> str:
    return render_output({"reasoning_content": "Again.", "tool_calls": [
        {"id": f"{name}:0", "type": "function", "function": {"name": name, "arguments": arguments}}]})


def script(calls: list[tuple[str, dict[str, Any]]], then: str = "Done.") -> Callable[[list[Message]], str]:
    """Each model turn makes the next call of ``calls``; then answers ``then``."""
    left = list(calls)

    def reply(messages: list[Message]) -> str:
        if not left:
            return then
        name, arguments = left.pop(0)
        return call(name, **arguments)

    return reply


reads: list[tuple[str, int]] = []


@tool
def read(path: str, offset: int = 0) -> str:
    """Read 10 lines of a file.

    Args:
        path: the file.
        offset: the first line.
    """
    reads.append((path, offset))
    return f"{path}: lines {offset} to {offset + 9}"


@tool
def grep(pattern: str) -> str:
    """Search.

    Args:
        pattern: a regular expression.
    """
    return f"3 matches of {pattern}"


@tool
def ls() -> str:
    """List the workspace."""
    return "a.py b.py"


polls = [0]


@tool
def read_output(job: str) -> str:
    """A background job's output so far.

    Args:
        job: the job id.
    """
    polls[0] += 1
    return f"line {polls[0]}"


def results(messages: list[Message]) -> list[str]:
    return [str(m.content) for m in messages if isinstance(m, ToolMessage)]


READ = "read {\"path\":\"a.py\"}"


async def test_one_identical_call_is_told_then_blocked_then_ends_the_run(tmp_path: Path) -> None:
    """Before: 60 of 60 turns ran the same call. Defaults: told at 3, not run from 5, ended at 8."""
    reads.clear()
    engine = ScriptedEngine(script([("read", {"path": "a.py"})] * 60))
    session = tmp_path / "s.jsonl"
    result = await Agent(tools=[read], engine=engine, max_turns=60).run("Fix a.py", session=session)
    assert result.stop_reason == "loop_detected" and result.output is None
    assert result.turns == 8 and len(reads) == 4  # calls 5..8 were not run
    texts = results(result.messages)
    assert texts[0] == texts[1] == "a.py: lines 0 to 9"
    note = f"[Note: you made {READ} (3 times in a row, with the same results). You already have this result: "
    assert texts[2] == note + ("do not call it again; use it, try something different, or answer. Made 5 times in "
                               "a row, it will not be run.]\na.py: lines 0 to 9")
    assert texts[3].startswith(f"[Note: you made {READ} (4 times in a row")
    assert texts[4] == (f"Error: the call was not run: you repeated {READ} (5 times in a row, with the same results); "
                        "its result is already in the conversation above; do something else: use the results you "
                        "have, change the arguments, or answer")
    assert texts[7] == (f"Error: the call was not run: you repeated {READ} (8 times in a row, with the same results); "
                        "its result is already in the conversation above; the run ends now (loop detected)")
    assert result.issues[-1] == f"turn 8: loop detected: the model repeated {READ} (8 times in a row, with the " \
                                "same results); the run ended"
    assert result.failed_calls == 4
    # the session says why the run ended
    ends = [json.loads(line)["run_end"] for line in session.read_text().splitlines() if '"run_end"' in line]
    assert [e["stop_reason"] for e in ends] == ["loop_detected"]


async def test_key_order_and_spacing_do_not_hide_a_repeat() -> None:
    a = ToolCall(id="1", function=FunctionCall(name="read", arguments='{"path": "a.py", "offset": 0}'))
    b = ToolCall(id="2", function=FunctionCall(name="read", arguments='{"offset":0,"path":"a.py"}'))
    assert call_key(a) == call_key(b) == 'read {"offset":0,"path":"a.py"}'


async def test_a_two_call_cycle_ends_the_run() -> None:
    engine = ScriptedEngine(script([("read", {"path": "a.py"}), ("grep", {"pattern": "x"})] * 30))
    events = [e async for e in Agent(tools=[read, grep], engine=engine, max_turns=60).run_stream("go")]
    result = events[-1].result  # type: ignore[union-attr]
    assert result.stop_reason == "loop_detected"
    assert result.turns == 16  # 8 rounds of 2 calls
    shown = "the cycle read {\"path\":\"a.py\"} -> grep {\"pattern\":\"x\"}"
    texts = results(result.messages)
    assert texts[5].startswith(f"[Note: you made {shown} (3 times in a row")
    assert not texts[4].startswith("[Note")  # 2.5 rounds: not yet
    assert texts[9] == (f"Error: the call was not run: you repeated {shown} (5 times in a row, with the same "
                        "results); its result is already in the conversation above; do something else: use the "
                        "results you have, change the arguments, or answer")
    ran = [e for e in events if isinstance(e, ToolResultEvent) and not e.result.is_error]
    assert len(ran) == 9


async def test_a_three_call_cycle_ends_the_run() -> None:
    cycle = [("ls", {}), ("read", {"path": "a.py"}), ("grep", {"pattern": "x"})]
    engine = ScriptedEngine(script(cycle * 20))
    result = await Agent(tools=[read, grep, ls], engine=engine, max_turns=60).run("go")
    assert (result.stop_reason, result.turns) == ("loop_detected", 24)
    assert "the cycle ls {} -> read {\"path\":\"a.py\"} -> grep {\"pattern\":\"x\"} (8 times" \
        in result.issues[-1]


async def test_a_four_call_cycle_is_found_when_loop_cycle_allows_it() -> None:
    cycle = [("ls", {}), ("read", {"path": "a.py"}), ("grep", {"pattern": "x"}), ("read", {"path": "b.py"})]
    engine = ScriptedEngine(script(cycle * 12))
    result = await Agent(tools=[read, grep, ls], engine=engine, max_turns=48).run("go")
    assert result.stop_reason == "turn_budget"  # 4 > loop_cycle 3: not looked for
    engine = ScriptedEngine(script(cycle * 12))
    budgets = Budgets(turns=48, loop_cycle=4, loop_warn=2, loop_block=3, loop_stop=4)
    result = await Agent(tools=[read, grep, ls], engine=engine, budgets=budgets).run("go")
    assert (result.stop_reason, result.turns) == ("loop_detected", 16)


async def test_paging_through_a_file_never_trips() -> None:
    reads.clear()
    pages = [("read", {"path": "big.py", "offset": 10 * i}) for i in range(40)]
    result = await Agent(tools=[read], engine=ScriptedEngine(script(pages)), max_turns=60).run("Read big.py")
    assert (result.stop_reason, result.output, result.issues) == ("completed", "Done.", [])
    assert len(reads) == 40 and not any("[Note" in t for t in results(result.messages))


async def test_polling_output_that_changes_never_trips() -> None:
    polls[0] = 0
    same = [("read_output", {"job": "j1"})] * 40
    result = await Agent(tools=[read_output], engine=ScriptedEngine(script(same)), max_turns=60).run("Wait for j1")
    assert (result.stop_reason, result.issues) == ("completed", [])
    assert results(result.messages)[-1] == "line 40"


async def test_a_loop_that_stops_before_the_block_goes_on() -> None:
    """Told, then the model did something else: the run goes on, and the count starts again."""
    calls = [("read", {"path": "a.py"})] * 4 + [("grep", {"pattern": "x"})] + [("read", {"path": "a.py"})] * 4
    result = await Agent(tools=[read, grep], engine=ScriptedEngine(script(calls)), max_turns=60).run("go")
    assert (result.stop_reason, result.output, result.failed_calls) == ("completed", "Done.", 0)
    texts = results(result.messages)
    assert texts[5] == texts[6] == "a.py: lines 0 to 9"  # after grep: 2 rounds only
    assert texts[7].startswith("[Note: you made read")


async def test_a_sub_agent_loop_ends_the_sub_agent_and_the_parent_gets_its_result() -> None:
    child = Agent(tools=[read], engine=ScriptedEngine(script([("read", {"path": "a.py"})] * 30)), max_turns=30)

    @tool
    async def delegate(task: str) -> str:
        """Delegate a task.

        Args:
            task: what to do.
        """
        r = await child.run(task)
        return f"sub-agent stopped: {r.stop_reason}"

    parent = Agent(tools=[delegate], engine=ScriptedEngine(script([("delegate", {"task": "fix a.py"})], "ok")))
    result = await parent.run("go")
    assert (result.stop_reason, result.output) == ("completed", "ok")
    assert results(result.messages) == ["sub-agent stopped: loop_detected"]


def test_budgets_loop_thresholds_are_checked() -> None:
    with pytest.raises(UserError, match=r"Budgets.loop_block must be an integer >= 3 or None, got 2"):
        Budgets(loop_warn=3, loop_block=2)
    with pytest.raises(UserError, match=r"Budgets.loop_warn must be an integer >= 2 or None, got 1"):
        Budgets(loop_warn=1)
    b = Budgets()
    assert (b.loop_warn, b.loop_block, b.loop_stop, b.loop_cycle) == (3, 5, 8, 3)


def test_the_breaker_forgets_old_steps() -> None:
    breaker = LoopBreaker(Budgets())
    from kimik3.tools import ToolResult

    for i in range(500):
        index, verdict, _ = breaker.check(ToolCall(id=str(i), function=FunctionCall(name="read", arguments=f'{{"o":{i}}}')))
        assert verdict == "run"
        breaker.settle(index, ToolResult(content=str(i)))
        breaker.trim()
    assert len(breaker.steps) <= 2 * (2 * 8 * 3 + 2)


timings = iter([])


@tool
def bash(command: str) -> str:
    """Run a command (its trailer says how long it took, as tools/coding/_bash.py's does).

    Args:
        command: the command.
    """
    return f"1 passed\n[exit code: 1, {next(timings):.2f} s]"


async def test_a_bash_loop_whose_run_time_changes_is_still_a_loop() -> None:
    """Before: ``bash pytest`` x10 completed, each run's seconds made its result new. The trailer's
    run time is not compared: told at 3, not run from 5, ended at the 8th."""
    global timings
    timings = iter([0.41, 0.39, 0.52, 0.4, 1.07, 0.38, 0.4, 0.44, 0.5, 0.6])
    engine = ScriptedEngine(script([("bash", {"command": "pytest"})] * 10))
    result = await Agent(tools=[bash], engine=engine, max_turns=30).run("Fix the tests")
    assert (result.stop_reason, result.turns) == ("loop_detected", 8)
    texts = results(result.messages)
    assert texts[1] == "1 passed\n[exit code: 1, 0.39 s]"  # the model still sees the real time
    assert texts[2].startswith('[Note: you made bash {"command":"pytest"} (3 times in a row')
    assert texts[2].endswith("1 passed\n[exit code: 1, 0.52 s]")
    assert texts[7].endswith("the run ends now (loop detected)")


async def test_the_attackers_cat_loop_through_the_real_bash_tool_ends(tmp_path: Path) -> None:
    """The attacker's input: the coding tools' ``bash`` running ``cat a.py`` ten times."""
    from kimik3.tools.coding import coding_tools

    (tmp_path / "a.py").write_text("x=1\n")
    engine = ScriptedEngine(script([("bash", {"command": "cat a.py"})] * 10))
    result = await Agent(tools=coding_tools(tmp_path), engine=engine, max_turns=30).run("go")
    assert (result.stop_reason, result.turns) == ("loop_detected", 8)
    assert results(result.messages)[0].startswith("x=1\n[exit code: 0, ")


def test_volatile_text_is_made_steady_but_a_jobs_age_is_not() -> None:
    """The variant: clock readings in a result (a log line's date-time, a test runner's clock) do
    not make two results differ; a background job's age and other numbers do."""
    from kimik3.agents._loops import steady

    assert steady("ok\n[exit code: 0, 12.50 s]") == steady("ok\n[exit code: 0, 0.01 s]") == "ok\n[exit code: 0]"
    assert steady("[exit code: 2, 1.00 s]") != steady("[exit code: 0, 1.00 s]")
    assert steady("2026-12-02T04:07:27.123Z build ok") == steady("2026-12-02 04:09:01,5 build ok") \
        == "<date-time> build ok"
    assert steady("done at 12:03:04.512") == steady("done at 9:00:00") == "done at <time>"
    assert steady("[bg1: running for 5 s]") == "[bg1: running for 5 s]"
    assert steady("version 1.2.3, 10:20, 1:2:3") == "version 1.2.3, 10:20, 1:2:3"
    # code with colons and no clock is not searched (issue 44); a clock in code still is
    assert steady("def f(x):\n    return {'a': 1}") == "def f(x):\n    return {'a': 1}"
    assert steady("def f(x):  # at 07:08:09") == "def f(x):  # at <time>"


@tool
def log() -> str:
    """The server's last log line (stamped with the time it is read)."""
    global stamp
    stamp += 7
    return f"2026-12-02T04:{stamp // 60 % 60:02d}:{stamp % 60:02d}Z server waiting for requests"


stamp = 0


async def test_a_loop_on_a_time_stamped_result_ends() -> None:
    engine = ScriptedEngine(script([("log", {})] * 10))
    result = await Agent(tools=[log], engine=engine, max_turns=30).run("go")
    assert (result.stop_reason, result.turns) == ("loop_detected", 8)


def turns_of(calls: list[list[tuple[str, dict[str, Any]]]], then: str = "Done.") -> Callable[[list[Message]], str]:
    """Each model turn makes the next list of calls together (parallel); then answers ``then``."""
    left = list(calls)

    def reply(messages: list[Message]) -> str:
        if not left:
            return then
        return render_output({"reasoning_content": "All at once.", "tool_calls": [
            {"id": f"{name}:{i}", "type": "function", "function": {"name": name, "arguments": arguments}}
            for i, (name, arguments) in enumerate(left.pop(0))]})

    return reply


async def test_identical_calls_in_one_turn_are_blocked_before_the_run_is_stopped() -> None:
    """The attacker's input: 4 identical reads together, twice. Before: the 8th ended the run in the
    same turn as the first blocks, so the model never saw one. Now the stop needs a warning shown
    in an earlier turn: the second turn's calls 5..8 are blocked; the model answers after."""
    reads.clear()
    engine = ScriptedEngine(turns_of([[("read", {"path": "a.py"})] * 4] * 2))
    result = await Agent(tools=[read], engine=engine, max_turns=30).run("go")
    assert (result.stop_reason, result.output, len(reads)) == ("completed", "Done.", 4)
    texts = results(result.messages)
    assert [t.startswith("Error: the call was not run") for t in texts] == [False] * 4 + [True] * 4
    assert not any("run ends now" in t for t in texts)


async def test_a_stop_follows_a_block_the_model_was_shown() -> None:
    """The variant: 8 identical reads together, three times: the first turn's run (none had a
    result yet), the second turn's are blocked (past loop_stop, but no block was shown yet), the
    third turn's stop the run."""
    reads.clear()
    engine = ScriptedEngine(turns_of([[("read", {"path": "a.py"})] * 8] * 3))
    result = await Agent(tools=[read], engine=engine, max_turns=30).run("go")
    assert (result.stop_reason, result.turns, len(reads)) == ("loop_detected", 3, 8)
    texts = results(result.messages)
    assert [t.startswith("Error: the call was not run") for t in texts] == [False] * 8 + [True] * 16
    assert not any("run ends now" in t for t in texts[:16])
    assert all(t.endswith("the run ends now (loop detected)") for t in texts[16:])


async def test_budgets_none_switches_each_stage_off() -> None:
    reads.clear()
    engine = ScriptedEngine(script([("read", {"path": "a.py"})] * 20))
    off = Budgets(turns=30, loop_warn=None, loop_block=None, loop_stop=None)
    result = await Agent(tools=[read], engine=engine, budgets=off).run("go")
    assert (result.stop_reason, len(reads), result.issues) == ("completed", 20, [])
    assert set(results(result.messages)) == {"a.py: lines 0 to 9"}
    reads.clear()
    engine = ScriptedEngine(script([("read", {"path": "a.py"})] * 20))
    warn_only = Budgets(turns=30, loop_block=None, loop_stop=None)
    result = await Agent(tools=[read], engine=engine, budgets=warn_only).run("go")
    assert (result.stop_reason, len(reads)) == ("completed", 20)
    assert results(result.messages)[2] == (f"[Note: you made {READ} (3 times in a row, with the same results). You "
                                            "already have this result: do not call it again; use it, try something "
                                            "different, or answer.]\na.py: lines 0 to 9")
    reads.clear()
    engine = ScriptedEngine(script([("read", {"path": "a.py"})] * 20))
    no_block = Budgets(turns=30, loop_block=None, loop_stop=6)
    result = await Agent(tools=[read], engine=engine, budgets=no_block).run("go")
    assert (result.stop_reason, result.turns, len(reads)) == ("loop_detected", 6, 5)


def test_budgets_refuse_a_stop_without_any_warning() -> None:
    with pytest.raises(UserError, match=r"Budgets.loop_stop needs loop_warn or loop_block"):
        Budgets(loop_warn=None, loop_block=None)
    same = Budgets(loop_warn=4, loop_block=4, loop_stop=4)  # the block's error is the warning
    assert (same.loop_warn, same.loop_block, same.loop_stop) == (4, 4, 4)
