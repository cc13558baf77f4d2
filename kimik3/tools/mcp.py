"""Tools of MCP servers as kimik3 tools, through the official ``mcp`` SDK (``pip install
'kimik3[mcp]'``); kimik3 has no protocol code of its own.

::

    async with MCPServerStdio("uvx", ["mcp-server-git"], tool_prefix="git") as git:
        agent = Agent(tools=[git, my_tool], engine=engine)   # or pass an unopened server: the
        result = await agent.run("...")                      # agent opens it for each run

How a server's tools and results become kimik3's (each rule is tested in tests/tools/test_mcp.py):

- a tool's ``inputSchema`` is declared to the model unchanged (plain JSON within kimik3's limits:
  finite numbers, nesting up to 128) and checked before each call off the event loop, its
  regular expressions under a time budget (:mod:`kimik3.tools._mcp_schema`; a schema that is not
  valid JSON Schema is passed through unchecked, with a warning); its name becomes
  ``<tool_prefix>_<name>`` when a prefix is set; any Unicode letter or digit,
  ``_``, ``.`` and ``-`` are kept (``搜索`` stays ``搜索``: K3 escapes the name attribute, and
  OpenAI-compatible servers such as vLLM do not check names; OpenAI's own API accepts ASCII
  only), other characters become ``_`` and it is cut to 64 characters (:func:`tool_name`). When
  that makes two tools of a server share a name, each changed name gets ``_`` and the first 8 hex
  digits of the SHA-256 of its full original name (stable, whatever the list order); two tools
  are never merged into one;
- a first tool list that breaks these rules (a name listed twice, a schema with ``1e999`` or
  nested too deep) raises :class:`~kimik3.ToolDefinitionError`; a refetched one is not used: the
  last good list stays, with a warning;
- text content -> text; images -> resized for K3 by :func:`kimik3.media.prepare_image`; embedded
  text resources -> their text, image blobs -> images; resource links, audio and other blobs ->
  a one-line note saying what was left out; a result with no content but
  ``structuredContent`` -> that value as compact JSON;
- ``isError`` results, MCP error responses, a timeout and a server that dies during a call ->
  the call's tool-error result (``"Error: ..."``); the run goes on, and later calls to a server
  that is gone fail at once with the reason;
- every request has a time limit (``timeout``, default :data:`DEFAULT_TIMEOUT_S`): opening
  (start, handshake and first listing together), each listing, each call;
- a server's request for input during a call (MCP 2026-07-28's ``input_required`` result, or an
  ``elicitation/create`` request on older connections) goes to ``input_handler``
  (:class:`InputRequest` -> the answer's content, or None to decline) and the call is retried
  with the answers; without a handler the call fails saying so. A call the server answers with
  a Task (the ``io.modelcontextprotocol/tasks`` extension) is polled until the task ends, within
  ``timeout``, and cancelled (``tasks/cancel``) when the call is (:mod:`kimik3.tools._mcp_input`);
- the server's ``notifications/tools/list_changed`` (a ``subscriptions/listen`` stream on
  2026-07-28 connections) marks the list stale: the next :meth:`MCPServer.get_tools` refetches it.

A server is shared: runs that enter it while it is open (``async with``, or an agent's run) use
the one session, and the last to leave closes it if the first one opened it. Its session lives
in an asyncio task of its own, so whichever task leaves last can close it. A stdio server runs
under a child subreaper (Linux; ``kimik3/tools/coding/_reaper.py``): processes it leaves behind,
``setsid`` daemons included, are ended with it.

Why one file past the ~600-line guide (issue 42 point 5): it is one concern, an MCP server as a
kimik3 toolset (connect, list, call, close), and its parts share the server's session state; what
stands apart already lives apart: schemas (``_mcp_schema``), input requests and tasks
(``_mcp_input``), the agent-side wait for answers (:mod:`kimik3.agents._inputs`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import os
import shutil
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, Literal, TextIO, TypeAlias, TypeVar

import anyio
import anyio.to_thread
from pydantic import ValidationError

try:
    import httpx2
    import mcp
    import mcp.types as mcp_types
    from mcp.client.stdio import StdioServerParameters, get_default_environment, stdio_client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.exceptions import MCPError
    from mcp.types.jsonrpc import REQUEST_TIMEOUT
    from mcp.types.version import KNOWN_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError("kimik3.tools.mcp needs the MCP SDK: pip install 'kimik3[mcp]'") from e

from .._exceptions import KimiK3Error, MCPServerError, ToolDefinitionError, ToolTimeoutError, UserError
from .._text import redact_url
from ..types import ToolSpec
from ._failures import FailureText, default_failure_text
from ._input import InputReplay, InputWait
from ._mcp_content import to_tool_result, tool_name, unique_names
from ._mcp_input import (
    DeferringClient,
    InputAnswer,
    InputHandler,
    InputRequest,
    TasksExtension,
    calling,
    elicitation_callback,
    replay_seed,
    reset,
    waiting,
)
from ._mcp_schema import CHECK_BUDGET_S, ArgumentsSchema
from ._tool import Tool, ToolContext, ToolResult, load_arguments
from ._toolset import Toolset

__all__ = ["DEFAULT_TIMEOUT_S", "ConnectMode", "InputAnswer", "InputHandler", "InputRequest", "MCPServer",
           "MCPServerStdio", "MCPServerStreamableHTTP", "MCPTool", "to_tool_result", "tool_name"]

log = logging.getLogger("kimik3.mcp")

ConnectMode: TypeAlias = Literal["auto", "legacy", "2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"]
"""How ``mcp.Client`` negotiates the protocol: ``"auto"``, ``"legacy"`` or a protocol version (the
versions of ``mcp.types.version.KNOWN_PROTOCOL_VERSIONS``; a newer SDK's are accepted too)."""

DEFAULT_TIMEOUT_S = 60.0
"""Seconds an MCP request may wait for its answer unless the server's ``timeout`` says otherwise."""

_CLOSE_LIMIT_S = 10.0  # a session's own shutdown (a stdio server's takes up to ~6 s), then it is cancelled
_REAPER = str(Path(__file__).parent / "coding" / "_reaper.py")
_SDK_CLOSED = "Connection closed"  # the SDK's own error when the connection ends (mcp.shared.jsonrpc_dispatcher)
_T = TypeVar("_T")


def _describe(exc: BaseException) -> str:
    """``Type: message`` of an exception, looking inside a group of one (anyio task groups)."""
    inner = getattr(exc, "exceptions", None)  # BaseExceptionGroup (a builtin from Python 3.11)
    while isinstance(inner, tuple) and len(inner) == 1:
        exc = inner[0]
        inner = getattr(exc, "exceptions", None)
    if isinstance(exc, MCPError):
        return f"MCP error {exc.code}: {exc.message}"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _seconds(name: str, value: object) -> float:
    """``value`` as a time limit: a positive finite number of seconds, else :class:`UserError`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise UserError(f"MCP server {name} must be a positive number of seconds, got {value!r}")
    return float(value)


MAX_TOOL_PAGES = 1000
"""The most pages of a tool listing read; a cursor past them (or one given twice) is an
:class:`~kimik3.MCPServerError`, never a list silently cut (issue 40, A36)."""

MAX_LISTED_TOOLS = 100_000
"""The most tools a listing may hold, all pages together: a server's pages growing without end
(within :data:`MAX_TOOL_PAGES`) are an :class:`~kimik3.MCPServerError`, not a run's memory."""


async def _list_page(client: mcp.Client, cursor: str | None) -> mcp_types.ListToolsResult:
    return await client.list_tools(cursor=cursor)


# -- tools -----------------------------------------------------------------------------------


class MCPTool(Tool):
    """One tool of an MCP server, implementing the :class:`~kimik3.tools.Tool` interface by
    composition: it holds its server and the server's tool declaration, and a call goes to the
    server (:meth:`MCPServer.call_tool`). Built by :meth:`MCPServer.get_tools`.

    Attributes:
        server: the server it belongs to.
        mcp_name: the tool's name on the server (``name`` is the one the model sees).

    Raises:
        pydantic.ValidationError: the declaration is not plain JSON within kimik3's limits (a
            ``1e999``, nesting beyond 128); :meth:`MCPServer.get_tools` reports it as a
            :class:`~kimik3.ToolDefinitionError`.
    """

    def __init__(self, server: MCPServer, tool: mcp_types.Tool, name: str) -> None:
        self.server = server
        self.mcp_name = tool.name
        self.name = name
        self.description = tool.description or ""
        self.parameters: dict[str, Any] = dict(tool.input_schema)
        self.timeout: float | None = None
        self._spec = super().spec  # checked once here (plain JSON within the limits), then reused every turn
        self._schema = ArgumentsSchema(self.parameters, f"MCP tool {tool.name!r} of {server.name!r}")

    def __repr__(self) -> str:
        return f"MCPTool(name={self.name!r}, server={self.server.name!r})"

    @property
    def spec(self) -> ToolSpec:
        """The declaration sent to the model (built once, when the server listed the tool)."""
        return self._spec

    def validate(self, arguments: Mapping[str, Any] | str | None) -> dict[str, Any]:
        """Check call arguments against the server's input schema (blocking: :meth:`run` does it
        in a worker thread; see :mod:`kimik3.tools._mcp_schema`).

        Raises:
            ToolArgumentsError: not a JSON object, values the schema rejects
                (``"<field>: <message>"`` joined with ``"; "``), or a pattern of the schema that
                cannot be matched within :data:`~kimik3.tools._mcp_schema.CHECK_BUDGET_S`.
        """
        args = dict(load_arguments(arguments))
        self._schema.check(args)
        return args

    async def run(
        self, arguments: Mapping[str, Any] | str | None, context: ToolContext | None = None, *,
        timeout: float | None = None,
    ) -> ToolResult:
        """Validate (in a worker thread) and call the tool on its server; never raises for a
        failed call (see the module docstring), one over its time limit included (see
        :meth:`Tool.run`); cancellation propagates."""
        limit = self.timeout if timeout is None else timeout
        budget = CHECK_BUDGET_S if limit is None else min(CHECK_BUDGET_S, limit)
        text = context.failure_text if context is not None else default_failure_text
        try:
            with anyio.move_on_after(limit):
                args = dict(load_arguments(arguments))
                await anyio.to_thread.run_sync(self._schema.check, args, budget, abandon_on_cancel=True)
                defer = context.defer_input if context is not None else None
                replay = context.input_replay if context is not None else None
                return await self.server.call_tool(self.mcp_name, args, text, defer=defer, replay=replay)
            raise ToolTimeoutError(f"{self.name} did not finish within {limit:g} s and was cancelled")
        except Exception as e:
            return ToolResult.from_exception(e, text)


# -- servers ---------------------------------------------------------------------------------


class MCPServer(Toolset):
    """Base of :class:`MCPServerStdio` and :class:`MCPServerStreamableHTTP`: an ``mcp.Client``
    session whose tools are kimik3 tools. Use it as an async context manager, or hand it to
    ``Agent(tools=[...])`` unopened and the agent opens it for each run (runs at the same time
    share one session; see :class:`~kimik3.tools.Toolset`).

    Args:
        name: a label for errors, logs and traces.
        tool_prefix: prepended to every tool name (``<prefix>_<name>``), to keep the tools of two
            servers apart.
        timeout: seconds any one request may wait for its answer: each tool call, each tool
            listing (all its pages together), and opening when ``connect_timeout`` is None
            (default :data:`DEFAULT_TIMEOUT_S`; a positive finite number).
        connect_timeout: seconds :meth:`open` may take in all: starting or reaching the server,
            the handshake and the first tool listing (None: ``timeout``).
        mode: how ``mcp.Client`` negotiates the protocol: ``"auto"`` (``server/discover``, falling
            back to the ``initialize`` handshake), ``"legacy"`` (the handshake only) or a
            protocol version (:data:`ConnectMode`).
        input_handler: answers the server's requests for input during a call (:data:`InputHandler`:
            an :class:`InputRequest` -> the answer's content, or None to decline; sync or async).
            None: such a call fails, saying so.

    Raises:
        UserError: a time limit that is not a positive finite number of seconds; a ``mode`` the
            SDK does not know.
    """

    def __init__(
        self,
        *,
        name: str,
        tool_prefix: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        connect_timeout: float | None = None,
        mode: ConnectMode = "auto",
        input_handler: InputHandler | None = None,
    ) -> None:
        self.name = name
        self.input_handler = input_handler
        self.tool_prefix = tool_prefix
        self.timeout = _seconds("timeout", timeout)
        self.connect_timeout = self.timeout if connect_timeout is None else _seconds("connect_timeout", connect_timeout)
        if mode not in ("auto", "legacy") and mode not in KNOWN_PROTOCOL_VERSIONS:
            raise UserError(f"MCPServer(mode=...) must be 'auto', 'legacy' or a protocol version of the MCP SDK "
                            f"({', '.join(KNOWN_PROTOCOL_VERSIONS)}); got {mode!r:.80}")
        self.mode: ConnectMode = mode
        self.is_open = False
        self._client: mcp.Client | None = None
        self._session: asyncio.Task[None] | None = None
        self._tools: list[MCPTool] = []
        self._listed = False  # a first list was built (a bad refetch then keeps it)
        self._stale = True
        self._gone: str | None = None  # why the server cannot be used any more
        self._gone_event = anyio.Event()
        self._closing = anyio.Event()
        self._lock = anyio.Lock()

    async def _target(self, stack: AsyncExitStack) -> Any:
        """What ``mcp.Client`` connects to (its transport), entering helpers onto ``stack``."""
        raise NotImplementedError

    async def open(self) -> None:
        """Start or reach the server, negotiate the protocol and list its tools, within
        ``connect_timeout`` seconds.

        The session lives in an asyncio task of its own: when its transport fails (a crashed
        HTTP server makes the SDK's transport raise), that task ends and records why, and the
        caller's task is never cancelled by it; calls in flight and later calls get the reason as
        their error.

        Raises:
            MCPServerError: the server cannot be started or reached, the handshake or the first
                tool listing failed or did not finish within ``connect_timeout``; already open.
            ToolDefinitionError: its first tool list cannot be used (two tools end up with one
                name, a schema that is not plain JSON within kimik3's limits).
        """
        if self.is_open or self._session is not None:
            raise MCPServerError(f"the MCP server {self.name!r} is already open")
        self._gone, self._stale, self._tools, self._listed = None, True, [], False
        self._gone_event, self._closing = anyio.Event(), anyio.Event()
        started = anyio.Event()
        failed: list[Exception] = []
        self._session = asyncio.get_running_loop().create_task(self._serve(started, failed))
        try:
            with anyio.move_on_after(self.connect_timeout) as deadline:
                await started.wait()
                if failed:
                    raise failed[0]
                self.is_open = True
                await self.get_tools()
            if deadline.cancelled_caught:
                raise MCPServerError(f"cannot open the MCP server {self.name!r}: no answer within "
                                     f"{self.connect_timeout:g} s")  # fmt: skip
        except BaseException as e:
            self.is_open = False
            with anyio.CancelScope(shield=True):
                await self._stop()
            if isinstance(e, KimiK3Error) or not isinstance(e, Exception):
                raise
            raise MCPServerError(f"cannot open the MCP server {self.name!r}: {_describe(e)}") from e

    async def _serve(self, started: anyio.Event, failed: list[Exception]) -> None:
        """The session's task: connect, then hold the session until :meth:`close`."""
        try:
            async with AsyncExitStack() as stack:
                client = DeferringClient(
                    await self._target(stack),
                    message_handler=self._on_message,
                    read_timeout_seconds=self.connect_timeout,  # the handshake (and listings: see _list_all)
                    mode=self.mode,
                    client_info=mcp_types.Implementation(name="kimik3", version="0.1.0"),
                    cache=None,  # a refetch after list_changed must reach the server
                    elicitation_callback=elicitation_callback(self.name, self.input_handler),
                    extensions=[TasksExtension(self.name)],
                )
                await stack.enter_async_context(client)
                tools_cap = client.server_capabilities.tools
                if client.protocol_version in MODERN_PROTOCOL_VERSIONS and tools_cap and tools_cap.list_changed:
                    # 2026-07-28: list changes arrive only on a subscription (teed to _on_message)
                    await stack.enter_async_context(client.listen(tools_list_changed=True))
                self._client = client
                started.set()
                await self._closing.wait()
        except Exception as e:
            if not started.is_set():
                failed.append(e)  # open() reports it
            else:
                self._gone = f"its session failed: {_describe(e)}"
                log.warning("kimik3: the MCP server %r is gone: %s", self.name, self._gone)
        finally:
            self._client = None
            if self._gone is None and not self._closing.is_set():
                self._gone = "its session ended"
            self._gone_event.set()
            started.set()

    async def _stop(self) -> None:
        """End the session task: let an established session shut its transport down (cancel it
        when that takes longer than a few seconds); cancel one still connecting at once."""
        task, self._session = self._session, None
        if task is None:
            return
        self._closing.set()
        if self._client is not None:
            with anyio.move_on_after(_CLOSE_LIMIT_S):
                await asyncio.wait({task})
        if not task.done():
            if self._client is not None:
                log.warning("kimik3: the MCP server %r did not shut down within %g s; its session is cancelled",
                            self.name, _CLOSE_LIMIT_S)  # fmt: skip
            task.cancel()
            with anyio.move_on_after(_CLOSE_LIMIT_S):
                await asyncio.wait({task})

    async def close(self) -> None:
        """End the session (and stop a stdio server's process and what it left behind); safe to
        call twice."""
        self.is_open = False
        with anyio.CancelScope(shield=True):
            await self._stop()

    async def _guarded(self, request: Callable[[mcp.Client], Awaitable[_T]]) -> _T:
        """Run ``request`` on the session, cut short when the session's task ends.

        Raises:
            MCPServerError: the server is not open, or is gone (before or during the request).
        """
        client = self._client
        if self._gone is not None or client is None:
            why = self._gone or "it is not open"
            raise MCPServerError(f"the MCP server {self.name!r} is gone: {why}")
        outcome: list[Any] = []  # [value] or [exception]; empty when cut short
        async with anyio.create_task_group() as group:

            async def cancel_when_gone() -> None:
                await self._gone_event.wait()
                group.cancel_scope.cancel()

            group.start_soon(cancel_when_gone)
            try:
                outcome.append(await request(client))
            except Exception as e:  # raised here, not wrapped in the task group's ExceptionGroup
                outcome.append(e)
            group.cancel_scope.cancel()
        if not outcome:
            raise MCPServerError(f"the MCP server {self.name!r} is gone: {self._gone}")
        if isinstance(outcome[0], Exception):
            raise outcome[0]
        value: _T = outcome[0]
        return value

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            self._stale = True
        elif isinstance(message, Exception):
            log.warning("kimik3: MCP server %r: %s", self.name, _describe(message))

    async def get_tools(self) -> list[Tool]:
        """The server's tools, refetched when it announced a change since the last listing.

        A refetch that fails (the server died, did not answer within ``timeout``, sent what the
        SDK cannot parse) or lists tools that cannot be used (two tools with one name, a schema
        beyond kimik3's JSON limits) keeps the last good list, with a warning, and is not tried
        again until the server announces its next change (so it costs a run at most one
        ``timeout`` per change). Calls to tools of a server that is gone return the failure as
        their error result.

        Raises:
            MCPServerError: the server is not open; its first listing failed.
            ToolDefinitionError: its first list cannot be used.
        """
        if not self.is_open:
            raise MCPServerError(f"the MCP server {self.name!r} is not open (use `async with server:`)")
        async with self._lock:
            if self._stale and self._gone is None:
                try:
                    tools = self._build(await self._list_all())
                except Exception as e:
                    if not self._listed:
                        raise
                    self._stale = False  # not again at every turn: at the server's next announced change
                    log.warning("kimik3: the refetched tool list of MCP server %r is not used (%s); the last good "
                                "list of %d tools stays", self.name, _describe(e), len(self._tools))  # fmt: skip
                else:
                    self._stale, self._listed, self._tools = False, True, tools
        return list(self._tools)

    async def _list_all(self) -> list[mcp_types.Tool]:
        tools: list[mcp_types.Tool] = []
        cursor: str | None = None
        seen: set[str] = set()
        with anyio.move_on_after(self.timeout) as deadline:
            for _ in range(MAX_TOOL_PAGES):  # a server whose cursor never ends cannot hang the run
                page = await self._guarded(functools.partial(_list_page, cursor=cursor))
                tools.extend(page.tools)
                if len(tools) > MAX_LISTED_TOOLS:
                    raise MCPServerError(f"the MCP server {self.name!r} listed more than {MAX_LISTED_TOOLS:,} tools "
                                         "(its listing never ends)")
                cursor = page.next_cursor
                if cursor is None:
                    break
                if cursor in seen:  # a cycle: the listing would never end
                    raise MCPServerError(f"the MCP server {self.name!r} gave the tool-list cursor {cursor[:80]!r} "
                                         "twice: its listing never ends")
                seen.add(cursor)
            else:  # never silently a cut list
                raise MCPServerError(f"the MCP server {self.name!r} listed more than {MAX_TOOL_PAGES} pages of tools "
                                     "(its cursor never ends)")
        if deadline.cancelled_caught:
            raise MCPServerError(f"the MCP server {self.name!r} did not list its tools within {self.timeout:g} s")
        return tools

    def _build(self, listed: Sequence[mcp_types.Tool]) -> list[MCPTool]:
        """kimik3 tools of a listing (linear in its length).

        Raises:
            ToolDefinitionError: two tools end up with one name; a tool's declaration is not
                plain JSON within kimik3's limits.
        """
        names = unique_names([t.name for t in listed], self.tool_prefix, self.name)
        out: list[MCPTool] = []
        for t, name in zip(listed, names, strict=True):
            try:
                out.append(MCPTool(self, t, name))
            except (ValidationError, KimiK3Error) as e:
                why = e.errors(include_url=False)[0]["msg"] if isinstance(e, ValidationError) else str(e)
                raise ToolDefinitionError(f"MCP server {self.name!r}: tool {t.name!r} cannot be declared: {why}") from e
        return out

    async def call_tool(
        self, name: str, arguments: dict[str, Any], text: FailureText = default_failure_text, *,
        defer: Callable[[InputWait], None] | None = None, replay: InputReplay | None = None,
    ) -> ToolResult:
        """Call tool ``name`` (its name on the server) and map the result (an ``isError`` one
        worded by ``text``, see :func:`to_tool_result`).

        Args:
            name: the tool's name on the server.
            arguments: its arguments.
            text: words a failure.
            defer: where a 2026-07-28 ``input_required`` result of elicitations goes when the
                server has no ``input_handler`` (an agent run's ``ToolContext.defer_input``):
                handed over as an :class:`~kimik3.tools._input.InputWait`, and the call's result
                is a placeholder the agent does not keep.
            replay: answers to the questions of an earlier call, sent as its ``inputResponses``
                with its ``requestState`` (the call replayed).

        Raises:
            MCPServerError: the server is not open or is gone, answered with an MCP error, did
                not answer within ``timeout``, closed the connection during the call, or
                answered ``input_required`` past the SDK's rounds (a handler's answers, or
                ``requestState`` alone, each time);
                ``replay`` answers that are not MCP input responses.
        """
        seed = replay_seed(self.name, replay)
        token, call = calling(name, defer=defer is not None and self.input_handler is None)
        try:
            result = await self._guarded(
                lambda client: client.call_tool(name, arguments, read_timeout_seconds=self.timeout, **seed))
            if call.waiting is not None and defer is not None:
                defer(waiting(self.name, call.waiting))
                return ToolResult(content=f"waiting for a person's answer to the MCP server {self.name!r}")
        except MCPError as e:
            if call.problems:
                raise MCPServerError(call.problems[0]) from e
            if e.code == REQUEST_TIMEOUT:
                raise MCPServerError(f"the MCP server {self.name!r} did not answer within {self.timeout:g} s") from e
            if e.code == mcp_types.CONNECTION_CLOSED and e.message == _SDK_CLOSED:  # -32000 is a server's code too
                self._gone = f"it closed the connection during a call to {name!r}"
                raise MCPServerError(f"the MCP server {self.name!r} closed the connection during the call") from e
            raise MCPServerError(f"the MCP server {self.name!r} answered with MCP error {e.code}: {e.message}") from e
        except TimeoutError as e:
            raise MCPServerError(f"the MCP server {self.name!r} did not answer within {self.timeout:g} s") from e
        except ValidationError as e:  # the SDK's reading of the server's answer (ours of a replay is typed above)
            deepest = max(e.errors(include_url=False), key=lambda err: len(err["loc"]))  # the most specific
            where = ".".join(map(str, deepest["loc"]))
            raise MCPServerError(f"the MCP server {self.name!r} answered the call to {name!r} with a result that is "
                                 f"not MCP's ({e.error_count()} problems; deepest: {where}: {deepest['msg']})") from e
        except mcp.InputRequiredRoundsExceededError as e:  # answered or state-only rounds, the SDK's loop
            raise MCPServerError(f"the MCP server {self.name!r} answered input_required more than {e.max_rounds} "
                                 f"rounds in one call to {name!r} (the MCP SDK's bound): the call fails") from e
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError, httpx2.HTTPError) as e:
            self._gone = _describe(e)
            raise MCPServerError(f"the MCP server {self.name!r} cannot be reached: {self._gone}") from e
        finally:
            reset(token)
        return to_tool_result(result, text)


