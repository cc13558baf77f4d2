"""Fork and show recorded sessions (kimik3.agents._fork; `kimik3 show`, `kimik3 resume --at N`):
the original file's bytes never change, the fork holds the history as it was at message N."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner

from kimik3 import Agent, ContextPolicy, ScriptedEngine, SessionError, UserError
from kimik3.agents import fork_session, format_session, load_session, read_session_records
from kimik3.cli import main
from kimik3.types import AssistantMessage, Message, ToolMessage, UserMessage

from .test_agent import add, answer, calls


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def record(path: Path) -> None:
    engine = ScriptedEngine([
        calls(("add", {"a": 2, "b": 3}), reasoning="I should add the numbers first.\nThen report."),
        answer("5", reasoning="The tool said 5."),
    ])  # fmt: skip
    result = await Agent(instructions="Be exact.", tools=[add], engine=engine).run("What is 2+3?", session=path)
    assert result.output == "5"


def normalised(text: str) -> str:
    text = re.sub(r"call_[0-9a-f]+", "call_ID", text)
    return re.sub(r"created \S+ \S+ UTC", "created T", text)


async def test_show_prints_numbered_messages_turns_usage_and_folded_reasoning(tmp_path: Path) -> None:
    session = tmp_path / "s.jsonl"
    await record(session)
    text = normalised(format_session(session))
    lines = text.splitlines()
    assert lines[2:6] == ["[0] system", "    Be exact.", "[1] user", "    What is 2+3?"]
    assert re.fullmatch(r"\[2\] assistant  turn 1  usage: \d+ prompt \+ \d+ completion tokens", lines[6])
    assert lines[7] == "    > reasoning (44 chars, folded): I should add the numbers first. Then report."
    assert lines[8] == '    -> add({"a": 2, "b": 3})  id=call_ID'
    assert lines[9:11] == ["[3] tool add result for call_ID", "    5"]
    assert lines[12:14] == ["    > reasoning (16 chars, folded): The tool said 5.", "    5"]
    # the usage printed is the one recorded with each assistant message
    usages = [json.loads(line).get("usage") for line in session.read_text().splitlines()[1:]]
    recorded = [u for u in usages if u is not None]
    assert len(recorded) == 2
    assert lines[6].endswith(f"{recorded[0]['prompt_tokens']} prompt + {recorded[0]['completion_tokens']} completion tokens")
    total_p = recorded[0]["prompt_tokens"] + recorded[1]["prompt_tokens"]
    total_c = recorded[0]["completion_tokens"] + recorded[1]["completion_tokens"]
    assert lines[-1] == f"2 turns; total usage: {total_p} prompt + {total_c} completion tokens"
    unfolded = format_session(session, reasoning=True).splitlines()
    assert unfolded[7:10] == ["    reasoning:", "      I should add the numbers first.", "      Then report."]


async def test_fork_keeps_the_history_up_to_message_n_and_never_touches_the_original(tmp_path: Path) -> None:
    session = tmp_path / "s.jsonl"
    await record(session)
    before = sha256(session)
    original = load_session(session)
    fork = fork_session(session, 3, tmp_path / "fork.jsonl")
    assert sha256(session) == before
    assert load_session(fork) == original[:4]  # system, user, the call, its result
    header = json.loads(fork.read_text().splitlines()[0])
    assert header["forked_from"] == {"session": str(session.resolve()), "at": 3}
    assert header["instructions"] == "Be exact." and header["tools"] == ["add"]
    # continue the fork with another ending: the original still holds the first one
    engine = ScriptedEngine([answer("five", reasoning="In words.")])
    result = await Agent(instructions="Be exact.", tools=[add], engine=engine).resume(fork, "Say it in words.")
    assert result.output == "five"
    assert sha256(session) == before
    forked = load_session(fork)
    assert forked[:4] == original[:4]
    assert forked[4] == UserMessage(content="Say it in words.")
    assert isinstance(forked[5], AssistantMessage) and forked[5].content == "five"
    # the prompt sent was the history at message 3, then the new task: never the old answer
    assert [m.content for m in engine.calls[0].messages][-2:] == ["5", "Say it in words."]


async def test_fork_at_a_call_without_its_result_and_negative_indices(tmp_path: Path) -> None:
    session = tmp_path / "s.jsonl"
    await record(session)
    original = load_session(session)
    at_call = fork_session(session, 2, tmp_path / "a.jsonl")
    assert load_session(at_call) == original[:3]
    engine = ScriptedEngine([answer("ok")])
    await Agent(tools=[add], engine=engine).resume(at_call)
    resumed = load_session(at_call)
    assert isinstance(resumed[3], ToolMessage)  # the orphan call is answered with an error first
    assert resumed[3].content == ("Error: the run stopped before this call's result was recorded; whether it ran, "
        "and how far, is unknown: check before calling it again")
    assert load_session(fork_session(session, -1, tmp_path / "b.jsonl")) == original
    assert load_session(fork_session(session, -2, tmp_path / "c.jsonl")) == original[:4]


async def test_fork_refuses_out_of_range_an_existing_target_and_a_non_session(tmp_path: Path) -> None:
    session = tmp_path / "s.jsonl"
    await record(session)
    before = sha256(session)
    with pytest.raises(UserError, match=r"message 5 is out of range: .* holds messages 0\.\.4"):
        fork_session(session, 5, tmp_path / "x.jsonl")
    with pytest.raises(UserError, match="out of range"):
        fork_session(session, -6, tmp_path / "x.jsonl")
    with pytest.raises(UserError, match="already exists"):
        fork_session(session, 1, session)
    (tmp_path / "taken.jsonl").write_text("something\n")
    with pytest.raises(UserError, match="already exists"):
        fork_session(session, 1, tmp_path / "taken.jsonl")
    assert sha256(session) == before and not (tmp_path / "x.jsonl").exists()
    (tmp_path / "plain.txt").write_text('{"hello": 1}\n')
    with pytest.raises(SessionError, match="not a kimik3 session"):
        fork_session(tmp_path / "plain.txt", 0, tmp_path / "y.jsonl")
    with pytest.raises(SessionError, match="cannot open session"):
        format_session(tmp_path / "missing.jsonl")


async def test_fork_after_a_compaction_keeps_the_compacted_history(tmp_path: Path) -> None:
    def reply(messages: list[Message]) -> str:
        last = messages[-1]
        if isinstance(last, UserMessage) and str(last.content).startswith("Summarise"):
            return answer("We added 1+1 and 2+2.")  # the compaction summary
        done = sum(isinstance(m, ToolMessage) for m in messages)
        return calls(("add", {"a": done, "b": done}), reasoning="word " * 400) if done < 16 else answer("6")

    engine = ScriptedEngine(reply)
    session = tmp_path / "s.jsonl"
    policy = ContextPolicy(context_window=6000, compact_at=0.5, keep_recent_turns=1)
    await Agent(tools=[add], engine=engine, context=policy).run("add things", session=session)
    records = read_session_records(session)
    assert sum(r.compaction is not None for r in records) >= 1
    text = format_session(session)
    assert "--- compaction: the history became" in text and "We added 1+1 and 2+2." in text
    last_index = max(r.index for r in records if r.index is not None)
    forked = fork_session(session, last_index, tmp_path / "f.jsonl")
    assert load_session(forked) == load_session(session)
    first_compaction = next(r for r in records if r.compaction is not None)
    before = [r for r in records if r.index is not None and r.line < first_compaction.line]
    early = fork_session(session, before[-1].index or 0, tmp_path / "g.jsonl")
    assert not any("Summary of" in str(m.content) for m in load_session(early))  # before compaction


def test_torn_last_line_is_skipped_and_a_corrupt_middle_line_is_an_error(tmp_path: Path) -> None:
    session = tmp_path / "s.jsonl"
    header = json.dumps({"kimik3_session": 1, "created": 0})
    user = json.dumps({"message": {"role": "user", "content": "hi"}})
    session.write_text(f"{header}\n{user}\n{{\"message\": {{\"role\"")
    assert [r.index for r in read_session_records(session)] == [None, 0]
    session.write_text(f"{header}\nnot json\n{user}\n")
    with pytest.raises(SessionError, match=r"s\.jsonl:2: not a JSON line"):
        read_session_records(session)


def test_cli_show_and_resume_at_n(tmp_path: Path) -> None:
    session = tmp_path / "s.jsonl"
    anyio.run(record, session)
    before = sha256(session)
    home = tmp_path / "home"
    shown = CliRunner().invoke(main, ["show", str(session)], env={"KIMIK3_HOME": str(home)})
    assert shown.exit_code == 0
    assert "[3] tool add result for call_" in shown.output and "2 turns; total usage:" in shown.output
    script = tmp_path / "script.json"
    script.write_text(json.dumps([answer("five")]))
    ws = tmp_path / "ws"
    ws.mkdir()
    result = CliRunner().invoke(main, ["resume", str(session), "in words", "--at", "3", "--script", str(script),
                                       "-w", str(ws), "--plain"], env={"KIMIK3_HOME": str(home)})  # fmt: skip
    assert result.exit_code == 0, result.output
    assert sha256(session) == before
    forks = sorted((home / "sessions").glob("*.jsonl"))
    assert len(forks) == 1
    history = load_session(forks[0])
    assert history[:4] == load_session(session)[:4]
    assert history[4] == UserMessage(content="in words")
    assert isinstance(history[5], AssistantMessage) and history[5].content == "five"
    out_of_range = CliRunner().invoke(main, ["resume", str(session), "x", "--at", "9", "--script", str(script),
                                             "-w", str(ws), "--plain"], env={"KIMIK3_HOME": str(home)})  # fmt: skip
    assert out_of_range.exit_code == 1 and "message 9 is out of range" in out_of_range.output
    assert len(list((home / "sessions").glob("*.jsonl"))) == 1 and sha256(session) == before
    bad = CliRunner().invoke(main, ["show", str(script)])
    assert bad.exit_code == 1 and "not a kimik3 session" in bad.output


async def test_show_counts_one_turn_in_the_singular(tmp_path: Path) -> None:
    session = tmp_path / "one.jsonl"
    result = await Agent(instructions="Be brief.", engine=ScriptedEngine([answer("Hi.")])).run("Hi", session=session)
    assert result.turns == 1
    shown = CliRunner().invoke(main, ["show", str(session)])
    assert shown.exit_code == 0, shown.output
    assert re.fullmatch(r"1 turn; total usage: \d+ prompt \+ \d+ completion tokens", shown.output.splitlines()[-1])
