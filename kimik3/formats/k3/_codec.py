"""K3's codec: a request becomes prompt ids and images; raw output text becomes events and a
completion. Everything a token engine needs from K3, behind two calls (docs/k3-format.md)::

    codec = K3Codec(tokenizer)
    prompt = codec.encode(request, cache=cache)   # prompt.ids, prompt.images (image parts, in order)
    decoder = codec.decoder(request, prompt)
    for chunk in engine_output: events = decoder.feed(chunk)
    events = decoder.finish(); completion = decoder.completion(model)

The request is OpenAI-shaped (:class:`~kimik3.types.ChatRequest`); K3's own state travels beside
it, never inside: incremental encoding (:class:`PromptEncoder` keeps the ids of a growing
conversation and tokenizes only new messages; :class:`PromptCache` holds one per conversation,
with its media index) and a pre-encoded prompt are handed to the engine call
(``engine.stream(request, prompt_cache=..., prompt_ids=...)``), which hands them to
:meth:`K3Codec.encode`. :meth:`K3Codec.encoding_options` reads the encoder's options off a request.

Why one file a little past the ~600-line guide (issue 42 point 5): it is the one seam between a
request and a token engine, both directions, and the decoder reads the encoder's prompt; the
grammar's parts live apart (``_encode``, ``_parse``, ``_events``, ``_values``, ``_markers``).
"""

from __future__ import annotations

import logging
import operator
import sys
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, overload

from ..._exceptions import TokenizerError
from ..._text import visible_text
from ...types import (
    CLOSED_MID_ANSWER,
    AssistantMessage,
    ChatCompletion,
    ChatRequest,
    Choice,
    ImagePart,
    Message,
    PromptTokensDetails,
    ToolMessage,
    ToolSpec,
    Usage,
    VideoPart,
    clamp_usage,
    shared_prefix,
    to_message,
    to_messages,
    to_tool_specs,
)
from ._encode import (
    ThinkingEffort,
    message_segments,
    normalize_messages,
    open_tool_run,
    prompt_header_segments,
    prompt_trailer_segments,
)
from ._events import Event, ToolCallArgumentsDelta
from ._media import expand_videos, image_prompt_tokens, prepare_request_image
from ._parse import StreamParser
from ._tokenizer import K3Tokenizer, estimate_tokens

__all__ = [
    "EncodedPrompt",
    "K3Codec",
    "K3Decoder",
    "MediaIndex",
    "MediaScan",
    "PromptCache",
    "PromptEncoder",
    "PromptIds",
    "RawChunk",
    "ids_list",
    "media_scan",
]

log = logging.getLogger("kimik3.formats.k3")


_ID_BYTES = 3
"""Bytes an id takes in a :class:`PromptEncoder`'s cached prefix: K3's ids are below 2**24
(163,840), so the top byte of each ``array('I')`` item is dropped; a 1M-token history costs 3 MB
(4 bytes an id were 1.3x its text, issue 44 point 2, ``bench/long.py``)."""

_TOP = 3 if sys.byteorder == "little" else 0  # where a native uint32 keeps its top byte
_KEPT = (0, 1, 2) if _TOP == 3 else (1, 2, 3)


def _pack_ids(ids: Sequence[int]) -> bytearray:
    """``ids`` as ``_ID_BYTES`` bytes each (in C: no Python object an id).

    Raises:
        TokenizerError: an id of 2**24 or more (no K3 tokenizer has one).
    """
    raw = bytearray(array("I", ids).tobytes())
    if raw[_TOP::4].count(0) != len(ids):
        raise TokenizerError(f"prompt id {max(ids)} does not fit in {_ID_BYTES} bytes (ids must be below 2**24)")
    del raw[_TOP::4]
    return raw


