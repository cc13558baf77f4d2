"""Tools of MCP servers as kimik3 tools, through the official ``mcp`` SDK (``pip install
'kimik3[mcp]'``); kimik3 has no protocol code of its own.

::

    async with MCPServerStdio("uvx", ["mcp-server-git"], tool_prefix="git") as git:
        agent = Agent(tools=[git, my_tool], engine=engine)   # or pass an unopened server: the
        result = await agent.run("...")                      # agent opens it for each run

How a server's tools and results become kimik3's (each rule is tested in tests/tools/test_mcp.py):

- a tool's ``inputSchema`` is declared to the model unchanged and checked with ``jsonschema``
  before the call (a schema that is not valid JSON Schema is passed through unchecked, with a
  warning); its name becomes ``<tool_prefix>_<name>`` when a prefix is set; any Unicode letter or digit,
  ``_``, ``.`` and ``-`` are kept (``搜索`` stays ``搜索``: K3 escapes the name attribute, and
  OpenAI-compatible servers such as vLLM do not check names; OpenAI's own API accepts ASCII
  only), other characters become ``_`` and it is cut to 64 characters (:func:`tool_name`). When
  that makes two tools of a server share a name, each changed name gets ``_`` and the first 8 hex
  digits of the SHA-256 of its full original name (stable, whatever the list order); two tools
  are never merged into one (a server listing one name twice raises
  :class:`~kimik3.ToolDefinitionError`);
- text content -> text; images -> resized for K3 by :func:`kimik3.media.prepare_image`; embedded
  text resources -> their text, image blobs -> images; resource links, audio and other blobs ->
  a one-line note saying what was left out; a result with no content but
  ``structuredContent`` -> that value as compact JSON;
- ``isError`` results, MCP error responses, a timeout and a server that dies during a call ->
  the call's tool-error result (``"Error: ..."``); the run goes on, and later calls to a server
  that is gone fail at once with the reason;
- the server's ``notifications/tools/list_changed`` (a ``subscriptions/listen`` stream on
  2026-07-28 connections) marks the list stale: the next :meth:`MCPServer.get_tools` refetches it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import math
import os
import re
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from typing import Any, Literal, TextIO, TypeAlias, TypeVar

import anyio
import anyio.abc
import jsonschema

try:
    import httpx2
    import mcp
    import mcp.types as mcp_types
    from mcp.client.stdio import StdioServerParameters, stdio_client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.exceptions import MCPError
    from mcp.types.jsonrpc import REQUEST_TIMEOUT
    from mcp.types.version import KNOWN_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError("kimik3.tools.mcp needs the MCP SDK: pip install 'kimik3[mcp]'") from e

from .._exceptions import (
    KimiK3Error,
    MCPServerError,
    MediaError,
    ToolArgumentsError,
    ToolDefinitionError,
    ToolTimeoutError,
    UserError,
)
from ..media import prepare_image
from ..types import ImagePart, ImageURL, TextPart
from . import _failures as failures
from ._failures import FailureText, default_failure_text
from ._tool import Tool, ToolContext, ToolResult, load_arguments
from ._toolset import Toolset

__all__ = ["ConnectMode", "MCPServer", "MCPServerStdio", "MCPServerStreamableHTTP", "MCPTool"]

log = logging.getLogger("kimik3.mcp")

ConnectMode: TypeAlias = Literal["auto", "legacy", "2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"]
"""How ``mcp.Client`` negotiates the protocol: ``"auto"``, ``"legacy"`` or a protocol version (the
versions of ``mcp.types.version.KNOWN_PROTOCOL_VERSIONS``; a newer SDK's are accepted too)."""

_UNSAFE = re.compile(r"[^\w.-]")  # \w: Unicode letters, digits and '_'
_HASH_LEN = 8
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


async def _list_page(client: mcp.Client, cursor: str | None) -> mcp_types.ListToolsResult:
    return await client.list_tools(cursor=cursor)


def tool_name(name: str, prefix: str | None = None) -> str:
    """The kimik3 name of MCP tool ``name``: ``<prefix>_<name>``, characters other than Unicode
    letters, digits, ``_``, ``.`` and ``-`` replaced by ``_``, cut to 64 characters (a server's
    clashing results get a hash suffix: see :meth:`MCPServer.get_tools`)."""
    full = f"{prefix}_{name}" if prefix else name
    return (_UNSAFE.sub("_", full) or "_")[:64]


def _hashed(name: str, prefix: str | None) -> str:
    full = f"{prefix}_{name}" if prefix else name
    digest = hashlib.sha256(full.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_LEN]
    return f"{tool_name(name, prefix)[: 64 - _HASH_LEN - 1]}_{digest}"


# -- results ---------------------------------------------------------------------------------


def _image(data: str, mime: str) -> TextPart | ImagePart:
    try:
        prepared = prepare_image(f"data:{mime};base64,{data}")
    except (MediaError, ValueError) as e:
        return TextPart(text=f"[an image ({mime}) could not be read: {e}]")
    return ImagePart(image_url=ImageURL(url=prepared.data_url()))


def _block(block: Any) -> TextPart | ImagePart:
    if isinstance(block, mcp_types.TextContent):
        return TextPart(text=block.text)
    if isinstance(block, mcp_types.ImageContent):
        return _image(block.data, block.mime_type)
    if isinstance(block, mcp_types.AudioContent):
        return TextPart(text=f"[audio ({block.mime_type}) left out: K3 takes no audio]")
    if isinstance(block, mcp_types.ResourceLink):
        about = f": {block.description}" if block.description else ""
        return TextPart(text=f"[resource {block.uri} ({block.name}){about}]")
    if isinstance(block, mcp_types.EmbeddedResource):
        res = block.resource
        if isinstance(res, mcp_types.TextResourceContents):
            return TextPart(text=res.text)
        mime = res.mime_type or "application/octet-stream"
        if mime.startswith("image/"):
            return _image(res.blob, mime)
        size = len(res.blob) * 3 // 4 - res.blob.count("=")  # base64: 4 characters hold 3 bytes
        return TextPart(text=f"[binary resource {res.uri} ({mime}, {size} bytes) left out]")
    return TextPart(text=f"[{type(block).__name__} content left out]")


def to_tool_result(result: mcp_types.CallToolResult, text: FailureText = default_failure_text) -> ToolResult:
    """Map an MCP ``CallToolResult`` to a :class:`ToolResult` (rules in the module docstring).

    Returns:
        Text content alone becomes one string (blocks joined with newlines); with images, a list
        of text and image parts. ``isError`` results have ``is_error=True`` and their first text
        worded by ``text`` (:mod:`kimik3.tools._failures`: ``"Error: "`` first by default).
    """
    parts = [_block(b) for b in result.content]
    if not parts and result.structured_content is not None:
        parts = [TextPart(text=json.dumps(result.structured_content, ensure_ascii=False, separators=(",", ":")))]
    if result.is_error:
        if parts and isinstance(parts[0], TextPart):
            parts[0] = TextPart(text=text(failures.tool_reported(parts[0].text)))
        else:
            parts.insert(0, TextPart(text=text(failures.tool_reported(None))))
    if all(isinstance(p, TextPart) for p in parts):
        return ToolResult(content="\n".join(p.text for p in parts if isinstance(p, TextPart)), is_error=result.is_error)
    return ToolResult(content=parts, is_error=result.is_error)


# -- tools -----------------------------------------------------------------------------------


class MCPTool(Tool):
    """One tool of an MCP server, implementing the :class:`~kimik3.tools.Tool` interface by
    composition: it holds its server and the server's tool declaration, and a call goes to the
    server (:meth:`MCPServer.call_tool`). Built by :meth:`MCPServer.get_tools`.

    Attributes:
        server: the server it belongs to.
        mcp_name: the tool's name on the server (``name`` is the one the model sees).
    """

    def __init__(self, server: MCPServer, tool: mcp_types.Tool, name: str) -> None:
        self.server = server
        self.mcp_name = tool.name
        self.name = name
        self.description = tool.description or ""
        self.parameters: dict[str, Any] = dict(tool.input_schema)
        self.timeout: float | None = None
        cls = jsonschema.validators.validator_for(self.parameters, default=jsonschema.Draft202012Validator)
        try:
            cls.check_schema(self.parameters)
            self._schema_validator: jsonschema.protocols.Validator | None = cls(self.parameters)
        except jsonschema.SchemaError as e:
            log.warning("kimik3: MCP tool %r of %r has an invalid input schema (%s); arguments go unchecked",
                        tool.name, server.name, e.message)
            self._schema_validator = None

    def __repr__(self) -> str:
        return f"MCPTool(name={self.name!r}, server={self.server.name!r})"

    def validate(self, arguments: Mapping[str, Any] | str | None) -> dict[str, Any]:
        """Check call arguments against the server's input schema.

        Raises:
            ToolArgumentsError: not a JSON object, or values the schema rejects
                (``"<field>: <message>"`` joined with ``"; "``).
        """
        args = dict(load_arguments(arguments))
        if self._schema_validator is not None:
            errors = sorted(self._schema_validator.iter_errors(args), key=lambda err: list(map(str, err.path)))
            if errors:
                raise ToolArgumentsError(
                    "; ".join(f"{'.'.join(map(str, e.path)) or '<arguments>'}: {e.message}" for e in errors)
                )
        return args

    async def run(
        self, arguments: Mapping[str, Any] | str | None, context: ToolContext | None = None, *,
        timeout: float | None = None,
    ) -> ToolResult:
        """Validate and call the tool on its server; never raises for a failed call (see the module
        docstring), one over its time limit included (see :meth:`Tool.run`); cancellation
        propagates."""
        limit = self.timeout if timeout is None else timeout
        text = context.failure_text if context is not None else default_failure_text
        try:
            with anyio.move_on_after(limit):
                return await self.server.call_tool(self.mcp_name, self.validate(arguments), text)
            raise ToolTimeoutError(f"{self.name} did not finish within {limit:g} s and was cancelled")
        except Exception as e:
            return ToolResult.from_exception(e, text)


# -- servers ---------------------------------------------------------------------------------


class MCPServer(Toolset):
    """Base of :class:`MCPServerStdio` and :class:`MCPServerStreamableHTTP`: an ``mcp.Client``
    session whose tools are kimik3 tools. Use it as an async context manager, or hand it to
    ``Agent(tools=[...])`` unopened and the agent opens it for each run.

    Args:
        name: a label for errors, logs and traces.
        tool_prefix: prepended to every tool name (``<prefix>_<name>``), to keep the tools of two
            servers apart.
        timeout: seconds a tool call may take (None: no limit).
        connect_timeout: seconds to wait for each answer while connecting and listing tools.
        mode: how ``mcp.Client`` negotiates the protocol: ``"auto"`` (``server/discover``, falling
            back to the ``initialize`` handshake), ``"legacy"`` (the handshake only) or a
            protocol version (:data:`ConnectMode`).

    Raises:
        UserError: a ``mode`` the SDK does not know.
    """

    def __init__(
        self,
        *,
        name: str,
        tool_prefix: str | None = None,
        timeout: float | None = None,
        connect_timeout: float = 60.0,
        mode: ConnectMode = "auto",
    ) -> None:
        self.name = name
        self.tool_prefix = tool_prefix
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        if mode not in ("auto", "legacy") and mode not in KNOWN_PROTOCOL_VERSIONS:
            raise UserError(f"MCPServer(mode=...) must be 'auto', 'legacy' or a protocol version of the MCP SDK "
                            f"({', '.join(KNOWN_PROTOCOL_VERSIONS)}); got {mode!r:.80}")
        self.mode: ConnectMode = mode
        self.is_open = False
        self._client: mcp.Client | None = None
        self._stack: AsyncExitStack | None = None
        self._tools: list[MCPTool] = []
        self._stale = True
        self._gone: str | None = None  # why the server cannot be used any more
        self._gone_event = anyio.Event()
        self._closing = anyio.Event()
        self._lock = anyio.Lock()

    async def _target(self, stack: AsyncExitStack) -> Any:
        """What ``mcp.Client`` connects to (its transport), entering helpers onto ``stack``."""
        raise NotImplementedError

    async def open(self) -> None:
        """Start or reach the server, negotiate the protocol and list its tools.

        The session lives in a task of its own: when its transport fails (a crashed HTTP server
        makes the SDK's transport raise), that task ends and records why, and the caller's task
        is never cancelled by it; calls in flight and later calls get the reason as their error.

        Raises:
            MCPServerError: the server cannot be started or reached, or the handshake or the
                first tool listing failed; already open.
            ToolDefinitionError: two of its tools end up with the same name.
        """
        if self.is_open:
            raise MCPServerError(f"the MCP server {self.name!r} is already open")
        self._gone, self._stale, self._tools = None, True, []
        self._gone_event, self._closing = anyio.Event(), anyio.Event()
        stack = AsyncExitStack()
        try:
            group = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(self._closing.set)  # runs first on close: the session task ends
            await group.start(self._serve)
            self._stack = stack
            self.is_open = True
            await self.get_tools()
        except BaseException as e:
            self.is_open, self._stack = False, None
            with anyio.CancelScope(shield=True):
                try:
                    await stack.aclose()
                except Exception as close_error:  # the first error is the one to report
                    log.debug("kimik3: closing MCP server %r after a failed open: %s", self.name, close_error)
            if isinstance(e, KimiK3Error) or not isinstance(e, Exception):
                raise
            raise MCPServerError(f"cannot open the MCP server {self.name!r}: {_describe(e)}") from e

    async def _serve(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """The session's task: connect, then hold the session until :meth:`close`."""
        started = False
        try:
            async with AsyncExitStack() as stack:
                client = mcp.Client(
                    await self._target(stack),
                    message_handler=self._on_message,
                    read_timeout_seconds=self.connect_timeout,  # the handshake and tool listings
                    mode=self.mode,
                    client_info=mcp_types.Implementation(name="kimik3", version="0.1.0"),
                    cache=None,  # a refetch after list_changed must reach the server
                )
                await stack.enter_async_context(client)
                tools_cap = client.server_capabilities.tools
                if client.protocol_version in MODERN_PROTOCOL_VERSIONS and tools_cap and tools_cap.list_changed:
                    # 2026-07-28: list changes arrive only on a subscription (teed to _on_message)
                    await stack.enter_async_context(client.listen(tools_list_changed=True))
                self._client = client
                started = True
                task_status.started()
                await self._closing.wait()
        except Exception as e:
            if not started:
                raise  # open() reports it
            self._gone = f"its session failed: {_describe(e)}"
            log.warning("kimik3: the MCP server %r is gone: %s", self.name, self._gone)
        finally:
            self._client = None
            if self._gone is None and not self._closing.is_set():
                self._gone = "its session ended"
            self._gone_event.set()

    async def close(self) -> None:
        """End the session (and stop a stdio server's process); safe to call twice."""
        stack, self._stack, self.is_open = self._stack, None, False
        if stack is not None:
            try:
                await stack.aclose()
            except Exception as e:  # a server that already died may fail its own shutdown
                log.warning("kimik3: closing the MCP server %r: %s", self.name, _describe(e))

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

        A refetch that fails (the server died) keeps the last list, with a warning: calls to
        those tools then return the failure as their error result.

        Raises:
            MCPServerError: the server is not open.
            ToolDefinitionError: two tools end up with the same name.
        """
        if not self.is_open:
            raise MCPServerError(f"the MCP server {self.name!r} is not open (use `async with server:`)")
        async with self._lock:
            if self._stale and self._gone is None:
                try:
                    listed = await self._list_all()
                except Exception as e:
                    if not self._tools:
                        raise
                    log.warning("kimik3: refreshing the tools of MCP server %r failed: %s", self.name, _describe(e))
                else:
                    self._stale = False
                    self._tools = self._build(listed)
        return list(self._tools)

    async def _list_all(self) -> list[mcp_types.Tool]:
        tools: list[mcp_types.Tool] = []
        cursor: str | None = None
        for _ in range(1000):  # a server whose cursor never ends cannot hang the run
            page = await self._guarded(functools.partial(_list_page, cursor=cursor))
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        return tools

    def _build(self, listed: Sequence[mcp_types.Tool]) -> list[MCPTool]:
        plain = [tool_name(t.name, self.tool_prefix) for t in listed]
        full = [f"{self.tool_prefix}_{t.name}" if self.tool_prefix else t.name for t in listed]
        clashing = {n for n in plain if plain.count(n) > 1}
        out: dict[str, MCPTool] = {}
        for t, name, original in zip(listed, plain, full, strict=True):
            if name in clashing and name != original:  # changed, and now shared: make it unique
                name = _hashed(t.name, self.tool_prefix)
            if name in out:
                raise ToolDefinitionError(
                    f"MCP server {self.name!r}: tools {out[name].mcp_name!r} and {t.name!r} both become {name!r}"
                )
            out[name] = MCPTool(self, t, name)
        return list(out.values())

    async def call_tool(
        self, name: str, arguments: dict[str, Any], text: FailureText = default_failure_text
    ) -> ToolResult:
        """Call tool ``name`` (its name on the server) and map the result (an ``isError`` one
        worded by ``text``, see :func:`to_tool_result`).

        Raises:
            MCPServerError: the server is not open or is gone, answered with an MCP error, did
                not answer within ``timeout``, or closed the connection during the call.
        """
        # (the SDK reads None as "the client's default", the connect timeout: no limit is inf)
        limit = self.timeout if self.timeout is not None else math.inf
        try:
            result = await self._guarded(lambda client: client.call_tool(name, arguments, read_timeout_seconds=limit))
        except MCPError as e:
            if e.code == REQUEST_TIMEOUT:
                raise MCPServerError(f"the MCP server {self.name!r} did not answer within {self.timeout} s") from e
            if e.code == mcp_types.CONNECTION_CLOSED:
                self._gone = f"it closed the connection during a call to {name!r}"
                raise MCPServerError(f"the MCP server {self.name!r} closed the connection during the call") from e
            raise MCPServerError(f"the MCP server {self.name!r} answered with MCP error {e.code}: {e.message}") from e
        except TimeoutError as e:
            raise MCPServerError(f"the MCP server {self.name!r} did not answer within {self.timeout} s") from e
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError, httpx2.HTTPError) as e:
            self._gone = _describe(e)
            raise MCPServerError(f"the MCP server {self.name!r} cannot be reached: {self._gone}") from e
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

    Args:
        command: the executable (looked up on ``PATH``).
        args: its arguments.
        env: variables added to the SDK's safe default environment (``HOME``, ``PATH``, ...;
            the parent's other variables are not inherited).
        cwd: the process's working directory.
        name: label (default: the command's file name).
        tool_prefix, timeout, connect_timeout, mode: see :class:`MCPServer`.
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
        timeout: float | None = None,
        connect_timeout: float = 60.0,
        mode: ConnectMode = "auto",
        errlog: TextIO | None = None,
    ) -> None:
        super().__init__(name=name or os.path.basename(command), tool_prefix=tool_prefix, timeout=timeout,
                         connect_timeout=connect_timeout, mode=mode)
        self.params = StdioServerParameters(
            command=command, args=list(args), env=dict(env) if env is not None else None, cwd=cwd
        )
        self.errlog = errlog

    async def _target(self, stack: AsyncExitStack) -> Any:
        return stdio_client(self.params, errlog=_file_with_fileno(self.errlog or sys.stderr))


class MCPServerStreamableHTTP(MCPServer):
    """An MCP server reached over Streamable HTTP.

    Args:
        url: the endpoint, e.g. ``http://127.0.0.1:8000/mcp``.
        headers: sent with every request (e.g. ``{"Authorization": "Bearer ..."}``).
        name: label (default: the URL).
        tool_prefix, timeout, connect_timeout, mode: see :class:`MCPServer`.
    """

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        name: str | None = None,
        tool_prefix: str | None = None,
        timeout: float | None = None,
        connect_timeout: float = 60.0,
        mode: ConnectMode = "auto",
    ) -> None:
        super().__init__(name=name or url, tool_prefix=tool_prefix, timeout=timeout,
                         connect_timeout=connect_timeout, mode=mode)
        self.url = url
        self.headers = dict(headers or {})

    async def _target(self, stack: AsyncExitStack) -> Any:
        # the SDK's default timeouts: 30 s to connect / write, 300 s to read a held-open stream
        http = httpx2.AsyncClient(headers=self.headers, timeout=httpx2.Timeout(30.0, read=300.0))
        await stack.enter_async_context(http)
        return streamable_http_client(self.url, http_client=http)
