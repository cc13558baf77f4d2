"""Requests a K3 endpoint must reject, refused before any network call (issue 17).

Moonshot's endpoint contract for K3 (the Kimi Vendor Verifier) lists requests a conforming server
answers with 400. kimik3 checks the same rules on what it sends, so a malformed request fails
at once with a typed :class:`~kimik3.InvalidRequestError` instead of a server round-trip (or,
worse, a server that accepts it and renders something the model was not trained on).
``kimik3 verify`` checks that the endpoint rejects them too (rows ``rejects: ...``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ..._exceptions import InvalidRequestError
from ...types import Message, SystemMessage, ToolMessage, ToolSpec
from ._encode import _response_format_body, _tool_choice_body

__all__ = ["check_request"]


def _duplicates(tools: Iterable[ToolSpec]) -> list[str]:
    seen: set[str] = set()
    dup: list[str] = []
    for t in tools:
        name = t.function.name
        if name in seen and name not in dup:
            dup.append(name)
        seen.add(name)
    return dup


def check_request(
    messages: Sequence[Message],
    tools: Sequence[ToolSpec] = (),
    *,
    tool_choice: Any = None,
    response_format: Any = None,
) -> None:
    """Raise if the request is one a K3 endpoint must reject.

    Rules (Moonshot's K3 endpoint contract): tool names unique within a declaration (the
    request's ``tools``, and each dynamic declaration); ``tools`` only on a system message, and
    only without content (send the text in another system message); every tool message carries
    a ``tool_call_id``; ``tool_choice`` is auto / required / none, and ``required`` needs a
    declared tool; ``response_format`` is text, json_object or json_schema with a ``schema``
    object (or vLLM's ``json_schema`` key) that is plain JSON within :mod:`._json`'s limits. A
    system message with ``tools: []`` and content declares nothing: a plain system message.

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
    dup = _duplicates(tools)
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
            dup = _duplicates(msg.tools)
            if dup:
                raise InvalidRequestError(f"duplicate tool name(s) in system message #{i}: {', '.join(map(repr, dup))}")
        if isinstance(msg, ToolMessage) and not msg.tool_call_id:
            raise InvalidRequestError(
                f"tool message #{i} has no tool_call_id: K3 endpoints reject it; give the id of "
                "the assistant tool call it answers"
            )
    _tool_choice_body(tool_choice)
    declared = bool(tools) or any(isinstance(m, SystemMessage) and m.tools for m in messages)
    if tool_choice == "required" and not declared:
        raise InvalidRequestError(
            "tool_choice 'required' with no tools declared (request tools or a system message's "
            "tools): the model could call nothing; OpenAI and vLLM answer 400"
        )
    _response_format_body(response_format)
