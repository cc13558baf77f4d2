"""Session logs: every message appended (and flushed) as it happens, read back by one reader.

Format, one JSON object per line (UTF-8, each line ends with ``\\n``)::

    {"kimik3_session": 1, "created": <unix seconds>, "id": "<32 hex digits, random>",
     "instructions": "...", "tools": ["bash", ...], "workspace": "/abs/dir",
     "sandbox": {"mode": "bwrap", ...}}                   (the run hooks' fields, e.g. the sandbox)
    {"message": {<OpenAI-shaped message>}, "usage": {<the model call's usage, assistant messages>},
     "cost": <its USD cost, when priced>, "finish_reason": "stop" | "length" | "tool_calls" | "interrupted"}
    {"compaction": {"messages": [<the whole history after compaction>], "summary": "..."}}
    {"<kind>": {...}}                                     a side record: :data:`SIDE_RECORDS`

Each kind and the module that writes it is listed in docs/architecture.md ("Session").

:class:`SessionLog` is the only reader of a session's bytes (issue 42): the header, the messages
with compactions applied, the approval journal of the last turn, every record by kind with its
line number. :func:`load_session`, :func:`load_turn`, :func:`read_session_records`, fork and
show, undo, skills, routing, approvals and ``eval replay`` all read through it, and
:class:`SessionWriter` keeps the log it parsed under its lock and extends it as it writes, so a
run reads its session once.

Crash safety (a ``kill -9`` at any byte), for every reader and the writer alike: a last line
without its ``\\n`` that is not a complete record (cut anywhere, also inside a multi-byte UTF-8
character) is a torn write and is dropped (the writer cuts it before appending). A last line that
is a complete record and only lacks the ``\\n`` is kept: the writer adds the newline. A file whose
only line is torn is an empty session only when that line holds the whole fixed header prefix
``{"kimik3_session"``; a shorter file that merely begins like it (``{``) is not a session and is
never cut. Any other odd line is a :class:`~kimik3.SessionError` naming its line number.

Where the bytes live is a :class:`~kimik3.agents.SessionStore` (:mod:`._session_store`): the JSONL
file by default (regular files only, never a blocking open of a FIFO, one writer at a time under
an exclusive ``flock``, no directory created), or any store of the user's.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple

from pydantic import ValidationError

from .._exceptions import KimiK3Error, SessionError
from ..types import AssistantMessage, Message, Usage, dump_message, to_message
from ._session_store import SessionStore, store_for

__all__ = ["JournalRecord", "SessionLog", "SessionRecord", "SessionWriter", "load_session", "load_turn",
           "read_session_records"]

SESSION_VERSION = 1
_HEADER_START = b'{"kimik3_session"'  # how every header line begins (json.dumps of the header)

Source = str | os.PathLike[str] | SessionStore
"""A session: its file's path, or a :class:`~kimik3.agents.SessionStore`."""


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


JOURNAL_RECORDS = frozenset({"deferred", "decision", "tool_started", "tool_finished", "input_required",
                             "input_responses"})
"""The approval journal (:mod:`._deferred`): a call deferred to a person, the decision on it, an
approved call about to run, a call that finished (before its result is appended with its
turn's), an MCP server's questions a call waits on and their answers (:mod:`._inputs`); each is
durable before the step it announces."""

SIDE_RECORDS = frozenset({"checkpoint", "child_session", "guardrail", "routing", "run_end", "run_start", "sandbox",
                          "skills", "undo", *JOURNAL_RECORDS})
"""Record kinds of :mod:`kimik3.harness`, the agent's ``run_start``, ``run_end`` (its stop reason), ``routing`` and
``guardrail`` (a trip), and the approval journal (:meth:`SessionWriter.record`); not part of the history."""


class JournalRecord(NamedTuple):
    """An approval-journal record of the session's last turn: its line number, kind
    (:data:`JOURNAL_RECORDS`) and body as read (validated by :mod:`._deferred`)."""

    line: int
    kind: str
    body: Any


_NO_HEADER: Mapping[str, Any] = MappingProxyType({})
"""The ``header`` of every record but the first: one shared empty mapping, not an empty dict
each (64 bytes a line; issue 44 point 2)."""


