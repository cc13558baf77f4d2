"""Tool search: a large toolset stays out of the prompt until the model asks for a tool.

The model sees one tool, ``search_tools``, whose description is a compact index of the toolset
(one line per tool: its name and the first line of its description). Calling it with tool names
or keywords loads the matching tools: the agent declares their full schemas with K3's dynamic
tool declaration (``ToolContext.add_tools``, see :meth:`kimik3.Agent.add_tools`), and the model
calls them on its next turn. The prompt's head never changes, so the prefix cache holds.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from .._exceptions import ToolDefinitionError, ToolError, UserError
from ._tool import FunctionTool, Tool, ToolContext

__all__ = ["tool_search"]

_WORD = re.compile(r"[A-Za-z0-9]+")


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def tool_search(
    tools: Sequence[Tool | Callable[..., Any]], *, name: str = "search_tools", max_results: int = 5
) -> Tool:
    """The search tool over ``tools``.

    Matching: words of the query that are tool names load exactly those tools; otherwise every
    tool is scored by how many query words (case-insensitive, letters and digits) occur in its
    name and description, and the best ``max_results`` with a score above 0 are loaded.

    Args:
        tools: the toolset (:class:`Tool` s or typed functions).
        name: the search tool's name.
        max_results: most tools one keyword search loads.

    Returns:
        A :class:`Tool` (its ``catalog`` attribute: ``{name: Tool}``, which the agent reads to
        load the tools a resumed session had loaded) whose result names the loaded tools (``"loaded: a, b; call them
        directly"``) or says that nothing matched and lists every name.

    Raises:
        ToolDefinitionError: two tools of ``tools`` share a name, or an entry is not a tool nor a
            typed function (an MCP server, None, 5: the message names its type; an MCP server's
            tools can be listed with ``await server.get_tools()`` once it is open).
        UserError: ``max_results`` is not an integer of at least 1.
    """
    if isinstance(max_results, bool) or not isinstance(max_results, int) or max_results < 1:
        raise UserError(f"tool_search: max_results must be an integer >= 1, not {max_results!r}")
    if isinstance(tools, (str, bytes)) or not isinstance(tools, Sequence):
        raise UserError(f"tool_search: tools must be a list of tools, not {type(tools).__name__}")
    catalog: dict[str, Tool] = {}
    for t in tools:
        t = t if isinstance(t, Tool) else Tool.from_function(t)
        if t.name in catalog:
            raise ToolDefinitionError(f"two tools are named {t.name!r}")
        catalog[t.name] = t
    texts = {n: {w.lower() for w in _WORD.findall(f"{n} {n.replace('_', ' ')} {t.description}")}
             for n, t in catalog.items()}
    index = "\n".join(f"- {n}: {_first_line(t.description)}" if t.description else f"- {n}"
                      for n, t in catalog.items())

    async def search_tools(context: ToolContext, query: str) -> str:
        """Load tools.

        Args:
            query: tool names, or keywords of what you need.
        """
        if context.add_tools is None:
            raise ToolError(f"{name} loads tools into an agent run; there is none here")
        named = [catalog[w] for w in dict.fromkeys(re.split(r"[\s,]+", query.strip())) if w in catalog]
        if not named:
            words = {w.lower() for w in _WORD.findall(query)}
            scored = sorted(((len(words & texts[n]), i, n) for i, n in enumerate(catalog)), key=lambda x: (-x[0], x[1]))
            named = [catalog[n] for score, _, n in scored[:max_results] if score > 0]
        if not named:
            return f"no tool matches {query!r}; the tools are: {', '.join(catalog)}"
        context.add_tools(*named)
        return f"loaded: {', '.join(t.name for t in named)}; call them directly"

    description = (
        "Load tools before calling them. The tools below exist but their parameters are not "
        "declared yet: call this with their exact names (space- or comma-separated) or with "
        "keywords; the matching tools' full specs are then declared and you can call them.\n\n"
        f"Tools:\n{index}"
    )
    search = FunctionTool(search_tools, name=name, description=description)
    search.catalog = dict(catalog)  # type: ignore[attr-defined]  # read on resume (agents/_dynamic.py)
    return search
