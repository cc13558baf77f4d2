"""K3 prompt encoding: messages -> segments (docs/k3-format.md § Segments, § Messages).

The encoder produces :class:`Segment` s. Control segments are single special tokens
(``<|open|>``, ``<|close|>``, ``<|sep|>``, ``<|end_of_msg|>``, ``<|kimi_image_placeholder|>``);
text segments are tokenized on their own with special tokens disallowed, so a user who types
``<|open|>`` gets plain BPE and merges never cross a segment boundary (see
:mod:`kimik3.formats.k3._tokenizer`). :func:`render` is the concatenation of the segment texts.

Sources: the checkpoint's ``encoding_k3.py`` (as described by the spec and the golden fixtures
from smg-project/smg) and vLLM 0.32's ``vllm/renderers/kimi_k3.py`` (tool-result re-ordering).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, NamedTuple

from ..._defaults import THINKING_EFFORTS, ThinkingEffort
from ..._exceptions import (
    InvalidArgumentsError,
    InvalidEffortError,
    InvalidRequestError,
    MessageError,
    ToolNameError,
    UnknownContentPartError,
)
from ..._json import check_json_limits, safe_loads
from ...types import (
    AssistantMessage,
    Content,
    ImagePart,
    Message,
    SystemMessage,
    TextPart,
    ToolMessage,
    ToolSpec,
    UserMessage,
    VideoPart,
    response_format_schema,
    to_message,
    to_messages,
    to_tool_specs,
    tool_choice_directive,
)

__all__ = [
    "CLOSE",
    "END_OF_MSG",
    "IMAGE_PLACEHOLDER",
    "OPEN",
    "SEP",
    "THINKING_EFFORTS",
    "RenderedMessage",
    "Segment",
    "ThinkingEffort",
    "encode_segments",
    "message_segments",
    "normalize_messages",
    "open_tool_run",
    "prompt_header_segments",
    "prompt_trailer_segments",
    "protocol_bodies",
    "render",
    "render_output",
]

OPEN = "<|open|>"
CLOSE = "<|close|>"
SEP = "<|sep|>"
END_OF_MSG = "<|end_of_msg|>"
IMAGE_PLACEHOLDER = "<|kimi_image_placeholder|>"


class Segment(NamedTuple):
    """One piece of a K3 prompt.

    Attributes:
        text: the exact text of the piece.
        control: True for a structural special token (tokenized with specials allowed, always a
            single token); False for text (tokenized on its own with specials disallowed).
    """

    text: str
    control: bool


_OPEN = Segment(OPEN, True)
_CLOSE = Segment(CLOSE, True)
_SEP = Segment(SEP, True)
_EOM = Segment(END_OF_MSG, True)
_IMAGE = Segment(IMAGE_PLACEHOLDER, True)


@cache
def protocol_bodies() -> dict[str, str]:
    """The literal system-message bodies of K3's encoding (protocol constants), shipped as package
    data (``kimik3/formats/k3/protocol_bodies.json``; source: the checkpoint's ``encoding_k3.py``).

    Keys: TOOL_DECLARE, DYNAMIC_TOOL_DECLARE, EFFORT, TOOL_CHOICE_REQUIRED, TOOL_CHOICE_NONE,
    RF_JSON_OBJECT, RF_JSON_SCHEMA. Placeholders: ``{JSON}``, ``{E}``, ``{SCHEMA}``.
    """
    text = resources.files(__package__).joinpath("protocol_bodies.json").read_text(encoding="utf-8")
    bodies: dict[str, str] = json.loads(text)["bodies"]
    return bodies


# -- primitives ------------------------------------------------------------------------------


def _escape_attr(value: str) -> str:
    # docs/k3-format.md § Segments: '&' first, then '"'. Bodies are never escaped.
    return value.replace("&", "&amp;").replace('"', "&quot;")


def _text(out: list[Segment], text: str) -> None:
    if text:  # empty strings produce no segment
        out.append(Segment(text, False))


_EQ_QUOTE = Segment('="', False)
_QUOTE = Segment('"', False)


@cache
def _name(text: str) -> Segment:
    # tag names and " key" attribute names: a handful of distinct strings, built once
    return Segment(text, False)


def _open(out: list[Segment], tag: str, attrs: Sequence[tuple[str, str]] = ()) -> None:
    out.append(_OPEN)
    out.append(_name(tag))
    for key, value in attrs:
        out.append(_name(" " + key))
        out.append(_EQ_QUOTE)
        if value:
            out.append(Segment(_escape_attr(value), False))
        out.append(_QUOTE)
    out.append(_SEP)


def _close(out: list[Segment], tag: str) -> None:
    out.append(_CLOSE)
    out.append(_name(tag))
    out.append(_SEP)


def _message(out: list[Segment], attrs: Sequence[tuple[str, str]], body: Iterable[Segment]) -> None:
    _open(out, "message", attrs)
    out.extend(body)
    _close(out, "message")
    out.append(_EOM)


def _compact_sorted_json(value: Any) -> str:
    # "deep sort" = sort_keys (recursive); compact separators; non-ASCII kept. Checked first
    # (sets, non-string keys, nesting beyond 128): a JSONLimitError, never a TypeError/RecursionError.
    check_json_limits(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _content_segments(content: Content | None) -> list[Segment]:
    if content is None:
        return []
    if isinstance(content, str):
        return [Segment(content, False)] if content else []
    out: list[Segment] = []
    for part in content:
        if isinstance(part, TextPart):
            # Each text part is its own segment, as in the reference encoder (encoding_k3.py) and
            # vLLM's Rust renderer: ["Hello ", "world"] is `Hello`,` `,`world`, not `Hello`,` world`.
            _text(out, part.text)
        elif isinstance(part, ImagePart):
            out.append(_IMAGE)  # no newline after it (docs/k3-format.md § Media tokens)
        elif isinstance(part, VideoPart):
            raise UnknownContentPartError(
                "a video part must be sampled into frames before K3 encoding: kimik3's engines do "
                "it (kimik3.formats.k3._media.expand_videos); K3's released encoder is image-only"
            )
    return out


# -- directives ------------------------------------------------------------------------------


def _check_effort(effort: str | None) -> None:
    if effort is not None and effort not in THINKING_EFFORTS:
        raise InvalidEffortError(
            f"thinking_effort must be one of low, high, max (or None), got {effort!r}; "
            "K3 rejects 'medium' although its protocol text mentions it"
        )


def prompt_header_segments(
    tools: Sequence[ToolSpec] | None, *, thinking: bool, thinking_effort: str | None
) -> list[Segment]:
    """The segments before the conversation: the tool declaration (when tools are given) and the
    thinking-effort directive (when thinking is on and an effort is set). Spec §2 steps 1-2.

    Raises:
        InvalidEffortError: ``thinking_effort`` not in low / high / max.
    """
    _check_effort(thinking_effort)
    bodies = protocol_bodies()
    out: list[Segment] = []
    if tools:
        decl = [t.model_dump(mode="json", exclude_none=True) for t in tools]
        body = bodies["TOOL_DECLARE"].replace("{JSON}", _compact_sorted_json(decl))
        _message(out, (("role", "system"), ("type", "tool-declare")), [Segment(body, False)])
    if thinking and thinking_effort is not None:
        body = bodies["EFFORT"].replace("{E}", thinking_effort)
        _message(out, (("role", "system"), ("type", "thinking-effort")), [Segment(body, False)])
    return out


def _tool_choice_body(tool_choice: Any) -> str | None:
    directive = tool_choice_directive(tool_choice)  # MessageError for what K3 cannot express
    if directive == "required":
        return protocol_bodies()["TOOL_CHOICE_REQUIRED"]
    if directive == "none":
        return protocol_bodies()["TOOL_CHOICE_NONE"]
    return None


def _response_format_body(response_format: Any) -> str | None:
    kind, schema = response_format_schema(response_format)  # the request's rules (kimik3.types)
    if kind == "json_object":
        return protocol_bodies()["RF_JSON_OBJECT"]
    if kind == "json_schema":
        return protocol_bodies()["RF_JSON_SCHEMA"].replace("{SCHEMA}", _compact_sorted_json(schema))
    return None


def prompt_trailer_segments(
    *,
    thinking: bool,
    tool_choice: Any = None,
    response_format: Any = None,
    add_generation_prompt: bool = True,
) -> list[Segment]:
    """The segments after the conversation: tool-choice and response-format directives, then the
    generation prompt (open ``message role="assistant"``, open ``think`` or ``response``).
    Spec §2 steps 4-5.

    Raises:
        MessageError: an unsupported ``tool_choice`` or ``response_format``.
    """
    out: list[Segment] = []
    body = _tool_choice_body(tool_choice)
    if body is not None:
        _message(out, (("role", "system"), ("type", "tool-choice")), [Segment(body, False)])
    body = _response_format_body(response_format)
    if body is not None:
        _message(out, (("role", "system"), ("type", "response-format")), [Segment(body, False)])
    if add_generation_prompt:
        _open(out, "message", (("role", "assistant"),))
        _open(out, "think" if thinking else "response")
    return out


# -- messages --------------------------------------------------------------------------------


@dataclass(frozen=True)
class RenderedMessage:
    """A typed message with the attributes the encoder resolved for it.

    Attributes:
        message: the typed message (never a copy that was modified).
        tool_name: for tool messages, the resolved tool name (else None).
        tool_index: for tool messages, the 1-based index rendered as ``index="i"``.
    """

    message: Message
    tool_name: str | None = None
    tool_index: int | None = None


def _resolve_tool_run(run: list[ToolMessage], assistant: AssistantMessage | None) -> list[RenderedMessage]:
    """Re-order one run of consecutive tool messages into the order of the preceding assistant's
    tool_calls, matching ``tool_call_id`` or the alias ``"NAME:zero_based_index"``; if any message
    does not match, keep the run's order (vLLM 0.32 ``_normalize_k3_tool_messages``). Decision:
    calls sharing an id take its results in order; a result for an answered call is a MessageError."""
    calls = list(assistant.tool_calls or ()) if assistant is not None else []
    targets: dict[str, list[int]] = {}
    for k, call in enumerate(calls):
        if not (call_name := call.function.name):
            continue
        if call.id:
            targets.setdefault(str(call.id), []).append(k)
        targets.setdefault(f"{call_name}:{k}", []).append(k)
    resolved: list[tuple[int, int, RenderedMessage]] = []
    answered: dict[int, int] = {}  # call position -> the run order of the result that answers it
    for order, msg in enumerate(run):
        positions = targets.get(str(msg.tool_call_id)) if msg.tool_call_id is not None else None
        if positions is None:
            break
        position = next((p for p in positions if p not in answered), None)
        if position is None:  # vLLM labels both with the first call; never two results for one call
            raise MessageError(f"tool messages #{answered[positions[0]] + 1} and #{order + 1} after the last "
                               f"assistant message both answer tool call {msg.tool_call_id!r} (call #"
                               f"{positions[0] + 1}, {calls[positions[0]].function.name!r}): one result per call")
        answered[position] = order  # matched: like vLLM's renderer, the call's name and position win
        resolved.append((position, order, RenderedMessage(msg, calls[position].function.name, position + 1)))
    else:
        resolved.sort(key=lambda item: (item[0], item[1]))
        return [item[2] for item in resolved]
    out: list[RenderedMessage] = []
    for i, msg in enumerate(run, start=1):
        name = msg.name or (calls[i - 1].function.name if i <= len(calls) else None)
        if not name:
            raise ToolNameError(
                f"tool message #{i} after the last assistant message (tool_call_id="
                f"{msg.tool_call_id!r}) has no name, and the preceding assistant message has no "
                f"tool call #{i} to take it from"
            )
        out.append(RenderedMessage(msg, name, i))
    return out


def open_tool_run(messages: Sequence[Message]) -> int:
    """Where the trailing run of tool messages starts (``len(messages)`` when there is none).

    The rule both encoders share (full: :func:`encode_segments`; incremental:
    :class:`~kimik3.PromptEncoder`): a trailing tool run stays open, because a tool message
    appended later can belong to the same run and re-order it (tool results are rendered in the
    order of the assistant's calls, docs/k3-format.md § Tool results). Everything before it is
    final: appending messages never changes its tokens.
    """
    end = len(messages)
    while end > 0 and isinstance(messages[end - 1], ToolMessage):
        end -= 1
    return end


def normalize_messages(
    messages: Iterable[Message | Mapping[str, Any]], *, last_assistant: AssistantMessage | None = None
) -> Iterator[RenderedMessage]:
    """Type the messages and resolve tool-message names, indices and order (docs/k3-format.md § Tool results).

    Args:
        messages: dicts or typed messages (never mutated).
        last_assistant: the assistant message that precedes ``messages`` when encoding resumes
            mid-conversation (used to resolve a leading tool-message run).

    Raises:
        UnknownRoleError, UnknownContentPartError, MessageError: malformed messages (and two
            tool results answering one call).
        ToolNameError: a tool message whose name cannot be resolved.
    """
    run: list[ToolMessage] = []
    for raw in messages:
        msg = to_message(raw)
        if isinstance(msg, ToolMessage):
            run.append(msg)
            continue
        if run:
            yield from _resolve_tool_run(run, last_assistant)
            run = []
        if isinstance(msg, AssistantMessage):
            last_assistant = msg
        yield RenderedMessage(msg)
    if run:
        yield from _resolve_tool_run(run, last_assistant)


def _argument_value(value: Any) -> tuple[str, str]:
    if isinstance(value, str):
        return "string", value
    if value is None:
        kind = "null"
    elif isinstance(value, bool):
        kind = "boolean"
    elif isinstance(value, (int, float)):
        kind = "number"
    elif isinstance(value, dict):
        kind = "object"
    else:
        kind = "array"
    return kind, json.dumps(value, ensure_ascii=False)


def _tool_calls_segments(out: list[Segment], message: AssistantMessage) -> None:
    _open(out, "tools")
    for k, call in enumerate(message.tool_calls or (), start=1):
        _open(out, "call", (("tool", call.function.name), ("index", str(k))))
        raw = call.function.arguments
        try:  # the parser's limits: whatever it accepted renders as arguments again
            args = safe_loads(raw) if raw.strip() else {}
        except ValueError:  # not JSON, or beyond the limits: rendered as the raw text it is
            _open(out, "json", (("type", "object"),))
            _text(out, raw)
            _close(out, "json")
        else:
            if not isinstance(args, dict):
                raise InvalidArgumentsError(
                    f"arguments of tool call #{k} ({call.function.name!r}) must be a JSON object, "
                    f"got {type(args).__name__}: {raw[:80]!r}"
                )
            for key, value in args.items():  # given key order, not sorted (docs/k3-format.md § Typed arguments)
                kind, text = _argument_value(value)
                _open(out, "argument", (("key", key), ("type", kind)))
                _text(out, text)
                _close(out, "argument")
        _close(out, "call")
    _close(out, "tools")


def message_segments(item: RenderedMessage, *, thinking: bool = True) -> list[Segment]:
    """The segments of one message, ``<|open|>message ...`` through ``<|end_of_msg|>``.

    Raises:
        UnknownContentPartError: a video part (sample it with kimik3.media first).
        InvalidArgumentsError: tool-call arguments that are JSON but not an object.
    """
    msg = item.message
    out: list[Segment] = []
    if isinstance(msg, SystemMessage):
        if msg.tools and msg.content:
            # The reference renders only the tools (dropping the content); rendering only the
            # content would drop the tools. Neither may happen silently.
            raise InvalidRequestError(
                f"a system message carries both tools ({len(msg.tools)}) and content: K3 renders one "
                "or the other; send the tools in a system message without content and the text in "
                "another system message"
            )
        if msg.tools is not None and not msg.content:  # `tools: []` with content declares nothing
            decl = [t.model_dump(mode="json", exclude_none=True) for t in msg.tools]
            body = protocol_bodies()["DYNAMIC_TOOL_DECLARE"].replace("{JSON}", _compact_sorted_json(decl))
            _message(out, (("role", "system"), ("type", "tool-declare")), [Segment(body, False)])
            return out
        attrs = [("role", "system")]  # developer is treated as system
        if msg.name:
            attrs.append(("name", msg.name))
        _message(out, attrs, _content_segments(msg.content))
    elif isinstance(msg, UserMessage):
        attrs = [("role", "user")]
        if msg.name:
            attrs.append(("name", msg.name))
        _message(out, attrs, _content_segments(msg.content))
    elif isinstance(msg, ToolMessage):
        assert item.tool_name is not None and item.tool_index is not None, "use normalize_messages()"
        attrs = [("role", "tool"), ("tool", item.tool_name), ("index", str(item.tool_index))]
        _message(out, attrs, _content_segments(msg.content))
    else:
        attrs = [("role", "assistant")]
        if msg.name:
            attrs.append(("name", msg.name))
        _open(out, "message", attrs)
        if thinking:
            _open(out, "think")
            reasoning = msg.reasoning_content or ""
            if reasoning.strip():  # omitted when blank; the tags are always emitted
                out.append(Segment(reasoning, False))
            _close(out, "think")
        _open(out, "response")
        out.extend(_content_segments(msg.content))
        _close(out, "response")
        if msg.tool_calls:
            _tool_calls_segments(out, msg)
        _close(out, "message")
        out.append(_EOM)
    return out


def encode_segments(
    messages: Iterable[Message | Mapping[str, Any]],
    tools: Iterable[ToolSpec | Mapping[str, Any] | Any] | None = None,
    *,
    thinking: bool = True,
    thinking_effort: ThinkingEffort | str | None = "max",
    tool_choice: Any = None,
    response_format: Any = None,
    add_generation_prompt: bool = True,
) -> list[Segment]:
    """Encode a conversation into K3 prompt segments (docs/k3-format.md § Typed arguments).

    Args:
        messages: OpenAI-shaped dicts or :mod:`kimik3.types` messages; never mutated.
        tools: tool declarations (:class:`~kimik3.types.ToolSpec`, OpenAI dicts, or kimik3
            :class:`~kimik3.Tool` objects); rendered deep-sorted and compact.
        thinking: K3's thinking channel on (default) or off.
        thinking_effort: ``"low"``, ``"high"`` or ``"max"`` (default), or None for no directive.
            Ignored when ``thinking`` is False (but still validated).
        tool_choice: ``"auto"``/None (nothing), ``"required"`` or ``"none"``.
        response_format: ``{"type": "json_object"}`` or ``{"type": "json_schema", "json_schema":
            {"schema": {...}}}``; ``{"type": "text"}``/None renders nothing.
        add_generation_prompt: end with the open assistant message and open think/response tag.

    Returns:
        The segments, in order; ``"".join(s.text for s in segments)`` is :func:`render`'s text.

    Raises:
        UnknownRoleError, UnknownContentPartError, InvalidEffortError, ToolNameError,
        InvalidArgumentsError, MessageError: input K3's format cannot express.
    """
    specs = to_tool_specs(tools)
    out = prompt_header_segments(specs, thinking=thinking, thinking_effort=thinking_effort)
    msgs = to_messages(messages)
    end = open_tool_run(msgs)  # the final part, then the open tool run (as PromptEncoder does)
    last_assistant = next((m for m in reversed(msgs[:end]) if isinstance(m, AssistantMessage)), None)
    for item in normalize_messages(msgs[:end]):
        out.extend(message_segments(item, thinking=thinking))
    for item in normalize_messages(msgs[end:], last_assistant=last_assistant):
        out.extend(message_segments(item, thinking=thinking))
    out.extend(
        prompt_trailer_segments(
            thinking=thinking,
            tool_choice=tool_choice,
            response_format=response_format,
            add_generation_prompt=add_generation_prompt,
        )
    )
    return out


def render(
    messages: Iterable[Message | Mapping[str, Any]],
    tools: Iterable[ToolSpec | Mapping[str, Any] | Any] | None = None,
    *,
    thinking: bool = True,
    thinking_effort: ThinkingEffort | str | None = "max",
    tool_choice: Any = None,
    response_format: Any = None,
    add_generation_prompt: bool = True,
) -> str:
    """The K3 prompt text: the concatenation of :func:`encode_segments`' segment texts.

    Same parameters and errors as :func:`encode_segments`. Note that tokenizing this string in one
    piece does NOT give K3's prompt ids (merges must not cross segments, and text that looks like
    a marker must stay text): use :class:`kimik3.K3Tokenizer` on the segments.
    """
    return "".join(
        s.text
        for s in encode_segments(
            messages,
            tools,
            thinking=thinking,
            thinking_effort=thinking_effort,
            tool_choice=tool_choice,
            response_format=response_format,
            add_generation_prompt=add_generation_prompt,
        )
    )


def render_output(message: AssistantMessage | Mapping[str, Any], *, thinking: bool = True) -> str:
    """The raw text a K3 model generates for ``message``: what follows the generation prompt
    (``<|open|>message role="assistant"<|sep|><|open|>think<|sep|>``, or ``response`` with thinking
    off) up to and including ``<|close|>message<|sep|>`` (the ``<|end_of_msg|>`` stop token is not
    part of the text). The inverse of :func:`~kimik3.formats.k3.parse`; handy for scripting
    :class:`~kimik3.ScriptedEngine` replies.

    Args:
        message: an assistant message (a dict without ``role`` is taken as one).

    Raises:
        MessageError: not an assistant message.
    """
    if isinstance(message, Mapping) and "role" not in message:
        message = {"role": "assistant", **message}
    msg = to_message(message)
    if not isinstance(msg, AssistantMessage):
        raise MessageError(f"render_output takes an assistant message, got role {msg.role!r}")
    text = "".join(s.text for s in message_segments(RenderedMessage(msg), thinking=thinking))
    prompt: list[Segment] = []
    _open(prompt, "message", [("role", "assistant"), *([("name", msg.name)] if msg.name else [])])
    _open(prompt, "think" if thinking else "response")
    prefix = "".join(s.text for s in prompt)
    assert text.startswith(prefix) and text.endswith(END_OF_MSG)
    return text[len(prefix) : -len(END_OF_MSG)]