@dataclass(slots=True)  # one per line of a session a run holds: no __dict__ each (issue 44)
class SessionRecord:
    """One line of a session file.

    Attributes:
        line: its 1-based line number.
        raw: the line's text (without the newline). A writer's own ``message`` and side records
            do not keep it (a 1M-token run would hold its history a second time, as JSON: issue
            44): it is rendered again from the record's fields, the same bytes the writer wrote.
        index: the message's number (None for a header or a compaction).
        message: the message, for a ``message`` record.
        usage: the usage of the model call that wrote it (assistant messages of sessions that
            record it).
        compaction: the ``compaction`` record's body (``messages``, ``summary``).
        header: the header's fields (the first record; the others: an empty read-only mapping).
        cost: the model call's USD cost (assistant messages of priced runs).
        finish_reason: the model call's finish reason (assistant messages, when recorded).
        run_start: a ``run_start`` record's body (``tools``, ``model``, ``settings``): what the
            requests of the run that follows carried.
        skills: a ``skills`` record's body (:class:`kimik3.harness.Skills`: ``listed``,
            ``declared`` or ``loaded``); a fork keeps it.
        journal: an approval-journal record (:data:`JOURNAL_RECORDS`), as read.
        kind: the record's kind: ``"header"``, ``"message"``, ``"compaction"`` or a side
            record's key (:data:`SIDE_RECORDS`).
        body: a side record's body, as read (a ``run_start``'s or ``skills``' as a dict, checked
            when read); a ``compaction``'s body; None for the others.
    """

    line: int
    _raw: str | None  # None: a writer's message record, rendered again on demand (see ``raw``)
    index: int | None = None
    message: Message | None = None
    _usage: dict[str, Any] | None = None  # its JSON fields, as written (see ``usage``)
    header: Mapping[str, Any] = field(default_factory=lambda: _NO_HEADER)
    cost: float | None = None
    finish_reason: str | None = None
    kind: str = ""
    body: Any = None

    @property
    def usage(self) -> Usage | None:
        """The usage of the model call that wrote it (None: none recorded). Kept as its JSON
        fields, as written, and typed when read: a :class:`~kimik3.types.Usage` model a turn
        was ~0.4 KB more at 1M tokens (issue 44 point 2)."""
        return None if self._usage is None else Usage.model_validate(self._usage)

    # compaction, run_start, skills and journal are read off kind and body, not kept beside them
    # (four slots and a JournalRecord a line: ~0.14 MB at 1M tokens, issue 44 point 2)
    @property
    def compaction(self) -> dict[str, Any] | None:
        """A ``compaction`` record's body (``messages``, ``summary``), else None."""
        return self.body if self.kind == "compaction" else None

    @property
    def run_start(self) -> dict[str, Any] | None:
        """A ``run_start`` record's body (``tools``, ``model``, ``settings``), else None."""
        return self.body if self.kind == "run_start" else None

    @property
    def skills(self) -> dict[str, Any] | None:
        """A ``skills`` record's body, else None."""
        return self.body if self.kind == "skills" else None

    @property
    def journal(self) -> JournalRecord | None:
        """An approval-journal record (:data:`JOURNAL_RECORDS`) as read, else None."""
        return JournalRecord(self.line, self.kind, self.body) if self.kind in JOURNAL_RECORDS else None

    @property
    def raw(self) -> str:
        """The line's text (without the newline)."""
        if self._raw is not None:
            return self._raw
        if self.message is None:  # a writer's side record
            return _line({self.kind: self.body}).decode("utf-8")
        return _line(_message_fields(self.message, self._usage, self.cost, self.finish_reason)).decode("utf-8")


def _side(record: dict[str, Any]) -> bool:
    """Whether ``record`` is a side record (``{kind: body}``, :data:`SIDE_RECORDS`)."""
    return len(record) == 1 and next(iter(record)) in SIDE_RECORDS


def _message_fields(message: Message, usage: dict[str, Any] | None, cost: float | None,
                    finish_reason: str | None) -> dict[str, Any]:
    """A ``message`` record's fields, as the writer writes them (``usage``: its JSON fields)."""
    record: dict[str, Any] = {"message": dump_message(message)}
    if usage is not None:
        record["usage"] = usage
    if cost is not None:
        record["cost"] = cost
    if finish_reason is not None:
        record["finish_reason"] = finish_reason
    return record


