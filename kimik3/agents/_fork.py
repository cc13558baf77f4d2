"""Fork and show recorded sessions: continue a run from any message as a new session (the
original file is only read), and print a session as a transcript a person can read.

Messages are numbered in the order their ``message`` records appear in the file, from 0; a
``compaction`` record is shown, not numbered. Forking at message N keeps the file's records up to
and including that message (earlier compactions included), so :func:`load_session` of the fork
is the history exactly as it was when message N was written.
"""

from __future__ import annotations

import json
import os
import shlex
import time
import uuid
from pathlib import Path
from typing import Any

from .._exceptions import UserError
from .._pricing import format_usd
from .._text import counted, escaped, printable, shown_call, shown_text
from ..types import AssistantMessage, ImagePart, TextPart, ToolCall, ToolMessage, Usage
from ._approval import pending_call
from ._deferred import pending_approvals, pending_inputs
from ._session import JournalRecord, SessionLog, SessionRecord, read_session_records

__all__ = ["SessionRecord", "fork_session", "format_session", "read_session_records"]


def fork_session(
    path: str | os.PathLike[str], at: int, to: str | os.PathLike[str]
) -> Path:
    """Write a new session holding ``path``'s history up to and including message ``at``.

    The original file is opened for reading only (its bytes never change). The fork's header is
    the original's with ``forked_from: {"session": <path>, "at": <index>}``, a new ``created``
    and a new ``id`` (a conversation of its own: its own routing key, agents/_routing.py); it
    is written to a temporary file and renamed into place. Continue it with
    :meth:`Agent.resume` (``kimik3 resume --at N`` does both). Forking at an assistant message
    whose tool calls have no result yet is allowed: resuming answers those calls with an error
    first.

    Args:
        path: the recorded session.
        at: the message number (as :func:`format_session` prints it; negative counts from the
            end, -1 the last message).
        to: the new session file (must not exist, or be empty).

    Returns:
        The new file's path.

    Raises:
        SessionError: ``path`` is not a readable session.
        UserError: ``at`` is out of range, or ``to`` already holds something.
    """
    records = read_session_records(path)
    messages = [r for r in records if r.index is not None]
    if not -len(messages) <= at < len(messages):
        held = f"messages 0..{len(messages) - 1}" if messages else "no messages"
        raise UserError(f"message {at} is out of range: {path} holds {held}")
    target = messages[at]
    assert target.index is not None
    out = Path(to)
    if out.exists() and out.stat().st_size > 0:
        raise UserError(f"{out} already exists: fork into a new file")
    if out.resolve() == Path(path).resolve():
        raise UserError("a fork is written to a new file, never over its original")
    header = {**records[0].header, "created": int(time.time()), "id": uuid.uuid4().hex,
              "forked_from": {"session": str(Path(path).resolve()), "at": target.index}}  # fmt: skip
    lines = [json.dumps(header, ensure_ascii=False)] + [r.raw for r in records[1:] if r.line <= target.line]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    os.replace(tmp, out)
    return out


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(p.text if isinstance(p, TextPart) else "[image]" if isinstance(p, ImagePart)
                   else f"[{getattr(p, 'type', 'part')}]" for p in content)  # fmt: skip


def _clip(text: str, max_lines: int | None, indent: str) -> list[str]:
    lines = text.splitlines() or [""]
    if max_lines is not None and len(lines) > max_lines:
        lines = [*lines[:max_lines], f"... ({len(lines) - max_lines} more lines)"]
    return [indent + line for line in lines]


def _usage(u: Usage, cost: float | None = None) -> str:
    cached = ""
    if u.prompt_tokens_details is not None:
        share = f" ({u.cached_tokens / u.prompt_tokens:.0%})" if u.prompt_tokens else ""
        cached = f", {u.cached_tokens} cached{share}"
        if u.prompt_tokens_details.cache_write_tokens is not None:  # billed apart (K3.1): shown apart
            long = f" ({u.cache_write_1h_tokens} for 1h)" if u.cache_write_1h_tokens else ""
            cached += f", {u.cache_write_tokens} written to cache{long}"
    price = f", {format_usd(cost)}" if cost is not None else ""
    return f"usage: {u.prompt_tokens} prompt{cached} + {u.completion_tokens} completion tokens{price}"


