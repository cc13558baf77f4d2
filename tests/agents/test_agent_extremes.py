"""Extreme inputs in the Agent loop: JSON beyond the limits, odd approvals, KeyboardInterrupt,
compaction that cannot get under its threshold."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from kimik3 import Agent, Allow, AssistantMessage, ContextPolicy, Edit, ScriptedEngine, UserMessage, tool
from kimik3.agents import CompactionEvent, FinalEvent, PendingCall, load_session
from kimik3.formats.k3 import render
from kimik3.types import Message
from tests.agents.test_agent import add, answer, calls, echo, tool_messages


def call_text(name: str, body: str) -> str:
    """Raw K3 output with one call whose arguments are ``body`` (already K3-tagged)."""
    return (f'plan<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|>'
            f'<|open|>call tool="{name}" index="1"<|sep|>{body}<|close|>call<|sep|><|close|>tools<|sep|>'
            f"<|close|>message<|sep|>")


def number_arg(key: str, raw: str) -> str:
    return f'<|open|>argument key="{key}" type="number"<|sep|>{raw}<|close|>argument<|sep|>'


def json_block(raw: str) -> str:
    return f'<|open|>json type="object"<|sep|>{raw}<|close|>json<|sep|>'


DEEP_972 = "[" * 972 + "]" * 972
EXTREMES = [
    (number_arg("a", "1e999") + number_arg("b", "1"),
     "argument 'a': the number 1e999 is out of range (it would be inf)", '{"a": "1e999", "b": 1}'),
    (number_arg("a", "-1e400") + number_arg("b", "1"),
     "argument 'a': the number -1e400 is out of range (it would be -inf)", '{"a": "-1e400", "b": 1}'),
    (number_arg("a", "7" * 5000) + number_arg("b", "1"),
     "argument 'a': an integer has more than 640 digits (77777777777777777777...)", '{"a": "' + "7" * 5000 + '", "b": 1}'),
    (number_arg("a", "1") + f'<|open|>argument key="b" type="array"<|sep|>{DEEP_972}<|close|>argument<|sep|>',
     "argument 'b': nested deeper than 128 arrays/objects", '{"a": 1, "b": "' + DEEP_972 + '"}'),
    (json_block('{"a": 1, "b": ' + "[" * 1000 + "]" * 1000 + "}"),
     "its json arguments block: nested deeper than 128 arrays/objects", "{}"),
]


@pytest.mark.parametrize(("body", "reason", "arguments_json"), EXTREMES)
async def test_arguments_beyond_the_json_limits_are_a_failed_call_with_the_reason(
    tmp_path: Path, body: str, reason: str, arguments_json: str
) -> None:
    path = tmp_path / "s.jsonl"
    engine = ScriptedEngine([call_text("add", body), answer("gave up")])
    r = await Agent(tools=[add], engine=engine, instructions="sys").run("x", session=path)
    assert r.output == "gave up" and r.stop_reason == "completed"
    (result,) = tool_messages(r.messages)
    assert result.content == f"Error: the call was not run: {reason}"
    call = r.messages[2]
    assert isinstance(call, AssistantMessage) and call.tool_calls is not None
    assert call.tool_calls[0].function.arguments == arguments_json  # valid JSON, no Infinity
    # the next turn's prompt rendered that history, and so does every resume of the session
    assert "Error: the call was not run" in engine.calls[1].prompt
    again = ScriptedEngine([answer("resumed")])
    r2 = await Agent(tools=[add], engine=again, instructions="sys").resume(path, task="more")
    assert r2.output == "resumed" and again.calls[0].prompt == render(load_session(path)[:-1], [add.spec])


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ('{"a": 1e999, "b": 1}', "the number 1e999 is out of range (it would be inf)"),
        ('{"a": ' + "9" * 5000 + ', "b": 1}', "an integer has more than 640 digits"),
        ('{"a": 1, "b": ' + "[" * 972 + "]" * 972 + "}", "nested deeper than 128 arrays/objects"),
        ('{"a": 1, "b": ' + "{\"k\": " * 3000 + "1" + "}" * 3000 + "}", "nested deeper than 128 arrays/objects"),
    ],
)
async def test_history_with_extreme_arguments_json_renders_and_the_tool_says_why(arguments: str, message: str) -> None:
    """Arguments text beyond the limits (from a chat-mode server, an old session, a user):
    the encoder renders it as a raw json block and the tool fails with the reason."""
    msgs: list[Message] = [
        UserMessage(content="x"),
        AssistantMessage(content="", tool_calls=[{"id": "c1", "function": {"name": "add", "arguments": arguments}}]),
    ]
    prompt = render(msgs, [add.spec])
    assert f'<|open|>json type="object"<|sep|>{arguments}<|close|>json<|sep|>' in prompt
    result = await add.run(arguments)
    assert result.is_error and result.text.startswith(f"Error: ToolArgumentsError: arguments beyond the JSON limits: {message}")


@pytest.mark.parametrize(
    ("edit", "why"),
    [
        ({"text": {1, 2}}, "a set value ({1, 2}) is not JSON data"),
        ({"text": float("inf")}, "the number inf is not finite; JSON has no such number"),
        ({"text": 10**700}, "an integer has more than 640 digits"),
        ({1: "a"}, "an object key is int 1, not a string"),
        (["text"], "expected a dict, got list"),
    ],
)
async def test_an_edit_with_non_json_values_is_a_tool_error_not_a_crash(edit: Any, why: str) -> None:
    def hook(call: PendingCall) -> Edit | Allow:
        return Edit(edit) if call.arguments["text"] == "a" else Allow()

    engine = ScriptedEngine([calls(("echo", {"text": "a"}), ("echo", {"text": "b"})), answer("k")])
    r = await Agent(tools=[echo], engine=engine, approval=hook).run("x")
    assert [m.content for m in tool_messages(r.messages)] == [
        f"Error: the approval's edited arguments are not JSON data: {why}",
        "B",
    ]
    assert r.output == "k"


INTERRUPT_CHILD = textwrap.dedent("""
    import sys
    import anyio
    from kimik3 import Agent, ScriptedEngine, tool
    from kimik3.agents import load_session
    from tests.agents.test_agent import calls, echo

    @tool
    async def interrupted(x: int) -> str:
        \"\"\"Raises KeyboardInterrupt, as a Ctrl-C inside the tool would.\"\"\"
        raise KeyboardInterrupt

    @tool
    def interrupted_in_thread(x: int) -> str:
        \"\"\"A sync tool (run in a worker thread) that raises KeyboardInterrupt.\"\"\"
        raise KeyboardInterrupt

    def hook(call):
        raise KeyboardInterrupt

    where, path = sys.argv[1], sys.argv[2]
    name = "echo" if where == "approval" else where

    async def main() -> None:
        engine = ScriptedEngine([calls(("echo", {"text": "a"}), (name, {"x": 1} if name != "echo" else {"text": "b"}))])
        agent = Agent(tools=[echo, interrupted, interrupted_in_thread], engine=engine,
                      approval=hook if where == "approval" else None)
        try:
            await agent.run("x", session=path)
        except BaseException as e:
            print("run raised", type(e).__name__, flush=True)
            raise

    try:
        anyio.run(main)
    except BaseException as e:
        print("anyio.run raised", type(e).__name__)
    print(*[m.role for m in load_session(path)])
