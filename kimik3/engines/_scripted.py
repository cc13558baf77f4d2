"""ScriptedEngine: replay raw K3 outputs through the real parser (offline testing)."""

from __future__ import annotations

import inspect
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import anyio

from .._checks import check_int
from .._exceptions import EngineError, UserError
from ..formats.k3 import (
    END_OF_MSG,
    EncodedPrompt,
    K3Codec,
    K3Tokenizer,
    PromptCache,
    RawChunk,
    estimate_tokens,
    render,
    render_output,
)
from ..formats.k3._codec import media_scan
from ..types import ChatRequest, ImagePart, Message
from ._base import TokenEngine

__all__ = ["ScriptedCall", "ScriptedEngine"]

_MARKERS = ("<|open|>", "<|close|>", "<|sep|>", END_OF_MSG)
"""A scripted text holding none of these is plain text: the answer."""

ScriptFunction = Callable[[list[Message]], "str | Awaitable[str]"]


@dataclass(frozen=True)
class ScriptedCall:
    """What a :class:`ScriptedEngine` was asked: the request, a snapshot of its messages, and
    its K3 prompt text (rendered on first access of :attr:`prompt`, then kept)."""

    request: ChatRequest
    messages: tuple[Message, ...]

    @cached_property
    def prompt(self) -> str:
        """The K3 prompt text of this call (rendered on first access and cached).

        Without a tokenizer the engine reads it on every call (its length is the prompt's token
        estimate); with one it is rendered only when a test asks for it."""
        return render(self.messages, self.request.tools, **K3Codec.encoding_options(self.request))


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

    Raises:
        UserError: ``chunk_size`` < 1.
        EngineError: more calls than scripted responses (when streaming).
    """

    def __init__(
        self,
        responses: Sequence[str] | ScriptFunction,
        *,
        chunk_size: int = 16,
        tokenizer: K3Tokenizer | None = None,
        model: str = "scripted-k3",
    ) -> None:
        super().__init__(tokenizer)
        check_int("ScriptedEngine(chunk_size=...)", chunk_size, minimum=1)
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
            return super().encode(request, prompt_ids=prompt_ids) if self._tokenizer_source is not None else (
                EncodedPrompt(prompt_ids, media_scan(request.messages).images, request)
            )
        # the script sees videos as their frames, like an engine
        request = K3Codec.expand(request, allow_local_files=self.allow_local_files, cache=prompt_cache)
        call = ScriptedCall(request, tuple(request.messages))
        self.calls.append(call)
        if self._tokenizer_source is not None:
            return super().encode(request, prompt_cache=prompt_cache)  # incremental with the cache
        images = media_scan(request.messages).images
        # only the ids' length is used (usage.prompt_tokens): the rendered prompt's estimate
        return EncodedPrompt([0] * estimate_tokens(call.prompt), images, request)

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
        max_tokens = request.settings.max_tokens
        if max_tokens is not None and tok is not None:
            ids = tok.encode_control(text)
            if len(ids) > max_tokens:  # behave like a real max_tokens cut
                text = tok.decode(ids[:max_tokens])
                closed = False
        step = self.chunk_size
        for i in range(0, len(text), step):
            await anyio.lowlevel.checkpoint()  # a real await point: cancellation lands here
            yield RawChunk(text=text[i : i + step])
        yield RawChunk(finish_reason="stop" if closed else "length")
