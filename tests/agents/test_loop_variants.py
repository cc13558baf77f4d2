"""The loop breaker against shapes its own tests do not make (issue 41, deliverable 1, tried
point by point): one call written many ways, loops of parallel calls, of failing calls, of
unknown tools; a cycle whose one member's result changes (never a loop); a sub-agent's cycle
through the harness's ``task`` tool."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kimik3 import Agent, ScriptedEngine, tool
from kimik3.agents import Budgets
from kimik3.agents._loops import LoopBreaker, call_key
from kimik3.formats.k3 import render_output
from kimik3.harness import FEATURES, SUBAGENT_INSTRUCTIONS, CodingHarness
from kimik3.tools import ToolResult
from kimik3.tools.failures import default_failure_text
from kimik3.types import FunctionCall, Message, ToolCall, ToolMessage

from .test_loops import grep, read, reads, results, script, turns_of


def raw(name: str, arguments: str, i: int = 0) -> ToolCall:
    return ToolCall(id=str(i), function=FunctionCall(name=name, arguments=arguments))


def verdicts(calls: list[ToolCall], result: str = "same") -> list[str]:
    """Each call in a turn of its own through one breaker: run, block or stop."""
    breaker = LoopBreaker(Budgets())
    out = []
    for c in calls:
        steps, _, stop = breaker.screen([c], default_failure_text)
        (step,) = steps
        out.append("stop" if stop is not None else step[1])
        if step[1] == "run":
            breaker.answered(step, ToolResult(content=result))
    return out


ESCALATION = ["run"] * 4 + ["block"] * 3 + ["stop"]


def test_one_call_written_eight_ways_is_one_loop() -> None:
    """Key order, spacing, newlines, a \\u escape, nested key order: the same call."""
    forms = ['{"path": "a.py", "opts": {"x": 1, "y": 2}}', '{"opts":{"y":2,"x":1},"path":"a.py"}',
             ' {\n  "path" : "a.py",\n  "opts" : {"x":1,"y":2}\n}\n', '{"path":"\\u0061.py","opts":{"x":1,"y":2}}',
             '{"opts": {"x": 1, "y": 2}, "path": "a.py"}', '{"path":"a.py","opts":{"x":1,"y":2}}\t',
             '{"opts":{"x":1, "y":2},   "path":"a.py"}', '{"path": "a.py", "opts": {"y": 2, "x": 1}}']
    assert len({call_key(raw("read", f)) for f in forms}) == 1
    assert verdicts([raw("read", f, i) for i, f in enumerate(forms)]) == ESCALATION


def test_a_call_without_arguments_is_one_call_however_it_is_sent() -> None:
    """A chat server sends no arguments as "", "{}" or spaces (the tool reads all as {}):
    before, "" and "{}" were two calls, so alternating them hid the loop as a 2-cycle."""
    forms = ["", "{}", "  ", "{ }", "", "{}", "\n", "{}"]
    assert {call_key(raw("ls", f)) for f in forms} == {"ls {}"}
    assert verdicts([raw("ls", f, i) for i, f in enumerate(forms)]) == ESCALATION


def test_other_arguments_or_names_are_other_calls() -> None:
    assert call_key(raw("read", '{"path":"a.py"}')) != call_key(raw("read", '{"path":"b.py"}'))
    assert call_key(raw("read", '{"offset":0}')) != call_key(raw("read", '{"offset":1}'))
    assert call_key(raw("read", "{}")) != call_key(raw("grep", "{}"))
    assert verdicts([raw("read", f'{{"offset":{10 * i}}}', i) for i in range(8)]) == ["run"] * 8


async def test_the_same_pair_of_parallel_calls_every_turn_ends_the_run() -> None:
    """Two different calls made together, turn after turn: a 2-cycle, ended at its 8th round."""
    reads.clear()
    pair = [("read", {"path": "a.py"}), ("grep", {"pattern": "x"})]
    engine = ScriptedEngine(turns_of([pair] * 20))
    result = await Agent(tools=[read, grep], engine=engine, max_turns=30).run("go")
    assert (result.stop_reason, result.turns, len(reads)) == ("loop_detected", 8, 5)
    texts = results(result.messages)
    # the 5th turn's grep was screened while its read had no result yet: it ran, and its note
    # says truthfully when calls stop running (before: "Made 5 times in a row, it will not be run")
    assert [t.startswith("Error: the call was not run") for t in texts] == [False] * 10 + [True] * 6
    assert texts[9].startswith('[Note: you made the cycle read {"path":"a.py"} -> grep {"pattern":"x"} (5 times in a '
                               "row, with the same results). You already have this result: do not call it again; use "
                               "it, try something different, or answer. Made 6 times in a row, it will not be run.]")
    assert texts[-1].endswith("the run ends now (loop detected)") and not texts[-2].endswith("(loop detected)")


@tool
def sleep(seconds: int) -> str:
    """Wait.

    Args:
        seconds: how long.
    """
    return "slept"


lines = [0]


@tool
def read_output(job: str) -> str:
    """A job's output so far.

    Args:
        job: the job id.
    """
    lines[0] += 1
    return f"line {lines[0]}"


async def test_a_wait_and_poll_cycle_whose_output_changes_never_trips() -> None:
    """sleep (same result each time) and read_output (new each time), 30 rounds: no loop."""
    lines[0] = 0
    cycle = [("sleep", {"seconds": 5}), ("read_output", {"job": "j1"})]
    engine = ScriptedEngine(script(cycle * 30))
    result = await Agent(tools=[sleep, read_output], engine=engine, max_turns=70).run("Wait for j1")
    assert (result.stop_reason, result.output, result.issues, result.failed_calls) == ("completed", "Done.", [], 0)
    assert lines[0] == 30 and not any(t.startswith("[Note") for t in results(result.messages))


async def test_the_same_call_polled_in_parallel_with_changing_output_never_trips() -> None:
    lines[0] = 0
    engine = ScriptedEngine(turns_of([[("read_output", {"job": "j1"})] * 3] * 12))
    result = await Agent(tools=[read_output], engine=engine, max_turns=30).run("Wait for j1")
    assert (result.stop_reason, result.issues) == ("completed", [])
    assert lines[0] == 36


async def test_a_loop_of_calls_to_an_unknown_tool_ends_the_run() -> None:
    """kimi-cli #2628's model keeps calling a tool it does not have: the same error each time."""
    engine = ScriptedEngine(script([("Write", {"path": "a.py", "content": "x"})] * 20))
    result = await Agent(tools=[read], engine=engine, max_turns=30).run("go")
    assert (result.stop_reason, result.turns) == ("loop_detected", 8)
    texts = results(result.messages)
    assert texts[0].startswith("Error: unknown tool 'Write'")
    assert texts[4].startswith('Error: the call was not run: you repeated Write {"content":"x","path":"a.py"} (5 times')


