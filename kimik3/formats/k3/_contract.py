"""Requests a K3 endpoint must reject, refused before any network call (issue 17).

Moonshot's endpoint contract for K3 (the Kimi Vendor Verifier) lists requests a conforming server
answers with 400. kimik3 checks the same rules on what it sends, so a malformed request fails
at once with a typed :class:`~kimik3.InvalidRequestError` instead of a server round-trip (or,
worse, a server that accepts it and renders something the model was not trained on).
``kimik3 verify`` checks that the endpoint rejects them too (rows ``rejects: ...``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..._exceptions import InvalidRequestError
from ...types import Message, SystemMessage, ToolMessage, ToolSpec
from ._encode import _response_format_body, _tool_choice_body

__all__ = ["TOOL_NAME", "check_request"]

TOOL_NAME = re.compile(r"[^\W\d][\w.-]{0,255}")
"""A tool name a K3 endpoint accepts (fullmatch): a letter or ``_`` first, then letters, digits,
``_``, ``.`` or ``-``, 256 characters at most. The Vendor Verifier's cases fix the bounds
(``tests/k3_features/test_dynamic_tools.py``: ``1bad_name``, ``bad@name``, ``""`` and 257 ``a``
are refused); the characters are kimik3's own tool-name set, which Moonshot's documented
``[a-zA-Z0-9_-]`` is part of."""


def _duplicates(tools: Iterable[ToolSpec], seen: set[str]) -> list[str]:
    dup: list[str] = []
    for t in tools:
        name = t.function.name
        if name in seen and name not in dup:
            dup.append(name)
        seen.add(name)
    return dup


def _check_names(tools: Iterable[ToolSpec], where: str) -> None:
    for t in tools:
        if not TOOL_NAME.fullmatch(t.function.name):
            raise InvalidRequestError(
                f"tool name {t.function.name[:60]!r} in {where} is not one a K3 endpoint accepts: a letter or "
                "'_' first, then letters, digits, '_', '.' or '-', at most 256 characters"
            )


def _check_json_schema(response_format: Any) -> None:
    if hasattr(response_format, "model_dump"):
        response_format = response_format.model_dump(mode="json", exclude_none=True)
    spec = response_format.get("json_schema") if isinstance(response_format, Mapping) else None
    if not isinstance(spec, Mapping) or response_format.get("type") != "json_schema":
        return
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidRequestError("response_format json_schema needs a 'name' (a non-empty string), as OpenAI's does")
    if "strict" in spec and not isinstance(spec["strict"], bool):
        raise InvalidRequestError(f"response_format json_schema 'strict' must be true or false, got {spec['strict']!r}")


def check_request(
    messages: Sequence[Message],
    tools: Sequence[ToolSpec] = (),
    *,
    tool_choice: Any = None,
    response_format: Any = None,
) -> None:
    """Raise if the request is one a K3 endpoint must reject.

    Rules (Moonshot's K3 endpoint contract, as the Kimi Vendor Verifier's
    ``tests/k3_features`` checks it): every tool name matches :data:`TOOL_NAME` and is declared
    once in the whole request (the request's ``tools`` and every dynamic declaration together);
    ``tools`` only on a system message, and only without content (send the text in another
    system message); every tool message carries a ``tool_call_id``; ``tool_choice`` is auto /
    required / none, and ``required`` needs a declared tool; ``response_format`` is text,
    json_object or json_schema with a ``name``, a boolean ``strict`` if any, and a ``schema``
    object (or vLLM's ``json_schema`` key) that is plain JSON within :mod:`._json`'s limits. A
    system message with ``tools: []`` and content declares nothing: a plain system message. (A
    tool declaration without ``type`` is refused when it is typed: :func:`kimik3.types.to_tool_specs`.)

    Args:
        messages: typed messages (:func:`kimik3.types.to_messages`).
        tools: the request's tool declarations.
        tool_choice, response_format: as sent.

    Raises:
        InvalidRequestError: the first rule broken, naming the message index.
        JSONLimitError: a schema that is not plain JSON (a set, a non-string key, nesting
            beyond 128).
        MessageError: an unsupported ``tool_choice`` or ``response_format``.
    """
    declared: set[str] = set()
    _check_names(tools, "tools")
    dup = _duplicates(tools, declared)
    if dup:
        raise InvalidRequestError(f"duplicate tool name(s) in tools: {', '.join(map(repr, dup))}")
    for i, msg in enumerate(messages):
        extra = msg.model_extra or {}
        if "tools" in extra:
            raise InvalidRequestError(
                f"message #{i} (role {msg.role!r}) carries tools: only a system message without "
                "content may declare tools"
            )
        if isinstance(msg, SystemMessage) and msg.tools is not None:
            if msg.tools and msg.content:  # `tools: []` declares nothing: a plain system message
                raise InvalidRequestError(
                    f"system message #{i} carries both tools and content; send the tools in a "
                    "system message without content and the text in another system message"
                )
            _check_names(msg.tools, f"system message #{i}")
            dup = _duplicates(msg.tools, declared)
            if dup:
                raise InvalidRequestError(
                    f"duplicate tool name(s) in system message #{i}: {', '.join(map(repr, dup))} (declared before "
                    "in this request: a K3 endpoint takes each name once; give a changed tool a new name)"
                )
        if isinstance(msg, ToolMessage) and not msg.tool_call_id:
            raise InvalidRequestError(
                f"tool message #{i} has no tool_call_id: K3 endpoints reject it; give the id of "
                "the assistant tool call it answers"
            )
    _tool_choice_body(tool_choice)
    if tool_choice == "required" and not declared:
        raise InvalidRequestError(
            "tool_choice 'required' with no tools declared (request tools or a system message's "
            "tools): the model could call nothing; OpenAI and vLLM answer 400"
        )
    _response_format_body(response_format)
    _check_json_schema(response_format)