""")


@pytest.mark.parametrize("where", ["interrupted", "interrupted_in_thread", "approval"])
def test_keyboard_interrupt_in_a_tool_reaches_the_caller_as_itself(tmp_path: Path, where: str) -> None:
    """In a child process (asyncio lets a KeyboardInterrupt leave its loop; a hang would show)."""
    proc = subprocess.run([sys.executable, "-c", INTERRUPT_CHILD, where, str(tmp_path / "s.jsonl")],
                          capture_output=True, text=True, timeout=120, cwd=Path(__file__).parents[2])
    lines = proc.stdout.splitlines()
    assert lines[0] == "run raised KeyboardInterrupt", proc.stdout + proc.stderr  # not a BaseExceptionGroup
    assert lines[1] == "anyio.run raised KeyboardInterrupt"
    assert lines[2] == "user assistant tool tool"  # every call still has its result: the session resumes
    assert proc.returncode == 0  # and the event loop shut down cleanly (no worker thread left hanging)


@tool
def read(n: int) -> str:
    """Read chunk n (its result is capped at 30,000 characters: 60,000 tokens of emoji)."""
    return f"chunk {n} " + "🙂" * 40_000


def thirteen_turns(compaction_turns: list[int]) -> Any:
    turn = [0]

    def script(messages: list[Message]) -> str:
        last = messages[-1]
        if isinstance(last, UserMessage) and "Summarise the conversation" in str(last.content):
            compaction_turns.append(turn[0])
            return answer("SUMMARY")
        turn[0] += 1
        return calls(("read", {"n": turn[0]})) if turn[0] < 13 else answer("done")

    return script


async def test_default_policy_compacts_every_few_turns_not_every_turn() -> None:
    """Each turn adds ~60k tokens, so the 4 kept turns alone pass 80 % of the 131,072 window: the
    kept part shrinks instead of compacting again on every turn (before: every turn from the 5th,
    8 compaction calls in 13 turns)."""
    compaction_turns: list[int] = []
    agent = Agent(tools=[read], engine=ScriptedEngine(thirteen_turns(compaction_turns)),
                  context=ContextPolicy(context_window=131_072))  # the engine's own: 1,048,576
    events = [e async for e in agent.run_stream("go")]
    final = events[-1]
    assert isinstance(final, FinalEvent) and final.result.turns == 13 and final.result.output == "done"
    assert compaction_turns == [3, 6, 9, 12]  # 4 compaction calls in 13 turns, every third turn
    assert [(e.removed_messages, e.stopped) for e in events if isinstance(e, CompactionEvent)] == [
        (6, None), (7, None), (7, None), (7, None),
    ]
    kept = final.result.messages
    assert [m.role for m in kept[:2]] == ["user", "user"] and "SUMMARY" in str(kept[1].content)


async def test_compaction_that_cannot_get_under_the_threshold_stops_and_says_so_once() -> None:
    compaction_turns: list[int] = []
    policy = ContextPolicy(context_window=60_000)  # threshold 48,000 tokens; the task alone is 100,000
    agent = Agent(tools=[read], engine=ScriptedEngine(thirteen_turns(compaction_turns)), context=policy)
    events = [e async for e in agent.run_stream("🙂" * 50_000)]
    assert compaction_turns == []  # no model call spent on a summary that cannot help
    final = events[-1]
    assert isinstance(final, FinalEvent) and final.result.turns == 13
    # said once, at the start (issue 41), with what to do; the turns go without the model
    issues = final.result.issues
    assert re.fullmatch(
        r"turn 0: the prompt's head \(tool declarations, instructions and the first task: 100,\d\d\d tokens\) does "
        r"not fit under half of the compaction threshold \(24,000 tokens of the 60,000-token window\): compaction "
        r"cannot summarise this conversation, and once it fills the window it cannot be resumed \(the head is never "
        r"cleared\); give fewer tools or shorter instructions or task, or serve a larger window \(vLLM "
        r"--max-model-len\)", issues[0])
    assert sum("prompt's head" in i for i in issues) == 1
    assert all(e.summary == "" and e.stopped is None for e in events if isinstance(e, CompactionEvent))


# -- SystemExit / GeneratorExit inside a tool: that tool's error, not the end of the run -----


@tool
def cli_main(argv: str) -> str:
    """An argparse main: a bad argument exits with status 2."""
    import argparse

    parser = argparse.ArgumentParser(prog="cli_main", add_help=False)
    parser.add_argument("--n", type=int, required=True)
    return str(parser.parse_args(argv.split()).n * 2)


@tool
async def async_exit(code: int) -> str:
    """An async tool that calls sys.exit."""
    sys.exit(code)


@tool
def gen_exit(x: int) -> str:
    """A sync tool that raises GeneratorExit."""
    raise GeneratorExit


@pytest.mark.parametrize(
    ("name", "arguments", "expected"),
    [
        ("cli_main", {"argv": "--n nope"}, "Error: SystemExit: 2"),
        ("async_exit", {"code": 4}, "Error: SystemExit: 4"),
        ("gen_exit", {"x": 1}, "Error: GeneratorExit"),
    ],
)
async def test_system_exit_and_generator_exit_become_the_tool_error(
    name: str, arguments: dict[str, Any], expected: str
) -> None:
    engine = ScriptedEngine([calls((name, arguments), ("cli_main", {"argv": "--n 21"})), answer("fine")])
    result = await Agent(tools=[cli_main, async_exit, gen_exit], engine=engine).run("x")
    assert result.output == "fine"
    assert [m.content for m in tool_messages(result.messages)] == [expected, "42"]
