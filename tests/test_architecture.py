"""The layering rules of docs/architecture.md, checked on kimik3's import graph (read with ``ast``,
so an import inside a function or under ``TYPE_CHECKING`` counts like any other), so they cannot
break silently again: no circle, nothing imports a room on its own or a higher floor, only the
CLI knows about terminals, and the seams of issue 29 stay drawn."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "kimik3"
MAP = ROOT / "docs" / "architecture.md"


@cache
def modules() -> dict[str, tuple[Path, ast.Module]]:
    """Every module of kimik3 by dotted name (a package by its own name), parsed."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = (path, ast.parse(path.read_text(encoding="utf-8"), str(path)))
    return out


def imported(name: str, path: Path, tree: ast.Module) -> Iterator[str]:
    """The dotted names ``tree`` imports, anywhere in it (module level, functions, TYPE_CHECKING)."""
    base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                module = ".".join(base[: len(base) - node.level + 1] + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:  # `from . import x` imports the module x when there is one
                full = f"{module}.{alias.name}"
                yield full if full in modules() else module


@cache
def graph() -> dict[str, frozenset[str]]:
    """Module -> the kimik3 modules it imports. Importing ``a.b.c`` imports the packages ``a.b``
    and ``a`` first, so those count too, except the importer's own enclosing packages."""
    edges: dict[str, frozenset[str]] = {}
    for name, (path, tree) in modules().items():
        targets: set[str] = set()
        for target in imported(name, path, tree):
            parts = target.split(".")
            for i in range(1, len(parts) + 1):
                prefix = ".".join(parts[:i])
                if prefix in modules() and prefix != name and not name.startswith(prefix + "."):
                    targets.add(prefix)
        edges[name] = frozenset(targets)
    return edges


def circles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph():
        if start in index:
            continue
        work = [(start, iter(sorted(graph()[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph()[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def room(module: str) -> str:
    """``kimik3.engines._base`` -> ``engines``; the package itself -> ``kimik3``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


@cache
def floors() -> dict[str, int]:
    """The floors table of docs/architecture.md: room -> floor."""
    text = MAP.read_text(encoding="utf-8")
    block = re.search(r"## Floors.*?```\nfloor  rooms\n(.*?)```", text, re.S)
    assert block is not None, "docs/architecture.md lost its floors table"
    out: dict[str, int] = {}
    for line in block.group(1).splitlines():
        floor, *rooms = line.split()
        for name in rooms:
            assert name not in out, f"{name} is on two floors"
            out[name] = int(floor)
    return out


# -- the rules ---------------------------------------------------------------------------------


def test_the_graph_is_read() -> None:
    # the reader sees what the rules need: imports inside functions, under TYPE_CHECKING, relative
    code = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ._agent import Agent\n"
            "def f():\n    from .. import _tracing\n    from ..formats.k3 import parse\n")
    seen = set(imported("kimik3.agents._x", PACKAGE / "agents" / "_x.py", ast.parse(code)))
    assert seen == {"typing", "kimik3.agents._agent", "kimik3._tracing", "kimik3.formats.k3"}
    assert "kimik3.tools.ui._browser" in graph()["kimik3.tools.ui._trajectory"]  # imported in a function
    assert {"kimik3.formats", "kimik3.formats.k3"} <= graph()["kimik3.engines._base"]  # and the packages
    assert "kimik3.agents" not in graph()["kimik3.agents._agent"]  # its own package is already there
    assert len(modules()) > 90


def test_no_import_circles() -> None:
    assert circles() == []


def test_every_room_is_on_the_map() -> None:
    rooms = {room(m) for m in modules()}
    assert rooms - set(floors()) == set(), "place these in docs/architecture.md's floors table"
    assert set(floors()) - rooms == set(), "the floors table names rooms that do not exist"


def test_rooms_import_only_lower_floors() -> None:
    up = sorted(
        f"{source} -> {target} (floor {floors()[room(source)]} -> {floors()[room(target)]})"
        for source, targets in graph().items()
        for target in targets
        if room(source) != room(target) and floors()[room(target)] >= floors()[room(source)]
    )
    assert up == []


def test_types_import_nothing_of_formats_and_formats_nothing_of_engines_or_agents() -> None:
    for source, targets in graph().items():
        for target in targets:
            if room(source) == "types":
                assert room(target) in ("types", *(r for r, f in floors().items() if f <= 1)), (source, target)
            if room(source) in ("formats", "media"):
                assert room(target) not in ("engines", "agents", "harness", "tools"), (source, target)
            if room(source) == "engines":
                assert room(target) not in ("agents", "harness", "_client"), (source, target)


def test_only_the_cli_knows_about_terminals() -> None:
    users = sorted(
        name for name, (path, tree) in modules().items()
        if any(t.split(".")[0] in ("click", "rich") for t in imported(name, path, tree))
    )  # fmt: skip
    assert users and all(room(u) == "cli" for u in users), users


def test_the_coding_toolkit_is_used_through_its_internal_api() -> None:
    allowed = {"kimik3.tools.coding", "kimik3.tools.coding._api"}
    reaches = sorted(
        f"{source} -> {target}"
        for source, targets in graph().items() if not source.startswith("kimik3.tools.coding")
        for target in targets if target.startswith("kimik3.tools.coding") and target not in allowed
    )  # fmt: skip
    assert reaches == []


# -- the seams of issue 29 ---------------------------------------------------------------------

SAMPLING = {"reasoning_effort", "temperature", "top_p", "max_tokens", "seed"}


def test_each_sampling_field_is_declared_once() -> None:
    declared: dict[str, list[str]] = {}
    for name, (_, tree) in modules().items():
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            for stmt in cls.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id in SAMPLING:
                    declared.setdefault(stmt.target.id, []).append(f"{name}.{cls.name}")
    assert declared == {f: ["kimik3.types._settings.ModelSettings"] for f in SAMPLING}


def test_no_tool_copies_another_or_extends_the_function_tool() -> None:
    for name, (_, tree) in modules().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "__dict__":
                raise AssertionError(f"{name} reaches into an object's __dict__ (line {node.lineno})")
            if isinstance(node, ast.ClassDef):
                bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
                assert "FunctionTool" not in bases, f"{name}.{node.name} subclasses FunctionTool: implement Tool"


def _docstrings(tree: ast.Module) -> set[int]:
    nodes: list[ast.AST] = [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.ClassDef, ast.FunctionDef,
                                                                                  ast.AsyncFunctionDef)))]
    return {id(body[0].value) for n in nodes if (body := getattr(n, "body", None)) and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)}


def test_the_failure_texts_the_model_reads_are_in_one_module() -> None:
    found = []
    for name, (_, tree) in modules().items():
        if name == "kimik3.tools._failures":
            continue
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            first = node.values[0] if isinstance(node, ast.JoinedStr) and node.values else node
            if (isinstance(first, ast.Constant) and isinstance(first.value, str) and id(node) not in docs
                    and first.value.startswith("Error: ")):
                found.append(f"{name}:{node.lineno}")  # type: ignore[attr-defined]
    assert found == []
