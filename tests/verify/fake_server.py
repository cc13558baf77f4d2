"""A loopback OpenAI-style K3 server that misbehaves in known ways, for ``kimik3 verify``'s tests.

It renders prompts with kimik3's own encoder and K3's real vocabulary, then departs from the
contract on purpose (each departure is one the verify report must show as a failing row):

- counts ``prompt_tokens`` like Moonshot's API (without the 3-token generation stub) — a
  documented convention, which verify must recognise, not fail;
- drops the reasoning of replayed assistant turns;
- counts every image as 256 tokens whatever its size;
- answers duplicate tool names with HTTP 500, accepts a tool message without tool_call_id, and
  refuses (400, as due) tools on a user message and what kimik3's encoder refuses;
- ``/v1/completions`` counts one id more than it was sent (a BOS added);
- generations: a tool call despite ``tool_choice`` none, ``{}`` as arguments for required,
  prose instead of JSON for ``response_format``, no call for dynamic tools, and reasoning under
  a field named ``thinking``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from kimik3 import MessageError
from kimik3.formats.k3 import K3Tokenizer, default_tokenizer
from kimik3.types import ImagePart, to_messages

IMAGE_TOKENS = 256


def _prompt_tokens(body: dict[str, Any], tok: K3Tokenizer) -> int:
    messages = []
    for m in body["messages"]:
        m = {k: v for k, v in m.items() if k not in ("reasoning_content", "reasoning")}  # drops reasoning
        messages.append(m)
    thinking = (body.get("chat_template_kwargs") or {}).get("thinking", True)
    ids = tok.encode_messages(
        messages,
        body.get("tools"),
        thinking=thinking,
        thinking_effort=body.get("reasoning_effort", "max") if thinking else None,
        tool_choice=body.get("tool_choice"),
        response_format=body.get("response_format"),
    )
    images = sum(
        isinstance(p, ImagePart) for m in to_messages(messages) if isinstance(m.content, list) for p in m.content
    )
    return len(ids) - 3 + images * (IMAGE_TOKENS - 1)


def _message(body: dict[str, Any]) -> dict[str, Any]:
    tools = body.get("tools") or []
    choice = body.get("tool_choice")
    msg: dict[str, Any] = {"role": "assistant", "content": "hi", "thinking": "I should greet them."}
    if tools and choice in ("none", "required"):
        msg["content"] = None
        msg["tool_calls"] = [{"id": "call_0", "type": "function",
                              "function": {"name": tools[0]["function"]["name"], "arguments": "{}"}}]  # fmt: skip
    if body.get("response_format"):
        msg["content"] = 'Sure! Here is the JSON: {"answer": "hi"}'
    return msg


class _Handler(BaseHTTPRequestHandler):
    tokenizer: K3Tokenizer | None = None  # the served model's vocabulary (default: K3's)
    root: str | None = None  # what /models reports as the model's path (vLLM's "root")

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            card = {"id": "fake-k3", "object": "model", **({"root": self.root} if self.root else {})}
            self._send(200, {"object": "list", "data": [card]})
        else:
            self._send(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        if self.path == "/v1/completions":
            n = len(body["prompt"]) + 1
            self._send(200, {"choices": [{"text": "x", "finish_reason": "length"}],
                             "usage": {"prompt_tokens": n, "completion_tokens": 1, "total_tokens": n + 1}})  # fmt: skip
            return
        if self.path != "/v1/chat/completions":
            self._send(404, {"error": {"message": "not found"}})
            return
        names = [t["function"]["name"] for t in body.get("tools") or []]
        if len(names) != len(set(names)):
            self._send(500, {"error": {"message": "internal error: KeyError('read_file')"}})
            return
        if any(m.get("role") == "user" and "tools" in m for m in body["messages"]):
            self._send(400, {"error": {"message": "tools are only allowed on system messages"}})
            return
        try:
            n = _prompt_tokens(body, self.tokenizer or default_tokenizer())
        except MessageError as e:  # what kimik3's encoder refuses, this server refuses too (400)
            self._send(400, {"error": {"message": str(e)}})
            return
        msg = _message(body)
        usage = {"prompt_tokens": n, "completion_tokens": 1, "total_tokens": n + 1}
        if not body.get("stream"):
            self._send(200, {"choices": [{"index": 0, "message": msg, "finish_reason": "stop"}], "usage": usage})
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        deltas: list[dict[str, Any]] = [{"role": "assistant"}]
        for call in msg.get("tool_calls") or ():
            deltas.append({"tool_calls": [{"index": 0, "id": call["id"], "function": {"name": call["function"]["name"]}}]})
            deltas.append({"tool_calls": [{"index": 0, "function": {"arguments": call["function"]["arguments"]}}]})
        if msg.get("content"):
            deltas.append({"content": msg["content"]})
        for delta in deltas:
            self.wfile.write(f"data: {json.dumps({'choices': [{'index': 0, 'delta': delta}]})}\n\n".encode())
        self.wfile.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\ndata: [DONE]\n\n".encode())


@contextmanager
def fake_server(tokenizer: K3Tokenizer | None = None, root: str | None = None) -> Iterator[str]:
    """Serve on 127.0.0.1 (a free port) in a thread; yields the base URL (``.../v1``).
    ``tokenizer``: the served model's vocabulary (default K3's); ``root``: its path in /models."""
    handler = type("Handler", (_Handler,), {"tokenizer": tokenizer, "root": root})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