async def test_a_loop_of_calls_with_invalid_arguments_ends_the_run() -> None:
    reads.clear()
    engine = ScriptedEngine(script([("read", {"path": 3, "offset": "x"})] * 20))
    result = await Agent(tools=[read], engine=engine, max_turns=30).run("go")
    assert (result.stop_reason, result.turns, reads) == ("loop_detected", 8, [])
    assert results(result.messages)[0].startswith("Error: ")


def child_calls(*items: tuple[str, dict[str, Any]]) -> str:
    return render_output({"reasoning_content": "again", "tool_calls": [
        {"id": f"c{i}", "function": {"name": n, "arguments": a}} for i, (n, a) in enumerate(items)]})


async def test_a_sub_agents_two_call_cycle_ends_only_the_sub_agent(tmp_path: Path) -> None:
    """Through the harness's ``task`` tool: the child cycles read a / read b; it ends with
    loop_detected after 16 turns, the parent reads why, and its own run goes on to answer."""
    (tmp_path / "a.txt").write_text("A\n")
    (tmp_path / "b.txt").write_text("B\n")
    turn = [0]

    def reply(messages: list[Message]) -> str:
        if messages[0].content == SUBAGENT_INSTRUCTIONS:
            turn[0] += 1
            return child_calls(("read_file", {"path": "a.txt" if turn[0] % 2 else "b.txt"}))
        if not any(isinstance(m, ToolMessage) for m in messages):
            return child_calls(("task", {"description": "read", "prompt": "Read a.txt and b.txt"}))
        return render_output({"reasoning_content": "ok", "content": "the child looped"})

    agent = CodingHarness(tmp_path, features=FEATURES - {"background", "checkpoints"}).agent(
        engine=ScriptedEngine(reply))
    result = await agent.run("read both")
    assert (result.stop_reason, result.output, result.issues) == ("completed", "the child looped", [])
    (child,) = results(result.messages)
    assert child.split("\n")[1].startswith("[the sub-agent stopped early: loop_detected]")
    assert "[sub-agent: 16 turns, " in child and turn[0] == 16


