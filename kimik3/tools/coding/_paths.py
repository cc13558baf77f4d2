"""Workspace paths and file reading shared by the coding tools."""

from __future__ import annotations

import codecs
from pathlib import Path

from ..._exceptions import ToolError

_BINARY_SNIFF = 8192


class _Workspace:
    def __init__(self, root: Path) -> None:
        self.root = root

    def resolve(self, path: str) -> Path:
        """The absolute, symlink-free path of ``path``; ToolError when it leaves the root."""
        if "\x00" in path:
            raise ToolError(f"invalid path {path!r}")
        p = Path(path)
        try:
            resolved = (p if p.is_absolute() else self.root / p).resolve()
        except (OSError, RuntimeError) as e:  # symlink loops
            raise ToolError(f"cannot resolve path {path!r}: {e}") from e
        if not resolved.is_relative_to(self.root):
            raise ToolError(f"path {path!r} is outside the workspace {self.root}; use a path inside it")
        return resolved

    def rel(self, path: Path) -> str:
        rel = path.relative_to(self.root).as_posix()
        return rel or "."

    def inside(self, path: Path) -> bool:
        try:
            return path.resolve().is_relative_to(self.root)
        except (OSError, RuntimeError):
            return False


def _is_binary(data: bytes) -> bool:
    return b"\x00" in data[:_BINARY_SNIFF]


def _decode(data: bytes) -> tuple[str, str]:
    """(text, encoding): UTF-8 with BOM, UTF-8, else latin-1 (which round-trips any bytes)."""
    if data.startswith(codecs.BOM_UTF8):
        try:
            return data[len(codecs.BOM_UTF8) :].decode("utf-8"), "utf-8-sig"
        except UnicodeDecodeError:
            pass
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return data.decode("latin-1"), "latin-1"


def _split_lines(text: str) -> list[str]:
    """Lines split on ``\\n`` only (like grep / rg numbering), without ``\\r\\n`` / ``\\n``."""
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def _cap_line(line: str, limit: int) -> str:
    if len(line) <= limit:
        return line
    return f"{line[:limit]}... [{len(line) - limit} more characters]"


def _read_text_file(ws: _Workspace, path: str) -> tuple[Path, bytes]:
    p = ws.resolve(path)
    if p.is_dir():
        raise ToolError(f"{path} is a directory")
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise ToolError(f"{path}: no such file") from None
    except OSError as e:
        raise ToolError(f"cannot read {path}: {e.strerror or e}") from None
    if _is_binary(data):
        raise ToolError(f"{path} is a binary file ({len(data)} bytes)")
    return p, data

