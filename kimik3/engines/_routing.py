"""What a remote engine sends so that a router in front of several replicas keeps one conversation
on one replica: the request's :class:`~kimik3.types.Routing` key as HTTP headers and as the body's
OpenAI ``user`` field (docs/scale-out.md).

The headers, by default (:data:`DEFAULT_ROUTING_HEADERS`), are the names the routers read:

- ``x-session-id``: vllm-router's ``consistent_hash`` (its first hash-key source, then
  ``X-User-ID``, ... the body's ``user``; vllm-project/router docs/load_balancing), its
  ``sticky_least_loaded`` and Program scheduling's generic schema;
- ``x-smg-routing-key``: SGLang's model gateway (SMG), its ``manual`` policy and
  ``--routing-key-override`` (smg docs, "Sticky Sessions and Routing Keys");
- ``x-dynamo-session-id``: NVIDIA Dynamo's frontend (docs "Session IDs"); a sub-agent's requests
  also carry ``X-Dynamo-Parent-Session-ID`` (:data:`PARENT_HEADERS`).

The body's ``user`` is OpenAI's end-user field, which vLLM and SGLang accept (and ignore) and
vllm-router hashes when no header names a session. A server that refuses the field (a 400 that
names it) is learned once (:attr:`OpenAIEndpoint.refuses_user_field
<kimik3.engines.OpenAIEndpoint.refuses_user_field>`) and sent requests without it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from .._exceptions import UserError
from ..types import Routing

__all__ = ["DEFAULT_ROUTING_HEADERS", "PARENT_HEADERS", "check_routing_headers", "names_user_field",
           "routing_headers"]

DEFAULT_ROUTING_HEADERS: tuple[str, ...] = ("x-session-id", "x-smg-routing-key", "x-dynamo-session-id")
"""The headers that carry a request's routing key by default (the module doc says who reads which)."""

PARENT_HEADERS: dict[str, str] = {"x-dynamo-session-id": "X-Dynamo-Parent-Session-ID"}
"""For a key header (lower case), the header that carries the parent conversation's key beside it
(Dynamo's pair; spelled as Dynamo's docs spell it)."""

_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an HTTP field name (RFC 9110 token)
_USER_FIELD = re.compile(r"""[`'"]user[`'"]""")  # serde's `user`, pydantic's 'user', JSON's "user"


def check_routing_headers(names: Sequence[str] | None) -> tuple[str, ...] | None:
    """``routing_headers=`` checked: a sequence of HTTP field names (None: send no headers).

    Raises:
        UserError: a single string instead of a sequence, a name that is not an HTTP token, or
            a name given twice (case-insensitively).
    """
    if names is None:
        return None
    if isinstance(names, str):
        raise UserError(f"routing_headers takes a sequence of header names, not the string {names!r:.60}; "
                        f"e.g. ({names!r:.60},)")
    out = tuple(names)
    for name in out:
        if not isinstance(name, str) or not _TOKEN.fullmatch(name):
            raise UserError(f"routing_headers: {name!r:.60} is not an HTTP header name")
    lower = [n.lower() for n in out]
    if len(set(lower)) != len(lower):
        raise UserError(f"routing_headers names a header twice: {', '.join(out)}")
    return out


def routing_headers(routing: Routing | None, names: Sequence[str] | None) -> dict[str, str]:
    """The headers that carry ``routing`` under ``names`` (and, for a sub-agent's request, the
    parent headers of :data:`PARENT_HEADERS`); ``{}`` without a routing or names."""
    if routing is None or not names:
        return {}
    out = {name: routing.key for name in names}
    if routing.parent is not None:
        for name in names:
            parent = PARENT_HEADERS.get(name.lower())
            if parent is not None:
                out[parent] = routing.parent
    return out


def names_user_field(error: Exception) -> bool:
    """Whether a server's 400 names the body's ``user`` field (it refuses the field)."""
    return bool(_USER_FIELD.search(str(error)))
