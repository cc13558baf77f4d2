"""Typed, OpenAI-shaped chat messages, content parts, tool calls and tool specs (pydantic v2),
the request of one model call (:class:`ChatRequest`) and its result (:class:`ChatCompletion`,
:class:`Choice`, :class:`Usage`).

Every model accepts the OpenAI chat-completions dict shapes people already have and dumps back to
them (:meth:`Message.to_openai`-style via :func:`dump_message`):

- ``function.arguments`` may be a JSON string or a dict; it is stored as the JSON string, key order
  kept, because that is what the OpenAI shape carries and what K3 renders argument by argument.
- Reasoning is read from ``reasoning_content`` or ``reasoning`` (vLLM renamed the field) and dumped
  under both names with the same value.
- Unknown extra keys are kept and dumped back (nothing the caller sent is lost).
- Text that is not valid Unicode (lone surrogates, e.g. a file name read with
  ``surrogateescape``) is escaped visibly when a message is built, so every engine can encode it:
  ``U+DC80``-``U+DCFF`` become ``\\xNN`` (the undecodable byte), other lone surrogates
  ``\\udNNN`` (message contents, text parts and reasoning): the file name ``b"caf\\xe9.txt"``
  decoded with ``surrogateescape`` reaches the model as the text ``caf\\xe9.txt``.

Use :func:`to_message` / :func:`to_messages` to turn dicts (or models) into typed messages; an
unknown role raises :class:`~kimik3.UnknownRoleError`, an unknown content part
:class:`~kimik3.UnknownContentPartError`.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ._checks import check_int, check_number
from ._defaults import DEFAULT_REASONING_EFFORT, REASONING_EFFORTS, SINGLE_STEP_SAMPLING, ReasoningEffort
from ._exceptions import (
    InvalidArgumentsError,
    InvalidEffortError,
    MessageError,
    UnknownContentPartError,
    UnknownRoleError,
)
from ._text import visible_text

if TYPE_CHECKING:
    from .formats.k3 import PromptCache

__all__ = [
    "AssistantMessage",
    "ChatCompletion",
    "ChatRequest",
    "Choice",
    "ContentPart",
    "FailedToolCall",
    "FunctionCall",
    "FunctionSpec",
    "ImagePart",
    "ImageURL",
    "Message",
    "PromptTokensDetails",
    "SystemMessage",
    "TextPart",
    "ToolCall",
    "ToolMessage",
    "ToolSpec",
    "Usage",
    "UserMessage",
    "VideoPart",
    "VideoURL",
    "dump_message",
    "dump_messages",
    "message_text",
    "to_message",
    "to_messages",
    "to_tool_specs",
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


# -- content parts ---------------------------------------------------------------------------


class TextPart(_Model):
    """``{"type": "text", "text": ...}``."""

    type: Literal["text"] = "text"
    text: str

    @field_validator("text")
    @classmethod
    def _v_text(cls, v: str) -> str:
        return visible_text(v)


class ImageURL(_Model):
    """``{"url": ..., "detail": ...}``: a ``data:image/...;base64,`` URL, an http(s) URL (passed
    to a remote server, which fetches it), or a local path when the engine allows local files
    (``engine.allow_local_files``)."""

    url: str
    detail: str | None = None


class ImagePart(_Model):
    """An image: ``{"type": "image_url", "image_url": {"url": ...}}``.

    The K3 encoder renders it as the control placeholder ``<|kimi_image_placeholder|>``; the
    serving processor expands it to ``<|media_begin|>image WxH<|media_content|>`` + N x
    ``<|media_pad|>`` + ``<|media_end|>`` (see :mod:`kimik3.media`). ``{"type": "image",
    "image": URL}`` is accepted and normalised to this shape.
    """

    type: Literal["image_url"] = "image_url"
    image_url: ImageURL


class VideoURL(_Model):
    """``{"url": ...}`` of a video: a ``data:video/...`` URL, or a local path when the engine
    allows local files (``engine.allow_local_files``). http(s) video URLs are not fetched."""

    url: str


class VideoPart(_Model):
    """A video: ``{"type": "video_url", "video_url": {"url": ...}}`` (``"video"`` accepted)."""

    type: Literal["video_url"] = "video_url"
    video_url: VideoURL


ContentPart = TextPart | ImagePart | VideoPart
"""One element of a list-valued ``content``."""

_PART_TYPES: dict[str, type[BaseModel]] = {
    "text": TextPart,
    "image_url": ImagePart,
    "video_url": VideoPart,
}


def _to_part(raw: Any) -> ContentPart:
    if isinstance(raw, (TextPart, ImagePart, VideoPart)):
        return raw
    if isinstance(raw, str):
        return TextPart(text=raw)
    if not isinstance(raw, Mapping):
        raise UnknownContentPartError(f"content part must be a dict or str, got {type(raw).__name__}")
    kind = raw.get("type")
    if kind == "image":  # {"type": "image", "image": url}
        url = raw.get("image") or raw.get("image_url")
        if isinstance(url, Mapping):
            url = url.get("url")
        raw = {"type": "image_url", "image_url": {"url": url}}
        kind = "image_url"
    elif kind == "video":
        url = raw.get("video") or raw.get("video_url")
        if isinstance(url, Mapping):
            url = url.get("url")
        raw = {"type": "video_url", "video_url": {"url": url}}
        kind = "video_url"
    elif kind == "image_url" and isinstance(raw.get("image_url"), str):
        raw = {**raw, "image_url": {"url": raw["image_url"]}}
    elif kind == "video_url" and isinstance(raw.get("video_url"), str):
        raw = {**raw, "video_url": {"url": raw["video_url"]}}
    cls = _PART_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise UnknownContentPartError(
            f"unknown content part type {kind!r}; expected 'text', 'image_url' or 'video_url'"
        )
    try:
        return cls.model_validate(raw)  # type: ignore[return-value]
    except ValidationError as e:
        raise UnknownContentPartError(f"malformed {kind!r} content part: {e}") from e


Content = str | list[ContentPart]


def _validate_content(value: Any) -> Any:
    if value is None:
        return value
    if isinstance(value, str):
        return visible_text(value)
    if isinstance(value, (list, tuple)):
        return [_to_part(p) for p in value]
    raise UnknownContentPartError(f"content must be a string or a list of parts, got {type(value).__name__}")


# -- tool calls and specs --------------------------------------------------------------------


class FunctionCall(_Model):
    """``{"name": ..., "arguments": "<JSON object text>"}``.

    ``arguments`` is kept as text exactly as received (a dict given on input is dumped with
    ``json.dumps(..., ensure_ascii=False)``, key order kept, after
    :func:`~kimik3.formats.k3.check_json_limits`). Text that is not valid JSON, or JSON beyond
    the limits, is kept too: the K3 encoder renders it as a raw ``json`` block, and
    :meth:`parsed_arguments` raises.
    """

    name: str
    arguments: str = "{}"

    @field_validator("arguments", mode="before")
    @classmethod
    def _args_to_text(cls, v: Any) -> Any:
        if v is None:
            return "{}"
        if isinstance(v, Mapping):
            from .formats.k3._json import check_json_limits

            check_json_limits(dict(v))  # JSONLimitError, a ValueError: pydantic reports it
            return json.dumps(dict(v), ensure_ascii=False)
        return v

    def parsed_arguments(self) -> dict[str, Any]:
        """The arguments as a dict (key order kept).

        Raises:
            InvalidArgumentsError: the text is valid JSON but not an object.
            json.JSONDecodeError: the text is not JSON at all.
            JSONLimitError: JSON beyond the limits of :func:`~kimik3.formats.k3.safe_loads`.
        """
        from .formats.k3._json import safe_loads

        value = safe_loads(self.arguments) if self.arguments.strip() else {}
        if not isinstance(value, dict):
            raise InvalidArgumentsError(
                f"arguments of tool call {self.name!r} must be a JSON object, got {type(value).__name__}"
            )
        return value


class ToolCall(_Model):
    """``{"id": ..., "type": "function", "function": {"name": ..., "arguments": ...}}``.

    ``id`` is opaque: K3 never sees it (the encoder does not render it); clients invent it.
    """

    id: str = ""
    type: Literal["function"] = "function"
    function: FunctionCall

    @property
    def name(self) -> str:
        """The called tool's name."""
        return self.function.name


