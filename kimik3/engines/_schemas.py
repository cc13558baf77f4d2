"""Tool parameter schemas rewritten for Moonshot's hosted API, which validates them against its
own reading of JSON Schema ("Moonshot flavored json schema") and refuses the whole request over
one tool (the ``moonshot`` profile, ``docs/endpoints.md``). Standard JSON Schema allows all of
what it refuses; each rule below is one of its refusals, as public reports quote them:

=======================================================  ===================================================
the API's words (``... details: <At path '...': ...>``)  the rewrite
=======================================================  ===================================================
``type is not defined`` (kimi-cli #2621, pi #5822)       a schema without ``type`` (and no ``$ref`` /
                                                         ``anyOf`` / ``oneOf`` / ``allOf`` / ``not`` /
                                                         ``if``) gets one, as kimi-cli does: from its
                                                         ``enum`` / ``const`` values, else from its
                                                         keywords (``properties`` -> object, ``items`` ->
                                                         array, ``minimum`` -> number, ...), else string
``references must start with #/$defs/`` (command-code    ``#/definitions/X`` becomes ``#/$defs/X``; any
#594, opencode-go-copilot #67)                           other pointer into the schema is copied into
                                                         ``$defs``; a reference outside it is refused
``when using $ref, type should be defined in the         ``type`` beside a ``$ref`` is dropped, and so is
referenced schema instead of the parent schema``,        any keyword beside it that the referenced
``conflicting keywords found after $ref expansion:       schema has too
description`` (kimi-cli #2061)
``when using anyOf, type should be defined in anyOf      the parent's ``type`` moves into branches that
items instead of the parent schema`` (jiuwenswarm        have none; at the top level (the parameters
#3942, opencode #37496)                                  object) object branches are merged into one
                                                         object: the union of their properties, the
                                                         properties all of them require; any other
                                                         top-level ``anyOf`` is refused, naming the tool
=======================================================  ===================================================

A merged top-level ``anyOf`` is looser on the wire than the tool's schema; kimik3 still validates
every call's arguments against the tool's own schema, so the model is told when it picked no
branch. Nothing is rewritten for any other profile.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

from .._exceptions import InvalidRequestError

__all__ = ["moonshot_parameters"]

_COMBINATORS = ("$ref", "anyOf", "oneOf", "allOf", "not", "if", "then", "else")
_OBJECT_WORDS = ("properties", "additionalProperties", "patternProperties", "propertyNames", "required",
                 "minProperties", "maxProperties")  # fmt: skip
_ARRAY_WORDS = ("items", "prefixItems", "minItems", "maxItems", "uniqueItems", "contains")
_STRING_WORDS = ("minLength", "maxLength", "pattern", "format")
_NUMBER_WORDS = ("minimum", "maximum", "multipleOf", "exclusiveMinimum", "exclusiveMaximum")
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_ONES = ("items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames")


def moonshot_parameters(tool: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """``parameters`` (a tool's JSON Schema) as Moonshot's hosted API takes it (the module's
    table); the argument is not changed.

    Args:
        tool: the tool's name, for the error.
        parameters: the schema.

    Raises:
        InvalidRequestError: a schema that cannot be rewritten (a reference outside the schema
            or to nothing, a top-level ``anyOf`` with a branch that is not an object), naming
            the tool and the path.
    """
    root = copy.deepcopy(parameters)
    _references(tool, root)
    _merge_top_level_any_of(tool, root)
    for node in _nodes(root):
        _fix_ref_siblings(root, node)
        _move_type_into_any_of(node)
        if "type" not in node and not any(k in node for k in _COMBINATORS):
            node["type"] = "object" if node is root else _inferred_type(node)
    return root


def _refuse(tool: str, path: str, why: str) -> InvalidRequestError:
    return InvalidRequestError(
        f"tool {tool!r}: its parameters cannot be sent to Moonshot's API (at {path!r}: {why}); "
        "change the schema, or use another endpoint profile"
    )


def _nodes(node: Any) -> Iterator[dict[str, Any]]:
    """Every schema object in the tree (under schema keywords), parents first."""
    if not isinstance(node, dict):
        return
    yield node
    for key in _SCHEMA_MAPS:
        children = node.get(key)
        if isinstance(children, dict):
            for child in children.values():
                yield from _nodes(child)
    for key in (*_SCHEMA_LISTS, *_SCHEMA_ONES):
        children = node.get(key)
        for child in children if isinstance(children, list) else [children]:
            yield from _nodes(child)


# -- $ref ------------------------------------------------------------------------------------


def _dicts(node: Any, path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every JSON object in the tree (schema or not: a ``$ref`` under an unknown keyword counts
    too), with its path."""
    if isinstance(node, dict):
        yield path, node
        for key, child in node.items():
            yield from _dicts(child, key if path == "root" else f"{path}.{key}")
    elif isinstance(node, list):
        for i, child in enumerate(node):
            yield from _dicts(child, f"{path}[{i}]")


def _pointer(root: dict[str, Any], ref: str) -> Any:
    """The node a local JSON pointer (``#/a/b``, RFC 6901 escapes) names; KeyError when none."""
    node: Any = root
    for raw in ref[1:].split("/")[1:] if ref != "#" else ():
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise KeyError(ref)
    return node


def _references(tool: str, root: dict[str, Any]) -> None:
    """Every ``$ref`` made a ``#/$defs/NAME``: ``definitions`` joined into ``$defs``, other
    local pointers copied in; nothing else changes."""
    defs = root.get("$defs")
    if not isinstance(defs, dict):
        defs = {}
    root["$defs"] = defs
    old = root.pop("definitions", None)
    if isinstance(old, dict):
        for name, schema in old.items():
            if name in defs and defs[name] != schema:
                raise _refuse(tool, f"definitions.{name}", "a definition of the same name is in $defs")
            defs[name] = schema
    copied: dict[str, str] = {}  # original pointer -> its $defs name
    todo = True
    while todo:  # copied definitions may hold references of their own
        todo = False
        for path, node in list(_dicts(root, "root")):
            ref = node.get("$ref")
            if not isinstance(ref, str) or ref.startswith("#/$defs/"):
                continue
            if ref.startswith("#/definitions/"):
                node["$ref"] = "#/$defs/" + ref[len("#/definitions/") :]
                continue
            if not ref.startswith("#"):
                raise _refuse(tool, f"{path}.$ref", f"a reference outside the schema ({ref[:80]!r})")
            if ref not in copied:
                try:
                    target = _pointer(root, ref)
                except KeyError:
                    raise _refuse(tool, f"{path}.$ref", f"a reference to nothing ({ref[:80]!r})") from None
                if not isinstance(target, dict):
                    raise _refuse(tool, f"{path}.$ref", f"a reference to a non-schema ({ref[:80]!r})")
                base = ref.rstrip("/").rsplit("/", 1)[-1].replace("~1", "_").replace("~0", "_") or "root"
                name, n = base, 1
                while name in defs:
                    n += 1
                    name = f"{base}_{n}"
                defs[name] = {k: copy.deepcopy(v) for k, v in target.items() if k not in ("$defs", "definitions")}
                copied[ref] = name
                todo = True
            node["$ref"] = f"#/$defs/{copied[ref]}"
    if not defs:
        del root["$defs"]


def _fix_ref_siblings(root: dict[str, Any], node: dict[str, Any]) -> None:
    ref = node.get("$ref")
    if not isinstance(ref, str) or len(node) == 1:
        return
    try:
        target = _pointer(root, ref)
    except KeyError:
        target = {}
    for key in [k for k in node if k != "$ref"]:
        if key == "type" or (isinstance(target, dict) and key in target):
            del node[key]


# -- anyOf -----------------------------------------------------------------------------------


def _move_type_into_any_of(node: dict[str, Any]) -> None:
    branches = node.get("anyOf")
    if "type" not in node or not isinstance(branches, list):
        return
    kind = node.pop("type")
    for branch in branches:
        if isinstance(branch, dict) and "type" not in branch and not any(k in branch for k in _COMBINATORS):
            branch["type"] = kind


def _merge_top_level_any_of(tool: str, root: dict[str, Any]) -> None:
    """A top-level ``anyOf`` of object schemas becomes one object (the module's table)."""
    branches = root.get("anyOf")
    if not isinstance(branches, list):
        return
    resolved = []
    for i, branch in enumerate(branches):
        if isinstance(branch, dict) and isinstance(branch.get("$ref"), str):
            try:
                branch = _pointer(root, branch["$ref"])
            except KeyError:
                branch = None
        is_object = isinstance(branch, dict) and (
            branch.get("type") == "object" or ("type" not in branch and "properties" in branch)
        ) and not any(k in branch for k in _COMBINATORS)
        if not is_object:
            raise _refuse(tool, f"anyOf[{i}]", "a top-level anyOf whose branches are not all objects "
                          "(the API wants the parameters to be one object)")
        resolved.append(branch)
    properties: dict[str, Any] = dict(root.get("properties") or {})
    for branch in resolved:
        for name, schema in (branch.get("properties") or {}).items():
            if name not in properties:
                properties[name] = copy.deepcopy(schema)
            elif properties[name] != schema:
                alternatives = properties[name].get("anyOf") if set(properties[name]) == {"anyOf"} else None
                alternatives = alternatives or [properties[name]]
                if schema not in alternatives:
                    properties[name] = {"anyOf": [*alternatives, copy.deepcopy(schema)]}
    required = [set(b.get("required") or ()) for b in resolved]
    common = set.intersection(*required) if required else set()
    own = list(root.get("required") or [])
    del root["anyOf"]
    root["type"] = "object"
    root["properties"] = properties
    merged = own + sorted(common - set(own))
    if merged:
        root["required"] = merged
    else:
        root.pop("required", None)


# -- types -----------------------------------------------------------------------------------


def _inferred_type(node: dict[str, Any]) -> str:
    """A schema's type from its values (``enum``, ``const``), else its keywords, else string
    (kimi-cli's rule, ``kosong/utils/jsonschema.py``)."""
    values = node.get("enum") if isinstance(node.get("enum"), list) and node.get("enum") else None
    if values is None and "const" in node:
        values = [node["const"]]
    if values is not None:
        kinds = {_json_type(v) for v in values}
        if len(kinds) == 1:
            return kinds.pop()
        return "number" if kinds == {"integer", "number"} else "string"
    for words, kind in ((_OBJECT_WORDS, "object"), (_ARRAY_WORDS, "array"), (_STRING_WORDS, "string"),
                        (_NUMBER_WORDS, "number")):  # fmt: skip
        if any(w in node for w in words):
            return kind
    return "string"


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    return "string"
