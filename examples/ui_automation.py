"""A K3 agent fills in and submits a small local web form, seeing only screenshots.

    KIMIK3_BASE_URL=http://127.0.0.1:8000/v1 python examples/ui_automation.py "Ada Lovelace" ada@example.org

A tiny form is served on 127.0.0.1 (http.server), opened in headless Chromium (the system one,
through Playwright: `pip install 'kimik3[ui]'` and `bash scripts/setup_ui.sh`; never `playwright
install`), and an Agent with kimik3.tools.ui's tools clicks the fields, types, and submits. The
script prints each action and what the server received.

Engine from the environment: KIMIK3_BASE_URL (+ KIMIK3_API_KEY, KIMIK3_MODEL) for an
OpenAI-compatible endpoint serving K3, or KIMIK3_MODEL_PATH for K3 embedded with vLLM.
"""

from __future__ import annotations

import os
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

import anyio

from kimik3 import Agent, ContextPolicy, Engine, RemoteEngine, ToolCallDone, VLLMEngine
from kimik3.agents import FinalEvent, ToolResultEvent
from kimik3.tools.ui import BrowserComputer, ui_tools

INSTRUCTIONS = """You operate a web page by looking at screenshots and using the mouse and keyboard tools.
Start with a screenshot. Click a text field before typing into it. Positions are pixels of the latest
screenshot. After submitting, check the new screenshot for a confirmation, then answer briefly with
what you entered."""

FORM_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>Newsletter</title><style>
body { margin: 40px; background: #fafafa; font-family: "DejaVu Sans", sans-serif; font-size: 20px; }
label { display: block; margin: 24px 0 6px; }
input { width: 420px; height: 40px; font-size: 20px; border: 1px solid #888; padding: 0 8px; }
#name { background: #fff3b0; } #email { background: #cfe8ff; }
button { margin-top: 32px; width: 200px; height: 52px; font-size: 20px; border: 0; background: #2e7d32; color: #fff; }
</style></head><body>
<h1>Join the newsletter</h1>
<form method="post" action="/submit">
<label for="name">Name</label><input id="name" name="name" autocomplete="off">
<label for="email">Email</label><input id="email" name="email" autocomplete="off">
<button type="submit">Subscribe</button>
</form></body></html>"""


class FormServer:
    """Serves :data:`FORM_PAGE` on 127.0.0.1 (a free port) and records every submission."""

    def __init__(self) -> None:
        self.submissions: list[dict[str, str]] = []
        submissions = self.submissions

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._send(FORM_PAGE)

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode()
                fields = {k: v[0] for k, v in urllib.parse.parse_qs(body).items()}
                submissions.append(fields)
                name = fields.get("name", "").replace("&", "&amp;").replace("<", "&lt;")
                self._send(f'<!doctype html><body style="margin:40px;font:32px sans-serif">'
                           f'<p id="thanks">Thank you, {name}! You are subscribed.</p></body>')

            def _send(self, page: str) -> None:
                body = page.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/"

    def __enter__(self) -> FormServer:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._server.shutdown()
        self._server.server_close()


def make_engine() -> Engine:
    if os.environ.get("KIMIK3_MODEL_PATH"):
        return VLLMEngine(os.environ["KIMIK3_MODEL_PATH"])
    return RemoteEngine(base_url=os.environ["KIMIK3_BASE_URL"], api_key=os.environ.get("KIMIK3_API_KEY"),
                        model=os.environ.get("KIMIK3_MODEL"))


async def main(name: str = "Ada Lovelace", email: str = "ada@example.org") -> list[dict[str, str]]:
    """Run the agent on the form; returns what the server received."""
    with FormServer() as server:
        async with make_engine() as engine, BrowserComputer(server.url, viewport=(1024, 768)) as computer:
            agent = Agent(
                instructions=INSTRUCTIONS,
                tools=ui_tools(computer, settle=0.3),
                engine=engine,
                context=ContextPolicy(max_images=3),  # older screenshots leave the context
                max_turns=20,
            )
            task = f"Subscribe to the newsletter with the name {name!r} and the email {email!r}."
            async for event in agent.run_stream(task):
                if isinstance(event, ToolCallDone):
                    print(f"tool {event.name} {event.arguments_json}", flush=True)
                elif isinstance(event, ToolResultEvent):
                    print(f"  -> {event.result.text.splitlines()[0] if event.result.text else ''}", flush=True)
                elif isinstance(event, FinalEvent):
                    print(f"\n{event.result.output}\n[{event.result.stop_reason}, {event.result.usage.total_tokens} tokens]")
        print(f"server received: {server.submissions}")
        return server.submissions


if __name__ == "__main__":
    received = anyio.run(main, *sys.argv[1:3])
    sys.exit(0 if received else 1)
