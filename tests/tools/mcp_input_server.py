"""An MCP server (the SDK's ``MCPServer``, 2026-07-28 over stdio) for kimik3's tests of MCP
input requests and Tasks.

Run: ``python tests/tools/mcp_input_server.py LOG_FILE [PORT]`` (stdio; with PORT, Streamable
HTTP on 127.0.0.1).

Tools:
- ``book(city)``: asks the client whose name the booking is under (an elicitation: on
  2026-07-28 an ``input_required`` result, answered by retrying with ``inputResponses``) and
  answers ``"booked <city> for <name>"``, or ``"not booked: <action>"`` when the user declined.
- ``long_job(n)``: answered with a Task (the ``io.modelcontextprotocol/tasks`` extension,
  ``resultType: "task"``) when the request declares the extension, else error -32021; the task
  is ``working`` for ``n`` polls (``tasks/get``), then ``completed`` with ``"job done after <n>
  polls"``; with ``n < 0`` it ``failed`` at its first poll (JSON-RPC error -32000 ``"the job
  broke"``). ``tasks/cancel`` marks it ``cancelled``.
- ``approve_job()``: a Task that is ``input_required`` at its first poll (an elicitation
  ``"Run the job?"`` under the key ``confirm``) until ``tasks/update`` answers it, then
  ``completed`` with ``"approved: <ok>"`` (or ``"not approved: <action>"``).

Run with ``--key=KEY`` (or ``KIMIK3_TEST_STATE_KEY`` set), the server seals ``requestState`` under that key (so a
restarted server reads what an earlier one sealed); else under a key of its own process.

``quota()`` answers with the JSON-RPC error -32000 ``"quota exceeded"``.

Each ``tasks/get`` and ``tasks/cancel`` appends a line to LOG_FILE (``get <id> <status>``,
``cancel <id>``, ``update <key> <action>``), so a test sees what the client did.
"""

from __future__ import annotations

import os
import sys
import uuid
from datetime import datetime, timezone
from typing import Annotated, Any

from mcp.server.mcpserver import (
    AcceptedElicitation,
    Context,
    Elicit,
    ElicitationResult,
    Extension,
    MCPServer,
    MethodBinding,
    RequestStateSecurity,
    Resolve,
)
from mcp.types import CallToolRequestParams, RequestParams
from pydantic import BaseModel

TASKS = "io.modelcontextprotocol/tasks"
ARGS = [a for a in sys.argv[1:] if not a.startswith("--key=")]
LOG = ARGS[0]


class Who(BaseModel):
    name: str


def ask_who(city: str) -> Elicit[Who]:
    return Elicit(f"Whose name is the booking in {city} under?", Who)


class TaskParamsAlias(RequestParams):
    taskId: str  # the wire name


class UpdateParams(RequestParams):
    taskId: str
    inputResponses: dict[str, Any]