def _skills_line(body: dict[str, Any]) -> list[str]:
    """``--- skills listed: a, b`` / ``--- skills declared with load_skill_2: a, c`` / ``--- skill
    loaded: a`` for a ``skills`` record."""
    for kind in ("listed", "declared"):
        if isinstance(body.get(kind), list):
            names = [str(e.get("name")) for e in body[kind] if isinstance(e, dict)]
            tool = f" with {body['tool']}" if isinstance(body.get("tool"), str) else ""
            return [f"--- skills {kind}{tool}: {', '.join(names) or 'none'}"]
    loaded = body.get("loaded")
    return [f"--- skill loaded: {loaded.get('name')}"] if isinstance(loaded, dict) else []


WIDTH = 100
"""Characters of a transcript line that wraps (a tool call)."""

MAX_UNDONE = 10
"""Paths an undo line names (the rest counted)."""


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


def _call_line(head: str, arguments: str, ident: str, indent: str) -> str:
    """``head`` (``-> bash(``), the raw ``arguments`` as :func:`~kimik3._text.shown_text` shows
    them, ``)`` right after their last character (never on a line of its own: the call reads as
    one unit), then ``  ident`` (``id=call_1``) on that line when it fits in :data:`WIDTH`
    characters, else on the next line, ``indent`` ed."""
    shown = shown_text(arguments, width=WIDTH - 1, indent=indent, start=len(head))  # room for the ")"
    last = shown.rsplit("\n", 1)
    used = len(last[-1]) + (len(head) if len(last) == 1 else 0) + 1
    return f"{head}{shown})" + (f"  {ident}" if used + 2 + len(ident) <= WIDTH else f"\n{indent}{ident}")


def _undo_line(body: Any) -> str:
    """``--- undone: the file changes after turn 0 (kimik3 undo --to 0): a.py, b.py`` for an
    ``undo`` record (:mod:`kimik3.harness._undo` writes ``{"to": N, "paths": [...]}``), the
    paths put back (restored or removed) as recorded, at most :data:`MAX_UNDONE` named."""
    to = body.get("to") if isinstance(body, dict) else None
    paths = body.get("paths") if isinstance(body, dict) else None
    if not isinstance(to, int) or isinstance(to, bool) or not isinstance(paths, list):
        return f"--- undo (a malformed record: {printable(_json(body))[:80]})"
    names = [printable(_json(p) if not isinstance(p, str) else p) for p in paths[:MAX_UNDONE]]
    more = f" and {len(paths) - MAX_UNDONE} more" if len(paths) > MAX_UNDONE else ""
    return (f"--- undone: the file changes after turn {to} (kimik3 undo --to {to}): "
            f"{', '.join(names) or 'no file'}{more}")


def _journal_line(record: JournalRecord, calls: dict[str, ToolCall]) -> str:
    """``--- deferred for approval: write {...}  id=X`` and the like, for a journal record;
    a deferred call is shown as its turn's assistant message holds it (``calls``, by id)."""
    body = record.body if isinstance(record.body, dict) else {}
    call = f"id={escaped(str(body.get('call_id')))}"
    if record.kind == "deferred":
        held = calls.get(str(body.get("call_id")))
        if held is None:
            return f"--- deferred for approval: no such call in this turn  {call}"
        pending = pending_call(held)
        return _call_line(f"--- deferred for approval: {escaped(pending.name)}(", _json(pending.arguments), call,
                          "    ")
    if record.kind == "tool_started":
        return f"--- approved call started: {escaped(str(body.get('name')))}  {call}"
    if record.kind == "input_required":
        return f"--- waits for answers to the MCP server {printable(str(body.get('server')))!r}: {call}"
    if record.kind == "input_responses":
        return f"--- answered: {call}"
    decision = body.get("decision")
    if decision == "deny":
        return f"--- denied: {call} ({body.get('reason')})"
    if decision == "edit":
        return shown_call("--- approved with edited arguments ", body.get("arguments"), f": {call}")
    return f"--- approved: {call}"


