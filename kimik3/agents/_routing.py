"""The routing key of a run's conversation (:func:`conversation_routing`): what every request of
the run carries so that a router in front of several replicas keeps the conversation on the
replica that holds its prefix (docs/scale-out.md). The same function warns when a run of a
session switches the reasoning effort: K3 renders the effort in the prompt's head, so a switch
voids the whole prefix cache (Moonshot's docs say so of the hosted API).

Where the key comes from (``Agent(routing_key=...)``):

- ``"auto"`` (the default), with a session file: the session's own — the last ``routing`` record
  of the file (a conversation routed by an explicit key before, such as a sub-agent's), else
  the header's ``id`` (a random id written when the file was created), else, for a file written
  before sessions had ids, a hash of its header line. So every turn and every ``resume`` of the
  session send the same key, another session (a fork included: it gets a header of its own)
  another one.
- ``"auto"`` without a session: a keyed hash (HMAC-SHA256 with a random salt drawn once per
  process and again in a forked child, :data:`_SALT`) of the conversation's head (the messages
  up to its first user message):
  the same for every run of this process that continues the conversation (compaction keeps the
  head), different for another task or other instructions, and neither predictable from a prompt
  nor shared by two users' processes sending the same prompt (issue 40).
- a string or a :class:`~kimik3.types.Routing`: that key (recorded in the session, so a later
  ``resume`` with ``"auto"`` goes on with it).
- None: no key; the requests carry nothing.

Retries (:class:`~kimik3.Client`) and compaction send the request they were given: the key stays.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import secrets
from typing import Any, Literal, TypeAlias

from .._exceptions import UserError
from ..types import Message, ModelSettings, Routing, UserMessage, dump_message
from ._session import SessionWriter

__all__ = ["RoutingKey", "check_routing_key", "conversation_routing"]

log = logging.getLogger("kimik3.agent")

RoutingKey: TypeAlias = "str | Routing | Literal['auto'] | None"
"""``Agent(routing_key=...)``: ``"auto"``, a key, a :class:`~kimik3.types.Routing` or None."""


def check_routing_key(value: Any) -> Routing | Literal["auto"] | None:
    """``Agent(routing_key=...)`` as a :class:`Routing` (a string becomes one), ``"auto"`` or None.

    Raises:
        UserError: another type, or a key that is not :data:`~kimik3.types.ROUTING_KEY`.
    """
    if value is None or value == "auto" or isinstance(value, Routing):
        return value  # type: ignore[no-any-return]
    if isinstance(value, str):
        return Routing(value)
    raise UserError(f"Agent(routing_key=...) must be 'auto', a string, a kimik3.types.Routing or None, "
                    f"got {type(value).__name__}")


_SALT = secrets.token_bytes(32)
"""The key of :func:`_salted_digest`: random, drawn once per process (drawn again in a forked
child: the workers a pre-forking server forks after importing kimik3 never share it)."""


def _new_salt() -> None:
    global _SALT
    _SALT = secrets.token_bytes(32)


os.register_at_fork(after_in_child=_new_salt)


def _salted_digest(data: Any) -> str:
    """32 hex digits of HMAC-SHA256 of ``data``'s JSON under this process's :data:`_SALT`."""
    text = json.dumps(data, ensure_ascii=False, sort_keys=True, default=repr)
    return hmac.new(_SALT, text.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()[:32]


def _digest(data: Any) -> str:
    text = json.dumps(data, ensure_ascii=False, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _recorded(session: SessionWriter) -> Routing | None:
    """The last valid ``routing`` record of the session (data read from a file: checked)."""
    for number, body in reversed(session.records("routing")):
        try:
            return Routing(body["key"], body.get("parent"))
        except (UserError, KeyError, TypeError, AttributeError):
            log.warning("kimik3: %s:%d: an unusable routing record, skipped", session.path, number)
    return None


def session_routing(session: SessionWriter) -> Routing:
    """The key of a session's conversation (see the module doc)."""
    recorded = _recorded(session)
    if recorded is not None:
        return recorded
    own = session.header.get("id")
    try:
        return Routing(own) if isinstance(own, str) else Routing(_digest(session.header))
    except UserError:  # a header id that cannot be a key (a file edited by hand): its hash
        return Routing(_digest(session.header))


def _warn_on_effort_switch(session: SessionWriter, settings: ModelSettings) -> None:
    """Log a warning when this run's reasoning effort is not the one the session's last run used."""
    starts = session.records("run_start")  # this run's is the last one
    before = starts[-2][1].get("settings", {}) if len(starts) >= 2 and isinstance(starts[-2][1], dict) else {}
    effort = before.get("reasoning_effort") if isinstance(before, dict) else None
    if isinstance(effort, str) and effort != settings.reasoning_effort:
        log.warning("kimik3: %s ran with reasoning_effort %r, this run uses %r: the effort is part of the prompt's "
                    "head, so no prefix cache serves this run's first request (keep one effort per conversation, "
                    "or start a new one)", session.path, effort, settings.reasoning_effort)


def conversation_routing(configured: Routing | Literal["auto"] | None, session: SessionWriter | None,
                         messages: list[Message], settings: ModelSettings | None = None) -> Routing | None:
    """The routing of a run (see the module doc); an explicit key differing from the session's is
    recorded in it (a ``{"routing": {"key", "parent"}}`` record). With ``settings`` (the run's), a
    switched reasoning effort is warned about."""
    if session is not None and settings is not None and not session.new:
        _warn_on_effort_switch(session, settings)
    if configured is None:
        return None
    if configured == "auto":
        if session is not None:
            return session_routing(session)
        head = []
        for m in messages:
            head.append(dump_message(m))
            if isinstance(m, UserMessage):
                break
        return Routing(_salted_digest(head))
    if session is not None and session_routing(session) != configured:
        session.record("routing", {"key": configured.key, "parent": configured.parent})
    return configured