def _file_with_fileno(stream: TextIO) -> TextIO:
    """``stream``, or the process's own stderr when ``stream`` has no file descriptor (a capture
    buffer: click's test runner, notebooks) for the subprocess to write to."""
    try:
        stream.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both
        return sys.__stderr__ or stream
    return stream


class MCPServerStdio(MCPServer):
    """An MCP server started as a subprocess and spoken to over its stdin / stdout.

    On Linux the process runs under kimik3's child subreaper (``_reaper.py --stdio``): when the
    server ends (closed, crashed or killed) every process it left behind is ended too, ``setsid``
    / double-fork daemons included (elsewhere: those that stay in its process group, as the SDK does).

    Args:
        command: the executable (looked up on ``PATH``).
        args: its arguments.
        env: variables added to the SDK's safe default environment (``HOME``, ``PATH``, ...;
            the parent's other variables are not inherited).
        cwd: the process's working directory.
        name: label (default: the command's file name).
        tool_prefix, timeout, connect_timeout, mode, input_handler: see :class:`MCPServer`.
        errlog: where the server's stderr goes (default ``sys.stderr``; a real file).
    """

    def __init__(
        self,
        command: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        name: str | None = None,
        tool_prefix: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        connect_timeout: float | None = None,
        mode: ConnectMode = "auto",
        errlog: TextIO | None = None,
        input_handler: InputHandler | None = None,
    ) -> None:
        super().__init__(name=name or os.path.basename(command), tool_prefix=tool_prefix, timeout=timeout,
                         connect_timeout=connect_timeout, mode=mode, input_handler=input_handler)
        self.params = StdioServerParameters(
            command=command, args=list(args), env=dict(env) if env is not None else None, cwd=cwd
        )
        self.errlog = errlog

    async def _target(self, stack: AsyncExitStack) -> Any:
        params = self.params
        if sys.platform.startswith("linux"):  # a subreaper (Windows: the SDK's job object ends the tree)
            path = (get_default_environment() | (params.env or {})).get("PATH")
            if os.sep not in params.command and shutil.which(params.command, path=path) is None:
                raise FileNotFoundError(f"{params.command!r} is not on PATH")
            params = params.model_copy(update={
                "command": sys.executable, "args": ["-I", "-S", _REAPER, "--stdio", params.command, *params.args]})
        return stdio_client(params, errlog=_file_with_fileno(self.errlog or sys.stderr))


