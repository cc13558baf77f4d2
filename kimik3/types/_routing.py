"""The conversation a request belongs to, as a router in front of several replicas reads it
(:class:`Routing`): a key that is the same on every request of one conversation, and the key of
the conversation that started it (a sub-agent's parent).

Routers keep a conversation on the replica that holds its prefix in its KV cache when the client
says which conversation a request belongs to: vllm-router's ``consistent_hash`` reads
``X-Session-ID`` (then the body's ``user``), SGLang's model gateway ``x-smg-routing-key``,
NVIDIA Dynamo ``X-Dynamo-Session-ID`` and ``X-Dynamo-Parent-Session-ID``. How an engine sends
the key is the engine's business (:mod:`kimik3.engines._routing`); docs/scale-out.md says which
router reads what.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .._exceptions import UserError

__all__ = ["ROUTING_KEY", "Routing"]

ROUTING_KEY = re.compile(r"[!-~]{1,256}")
"""A routing key (fullmatch): 1 to 256 visible ASCII characters, no space or control character,
so it is a valid HTTP header value on every server (RFC 9110 field values; a CR or LF would
inject a header)."""


def _check(what: str, value: object) -> None:
    if not isinstance(value, str) or not ROUTING_KEY.fullmatch(value):
        raise UserError(f"{what} must be 1 to 256 visible ASCII characters (no spaces, no control characters), "
                        f"got {value!r:.80}")


@dataclass(frozen=True)
class Routing:
    """Which conversation a request belongs to.

    Attributes:
        key: the conversation's routing key (:data:`ROUTING_KEY`): the same on every request of
            one conversation, another for another conversation.
        parent: the key of the conversation that started this one (a ``task`` sub-agent's
            parent), or None.

    Raises:
        UserError: a key or parent that is not :data:`ROUTING_KEY`.
    """

    key: str
    parent: str | None = None

    def __post_init__(self) -> None:
        _check("Routing(key=...)", self.key)
        if self.parent is not None:
            _check("Routing(parent=...)", self.parent)
