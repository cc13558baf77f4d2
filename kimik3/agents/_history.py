"""How the agent keeps its history valid: one result message per tool call (capped), an error
answer for every call a crash left without one, and old screenshots dropped."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..tools import ToolResult, failures, truncate_middle
from ..tools.failures import FailureText, default_failure_text
from ..types import AssistantMessage, ImagePart, Message, TextPart, ToolCall, ToolMessage, UserMessage

__all__ = ["IMAGE_DROPPED", "nothing_to_do", "orphan_results", "prune_images", "result_message"]

IMAGE_DROPPED = "[an older screenshot was dropped from the context]"


def result_message(result: ToolResult, call: ToolCall, cap: int) -> ToolMessage:
    """The tool message answering ``call``, each text cut to ``cap`` characters
    (:func:`~kimik3.tools.truncate_middle`)."""
    if isinstance(result.content, str):
        content: str | list[Any] = truncate_middle(result.content, cap)
    else:
        content = [TextPart(text=truncate_middle(p.text, cap)) if isinstance(p, TextPart) else p
                   for p in result.content]
    return ToolMessage(content=content, tool_call_id=call.id, name=call.function.name)


def nothing_to_do(history: Sequence[Message]) -> str | None:
    """Why a run without a new task has nothing to do on ``history`` (None: it has): there is no
    request in it, or it ends with the agent's answer (an assistant message without tool calls)."""
    if not any(isinstance(m, UserMessage) for m in history):
        return "nothing to do: pass a task, or a conversation to continue"
    last = history[-1]
    if isinstance(last, AssistantMessage) and not last.tool_calls:
        return "nothing to do: the conversation ends with the agent's answer; pass a task to continue it"
    return None


def orphan_results(messages: Sequence[Message], why: str,
                   text: FailureText = default_failure_text) -> list[ToolMessage]:
    """After a crash during tools: an error result (``"Error: <why>"``, worded by ``text``) for
    every call of the last assistant message that has none, so the history is valid again."""
    last = len(messages) - 1
    while last >= 0 and isinstance(messages[last], ToolMessage):
        last -= 1
    message = messages[last] if last >= 0 else None
    if not isinstance(message, AssistantMessage) or not message.tool_calls:
        return []
    answered = {m.tool_call_id for m in messages[last + 1 :] if isinstance(m, ToolMessage)}
    return [ToolMessage(content=text(failures.orphaned(why)), tool_call_id=call.id, name=call.function.name)
            for call in message.tool_calls if call.id not in answered]


def prune_images(messages: list[Message], keep: int | None, slack: int | None = None) -> None:
    """Cache-stable screenshot pruning: nothing is dropped until more than ``keep + slack``
    images (``slack`` None: ``keep``) are in tool results, then the oldest go down to ``keep``
    (each becomes the text :data:`IMAGE_DROPPED`), so most prompts extend the previous one exactly
    (a prompt cache keeps hitting) and the model never sees more than ``keep + slack`` images.
    ``keep`` None keeps all. Messages are replaced, not mutated, so earlier prompts that used them
    stay valid."""
    if keep is None:
        return
    slack = keep if slack is None else slack
    counts = [
        sum(isinstance(p, ImagePart) for p in m.content)
        if isinstance(m, ToolMessage) and isinstance(m.content, list) else 0
        for m in messages
    ]  # fmt: skip
    if sum(counts) <= keep + slack:
        return
    kept = 0
    for idx in range(len(messages) - 1, -1, -1):
        if not counts[idx]:
            continue
        kept += counts[idx]
        msg = messages[idx]
        if kept > keep and isinstance(msg, ToolMessage) and isinstance(msg.content, list):
            parts = [TextPart(text=IMAGE_DROPPED) if isinstance(p, ImagePart) else p for p in msg.content]
            messages[idx] = ToolMessage(content=parts, tool_call_id=msg.tool_call_id, name=msg.name)
