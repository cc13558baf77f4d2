"""Typed tools for K3 agents: :class:`Tool` is the interface every tool implements; ``@tool``
turns a typed Python function into one (a :class:`FunctionTool`).

The coding toolkit (bash, read_file, write_file, edit_file, grep, glob bound to a workspace) is
the submodule :mod:`kimik3.tools.coding` (import it explicitly; it is not imported here). Visual UI
automation (screenshots in, mouse and keyboard actions out) is :mod:`kimik3.tools.ui`, likewise.
The tools of MCP servers come from :mod:`kimik3.tools.mcp` (the ``mcp`` extra).
"""

from ._failures import FailureKind, FailureText, ToolFailure, default_failure_text
from ._input import InputReplay as InputReplay
from ._input import InputWait as InputWait
from ._limits import commit_point as commit_point
from ._limits import stray_cancellation as stray_cancellation
from ._limits import unwrap_group as unwrap_group
from ._search import tool_search
from ._todo import PLAN_TOOL_NAME, Plan, PlanStep, find_plan, plan_tool
from ._tool import PATCH_TEXT, PATH_OR_COMMAND, FunctionTool, Tool, ToolContext, ToolResult, tool
from ._toolset import Toolset
from ._truncate import truncate_middle

# Imported `as` themselves and left out of __all__ (the user API): names kimik3's other packages use of
# this package's private modules, so that none imports another package's `_module` (issue 42,
# tests/test_architecture.py).
__all__ = [
    "PATCH_TEXT",
    "PATH_OR_COMMAND",
    "PLAN_TOOL_NAME",
    "FailureKind",
    "FailureText",
    "FunctionTool",
    "Plan",
    "PlanStep",
    "Tool",
    "ToolContext",
    "ToolFailure",
    "ToolResult",
    "Toolset",
    "default_failure_text",
    "find_plan",
    "plan_tool",
    "tool",
    "tool_search",
    "truncate_middle",
]
