"""The OpenAI-shaped result of one model call (:class:`ChatCompletion`, :class:`Choice`,
:class:`Usage`)."""

from __future__ import annotations

import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ._messages import AssistantMessage, FailedToolCall, dump_message

__all__ = ["CLOSED_MID_ANSWER", "ChatCompletion", "Choice", "FinishReason", "PromptTokensDetails", "Usage"]


class PromptTokensDetails(BaseModel):
    """``usage.prompt_tokens_details`` (OpenAI shape).

    Attributes:
        cached_tokens: prompt tokens the engine served from its prefix cache (vLLM:
            ``RequestOutput.num_cached_tokens``; servers report it with prefix caching on).
    """

    cached_tokens: int = 0


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
    unknown: bool = False

    @property
    def cached_tokens(self) -> int:
        """Prompt tokens served from the engine's prefix cache (0 when not reported)."""
        return self.prompt_tokens_details.cached_tokens if self.prompt_tokens_details is not None else 0

    def __add__(self, other: Usage) -> Usage:
        known = self.prompt_tokens_details is not None or other.prompt_tokens_details is not None
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
            prompt_tokens_details=PromptTokensDetails(cached_tokens=self.cached_tokens + other.cached_tokens)
            if known else None,
            unknown=self.unknown or other.unknown,
        )


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
        raw_text: the raw K3 output for token engines (None in chat mode).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    id: str = Field(default_factory=lambda: "chatcmpl-" + uuid.uuid4().hex[:24])
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
