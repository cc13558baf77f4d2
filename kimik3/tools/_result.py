"""A tool call's result (:class:`ToolResult`): text, JSON data, images or a mix, always valid UTF-8."""

from __future__ import annotations

import base64
import importlib
import io
import json
import sys
from typing import Any

from pydantic import BaseModel, field_validator
from pydantic_core import to_jsonable_python

from ..types import ImagePart, ImageURL, TextPart, ToolMessage
from ._failures import FailureText, ToolFailure, default_failure_text, exception
from ._truncate import visible_text

__all__ = ["ToolResult"]


def _is_image(value: Any) -> bool:
    if callable(getattr(value, "data_url", None)):  # kimik3.media.PreparedImage (duck-typed)
        return True
    pil = sys.modules.get("PIL.Image")  # a PIL image exists only if PIL was imported
    return pil is not None and isinstance(value, pil.Image)


def _image_part(value: Any) -> ImagePart:
    data_url = getattr(value, "data_url", None)
    if callable(data_url):
        return ImagePart(image_url=ImageURL(url=str(data_url())))
    # A PIL image: resized and encoded the way K3 sees images by kimik3.media (imported here:
    # only a tool that returns an image needs it). Where kimik3.media cannot provide
    # prepare_image (a stripped-down install), the image goes as a plain PNG, not resized.
    try:
        media = importlib.import_module("kimik3.media")
    except ImportError:
        media = None
    prepare = getattr(media, "prepare_image", None)
    if prepare is not None:
        return ImagePart(image_url=ImageURL(url=str(prepare(value).data_url())))
    buf = io.BytesIO()
    value.save(buf, format="PNG")
    url = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")
    return ImagePart(image_url=ImageURL(url=url))


def _json_text(value: Any) -> str:
    return json.dumps(
        to_jsonable_python(value, fallback=str), ensure_ascii=False, separators=(",", ":")
    )


class ToolResult(BaseModel):
    """What a tool call produced, ready to become a :class:`~kimik3.types.ToolMessage`.

    Attributes:
        content: text, or a list of text and image parts; always valid UTF-8 (lone surrogates
            are replaced on construction, see :func:`visible_text`).
        is_error: True when the arguments were invalid or the tool raised; ``content`` is then
            ``"Error: <ExceptionType>: <message>"``.
    """

    content: str | list[TextPart | ImagePart] = ""
    is_error: bool = False

    @field_validator("content")
    @classmethod
    def _valid_utf8(cls, value: str | list[TextPart | ImagePart]) -> str | list[TextPart | ImagePart]:
        """Lone surrogates (undecodable bytes of file names, say) become visible escapes, so the
        text can always be encoded, counted, logged and written to a session file."""
        if isinstance(value, str):
            return visible_text(value)
        return [TextPart(text=visible_text(p.text)) if isinstance(p, TextPart) else p for p in value]

    @classmethod
    def from_value(cls, value: Any) -> ToolResult:
        """Convert a tool's return value.

        - ``str`` -> that text; ``None`` -> ``""``; a :class:`ToolResult` -> itself;
        - a PIL image or anything with a ``data_url()`` method (``kimik3.media.PreparedImage``)
          -> one :class:`~kimik3.types.ImagePart` (PIL images go through
          ``kimik3.media.prepare_image``);
        - a :class:`~kimik3.types.TextPart` / :class:`~kimik3.types.ImagePart` -> that part;
        - a list / tuple holding at least one image or part -> a list of parts (strings become
          text parts, other items compact JSON text parts);
        - anything else (pydantic models, dataclasses, dicts, lists, numbers, bools) -> compact
          JSON text (``ensure_ascii=False``, no spaces); objects JSON cannot hold become ``str()``.
        """
        if isinstance(value, ToolResult):
            return value
        if value is None:
            return cls(content="")
        if isinstance(value, str):
            return cls(content=value)
        if isinstance(value, TextPart):
            return cls(content=value.text)
        if isinstance(value, ImagePart):
            return cls(content=[value])
        if _is_image(value):
            return cls(content=[_image_part(value)])
        if isinstance(value, (list, tuple)) and any(
            isinstance(v, (TextPart, ImagePart)) or _is_image(v) for v in value
        ):
            parts: list[TextPart | ImagePart] = []
            for v in value:
                if isinstance(v, (TextPart, ImagePart)):
                    parts.append(v)
                elif isinstance(v, str):
                    parts.append(TextPart(text=v))
                elif _is_image(v):
                    parts.append(_image_part(v))
                elif v is not None:
                    parts.append(TextPart(text=_json_text(v)))
            return cls(content=parts)
        return cls(content=_json_text(value))

    @classmethod
    def from_exception(cls, exc: BaseException, text: FailureText = default_failure_text) -> ToolResult:
        """An error result ``"Error: <ExceptionType>: <message>"`` (``": <message>"`` left out
        when the message is empty), worded by ``text`` (:mod:`kimik3.tools._failures`)."""
        return cls.from_failure(exception(exc), text)

    @classmethod
    def from_failure(cls, failure: ToolFailure, text: FailureText = default_failure_text) -> ToolResult:
        """The error result the model reads for ``failure``: ``text(failure)`` (default
        ``"Error: <message>"``), ``is_error=True``."""
        return cls(content=text(failure), is_error=True)

    @property
    def text(self) -> str:
        """The text of all text parts, joined with newlines (``content`` itself when a string)."""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(p.text for p in self.content if isinstance(p, TextPart))

    def to_message(self, tool_call_id: str, name: str | None = None) -> ToolMessage:
        """The :class:`~kimik3.types.ToolMessage` answering call ``tool_call_id`` of tool ``name``."""
        content: str | list[Any] = self.content if isinstance(self.content, str) else list(self.content)
        return ToolMessage(content=content, tool_call_id=tool_call_id, name=name)