class FailedToolCall(BaseModel):
    """A tool call a server finished whose arguments could not be decoded (chat mode): kept, never
    run. An agent answers it with a tool error naming :attr:`reason`; the history carries it with
    arguments ``{}`` (:meth:`to_tool_call`), never invalid JSON. :attr:`arguments` is the text as
    the server sent it, :attr:`index` the call's position in its turn, :attr:`name` ``""`` if none.
    """

    model_config = ConfigDict(frozen=True)

    index: int
    id: str
    name: str
    arguments: str
    reason: str

    def to_tool_call(self) -> ToolCall:
        """The call as the history keeps it: its id and name, arguments ``{}``."""
        return ToolCall(id=self.id, function=FunctionCall(name=self.name, arguments="{}"))


class FunctionSpec(_Model):
    """``{"name", "description", "parameters" (JSON Schema), "strict"}`` of a declared tool."""

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None

    @field_validator("parameters", mode="before")
    @classmethod
    def _plain_json(cls, value: Any) -> Any:
        """The schema is rendered as JSON: plain JSON within :mod:`kimik3.formats.k3._json`'s limits."""
        from .formats.k3._json import check_json_limits

        if isinstance(value, Mapping):
            check_json_limits(value)
        return value


class ToolSpec(_Model):
    """``{"type": "function", "function": {...}}``: a tool as declared to the model."""

    type: Literal["function"] = "function"
    function: FunctionSpec


