"""How ``kimik3 verify`` talks to the endpoint: every answer read within a time limit and a size
cap, then typed (:mod:`._wire`).

- A request has ``timeout`` seconds from connect to last byte; its body is read in pieces and
  abandoned past ``max_body_bytes`` (after decompression: a gzip bomb counts as what it
  inflates to). Memory is bounded by ``concurrency x max_body_bytes``, whatever the server sends.
- A 200 answer is "ok" only when its body is a completion: a ``choices`` list whose first
  entry has a ``message`` (chat) or a ``text`` (completions); a stream, when one chunk at least
  carried a choice.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from ._wire import Choice, Function, Malformed, Message, ModelList, Reply, ToolCall, Usage, read

__all__ = ["DEFAULT_MAX_BODY_BYTES", "Answer", "Endpoint"]

DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
"""The largest answer body ``verify`` reads by default (4 MiB; a K3 answer of 1,024 tokens is a few KiB)."""


class _TooLarge(Exception):
    pass


def _not_completion(reply: Reply) -> str | None:
    """Why ``reply`` (a 200 body) is not a completion; None when it is one."""
    if not reply.choices:
        return "no choices"
    first = reply.choices[0]
    if "message" not in first.model_fields_set and first.text is None:
        return "choices.0 has neither a message nor a text"
    return None


@dataclass
class Answer:
    """One HTTP answer: ``status`` 0 when none came; ``reply`` the typed body of a 200 answer
    that is a completion (None with ``problem`` set when that body is malformed, is not a
    completion, or was over the size cap)."""

    status: int  # 0: no HTTP answer
    body: Any  # parsed JSON, or the text
    reply: Reply | None = None
    problem: str | None = None

    @classmethod
    def of(cls, status: int, body: Any) -> Answer:
        if status != 200:
            return cls(status, body)
        try:
            reply: Reply = read(Reply, body)
        except Malformed as e:
            return cls(status, body, None, f"HTTP 200, {e}")
        why = _not_completion(reply)
        if why is not None:
            return cls(status, body, None, f"HTTP 200, not a completion ({why}): {_snippet(body)}")
        return cls(status, body, reply)

    @property
    def ok(self) -> bool:
        """An HTTP 200 answer of the documented shape that is a completion."""
        return self.reply is not None

    @property
    def error(self) -> str:
        if self.problem:
            return self.problem
        if isinstance(self.body, Mapping):
            err = self.body.get("error")
            msg = err.get("message") if isinstance(err, Mapping) else err or self.body.get("message")
            text = str(msg) if msg else json.dumps(self.body)
        else:
            text = str(self.body)
        text = " ".join(text.split())
        return f"HTTP {self.status}: {text[:160]}" if self.status else text[:200]

    @property
    def prompt_tokens(self) -> int | None:
        return self.reply.prompt_tokens if self.reply is not None else None

    @property
    def message(self) -> Message:
        return self.reply.message if self.reply is not None else Message()


def _snippet(body: Any) -> str:
    text = body if isinstance(body, str) else json.dumps(body, ensure_ascii=False)
    return " ".join(text.split())[:120]


def _parsed(data: bytes) -> Any:
    """JSON of ``data`` when it is JSON (any depth: never a RecursionError), else its text."""
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return data.decode("utf-8", "replace")


class Endpoint:
    """The endpoint's base URL behind ``client``, at most ``concurrency`` requests in flight.

    Args:
        client: an ``httpx.AsyncClient`` with the base URL and headers.
        concurrency: requests in flight at once.
        timeout: seconds per request, connect to last byte.
        max_body_bytes: the largest body read of one answer (a stream: all its chunks together).
    """

    def __init__(self, client: httpx.AsyncClient, concurrency: int, timeout: float,
                 max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:  # fmt: skip
        self.client = client
        self.limit = asyncio.Semaphore(concurrency)
        self.timeout = timeout
        self.max_body_bytes = max_body_bytes

    def late(self) -> Answer:
        return Answer(0, f"no complete answer within {self.timeout:g} s (timeout)")

    def _too_large(self, status: int) -> Answer:
        return Answer(status, None, None, f"HTTP {status}, the answer body is over the {self.max_body_bytes:,}-byte "
                                          "limit (max_body_bytes); not read further")  # fmt: skip

    async def _body(self, r: httpx.Response) -> bytes:
        """The whole body of ``r``, or :class:`_TooLarge` past the cap."""
        data = bytearray()
        async for chunk in r.aiter_bytes():
            data += chunk
            if len(data) > self.max_body_bytes:
                raise _TooLarge
        return bytes(data)

    async def get_models(self) -> ModelList:
        """``GET /models``, typed.

        Raises:
            TimeoutError: no complete answer within ``timeout``.
            httpx.HTTPError: a transport failure or an error status.
            Malformed: not a model list, or over the size cap.
        """
        async with asyncio.timeout(self.timeout), self.client.stream("GET", "/models") as r:
            r.raise_for_status()
            try:
                data = await self._body(r)
            except _TooLarge:
                raise Malformed(f"malformed answer: body over the {self.max_body_bytes:,}-byte limit") from None
        models: ModelList = read(ModelList, data)
        return models

    async def post(self, path: str, body: Mapping[str, Any]) -> Answer:
        """One JSON request; transport failures, timeouts and oversized bodies are answers."""
        async with self.limit:
            try:
                async with asyncio.timeout(self.timeout), self.client.stream("POST", path, json=body) as r:
                    status = r.status_code
                    data = await self._body(r)
            except TimeoutError:
                return self.late()
            except _TooLarge:
                return self._too_large(status)
            except httpx.HTTPError as e:
                return Answer(0, f"{type(e).__name__}: {e}")
        return Answer.of(status, _parsed(data))

    async def stream(self, path: str, body: Mapping[str, Any]) -> Answer:
        """A streamed chat completion, accumulated into the non-streamed shape."""
        async with self.limit:
            try:
                async with asyncio.timeout(self.timeout):
                    return await self._stream(path, body)
            except TimeoutError:
                return self.late()
            except httpx.HTTPError as e:
                return Answer(0, f"{type(e).__name__}: {e}")

    async def _stream(self, path: str, body: Mapping[str, Any]) -> Answer:
        content, reasoning, reasoning_field = [], [], None
        calls: dict[int, list[str]] = {}
        usage: Usage | None = None
        chose = False  # a chunk carried a choice

        def take(raw: bytes) -> Answer | None:
            """One line of the event stream; an answer when it ends the stream (a bad chunk)."""
            nonlocal usage, chose, reasoning_field
            line = raw.decode("utf-8", "replace").rstrip("\r")
            if not line.startswith("data:") or line[5:].strip() == "[DONE]":
                return None
            try:
                chunk: Reply = read(Reply, line[5:])
            except Malformed as e:
                return Answer(200, line[5:], None, f"HTTP 200, stream chunk {e}")
            usage = chunk.counted or usage
            chose = chose or bool(chunk.choices)
            for choice in chunk.choices:
                delta = choice.delta
                content.append(delta.content or "")
                for name in ("reasoning_content", "reasoning"):
                    if getattr(delta, name):
                        reasoning.append(getattr(delta, name))
                        reasoning_field = name
                for tc in delta.tool_calls or ():
                    call = calls.setdefault(tc.index, ["", ""])
                    call[0] += tc.function.name or ""
                    call[1] += tc.function.arguments or ""
            return None

        size, pending = 0, b""
        async with self.client.stream("POST", path, json=body) as r:
            if r.status_code != 200:
                try:
                    return Answer.of(r.status_code, _parsed(await self._body(r)))
                except _TooLarge:
                    return self._too_large(r.status_code)
            async for piece in r.aiter_bytes():
                size += len(piece)
                if size > self.max_body_bytes:
                    return self._too_large(200)
                *lines, pending = (pending + piece).split(b"\n")  # pending: under the cap
                for raw in lines:
                    if (bad := take(raw)) is not None:
                        return bad
        if (bad := take(pending)) is not None:
            return bad
        if not chose:
            return Answer(200, None, None, "HTTP 200, not a completion (no stream chunk carried a choice)")
        tool_calls = [ToolCall(index=k, function=Function(name=calls[k][0], arguments=calls[k][1]))
                      for k in sorted(calls)]  # fmt: skip
        fields: dict[str, Any] = {reasoning_field: "".join(reasoning)} if reasoning_field else {}
        message = Message(content="".join(content), tool_calls=tool_calls, **fields)
        return Answer(200, None, Reply(choices=[Choice(message=message)], usage=usage))