async def test_the_same_task_whose_sub_agent_answers_the_same_each_time_is_a_loop(tmp_path: Path) -> None:
    """The costliest loop: the parent gives the same ``task`` again and again, each one a whole
    sub-agent run answering the same. Before: the child's token counts in the result
    ("[sub-agent: 1 turns, P prompt + C completion tokens]") differed with its reasoning's
    length, so no two results were equal and the loop ran to the turn budget."""
    runs = [0]

    def reply(messages: list[Message]) -> str:
        if messages[0].content == SUBAGENT_INSTRUCTIONS:
            runs[0] += 1
            return render_output({"reasoning_content": "let me see " * runs[0], "content": "a.txt says A"})
        return child_calls(("task", {"description": "check", "prompt": "What does a.txt say?"}))

    agent = CodingHarness(tmp_path, features=FEATURES - {"background", "checkpoints"}).agent(
        engine=ScriptedEngine(reply), budgets=Budgets(turns=30))
    result = await agent.run("check a")
    assert (result.stop_reason, result.turns, runs[0]) == ("loop_detected", 8, 4)
    texts = results(result.messages)
    assert texts[0].startswith("a.txt says A\n[sub-agent: 1 turns, ") and texts[0] != texts[1]  # the counts differ
    assert texts[2].startswith('[Note: you made task {"description":"check","prompt":"What does a.txt say?"} (3 times')


async def test_the_same_batch_in_another_order_each_turn_is_a_loop() -> None:
    """Attacker (x41): [read, grep] then [grep, read], turn after turn, same results. Before: the
    steps read,grep,grep,read made a 4-cycle (loop_cycle 3 looks for 3 at most): 21 turns, completed.
    Calls made together are checked in the order they were first made: a 2-cycle, ended at 8."""
    reads.clear()
    a, b = ("read", {"path": "a.py"}), ("grep", {"pattern": "x"})
    engine = ScriptedEngine(turns_of([[a, b], [b, a]] * 10))
    result = await Agent(tools=[read, grep], engine=engine, max_turns=30).run("go")
    assert (result.stop_reason, result.turns, len(reads)) == ("loop_detected", 8, 5)
    assert result.issues[-1].startswith('turn 8: loop detected: the model repeated the cycle read {"path":"a.py"} -> '
                                        'grep {"pattern":"x"} (8 times in a row')


async def test_three_calls_together_rotated_each_turn_is_a_loop() -> None:
    """Three calls in a rotating order every turn (abc, bca, cab, acb): before, 40 turns to the
    budget; now the 3-cycle they make is ended at its 8th round."""
    a, b, c = ("read", {"path": "a.py"}), ("grep", {"pattern": "x"}), ("read", {"path": "b.py"})
    engine = ScriptedEngine(turns_of([[a, b, c], [b, c, a], [c, a, b], [a, c, b]] * 10))
    result = await Agent(tools=[read, grep], engine=engine, max_turns=40).run("go")
    assert (result.stop_reason, result.turns) == ("loop_detected", 8)


def test_a_cycle_of_one_file_written_three_ways_is_a_three_call_cycle() -> None:
    """``a.py``, ``./a.py``, ``a.py`` with offset 0: three calls to the breaker (it does not know
    what a tool's arguments mean: ``./x`` and ``x`` may differ to a tool), but repeated in a row
    they are a 3-cycle with the same results, blocked and stopped as one."""
    forms = ['{"path":"a.py"}', '{"path":"./a.py"}', '{"path":"a.py","offset":0}']
    assert len({call_key(raw("read", f)) for f in forms}) == 3
    got = verdicts([raw("read", forms[i % 3], i) for i in range(24)])
    assert got == ["run"] * 14 + ["block"] * 9 + ["stop"]


def test_a_blocked_call_sent_again_with_a_new_id_is_still_the_loop() -> None:
    assert verdicts([raw("read", '{"path":"a.py"}', 100 + 7 * i) for i in range(8)]) == ESCALATION


def test_a_test_runners_own_run_time_is_volatile() -> None:
    """Attacker (x41): ``bash pytest`` prints its own time ("1 passed in 0.03s"), besides the
    trailer's: before, each run's result was new, so re-running unchanged tests never tripped."""
    from kimik3.agents._loops import steady

    assert steady("== 1 passed in 0.03s ==\n[exit code: 0, 0.31 s]") \
        == steady("== 1 passed in 1.20s ==\n[exit code: 0, 1.5 s]") == "== 1 passed in <seconds> ==\n[exit code: 0]"
    assert steady("Ran 1 test in 0.001s\n\nOK") == "Ran 1 test in <seconds>\n\nOK"
    assert steady("[bg1: running for 5 s]") == "[bg1: running for 5 s]"
    breaker, got = LoopBreaker(Budgets()), []
    for i in range(8):
        steps, _, stop = breaker.screen([raw("bash", '{"command":"pytest"}', i)], default_failure_text)
        got.append("stop" if stop is not None else steps[0][1])
        if steps[0][1] == "run":
            breaker.answered(steps[0], ToolResult(content=f"== 1 failed in 0.{i}1s ==\n[exit code: 1, 0.{i} s]"))
    assert got == ESCALATION
