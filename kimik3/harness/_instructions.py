"""Project instructions: ``AGENTS.md`` files (the cross-tool convention, https://agents.md).

The workspace root's ``AGENTS.md`` goes into the system prompt (:meth:`ProjectInstructions.
system_prompt`). A nested one (``pkg/AGENTS.md``) reaches the model the first time a tool call
touches its directory or a directory below it: its text is appended to that call's result, once
per run. Each file is capped at ``max_bytes`` (cut on a line boundary, with a note saying how much
was left out), and all files of a run together at ``max_total_bytes``: past it a nested file is
only named, for the model to read if it needs it. Files are opened through the coding tools'
confined walk: a symlink (of the file or of a directory above it) that leads out of the workspace,
a FIFO or a device is never read.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from .._exceptions import ToolError
from ..agents import RunHooks
from ..tools import ToolResult
from ..tools.coding.api import Workspace
from ..types import TextPart, ToolCall

__all__ = ["AGENTS_FILE", "MAX_INSTRUCTIONS_BYTES", "ProjectInstructions"]

AGENTS_FILE = "AGENTS.md"
MAX_INSTRUCTIONS_BYTES = 32 * 1024  # per file (Codex's project_doc_max_bytes default)
MAX_TOTAL_INSTRUCTIONS_BYTES = 96 * 1024  # all files of a run together
_PATH_ARGS = ("path", "file_path")


def _read_capped(ws: Workspace, path: str, cap: int) -> str | None:
    """The text of the regular file ``path`` (confined to the workspace, symlinked directories
    included), cut to ``cap`` bytes."""
    try:
        fd, _, _ = ws.open_file(path)
    except ToolError:
        return None
    with os.fdopen(fd, "rb") as f:
        data = f.read(cap + 1)
        size = os.fstat(fd).st_size
    if len(data) > cap:
        data = data[:cap]
        data = data[: data.rfind(b"\n") + 1] or data
        more = max(size, cap + 1) - len(data)
        return data.decode("utf-8", "replace") + f"\n[{AGENTS_FILE} cut: {more} more bytes not shown]"
    return data.decode("utf-8", "replace")


class ProjectInstructions(RunHooks):
    """The ``AGENTS.md`` files of a workspace, as a :class:`~kimik3.agents.RunHooks`.

    Args:
        root: the workspace root.
        max_bytes: cap per file in bytes.
        max_total_bytes: cap on all files of a run together.
        on_load: called with the workspace-relative path of each file as it reaches the model
            (the CLI lists them).

    Attributes:
        loaded: workspace-relative paths of the files given to the model so far, in order.
    """

    def __init__(self, root: str | os.PathLike[str], *, max_bytes: int = MAX_INSTRUCTIONS_BYTES,
                 max_total_bytes: int = MAX_TOTAL_INSTRUCTIONS_BYTES,
                 on_load: Callable[[str], None] | None = None) -> None:
        self.root = Path(root).resolve()
        self.ws = Workspace(self.root)
        self.max_bytes = max_bytes
        self.max_total_bytes = max_total_bytes
        self.given_bytes = 0
        self.on_load = on_load
        self.loaded: list[str] = []
        self._seen_dirs: set[str] = {"."}

    def reset(self) -> None:
        """Forget what was given: a new agent's prompt counts its files again (``loaded``, the
        byte budget)."""
        self.loaded.clear()
        self.given_bytes = 0

    def system_prompt(self, base: str | None) -> str | None:
        """``base`` followed by the root ``AGENTS.md`` (when there is one) under a heading."""
        text = _read_capped(self.ws, AGENTS_FILE, self.max_bytes)
        if text is None or not text.strip():
            return base
        self._loaded(AGENTS_FILE)
        self.given_bytes += len(text.encode())
        block = f"Project instructions ({AGENTS_FILE} at the workspace root):\n\n{text.strip()}"
        return f"{base}\n\n{block}" if base else block

    def _loaded(self, rel: str) -> None:
        self.loaded.append(rel)
        if self.on_load is not None:
            self.on_load(rel)

    def _directory_of(self, path: str) -> PurePosixPath | None:
        """The workspace-relative directory a path argument touches (None outside the root)."""
        p = Path(path)
        absolute = os.path.normpath(p if p.is_absolute() else self.root / p)
        try:
            rel = PurePosixPath(Path(absolute).relative_to(self.root).as_posix())
        except ValueError:
            return None
        if (self.root / rel).is_dir():
            return rel
        return rel.parent

    def pending(self, path: str) -> list[tuple[str, str]]:
        """(relative path, text) of the not-yet-given ``AGENTS.md`` files between the root and the
        directory ``path`` touches, outermost first; marks them given."""
        directory = self._directory_of(path)
        if directory is None:
            return []
        found = []
        parts = directory.parts if str(directory) != "." else ()
        for depth in range(1, len(parts) + 1):
            rel_dir = "/".join(parts[:depth])
            if rel_dir in self._seen_dirs:
                continue
            self._seen_dirs.add(rel_dir)
            text = _read_capped(self.ws, f"{rel_dir}/{AGENTS_FILE}", self.max_bytes)
            if text is not None and text.strip():
                rel = f"{rel_dir}/{AGENTS_FILE}"
                size = len(text.encode())
                if self.given_bytes + size > self.max_total_bytes:
                    found.append((rel, f"[not included: the run's {self.max_total_bytes} bytes of project "
                                       f"instructions are used up; read {rel} with read_file if you need it]"))
                    continue
                self.given_bytes += size
                self._loaded(rel)
                found.append((rel, text.strip()))
        return found

    async def tool_result(self, call: ToolCall, result: ToolResult) -> ToolResult:
        try:
            arguments = call.function.parsed_arguments()
        except ValueError:
            return result
        paths = [v for k, v in arguments.items() if k in _PATH_ARGS and isinstance(v, str)]
        if call.function.name == "apply_patch" and isinstance(arguments.get("patch"), str):
            from ._patch import patch_paths

            paths += patch_paths(arguments["patch"])
        notes = [f"[Project instructions from {rel}; they apply to files under its directory]\n{text}"
                 for path in paths for rel, text in self.pending(path)]
        if not notes:
            return result
        extra = "\n\n" + "\n\n".join(notes)
        if isinstance(result.content, str):
            return ToolResult(content=result.content + extra, is_error=result.is_error)
        return ToolResult(content=[*result.content, TextPart(text=extra)], is_error=result.is_error)
