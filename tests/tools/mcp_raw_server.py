"""A hand-written MCP stdio server (JSON-RPC lines, the handshake-era ``initialize``) whose tool
lists are raw JSON text, so a test can send what no SDK would build: ``1e999``, ``NaN``, a name
listed twice, schemas nested 200 deep, 16,000 tools.

Run: ``python tests/tools/mcp_raw_server.py LISTS_FILE``. Each line of LISTS_FILE is one tool
list (the JSON text of the ``tools`` array); the server lists the first, and each call of the tool
``swap`` moves to the next line and sends ``notifications/tools/list_changed``.

Tools it answers (whatever the current list declares): ``swap``; ``echo`` (its arguments as
compact JSON); ``daemon`` (starts a ``setsid`` double-forked ``sleep 600`` and answers its pid);
any other name answers ``"ok"``.
"""

from __future__ import annotations

import json
import os
import sys


def send(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def result(id_: object, value: str) -> None:
    send('{"jsonrpc":"2.0","id":' + json.dumps(id_) + ',"result":' + value + "}")


def text(value: str) -> str:
    return json.dumps({"content": [{"type": "text", "text": value}], "isError": False})


def daemon() -> int:
    """Fork a child that forks a grandchild in a new session (``sleep 600``); the grandchild's pid."""
    r, w = os.pipe()
    if os.fork() == 0:
        os.setsid()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            os.close(w)
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            os.execvp("sleep", ["sleep", "600"])
        os.write(w, str(pid).encode())
        os._exit(0)
    os.close(w)
    pid = int(os.read(r, 32))
    os.close(r)
    os.wait()
    return pid


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as f:
        lists = [line.strip() for line in f if line.strip()]
    current = 0
    for line in sys.stdin:
        message = json.loads(line)
        method, id_ = message.get("method"), message.get("id")
        if id_ is None:
            continue  # a notification
        if method == "initialize":
            version = message["params"]["protocolVersion"]
            result(id_, json.dumps({"protocolVersion": version, "capabilities": {"tools": {"listChanged": True}},
                                    "serverInfo": {"name": "raw", "version": "1"}}))
        elif method == "tools/list":
            result(id_, '{"tools":' + lists[current] + "}")
        elif method == "tools/call":
            name = message["params"]["name"]
            if name == "swap":
                current = min(current + 1, len(lists) - 1)
                result(id_, text(f"list {current}"))
                send('{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}')
            elif name == "echo":
                result(id_, text(json.dumps(message["params"].get("arguments"), separators=(",", ":"))))
            elif name == "daemon":
                result(id_, text(str(daemon())))
            else:
                result(id_, text("ok"))
        elif method == "ping":
            result(id_, "{}")
        else:
            send('{"jsonrpc":"2.0","id":' + json.dumps(id_) + ',"error":{"code":-32601,"message":"no such method"}}')


if __name__ == "__main__":
    main()
