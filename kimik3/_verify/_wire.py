"""The server JSON ``kimik3 verify`` reads, as strict typed models (one boundary for its shapes).

Every answer body is parsed here before a check looks at it: a field of the wrong type (a
``tool_calls`` string, a chunk that is a list, ``prompt_tokens: true``, a ``null`` tool-call
index) is a :class:`Malformed` with the path of the first bad field, which the check turns into
a failed row. Strict mode: no coercion (``true`` is not an int, ``5`` is not a string).

Sources: OpenAI chat completions (``choices[].message`` / ``choices[].delta``, ``usage``),
completions (``choices[].text``) and models (``data[].id``) response shapes.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

__all__ = ["Function", "Malformed", "Message", "ModelList", "Reply", "ToolCall", "read"]


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


class Function(_Strict):
    """``tool_calls[].function``: a name and JSON-text arguments (a stream sends pieces)."""

    name: str | None = None
    arguments: str | None = None


class ToolCall(_Strict):
    """One entry of ``tool_calls`` (``index``: its slot in a stream, a non-negative int)."""

    index: int = Field(0, ge=0)
    function: Function = Function()


class Message(_Strict):
    """``choices[].message`` (or a stream's ``delta``); other fields are kept for evidence."""

    model_config = ConfigDict(strict=True, extra="allow", frozen=True)
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[ToolCall] | None = None


class Usage(_Strict):
    """``usage``: only ``prompt_tokens`` (a non-negative int) is read."""

    prompt_tokens: int | None = Field(None, ge=0)


class Choice(_Strict):
    """One of ``choices``: a chat ``message``, a stream ``delta`` or a completion ``text``, and
    the ``usage`` Kimi's API puts inside the choice."""

    message: Message = Message()
    delta: Message = Message()
    text: str | None = None
    usage: Usage | None = None


class Reply(_Strict):
    """A chat or completions answer body, or one stream chunk."""

    choices: list[Choice] = []
    usage: Usage | None = None

    @property
    def message(self) -> Message:
        """``choices[0].message`` (an empty message when there is no choice)."""
        return self.choices[0].message if self.choices else Message()

    @property
    def counted(self) -> Usage | None:
        """The usage, where servers put it: ``choices[0].usage`` (Kimi's API; read first, as the
        Vendor Verifier does), else the top-level ``usage``; None when neither."""
        inner = self.choices[0].usage if self.choices else None
        return inner if inner is not None else self.usage

    @property
    def prompt_tokens(self) -> int | None:
        """``usage.prompt_tokens`` (see :attr:`counted`), None when absent."""
        usage = self.counted
        return usage.prompt_tokens if usage is not None else None


class _Model(_Strict):
    id: str = Field(min_length=1, pattern=r"^[^\x00-\x1f\x7f-\x9f]+$")  # no CR/LF: it goes into requests and lines
    root: str | None = None  # vLLM: the model's path or name


class ModelList(_Strict):
    """``GET /models``: ``data[].id`` (no control characters), at least one."""

    data: list[_Model] = Field(min_length=1)


class Malformed(ValueError):
    """A server body that does not have the documented shape; ``str()`` is the evidence."""


def read(kind: type[_Strict], body: Any) -> Any:
    """``body`` (parsed JSON, or JSON text when ``str``/``bytes``) as ``kind``.

    Raises:
        Malformed: the body is not JSON or a field has the wrong type; the message names the
            first bad field (``choices.0.delta.content: Input should be a valid string (got 5)``).
    """
    try:
        # always through JSON, so a Python body and its JSON text get the same verdict and wording
        return kind.model_validate_json(body if isinstance(body, (str, bytes)) else json.dumps(body))
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        where = ".".join(str(p) for p in err["loc"]) or "body"
        got = repr(err.get("input"))[:60]
        raise Malformed(f"malformed answer: {where}: {err['msg']} (got {got})") from None
