"""A source of tools that has to be opened first (an MCP server): what ``Agent(tools=[...])``
accepts besides :class:`~kimik3.tools.Tool` s and functions.

The agent enters a toolset that is not open yet for the length of one run (and leaves it open
when the caller opened it), and asks :meth:`Toolset.get_tools` before every model call, so a
toolset whose tool list changes mid-run is seen at the next turn (the new tools are declared to
K3 dynamically, see :class:`kimik3.Agent`).
"""

from __future__ import annotations

from types import TracebackType

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

    async def open(self) -> None:
        """Connect (start a process, open a session)."""
        raise NotImplementedError

    async def close(self) -> None:
        """Disconnect; safe to call twice."""
        raise NotImplementedError

    async def get_tools(self) -> list[Tool]:
        """The tools as of now (refetched when the source said its list changed)."""
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
