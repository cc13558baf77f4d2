"""One model call: the request (:class:`ChatRequest`) and its OpenAI-shaped result
(:class:`ChatCompletion`, :class:`Choice`, :class:`Usage`)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .._checks import check_int, check_number
from .._defaults import DEFAULT_REASONING_EFFORT, REASONING_EFFORTS, SINGLE_STEP_SAMPLING, ReasoningEffort
from .._exceptions import (
    InvalidEffortError,
)

if TYPE_CHECKING:
    from ..formats.k3 import PromptCache

from ._messages import AssistantMessage, FailedToolCall, Message, ToolSpec, dump_message, to_messages, to_tool_specs

__all__ = ["CLOSED_MID_ANSWER", "ChatCompletion", "ChatRequest", "Choice", "PromptTokensDetails", "Usage"]


@dataclass
class ChatRequest:
    """One model call, engine-independent.

    Attributes:
        messages: the conversation (typed; dicts are converted).
        tools: declared tools.
        reasoning_effort: ``"low"``, ``"high"``, ``"max"`` (default) or ``"none"`` (thinking off).
        tool_choice: ``"auto"`` (None), ``"required"`` or ``"none"``.
        response_format: ``{"type": "json_object"}`` or ``{"type": "json_schema", ...}``.
        temperature, top_p: sampling; defaults: K3's card, single step (1.0 / 0.95).
        max_tokens: completion budget (None: the engine's default / the context's remainder).
        seed: sampling seed, where the engine supports one.
        extra: engine-specific extras (vLLM SamplingParams fields; extra JSON body fields).
        prompt_cache: a :class:`~kimik3.formats.k3.PromptCache` for incremental encoding.
        prompt_ids: an already encoded K3 prompt: token engines send it instead of encoding
            ``messages``; ``thinking`` must match the prompt's generation prefix. Chat engines
            cannot take ids and raise UserError.

    Raises:
        InvalidEffortError: a ``reasoning_effort`` outside low / high / max / none.
        InvalidRequestError: a request K3's endpoint contract says must be rejected
            (:func:`kimik3.formats.k3.check_request`), before any network call.
        MessageError: an unsupported ``tool_choice`` or ``response_format``.
        UserError: a sampling value of the wrong type or out of range (``temperature`` < 0,
            ``top_p`` outside (0, 1], ``max_tokens`` < 1).
    """

    messages: list[Message]
    tools: list[ToolSpec] = field(default_factory=list)
    reasoning_effort: ReasoningEffort = DEFAULT_REASONING_EFFORT
    tool_choice: Any = None
    response_format: Any = None
    temperature: float = SINGLE_STEP_SAMPLING.temperature
    top_p: float = SINGLE_STEP_SAMPLING.top_p
    max_tokens: int | None = None
    seed: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    prompt_cache: PromptCache | None = None
    prompt_ids: Sequence[int] | None = None

    def __post_init__(self) -> None:
        self.messages = to_messages(self.messages)
        self.tools = to_tool_specs(self.tools)
        check_number("temperature", self.temperature, minimum=0)
        check_number("top_p", self.top_p, above=0, maximum=1)
        check_int("max_tokens", self.max_tokens, minimum=1, optional=True)
        check_int("seed", self.seed, minimum=-(2**63), optional=True)
        if self.reasoning_effort not in REASONING_EFFORTS:
            raise InvalidEffortError(
                f"reasoning_effort must be low, high, max or none, got {self.reasoning_effort!r}"
            )
        # Requests K3's endpoint contract says must be rejected: refused before any network call.
        # Imported here: formats/k3 imports this module.
        from ..formats.k3 import check_request

        check_request(self.messages, self.tools, tool_choice=self.tool_choice, response_format=self.response_format)

    @property
    def thinking(self) -> bool:
        """Thinking is on unless ``reasoning_effort == "none"``."""
        return self.reasoning_effort != "none"

    @property
    def thinking_effort(self) -> str | None:
        """The effort directive to render (None when thinking is off)."""
        return None if self.reasoning_effort == "none" else self.reasoning_effort

    def encoding_options(self) -> dict[str, Any]:
        """The K3 encoder's options for this request (``thinking``, ``thinking_effort``,
        ``tool_choice``, ``response_format``), as keyword arguments of
        :func:`~kimik3.formats.k3.encode_segments` / :func:`~kimik3.formats.k3.render`."""
        return {
            "thinking": self.thinking,
            "thinking_effort": self.thinking_effort,
            "tool_choice": self.tool_choice,
            "response_format": self.response_format,
        }


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
