"""The Agent's argument checks: a wrong type is a :class:`~kimik3.UserError` naming the
parameter, raised by ``Agent(...)`` or ``agent.run(...)`` before anything starts, not an
``AttributeError`` from deep inside the loop."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, get_args

from pydantic import TypeAdapter, ValidationError

from .._checks import check_instance
from .._client import Client
from .._exceptions import KimiK3Error, UserError
from .._pricing import Pricing
from ..engines import Engine
from ..formats.k3 import K3Tokenizer
from ..types import AssistantMessage, Message, UserMessage, to_messages
from ._checks import answer_text
from ._session import SessionWriter
from ._session_store import SessionStore
from ._types import Budgets, ContextPolicy, ModelSettings

__all__ = ["check_agent_arguments", "output_adapter", "run_messages", "task_message", "validate_output"]


def check_agent_arguments(
    *,
    engine: Any,
    client: Any,
    instructions: Any,
    tools: Any,
    settings: Any,
    budgets: Any,
    context: Any,
    approval: Any,
    tokenizer: Any,
    pricing: Any = "auto",
    failure_text: Any = None,
) -> None:
    """Raises UserError: an argument of ``Agent(...)`` of the wrong type (named)."""
    if (engine is None) == (client is None):
        raise UserError("pass exactly one of engine=... or client=...")
    check_instance("Agent(engine=...)", engine, Engine, "an Engine (ScriptedEngine, VLLMEngine, RemoteEngine)")
    check_instance("Agent(client=...)", client, Client, "a kimik3.Client")
    check_instance("Agent(instructions=...)", instructions, str, "a str or None")
    if isinstance(tools, (str, bytes, Mapping)) or not isinstance(tools, Sequence):
        raise UserError(f"Agent(tools=...) must be a list of tools, got {type(tools).__name__} {tools!r:.80}")
    check_instance("Agent(settings=...)", settings, ModelSettings, "a ModelSettings")
    check_instance("Agent(budgets=...)", budgets, Budgets, "a Budgets")
    check_instance("Agent(context=...)", context, ContextPolicy, "a ContextPolicy")
    if approval is not None and not callable(approval):
        raise UserError(f"Agent(approval=...) must be a callable (call) -> decision, got {approval!r:.80}")
    check_instance("Agent(tokenizer=...)", tokenizer, (K3Tokenizer, str, os.PathLike), "a K3Tokenizer or a path")
    if pricing != "auto":
        check_instance("Agent(pricing=...)", pricing, Pricing, 'a kimik3.Pricing, "auto" or None')
    if failure_text is not None and not callable(failure_text):
        raise UserError(f"Agent(failure_text=...) must be a callable (failure) -> str, got {failure_text!r:.80}")
    if pricing is None and isinstance(budgets, Budgets) and budgets.usd is not None:
        raise UserError("Budgets(usd=...) needs prices: pass Agent(pricing=kimik3.Pricing(...)), not pricing=None")


def output_adapter(output_type: Any) -> TypeAdapter[Any] | None:
    """The TypeAdapter validating answers as ``output_type`` (None: plain text).

    Raises:
        UserError: pydantic cannot build a schema for ``output_type``.
    """
    if output_type is None:
        return None
    try:
        adapter: TypeAdapter[Any] = TypeAdapter(output_type)
        adapter.json_schema()
    except Exception as e:  # pydantic raises several types for unsupported types
        raise UserError(f"Agent(output_type=...) must be a type pydantic can validate, got {output_type!r:.80}: {e}") \
            from e
    return adapter


def response_format_for(adapter: TypeAdapter[Any] | None, output_type: Any) -> dict[str, Any] | None:
    """K3's json_schema response format for answers validated by ``adapter`` (None: plain text)."""
    if adapter is None:
        return None
    name = getattr(output_type, "__name__", "output")
    return {"type": "json_schema", "json_schema": {"name": name, "schema": adapter.json_schema()}}


def validate_output(adapter: TypeAdapter[Any] | None, message: AssistantMessage) -> tuple[Any, str | None]:
    """(output, None) of an answer, or (None, why) when it fails ``adapter`` (a fenced answer is
    read inside its fence); the text itself without an adapter."""
    text = answer_text(message)
    if adapter is None:
        return text, None
    raw = text.strip()
    if raw.startswith("```"):  # tolerate a fenced answer
        raw = raw.split("\n", 1)[1] if "\n" in raw else ""
        raw = raw.rsplit("```", 1)[0]
    try:
        return adapter.validate_json(raw), None
    except ValidationError as e:
        return None, "; ".join(f"{'.'.join(map(str, err['loc'])) or 'answer'}: {err['msg']}" for err in e.errors())


def task_message(task: Any) -> UserMessage:
    """The user message for ``run(task)``.

    Raises:
        UserError: ``task`` is not a str or a list of content parts.
    """
    if not isinstance(task, (str, list, tuple)):
        raise UserError(f"run(task=...) must be a str or a list of content parts, got {type(task).__name__} "
                        f"{task!r:.80}")
    try:
        return UserMessage(content=task if isinstance(task, str) else list(task))
    except (ValidationError, KimiK3Error) as e:
        raise UserError(f"run(task=...) is not a valid user message content: {e}") from e


def run_messages(messages: Any, session: Any) -> list[Message]:
    """The history ``run(messages=..., session=...)`` continues: the caller's list itself (it is
    extended in place), its OpenAI-shaped dicts converted to typed messages in place.

    Raises:
        UserError: ``messages`` is not a list, ``session`` is not a path (or holds a NUL byte).
        MessageError: a message that cannot be converted.
    """
    if session is not None:
        if isinstance(session, (SessionStore, SessionWriter)):  # a store of the user's; resume's own writer
            session = session.path
        check_instance("run(session=...)", session, (str, os.PathLike), "a file path or a SessionStore")
        if "\0" in os.fsdecode(os.fspath(session)):
            raise UserError(f"run(session=...) contains a NUL byte: {os.fspath(session)!r:.80}")
    if messages is None:
        return []
    if not isinstance(messages, list):
        raise UserError(f"run(messages=...) must be a list of messages, got {type(messages).__name__}")
    if not all(isinstance(m, get_args(Message)) for m in messages):
        messages[:] = to_messages(messages)
    return messages
