"""A loopback stand-in for Moonshot's hosted API: it refuses what the hosted API refuses, with
the words the public reports quote, and answers the rest (through ``SSEServer``, a real socket).

Each rule is a function of the request body returning the API's error message (None: accepted).
Wordings quoted from reports: "text content is empty" (kimi-cli #2621, PR #2035), "the message at
position N with role 'assistant' must not be empty" (OpenCowork #10), the "moonshot flavored json
schema" details (kimi-cli #2621, command-code #594, jiuwenswarm #3942, opencode #37496, kimi-cli
#2061), "invalid temperature: only 1 is allowed for this model" (DeepTutor #938), "Your request
exceeded model token limit: L (requested: R)" (CLIProxyAPI #4418), "total message size N exceeds
limit M" (kimi-code #1862). Assumed (the docs say to omit the field, no report quotes the
error): the words for top_p / n / penalties, http(s) image URLs and a named tool_choice.

The token count is this server's own (JSON characters of the messages and tools / 4), as is the
message size (JSON characters of the messages): the tests read them back from it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.engines.sse_server import Reply, sse

COMBINATORS = ("$ref", "anyOf", "oneOf", "allOf", "not", "if", "then", "else")
SCHEMA = "tools.function.parameters is not a valid moonshot flavored json schema, details: <At path '{}': {}>"


def _empty(content: Any) -> bool:
    if content is None:
        return True
    if isinstance(content, str):
        return not content.strip()
    return isinstance(content, list) and all(p.get("type") == "text" and not p.get("text", "").strip() for p in content)


def message_rule(body: dict[str, Any]) -> str | None:
    """Empty content where the API wants none, and messages with nothing in them."""
    for i, m in enumerate(body.get("messages", [])):
        role = m.get("role")
        calls = m.get("tool_calls") if role == "assistant" else m.get("tools")
        if role in ("assistant", "system") and "content" in m and _empty(m["content"]) and calls:
            return "Invalid request: text content is empty"
        if role in ("assistant", "system") and _empty(m.get("content")) and not calls:
            return f"Invalid request: the message at position {i} with role '{role}' must not be empty"
    return None


def _schema_problem(node: Any, path: str, root: bool) -> tuple[str, str] | None:
    if not isinstance(node, dict):
        return None
    if isinstance(node.get("$ref"), str):
        if not node["$ref"].startswith("#/$defs/"):
            return f"{path}.$ref" if path != "root" else "$ref", "references must start with #/$defs/"
        if "type" in node:
            return path, "when using $ref, type should be defined in the referenced schema instead of the parent schema"
    if "anyOf" in node and "type" in node:
        return path, "when using anyOf, type should be defined in anyOf items instead of the parent schema"
    if not root and "type" not in node and not any(k in node for k in COMBINATORS):
        return path, "type is not defined"
    children: list[tuple[Any, str]] = []
    for key in ("properties", "$defs"):
        for name, child in (node.get(key) or {}).items():
            children.append((child, f"{key}.{name}" if path == "root" else f"{path}.{key}.{name}"))
    for key in ("anyOf", "oneOf", "allOf"):
        for child in node.get(key) or []:
            children.append((child, key if path == "root" else f"{path}.{key}"))
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            children.append((node[key], key if path == "root" else f"{path}.{key}"))
    for child, where in children:
        found = _schema_problem(child, where, False)
        if found is not None:
            return found
    return None


def schema_rule(body: dict[str, Any]) -> str | None:
    """Moonshot's flavour of JSON Schema, in the request's tools and in dynamic declarations."""
    tools = list(body.get("tools") or [])
    for m in body.get("messages", []):
        tools += m.get("tools") or [] if m.get("role") == "system" else []
    for t in tools:
        found = _schema_problem(t["function"].get("parameters") or {"type": "object"}, "root", True)
        if found is not None:
            return "Invalid request: " + SCHEMA.format(*found)
    return None


def sampling_rule(body: dict[str, Any]) -> str | None:
    """K3's sampling is fixed (quickstart: omit temperature, top_p, n and the penalties)."""
    if "temperature" in body:
        return "invalid temperature: only 1 is allowed for this model"
    for name in ("top_p", "n", "presence_penalty", "frequency_penalty"):
        if name in body:
            return f"invalid {name}: this field is fixed for this model"  # assumed wording
    return None


