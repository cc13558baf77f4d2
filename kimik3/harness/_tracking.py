"""Read-before-edit: ``write_file``, ``edit_file``, ``multi_edit`` and ``apply_patch`` refuse to
change an existing file the model has not read in this run, or that changed on disk since it last
read it (another process, a formatter), with an error telling it to read the file again
(kimi-code's rule). Creating a new file needs no read. A file the model wrote itself counts as read
(it knows the content). "Changed" compares the file's bytes (SHA-256), not only its time stamps.

The rule is applied by wrapping the tools (:meth:`ReadTracker.wrap`): their names, descriptions
and schemas stay exactly the same.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .._exceptions import ToolError
from ..agents import RunHooks, SessionWriter
from ..tools import Tool, ToolContext, ToolResult, failures
from ..tools.coding.api import Workspace
from ..tools.failures import default_failure_text
from ..types import ToolSpec

__all__ = ["ReadTracker"]

_READS = frozenset({"read_file"})
_WRITES = frozenset({"write_file", "edit_file", "multi_edit"})


class _Guarded(Tool):
    """A tool that runs ``check`` before and ``done`` after the wrapped tool, by composition: its
    name, description, schema, time limit and validation are the wrapped tool's."""

    def __init__(self, inner: Tool, check: Callable[[dict[str, Any]], str | None],
                 done: Callable[[dict[str, Any]], None]) -> None:
        self.inner, self._check, self._done = inner, check, done
        self.name, self.description, self.parameters = inner.name, inner.description, inner.parameters
        self.timeout = inner.timeout

    def __repr__(self) -> str:
        return f"_Guarded({self.inner!r})"

    @property
    def spec(self) -> ToolSpec:
        return self.inner.spec

    def validate(self, arguments: Mapping[str, Any] | str | None) -> dict[str, Any]:
        return self.inner.validate(arguments)

    async def run(self, arguments: Mapping[str, Any] | str | None, context: ToolContext | None = None, *,
                  timeout: float | None = None) -> ToolResult:
        try:
            parsed = self.inner.validate(arguments)
        except Exception:  # the wrapped tool validates the same way: its run reports the problem
            return await self.inner.run(arguments, context, timeout=timeout)
        refusal = self._check(parsed)
        if refusal is not None:
            text = context.failure_text if context is not None else default_failure_text
            return ToolResult.from_failure(failures.refused(refusal), text)
        result = await self.inner.run(arguments, context, timeout=timeout)
        if not result.is_error:
            self._done(parsed)
        return result


class ReadTracker(RunHooks):
    """What the model has read in this run (forgotten when a run starts; a hook): workspace-relative
    path -> SHA-256 of the bytes when it read them. Files are opened through the coding tools'
    confined walk (never blocking, regular files only), so a FIFO or a path outside the workspace
    is left to the tool to report.

    Args:
        root: the workspace root (relative paths resolve against it).
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.ws = Workspace(Path(root).resolve())
        self.seen: dict[str, str] = {}

    async def run_start(self, session: SessionWriter | None) -> None:
        self.seen.clear()

    def _digest(self, path: str) -> tuple[str, str] | None:
        """(relative path, SHA-256) of the regular file ``path``; None when it cannot be opened."""
        try:
            fd, rel, _ = self.ws.open_file(path)
        except ToolError:
            return None
        h = hashlib.sha256()
        with os.fdopen(fd, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        return rel, h.hexdigest()

    def remember(self, path: str) -> None:
        """The model now knows ``path``'s content."""
        found = self._digest(path)
        if found is not None:
            self.seen[found[0]] = found[1]

    def refusal(self, path: str) -> str | None:
        """Why ``path`` may not be changed now (None: it may)."""
        found = self._digest(path)
        if found is None:
            return None  # a new file (or not a regular file: the tool reports that)
        rel, digest = found
        if rel not in self.seen:
            return (f"{path} has not been read in this run; read it with read_file first, then make "
                    "the change (nothing was written)")
        if digest != self.seen[rel]:
            return (f"{path} changed on disk since you last read it (another process or a formatter); "
                    "read it again with read_file, then make the change (nothing was written)")
        return None

    def wrap(self, tools: list[Tool]) -> list[Tool]:
        """The same tools, with reads recorded and writes checked."""
        from ._patch import patch_paths

        def paths(args: dict[str, Any]) -> list[str]:
            if isinstance(args.get("patch"), str):
                return patch_paths(args["patch"])
            return [args["path"]] if isinstance(args.get("path"), str) else []

        def check(args: dict[str, Any]) -> str | None:
            return next((r for p in paths(args) if (r := self.refusal(p)) is not None), None)

        def done(args: dict[str, Any]) -> None:
            for p in paths(args):
                self.remember(p)

        out: list[Tool] = []
        for t in tools:
            if t.name in _READS:
                out.append(_Guarded(t, lambda args: None, done))
            elif t.name in _WRITES or t.name == "apply_patch":
                out.append(_Guarded(t, check, done))
            else:
                out.append(t)
        return out