def _unpack_ids(packed: bytes | bytearray, n: int) -> array[int]:
    """The first ``n`` ids of ``_pack_ids``' bytes, as an ``array('I')`` (C-level copies)."""
    out = bytearray(4 * n)
    for k, pos in enumerate(_KEPT):
        out[pos::4] = packed[k : _ID_BYTES * n : _ID_BYTES]
    ids = array("I")
    ids.frombytes(out)
    return ids


class PromptIds(Sequence[int]):
    """An immutable sequence of prompt ids: a shared, append-only prefix plus a tail.

    Returned by :meth:`PromptEncoder.encode` so that adding a turn to a 1M-token history costs
    O(turn): the cached prefix is shared, not copied. Compares equal to a list with the same ids.
    Use :meth:`tolist` where a real list is needed (one O(n) copy). The prefix is
    ``_pack_ids``' bytes (``_ID_BYTES`` an id, not a Python int object each: a 1M-token
    history costs 3 MB).
    """

    __slots__ = ("_base", "_n", "_tail")

    def __init__(self, base: bytearray, n: int, tail: list[int]) -> None:
        self._base = base  # packed ids, only ever appended to beyond n by its owner
        self._n = n
        self._tail = tail

    def __len__(self) -> int:
        return self._n + len(self._tail)

    @overload
    def __getitem__(self, index: int) -> int: ...
    @overload
    def __getitem__(self, index: slice) -> list[int]: ...
    def __getitem__(self, index: int | slice) -> int | list[int]:
        if isinstance(index, slice):
            return self.tolist()[index]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("PromptIds index out of range")
        if index >= self._n:
            return self._tail[index - self._n]
        return _unpack_ids(self._base[_ID_BYTES * index : _ID_BYTES * (index + 1)], 1)[0]

    def __iter__(self) -> Iterator[int]:
        yield from _unpack_ids(self._base, self._n)
        yield from self._tail

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PromptIds):
            return self.tolist() == other.tolist()
        if isinstance(other, (list, tuple)):
            return len(self) == len(other) and self.tolist() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PromptIds(len={len(self)})"

    def tolist(self) -> list[int]:
        """A new list of the ids (C-level passes over the shared prefix)."""
        ids = _unpack_ids(self._base, self._n).tolist()
        ids.extend(self._tail)
        return ids


def ids_list(ids: Sequence[int]) -> list[int]:
    """``ids`` as the ``list[int]`` an engine's API takes: :meth:`PromptIds.tolist` (a C-level copy;
    ``list(prompt_ids)`` walks a Python generator, ~1.3x slower at 1M ids: bench/long.py), a list
    as it is (engines never mutate it), anything else copied."""
    if isinstance(ids, list):
        return ids
    if isinstance(ids, PromptIds):
        return ids.tolist()
    return list(ids)


