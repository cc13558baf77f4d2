"""What an MCP server asks of kimik3 during a tool call (MCP 2026-07-28): input requests
(``resultType: "input_required"``, answered by retrying the call with ``inputResponses``; on older
connections an ``elicitation/create`` request mid-call) go to the user's :data:`InputHandler`;
Tasks (the ``io.modelcontextprotocol/tasks`` extension, ``resultType: "task"``) are polled with
``tasks/get`` until they end and cancelled with ``tasks/cancel`` when the call is.

Sources: the MCP 2026-07-28 multi round-trip requests (SEP-2322, ``mcp.client._input_required``
drives the retries) and the Tasks extension's 2026-07-28 specification
(github.com/modelcontextprotocol/ext-tasks, specification/2026-07-28/tasks.md).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypeAlias

import anyio
import anyio.to_thread
import mcp
import mcp.types as mcp_types
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientRequestContext
from mcp.shared.exceptions import MCPError
from pydantic import TypeAdapter, ValidationError

from .._exceptions import MCPServerError
from ._input import InputReplay, InputWait

__all__ = ["Call", "DeferringClient", "InputAnswer", "InputHandler", "InputRequest", "TASKS_EXTENSION",
           "TasksExtension", "calling", "elicitation_callback", "replay_seed", "reset", "waiting"]

log = logging.getLogger("kimik3.mcp")

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
_CANCEL_LIMIT_S = 5.0  # a tasks/cancel sent while the call is being cancelled waits this long at most
_MAX_POLL_S = 5.0  # the longest wait between two tasks/get, whatever pollIntervalMs says


@dataclass(frozen=True)
class InputRequest:
    """A server's request for input during a tool call (an elicitation).

    Attributes:
        server: the server's name (``MCPServer.name``).
        tool: the tool being called (its name on the server; None when the server asked outside
            a call kimik3 knows of).
        message: what the server asks, in its words (show it to the person).
        schema: form mode: the JSON schema of the answer (an object of primitive properties);
            None in URL mode.
        url: URL mode: where the person goes to answer (the answer itself never passes through
            kimik3); None in form mode.
    """

    server: str
    tool: str | None
    message: str
    schema: dict[str, Any] | None = None
    url: str | None = None


InputAnswer: TypeAlias = "dict[str, Any] | None"
"""The answer to an :class:`InputRequest`: the content (form mode: values for the schema's
properties; URL mode: ``{}`` once done), or None to decline."""

InputHandler: TypeAlias = Callable[[InputRequest], "InputAnswer | Awaitable[InputAnswer]"]
"""Answers a server's input request (sync handlers run in a worker thread, so one may block on
a terminal prompt); raising declines it and fails the call with the handler's error."""

@dataclass
class Call:
    """The tool call the current task makes (:func:`calling`).

    Attributes:
        tool: its name on the server.
        defer: a 2026-07-28 ``input_required`` result may wait for a person (no input handler,
            and the call runs where its questions can be kept: an agent run with a session).
        problems: why the input callback could not answer, in order.
        waiting: the ``input_required`` result kept to wait for a person (:class:`DeferringClient`).
    """

    tool: str
    defer: bool = False
    problems: list[str] = field(default_factory=list)
    waiting: mcp_types.InputRequiredResult | None = None


_CALL: ContextVar[Call | None] = ContextVar("kimik3_mcp_call", default=None)


def calling(tool: str, *, defer: bool = False) -> tuple[Any, Call]:
    """Mark the current task as calling ``tool``: ``(token, call)``; the input callback adds to
    ``call.problems`` why it could not answer, and :class:`DeferringClient` sets ``call.waiting``
    (reset the context var with the token afterwards)."""
    call = Call(tool, defer)
    return _CALL.set(call), call


class DeferringClient(mcp.Client):
    """``mcp.Client`` whose tool call, marked ``defer`` (:func:`calling`), stops at a first
    ``input_required`` result made of elicitations only: kept in ``Call.waiting`` (the call's
    result is then an empty placeholder the caller replaces), not sent to the input callback.
    Any other result, or a call not so marked, goes the SDK's way. (It overrides the SDK's
    ``_drive_input_required``, the one step that sees the result whole: its ``requestState``
    included, which the replay must echo; tests/tools/test_mcp_defer.py fails if it changes.)"""

    async def _drive_input_required(self, first: Any, retry: Any) -> Any:
        call = _CALL.get()
        if (call is not None and call.defer and isinstance(first, mcp_types.InputRequiredResult)
                and first.input_requests
                and all(isinstance(r, mcp_types.ElicitRequest) for r in first.input_requests.values())):
            call.waiting = first
            return mcp_types.CallToolResult(content=[])
        return await super()._drive_input_required(first, retry)