def to_tool_specs(tools: Iterable[ToolSpec | Mapping[str, Any] | Any] | None) -> list[ToolSpec]:
    """Normalise tool declarations: :class:`ToolSpec`, OpenAI dicts, or objects with ``.spec``.

    A bare ``{"name":..., "parameters":...}`` dict (no ``function`` wrapper) is wrapped.

    Raises:
        JSONLimitError: a declaration that is not plain JSON (:mod:`kimik3.formats.k3._json`).
        MessageError: a declaration that is none of those.
    """
    from .formats.k3._json import check_json_limits

    out: list[ToolSpec] = []
    for t in tools or ():
        if isinstance(t, ToolSpec):
            out.append(t)
            continue
        spec = getattr(t, "spec", None)
        if isinstance(spec, ToolSpec):
            out.append(spec)
            continue
        if isinstance(t, Mapping):
            raw = dict(t) if "function" in t else {"type": "function", "function": dict(t)}
            check_json_limits(raw)  # a set, a non-string key, nesting beyond 128: JSONLimitError
            try:
                out.append(ToolSpec.model_validate(raw))
            except ValidationError as e:
                raise MessageError(f"invalid tool declaration: {e}") from e
            continue
        raise MessageError(f"cannot use {type(t).__name__} as a tool declaration")
    return out


# -- messages --------------------------------------------------------------------------------


class SystemMessage(_Model):
    """A system (or developer) message.

    A system message with ``tools`` and no content is a *dynamic tool declaration*: K3 renders it
    as ``type="tool-declare"`` with the DYNAMIC_TOOL_DECLARE body.
    """

    role: Literal["system", "developer"] = "system"
    content: Content | None = None
    name: str | None = None
    tools: list[ToolSpec] | None = None

    @field_validator("content", mode="before")
    @classmethod
    def _v_content(cls, v: Any) -> Any:
        return _validate_content(v)

    @field_validator("tools", mode="before")
    @classmethod
    def _v_tools(cls, v: Any) -> Any:
        return None if v is None else to_tool_specs(v)


class UserMessage(_Model):
    """A user message; ``content`` is a string or a list of text / image / video parts."""

    role: Literal["user"] = "user"
    content: Content = ""
    name: str | None = None

    @field_validator("content", mode="before")
    @classmethod
    def _v_content(cls, v: Any) -> Any:
        return "" if v is None else _validate_content(v)