class PromptEncoder:
    """Incremental K3 prompt encoding for a growing conversation.

    A long-horizon agent adds one turn at a time to a history of up to 1M tokens; this encoder
    keeps the ids of the history it has already encoded and tokenizes only what is new. Reuse
    requires the same typed messages in the same order (the same objects, or equal ones:
    :func:`~kimik3.types._prefix.shared_prefix`; never mutate one after it was encoded —
    :class:`kimik3.Agent` does not); anything else falls back to encoding from the first changed
    message. Tool declarations and
    thinking settings are fixed per encoder.

    Args:
        tokenizer: the model's :class:`K3Tokenizer`.
        tools: tool declarations, rendered once in the header.
        thinking: thinking channel on/off.
        thinking_effort: low / high / max or None.

    Raises:
        InvalidEffortError: a bad ``thinking_effort`` (at construction).
    """

    def __init__(
        self,
        tokenizer: K3Tokenizer,
        tools: Iterable[ToolSpec | Mapping[str, Any] | Any] | None = None,
        *,
        thinking: bool = True,
        thinking_effort: ThinkingEffort | str | None = "max",
    ) -> None:
        self.tokenizer = tokenizer
        self.thinking = thinking
        specs = to_tool_specs(tools)
        self._header = _header_ids(tokenizer, specs, thinking, thinking_effort)
        # Committed state: complete blocks (a non-tool message, or a whole run of tool messages
        # followed by a non-tool message) whose ids cannot change when messages are appended.
        self._msgs: list[Message] = []  # in the caller's order
        self._ids = _pack_ids(self._header)  # _ID_BYTES an id (see PromptIds)
        # per message (arrays: 4 bytes each, not a list slot and an int object):
        self._block_first = array("I")  # the index of the first message of its block
        self._block_ids = array("I")  # the number of ids before its block
        self._last_assistant: list[AssistantMessage | None] = []  # per message: last assistant so far

    @property
    def committed_messages(self) -> int:
        """How many leading messages are cached."""
        return len(self._msgs)

    def encode(
        self,
        messages: Sequence[Message | Mapping[str, Any]],
        *,
        tool_choice: Any = None,
        response_format: Any = None,
        add_generation_prompt: bool = True,
    ) -> PromptIds:
        """The prompt ids of ``messages``, as an immutable :class:`PromptIds` sequence.

        Equal to ``tokenizer.encode_messages(messages, tools, ...)`` with this encoder's settings;
        costs O(new messages), not O(history) (``.tolist()`` when an engine needs a list).

        Raises:
            As :func:`kimik3.formats.k3.encode_segments`.
        """
        msgs = self._msgs
        n = shared_prefix(msgs, messages)  # longest reusable prefix (cached messages are typed already)
        # a tool message right after a committed tool run belongs to that run: re-encode the run
        if (
            0 < n < len(messages)
            and isinstance(msgs[n - 1], ToolMessage)
            and isinstance(to_message(messages[n]), ToolMessage)
        ):
            n = self._block_first[n - 1]
        if n < len(msgs):
            n = self._block_first[n]
            # A new list, not `del`: PromptIds views handed out earlier share the old one.
            self._ids = self._ids[: _ID_BYTES * self._block_ids[n]]
            del msgs[n:], self._block_first[n:], self._block_ids[n:], self._last_assistant[n:]
        new = to_messages(messages[n:])  # only what is not cached; new[k] is message n + k
        end = open_tool_run(new)  # a trailing tool run stays uncommitted (the shared rule)
        last_assistant = self._last_assistant[n - 1] if n else None
        enc = self.tokenizer.encode_segments
        thinking = self.thinking
        items = list(normalize_messages(new[:end], last_assistant=last_assistant))
        i = 0
        while i < end:  # commit block by block (a non-tool message, or a whole tool run)
            j = i + 1
            if isinstance(new[i], ToolMessage):
                while j < end and isinstance(new[j], ToolMessage):
                    j += 1
            start_ids = len(self._ids) // _ID_BYTES
            block: list[int] = []
            for item in items[i:j]:
                block.extend(enc(message_segments(item, thinking=thinking)))
            self._ids += _pack_ids(block)
            for k in range(i, j):
                msg = new[k]
                if isinstance(msg, AssistantMessage):
                    last_assistant = msg
                msgs.append(msg)
                self._block_first.append(n + i)
                self._block_ids.append(start_ids)
                self._last_assistant.append(last_assistant)
            i = j
        tail: list[int] = []
        for item in normalize_messages(new[end:], last_assistant=last_assistant):
            tail.extend(enc(message_segments(item, thinking=thinking)))
        tail.extend(
            enc(
                prompt_trailer_segments(
                    thinking=thinking,
                    tool_choice=tool_choice,
                    response_format=response_format,
                    add_generation_prompt=add_generation_prompt,
                )
            )
        )
        return PromptIds(self._ids, len(self._ids) // _ID_BYTES, tail)


_HEADERS: dict[tuple[int, str, bool, str | None], tuple[K3Tokenizer, list[int]]] = {}
_HEADERS_KEPT = 16


def _header_ids(
    tokenizer: K3Tokenizer, specs: Sequence[ToolSpec], thinking: bool, effort: ThinkingEffort | str | None
) -> list[int]:
    """The prompt head's ids (instructions of the protocol, tool declarations, thinking), encoded
    once per process for each tokenizer and tool set: concurrent conversations with the same
    tools (agents of one harness) do not each tokenize the same ~1,300-token head before the
    engine sees their first request (issue 44). A copy: encoders extend their own."""
    key = (id(tokenizer), _tools_key(specs), thinking, effort)
    hit = _HEADERS.get(key)
    if hit is None or hit[0] is not tokenizer:
        ids = tokenizer.encode_segments(prompt_header_segments(specs, thinking=thinking, thinking_effort=effort))
        if len(_HEADERS) >= _HEADERS_KEPT:
            _HEADERS.pop(next(iter(_HEADERS)))
        hit = _HEADERS[key] = (tokenizer, ids)
    return list(hit[1])


# -- media of a conversation (scanned on every request, so kept cheap) -------------------------


@dataclass(frozen=True)
class MediaScan:
    """The media of a conversation: its image parts in prompt order, and whether a video is there."""

    images: list[ImagePart]
    has_video: bool


def _message_media(msg: Message) -> tuple[list[ImagePart], int]:
    content = msg.content
    if content.__class__ is not list:
        return [], 0
    images = [p for p in content if p.__class__ is ImagePart]
    videos = sum(1 for p in content if p.__class__ is VideoPart)
    return images, videos


class MediaIndex:
    """The media of a growing conversation, each message scanned once (reused while the leading
    messages stay, like :class:`~kimik3.PromptEncoder`): a 1,000-turn history costs a pointer
    comparison per message per request (in C), not a look into every message."""

    def __init__(self) -> None:
        self._msgs: list[Message] = []
        self._images: list[ImagePart] = []
        self._image_ends = array("I")  # len(_images) after message i (4 bytes a message)
        self._video_ends = array("I")  # videos seen up to message i

    def scan(self, messages: Sequence[Message]) -> MediaScan:
        """The media of ``messages`` (typed)."""
        msgs = self._msgs
        n = shared_prefix(msgs, messages)
        if n < len(msgs):
            del msgs[n:], self._image_ends[n:], self._video_ends[n:]
            del self._images[(self._image_ends[-1] if n else 0) :]
        videos = self._video_ends[-1] if n else 0
        for msg in messages[n:]:
            images, count = _message_media(msg)
            self._images.extend(images)
            videos += count
            msgs.append(msg)
            self._image_ends.append(len(self._images))
            self._video_ends.append(videos)
        return MediaScan(list(self._images), videos > 0)


def media_scan(messages: Sequence[Message], index: MediaIndex | None = None) -> MediaScan:
    """:class:`MediaScan` of ``messages``, incremental when a :class:`MediaIndex` is given."""
    if index is not None:
        return index.scan(messages)
    images: list[ImagePart] = []
    videos = 0
    for msg in messages:
        found, count = _message_media(msg)
        images.extend(found)
        videos += count
    return MediaScan(images, videos > 0)


class PromptCache:
    """Per-conversation incremental prompt encoders (see :class:`PromptEncoder`).

    Hand the same cache with every request of one growing conversation (the Agent does) and
    token engines tokenize only the new turn. Safe to share between engines with the same
    tokenizer; one conversation per cache.
    """

    def __init__(self) -> None:
        self._encoders: dict[tuple[int, str, bool, str | None], PromptEncoder] = {}
        self._tools: tuple[list[ToolSpec], str] = ([], "")  # the last request's tools and their key
        self.media = MediaIndex()
        """The conversation's image and video parts, scanned once per message."""

    def encoder(
        self, tokenizer: K3Tokenizer, tools: Sequence[ToolSpec], thinking: bool, effort: str | None
    ) -> PromptEncoder:
        """The encoder for these settings (created on first use; at most a few are kept). The
        tools' key (their JSON) is made again only when the declarations are not the last
        request's objects (issue 44: a dump of every tool a call; a declaration is never changed
        in place once sent, as a message is not: :class:`PromptEncoder`)."""
        last, tools_key = self._tools
        if len(tools) != len(last) or not all(map(operator.is_, tools, last)):
            tools_key = _tools_key(tools)
            self._tools = (list(tools), tools_key)
        key = (id(tokenizer), tools_key, thinking, effort)
        enc = self._encoders.get(key)
        if enc is None or enc.tokenizer is not tokenizer:
            if len(self._encoders) >= 4:  # settings changed mid-conversation: drop the oldest
                self._encoders.pop(next(iter(self._encoders)))
            enc = PromptEncoder(tokenizer, tools, thinking=thinking, thinking_effort=effort)
            self._encoders[key] = enc
        return enc


def _tools_key(tools: Sequence[ToolSpec]) -> str:
    return "\x1f".join(t.model_dump_json(exclude_none=True) for t in tools)


@dataclass(frozen=True, slots=True)
class RawChunk:
    """A piece of raw K3 output from a token engine.

    Attributes:
        text: newly generated text (markers included, contiguous).
        finish_reason: set on the last chunk (``"stop"`` or ``"length"``).
        completion_tokens: total generated tokens so far, when the engine knows.
        prompt_tokens: the prompt's token count, when the engine reports it.
        prompt_token_ids: the prompt ids as the engine received them, when it echoes them
            (vLLM does): proof that kimik3's exact ids reached the engine.
        cached_tokens: prompt tokens served from the engine's prefix cache, when it reports
            them (vLLM's ``RequestOutput.num_cached_tokens``; a server's
            ``usage.prompt_tokens_details.cached_tokens``).
    """

    text: str = ""
    finish_reason: str | None = None
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    prompt_token_ids: Sequence[int] | None = None
    cached_tokens: int | None = None


@dataclass(frozen=True)
class EncodedPrompt:
    """A request as a token engine sends it.

    Attributes:
        ids: the K3 prompt token ids (a :class:`PromptIds` view when encoded incrementally).
        images: the image parts for the prompt's ``<|kimi_image_placeholder|>`` tokens, in order
            (videos already expanded into timestamped frames).
        request: the request as encoded (its messages with videos expanded).
    """

    ids: Sequence[int]
    images: list[ImagePart]
    request: ChatRequest


class K3Codec:
    """Kimi K3's codec for token engines: request -> (prompt ids, images); raw text -> events.

    Args:
        tokenizer: the K3 tokenizer; None counts tokens with :func:`estimate_tokens` and cannot
            encode (:meth:`encode` then raises TokenizerError; engines without a tokenizer, like
            the scripted one, count the rendered prompt instead).
        allow_local_files: let image / video parts name local files (the engine's option of the
            same name); otherwise only ``data:`` URLs (and http(s) images, passed on) are read.
    """

    def __init__(self, tokenizer: K3Tokenizer | None, *, allow_local_files: bool = False) -> None:
        self.tokenizer = tokenizer
        self.allow_local_files = allow_local_files

    @staticmethod
    def encoding_options(request: ChatRequest) -> dict[str, Any]:
        """The K3 encoder's options for ``request`` (``thinking``, ``thinking_effort``,
        ``tool_choice``, ``response_format``), as keyword arguments of
        :func:`~kimik3.formats.k3.encode_segments` / :func:`~kimik3.formats.k3.render`: the
        effort directive is the request's ``reasoning_effort``, none when thinking is off."""
        return {
            "thinking": request.thinking,
            "thinking_effort": request.settings.reasoning_effort if request.thinking else None,
            "tool_choice": request.tool_choice,
            "response_format": request.response_format,
        }

    def encode(
        self, request: ChatRequest, *, cache: PromptCache | None = None, prompt_ids: Sequence[int] | None = None
    ) -> EncodedPrompt:
        """The prompt of ``request``: ids (incremental with ``cache``; taken as they are from
        ``prompt_ids``, whose generation prefix must match ``request.thinking``) and the image
        parts in prompt order.

        Args:
            request: the request.
            cache: the conversation's :class:`PromptCache` (only new messages are tokenized).
            prompt_ids: an already encoded K3 prompt, sent instead of encoding the messages.

        Raises:
            MessageError (and subclasses): messages K3's format cannot express.
            MediaDecodeError, NoVideoStreamError: an unreadable video.
            VideoTooLongError: a video over ``MediaConfig``'s caps.
            MediaError: a local file path while local files are not allowed.
            TokenizerError: no tokenizer.
        """
        scan = media_scan(request.messages, cache.media if cache is not None else None)
        if scan.has_video:
            messages = expand_videos(request.messages, allow_local_files=self.allow_local_files)
            request = replace(request, messages=messages)
            scan = media_scan(request.messages)
        images = scan.images
        if prompt_ids is not None:
            return EncodedPrompt(prompt_ids, images, request)
        tok = self.tokenizer
        if tok is None:
            raise TokenizerError("encoding a K3 prompt needs the K3 tokenizer (a model directory)")
        options = self.encoding_options(request)
        if cache is not None:
            enc = cache.encoder(tok, request.tools, options["thinking"], options["thinking_effort"])
            ids: Sequence[int] = enc.encode(
                request.messages, tool_choice=request.tool_choice, response_format=request.response_format
            )
        else:
            ids = tok.encode_messages(request.messages, request.tools, **options)
        return EncodedPrompt(ids, images, request)

    @staticmethod
    def expand(
        request: ChatRequest, *, allow_local_files: bool = False, cache: PromptCache | None = None
    ) -> ChatRequest:
        """``request`` with every video part replaced by its sampled frames (the same object
        when there is no video; docs/k3-format.md § Media); local video files only when
        ``allow_local_files``; ``cache``'s media index makes the scan incremental."""
        if media_scan(request.messages, cache.media if cache is not None else None).has_video:
            return replace(request, messages=expand_videos(request.messages, allow_local_files=allow_local_files))
        return request

    def decoder(self, request: ChatRequest, prompt: EncodedPrompt) -> K3Decoder:
        """A decoder of the raw text an engine generates for ``prompt``."""
        return K3Decoder(self, request.thinking, prompt)

    def count(self, text: str) -> int:
        """Tokens of raw output text (markers as single tokens), or an estimate without a tokenizer.
        A lone surrogate (a server's ``"\\ud800"`` in JSON) is counted as its visible escape."""
        if self.tokenizer is None:
            return estimate_tokens(text)
        return len(self.tokenizer.encode_control(visible_text(text))) if text else 0

    def image_tokens(self, parts: Sequence[ImagePart]) -> int:
        """Extra prompt tokens of images: each placeholder token becomes a whole block
        (docs/k3-format.md § Media tokens); http(s) images count 0 (size unknown here)."""
        extra = 0
        for part in parts:
            url = part.image_url.url
            if url.startswith(("http://", "https://")):
                continue  # size unknown until the server fetches it
            prepared = prepare_request_image(url, allow_local_files=self.allow_local_files)
            width, height = prepared.size
            extra += image_prompt_tokens(self.tokenizer, width, height, prepared.token_count) - 1
        return extra


def _count(value: Any) -> int | None:
    """A token count a server sent, when it is one (a non-negative int)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _merge_argument_deltas(events: list[Event]) -> list[Event]:
    """``events`` with each run of consecutive :class:`ToolCallArgumentsDelta` of one call as
    one (the fragments concatenated: the call's arguments text is unchanged)."""
    if len(events) < 2:
        return events
    out: list[Event] = []
    for event in events:
        last = out[-1] if out else None
        if (event.__class__ is ToolCallArgumentsDelta and last.__class__ is ToolCallArgumentsDelta
                and last.index == event.index and last.id == event.id):
            out[-1] = ToolCallArgumentsDelta(event.index, event.id, last.delta + event.delta)
        else:
            out.append(event)
    return out


class K3Decoder:
    """Raw K3 output chunks -> events (:class:`StreamParser`) and, at the end, the completion."""

    def __init__(self, codec: K3Codec, thinking: bool, prompt: EncodedPrompt) -> None:
        self._codec = codec
        self._prompt = prompt
        self._parser = StreamParser(thinking)
        self._raw: list[str] = []
        self.finish_reason: str | None = None
        self._completion_tokens: int | None = None
        self._prompt_tokens: int | None = None
        self._cached_tokens: int | None = None

    def feed(self, chunk: RawChunk) -> list[Event]:
        """The events of one chunk; consecutive argument fragments of one call in it are one
        :class:`ToolCallArgumentsDelta` (they arrived together: each event crosses every layer
        between the engine and the agent's caller, issue 44)."""
        if chunk.finish_reason is not None:
            self.finish_reason = chunk.finish_reason
        if chunk.completion_tokens is not None:
            self._completion_tokens = chunk.completion_tokens
        if chunk.prompt_tokens is not None:
            self._prompt_tokens = chunk.prompt_tokens
        if chunk.cached_tokens is not None:
            self._cached_tokens = chunk.cached_tokens
        if not chunk.text:
            return []
        self._raw.append(chunk.text)
        return _merge_argument_deltas(self._parser.feed(chunk.text))

    def finish(self) -> list[Event]:
        """The last events (a call cut by the end of the stream), its argument fragments one
        delta as in :meth:`feed`."""
        return _merge_argument_deltas(self._parser.finish(self.finish_reason))

    def completion(self, model: str) -> ChatCompletion:
        """The completion of everything fed (after :meth:`finish`). Usage: the engine's counts
        when it gave them, else the codec's (prompt ids plus expanded image blocks)."""
        text = "".join(self._raw)
        # the engine's counts when they can be right, else kimik3's own: never 0 for a text or a prompt
        completion_tokens = _count(self._completion_tokens)
        if completion_tokens is None or (completion_tokens == 0 and text):
            completion_tokens = self._codec.count(text)
        prompt_tokens = _count(self._prompt_tokens)
        if not prompt_tokens:  # the engine did not say: the prompt ids plus the expanded image blocks
            prompt_tokens = len(self._prompt.ids) + self._codec.image_tokens(self._prompt.images)
        usage = Usage(
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            total_tokens=prompt_tokens + completion_tokens,
            prompt_tokens_details=PromptTokensDetails(cached_tokens=self._cached_tokens)
            if self._cached_tokens is not None else None,
        )
        clamped = [f"usage.{name} was {sent}: kimik3 counted {kept} itself" for name, sent, kept in (
            ("prompt_tokens", self._prompt_tokens, prompt_tokens),
            ("completion_tokens", self._completion_tokens, completion_tokens)) if isinstance(sent, int) and sent < 0]
        clamped += clamp_usage(usage)
        if clamped:
            log.warning("kimik3: the engine's usage did not add up: %s", "; ".join(clamped))
        parsed = self._parser.result()
        return ChatCompletion(
            model=model,
            choices=[Choice(message=parsed.to_message(), finish_reason=parsed.finish_reason)],
            usage=usage,
            truncated=parsed.truncated,
            # no chunk said why the output ended: the stream stopped (a closed connection), not max_tokens
            interrupted=CLOSED_MID_ANSWER if parsed.truncated and self.finish_reason is None else None,
            dropped_tool_calls=[c.name for c in parsed.incomplete_tool_calls],
            misplaced_tool_calls=list(parsed.misplaced_tool_calls),
            issues=clamped,
            raw_text=text,
        )