class MCPServerStreamableHTTP(MCPServer):
    """An MCP server reached over Streamable HTTP.

    Args:
        url: the endpoint, e.g. ``http://127.0.0.1:8000/mcp``.
        headers: sent with every request (e.g. ``{"Authorization": "Bearer ..."}``).
        name: label (default: the URL, redacted: no credentials in error lines).
        tool_prefix, timeout, connect_timeout, mode, input_handler: see :class:`MCPServer`.
    """

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        name: str | None = None,
        tool_prefix: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        connect_timeout: float | None = None,
        mode: ConnectMode = "auto",
        input_handler: InputHandler | None = None,
    ) -> None:
        super().__init__(name=name or redact_url(url), tool_prefix=tool_prefix, timeout=timeout,
                         connect_timeout=connect_timeout, mode=mode, input_handler=input_handler)
        self.url = url
        self.headers = dict(headers or {})

    async def _target(self, stack: AsyncExitStack) -> Any:
        # connecting and writing: the SDK's 30 s at most; reading a held-open stream: its 300 s, or
        # longer for a tool call that may take longer (the request's own limit is `timeout`)
        limits = httpx2.Timeout(min(30.0, self.connect_timeout), read=max(300.0, self.timeout))
        http = httpx2.AsyncClient(headers=self.headers, timeout=limits)
        await stack.enter_async_context(http)
        return streamable_http_client(self.url, http_client=http)
