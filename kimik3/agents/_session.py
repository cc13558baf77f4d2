"""JSONL session files: every message appended (and flushed) as it happens.

Format, one JSON object per line (UTF-8, each line ends with ``\\n``)::

    {"kimik3_session": 1, "created": <unix seconds>, "id": "<32 hex digits, random>",
     "instructions": "...", "tools": ["bash", ...],
     "sandbox": {"mode": "bwrap", ...}}                   (the run hooks' fields, e.g. the sandbox)
    {"message": {<OpenAI-shaped message>}, "usage": {<the model call's usage, assistant messages>},
     "cost": <its USD cost, when priced>, "finish_reason": "stop" | "length" | "tool_calls"}
    {"run_start": {"tools": [<the tool declarations of the prompt's head>], "model": "...",
                   "settings": {<the run's ModelSettings>}}}   (once per run: what its requests carried)
    {"compaction": {"messages": [<the whole history after compaction>], "summary": "..."}}
    {"routing": {"key": "...", "parent": "..." | null}}   (an explicit routing key; agents/_routing.py)
    {"checkpoint": {...}} / {"child_session": {...}} / {"undo": {...}} / {"sandbox": {...}} / {"skills": {...}}
                                                          (kimik3.harness; skipped here)
    {"deferred": {"call_id": "...", "name": "...", "arguments": {...}}}     a call the approval hook deferred
    {"decision": {"call_id": "...", "decision": "allow" | "deny" | "edit", "reason": "...", "arguments": {...}}}
    {"tool_started": {"call_id": "...", "name": "..."}}   an approved call is about to run (before it does)
                          (the approval journal of the last turn: :mod:`kimik3.agents._deferred`)

Crash safety (a ``kill -9`` at any byte): a last line without its ``\\n`` that is not a complete
record (cut anywhere, also inside a multi-byte UTF-8 character) is a torn write and is dropped,
by :func:`load_session` and by :class:`SessionWriter` (which cuts it before appending). A last
line that is a complete record and only lacks the ``\\n`` is kept by both: the writer adds the
newline. A file whose only line is torn is an empty session only when that line holds the whole
fixed header prefix ``{"kimik3_session"``; a shorter file that merely begins like it (``{``) is
not a session and is never cut. Any other odd line is a :class:`~kimik3.SessionError` naming its line number.

One writer at a time: :class:`SessionWriter` holds an exclusive ``flock`` on the file while it
lives; a second writer (another process, or another run in this one) gets a SessionError naming
the holder. Only regular files are read or written (a FIFO or a device is refused, never opened
for blocking I/O), nothing is appended to a file that is not a kimik3 session, and no directory
is created.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import stat
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import ValidationError

from .._exceptions import KimiK3Error, SessionError
from ..types import AssistantMessage, Message, Usage, dump_message, to_message

__all__ = ["JournalRecord", "SessionWriter", "load_session", "load_turn"]

SESSION_VERSION = 1
_HEADER_START = b'{"kimik3_session"'  # how every header line begins (json.dumps of the header)


def _open_regular(path: Path, flags: int) -> int:
    """``os.open`` that never blocks on a FIFO and refuses anything but a regular file."""
    try:
        fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except FileNotFoundError as e:
        where = "directory" if not path.parent.is_dir() else "file"
        raise SessionError(f"cannot open session {path}: no such {where}") from e
    except OSError as e:  # ENXIO: a FIFO with no reader; EISDIR; EACCES; ELOOP: O_NOFOLLOW on a symlink
        if e.errno == errno.ELOOP and flags & os.O_NOFOLLOW:
            raise SessionError(f"{path} is a symlink; a session written must be a regular file (issue 40: a "
                               "planted link would be followed)") from e
        raise SessionError(f"cannot open session {path}: {e.strerror or e}") from e
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise SessionError(f"{path} is not a regular file; a session must be one")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_all(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def _record(path: Path, number: int, raw: bytes) -> dict[str, Any]:
    """Line ``number`` decoded (UTF-8, JSON, an object), else SessionError naming it."""
    try:
        record = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise SessionError(f"{path}:{number}: not UTF-8 text ({e.reason} at byte {e.start})") from e
    except (ValueError, RecursionError) as e:
        raise SessionError(f"{path}:{number}: not a JSON line: {e}") from e
    if not isinstance(record, dict):
        raise SessionError(f"{path}:{number}: expected a JSON object, got {type(record).__name__}")
    return record


def _check_header(path: Path, record: dict[str, Any]) -> None:
    version = record.get("kimik3_session")
    if version is None:
        raise SessionError(f"{path} is not a kimik3 session file (line 1 is not a session header)")
    if type(version) is not int or version != SESSION_VERSION:  # true == 1 in Python, not here
        raise SessionError(f"{path}: unsupported session version {version!r} (this kimik3 reads {SESSION_VERSION})")


JOURNAL_RECORDS = frozenset({"deferred", "decision", "tool_started"})
"""The approval journal (:mod:`._deferred`): a call deferred to a person, the decision on it, an
approved call about to run; each is durable before the step it announces."""

SIDE_RECORDS = frozenset({"checkpoint", "child_session", "routing", "run_start", "sandbox", "skills", "undo",
                          *JOURNAL_RECORDS})
"""Record kinds of :mod:`kimik3.harness`, the agent's ``run_start`` and ``routing``, and the approval journal
(:meth:`SessionWriter.record`); not part of the history."""


class JournalRecord(NamedTuple):
    """An approval-journal record of the session's last turn: its line number, kind
    (:data:`JOURNAL_RECORDS`) and body as read (validated by :mod:`._deferred`)."""

    line: int
    kind: str
    body: Any


class _Parsed(NamedTuple):
    messages: list[Message]
    keep: int  # the byte length of the valid part (a torn last line excluded)
    needs_newline: bool  # the kept part ends with a complete record that lacks its newline
    journal: list[JournalRecord]  # the journal records after the last assistant message


def _apply(path: Path, number: int, record: dict[str, Any], messages: list[Message]) -> list[Message]:
    """The history after one record (``messages`` extended, or replaced by a compaction)."""
    try:
        if "message" in record:
            messages.append(to_message(record["message"]))
            return messages
        if "compaction" in record:
            return [to_message(m) for m in record["compaction"]["messages"]]
        if len(record) == 1 and next(iter(record)) in SIDE_RECORDS:
            return messages
    except (KimiK3Error, ValidationError, KeyError, TypeError, ValueError) as e:
        raise SessionError(f"{path}:{number}: not a valid session record: {e}") from e
    raise SessionError(f"{path}:{number}: unknown record (keys: {', '.join(sorted(map(str, record)))})")


def _parse(path: Path, data: bytes) -> _Parsed:
    """The history in a session file's bytes.

    Returns:
        ``(messages, keep, needs_newline, journal)``: ``keep`` is the byte length of the valid
        part (a torn last line excluded; 0 when not even the header was finished),
        ``needs_newline`` is True when the kept part ends with a complete record that lacks its
        ``\\n``; ``journal``: the approval-journal records after the last assistant message
        (a new turn, or a compaction, starts a new journal: call ids repeat across turns).

    Raises:
        SessionError: not a kimik3 session, or an odd line (its number is named).
    """
    lines = data.split(b"\n")
    complete, tail = lines[:-1], lines[-1]  # tail: the bytes after the last "\n" (b"" if none)
    keep, needs_newline = len(data) - len(tail), False
    if tail:
        try:
            json.loads(tail.decode("utf-8"))
        except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
            # A torn header must hold the whole fixed prefix: a file of a few bytes that merely
            # begin like it ("{") is someone else's, and is never truncated into a session.
            if not complete and not tail.startswith(_HEADER_START):
                raise SessionError(f"{path} is not a kimik3 session file (no header line)") from None
            # else torn by a crash while it was written: dropped
        else:  # a complete record that only lacks its newline: kept
            complete.append(tail)
            keep, needs_newline = len(data), True
    if not complete:
        return _Parsed([], 0, False, [])
    try:
        header = _record(path, 1, complete[0])
    except SessionError as e:
        raise SessionError(f"{path} is not a kimik3 session file (line 1 is not a session header)") from e
    _check_header(path, header)
    messages: list[Message] = []
    journal: list[JournalRecord] = []
    for number, raw in enumerate(complete[1:], start=2):
        record = _record(path, number, raw)
        messages = _apply(path, number, record, messages)
        kind = next(iter(record))
        if kind in JOURNAL_RECORDS:
            journal.append(JournalRecord(number, kind, record[kind]))
        elif "compaction" in record or ("message" in record and isinstance(messages[-1], AssistantMessage)):
            journal = []
    return _Parsed(messages, keep, needs_newline, journal)


def load_session(path: str | os.PathLike[str]) -> list[Message]:
    """The conversation recorded in a session file (see the module doc for the rules).

    Args:
        path: the JSONL session file (a regular file).

    Returns:
        The messages, compactions applied; a torn last line is left out.

    Raises:
        SessionError: missing or unreadable, not a regular file (a FIFO is refused without
            blocking), not a kimik3 session, or an odd line (``path:line: what is wrong``).
    """
    messages, _, _ = read_session(Path(path))
    return messages


def load_turn(path: str | os.PathLike[str]) -> tuple[list[Message], list[JournalRecord]]:
    """:func:`load_session`'s history and the approval journal of its last turn (the
    ``deferred`` / ``decision`` / ``tool_started`` records after the last assistant message, as
    read: :mod:`._deferred` validates them). Reads only; raises as :func:`load_session`."""
    parsed, _ = _read_parsed(Path(path))
    return parsed.messages, parsed.journal


def read_session(p: Path) -> tuple[list[Message], int, bytes]:
    """Read and validate a session file: its messages, the byte length of its complete lines
    (a torn last line is left out) and its bytes. Raises as :func:`load_session`."""
    parsed, data = _read_parsed(p)
    return parsed.messages, parsed.keep, data


def _read_parsed(p: Path) -> tuple[_Parsed, bytes]:
    fd = _open_regular(p, os.O_RDONLY)
    try:
        data = _read_all(fd)
    except OSError as e:
        raise SessionError(f"cannot read session {p}: {e}") from e
    finally:
        os.close(fd)
    parsed = _parse(p, data)
    if parsed.keep == 0:
        raise SessionError(f"{p} is empty, not a kimik3 session")
    return parsed, data


def _lock_pid(fd: int) -> int | None:
    """The pid that took the flock on ``fd``'s file, from ``/proc/locks`` (Linux); None: unknown."""
    st = os.fstat(fd)
    ident = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            for line in f:
                fields = line.split()
                if len(fields) > 5 and fields[1] == "FLOCK" and fields[5] == ident:
                    return int(fields[4])
    except (OSError, ValueError):
        pass
    return None


