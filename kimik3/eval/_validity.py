"""Whether a tool call is valid against what was declared: a declared tool's name, arguments that
are a JSON object, and that object valid against the tool's parameter schema (JSON Schema, the
draft the schema names, else 2020-12). The Vendor Verifier's schema accuracy counts the same
(MoonshotAI/K2-Vendor-Verifier, ``tool_calls_eval.py``: ``validate(instance=args, schema=...)``)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import jsonschema

from ..types import AssistantMessage, Message, SystemMessage, ToolCall, ToolSpec, to_tool_specs

__all__ = ["call_problem", "count_calls", "declared_schemas"]


def declared_schemas(head: Iterable[ToolSpec | Mapping[str, Any]], messages: Sequence[Message] = ()) -> dict[str, Any]:
    """Tool name -> parameter schema: the prompt head's declarations, then the dynamic ones
    (``{"role": "system", "content": "", "tools": [...]}`` messages) in history order."""
    schemas: dict[str, Any] = {}
    for spec in to_tool_specs(list(head)):
        schemas[spec.function.name] = spec.function.parameters or {"type": "object"}
    for m in messages:
        if isinstance(m, SystemMessage) and m.tools:
            for spec in m.tools:
                schemas[spec.function.name] = spec.function.parameters or {"type": "object"}
    return schemas


def call_problem(call: ToolCall, schemas: Mapping[str, Any]) -> str | None:
    """Why ``call`` is not valid against ``schemas`` (None: it is).

    Returns:
        ``"unknown tool 'x'"``, ``"arguments are not JSON: ..."``, ``"arguments are not a JSON
        object"``, ``"arguments do not match the schema: <path>: <message>"``, or
        ``"the declared schema is not valid JSON Schema: ..."``.
    """
    name = call.function.name
    if name not in schemas:
        return f"unknown tool {name!r}"
    try:
        arguments = json.loads(call.function.arguments)
    except (ValueError, RecursionError) as e:
        return f"arguments are not JSON: {e}"
    if not isinstance(arguments, dict):
        return "arguments are not a JSON object"
    schema = schemas[name]
    try:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        cls.check_schema(schema)
        error = jsonschema.exceptions.best_match(cls(schema).iter_errors(arguments))
    except (jsonschema.exceptions.SchemaError, TypeError) as e:
        return f"the declared schema is not valid JSON Schema: {str(e).splitlines()[0]}"
    if error is None:
        return None
    where = "/".join(map(str, error.absolute_path)) or "(arguments)"
    return f"arguments do not match the schema: {where}: {error.message[:200]}"


def count_calls(messages: Sequence[Message], schemas: Mapping[str, Any]) -> tuple[int, int]:
    """``(calls, valid)`` over the assistant messages' tool calls."""
    calls = [c for m in messages if isinstance(m, AssistantMessage) for c in m.tool_calls or ()]
    return len(calls), sum(call_problem(c, schemas) is None for c in calls)
