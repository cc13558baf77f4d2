"""JSONL session files: every message appended (and flushed) as it happens.

Format, one JSON object per line::

    {"kimik3_session": 1, "created": <unix seconds>, "instructions": "...", "tools": ["bash", ...]}
    {"message": {<OpenAI-shaped message>}}
    {"compaction": {"messages": [<the whole history after compaction>], "summary": "..."}}

A crash loses at most the line being written: :func:`load_session` skips a torn last line.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from .._exceptions import SessionError
from ..types import Message, dump_message, to_message

__all__ = ["SessionWriter", "load_session"]


class SessionWriter:
    """Appends messages to a session file, one flushed line each.

    Attributes:
        path: the session file.
        new: True when this writer created the file (no earlier messages in it).
    """

    def __init__(self, path: str | os.PathLike[str], header: dict[str, Any] | None = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.new = not self.path.exists() or self.path.stat().st_size == 0
        if not self.new:
            _drop_torn_line(self.path)
        self._file: IO[str] = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - lives with the run
        if self.new:
            self._write({"kimik3_session": 1, "created": int(time.time()), **(header or {})})

    def _write(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._file.flush()

    def message(self, message: Message) -> None:
        """Append one message."""
        self._write({"message": dump_message(message)})

    def compaction(self, messages: Sequence[Message], summary: str) -> None:
        """Record that the history was replaced (compaction)."""
        self._write({"compaction": {"messages": [dump_message(m) for m in messages], "summary": summary}})

    def close(self) -> None:
        """Close the file."""
        self._file.close()


def _drop_torn_line(path: Path) -> None:
    """Cut a last line that a crash left unfinished (no newline), so appends start clean."""
    with open(path, "rb+") as f:
        data = f.read()
        if data.endswith(b"\n"):
            return
        f.truncate(data.rfind(b"\n") + 1)


def load_session(path: str | os.PathLike[str]) -> list[Message]:
    """The conversation recorded in a session file.

    Raises:
        SessionError: the file is missing, is not a kimik3 session, or has a corrupt line
            before its last one.
    """
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise SessionError(f"cannot read session {p}: {e}") from e
    if not lines:
        raise SessionError(f"{p} is empty, not a kimik3 session")
    messages: list[Message] = []
    for number, line in enumerate(lines, start=1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            if number == len(lines):  # torn last line: the crash happened while writing it
                break
            raise SessionError(f"{p}:{number}: corrupt line: {e}") from e
        if number == 1:
            if not isinstance(record, dict) or "kimik3_session" not in record:
                raise SessionError(f"{p} is not a kimik3 session file (no header)")
            continue
        if "message" in record:
            messages.append(to_message(record["message"]))
        elif "compaction" in record:
            messages = [to_message(m) for m in record["compaction"]["messages"]]
    return messages