def _line(record: dict[str, Any]) -> bytes:
    """A record's line (without the newline): JSON in UTF-8; text that is not valid Unicode (a
    lone surrogate: a file name that is not UTF-8) as JSON's ``\\udcXX`` escape, which
    ``json.loads`` reads back as it was."""
    try:
        return json.dumps(record, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(record).encode("ascii")


def _message_record(number: int, raw: str | None, data: dict[str, Any], index: int, message: Message | None,
                    usage: Usage | None = None) -> SessionRecord:
    """A ``message`` record (its usage, cost and finish reason checked); ``message`` and
    ``usage``: the typed ones when the writer has them (else parsed from ``data``, the usage
    only to check it: the record keeps its JSON fields)."""
    if usage is None and "usage" in data:
        Usage.model_validate(data["usage"])
    cost, finish = data.get("cost"), data.get("finish_reason")
    if cost is not None and (isinstance(cost, bool) or not isinstance(cost, (int, float))):
        raise TypeError(f"cost must be a number, got {cost!r:.40}")
    if finish is not None and not isinstance(finish, str):
        raise TypeError(f"finish_reason must be a string, got {finish!r:.40}")
    message = message if message is not None else to_message(data["message"])
    return SessionRecord(number, raw, index, message, data.get("usage"), cost=cost, finish_reason=finish,
                         kind="message")


class SessionLog:
    """A session as read: the only code that reads a session's bytes (see the module doc).

    Build one with :meth:`read` (a reader: no lock), or take :attr:`SessionWriter.log` (the log
    a writer parsed under its lock and extends as it writes).

    Attributes:
        path: the session's file (or its store's name).
        header: the header's fields ({} for a session not begun).
        records: every record in order, the header first (:class:`SessionRecord`).
        messages: the history, compactions applied (a list of its own).
        journal: the approval journal of the last turn: the :data:`JOURNAL_RECORDS` after the last
            assistant message (a new turn, or a compaction, starts a new journal: call ids repeat
            across turns).
        size: the byte length of the valid part (a torn last line excluded; 0 when not even
            the header was finished).
        needs_newline: the valid part ends with a complete record that lacks its ``\\n``.

    Raises:
        SessionError: not a kimik3 session, or an odd line (``path:line: what is wrong``).
    """

    def __init__(self, path: Path, data: bytes) -> None:
        self.path = path
        self.header: dict[str, Any] = {}
        self.records: list[SessionRecord] = []
        self.messages: list[Message] = []
        self.journal: list[JournalRecord] = []
        self._indexed = 0  # message records so far (their numbers, as fork and show count them)
        lines = data.split(b"\n")
        complete, tail = lines[:-1], lines[-1]  # tail: the bytes after the last "\n" (b"" if none)
        self.size, self.needs_newline = len(data) - len(tail), False
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
                self.size, self.needs_newline = len(data), True
        if complete:
            try:
                header = _record(path, 1, complete[0])
            except SessionError as e:
                raise SessionError(f"{path} is not a kimik3 session file (line 1 is not a session header)") from e
            _check_header(path, header)
        for raw in complete:
            self.add(_record(path, len(self.records) + 1, raw) if self.records else header, raw)

    @classmethod
    def read(cls, session: Source) -> SessionLog:
        """The log of a session (a path or a :class:`~kimik3.agents.SessionStore`), read once.

        Raises:
            SessionError: missing or unreadable, not a regular file (a FIFO is refused without
                blocking), empty, not a kimik3 session, or an odd line.
        """
        store = store_for(session)
        log = cls(store.path, store.read())
        if log.size == 0:
            raise SessionError(f"{store.path} is empty, not a kimik3 session")
        return log

    def add(self, record: dict[str, Any], raw: bytes | str | None, message: Message | None = None,
            usage: Usage | None = None) -> SessionRecord:
        """Take in the next record (the writer's, as it writes it): the history and the journal
        follow it. ``message`` and ``usage``: the typed message of a ``message`` record and its
        usage, when the caller has them. ``raw`` None (a writer's ``message`` record, with its
        ``message``, or side record): the line is not kept (:attr:`SessionRecord.raw` renders it
        again).

        Raises:
            SessionError: a record that is not valid (naming its line).
        """
        number = len(self.records) + 1
        if raw is None and (message is None or "message" not in record) and not _side(record):
            raw = _line(record)  # only a message record with its typed message is rendered again
        text = raw if isinstance(raw, str) or raw is None else raw.decode("utf-8")
        if number == 1:
            self.header = record
            entry = SessionRecord(1, text, header=record, kind="header")
        else:
            entry = self._entry(number, text, record, message, usage)
        self.records.append(entry)
        return entry

    def _entry(self, number: int, text: str | None, record: dict[str, Any], message: Message | None,
               usage: Usage | None = None) -> SessionRecord:
        kind = next(iter(record), "")
        try:
            if "message" in record:
                entry = _message_record(number, text, record, self._indexed, message, usage)
                assert entry.message is not None
                self._indexed += 1
                self.messages.append(entry.message)
                if isinstance(entry.message, AssistantMessage):
                    self.journal = []
                return entry
            if "compaction" in record:
                body = record["compaction"]
                self.messages = [to_message(m) for m in body["messages"]]
                self.journal = []
                return SessionRecord(number, text, kind="compaction", body=dict(body))
            if len(record) == 1 and kind in SIDE_RECORDS:
                body = dict(record[kind]) if kind in ("run_start", "skills") else record[kind]
                entry = SessionRecord(number, text, kind=kind, body=body)
                if kind in JOURNAL_RECORDS:
                    self.journal.append(JournalRecord(number, kind, body))
                return entry
        except (KimiK3Error, ValidationError, KeyError, TypeError, ValueError) as e:
            raise SessionError(f"{self.path}:{number}: not a valid session record: {e}") from e
        raise SessionError(f"{self.path}:{number}: unknown record (keys: {', '.join(sorted(map(str, record)))})")

    def workspace(self) -> Path | None:
        """The folder the session works in, as its header records it (``"workspace"``, an
        absolute path: :class:`~kimik3.harness.CodingHarness` writes it; issue 40), resolved
        (``..`` and symlinks), so it compares with any spelling of the same folder; None when the
        header records none (a session of the SDK without the harness, or an older one).

        Raises:
            SessionError: a ``"workspace"`` that is not an absolute path text (a malformed header).
        """
        if "workspace" not in self.header:
            return None
        value = self.header["workspace"]
        if not isinstance(value, str) or not os.path.isabs(value) or "\0" in value:
            raise SessionError(f"{self.path}:1: malformed session header: \"workspace\" must be an absolute folder "
                               f"path, got {value!r:.80}")
        return Path(value).resolve()

    def records_of(self, *kinds: str) -> list[SessionRecord]:
        """The records of these kinds (``"message"``, ``"checkpoint"``, ...), in order."""
        return [r for r in self.records if r.kind in kinds]

    def bodies(self, kind: str) -> list[tuple[int, Any]]:
        """(line number, body) of the side records of ``kind``, in order."""
        return [(r.line, r.body) for r in self.records if r.kind == kind]


def load_session(path: Source) -> list[Message]:
    """The conversation recorded in a session (see the module doc for the rules).

    Args:
        path: the JSONL session file (a regular file), or a :class:`~kimik3.agents.SessionStore`.

    Returns:
        The messages, compactions applied; a torn last line is left out.

    Raises:
        SessionError: missing or unreadable, not a regular file (a FIFO is refused without
            blocking), not a kimik3 session, or an odd line (``path:line: what is wrong``).
    """
    return SessionLog.read(path).messages


def load_turn(path: Source) -> tuple[list[Message], list[JournalRecord]]:
    """:func:`load_session`'s history and the approval journal of its last turn (the
    :data:`JOURNAL_RECORDS` after the last assistant message, as read: :mod:`._deferred`
    validates them). Reads only; raises as :func:`load_session`."""
    log = SessionLog.read(path)
    return log.messages, log.journal


def read_session_records(path: Source) -> list[SessionRecord]:
    """Every record of a session, in order (the header first). Reads only; the rules and errors
    are :func:`load_session`'s (:class:`SessionLog`)."""
    return SessionLog.read(path).records


class SessionWriter:
    """Appends records to a session, one whole line each, holding the store's exclusive lock.

    Args:
        path: the session file (created, with a header line, when missing or empty, if
            ``create``; its directory must exist), or a :class:`~kimik3.agents.SessionStore`.
        header: extra header fields for a new session (``instructions``, ``tools``); a new
            session's header gets a random ``id`` (32 hex digits) unless ``header`` gives one.
        create: False: the session must exist already (``Agent.resume``, approvals, undo).

    Attributes:
        path: the file (or the store's name).
        store: where the bytes live.
        log: the :class:`SessionLog` read under the lock, extended by every record written
            (``records(kind)``, the history and the journal are served from it: one read a run).
        header: the session's header (the first record), as read or written.
        new: True when this writer created the session (wrote its header).

    Raises:
        SessionError: the directory does not exist; not a regular file; another writer holds
            the file (the message names it: ``pid N on host H``; a lock of this process is
            waited for up to 2 s first: a tool's subprocess forked meanwhile shares it until its
            exec); an existing file that is not a kimik3 session or has an odd line, or none
            with ``create=False`` (nothing is appended then); a write that fails (a full disk: the
            file is left as it was, a new one not left behind empty).
    """

    def __init__(self, path: Source, header: dict[str, Any] | None = None, *, create: bool = True) -> None:
        self.store = store_for(path)
        self.path = self.store.path
        self._open = False
        data = self.store.acquire(create=create)
        self._open = True
        try:
            self.log = SessionLog(self.path, data)
            if self.log.size < len(data):
                self.store.truncate(self.log.size)  # the torn last line of a crash
            if self.log.needs_newline:
                self.store.append(b"\n")  # complete the last record instead of dropping it
            self.new = self.log.size == 0
            if self.new and not create:
                raise SessionError(f"{self.path} is empty, not a kimik3 session")
            if self.new:
                self._write({"kimik3_session": SESSION_VERSION, "created": int(time.time()), "id": uuid.uuid4().hex,
                             **(header or {})})
            self.header = self.log.header
        except BaseException:
            self.close()
            raise

    @property
    def messages(self) -> list[Message]:
        """The history so far (compactions applied), from :attr:`log`."""
        return self.log.messages

    @property
    def journal(self) -> list[JournalRecord]:
        """The approval journal of the last turn so far, from :attr:`log`."""
        return self.log.journal

    @classmethod
    def for_run(cls, path: Source, header: dict[str, Any], history: Sequence[Message]) -> SessionWriter:
        """The writer of a run that continues ``history`` in ``path``: a new session gets the
        header and ``history`` first; an existing one must hold exactly ``history``'s length.

        Raises:
            SessionError: as the constructor; or the file holds another number of messages
                (another run may have written it since it was read; nothing is written then).
        """
        writer = cls(path, header)
        writer.continues(history)
        return writer

    def continues(self, history: Sequence[Message]) -> None:
        """Check that a run's ``history`` is this session's (a new session gets it written
        first); else close and raise SessionError (see :meth:`for_run`)."""
        if self.new:  # a new session file for an existing conversation: record it first
            for m in history:
                self.message(m)
        elif len(self.messages) != len(history):  # read under the lock: appending would mix two
            self.close()
            raise SessionError(
                f"session {self.path} holds {len(self.messages)} messages, but this run continues a "
                f"conversation of {len(history)}; continue the file's own with Agent.resume (another run "
                "may have written it since it was read)"
            )

    def _write(self, record: dict[str, Any], message: Message | None = None, usage: Usage | None = None) -> None:
        data = _line(record)
        self.store.append(data + b"\n")
        # a message or side record's line is not kept in memory (rendered again if asked:
        # SessionRecord.raw)
        self.log.add(record, None if message is not None or _side(record) else data, message, usage)

    def message(self, message: Message, usage: Usage | None = None, *, cost: float | None = None,
                finish_reason: str | None = None) -> None:
        """Append one message (with the usage, USD cost and finish reason of the model call
        that wrote it, if any)."""
        fields = None if usage is None else usage.model_dump(exclude_none=True)
        self._write(_message_fields(message, fields, cost, finish_reason), message, usage)

    def compaction(self, messages: Sequence[Message], summary: str) -> None:
        """Record that the history was replaced (compaction)."""
        self._write({"compaction": {"messages": [dump_message(m) for m in messages], "summary": summary}})

    def record(self, kind: str, data: dict[str, Any]) -> None:
        """Append a ``{kind: data}`` side record (:data:`SIDE_RECORDS`: checkpoints, child
        sessions, the journal, ...). Text that is not valid Unicode (a lone surrogate: a file
        name decoded with ``surrogateescape``) is written as JSON's ``\\udcXX`` escape, so the
        line is still UTF-8 and ``json.loads`` gives the same string back.

        Raises:
            SessionError: ``kind`` is not a side record kind (nothing is written).
        """
        if kind not in SIDE_RECORDS:
            raise SessionError(f"{kind!r:.40} is not a session record kind ({', '.join(sorted(SIDE_RECORDS))})")
        self._write({kind: data})

    def records(self, kind: str) -> list[tuple[int, Any]]:
        """(line number, body) of the session's ``{kind: body}`` records so far, in order,
        served from :attr:`log` (a hook reading what earlier runs recorded)."""
        return self.log.bodies(kind)

    def close(self) -> None:
        """Release the lock (idempotent)."""
        if self._open:
            self.store.release()
            self._open = False
