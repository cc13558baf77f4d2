"""OpenAI-shaped messages, content parts, tool calls and tool specs (see :mod:`kimik3.types`)."""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, StrictBool, ValidationError, field_validator, model_validator

from .._exceptions import (
    InvalidArgumentsError,
    InvalidRequestError,
    MessageError,
    UnknownContentPartError,
    UnknownRoleError,
)
from .._json import check_json_limits, safe_loads
from .._text import visible_text

__all__ = [
    "AssistantMessage",
    "ContentPart",
    "FailedToolCall",
    "FunctionCall",
    "FunctionSpec",
    "ImagePart",
    "ImageURL",
    "Message",
    "SystemMessage",
    "TextPart",
    "ToolCall",
    "ToolMessage",
    "ToolSpec",
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
    # defer_build: each class's validator is built when first used, not by `import kimik3`
    # (about 7% of its CPU time: issue 44, point 5; bench/startup.py)
    model_config = ConfigDict(extra="allow", populate_by_name=True, defer_build=True)


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
    """A tool call a server finished whose arguments could not be decoded, or a call read from text
    a server left whose tool was not declared (chat mode): kept, never run. An agent answers it
    with a tool error naming :attr:`reason`; the history carries it with
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
    strict: StrictBool | None = None  # "yes" is refused, not read as True (Vendor Verifier: 400)

    @field_validator("parameters", mode="before")
    @classmethod
    def _plain_json(cls, value: Any) -> Any:
        """The schema is rendered as JSON: plain JSON within :mod:`kimik3._json`'s limits."""
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
        JSONLimitError: a declaration that is not plain JSON (:mod:`kimik3._json`).
        InvalidRequestError: an OpenAI-shaped ``{"function": ...}`` dict without ``type``.
        MessageError: a declaration that is none of those.
    """
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
            if "function" in t and "type" not in t:  # the OpenAI shape needs its type (Vendor Verifier: 400)
                raise InvalidRequestError(f"tool declaration {str(t)[:80]} has no 'type' (use 'function')")
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
