"""The OpenAI-shaped result of one model call (:class:`ChatCompletion`, :class:`Choice`,
:class:`Usage`)."""

from __future__ import annotations

import os
import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ._messages import AssistantMessage, FailedToolCall, dump_message

__all__ = [
    "CLOSED_MID_ANSWER", "ChatCompletion", "Choice", "CompletionTokensDetails", "FinishReason", "PromptTokensDetails",
    "Usage", "clamp_usage",
]  # fmt: skip


class PromptTokensDetails(BaseModel):
    """``usage.prompt_tokens_details`` (OpenAI shape).

    Attributes:
        cached_tokens: prompt tokens the engine served from its prefix cache (vLLM:
            ``RequestOutput.num_cached_tokens``; servers report it with prefix caching on).
        cache_write_tokens: prompt tokens written to the provider's prompt cache by this call
            (a part of ``prompt_tokens``, billed apart by providers that bill cache writes:
            Moonshot's K3.1, 2026-10-23); None when the server did not report it.
        cache_write_1h_tokens: the part of ``cache_write_tokens`` written with a 1-hour lifetime
            (``ModelSettings.prompt_cache_lifetime="1h"``, or a server's own split); None when
            not known, the writes then priced at the 5-minute rate.
    """

    cached_tokens: int = 0
    cache_write_tokens: int | None = None
    cache_write_1h_tokens: int | None = None


class CompletionTokensDetails(BaseModel):
    """``usage.completion_tokens_details`` (OpenAI shape).

    Attributes:
        reasoning_tokens: completion tokens the model spent reasoning (a part of
            ``completion_tokens``), as the server reported them.
    """

    reasoning_tokens: int = 0


class Usage(BaseModel):
    """Token usage of one model call (OpenAI shape).

    ``prompt_tokens_details.cached_tokens`` is filled when the engine reports it (the embedded
    vLLM engine always, a server when it sends it); None when unknown. :attr:`cached_tokens`
    reads it as an int (0 when unknown).

    ``unknown`` is True when the server reported no usage at all, or counts that cannot be right
    (no prompt tokens; no completion tokens for an answer with text): the counts are then only
    what it said (0 when nothing), and an :class:`~kimik3.Agent` counts the tokens itself for
    its budgets and context (``estimate_tokens``); a sum is unknown when any part is.
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    prompt_tokens_details: PromptTokensDetails | None = None
    completion_tokens_details: CompletionTokensDetails | None = None
    unknown: bool = False

    @property
    def cached_tokens(self) -> int:
        """Prompt tokens served from the engine's prefix cache (0 when not reported)."""
        return self.prompt_tokens_details.cached_tokens if self.prompt_tokens_details is not None else 0

    @property
    def cache_write_tokens(self) -> int:
        """Prompt tokens written to the provider's prompt cache (0 when not reported)."""
        details = self.prompt_tokens_details
        return (details.cache_write_tokens or 0) if details is not None else 0

    @property
    def cache_write_1h_tokens(self) -> int:
        """The part of :attr:`cache_write_tokens` written with a 1-hour lifetime (0 when not known)."""
        details = self.prompt_tokens_details
        return (details.cache_write_1h_tokens or 0) if details is not None else 0

    @property
    def reasoning_tokens(self) -> int | None:
        """Completion tokens spent reasoning (None when the server did not report them)."""
        details = self.completion_tokens_details
        return details.reasoning_tokens if details is not None else None

    def __add__(self, other: Usage) -> Usage:
        known = self.prompt_tokens_details is not None or other.prompt_tokens_details is not None
        details = None
        if known:
            parts = [u.prompt_tokens_details for u in (self, other) if u.prompt_tokens_details is not None]
            writes = [p.cache_write_tokens for p in parts if p.cache_write_tokens is not None]
            long = [p.cache_write_1h_tokens for p in parts if p.cache_write_1h_tokens is not None]
            details = PromptTokensDetails(cached_tokens=self.cached_tokens + other.cached_tokens,
                                          cache_write_tokens=sum(writes) if writes else None,
                                          cache_write_1h_tokens=sum(long) if long else None)
        reasoning = [u.reasoning_tokens for u in (self, other) if u.reasoning_tokens is not None]
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
            prompt_tokens_details=details,
            completion_tokens_details=CompletionTokensDetails(reasoning_tokens=sum(reasoning)) if reasoning else None,
            unknown=self.unknown or other.unknown,
        )


