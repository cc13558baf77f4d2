"""ScriptedEngine: replay raw K3 outputs through the real parser (offline testing)."""

from __future__ import annotations

import inspect
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import fields
from typing import Any

import anyio

from .._checks import check_int
from .._defaults import K3_CONTEXT_WINDOW
from .._exceptions import ContextLengthExceededError, EngineError, UserError
from ..formats.k3 import (
    END_OF_MSG,
    EncodedPrompt,
    K3Codec,
    K3Tokenizer,
    PromptCache,
    RawChunk,
    estimate_tokens,
    media_scan,
    render,
    render_output,
)
from ..types import ChatRequest, ImagePart, Message, shared_prefix
from ._base import TokenEngine

__all__ = ["ScriptedCall", "ScriptedEngine"]

_MARKERS = ("<|open|>", "<|close|>", "<|sep|>", END_OF_MSG)
"""A scripted text holding none of these is plain text: the answer."""

ScriptFunction = Callable[[list[Message]], "str | Awaitable[str]"]


class _MessageLog:
    """Every message a :class:`ScriptedEngine` was sent, each once: a call's messages are a few
    ranges of it (a growing history is one range), so 3,000 calls of a growing conversation
    cost O(messages) memory, not a copy of the history per call."""

    def __init__(self) -> None:
        self.items: list[Message] = []
        self._last: list[Message] = []  # the last call's messages
        self._last_ranges: tuple[int, ...] = ()
        self._head: ChatRequest | None = None  # the last call's request without its messages

    def head(self, request: ChatRequest) -> ChatRequest:
        """``request`` without its messages: the last call's head when equal (the calls of one run
        share one, ~0.3 KB a call: bench/long.py), else a new one. Heads are never mutated."""
        head = _with_messages(request, [])
        if self._head is not None and self._head == head:
            return self._head
        self._head = head
        return head

    def record(self, messages: Sequence[Message]) -> tuple[int, ...]:
        """Log a call's messages; returns their ranges of :attr:`items`, flat: ``(start, end,
        start, end, ...)`` (one tuple a call, not a tuple of pairs)."""
        n = shared_prefix(self._last, messages)
        ranges: list[int] = []
        left, last = n, self._last_ranges
        for k in range(0, len(last), 2):  # the shared part: the last call's ranges, cut at n
            if left <= 0:
                break
            a, b = last[k], last[k + 1]
            ranges += (a, min(b, a + left))
            left -= b - a
        if n < len(messages):
            start = len(self.items)
            self.items.extend(messages[n:])
            if ranges and ranges[-1] == start:
                ranges[-1] = len(self.items)
            else:
                ranges += (start, len(self.items))
        self._last, self._last_ranges = list(messages), tuple(ranges)
        return self._last_ranges

    def messages(self, ranges: tuple[int, ...]) -> tuple[Message, ...]:
        items = self.items
        return tuple(m for k in range(0, len(ranges), 2) for m in items[ranges[k] : ranges[k + 1]])


def _with_messages(request: ChatRequest, messages: list[Message]) -> ChatRequest:
    """A shallow copy of ``request`` holding ``messages`` (checked already: no ``__post_init__``
    again; ``copy.copy``'s reduce protocol cost as much as the rest of a call's record, issue 44)."""
    out = object.__new__(ChatRequest)
    for name in _REQUEST_FIELDS:
        setattr(out, name, getattr(request, name))
    out.messages = messages
    return out


_REQUEST_FIELDS = tuple(f.name for f in fields(ChatRequest) if f.name != "messages")


class ScriptedCall:
    """What a :class:`ScriptedEngine` was asked: the request, its messages (a snapshot), and its
    K3 prompt text (rendered on first access of :attr:`prompt`, then kept).

    The engine keeps every message once (a call holds ranges of the engine's log, not a copy of
    its history): :attr:`messages` and :attr:`request` are rebuilt when read.
    """

    __slots__ = ("_head", "_log", "_prompt", "_ranges", "_request")  # one a call: no __dict__ each

    def __init__(self, request: ChatRequest, log: _MessageLog) -> None:
        self._head = log.head(request)
        self._log = log
        self._ranges = log.record(request.messages)
        self._request: ChatRequest | None = None
        self._prompt: str | None = None

    @property
    def messages(self) -> tuple[Message, ...]:
        """The call's messages, as they were sent."""
        return self._log.messages(self._ranges)

    @property
    def request(self) -> ChatRequest:
        """The request of this call (its messages as they were sent; built on first access, then kept)."""
        if self._request is None:
            self._request = _with_messages(self._head, list(self.messages))
        return self._request

    @property
    def prompt(self) -> str:
        """The K3 prompt text of this call (rendered on first access and cached)."""
        if self._prompt is None:
            self._prompt = self.render()
        return self._prompt

    def render(self) -> str:
        """The K3 prompt text of this call (rendered anew; the engine without a tokenizer counts
        its tokens by it without keeping it)."""
        head = self._head
        return render(self.messages, head.tools, **K3Codec.encoding_options(head))

    def __repr__(self) -> str:
        return f"ScriptedCall(messages={len(self.messages)}, tools={len(self._head.tools)})"


