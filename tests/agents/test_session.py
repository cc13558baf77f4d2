"""Session files: torn writes, repaired newlines, one writer at a time, odd lines, odd files.

Hangs (a FIFO) and crashes (kill -9) are tested in child processes with generous limits.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kimik3 import Agent, ScriptedEngine, SessionError
from kimik3.agents import SessionWriter, load_session
from kimik3.formats.k3 import render_output
from kimik3.types import AssistantMessage, UserMessage

WIDE = "é漢🙂"  # 2-, 3- and 4-byte UTF-8 characters


def answer(text: str) -> str:
    return render_output({"reasoning_content": "r", "content": text})


def write_session(path: Path, texts: list[str]) -> None:
    w = SessionWriter(path, {"instructions": "sys"})
    for t in texts:
        w.message(UserMessage(content=t))
    w.close()


def contents(path: Path) -> list[str]:
    return [str(m.content) for m in load_session(path)]


def test_every_cut_of_the_last_line_drops_it_and_resume_appends_cleanly(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    write_session(path, ["first " + WIDE, "second " + WIDE * 3])
    data = path.read_bytes()
    last_start = data.rstrip(b"\n").rfind(b"\n") + 1
    mid_char_cuts = 0
    for cut in range(last_start + 1, len(data) - 1):  # every cut inside the last line, newline excluded
        torn = data[:cut]
        try:
            torn.decode("utf-8")
        except UnicodeDecodeError:
            mid_char_cuts += 1
        path.write_bytes(torn)
        assert contents(path) == ["first " + WIDE], cut
        w = SessionWriter(path)
        assert not w.new and [str(m.content) for m in w.messages] == ["first " + WIDE]
        w.message(UserMessage(content="after"))
        w.close()
        assert contents(path) == ["first " + WIDE, "after"]
        assert path.read_bytes() == data[:last_start] + b'{"message": {"role": "user", "content": "after"}}\n'
    assert mid_char_cuts == 3 * (1 + 2 + 3)  # inside é: 1 cut, 漢: 2, 🙂: 3; three of each


def test_a_complete_last_line_without_newline_is_kept_and_the_newline_repaired(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    write_session(path, ["first", "the answer " + WIDE])
    data = path.read_bytes()
    path.write_bytes(data[:-1])  # only the "\n" is missing
    assert contents(path) == ["first", "the answer " + WIDE]  # used by the resumed run
    w = SessionWriter(path)
    w.message(UserMessage(content="next"))
    w.close()
    assert path.read_bytes() == data + b'{"message": {"role": "user", "content": "next"}}\n'
    assert contents(path) == ["first", "the answer " + WIDE, "next"]


async def test_resume_after_a_missing_newline_keeps_the_first_answer(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    r = await Agent(engine=ScriptedEngine([answer("first answer")]), instructions="sys").run("q1", session=path)
    assert r.output == "first answer"
    path.write_bytes(path.read_bytes()[:-1])
    r2 = await Agent(engine=ScriptedEngine([answer("second answer")]), instructions="sys").resume(path, task="q2")
    assert r2.output == "second answer"
    assert [(m.role, str(m.content)) for m in load_session(path)] == [
        ("system", "sys"), ("user", "q1"), ("assistant", "first answer"), ("user", "q2"), ("assistant", "second answer"),
    ]


def test_a_second_writer_gets_an_error_naming_the_holder(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    first = SessionWriter(path)
    host = socket.gethostname()
    with pytest.raises(SessionError) as e:
        SessionWriter(path)
    assert str(e.value) == (f"session {path} is in use by pid {os.getpid()} (this process) on host {host}; "
                            "one run may write a session at a time")
    first.message(UserMessage(content="only me"))
    first.close()
    SessionWriter(path).close()  # released on close
    assert contents(path) == ["only me"]

    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from kimik3.agents import SessionWriter; w = SessionWriter(sys.argv[1]); "
         "print('locked', flush=True); sys.stdin.read()", str(path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        before = path.read_bytes()
        with pytest.raises(SessionError, match=rf"in use by pid {holder.pid} on host {host};"):
            SessionWriter(path)
        assert path.read_bytes() == before
    finally:
        holder.communicate("", timeout=120)
    SessionWriter(path).close()  # the holder exited: free again


def test_a_lock_a_forked_child_still_shares_is_waited_for(tmp_path: Path) -> None:
    """A tool's subprocess forked by another thread shares the open files of this process until it
    execs, a session's locked file just closed included: the next writer of that session (the next
    ``resume`` of a concurrent agent) waits for it instead of failing "in use by this process"."""
    import fcntl
    import threading

    path = tmp_path / "s.jsonl"
    first = SessionWriter(path)
    first.message(UserMessage(content="turn 1"))
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE,
                             pass_fds=(first.store._fd,))  # holds the file as a forked child does before its exec
    try:
        first.close()
        probe = os.open(path, os.O_RDONLY)
        with pytest.raises(BlockingIOError):  # still locked: the child's copy
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(probe)
        got: list[object] = []
        second = threading.Thread(target=lambda: got.append(SessionWriter(path)))
        second.start()
    finally:
        child.communicate(b"", timeout=120)  # the child's copy closes
    second.join()
    (writer,) = got
    assert isinstance(writer, SessionWriter) and [str(m.content) for m in writer.messages] == ["turn 1"]
    writer.close()


async def test_two_runs_on_one_session_the_second_fails_before_writing(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    holder = SessionWriter(path, {"instructions": "sys"})
    holder.message(UserMessage(content="task"))
    before = path.read_bytes()
    engine = ScriptedEngine([answer("never")])
    with pytest.raises(SessionError, match="is in use by pid"):
        await Agent(engine=engine).run("other task", session=path)
    assert engine.calls == [] and path.read_bytes() == before
    holder.close()


HEADER = b'{"kimik3_session": 1, "created": 0}\n'


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (HEADER + b"[1, 2]\n{}\n", ":2: expected a JSON object, got list"),
        (HEADER + b'{"message": {"role": "wizard", "content": "x"}}\n', ":2: not a valid session record: "),
        (HEADER + b'{"message": 5}\n', ":2: not a valid session record: "),
        (HEADER + b'{"message": {"role": "user", "content": "a"}}\n{"compaction": {}}\n',
         ":3: not a valid session record: 'messages'"),
        (HEADER + b'{"compaction": {"messages": 7}}\n', ":2: not a valid session record: "),
        (HEADER + b'{"message": {"role": "user", "content": "\xff\xfe"}}\n{}\n', ":2: not UTF-8 text (invalid start byte at byte 41)"),
        (HEADER + b'{"message": {"role": "user", "content": "a"}\n{}\n', ":2: not a JSON line: "),
        (HEADER + b'{"note": 1}\n', ":2: unknown record (keys: note)"),
        (HEADER + b'{"message": {"role": "user", "content": "a"}}\n' + b"[" * 5000 + b"]" * 5000 + b"\n",
         ":3: not a JSON line: maximum recursion depth exceeded"),
        (b'{"kimik3_session": 2}\n', ": unsupported session version 2 (this kimik3 reads 1)"),
        (b'{"kimik3_session": true}\n', ": unsupported session version True (this kimik3 reads 1)"),
        (b'{"kimik3_session": 1.0}\n', ": unsupported session version 1.0 (this kimik3 reads 1)"),
        # bytes that merely begin like a header (shorter than its fixed prefix) are someone
        # else's file: never cut and turned into a session
        (b"{", " is not a kimik3 session file (no header line)"),
        (b'{"kimik3_sess', " is not a kimik3 session file (no header line)"),
        (b"hello\n", " is not a kimik3 session file (line 1 is not a session header)"),
        (b"hello", " is not a kimik3 session file (no header line)"),
        (b'{"a": 1}\n', " is not a kimik3 session file (line 1 is not a session header)"),
        (b"", " is empty, not a kimik3 session"),
    ],
)
def test_odd_files_are_session_errors_with_the_line_and_nothing_is_appended(
    tmp_path: Path, data: bytes, message: str
) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(data)
    with pytest.raises(SessionError) as e:
        load_session(path)
    assert str(e.value).startswith(str(path) + message), str(e.value)
    if data:
        with pytest.raises(SessionError) as e2:
            SessionWriter(path)
        assert str(e2.value) == str(e.value)
        assert path.read_bytes() == data  # nothing appended, nothing cut


def test_no_directory_is_created(tmp_path: Path) -> None:
    path = tmp_path / "nonexistent_dir" / "s.jsonl"
    with pytest.raises(SessionError, match=r"cannot open session .*/nonexistent_dir/s\.jsonl: no such directory$"):
        SessionWriter(path)
    with pytest.raises(SessionError, match=r": no such file$"):
        load_session(tmp_path / "missing.jsonl")
    assert not path.parent.exists()
    with pytest.raises(SessionError, match=r"is not a regular file; a session must be one$"):
        load_session(tmp_path)  # a directory


FIFO_CHILD = textwrap.dedent("""
    import sys
    from kimik3 import SessionError
    from kimik3.agents import SessionWriter, load_session
    for call in (load_session, SessionWriter):
        try:
            call(sys.argv[1])
        except SessionError as e:
            print(type(e).__name__, str(e).removeprefix(sys.argv[1]))