_RESPONSES: TypeAdapter[dict[str, Any]] = TypeAdapter(dict[str, mcp_types.InputResponse])


def replay_seed(server: str, replay: InputReplay | None) -> dict[str, Any]:
    """``mcp.Client.call_tool``'s keyword arguments that replay a call with recorded answers
    (``input_responses``, ``request_state``; ``{}`` for a first call).

    Raises:
        MCPServerError: answers that are not MCP input responses.
    """
    if replay is None:
        return {}
    try:
        return {"input_responses": _RESPONSES.validate_python(replay.input_responses),
                "request_state": replay.request_state}
    except ValidationError as e:
        raise MCPServerError(f"the recorded answers to the MCP server {server!r} are not MCP input responses: "
                             f"{e.errors(include_url=False)[0]['msg']}") from e


def waiting(server: str, result: mcp_types.InputRequiredResult) -> InputWait:
    """The questions of an ``input_required`` result, as plain JSON, to wait for a person."""
    requests = {key: r.model_dump(by_alias=True, mode="json", exclude_none=True)
                for key, r in (result.input_requests or {}).items()}
    return InputWait(server, requests, result.request_state)


def reset(token: Any) -> None:
    """Undo :func:`calling`."""
    _CALL.reset(token)


def elicitation_callback(server: str, handler: InputHandler | None) -> Any:
    """The ``mcp.Client`` elicitation callback of server ``server``: the request goes to
    ``handler`` (None: refused, and the call fails saying how to answer such servers)."""

    async def callback(context: ClientRequestContext, params: mcp_types.ElicitRequestParams
                       ) -> mcp_types.ElicitResult | mcp_types.ErrorData:
        call = _CALL.get()
        tool, problems = (call.tool, call.problems) if call is not None else (None, [])
        url = getattr(params, "url", None)
        schema = getattr(params, "requested_schema", None)
        request = InputRequest(server, tool, params.message, dict(schema) if schema is not None else None, url)
        if handler is None:
            problems.append(f"the MCP server {server!r} asked for input ({params.message!r:.200}) and no one can "
                            "answer: give MCPServer(input_handler=...), or run the agent with a session so that a "
                            "person answers later (kimik3 run asks on the terminal)")
            return mcp_types.ErrorData(code=mcp_types.INVALID_REQUEST, message="the client has no input handler")
        try:
            answer = (await anyio.to_thread.run_sync(handler, request, abandon_on_cancel=True)
                      if not inspect.iscoroutinefunction(handler) else handler(request))
            if inspect.isawaitable(answer):
                answer = await answer
        except Exception as e:
            problems.append(f"the input handler failed on the MCP server {server!r}'s request: "
                            f"{type(e).__name__}: {e}")
            return mcp_types.ErrorData(code=mcp_types.INTERNAL_ERROR, message="the client's input handler failed")
        if answer is None:
            return mcp_types.ElicitResult(action="decline")
        if not isinstance(answer, dict):
            problems.append(f"the input handler answered {type(answer).__name__}; it answers a dict, or None "
                            "to decline")
            return mcp_types.ErrorData(code=mcp_types.INTERNAL_ERROR, message="the client's input handler failed")
        return mcp_types.ElicitResult(action="accept", content=answer)

    return callback


# -- Tasks -----------------------------------------------------------------------------------


class _CreateTask(mcp_types.Result):
    """``CreateTaskResult`` (2026-07-28 Tasks extension): a Task in lieu of the call's result."""

    result_type: Literal["task"] = "task"
    task_id: str
    status: str
    status_message: str | None = None
    poll_interval_ms: int | None = None


class _TaskState(mcp_types.Result):
    """A ``tasks/get`` answer (``DetailedTask``)."""

    result_type: str | None = None
    task_id: str
    status: str
    status_message: str | None = None
    poll_interval_ms: int | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    input_requests: dict[str, Any] | None = None


class _TaskParams(mcp_types.RequestParams):
    task_id: str


class _UpdateParams(mcp_types.RequestParams):
    task_id: str
    input_responses: dict[str, Any]