class ScriptedEngine(TokenEngine):
    """A public testing engine that replays raw K3 output text, like pydantic-ai's FunctionModel.

    Each model call takes the next text from ``responses`` (or calls ``responses(messages)``,
    sync or async, with the conversation's typed messages) and streams it in chunks of
    ``chunk_size`` characters through kimik3's real K3 parser — so agents and tools are tested
    offline against exactly what a K3 engine would return, model slips included. The prompt is
    really encoded (bad messages raise as they would against a real engine) and recorded in
    :attr:`calls`.

    A text without any K3 marker (``<|open|>``, ``<|close|>``, ``<|sep|>``, ``<|end_of_msg|>``)
    is the answer: it is sent as :func:`~kimik3.formats.k3.render_output` ``({"content": text})``
    would write it, so ``ScriptedEngine(["Hello!"])`` answers "Hello!" with finish ``"stop"``.
    A text with markers is raw K3 output, taken as it is: one that closes the message
    (``<|close|>message<|sep|>``) finishes with ``"stop"``; one that does not, with ``"length"``
    (as a ``max_tokens`` cut would).

    Example: an agent offline, one tool call then the answer::

        import anyio
        from kimik3 import Agent, ScriptedEngine, tool
        from kimik3.formats.k3 import render_output

        @tool
        def add(a: int, b: int) -> int:
            '''Add two integers.'''
            return a + b

        engine = ScriptedEngine([
            render_output({"reasoning_content": "Use the tool.", "tool_calls": [
                {"id": "add:0", "type": "function",
                 "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}]}),
            "2 + 3 = 5.",  # plain text: the answer
        ])
        result = anyio.run(Agent(tools=[add], engine=engine).run, "What is 2 + 3?")
        assert result.output == "2 + 3 = 5." and result.stop_reason == "completed"
        assert result.messages[2].content == "5"  # the tool's result, as the model saw it

    Args:
        responses: raw K3 output texts (what the model generates after the generation prompt),
            one per call, or a function of the messages returning one.
        chunk_size: characters per streamed chunk (>= 1).
        tokenizer: a K3 tokenizer for exact token usage; without one, usage is
            :func:`~kimik3.formats.k3.estimate_tokens` of the rendered prompt and output.
        model: the model name reported in completions.
        max_model_len: the context window in tokens (default K3's, 1,048,576): a prompt that
            leaves no room for an output token raises :class:`~kimik3.ContextLengthExceededError`
            (as vLLM refuses a prompt over its ``max_model_len``), and the output is cut
            (finish ``"length"``) where the window ends, as vLLM clamps ``max_tokens``.

    Raises:
        UserError: ``chunk_size`` or ``max_model_len`` < 1.
        EngineError: more calls than scripted responses (when streaming).
        ContextLengthExceededError: a prompt over ``max_model_len`` (when streaming).
    """

    def __init__(
        self,
        responses: Sequence[str] | ScriptFunction,
        *,
        chunk_size: int = 16,
        tokenizer: K3Tokenizer | None = None,
        model: str = "scripted-k3",
        max_model_len: int = K3_CONTEXT_WINDOW,
    ) -> None:
        super().__init__(tokenizer)
        check_int("ScriptedEngine(chunk_size=...)", chunk_size, minimum=1)
        check_int("ScriptedEngine(max_model_len=...)", max_model_len, minimum=1)
        self.max_model_len = max_model_len
        self._log = _MessageLog()
        if isinstance(responses, (str, bytes)):  # list("abc") would script three one-letter answers
            raise UserError("ScriptedEngine(responses=...) takes a list of raw outputs (or a function): wrap one "
                            "string in a list")
        if not callable(responses) and not all(isinstance(r, str) for r in responses):
            raise UserError("ScriptedEngine(responses=...) must be a list of raw output strings (or a function)")
        self._responses = responses if callable(responses) else list(responses)
        self._next = 0
        self.chunk_size = chunk_size
        self.model = model
        self.calls: list[ScriptedCall] = []

    async def context_window(self) -> int:
        """``max_model_len``: the window the engine enforces."""
        return self.max_model_len

    @property
    def remaining(self) -> int | None:
        """Scripted responses not yet used (None for a function script)."""
        if callable(self._responses):
            return None
        return len(self._responses) - self._next

    def prepare_images(self, parts: Sequence[ImagePart]) -> list[Any]:
        return []  # placeholders are rendered; the script sees the messages themselves

    def encode(
        self,
        request: ChatRequest,
        *,
        prompt_cache: PromptCache | None = None,
        prompt_ids: Sequence[int] | None = None,
    ) -> EncodedPrompt:
        if prompt_ids is not None:  # already encoded: nothing to record
            prompt = super().encode(request, prompt_ids=prompt_ids) if self._tokenizer_source is not None else (
                EncodedPrompt(prompt_ids, media_scan(request.messages).images, request)
            )
            return self._fits(prompt)
        if self._tokenizer_source is not None:  # incremental with the cache
            try:
                prompt = super().encode(request, prompt_cache=prompt_cache)
            except Exception:  # a refused request is recorded too (its videos as frames)
                self.calls.append(ScriptedCall(self._expand(request, prompt_cache), self._log))
                raise
            # the script sees videos as their frames, like an engine: the request as encoded (one media scan)
            self.calls.append(ScriptedCall(prompt.request, self._log))
            return self._fits(prompt)
        request = self._expand(request, prompt_cache)
        call = ScriptedCall(request, self._log)
        self.calls.append(call)
        images = media_scan(request.messages, prompt_cache.media if prompt_cache is not None else None).images
        # only the ids' length is used (usage.prompt_tokens): the rendered prompt's estimate, as
        # zero bytes (one byte a token, the text not kept)
        return self._fits(EncodedPrompt(bytes(estimate_tokens(call.render())), images, request))

    def _expand(self, request: ChatRequest, prompt_cache: PromptCache | None) -> ChatRequest:
        """``request`` with its videos as timestamped frames (:meth:`K3Codec.expand`)."""
        return K3Codec.expand(request, allow_local_files=self.allow_local_files, cache=prompt_cache)

    def _fits(self, prompt: EncodedPrompt) -> EncodedPrompt:
        """``prompt``, when it leaves room for an answer in :attr:`max_model_len`.

        Raises:
            ContextLengthExceededError: the prompt (with its images' tokens) fills the window,
                worded as vLLM words it.
        """
        n = len(prompt.ids) + (self.codec.image_tokens(prompt.images) if prompt.images else 0)
        if n >= self.max_model_len:
            raise self._too_long(n)
        return prompt

    def _too_long(self, n: int) -> ContextLengthExceededError:
        return ContextLengthExceededError(
            f"This model's maximum context length is {self.max_model_len} tokens. However, your prompt "
            f"contains {n} input tokens, which leaves no room for output tokens. Please reduce the length "
            "of the input prompt.",
            status_code=None, limit=self.max_model_len, requested=n,  # as kimik3 reads vLLM's words
        )

    async def _next_text(self, request: ChatRequest) -> str:
        if callable(self._responses):
            out = self._responses(list(request.messages))
            if inspect.isawaitable(out):
                out = await out
            if not isinstance(out, str):
                raise EngineError(f"a ScriptedEngine function must return str, got {type(out).__name__}")
            return out
        if self._next >= len(self._responses):
            raise EngineError(
                f"ScriptedEngine ran out of responses after {len(self._responses)} call(s)"
            )
        text = self._responses[self._next]
        self._next += 1
        return text

    async def generate(
        self, prompt_ids: Sequence[int], request: ChatRequest, *, images: Sequence[Any] = ()
    ) -> AsyncGenerator[RawChunk, None]:
        text = await self._next_text(request)
        if not any(marker in text for marker in _MARKERS):  # plain text: the answer
            text = render_output({"content": text}, thinking=request.thinking)
        closed = "<|close|>message<|sep|>" in text or END_OF_MSG in text
        tok = self.tokenizer
        room = self.max_model_len - len(prompt_ids)  # vLLM clamps max_tokens to what the window leaves
        if room < 1:
            raise self._too_long(len(prompt_ids))
        max_tokens = min(room, request.settings.max_tokens or room)
        generated: int | None = None  # the output's tokens, as an engine reports them (counted once)
        if tok is not None:
            ids = tok.encode_control(text)
            generated = len(ids)
            if generated > max_tokens:  # behave like a real max_tokens cut
                text = tok.decode(ids[:max_tokens])
                generated, closed = max_tokens, False
        elif estimate_tokens(text) > room:  # no tokenizer: the window by the estimate (4 bytes a token)
            text = text.encode("utf-8", "surrogatepass")[: 4 * room].decode("utf-8", "ignore")
            closed = False
        step = self.chunk_size
        for i in range(0, len(text), step):
            # a real await point before the first chunk (other tasks run, cancellation lands);
            # later chunks only check for cancellation: a real engine's chunks of one burst reach
            # the client together, and an event-loop pass per chunk was most of a call's CPU
            if i == 0:
                await anyio.lowlevel.checkpoint()
            else:
                await anyio.lowlevel.checkpoint_if_cancelled()
            yield RawChunk(text=text[i : i + step])
        yield RawChunk(finish_reason="stop" if closed else "length", completion_tokens=generated)