def clamp_usage(usage: Usage) -> list[str]:
    """Make a server's counts consistent, in place; returns what was changed, in words.

    The one place where counts a server sent are made to hold together (chat and raw mode call
    it where they build a completion's :class:`Usage`): no count below 0; cached tokens at most
    the prompt tokens (SGLang #32761, #35863 sent more, so cache shares passed 100% and the
    uncached part of a cost went negative), and cache writes at most the rest of it; reasoning
    tokens at most the completion tokens (vercel/ai #19311). The caller logs the changes once and
    records them as an issue of the turn (``ChatCompletion.issues``).

    Args:
        usage: the counts as read (changed in place).

    Returns:
        One phrase per changed count (``"usage.prompt_tokens_details.cached_tokens was 900, more
        than prompt_tokens 120: counted as 120"``); ``[]`` when the counts were consistent.
    """
    notes: list[str] = []

    def bound(owner: BaseModel, field: str, where: str, limit: int | None = None, name: str = "") -> None:
        """``owner.field`` at least 0 and, with ``limit``, at most it (``name``: what the limit is)."""
        value = getattr(owner, field)
        if value is None:
            return
        if value < 0:
            notes.append(f"{where}.{field} was {value}: counted as 0")
            value = 0
        if limit is not None and value > limit:
            notes.append(f"{where}.{field} was {value}, more than {name} {limit}: counted as {limit}")
            value = limit
        setattr(owner, field, value)

    for field in ("prompt_tokens", "completion_tokens", "total_tokens"):
        bound(usage, field, "usage")
    if (prompt := usage.prompt_tokens_details) is not None:
        where = "usage.prompt_tokens_details"
        bound(prompt, "cached_tokens", where, usage.prompt_tokens, "prompt_tokens")
        bound(prompt, "cache_write_tokens", where, usage.prompt_tokens - prompt.cached_tokens,
              "prompt_tokens less cached_tokens")  # reads and writes are parts of the prompt
        bound(prompt, "cache_write_1h_tokens", where, prompt.cache_write_tokens or 0, "cache_write_tokens")
    if (completion := usage.completion_tokens_details) is not None:
        bound(completion, "reasoning_tokens", "usage.completion_tokens_details", usage.completion_tokens,
              "completion_tokens")
    return notes


FinishReason = Literal["stop", "length", "tool_calls"]


class Choice(BaseModel):
    """``choices[i]`` of a chat completion."""

    index: int = 0
    message: AssistantMessage
    finish_reason: FinishReason


CLOSED_MID_ANSWER = "a closed connection (the stream ended with no finish_reason)"
""":attr:`ChatCompletion.interrupted` of an answer whose stream ended before the server finished it."""


class ChatCompletion(BaseModel):
    """An OpenAI-shaped chat completion (one choice).

    Attributes:
        choices: one :class:`Choice` with the assistant message (``reasoning_content``,
            ``content``, ``tool_calls``) and its ``finish_reason``.
        usage: token counts.
        truncated: the output stopped before K3 closed the message (``max_tokens``, or what
            :attr:`interrupted` names); an incomplete tool call is then dropped, never returned.
        interrupted: what cut the answer when it was not the output limit, as a phrase:
            :data:`CLOSED_MID_ANSWER` when the stream ended with neither a ``finish_reason`` nor
            ``[DONE]`` (a closed connection); None otherwise.
        dropped_tool_calls: names of calls that were started but never completed.
        failed_tool_calls: calls a server finished whose arguments could not be decoded, or a
            call read from text a server left whose tool was not declared (chat mode); they are
            not in ``message.tool_calls`` and never executed. An agent answers each with a tool
            error (see :class:`FailedToolCall`).
        misplaced_tool_calls: tool names of calls the model wrote outside the tools section:
            their text stays where it was written, they never run (an agent tells the model).
        issues: what was wrong with the answer as it came, in words, each repaired or kept as
            it was (a usage count clamped: :func:`clamp_usage`; K3 markup left in the text that
            could not be read as structure): an agent records each as an issue of the turn.
        raw_text: the raw K3 output for token engines (None in chat mode).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    id: str = Field(default_factory=lambda: "chatcmpl-" + os.urandom(12).hex())  # 96 random bits, no UUID object
    object: Literal["chat.completion"] = "chat.completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str = ""
    choices: list[Choice]
    usage: Usage = Field(default_factory=Usage)
    truncated: bool = False
    interrupted: str | None = None
    dropped_tool_calls: list[str] = Field(default_factory=list)
    failed_tool_calls: list[FailedToolCall] = Field(default_factory=list)
    misplaced_tool_calls: list[str] = Field(default_factory=list)
    issues: list[str] = Field(default_factory=list)
    raw_text: str | None = None

    @property
    def message(self) -> AssistantMessage:
        """The assistant message of the first choice."""
        return self.choices[0].message

    @property
    def finish_reason(self) -> FinishReason:
        """The first choice's finish reason."""
        return self.choices[0].finish_reason

    @property
    def recorded_finish_reason(self) -> str:
        """How the answer ended, as sessions and spans record it: ``"interrupted"`` when
        :attr:`interrupted` names what cut it (a connection closed mid-answer: never recorded as
        ``"length"``, issue 40), else :attr:`finish_reason`."""
        return "interrupted" if self.interrupted is not None else self.finish_reason

    def to_openai(self) -> dict[str, Any]:
        """The plain OpenAI chat-completion dict (reasoning under both field names)."""
        return {
            "id": self.id,
            "object": self.object,
            "created": self.created,
            "model": self.model,
            "choices": [
                {"index": c.index, "message": dump_message(c.message), "finish_reason": c.finish_reason}
                for c in self.choices
            ],
            "usage": self.usage.model_dump(),
        }