class _TaskRequest(mcp_types.Request[Any, str]):
    name_param: ClassVar[str | None] = "taskId"  # the Mcp-Name header the extension requires


_INPUT_REQUEST: TypeAdapter[Any] = TypeAdapter(mcp_types.InputRequest)


class TasksExtension(ClientExtension):
    """The Tasks extension on the client side: a tool call answered with a Task is polled
    (``tasks/get``, at the server's ``pollIntervalMs``, at most every :data:`_MAX_POLL_S`) until
    it is ``completed`` (its result is the call's), ``failed`` (its JSON-RPC error) or
    ``cancelled``; an ``input_required`` task's requests go to the input handler and the answers
    back with ``tasks/update``. A call cancelled while polling (its time limit, the run's end)
    sends ``tasks/cancel``. The call's own time limit bounds the whole (``MCPServer.call_tool``)."""

    identifier = TASKS_EXTENSION

    def __init__(self, server: str) -> None:
        self.server = server

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=_CreateTask, resolve=self._follow)]

    async def _follow(self, created: _CreateTask, ctx: ClaimContext) -> mcp_types.CallToolResult:
        state = _TaskState(task_id=created.task_id, status=created.status, status_message=created.status_message,
                           poll_interval_ms=created.poll_interval_ms)
        answered: set[str] = set()
        limit = ctx.read_timeout_seconds
        try:
            with anyio.fail_after(limit):
                return await self._poll(ctx, state, answered)
        except TimeoutError:
            raise MCPServerError(f"the task of {ctx.tool_name!r} on the MCP server {self.server!r} did not finish "
                                 f"within {limit:g} s (it is cancelled)") from None

    async def _poll(self, ctx: ClaimContext, state: _TaskState, answered: set[str]) -> mcp_types.CallToolResult:
        try:
            while True:
                if state.status == "completed":
                    return mcp_types.CallToolResult.model_validate(state.result or {})
                if state.status == "failed":  # its JSON-RPC error, said as the task's (never taken for
                    error = state.error or {}  # the session's own: -32000 is also "connection closed")
                    raise MCPServerError(f"the task of {ctx.tool_name!r} on the MCP server {self.server!r} failed: "
                                         f"MCP error {error.get('code')}: {error.get('message')}")
                if state.status == "cancelled":
                    raise MCPServerError(f"the MCP server {self.server!r} cancelled the task of {ctx.tool_name!r}"
                                         + (f": {state.status_message}" if state.status_message else ""))
                if state.status == "input_required" and state.input_requests:
                    await self._answer(ctx, state, answered)
                await anyio.sleep(min(_MAX_POLL_S, max(0.01, (state.poll_interval_ms or 1000) / 1000)))
                state = await ctx.session.send_request(
                    _TaskRequest(method="tasks/get", params=_TaskParams(task_id=state.task_id)), _TaskState,
                    ctx.read_timeout_seconds)
        except BaseException:
            if state.status not in ("completed", "failed", "cancelled"):
                with anyio.move_on_after(_CANCEL_LIMIT_S, shield=True):
                    try:
                        await ctx.session.send_request(_TaskRequest(
                            method="tasks/cancel", params=_TaskParams(task_id=state.task_id)), mcp_types.EmptyResult)
                    except Exception as e:
                        log.warning("kimik3: MCP server %r: tasks/cancel of %s failed: %s", self.server,
                                    state.task_id, e)
            raise

    async def _answer(self, ctx: ClaimContext, state: _TaskState, answered: set[str]) -> None:
        """Answer the task's new input requests (each key once) with ``tasks/update``."""
        responses: dict[str, Any] = {}
        for key, raw in (state.input_requests or {}).items():
            if key in answered:
                continue
            request = _INPUT_REQUEST.validate_python(raw)
            context = ClientRequestContext(session=ctx.session, request_id=key, meta=None)
            response = await ctx.session.dispatch_input_request(context, request)
            if isinstance(response, mcp_types.ErrorData):
                raise MCPError.from_error_data(response)
            responses[key] = response.model_dump(by_alias=True, mode="json", exclude_none=True)
            answered.add(key)
        if responses:
            await ctx.session.send_request(_TaskRequest(method="tasks/update", params=_UpdateParams(
                task_id=state.task_id, input_responses=responses)), mcp_types.EmptyResult, ctx.read_timeout_seconds)