class AssistantMessage(_Model):
    """An assistant message with its reasoning and tool calls.

    ``reasoning_content`` is read from ``reasoning_content`` or, failing that, ``reasoning``.
    K3 requires every past assistant message back with its reasoning and tool calls exactly as
    received (docs/k3-format.md § Messages).
    """

    role: Literal["assistant"] = "assistant"
    content: Content | None = None
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] | None = None
    name: str | None = None

    @field_validator("content", mode="before")
    @classmethod
    def _v_content(cls, v: Any) -> Any:
        return _validate_content(v)

    @model_validator(mode="before")
    @classmethod
    def _reasoning_alias(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "reasoning" in data:
            data = dict(data)
            alt = data.pop("reasoning")
            if data.get("reasoning_content") is None:
                data["reasoning_content"] = alt
        return data

    @field_validator("tool_calls", mode="before")
    @classmethod
    def _v_calls(cls, v: Any) -> Any:
        return v or None

    @field_validator("reasoning_content")
    @classmethod
    def _v_reasoning(cls, v: str | None) -> str | None:
        return None if v is None else visible_text(v)


class ToolMessage(_Model):
    """The result of one tool call.

    ``name`` (alias input key ``tool``) is the tool's name; when absent the encoder takes the
    name of the matching call of the preceding assistant message.
    """

    role: Literal["tool"] = "tool"
    content: Content = ""
    tool_call_id: str | None = None
    name: str | None = None

    @field_validator("content", mode="before")
    @classmethod
    def _v_content(cls, v: Any) -> Any:
        return "" if v is None else _validate_content(v)

    @model_validator(mode="before")
    @classmethod
    def _tool_alias(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "tool" in data and isinstance(data.get("tool"), str):
            data = dict(data)
            tool = data.pop("tool")
            if not data.get("name"):
                data["name"] = tool
        return data


Message = SystemMessage | UserMessage | AssistantMessage | ToolMessage
"""Any typed chat message."""

_ROLE_TYPES: dict[str, type[BaseModel]] = {
    "system": SystemMessage,
    "developer": SystemMessage,
    "user": UserMessage,
    "assistant": AssistantMessage,
    "tool": ToolMessage,
}
_MESSAGE_TYPES = (SystemMessage, UserMessage, AssistantMessage, ToolMessage)
_TYPED_CLASSES = frozenset(_MESSAGE_TYPES)


def to_message(raw: Message | Mapping[str, Any]) -> Message:
    """Turn an OpenAI-shaped dict (or a typed message, returned as is) into a typed message.

    Raises:
        UnknownRoleError: ``role`` is missing or not system/developer/user/assistant/tool.
        UnknownContentPartError: a content part of unknown type.
        MessageError: any other shape error (wrong field types).
    """
    if isinstance(raw, _MESSAGE_TYPES):
        return raw
    if not isinstance(raw, Mapping):
        raise MessageError(f"a message must be a dict or a typed message, got {type(raw).__name__}")
    role = raw.get("role")
    cls = _ROLE_TYPES.get(role) if isinstance(role, str) else None
    if cls is None:
        raise UnknownRoleError(
            f"unknown message role {role!r}; expected system, developer, user, assistant or tool"
        )
    try:
        return cls.model_validate(raw)  # type: ignore[return-value]
    except ValidationError as e:
        for err in e.errors():
            ctx_err = (err.get("ctx") or {}).get("error")
            if isinstance(ctx_err, MessageError):
                raise ctx_err from e
        raise MessageError(f"invalid {role} message: {e}") from e


def to_messages(raw: Iterable[Message | Mapping[str, Any]]) -> list[Message]:
    """:func:`to_message` over a list; never mutates the input (typed messages are kept as they
    are, so a long history of typed messages costs one pointer copy each).

    Raises:
        MessageError: ``raw`` is not a list of messages (None, a str, a dict), or a message is bad.
    """
    if isinstance(raw, (str, bytes, Mapping)) or not isinstance(raw, Iterable):
        raise MessageError(f"messages must be a list of messages, got {type(raw).__name__}")
    typed = _TYPED_CLASSES
    return [m if m.__class__ in typed else to_message(m) for m in raw]


def dump_message(message: Message | Mapping[str, Any]) -> dict[str, Any]:
    """The OpenAI chat dict for a message (``None`` fields dropped).

    Assistant reasoning is written under both ``reasoning_content`` and ``reasoning`` with the
    same value, because vLLM reads only ``reasoning`` and others only ``reasoning_content``; a
    tool-call turn without reasoning gets both as ``""`` (strict endpoints reject it without).
    """
    msg = to_message(message)
    out = msg.model_dump(exclude_none=True, mode="json")
    if isinstance(msg, AssistantMessage):
        if "content" not in out:
            out["content"] = None if msg.tool_calls else ""
        if msg.reasoning_content is not None or msg.tool_calls:
            out["reasoning_content"] = out["reasoning"] = msg.reasoning_content or ""
    return out


def dump_messages(messages: Iterable[Message | Mapping[str, Any]]) -> list[dict[str, Any]]:
    """:func:`dump_message` over a list."""
    return [dump_message(m) for m in messages]


def message_text(content: Content | None) -> str:
    """The concatenated text of a content value (image and video parts contribute nothing)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(p.text for p in content if isinstance(p, TextPart))



# -- one model call: the request and its result ------------------------------------------------


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
        from .formats.k3 import check_request

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
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    prompt_tokens_details: PromptTokensDetails | None = None

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
        )


FinishReason = Literal["stop", "length", "tool_calls"]


class Choice(BaseModel):
    """``choices[i]`` of a chat completion."""

    index: int = 0
    message: AssistantMessage
    finish_reason: FinishReason


class ChatCompletion(BaseModel):
    """An OpenAI-shaped chat completion (one choice).

    Attributes:
        choices: one :class:`Choice` with the assistant message (``reasoning_content``,
            ``content``, ``tool_calls``) and its ``finish_reason``.
        usage: token counts.
        truncated: the output stopped before K3 closed the message (``max_tokens``); an
            incomplete tool call is then dropped, never returned.
        dropped_tool_calls: names of calls that were started but never completed.
        failed_tool_calls: calls a server finished whose arguments could not be decoded (chat
            mode); they are not in ``message.tool_calls`` and never executed. An agent answers
            each with a tool error (see :class:`FailedToolCall`).
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
    dropped_tool_calls: list[str] = Field(default_factory=list)
    failed_tool_calls: list[FailedToolCall] = Field(default_factory=list)
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
