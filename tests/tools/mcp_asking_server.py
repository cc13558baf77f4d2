"""A hand-written MCP stdio server (JSON-RPC lines, 2026-07-28 through ``server/discover``) that asks what a hostile server would:
its ``book`` tool answers ``input_required`` (MCP 2026-07-28) with the questions of a JSON file,
so a test sends what no SDK server would build: a message with terminal escapes and look-alike
lines, a URL-mode question to any URL, a schema of hundreds of fields, a ``requestState`` of
megabytes, or a question asked again on every replay.

Run: ``python tests/tools/mcp_asking_server.py CONFIG_FILE LOG_FILE``. CONFIG_FILE holds
``{"input_requests": {key: request}, "state": "...", "state_bytes": N, "forever": bool}``: the
``inputRequests`` of the first call (and of every replay with ``forever``); ``requestState`` is
``state`` followed by ``N`` ``x`` characters; with ``"hang": true`` a replay is never answered. A replay (``inputResponses`` given) is answered
``"got <inputResponses as compact JSON> state <len(requestState)>"``. Each ``tools/call`` appends
``call <number of inputResponses or -> <len(requestState) or ->`` to LOG_FILE.
"""

from __future__ import annotations

import json
import sys

BOOK = {"name": "book", "description": "Book a table.", "inputSchema": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def send(message: dict[str, object]) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
    sys.stdout.flush()


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as f:
        config = json.load(f)
    state = config.get("state", "s") + "x" * config.get("state_bytes", 0)
    for line in sys.stdin:
        message = json.loads(line)
        method, id_, params = message.get("method"), message.get("id"), message.get("params") or {}
        if id_ is None:
            continue  # a notification
        if method == "server/discover":  # 2026-07-28 (input_required exists from there on)
            send({"id": id_, "result": {"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}},
                                        "resultType": "complete", "ttlMs": 0, "cacheScope": "private"}})
        elif method == "initialize":
            send({"id": id_, "result": {"protocolVersion": params["protocolVersion"], "capabilities": {"tools": {}},
                                        "serverInfo": {"name": "asking", "version": "1"}}})
        elif method == "tools/list":
            send({"id": id_, "result": {"tools": [BOOK], "resultType": "complete", "ttlMs": 0, "cacheScope": "private"}})
        elif method == "tools/call":
            responses, echoed = params.get("inputResponses"), params.get("requestState")
            with open(sys.argv[2], "a", encoding="utf-8") as f:
                f.write(f"call {len(responses) if responses else '-'} {len(echoed) if echoed else '-'}\n")
            if responses and config.get("hang"):  # a replay that never answers (the client cancels it)
                continue
            if responses and not config.get("forever"):
                text = f"got {json.dumps(responses, separators=(',', ':'))} state {len(echoed or '')}"
                send({"id": id_, "result": {"content": [{"type": "text", "text": text}], "isError": False,
                                            "resultType": "complete"}})
            else:
                send({"id": id_, "result": {"resultType": "input_required", "inputRequests": config["input_requests"],
                                            "requestState": state}})
        elif method == "ping":
            send({"id": id_, "result": {}})
        else:
            send({"id": id_, "error": {"code": -32601, "message": "no such method"}})


if __name__ == "__main__":
    main()
