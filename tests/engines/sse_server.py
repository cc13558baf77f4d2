"""A loopback HTTP server that answers with scripted bytes: server-sent event streams of any shape
(cut, trickling, in-band errors, HTML), for end-to-end tests of RemoteEngine over a real socket.

Bounded: it listens on 127.0.0.1 only, every scripted pause is at most 30 s, and a script's pauses
add up to at most 120 s; closing the server closes every connection.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

MAX_PAUSE = 30.0
MAX_TOTAL_PAUSE = 120.0


@dataclass
class Reply:
    """One scripted answer.

    Attributes:
        status: the HTTP status.
        headers: response headers (content-type defaults to ``text/event-stream``).
        parts: body pieces in order; a float is a pause in seconds between pieces.
        cut: close the connection without ending the (chunked) body: a broken connection.
    """

    status: int = 200
    headers: dict[str, str] = field(default_factory=lambda: {"content-type": "text/event-stream"})
    parts: Sequence[bytes | float] = ()
    cut: bool = False

    def __post_init__(self) -> None:
        pauses = [p for p in self.parts if isinstance(p, float)]
        assert all(0 <= p <= MAX_PAUSE for p in pauses) and sum(pauses) <= MAX_TOTAL_PAUSE, "unbounded script"


def sse(chunks: Sequence[Any], *, done: bool = True) -> list[bytes | float]:
    """``data:`` events for each chunk (a dict is JSON-encoded; ``"[DONE]"`` is the sentinel)."""
    parts: list[bytes | float] = []
    for chunk in chunks:
        data = chunk if isinstance(chunk, str) else json.dumps(chunk)
        parts.append(f"data: {data}\n\n".encode())
    if done and "[DONE]" not in chunks:
        parts.append(b"data: [DONE]\n\n")
    return parts


class SSEServer:
    """``async with SSEServer(replies) as server:`` then ``server.base_url``.

    Args:
        replies: the reply for each request in turn (the last one repeats), or a function of the
            request number (0-based) and the decoded request body.
        models: how ``GET /v1/models`` is answered apart from ``replies`` (never recorded in
            :attr:`requests`, never given a request number, so it takes no scripted reply): a
            list of entries (``{"id": ..., "max_model_len": ...}``), or ``"404"`` (the default: a
            server without ``/v1/models``); ``"respond"`` makes it a request like any other.

    Attributes:
        requests: ``{"path", "body", "headers"}`` of each request received.
        models_asked: how many times ``GET /v1/models`` was answered apart.
    """

    def __init__(self, replies: Sequence[Reply] | Callable[[int, dict[str, Any]], Reply], *,
                 models: list[dict[str, Any]] | Literal["404", "respond"] = "404") -> None:
        self._replies = replies
        self._models = models
        self.models_asked = 0
        self.requests: list[dict[str, Any]] = []
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.base_url = ""

    async def __aenter__(self) -> SSEServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.close()
        await self._server.wait_closed()

    @staticmethod
    def _models_reply(models: list[dict[str, Any]] | Literal["404"]) -> Reply:
        if models == "404":
            payload: dict[str, Any] = {"error": {"message": "Not Found", "type": "NotFoundError"}}
            return Reply(404, headers={"content-type": "application/json"}, parts=[json.dumps(payload).encode()])
        listing = {"object": "list", "data": [{"object": "model", "created": 0, "owned_by": "x", **m} for m in models]}
        return Reply(headers={"content-type": "application/json"}, parts=[json.dumps(listing).encode()])

    def _reply(self, n: int, body: dict[str, Any]) -> Reply:
        if callable(self._replies):
            return self._replies(n, body)
        return self._replies[min(n, len(self._replies) - 1)]

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), MAX_PAUSE)
            lines = head.decode("latin-1").split("\r\n")
            path = lines[0].split(" ")[1]
            headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:] if x)}
            raw = await asyncio.wait_for(reader.readexactly(int(headers.get("content-length", "0"))), MAX_PAUSE)
            body = json.loads(raw or b"{}")
            if self._models != "respond" and lines[0].startswith("GET ") and path == "/v1/models":
                self.models_asked += 1
                reply = self._models_reply(self._models)
            else:
                n = len(self.requests)
                self.requests.append({"path": path, "body": body, "headers": headers})
                reply = self._reply(n, body)
            out = [f"HTTP/1.1 {reply.status} X", "transfer-encoding: chunked", "connection: close"]
            out += [f"{k}: {v}" for k, v in reply.headers.items()]
            writer.write(("\r\n".join(out) + "\r\n\r\n").encode())
            await writer.drain()
            for part in reply.parts:
                if isinstance(part, float):
                    await asyncio.sleep(part)
                    continue
                writer.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
                await writer.drain()
            if not reply.cut:
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.TimeoutError):
            pass  # the client went away (a timeout test) or never sent a request
        finally:
            self._writers.discard(writer)
            writer.close()
