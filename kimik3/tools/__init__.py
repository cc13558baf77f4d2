"""Typed tools for K3 agents: ``@tool`` turns a typed Python function into a :class:`Tool`.

The coding toolkit (bash, read_file, write_file, edit_file, grep, glob bound to a workspace) is
the submodule :mod:`kimik3.tools.coding` (import it explicitly; it is not imported here). Visual UI
automation (screenshots in, mouse and keyboard actions out) is :mod:`kimik3.tools.ui`, likewise.
"""

from ._tool import Tool, ToolContext, ToolResult, tool
from ._truncate import truncate_middle

__all__ = [
    "Tool",
    "ToolContext",
    "ToolResult",
    "tool",
    "truncate_middle",
]
