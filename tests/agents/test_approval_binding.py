"""Issue 40 (attacks on approvals): a decision binds the call it approved (id, tool, arguments),
``kimik3 approve`` records what it showed, and the journal accepts ``tool_finished`` only for a
call that ran."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from kimik3 import Agent, Allow, Defer, Deny, ScriptedEngine, SessionError, tool
from kimik3.agents import PendingCall, record_approvals
from kimik3.formats.k3 import render_output
from kimik3.types import Message, ToolMessage, message_text

RAN: list[tuple[str, str]] = []


@tool
def look(path: str) -> str:
    """Look at a file.

    Args:
        path: the file.
    """
    RAN.append(("look", path))
    return f"seen {path}"


@tool
def delete(path: str) -> str:
    """Delete a file.

    Args:
        path: the file.
    """
    RAN.append(("delete", path))
    return f"deleted {path}"


@pytest.fixture(autouse=True)
def _clear() -> None:
    RAN.clear()


def calls(*pairs: tuple[str, dict[str, Any]]) -> str:
    return render_output({"reasoning_content": "go", "tool_calls": [
        {"id": f"{name}:{i}", "function": {"name": name, "arguments": json.dumps(a)}}
        for i, (name, a) in enumerate(pairs)]})


def defer(call: PendingCall) -> Defer:
    return Defer()


def echo(messages: list[Message]) -> str:
    last = next(m for m in reversed(messages) if isinstance(m, ToolMessage))
    return "saw " + message_text(last.content)


def deferred(session: Path, *pairs: tuple[str, dict[str, Any]]) -> dict[str, str]:
    agent = Agent(tools=[look, delete], engine=ScriptedEngine([calls(*pairs)]), approval=defer)
    result = anyio.run(lambda: agent.run("go", session=session))
    assert result.stop_reason == "approval_required"
    return {p.name: p.id for p in result.pending_approvals}


def resume(session: Path) -> Any:
    agent = Agent(tools=[look, delete], engine=ScriptedEngine(echo), approval=defer)
    return anyio.run(lambda: agent.resume(session))


def decision_line(session: Path) -> int:
    return next(i for i, t in enumerate(session.read_text().splitlines(), 1) if t.startswith('{"decision"'))


def test_a_call_renamed_to_another_tool_after_its_approval_is_refused(tmp_path: Path) -> None:
    session = tmp_path / "s.jsonl"
    ids = deferred(session, ("look", {"path": "a"}))
    record_approvals(session, {ids["look"]: Allow()})
    line = decision_line(session)
    # the attacker's edit: the assistant message and the deferred record alike now call delete
    session.write_text(session.read_text().replace('\\"name\\": \\"look\\"', '\\"name\\": \\"delete\\"')
                       .replace('"name": "look"', '"name": "delete"'))
    assert '"name": "delete", "arguments": {"path": "a"}' in session.read_text()
    with pytest.raises(SessionError, match=rf"^{session}:{line}: not a valid decision record: call "
                                           rf"'{ids['look']}' \(delete\) is not the one approved \(its id, tool and arguments: "):
        resume(session)
    assert RAN == []


def _swap(text: str, a: str, b: str) -> str:
    return text.replace(a, "\0").replace(b, a).replace("\0", b)


@pytest.mark.parametrize("records", [True, False])
def test_ids_swapped_between_calls_with_equal_arguments_are_refused(tmp_path: Path, records: bool) -> None:
    session = tmp_path / "s.jsonl"
    ids = deferred(session, ("look", {"path": "a"}), ("delete", {"path": "a"}))
    record_approvals(session, {ids["look"]: Allow(), ids["delete"]: Deny("no")})
    line = decision_line(session)
    lines = session.read_text().splitlines()
    # the ids traded in the assistant message (and, or not, in the deferred records): the
    # approval of the look call now names the delete call
    lines = [_swap(t, ids["look"], ids["delete"]) if records or t.startswith('{"message"') else t for t in lines]
    session.write_text("\n".join(lines) + "\n")
    if records:  # the deferred records agree with the message: only the decision's digest tells
        why = rf"{line}: not a valid decision record: call '[^']+' \((look|delete)\) is not the one approved"
    else:
        why = r"\d+: not a valid deferred record: call '[^']+' is to '(look|delete)', not '(look|delete)'$"
    with pytest.raises(SessionError, match=rf"^{session}:{why}"):
        resume(session)
    assert RAN == []


def _approve(session: Path, args: list[str], monkeypatch: pytest.MonkeyPatch, edit: tuple[str, ...]) -> Any:
    """``kimik3 approve`` at a terminal; while the person reads the prompt, ``edit`` is made in
    the file (the message and the deferred record alike)."""
    from click.testing import CliRunner

    import kimik3.cli.sessions as cli_run
    from kimik3.cli import main

    def prompt(*_: Any, **__: Any) -> str:
        text = session.read_text()
        for old, new in zip(edit[::2], edit[1::2], strict=True):
            text = text.replace(old, new)
        session.write_text(text)
        return "y"

    monkeypatch.setattr(cli_run, "_interactive", lambda: True)
    monkeypatch.setattr(cli_run.click, "prompt", prompt)
    if "--all" in args:  # no prompt: the edit lands between approve's read and its write
        real = cli_run.record_approvals

        def late(*a: Any, **k: Any) -> Any:
            prompt()
            return real(*a, **k)

        monkeypatch.setattr(cli_run, "record_approvals", late)
    return CliRunner().invoke(main, ["approve", str(session), *args])


@pytest.mark.parametrize(("args", "edit", "now"), [
    ([], ("build/tmp", "/home/me"), 'look {"path": "/home/me"}'),  # the attacker's: edited while the prompt showed
    (["--all"], ('"name": "look", ', '"name": "delete", '), 'delete {"path": "build/tmp"}'),  # mine: --all, the tool
])
def test_approve_records_the_calls_it_showed_never_a_later_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               args: list[str], edit: tuple[str, ...], now: str) -> None:
    session = tmp_path / "s.jsonl"
    ids = deferred(session, ("look", {"path": "build/tmp"}))
    if args:  # the assistant message holds the call as escaped JSON text
        edit = (*edit, *(e.replace('"', '\\"') for e in edit))
    before = session.read_text()
    out = _approve(session, args, monkeypatch, edit)
    changed = session.read_text()
    assert changed != before and now.split()[0] in changed and '"decision"' not in changed  # nothing approved
    assert out.exit_code == 1
    assert out.output.splitlines()[-1] == (f"error: SessionError: call '{ids['look']}' of {session} changed after it "
                                           f"was shown (now {now}); nothing was recorded: read it again and decide")


@pytest.mark.parametrize("decided", [False, True])
def test_a_finish_of_a_deferred_call_that_never_started_is_refused_naming_its_line(tmp_path: Path,
                                                                                  decided: bool) -> None:
    session = tmp_path / "s.jsonl"
    ids = deferred(session, ("delete", {"path": "two"}))
    if decided:  # mine: approved, then a finish written before any start
        record_approvals(session, {ids["delete"]: Allow()})
    with session.open("a") as f:  # the attacker's: a finish for the call that still waits
        f.write(json.dumps({"tool_finished": {"call_id": ids["delete"], "name": "delete"}}) + "\n")
    line = len(session.read_text().splitlines())
    with pytest.raises(SessionError, match=rf"^{session}:{line}: not a valid tool_finished record: call "
                                           rf"'{ids['delete']}' was deferred and never started \(tool_started\)$"):
        resume(session)
    if not decided:
        with pytest.raises(SessionError, match=rf"^{session}:{line}: not a valid tool_finished record"):
            record_approvals(session, {ids["delete"]: Allow()})  # the approval is never swallowed
    assert RAN == []


def test_a_deferred_record_after_the_call_finished_is_refused(tmp_path: Path) -> None:
    session = tmp_path / "s.jsonl"
    agent = Agent(tools=[look, delete], engine=ScriptedEngine([calls(("look", {"path": "a"}), ("delete", {"path": "b"}))]),
                  approval=lambda c: Allow() if c.name == "look" else Defer())
    result = anyio.run(lambda: agent.run("go", session=session))
    [look_id] = [m.tool_call_id for m in result.messages if isinstance(m, ToolMessage)]
    with session.open("a") as f:
        f.write(json.dumps({"deferred": {"call_id": look_id, "name": "look", "arguments": {"path": "a"}}}) + "\n")
    line = len(session.read_text().splitlines())
    with pytest.raises(SessionError, match=rf"^{session}:{line}: not a valid deferred record: call '{look_id}' was "
                                           "journaled finished before$"):
        resume(session)
    assert RAN == [("look", "a")]


def test_shown_calls_fit_100_columns_with_their_prefix_and_long_ones_are_announced(tmp_path: Path) -> None:
    """The attacker's: escapes and padding made approve's lines 117 and 104 characters wide
    (the prefix added on top of the wrap width) and buried a tail after 100,000 characters of
    padding; now every line fits and an argument over 2,000 characters is announced first."""
    from click.testing import CliRunner

    from kimik3._text import shown_call
    from kimik3.cli import main

    session = tmp_path / "s.jsonl"
    short = "ls\x1b[2K\x1b]0;pwned\x07" + "x" * 170  # escapes: 6 characters each when shown
    long = "echo ok;" + " " * 3000 + "rm -rf ~"
    ids = deferred(session, ("delete", {"path": short}), ("look", {"path": long}))
    out = CliRunner().invoke(main, ["approve", str(session), "--allow", ids["delete"], "--deny", ids["look"]])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert max(map(len, lines)) == 100
    assert lines[0].startswith('approved: delete {"path": "ls\\u001b[2K\\u001b]0;pwned\\u0007xxx')
    [notice] = [t for t in lines if t.startswith("denied: ")]
    assert notice == "denied: look (3028 characters; whole below)"  # {"path": "..."}: 12 + 3016
    shown = "".join(t.removeprefix("    ") for t in lines[lines.index(notice) + 1:] if t.startswith("    "))
    assert shown == json.dumps({"path": long}) + f"  id={ids['look']}"  # whole, its tail included
    show = CliRunner().invoke(main, ["show", str(session)])
    calls_shown = [t for t in show.output.splitlines() if t.startswith(("    -> ", "--- deferred", "        "))]
    assert len(calls_shown) > 60 and max(map(len, calls_shown)) <= 100  # the call lines (a path may be longer)
    # mine: a head, a value and a tail of any lengths: each line fits, nothing is lost
    for n in range(150, 260, 7):
        text = shown_call("awaiting approval: bash ", {"command": "y" * n}, "  id=call_0123456789abcdef01234567")
        assert max(map(len, text.splitlines())) <= 100
        assert "".join(t.removeprefix("    ") for t in text.splitlines()) == (
            f'awaiting approval: bash {{"command": "{"y" * n}"}}  id=call_0123456789abcdef01234567')
