"""Issue 40: a full disk (ENOSPC, injected into ``os.write``) is a SessionError, never a bare
OSError; a new session is not left behind as a 0-byte file, an existing one keeps its bytes (no
torn line), and a run that hits it ends with the typed error."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from kimik3 import Agent, ScriptedEngine, SessionError
from kimik3.agents import SessionWriter, load_session
from kimik3.formats.k3 import render_output
from kimik3.types import UserMessage


def full_disk_after(monkeypatch: pytest.MonkeyPatch, path: Path, allowed: int, errno_: int = errno.ENOSPC) -> None:
    """``os.write`` to ``path`` writes ``allowed`` more bytes, then fails with ``errno_``."""
    real = os.write
    left = [allowed]

    def write(fd: int, data: Any) -> int:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            target = ""
        if target != str(path):
            return real(fd, data)
        if left[0] <= 0:
            raise OSError(errno_, os.strerror(errno_))
        n = real(fd, bytes(data)[: left[0]])
        left[0] -= n
        return n

    monkeypatch.setattr(os, "write", write)


@pytest.mark.parametrize("allowed", [0, 10])  # nothing written; a torn header
def test_a_new_session_on_a_full_disk_is_a_session_error_and_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     allowed: int) -> None:
    path = tmp_path / "s.jsonl"
    full_disk_after(monkeypatch, path, allowed)
    with pytest.raises(SessionError, match=f"^cannot write session {path}: No space left on device; nothing of "
                                           "this record was kept$"):
        SessionWriter(path, {"tools": []})
    assert not path.exists()


@pytest.mark.parametrize("errno_", [errno.ENOSPC, errno.EDQUOT, errno.EIO])
def test_a_record_that_cannot_be_written_leaves_the_file_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   errno_: int) -> None:
    path = tmp_path / "s.jsonl"
    writer = SessionWriter(path)
    writer.message(UserMessage(content="the typed task"))
    before = path.read_bytes()
    full_disk_after(monkeypatch, path, 7, errno_)  # a part of the next record fits
    with pytest.raises(SessionError, match=os.strerror(errno_)):
        writer.message(UserMessage(content="x" * 5000))
    writer.close()
    assert path.read_bytes() == before
    assert [m.content for m in load_session(path)] == ["the typed task"]


async def test_a_run_that_fills_the_disk_ends_with_the_typed_error_and_keeps_the_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s.jsonl"
    engine = ScriptedEngine([render_output({"reasoning_content": "r", "content": "done " * 2000})])
    agent = Agent(engine=engine)
    real_message = SessionWriter.message

    def message(self: SessionWriter, m: Any, *args: Any, **kwargs: Any) -> None:
        if m.role == "assistant":  # the disk fills when the answer comes
            full_disk_after(monkeypatch, path, 0)
        real_message(self, m, *args, **kwargs)

    monkeypatch.setattr(SessionWriter, "message", message)
    with pytest.raises(SessionError, match="No space left on device"):
        await agent.run("the typed task", session=path)
    monkeypatch.undo()
    assert [m.content for m in load_session(path)] == ["the typed task"]
