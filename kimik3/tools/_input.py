"""A tool call that stops on questions only a person can answer, and its replay with the answers
(MCP 2026-07-28's ``input_required`` result, unattended): the tool hands the questions up
(:attr:`ToolContext.defer_input <kimik3.tools.ToolContext.defer_input>`), the agent keeps them in
its session (:mod:`kimik3.agents._inputs`) and stops; a later run replays the call with the
answers (:attr:`ToolContext.input_replay <kimik3.tools.ToolContext.input_replay>`).

Both values are plain JSON as on the wire (the ``mcp`` SDK is an optional extra; the agent
layer never imports it). Source: MCP 2026-07-28 multi round-trip requests (SEP-2322):
``InputRequiredResult.inputRequests`` / ``requestState``, answered by retrying the request with
``inputResponses`` and the same ``requestState``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["InputReplay", "InputWait"]


@dataclass(frozen=True)
class InputWait:
    """A call's questions that wait for a person.

    Attributes:
        server: the MCP server's name (``MCPServer.name``).
        input_requests: ``{key: request}``, each request as the server sent it (JSON:
            ``{"method": "elicitation/create", "params": {"message": ..., "requestedSchema": ...}}``).
        request_state: the server's opaque ``requestState``, echoed with the answers (None: it
            sent none).
    """

    server: str
    input_requests: dict[str, Any]
    request_state: str | None = None


@dataclass(frozen=True)
class InputReplay:
    """The answers a call is replayed with.

    Attributes:
        input_responses: ``{key: response}`` for every key of the questions (JSON: an
            elicitation's ``{"action": "accept", "content": {...}}`` or ``{"action": "decline"}``).
        request_state: the ``requestState`` the questions came with.
    """

    input_responses: dict[str, Any]
    request_state: str | None = None