CONFIRM = {"method": "elicitation/create", "params": {
    "mode": "form", "message": "Run the job?",
    "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}}}


def log(line: str) -> None:
    with open(LOG, "a", encoding="utf-8") as f:
        f.write(line + "\n")


class Tasks(Extension):
    identifier = TASKS

    def __init__(self) -> None:
        self.tasks: dict[str, dict[str, Any]] = {}

    def _now(self) -> str:
        return datetime.now(timezone.utc).isoformat()

    def methods(self) -> list[MethodBinding]:
        return [MethodBinding("tasks/get", TaskParamsAlias, self.get),
                MethodBinding("tasks/cancel", TaskParamsAlias, self.cancel),
                MethodBinding("tasks/update", UpdateParams, self.update)]

    async def intercept_tool_call(self, params: CallToolRequestParams, ctx: Any, call_next: Any) -> Any:
        if params.name not in ("long_job", "approve_job"):
            return await call_next(ctx)
        caps = (ctx.meta or {}).get("io.modelcontextprotocol/clientCapabilities") or {}
        if TASKS not in (caps.get("extensions") or {}):
            from mcp.shared.exceptions import MCPError

            raise MCPError(-32021, "Missing required client capability", {"requiredCapabilities": {
                "extensions": {TASKS: {}}}})
        task_id = str(uuid.uuid4())
        n = int((params.arguments or {}).get("n", 2))
        self.tasks[task_id] = {"left": n, "n": n, "status": "working", "created": self._now(),
                               "ask": params.name == "approve_job"}
        return {"resultType": "task", "taskId": task_id, "status": "working", "statusMessage": "started",
                "createdAt": self.tasks[task_id]["created"], "lastUpdatedAt": self._now(), "ttlMs": None,
                "pollIntervalMs": 20}

    async def get(self, ctx: Any, params: TaskParamsAlias) -> dict[str, Any]:
        task = self.tasks[params.taskId]
        if task["ask"] and task["status"] == "working" and "answer" not in task:
            task["status"] = "input_required"
        elif task["ask"] and "answer" in task:
            answer = task["answer"]
            ok = answer.get("action") == "accept"
            task["text"] = f"approved: {answer['content']['ok']}" if ok else f"not approved: {answer.get('action')}"
            task["status"] = "completed"
        elif task["status"] == "working" and task["n"] < 0:
            task["status"] = "failed"
        elif task["status"] == "working":
            if task["left"] == 0:
                task["status"] = "completed"
            else:
                task["left"] -= 1
        log(f"get {params.taskId} {task['status']}")
        out: dict[str, Any] = {"resultType": "complete", "taskId": params.taskId, "status": task["status"],
                               "createdAt": task["created"], "lastUpdatedAt": self._now(), "ttlMs": None,
                               "pollIntervalMs": 20}
        if task["status"] == "failed":
            out["error"] = {"code": -32000, "message": "the job broke"}
        if task["status"] == "input_required":
            out["inputRequests"] = {"confirm": CONFIRM}
        if task["status"] == "completed":
            # structuredContent: the tool's output schema asks for it
            text = task.get("text") or f"job done after {task['n']} polls"
            out["result"] = {"content": [{"type": "text", "text": text}], "structuredContent": {"result": text},
                             "isError": False}
        return out

    async def update(self, ctx: Any, params: UpdateParams) -> dict[str, Any]:
        task = self.tasks[params.taskId]
        for key, answer in params.inputResponses.items():
            log(f"update {key} {answer.get('action')}")
            task["answer"] = answer
        task["status"] = "working"
        return {}

    async def cancel(self, ctx: Any, params: TaskParamsAlias) -> dict[str, Any]:
        self.tasks[params.taskId]["status"] = "cancelled"
        log(f"cancel {params.taskId}")
        return {}


# --key=KEY or KIMIK3_TEST_STATE_KEY: seal requestState under this key (a restarted server reads the
# state an earlier one sealed, as a multi-process deployment shares a key); else the SDK's key of this process
_KEY = next((a[len("--key="):] for a in sys.argv if a.startswith("--key=")), None) or os.environ.get(
    "KIMIK3_TEST_STATE_KEY")
server = MCPServer("kimik3-input-test", extensions=[Tasks()],
                   request_state_security=RequestStateSecurity(keys=[_KEY]) if _KEY else None)


@server.tool()
async def book(city: str, who: Annotated[ElicitationResult[Who], Resolve(ask_who)], ctx: Context) -> str:
    """Book a table."""
    if isinstance(who, AcceptedElicitation):
        return f"booked {city} for {who.data.name}"
    return f"not booked: {who.action}"


@server.tool()
def long_job(n: int) -> str:
    """A job that runs as a task."""
    return "never: answered with a task"


@server.tool()
def quota() -> str:
    """Answers with the JSON-RPC error -32000 "quota exceeded" (a server error code, not a closed connection)."""
    from mcp.shared.exceptions import MCPError

    raise MCPError(-32000, "quota exceeded")


@server.tool()
def approve_job() -> str:
    """A job that asks before it runs, as a task."""
    return "never: answered with a task"


if __name__ == "__main__":
    if len(ARGS) > 1:
        server.run("streamable-http", host="127.0.0.1", port=int(ARGS[1]))
    else:
        server.run("stdio")
