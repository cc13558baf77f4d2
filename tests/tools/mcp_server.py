"""An MCP server for kimik3's tests, written with the SDK's server API (``MCPServer``).

Run: ``python tests/tools/mcp_server.py stdio`` or ``... http PORT`` (127.0.0.1 only).

Tools: ``add`` (structured int result), ``shout`` (text), ``picture`` (a 40x20 PNG), ``fail``
(raises: an ``isError`` result), ``crash`` (the process exits mid-call), ``mixed`` (text, audio,
resource link, embedded text and blob), ``unlock`` (adds the tool ``secret.word`` and announces
the change), ``header`` (an HTTP request header), ``pid``, ``slow`` (sleeps).
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import time

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image
from mcp.types import (
    AudioContent,
    BlobResourceContents,
    EmbeddedResource,
    ResourceLink,
    TextContent,
    TextResourceContents,
)
from PIL import Image as PILImage

server = MCPServer("kimik3-test")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def shout(text: str) -> str:
    """Upper-case a text."""
    return text.upper() + "!"


@server.tool()
def picture() -> Image:
    """A 40x20 red PNG."""
    buf = io.BytesIO()
    PILImage.new("RGB", (40, 20), (255, 0, 0)).save(buf, format="PNG")
    return Image(data=buf.getvalue(), format="png")


@server.tool()
def fail(reason: str) -> str:
    """Always raises."""
    raise ToolError(f"refused: {reason}")


@server.tool()
def crash() -> str:
    """The server process dies during this call."""
    sys.stdout.flush()
    os._exit(3)


@server.tool()
def mixed() -> list[object]:
    """Every other kind of content block."""
    return [
        TextContent(type="text", text="first"),
        AudioContent(type="audio", data="AAAA", mime_type="audio/wav"),
        ResourceLink(type="resource_link", uri="file:///notes.txt", name="notes", description="the notes"),
        EmbeddedResource(type="resource", resource=TextResourceContents(uri="file:///a.txt", text="embedded text")),
        EmbeddedResource(type="resource", resource=BlobResourceContents(uri="file:///b.bin", blob="AAECAw==", mime_type="application/zip")),
    ]


def secret_word() -> str:
    """The secret word."""
    return "swordfish"


@server.tool()
async def unlock(ctx: Context) -> str:
    """Adds the tool secret.word and announces that the tool list changed."""
    server.add_tool(secret_word, name="secret.word")
    await ctx.notify_tools_changed()  # 2026-07-28 subscriptions
    with contextlib.suppress(Exception):  # handshake-era sessions get a notification
        await ctx.request_context.session.send_tool_list_changed()
    return "unlocked"


@server.tool()
def header(ctx: Context, name: str) -> str:
    """The value of an HTTP request header ("" on stdio)."""
    return (ctx.headers or {}).get(name, "")


@server.tool()
def pid() -> int:
    """The server's process id."""
    return os.getpid()


@server.tool()
def slow(seconds: float) -> str:
    """Sleeps."""
    time.sleep(seconds)
    return "slept"


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