""")


def test_a_fifo_is_refused_without_hanging(tmp_path: Path) -> None:
    fifo = tmp_path / "s.jsonl"
    os.mkfifo(fifo)
    proc = subprocess.run([sys.executable, "-c", FIFO_CHILD, str(fifo)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["SessionError  is not a regular file; a session must be one"] * 2
    script = tmp_path / "script.json"
    script.write_text(json.dumps([answer("never")]))
    cli = subprocess.run([sys.executable, "-m", "kimik3", "resume", str(fifo), "go", "--script", str(script)],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert cli.returncode == 1
    assert cli.stderr.splitlines()[-1] == f"error: SessionError: {fifo} is not a regular file; a session must be one"


KILL_CHILD = textwrap.dedent("""
    import sys
    from kimik3.agents import SessionWriter
    from kimik3.types import UserMessage
    w = SessionWriter(sys.argv[1], {"instructions": "sys"})
    print("ready", flush=True)
    i = 0
    while True:  # lines of 9 B to 2.7 MB: long writes can be cut at a page boundary
        w.message(UserMessage(content=f"{i} " + "é漢🙂" * ((i % 7) * 50_000 + 1)))
        i += 1
""")


def expected_text(i: int) -> str:
    return f"{i} " + WIDE * ((i % 7) * 50_000 + 1)


async def test_kill_9_while_writing_then_resume_succeeds_every_time(tmp_path: Path) -> None:
    rng = random.Random(21)
    torn = 0
    for trial in range(8):
        path = tmp_path / f"s{trial}.jsonl"
        child = subprocess.Popen([sys.executable, "-c", KILL_CHILD, str(path)], stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        time.sleep(rng.uniform(0.05, 0.6))  # the moment of the kill (not a bound on anything)
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(timeout=120) == -signal.SIGKILL
        torn += not path.read_bytes().endswith(b"\n")
        texts = contents(path)
        assert texts == [expected_text(i) for i in range(len(texts))]  # a clean prefix, nothing mangled
        engine = ScriptedEngine([answer(f"resumed {trial}")], max_model_len=10**9)  # the session is over K3's window
        r = await Agent(engine=engine, instructions="sys").resume(path, task="go on")
        assert r.output == f"resumed {trial}"
        after = load_session(path)
        assert [str(m.content) for m in after[: len(texts)]] == texts
        assert isinstance(after[-2], UserMessage) and after[-2].content == "go on"
        assert isinstance(after[-1], AssistantMessage) and after[-1].content == f"resumed {trial}"
        assert json.loads(path.read_bytes().splitlines()[0])["kimik3_session"] == 1
    print(f"{torn} of 8 kills left a torn last line")


async def test_a_run_never_appends_a_different_conversation_to_a_session(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    write_session(path, ["first"])
    stale = load_session(path)
    w = SessionWriter(path)  # another run appends after this one read the file
    w.message(UserMessage(content="from the other run"))
    w.close()
    before = path.read_bytes()
    engine = ScriptedEngine([answer("never")])
    with pytest.raises(SessionError) as e:
        await Agent(engine=engine).run("go on", messages=stale, session=path)
    assert str(e.value) == (f"session {path} holds 2 messages, but this run continues a conversation of 1; continue "
                            "the file's own with Agent.resume (another run may have written it since it was read)")
    with pytest.raises(SessionError, match="holds 2 messages, but this run continues a conversation of 0"):
        await Agent(engine=engine).run("a new task", session=path)  # not a fresh file
    assert engine.calls == [] and path.read_bytes() == before
    r = await Agent(engine=ScriptedEngine([answer("ok")])).resume(path, task="go on")
    assert r.output == "ok" and contents(path) == ["first", "from the other run", "go on", "ok"]


def test_a_torn_header_is_an_empty_session_the_writer_starts_again(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(b'{"kimik3_session": 1, "cre')  # killed while the header was written
    with pytest.raises(SessionError, match=r" is empty, not a kimik3 session$"):
        load_session(path)
    w = SessionWriter(path, {"instructions": "sys"})
    assert w.new and w.messages == []
    w.message(UserMessage(content="task"))
    w.close()
    assert contents(path) == ["task"]
    assert json.loads(path.read_bytes().splitlines()[0])["instructions"] == "sys"


TORN_CHILD = textwrap.dedent("""
    import json, os, signal, sys
    from kimik3.agents import SessionWriter
    from kimik3.types import UserMessage, dump_message
    w = SessionWriter(sys.argv[1], {"instructions": "sys"})
    w.message(UserMessage(content="kept " + "é漢🙂"))
    line = (json.dumps({"message": dump_message(UserMessage(content="torn " + sys.argv[2]))}, ensure_ascii=False)
            + "\\n").encode()
    w.store.append(line[: line.index(sys.argv[2].encode()) + int(sys.argv[3])])  # stop inside the character
    os.kill(os.getpid(), signal.SIGKILL)
""")


@pytest.mark.parametrize(("char", "cut"), [("é", 1), ("漢", 1), ("漢", 2), ("🙂", 1), ("🙂", 3)])
async def test_kill_9_inside_a_multibyte_character_then_resume(tmp_path: Path, char: str, cut: int) -> None:
    """A real child process killed right after writing part of a line, its last byte inside a
    2-, 3- or 4-byte UTF-8 character."""
    path = tmp_path / "s.jsonl"
    proc = subprocess.run([sys.executable, "-c", TORN_CHILD, str(path), char, str(cut)], timeout=120)
    assert proc.returncode == -signal.SIGKILL
    tail = path.read_bytes().rsplit(b"\n", 1)[1]
    assert tail.endswith(char.encode()[:cut])
    with pytest.raises(UnicodeDecodeError):
        tail.decode("utf-8")
    assert contents(path) == ["kept " + WIDE]
    r = await Agent(engine=ScriptedEngine([answer("resumed")]), instructions="sys").resume(path, task="go on")
    assert r.output == "resumed"
    assert contents(path) == ["kept " + WIDE, "go on", "resumed"]