def format_session(
    path: str | os.PathLike[str], *, reasoning: bool = False, max_lines: int | None = 12
) -> str:
    """A recorded session as a readable transcript.

    One block per message, numbered as :func:`fork_session` takes them: ``[N] role``; assistant
    messages open a turn (``turn K``) with the call's usage when recorded, their reasoning folded
    to one line (its size and first words) unless ``reasoning``, then their text and tool calls
    (``-> name(arguments)  id``); tool results name their call. Compactions show their summary;
    the approval journal its records (``--- deferred for approval: ...``, ``--- approved: ...``)
    and, last, the calls that await a decision with how to give it (``kimik3 approve``).
    A turn's usage line gives its cached prompt tokens and their share (the cache-hit rate) when
    the engine reported them, and its USD cost when the run was priced (``$0.0123``); the last
    line sums the turns.

    Args:
        path: the session file.
        reasoning: unfold reasoning in full.
        max_lines: lines shown of each text, result or reasoning (None: all).

    Returns:
        The transcript (lines joined by newlines, ending with one).

    Raises:
        SessionError: ``path`` is not a readable session.
    """
    log = SessionLog.read(path)  # one read: the transcript and the calls awaiting a decision
    records = log.records
    header = records[0].header
    created = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(header.get("created", 0)))
    out = [f"session {path}  (created {created} UTC)"]
    if header.get("forked_from"):
        src = header["forked_from"]
        out.append(f"forked from {src.get('session')} at message {src.get('at')}")
    if header.get("tools"):
        out.append("tools: " + ", ".join(map(str, header["tools"])))
    turn = 0
    total = Usage()
    spent: float | None = None  # the turns' recorded costs
    calls: dict[str, ToolCall] = {}  # the last assistant message's calls, by id
    for r in records[1:]:
        if r.compaction is not None:
            kept = len(r.compaction.get("messages", []))
            out.append(f"--- compaction: the history became {kept} messages; summary:")
            out.extend(_clip(str(r.compaction.get("summary", "")), max_lines, "    "))
            calls = {}
            continue
        if r.skills is not None:
            out.extend(_skills_line(r.skills))
            continue
        if r.kind == "undo":
            out.append(_undo_line(r.body))
            continue
        if r.journal is not None and r.journal.kind != "tool_finished":  # every call's: the result follows
            out.append(_journal_line(r.journal, calls))
            continue
        m = r.message
        if m is None:
            continue
        if isinstance(m, AssistantMessage):
            turn += 1
            calls = {c.id: c for c in m.tool_calls or ()}
            usage = f"  {_usage(r.usage, r.cost)}" if r.usage is not None else ""
            if r.usage is not None:
                total = total + r.usage
            if r.cost is not None:
                spent = (spent or 0.0) + r.cost
            out.append(f"[{r.index}] assistant  turn {turn}{usage}")
            if m.reasoning_content:
                if reasoning:
                    out.append("    reasoning:")
                    out.extend(_clip(m.reasoning_content, max_lines, "      "))
                else:
                    first = " ".join(m.reasoning_content.split())[:72]
                    out.append(f"    > reasoning ({len(m.reasoning_content)} chars, folded): {first}")
            if _text(m.content).strip():
                out.extend(_clip(_text(m.content), max_lines, "    "))
            for call in m.tool_calls or ():
                out.append(_call_line(f"    -> {escaped(call.function.name)}(", call.function.arguments,
                                      f"id={escaped(call.id)}", " " * 8))
        elif isinstance(m, ToolMessage):
            name = f" {m.name}" if m.name else ""
            out.append(f"[{r.index}] tool{name} result for {escaped(str(m.tool_call_id))}")
            out.extend(_clip(_text(m.content), max_lines, "    "))
        else:
            out.append(f"[{r.index}] {m.role}")
            out.extend(_clip(_text(m.content), max_lines, "    "))
    if turn:
        out.append(f"{counted(turn, 'turn')}; total {_usage(total, spent)}")
    pending = pending_approvals(log)
    if pending:
        where = shlex.quote(str(Path(path).resolve()))  # runnable as printed, from any folder
        out.append(f"awaiting approval: {counted(len(pending), 'call')} (kimik3 approve {where} "
                   f"[--allow ID] [--deny ID] [--edit ID JSON] [--all], then kimik3 resume {where})")
        out.extend(_call_line(f"    {escaped(p.name)}(", _json(p.arguments), f"id={escaped(p.id)}", " " * 8)
                   for p in pending)
    asking = pending_inputs(log)
    if asking:
        where = shlex.quote(str(Path(path).resolve()))
        out.append(f"awaiting answers: {counted(len(asking), 'call')} (kimik3 answer {where} ID TEXT "
                   f"[--json JSON] [--decline], then kimik3 resume {where})")
        out.extend(f"    {line}" for p in asking for line in p.shown(whole=max_lines is None))
    return "\n".join(out) + "\n"
