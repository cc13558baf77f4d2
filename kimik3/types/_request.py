"""The request of one model call (:class:`ChatRequest`), OpenAI-shaped, and its validity rules
(:func:`check_request`): what a request may hold whatever engine serves it.

A request is data only: messages, tools, :class:`~kimik3.ModelSettings`, a typed
``tool_choice`` and ``response_format``, and the conversation it belongs to (:class:`Routing`).
How an engine turns it into a prompt (K3's encoding, a prompt cache, pre-encoded ids) is the
engine's business (:mod:`kimik3.engines`, :mod:`kimik3.formats.k3`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import KW_ONLY, InitVar, dataclass, field
from typing import Any, Literal, TypeAlias

from typing_extensions import TypedDict

from .._checks import check_instance
from .._exceptions import InvalidRequestError, MessageError
from .._json import check_json_limits
from ._messages import Message, SystemMessage, ToolMessage, ToolSpec, to_messages, to_tool_specs
from ._prefix import shared_prefix
from ._routing import Routing
from ._settings import SINGLE_STEP_SETTINGS, ModelSettings

__all__ = [
    "TOOL_NAME",
    "ChatRequest",
    "JSONSchemaFormat",
    "RequestChecker",
    "ResponseFormat",
    "ToolChoice",
    "check_request",
    "response_format_schema",
    "tool_choice_directive",
]

ToolChoice: TypeAlias = Literal["auto", "required", "none"]
"""The ``tool_choice`` values K3 supports (None means ``"auto"``). OpenAI's named-function form
is refused: K3's protocol has no "call this tool" directive (declare only that tool and use
``"required"``)."""


class JSONSchemaFormat(TypedDict, total=False):
    """``response_format["json_schema"]``: ``{"name", "schema", "strict", "description"}``
    (vLLM's renderer also hands the schema over under ``"json_schema"``)."""

    name: str
    schema: dict[str, Any]
    strict: bool
    description: str


class ResponseFormat(TypedDict, total=False):
    """``{"type": "text"}``, ``{"type": "json_object"}`` or ``{"type": "json_schema",
    "json_schema": {...}}`` (OpenAI shape); a pydantic model with ``model_dump`` is read the same."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JSONSchemaFormat


def tool_choice_directive(tool_choice: Any) -> Literal["required", "none"] | None:
    """The directive ``tool_choice`` asks for: ``"required"``, ``"none"``, or None (auto).

    Raises:
        MessageError: a value other than auto / required / none (or None).
    """
    if tool_choice is None or tool_choice == "auto":
        return None
    if tool_choice in ("required", "none"):
        return tool_choice  # type: ignore[no-any-return]
    # Decision (spec silent): K3's protocol has no "call this named tool" directive, and
    # inventing one would put text the checkpoint never saw into the prompt.
    raise MessageError(
        f"K3 supports tool_choice 'auto', 'required' or 'none', got {tool_choice!r}; to force one "
        "tool, declare only that tool and use tool_choice='required'"
    )


def response_format_schema(
    response_format: Any,
) -> tuple[Literal["json_object", "json_schema"] | None, Mapping[str, Any] | None]:
    """What ``response_format`` asks for: ``(None, None)`` (text), ``("json_object", None)`` or
    ``("json_schema", schema)``.

    Raises:
        MessageError: not a dict, or an unknown ``type``.
        InvalidRequestError: ``json_schema`` without a ``schema`` object.
        JSONLimitError: a schema that is not plain JSON (:mod:`kimik3._json`).
    """
    if response_format is None:
        return None, None
    if hasattr(response_format, "model_dump"):
        response_format = response_format.model_dump(mode="json", exclude_none=True)
    if not isinstance(response_format, Mapping):
        raise MessageError(f"response_format must be a dict, got {type(response_format).__name__}")
    kind = response_format.get("type")
    if kind in (None, "text"):
        return None, None
    if kind == "json_object":
        return "json_object", None
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        if not isinstance(spec, Mapping):
            raise InvalidRequestError("response_format json_schema needs a 'json_schema' object")
        # OpenAI shape {"name":..., "schema": {...}}; vLLM 0.32's renderer hands the schema over
        # under "json_schema" (its pydantic alias is not applied). Nothing else: without a schema
        # there is nothing to render (OpenAI and vLLM answer 400).
        schema = spec.get("schema", spec.get("json_schema"))
        if not isinstance(schema, Mapping):
            got = "no 'schema'" if schema is None else f"a {type(schema).__name__} 'schema'"
            raise InvalidRequestError(
                f"response_format json_schema needs a 'schema' object (a JSON Schema), got {got}; "
                "use {'type': 'json_object'} for JSON without a schema"
            )
        check_json_limits(schema)
        return "json_schema", schema
    raise MessageError(f"unknown response_format type {kind!r}; expected text, json_object or json_schema")


TOOL_NAME = re.compile(r"[^\W\d][\w.-]{0,255}")
"""A tool name a K3 endpoint accepts (fullmatch): a letter or ``_`` first, then letters, digits,
``_``, ``.`` or ``-``, 256 characters at most. The Vendor Verifier's cases fix the bounds
(``tests/k3_features/test_dynamic_tools.py``: ``1bad_name``, ``bad@name``, ``""`` and 257 ``a``
are refused); the characters are kimik3's own tool-name set, which Moonshot's documented
``[a-zA-Z0-9_-]`` is part of."""


def _duplicates(tools: Iterable[ToolSpec], seen: set[str]) -> list[str]:
    dup: list[str] = []
    for t in tools:
        name = t.function.name
        if name in seen and name not in dup:
            dup.append(name)
        seen.add(name)
    return dup


def _check_names(tools: Iterable[ToolSpec], where: str) -> None:
    for t in tools:
        if not TOOL_NAME.fullmatch(t.function.name):
            raise InvalidRequestError(
                f"tool name {t.function.name[:60]!r} in {where} is not one a K3 endpoint accepts: a letter or "
                "'_' first, then letters, digits, '_', '.' or '-', at most 256 characters"
            )


def _check_json_schema(response_format: Any) -> None:
    if response_format is None:  # the usual request: no hasattr's AttributeError raised and caught
        return
    if hasattr(response_format, "model_dump"):
        response_format = response_format.model_dump(mode="json", exclude_none=True)
    spec = response_format.get("json_schema") if isinstance(response_format, Mapping) else None
    if not isinstance(spec, Mapping) or response_format.get("type") != "json_schema":
        return
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidRequestError("response_format json_schema needs a 'name' (a non-empty string), as OpenAI's does")
    if "strict" in spec and not isinstance(spec["strict"], bool):
        raise InvalidRequestError(f"response_format json_schema 'strict' must be true or false, got {spec['strict']!r}")


def check_request(
    messages: Sequence[Message],
    tools: Sequence[ToolSpec] = (),
    *,
    tool_choice: Any = None,
    response_format: Any = None,
) -> None:
    """Raise if the request is one a K3 endpoint must reject (issue 17), before any network call.

    Rules (Moonshot's K3 endpoint contract, as the Kimi Vendor Verifier's ``tests/k3_features``
    checks it; ``kimik3 verify`` checks that the endpoint rejects them too): every tool name
    matches :data:`TOOL_NAME` and is declared once in the whole request (the request's ``tools``
    and every dynamic declaration together); ``tools`` only on a system message, and only
    without content (send the text in another system message); every tool message carries a
    ``tool_call_id``; ``tool_choice`` is auto / required / none, and ``required`` needs a
    declared tool; ``response_format`` is text, json_object or json_schema with a ``name``, a
    boolean ``strict`` if any, and a ``schema`` object (or vLLM's ``json_schema`` key) that is
    plain JSON within :mod:`kimik3._json`'s limits. A system message with ``tools: []`` and
    content declares nothing: a plain system message. (A tool declaration without ``type`` is
    refused when it is typed: :func:`kimik3.types.to_tool_specs`.)

    A growing conversation is checked message by message once with a :class:`RequestChecker`
    (the same rules).

    Args:
        messages: typed messages (:func:`kimik3.types.to_messages`; dicts are converted).
        tools: the request's tool declarations.
        tool_choice, response_format: as sent.

    Raises:
        InvalidRequestError: the first rule broken, naming the message index.
        JSONLimitError: a schema that is not plain JSON (a set, a non-string key, nesting
            beyond 128).
        MessageError: an unsupported ``tool_choice`` or ``response_format``, or a message that
            is not one.
    """
    RequestChecker().check(messages, tools, tool_choice=tool_choice, response_format=response_format)


class RequestChecker:
    """:func:`check_request` for the requests of one growing conversation: each message is
    converted (:func:`~kimik3.types.to_messages`) and checked once, the first time a request
    holds it; later requests that keep it (the same object, or an equal one, in the same place:
    :func:`~kimik3.types._prefix.shared_prefix`) skip it. A changed message, or changed request
    ``tools``, is checked again from there. An :class:`~kimik3.Agent` keeps one per run and
    hands it to every :class:`ChatRequest` (``ChatRequest(..., checker=...)``), so a turn at 3,000
    turns costs its new messages, not the history.

    Not thread-safe: one conversation, one task at a time.
    """

    def __init__(self) -> None:
        self._tools: list[ToolSpec] | None = None  # the request tools the state below holds for
        self._msgs: list[Message] = []  # checked, in order (a private copy)
        self._declares: list[tuple[int, list[str]]] = []  # (message index, names it declares)
        self._declared: set[str] = set()  # the request tools' names and every declaration's

    def check(
        self,
        messages: Iterable[Message | Mapping[str, Any]],
        tools: Sequence[ToolSpec] = (),
        *,
        tool_choice: Any = None,
        response_format: Any = None,
    ) -> list[Message]:
        """Check a request (the rules of :func:`check_request`) and return its messages typed.

        Returns:
            A new list: ``messages`` with dicts converted to typed messages.

        Raises:
            As :func:`check_request`; nothing of a refused request is kept.
        """
        if messages.__class__ is not list and (  # a list skips the ABC checks (issue 44)
            isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Iterable)
        ):
            raise MessageError(f"messages must be a list of messages, got {type(messages).__name__}")
        out: list[Any] = list(messages)  # typed below: the cached part already is
        tools = list(tools)
        if tools != self._tools:  # new head declarations: everything is checked again
            _check_names(tools, "tools")
            declared: set[str] = set()
            dup = _duplicates(tools, declared)
            if dup:
                raise InvalidRequestError(f"duplicate tool name(s) in tools: {', '.join(map(repr, dup))}")
            self._tools, self._msgs, self._declares, self._declared = tools, [], [], declared
        msgs = self._msgs
        n = shared_prefix(msgs, out)
        if n < len(msgs):
            del msgs[n:]
            if self._declares and self._declares[-1][0] >= n:
                self._declares = [d for d in self._declares if d[0] < n]
                self._declared = {t.function.name for t in self._tools or ()}
                self._declared.update(name for _, names in self._declares for name in names)
        new = to_messages(out[n:])
        out[n:] = new
        declared = self._declared
        declares: list[tuple[int, list[str]]] = []
        if any(isinstance(m, SystemMessage) and m.tools for m in new):
            declared = set(declared)  # kept only if the whole request passes
        for i, msg in enumerate(new, start=n):
            names = _check_message(i, msg, declared)
            if names:
                declares.append((i, names))
        tool_choice_directive(tool_choice)
        if tool_choice == "required" and not declared:
            raise InvalidRequestError(
                "tool_choice 'required' with no tools declared (request tools or a system message's "
                "tools): the model could call nothing; OpenAI and vLLM answer 400"
            )
        response_format_schema(response_format)
        _check_json_schema(response_format)
        msgs.extend(new)
        self._declares.extend(declares)
        self._declared = declared
        return out


def _check_message(i: int, msg: Message, declared: set[str]) -> list[str]:
    """Check message ``#i`` of a request; returns the tool names it declares (added to ``declared``).

    Raises:
        InvalidRequestError: the message breaks a rule of :func:`check_request`.
    """
    extra = msg.__pydantic_extra__
    if extra and "tools" in extra:
        raise InvalidRequestError(
            f"message #{i} (role {msg.role!r}) carries tools: only a system message without "
            "content may declare tools"
        )
    if isinstance(msg, SystemMessage) and msg.tools is not None:
        if msg.tools and msg.content:  # `tools: []` declares nothing: a plain system message
            raise InvalidRequestError(
                f"system message #{i} carries both tools and content; send the tools in a "
                "system message without content and the text in another system message"
            )
        _check_names(msg.tools, f"system message #{i}")
        dup = _duplicates(msg.tools, declared)
        if dup:
            raise InvalidRequestError(
                f"duplicate tool name(s) in system message #{i}: {', '.join(map(repr, dup))} (declared before "
                "in this request: a K3 endpoint takes each name once; give a changed tool a new name)"
            )
        return [t.function.name for t in msg.tools]
    if isinstance(msg, ToolMessage) and not msg.tool_call_id:
        raise InvalidRequestError(
            f"tool message #{i} has no tool_call_id: K3 endpoints reject it; give the id of "
            "the assistant tool call it answers"
        )
    return []


@dataclass
class ChatRequest:
    """One model call, engine-independent and OpenAI-shaped.

    Attributes:
        messages: the conversation (typed; dicts are converted).
        tools: declared tools.
        settings: the call's :class:`~kimik3.ModelSettings`; what it leaves unset takes K3's
            card defaults for one call (:data:`~kimik3.types.SINGLE_STEP_SETTINGS`: effort max,
            temperature 1.0, top_p 0.95), so after construction ``reasoning_effort``,
            ``temperature`` and ``top_p`` are always set.
        tool_choice: ``"auto"`` (None), ``"required"`` or ``"none"`` (:data:`ToolChoice`).
        response_format: ``{"type": "json_object"}`` or ``{"type": "json_schema", ...}``
            (:class:`ResponseFormat`).
        routing: the conversation the request belongs to (:class:`Routing`): remote engines
            send its key to routers (headers, the body's ``user``); None sends nothing.
        checker: (keyword only, not kept) the :class:`RequestChecker` of the conversation this
            request continues: only messages it has not checked yet are converted and checked
            (an agent passes its run's); default: every message is.

    Raises:
        InvalidRequestError: a request K3's endpoint contract says must be rejected
            (:func:`check_request`), before any network call.
        MessageError: an unsupported ``tool_choice`` or ``response_format``.
        UserError: ``settings`` is not a :class:`~kimik3.ModelSettings`.
    """

    messages: list[Message]
    tools: list[ToolSpec] = field(default_factory=list)
    settings: ModelSettings = field(default_factory=ModelSettings)
    tool_choice: ToolChoice | None = None
    response_format: ResponseFormat | Mapping[str, Any] | None = None
    routing: Routing | None = None

    _: KW_ONLY
    checker: InitVar[RequestChecker | None] = None

    def __post_init__(self, checker: RequestChecker | None) -> None:
        check_instance("ChatRequest(routing=...)", self.routing, Routing, "a Routing")
        self.tools = to_tool_specs(self.tools)
        check_instance("ChatRequest(settings=...)", self.settings, ModelSettings, "a ModelSettings", optional=False)
        check_instance("ChatRequest(checker=...)", checker, RequestChecker, "a RequestChecker")
        self.settings = SINGLE_STEP_SETTINGS.merged(self.settings)
        self.messages = (checker or RequestChecker()).check(
            self.messages, self.tools, tool_choice=self.tool_choice, response_format=self.response_format
        )

    @property
    def thinking(self) -> bool:
        """Thinking is on unless ``settings.reasoning_effort == "none"``."""
        return self.settings.reasoning_effort != "none"
