"""A source of tools that has to be opened first (an MCP server): what ``Agent(tools=[...])``
accepts besides :class:`~kimik3.tools.Tool` s and functions.

The agent enters a toolset for the length of one run, and asks :meth:`Toolset.get_tools`
before every model call, so a toolset whose tool list changes mid-run is seen at the next turn
(the new tools are declared to K3 dynamically, see :class:`kimik3.Agent`).

Entering is counted: the first ``async with`` opens a toolset that is not open yet, later ones
(runs at the same time, a caller's own block) share it, and the last to leave closes it only when
the first one opened it (one opened with :meth:`Toolset.open` stays open).
"""

from __future__ import annotations

from types import TracebackType

import anyio
from typing_extensions import Self

from ._tool import Tool

__all__ = ["Toolset"]


class Toolset:
    """Base class of tool sources that must be opened: ``async with toolset: await
    toolset.get_tools()``.

    Subclasses implement :meth:`open`, :meth:`close` and :meth:`get_tools` and set
    :attr:`is_open`.

    Attributes:
        name: a label for errors, logs and traces.
        is_open: whether :meth:`open` succeeded and :meth:`close` has not run yet.
    """

    name: str = "toolset"
    is_open: bool = False
    _users = 0  # the async with blocks it is entered in now
    _owned = False  # whether the first of them opened it (then the last one closes it)
    _entering: anyio.Lock | None = None

    async def open(self) -> None:
        """Connect (start a process, open a session)."""
        raise NotImplementedError

    async def close(self) -> None:
        """Disconnect; safe to call twice."""
        raise NotImplementedError

    async def get_tools(self) -> list[Tool]:
        """The tools as of now (refetched when the source said its list changed)."""
        raise NotImplementedError

    def _entry_lock(self) -> anyio.Lock:
        if self._entering is None:
            self._entering = anyio.Lock()
        return self._entering

    async def __aenter__(self) -> Self:
        """Open it unless it is open already; count this block as one of its users."""
        async with self._entry_lock():
            if self._users == 0:
                self._owned = not self.is_open
                if self._owned:
                    await self.open()
            self._users += 1
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Close it when this is its last user and the first one opened it."""
        with anyio.CancelScope(shield=True):
            async with self._entry_lock():
                self._users -= 1
                if self._users == 0 and self._owned:
                    self._owned = False
                    await self.close()
