"""An agent's tools (its own, added ones, and its toolsets') and K3's dynamic tool declarations:
which tools a conversation has not declared yet."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from typing import Any

from .._exceptions import ToolDefinitionError, UserError
from ..tools import Tool, Toolset
from ..types import Message, SystemMessage, ToolSpec, shared_prefix
from ._hooks import RunHooks

__all__ = ["Declarations", "Toolbox", "dynamic_names", "restore_declared", "undeclared"]

log = logging.getLogger("kimik3.agents")


class Toolbox:
    """The tools of one agent.

    Attributes:
        tools: its own tools by name (given, then added with :meth:`add`).
        toolsets: its toolsets (MCP servers), in order.

    Raises:
        UserError: two tools with one name; a toolset given twice.
    """

    def __init__(self, tools: Sequence[Tool | Toolset | Callable[..., Any]]) -> None:
        self.tools: dict[str, Tool] = {}
        self.toolsets: list[Toolset] = []
        self._last_good: dict[int, list[Tool]] = {}  # id(toolset) -> its last list without a clash
        self._refused: dict[int, list[int]] = {}  # id(toolset) -> the ids of the tools of its refused list
        for t in tools:
            if isinstance(t, Toolset):
                if t in self.toolsets:
                    raise UserError(f"the toolset {t.name!r} is given twice")
                self.toolsets.append(t)
                continue
            t = t if isinstance(t, Tool) else Tool.from_function(t)
            if t.name in self.tools:
                raise UserError(f"two tools are named {t.name!r}")
            self.tools[t.name] = t

    def add(self, *tools: Tool | Callable[..., Any]) -> None:
        """Add tools (the same tool object again: nothing).

        Raises:
            UserError: another tool already has the name.
        """
        for t in tools:
            t = t if isinstance(t, Tool) else Tool.from_function(t)
            known = self.tools.get(t.name)
            if known is not None and known is not t:
                raise UserError(f"two tools are named {t.name!r}")
            self.tools[t.name] = t

    def hooks(self, given: Sequence[RunHooks]) -> list[RunHooks]:
        """The toolsets that are run hooks too (:class:`kimik3.harness.Skills`) and not in ``given``."""
        return [t for t in self.toolsets if isinstance(t, RunHooks) and not any(t is h for h in given)]

    async def open(self, stack: AsyncExitStack) -> None:
        """Enter every toolset for the length of ``stack`` (one not open yet is opened, and
        closed by its last user: see :class:`~kimik3.tools.Toolset`)."""
        for toolset in self.toolsets:
            await stack.enter_async_context(toolset)

    async def current(self) -> tuple[dict[str, Tool], list[Tool]]:
        """The tools the model may call now: the own ones plus every toolset's current tools.

        A toolset's changed list in which a tool has the name of another tool is not used: its
        last list without a clash stays, with a warning.

        Returns:
            ``({name: tool}, the toolsets' tools in order)``.

        Raises:
            ToolDefinitionError: a toolset's tool has the name of another tool (the agent's own,
                or another toolset's: both named), and no earlier list of that toolset is free of
                the clash (issue 40, A14: never a silent merge, nor a guess).
        """
        table = dict(self.tools)
        owners = dict.fromkeys(self.tools, "one of the agent's own tools")
        from_toolsets: list[Tool] = []
        for toolset in self.toolsets:
            tools = await toolset.get_tools()
            clash = _clash(tools, table)
            last = self._last_good.get(id(toolset))
            if clash is not None and last is not None and _clash(last, table) is None:
                if self._refused.get(id(toolset)) != [id(t) for t in tools]:  # once per list, not every turn
                    self._refused[id(toolset)] = [id(t) for t in tools]
                    log.warning("kimik3: the new tool list of %r is not used: its tool %r clashes with another tool "
                                "of that name; its last list stays", toolset.name, clash)  # fmt: skip
                tools, clash = last, None
            if clash is not None:
                other = owners.get(clash, f"another tool of {toolset.name!r}")
                raise ToolDefinitionError(
                    f"tool {clash!r} of {toolset.name!r} has the same name as {other}; give the toolset a "
                    "tool_prefix (MCPServerStdio(..., tool_prefix='x') names it 'x_<name>'; kimik3 run: "
                    "--mcp 'x=CMD ARGS')")
            self._last_good[id(toolset)] = tools
            for t in tools:
                table[t.name] = t
                owners[t.name] = f"a tool of {toolset.name!r}"
                from_toolsets.append(t)
        return table, from_toolsets


def _clash(tools: Sequence[Tool], table: Mapping[str, Tool]) -> str | None:
    """The first name in ``tools`` that ``table`` or an earlier tool of ``tools`` already has."""
    seen = set(table)
    for t in tools:
        if t.name in seen:
            return t.name
        seen.add(t.name)
    return None


def _declarations(messages: Sequence[Message]) -> list[ToolSpec]:
    """The specs of the dynamic declarations in ``messages``, in order."""
    return [s for m in messages if isinstance(m, SystemMessage) and m.tools and not m.content for s in m.tools]


def dynamic_names(messages: Sequence[Message]) -> set[str]:
    """The names of the tools a dynamic declaration in ``messages`` declares: on resume these
    stay declared where they are and are left out of the prompt's head (a K3 endpoint takes each
    name once per request, :func:`~kimik3.formats.k3.check_request`), so the resumed prompt
    extends the earlier one."""
    return {s.function.name for s in _declarations(messages)}


class Declarations:
    """The dynamic tool declarations (``SystemMessage(content="", tools=[...])``) of a growing
    conversation, each message looked at once (reused while the leading messages stay:
    :func:`~kimik3.types._prefix.shared_prefix`); a run keeps one."""

    def __init__(self) -> None:
        self._msgs: list[Message] = []
        self._specs: list[tuple[int, ToolSpec]] = []  # (message index, a spec it declares), in order

    def specs(self, messages: Sequence[Message]) -> list[ToolSpec]:
        """Every spec the dynamic declarations in ``messages`` declare, in order."""
        msgs = self._msgs
        n = shared_prefix(msgs, messages)
        if n < len(msgs):
            del msgs[n:]
            self._specs = [(i, s) for i, s in self._specs if i < n]
        for i in range(n, len(messages)):
            m = messages[i]
            if isinstance(m, SystemMessage) and m.tools and not m.content:
                self._specs.extend((i, s) for s in m.tools)
            msgs.append(m)
        return [s for _, s in self._specs]


def undeclared(table: Mapping[str, Tool], head: Sequence[ToolSpec], messages: Sequence[Message],
               declarations: Declarations | None = None) -> list[ToolSpec]:
    """The specs of the tools in ``table`` that neither the prompt's head nor a dynamic
    declaration in ``messages`` (``SystemMessage(content="", tools=[...])``) declares
    (``declarations``: the conversation's :class:`Declarations`, so only new messages are read).

    A tool declared before under its name but changed since is not declared again: a K3
    endpoint takes each tool name once per request (the Vendor Verifier's contract,
    :func:`~kimik3.formats.k3.check_request`), so the model keeps its first declaration; a
    warning says so (give a changed tool a new name to declare it anew)."""
    declared = {s.function.name: s for s in head}
    for s in (declarations or Declarations()).specs(messages):
        declared.setdefault(s.function.name, s)
    new: list[ToolSpec] = []
    for spec in (t.spec for t in table.values()):
        first = declared.get(spec.function.name)
        if first is None:
            new.append(spec)
        elif first is not spec and first != spec:
            log.warning("kimik3: tool %r changed after it was declared; a K3 endpoint takes a name once per request, "
                        "so the model keeps its first declaration (give the changed tool a new name)",
                        spec.function.name)
    return new


def restore_declared(toolbox: Toolbox, table: Mapping[str, Tool], messages: Sequence[Message]) -> list[str]:
    """On resume: the tools a dynamic declaration in ``messages`` names but ``table`` lacks (an
    earlier run loaded them). Those a ``tool_search`` among ``table``'s tools knows are added to
    ``toolbox`` again; the rest are returned (in declaration order), for a warning and a clear
    error when the model calls one."""
    missing = [n for n in dict.fromkeys(s.function.name for s in _declarations(messages)) if n not in table]
    catalogs = [c for t in table.values() if isinstance(c := getattr(t, "catalog", None), dict)]
    gone: list[str] = []
    for name in missing:
        found = next((c[name] for c in catalogs if isinstance(c.get(name), Tool)), None)
        if found is None:
            gone.append(name)
        else:
            toolbox.add(found)
    return gone