def image_rule(body: dict[str, Any]) -> str | None:
    """Images only as base64 data URLs or ms:// file ids."""
    for m in body.get("messages", []):
        for part in m.get("content") if isinstance(m.get("content"), list) else []:
            if part.get("type") == "image_url" and not part["image_url"]["url"].startswith(("data:", "ms://")):
                return "Invalid request: image_url must be a base64 data url or an ms:// file id"  # assumed
    return None


def tool_choice_rule(body: dict[str, Any]) -> str | None:
    if isinstance(body.get("tool_choice"), dict):
        return "Invalid request: tool_choice must be one of none, auto, required"  # assumed wording
    return None


HOSTED_RULES: dict[str, Callable[[dict[str, Any]], str | None]] = {
    "messages": message_rule, "schemas": schema_rule, "sampling": sampling_rule, "images": image_rule,
    "tool_choice": tool_choice_rule,
}  # fmt: skip


def tokens(body: dict[str, Any]) -> int:
    """This server's token count of a request."""
    return len(json.dumps([body.get("messages", []), body.get("tools", [])], ensure_ascii=False)) // 4


def message_size(body: dict[str, Any]) -> int:
    """This server's "total message size" of a request, in bytes."""
    return len(json.dumps(body.get("messages", []), ensure_ascii=False).encode())


def refused(message: str, status: int = 400) -> Reply:
    payload = {"error": {"message": message, "type": "invalid_request_error"}}
    return Reply(status, headers={"content-type": "application/json"}, parts=[json.dumps(payload).encode()])


def answer(delta: dict[str, Any], prompt_tokens: int, finish: str = "stop") -> Reply:
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "kimi-k3",
             "choices": [{"index": 0, "delta": {"role": "assistant", **delta}, "finish_reason": finish}]}
    usage = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "kimi-k3", "choices": [],
             "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 5, "total_tokens": prompt_tokens + 5}}
    return Reply(parts=sse([chunk, usage]))


@dataclass
class HostedAPI:
    """The fake: ``SSEServer(api)`` serves it. Refuses by its rules (default
    :data:`HOSTED_RULES`), then by its limits; else answers with ``reply(n, body)`` (default: the
    text "ok").

    Attributes:
        token_limit: the window it enforces (its own count, :func:`tokens`).
        size_limit: the largest "total message size" it takes (:func:`message_size`).
        reply: the answer to an accepted request, as a chat delta.
        refusals: ``(request number, message)`` of each refusal.
        seen: every request body received.
    """

    token_limit: int | None = None
    size_limit: int | None = None
    reply: Callable[[int, dict[str, Any]], dict[str, Any]] = lambda n, body: {"content": "ok"}
    rules: dict[str, Callable[[dict[str, Any]], str | None]] = field(default_factory=lambda: dict(HOSTED_RULES))
    refusals: list[tuple[int, str]] = field(default_factory=list)
    seen: list[dict[str, Any]] = field(default_factory=list)

    def __call__(self, n: int, body: dict[str, Any]) -> Reply:
        self.seen.append(body)
        for rule in self.rules.values():
            why = rule(body)
            if why is not None:
                return self._refuse(n, why)
        size = message_size(body)
        if self.size_limit is not None and size > self.size_limit:
            return self._refuse(n, f"total message size {size} exceeds limit {self.size_limit}")
        count = tokens(body)
        if self.token_limit is not None and count > self.token_limit:
            return self._refuse(n, f"Invalid request: Your request exceeded model token limit: {self.token_limit} "
                                   f"(requested: {count})")
        return answer(self.reply(n, body), count)

    def _refuse(self, n: int, why: str) -> Reply:
        self.refusals.append((n, why))
        return refused(why)
