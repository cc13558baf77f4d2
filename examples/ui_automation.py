"""A K3 agent fills in and submits a small local web form, seeing only screenshots.

    KIMIK3_BASE_URL=http://127.0.0.1:8000/v1 python examples/ui_automation.py "Ada Lovelace" ada@example.org
    ... python examples/ui_automation.py "Ada Lovelace" ada@example.org --record runs/form   # keep a trajectory
    python examples/ui_automation.py --replay runs/form      # the same run again, no model at all
    kimik3 replay runs/form --html form.html                  # look at the recorded run

A tiny form is served on 127.0.0.1 (http.server), opened in headless Chromium (the system one,
through Playwright: `pip install 'kimik3[ui]'` and `bash scripts/setup_ui.sh`; never `playwright
install`), and an Agent with kimik3.tools.ui's tools clicks the fields, types, and submits. The
script prints each action and what the server received. With --record DIR every action is kept
(kimik3.tools.ui.TrajectoryRecorder: JSONL + screenshots); --replay DIR runs it again on a fresh
server without any engine, checking before each step that the page still looks as recorded.

Engine from the environment: KIMIK3_BASE_URL (+ KIMIK3_API_KEY, KIMIK3_MODEL) for an
OpenAI-compatible endpoint serving K3, or KIMIK3_MODEL_PATH for K3 embedded with vLLM. It needs
the real K3 (it reads screenshots): k3-tiny has no vision and was not trained for this.
Errors are one line on stderr (exit 1), as with `kimik3 run`.
"""

from __future__ import annotations

import argparse
import os
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from kimik3 import Agent, ContextPolicy, Engine, RemoteEngine, ToolCallDone, UserError, VLLMEngine
from kimik3.agents import FinalEvent, ToolResultEvent
from kimik3.cli import run_script
from kimik3.tools.ui import BrowserComputer, Computer, TrajectoryRecorder, replay, ui_tools

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
    if not os.environ.get("KIMIK3_BASE_URL"):
        raise UserError("no engine: set KIMIK3_BASE_URL (an endpoint serving K3) or KIMIK3_MODEL_PATH")
    return RemoteEngine(base_url=os.environ["KIMIK3_BASE_URL"], api_key=os.environ.get("KIMIK3_API_KEY"),
                        model=os.environ.get("KIMIK3_MODEL"))


async def run_agent(computer: Computer, name: str, email: str, recorder: TrajectoryRecorder | None) -> None:
    async with make_engine() as engine:
        agent = Agent(
            instructions=INSTRUCTIONS,
            tools=ui_tools(recorder or computer, settle=0.3),
            engine=engine,
            context=ContextPolicy(max_images=3),  # older screenshots leave the context, a batch at a time
            max_turns=20,
        )
        task = f"Subscribe to the newsletter with the name {name!r} and the email {email!r}."
        async for event in agent.run_stream(task):
            if recorder is not None:
                recorder.observe(event)  # keeps the model's reasoning with each recorded step
            if isinstance(event, ToolCallDone):
                print(f"tool {event.name} {event.arguments_json}", flush=True)
            elif isinstance(event, ToolResultEvent):
                print(f"  -> {event.result.text.splitlines()[0] if event.result.text else ''}", flush=True)
            elif isinstance(event, FinalEvent):
                print(f"\n{event.result.output}\n[{event.result.stop_reason}, {event.result.usage.total_tokens} tokens]")


async def main(
    name: str = "Ada Lovelace", email: str = "ada@example.org", *, record: str | None = None, replay_from: str | None = None
) -> list[dict[str, str]]:
    """Run the agent on the form (recording a trajectory into ``record``), or replay the
    trajectory in ``replay_from`` without any model; returns what the server received."""
    with FormServer() as server:
        async with BrowserComputer(server.url, viewport=(1024, 768)) as computer:
            if replay_from is not None:
                steps = await replay(replay_from, computer, on_step=lambda s: print(f"step {s.index}: {s.describe()}"))
                print(f"replayed {steps} steps without a model")
            elif record is not None:
                async with TrajectoryRecorder(computer, record, overwrite=True) as recorder:
                    await run_agent(computer, name, email, recorder)
                print(f"trajectory: {recorder.path} ({recorder.steps} steps)")
            else:
                await run_agent(computer, name, email, None)
        print(f"server received: {server.submissions}")
        return server.submissions


async def _exit_code(name: str, email: str, record: str | None, replay_from: str | None) -> int:
    return 0 if await main(name, email, record=record, replay_from=replay_from) else 1


if __name__ == "__main__":  # required: an embedded vLLM starts processes that re-import this file
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name", nargs="?", default="Ada Lovelace")
    parser.add_argument("email", nargs="?", default="ada@example.org")
    parser.add_argument("--record", metavar="DIR", help="record a trajectory into DIR")
    parser.add_argument("--replay", metavar="DIR", help="replay the trajectory in DIR (no model)")
    a = parser.parse_args()
    raise SystemExit(run_script(lambda: _exit_code(a.name, a.email, a.record, a.replay)))
