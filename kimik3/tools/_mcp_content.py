"""What :mod:`kimik3.tools.mcp` makes of an MCP server's data: the names its tools get
(:func:`tool_name`, :func:`unique_names`) and the tool results its answers become
(:func:`to_tool_result`). Rules in :mod:`kimik3.tools.mcp`'s docstring."""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

import mcp.types as mcp_types

from .._exceptions import MediaError, ToolDefinitionError
from ..media import K3_MEDIA_CONFIG, prepare_image
from ..types import ImagePart, ImageURL, TextPart
from . import _failures as failures
from ._failures import FailureText, default_failure_text
from ._tool import ToolResult

__all__ = ["to_tool_result", "tool_name", "unique_names"]

_UNSAFE = re.compile(r"[^\w.-]")  # \w: Unicode letters, digits and '_'
_HASH_LEN = 8
_IMAGE_CONFIG = K3_MEDIA_CONFIG.model_copy(update={"max_image_pixels": 7680 * 4320})
"""A server's image is refused past 8K UHD from its header (as a screenshot is: issue 40's A30
kind), never decoded: Pillow's own limit (178,956,970 pixels) let one take seconds and GBs."""


def tool_name(name: str, prefix: str | None = None) -> str:
    """The kimik3 name of MCP tool ``name``: ``<prefix>_<name>``, characters other than Unicode
    letters, digits, ``_``, ``.`` and ``-`` replaced by ``_``, cut to 64 characters (a server's
    clashing results get a hash suffix: see :func:`unique_names`)."""
    full = f"{prefix}_{name}" if prefix else name
    return (_UNSAFE.sub("_", full) or "_")[:64]


def _hashed(name: str, prefix: str | None) -> str:
    full = f"{prefix}_{name}" if prefix else name
    digest = hashlib.sha256(full.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_LEN]
    return f"{tool_name(name, prefix)[: 64 - _HASH_LEN - 1]}_{digest}"


def unique_names(names: Sequence[str], prefix: str | None, server: str) -> list[str]:
    """The kimik3 names of a server's tools ``names`` (in order; linear in their number).

    A name that :func:`tool_name` changed and that now clashes with another gets ``_`` and the
    first 8 hex digits of the SHA-256 of its full original name.

    Raises:
        ToolDefinitionError: two tools still end up with one name (the server lists a name twice).
    """
    plain = [tool_name(n, prefix) for n in names]
    counts = Counter(plain)
    out: dict[str, str] = {}  # kimik3 name -> server name
    for name, kimik3_name in zip(names, plain, strict=True):
        original = f"{prefix}_{name}" if prefix else name
        if counts[kimik3_name] > 1 and kimik3_name != original:  # changed, and now shared: make it unique
            kimik3_name = _hashed(name, prefix)
        if kimik3_name in out:
            raise ToolDefinitionError(
                f"MCP server {server!r}: tools {out[kimik3_name]!r} and {name!r} both become {kimik3_name!r}"
            )
        out[kimik3_name] = name
    return list(out)


def _image(data: str, mime: str) -> TextPart | ImagePart:
    try:
        prepared = prepare_image(f"data:{mime};base64,{data}", _IMAGE_CONFIG)
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
    """Map an MCP ``CallToolResult`` to a :class:`ToolResult` (rules in :mod:`kimik3.tools.mcp`).

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