def _lock_holder(pid: int | None) -> str:
    """``pid N on host H`` for the holder :func:`_lock_pid` found."""
    if pid is None:
        return "another process"
    mine = " (this process)" if pid == os.getpid() else ""
    return f"pid {pid}{mine} on host {socket.gethostname()}"


_FORK_GRACE_S = 2.0
"""How long a lock that this process took (or nobody visibly holds) is waited for: a child
forked by another thread of this process (a tool's subprocess) shares every open file, the
lock of a session just closed included, until it execs and its close-on-exec files close."""


def _lock(fd: int, path: Path) -> None:
    """Take the exclusive flock on ``fd`` (see :class:`SessionWriter`), or raise SessionError."""
    deadline = time.monotonic() + _FORK_GRACE_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise SessionError(f"cannot lock session {path}: {e}") from e
        pid = _lock_pid(fd)
        if pid not in (None, os.getpid()) or time.monotonic() > deadline:
            raise SessionError(f"session {path} is in use by {_lock_holder(pid)}; one run may write a session "
                               "at a time")
        time.sleep(0.01)


class SessionWriter:
    """Appends messages to a session file, one flushed line each, holding an exclusive lock.

    Args:
        path: the session file. Created (with a header line) when missing or empty; its
            directory must exist.
        header: extra header fields for a new file (``instructions``, ``tools``); a new file's
            header gets a random ``id`` (32 hex digits) unless ``header`` gives one.

    Attributes:
        path: the file.
        header: the file's header (the first record), as read or written.
        new: True when this writer created the session (wrote its header).
        messages: the history already in the file when it was opened (read under the lock).
        journal: the approval journal of that history's last turn when it was opened
            (:func:`load_turn`).

    Raises:
        SessionError: the directory does not exist; not a regular file; another writer holds
            the file (the message names it: ``pid N on host H``; a lock of this process is
            waited for up to 2 s first: a tool's subprocess forked meanwhile shares it until its
            exec); an existing file that is not
            a kimik3 session or has an odd line (nothing is appended then).
    """

    def __init__(self, path: str | os.PathLike[str], header: dict[str, Any] | None = None) -> None:
        self.path = Path(path)
        self._fd = _open_regular(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW)
        try:
            _lock(self._fd, self.path)
            data = _read_all(self._fd)
            self.messages, keep, needs_newline, self.journal = _parse(self.path, data)
            if keep < len(data):
                os.ftruncate(self._fd, keep)  # the torn last line of a crash
            if needs_newline:
                self._write_bytes(b"\n")  # complete the last record instead of dropping it
            self.new = keep == 0
            if self.new:
                self.header = {"kimik3_session": SESSION_VERSION, "created": int(time.time()), "id": uuid.uuid4().hex,
                               **(header or {})}
                self._write(self.header)
            else:
                self.header = _record(self.path, 1, data.split(b"\n", 1)[0])
        except BaseException:
            os.close(self._fd)
            raise

    @classmethod
    def for_run(cls, path: str | os.PathLike[str], header: dict[str, Any], history: Sequence[Message]) -> SessionWriter:
        """The writer of a run that continues ``history`` in ``path``: a new file gets the
        header and ``history`` first; an existing one must hold exactly ``history``'s length.

        Raises:
            SessionError: as the constructor; or the file holds another number of messages
                (another run may have written it since it was read; nothing is written then).
        """
        writer = cls(path, header)
        if writer.new:  # a new session file for an existing conversation: record it first
            for m in history:
                writer.message(m)
        elif len(writer.messages) != len(history):  # read under the lock: appending would mix two
            writer.close()
            raise SessionError(
                f"session {writer.path} holds {len(writer.messages)} messages, but this run continues a "
                f"conversation of {len(history)}; continue the file's own with Agent.resume (another run "
                "may have written it since it was read)"
            )
        return writer

    def _write_bytes(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]

    def _write(self, record: dict[str, Any]) -> None:
        text = json.dumps(record, ensure_ascii=False)
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate (a file name that is not UTF-8): JSON's \udcXX
            data = json.dumps(record).encode("ascii")  # escape, which json.loads reads back as it was
        self._write_bytes(data + b"\n")

    def message(self, message: Message, usage: Usage | None = None, *, cost: float | None = None,
                finish_reason: str | None = None) -> None:
        """Append one message (with the usage, USD cost and finish reason of the model call
        that wrote it, if any)."""
        record: dict[str, Any] = {"message": dump_message(message)}
        if usage is not None:
            record["usage"] = usage.model_dump(exclude_none=True)
        if cost is not None:
            record["cost"] = cost
        if finish_reason is not None:
            record["finish_reason"] = finish_reason
        self._write(record)

    def compaction(self, messages: Sequence[Message], summary: str) -> None:
        """Record that the history was replaced (compaction)."""
        self._write({"compaction": {"messages": [dump_message(m) for m in messages], "summary": summary}})

    def record(self, kind: str, data: dict[str, Any]) -> None:
        """Append a ``{kind: data}`` record (checkpoints, child sessions); :func:`load_session`
        skips kinds it does not know. Text that is not valid Unicode (a lone surrogate: a file
        name decoded with ``surrogateescape``) is written as JSON's ``\\udcXX`` escape, so the
        line is still UTF-8 and ``json.loads`` gives the same string back."""
        self._write({kind: data})

    def records(self, kind: str) -> list[tuple[int, Any]]:
        """(line number, body) of the file's ``{kind: body}`` records so far, in order, read
        through the writer's own descriptor (a hook reading what earlier runs recorded)."""
        start = json.dumps({kind: 0})[:-2].encode("utf-8")  # b'{"kind": '
        out = []
        for number, line in enumerate(_read_all(self._fd).split(b"\n"), start=1):
            if line.startswith(start):
                record = _record(self.path, number, line)
                if len(record) == 1:
                    out.append((number, record[kind]))
        return out

    def close(self) -> None:
        """Release the lock and close the file (idempotent)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
