"""The checker of a chat-mode stream: OpenAI chat-completion chunks in, kimik3 events and a
completion out.

A chat server renders K3's prompt and parses K3's output itself; what arrives is *server text*
(``reasoning_content`` / ``reasoning`` and ``content`` deltas) and tool-call deltas. The checker:

- passes text through; marker text a server parser leaked into reasoning or content is parsed
  with kimik3's K3 parser (starting in the think / response channel), and tool calls found there
  are recovered, after the server's own calls;
- never applies the raw-token rule "a partial marker at the end is an artefact": markers are
  single tokens only in raw output, so server text ending in ``<`` or ``<|`` keeps it;
- drops a server tool call whose arguments are not a JSON object (never replayed into history).

Interface: ``checker = ChatStreamChecker(thinking, model)``; ``checker.feed(chunk)`` per chunk
(an ``openai`` ``ChatCompletionChunk`` or its dict) returns events; ``checker.finish()`` returns
the last events; then ``checker.completion()``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..formats.k3 import (
    ContentDelta,
    Event,
    ParsedToolCall,
    ReasoningDelta,
    StreamParser,
    ToolCallArgumentsDelta,
    ToolCallDone,
    ToolCallIncomplete,
    ToolCallStarted,
)
from ..types import AssistantMessage, ChatCompletion, Choice, FinishReason, FunctionCall, ToolCall, Usage

__all__ = ["ChatStreamChecker", "field_of"]


def field_of(obj: Any, name: str) -> Any:
    """``obj.name`` / ``obj[name]``, also from a pydantic model's extra fields (servers add
    non-standard fields such as ``reasoning``); None when absent."""
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get(name)
    value = getattr(obj, name, None)
    if value is None and getattr(obj, "model_extra", None):
        value = obj.model_extra.get(name)
    return value


class ChatStreamChecker:
    """Maps one chat-mode stream to kimik3 events and checks it (see the module docstring).

    Args:
        thinking: whether thinking was requested (reasoning then starts in the think channel).
        model: the model name for the completion (a chunk's ``model`` field wins).
    """

    def __init__(self, thinking: bool, model: str = "") -> None:
        self.model = model
        self._reasoning = StreamParser(thinking=True) if thinking else None
        self._content = StreamParser(thinking=False)
        self._calls: dict[int, dict[str, Any]] = {}
        self._order: list[int] = []
        self._recovered: list[ParsedToolCall] = []
        self._reasoning_text: list[str] = []
        self._content_text: list[str] = []
        self._final_calls: list[ToolCall] = []
        self._dropped: list[str] = []
        self.finish_reason: str | None = None
        self.usage = Usage()

    # -- per chunk -------------------------------------------------------------------------

    def feed(self, chunk: Any) -> list[Event]:
        """The events of one chunk (usage and finish_reason are recorded)."""
        usage = field_of(chunk, "usage")
        if usage is not None:
            self.usage = Usage(
                prompt_tokens=field_of(usage, "prompt_tokens") or 0,
                completion_tokens=field_of(usage, "completion_tokens") or 0,
                total_tokens=field_of(usage, "total_tokens") or 0,
            )
        choices = field_of(chunk, "choices")
        if not choices:
            return []
        choice = choices[0]
        delta = field_of(choice, "delta")
        out: list[Event] = []
        reasoning = field_of(delta, "reasoning_content") or field_of(delta, "reasoning")
        out.extend(self._reasoning_delta(reasoning or ""))
        content = field_of(delta, "content")
        if content:
            out.extend(self._route(self._content.feed(content)))
        for tc in field_of(delta, "tool_calls") or ():
            out.extend(self._tool_call_delta(field_of(tc, "index") or 0, field_of(tc, "id"), field_of(tc, "function")))
        reason = field_of(choice, "finish_reason")
        if reason is not None:
            self.finish_reason = reason
        return out

    def _route(self, events: list[Event]) -> list[Event]:
        out: list[Event] = []
        for ev in events:
            if isinstance(ev, ReasoningDelta):
                self._reasoning_text.append(ev.delta)
                out.append(ev)
            elif isinstance(ev, ContentDelta):
                self._content_text.append(ev.delta)
                out.append(ev)
            # recovered tool events are emitted at the end, after the server's own calls
        return out

    def _reasoning_delta(self, text: str) -> list[Event]:
        if not text:
            return []
        if self._reasoning is None:  # thinking off but the server sent reasoning: keep it
            self._reasoning_text.append(text)
            return [ReasoningDelta(text)]
        return self._route(self._reasoning.feed(text))

    def _tool_call_delta(self, index: int, call_id: str | None, function: Any) -> list[Event]:
        slot = self._calls.get(index)
        out: list[Event] = []
        name = field_of(function, "name")
        args = field_of(function, "arguments")
        if slot is None:
            slot = self._calls[index] = {"id": call_id or "", "name": name or "", "args": []}
            self._order.append(index)
        else:
            slot["id"] = slot["id"] or call_id or ""
            slot["name"] = slot["name"] or name or ""
        if not slot.get("started") and slot["id"] and slot["name"]:
            slot["started"] = True
            out.append(ToolCallStarted(index, slot["id"], slot["name"]))
        if args:
            slot["args"].append(args)
            if slot.get("started"):
                out.append(ToolCallArgumentsDelta(index, slot["id"], args))
        return out

    # -- end -------------------------------------------------------------------------------

    def finish(self) -> list[Event]:
        """The last events: held-back text, the server's calls checked, then recovered calls."""
        out: list[Event] = []
        for parser in (self._reasoning, self._content):
            if parser is None:
                continue
            # server text: a held-back "<" at the end is text, not a cut marker token
            out.extend(self._route(parser.finish("stop", partial_marker_is_text=True)))
            # calls a server parser left as marker text (e.g. after a missing think close)
            self._recovered.extend(parser.result().tool_calls)
        for index in self._order:
            slot = self._calls[index]
            raw = "".join(slot["args"]) or "{}"
            call_id = slot["id"] or f"call_{index}"
            try:
                value = json.loads(raw)
            except json.JSONDecodeError:
                value = None
            if not isinstance(value, dict) or not slot["name"]:
                self._dropped.append(slot["name"])
                out.append(ToolCallIncomplete(index, call_id, slot["name"]))
                continue
            if not slot.get("started"):
                out.append(ToolCallStarted(index, call_id, slot["name"]))
                out.append(ToolCallArgumentsDelta(index, call_id, raw))
            out.append(ToolCallDone(index, call_id, slot["name"], value, raw))
            self._final_calls.append(ToolCall(id=call_id, function=FunctionCall(name=slot["name"], arguments=raw)))
        base = (max(self._order) + 1) if self._order else 0
        for k, call in enumerate(self._recovered):
            index = base + k
            out.append(ToolCallStarted(index, call.id, call.name))
            out.append(ToolCallArgumentsDelta(index, call.id, call.arguments_json))
            out.append(ToolCallDone(index, call.id, call.name, call.arguments, call.arguments_json))
            self._final_calls.append(call.to_tool_call())
        return out

    def completion(self) -> ChatCompletion:
        """The completion of the stream (after :meth:`finish`)."""
        keep_reasoning = self._reasoning is not None or self._reasoning_text
        message = AssistantMessage(
            content="".join(self._content_text),
            reasoning_content="".join(self._reasoning_text) if keep_reasoning else None,
            tool_calls=self._final_calls or None,
        )
        reason: FinishReason
        if self._final_calls:
            reason = "tool_calls"
        elif self.finish_reason == "length":
            reason = "length"
        else:
            reason = "stop"
        usage = self.usage
        if usage.total_tokens == 0:
            usage = Usage(
                prompt_tokens=usage.prompt_tokens,
                completion_tokens=usage.completion_tokens,
                total_tokens=usage.prompt_tokens + usage.completion_tokens,
            )
        return ChatCompletion(
            model=self.model,
            choices=[Choice(message=message, finish_reason=reason)],
            usage=usage,
            truncated=self.finish_reason == "length",
            dropped_tool_calls=self._dropped,
        )
