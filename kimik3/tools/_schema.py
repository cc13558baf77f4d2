"""Docstrings and JSON schemas of function tools: what the model reads about a Python function.

Google-style ``Args:`` sections give the parameter descriptions; pydantic's schema is cleaned
(no ``title`` keywords, a stable key order); :func:`_schema_kinds` tells which JSON types a
parameter admits (for the argument checks in :meth:`kimik3.tools.FunctionTool.validate`).
:func:`function_signature` reads a whole function: its arguments model, JSON schema and
context parameter.

The module's API (for :mod:`kimik3.tools._tool`): :func:`function_signature`,
:class:`FunctionSignature`, :func:`parse_docstring`, :func:`boolean_for_number`,
:func:`format_input`, :func:`error_location`.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, get_args, get_origin, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from .._exceptions import ToolDefinitionError

if TYPE_CHECKING:  # jsonschema is imported by the first tool defined (start-up time)
    import jsonschema

__all__ = [
    "FunctionSignature",
    "boolean_for_number",
    "error_location",
    "format_input",
    "function_signature",
    "parse_docstring",
]

_ARGS_SECTIONS = frozenset({"args", "arguments", "parameters", "params", "keyword args", "keyword arguments"})
_DROPPED_SECTIONS = _ARGS_SECTIONS | {"raises"}
_SECTION_RE = re.compile(
    r"^(Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments|Returns?|Yields?|Raises|"
    r"Examples?|Notes?|Attributes|See Also|Warnings?|Todo|References)\s*:\s*$"
)
_PARAM_RE = re.compile(r"^\*{0,2}([A-Za-z_]\w*)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_MAX_INPUT_REPR = 100


# -- docstrings and schema -------------------------------------------------------------------


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """(description, {param: description}) of a Google-style docstring.

    The description is the docstring without its ``Args:`` and ``Raises:`` sections (a
    ``Returns:`` section stays: it tells the model what comes back). Argument descriptions may
    continue on more-indented lines; they are joined with single spaces.
    """
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    kept: list[str] = []
    params: dict[str, str] = {}
    section: str | None = None
    param_indent: int | None = None
    current: str | None = None
    for line in lines:
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        header = _SECTION_RE.match(line)
        if header and indent == 0:
            section = header.group(1).lower()
            param_indent = current = None
            if section not in _DROPPED_SECTIONS:
                kept.append(line)
            continue
        # Unindented text ends a section, except argument lines of a docstring that opens with
        # "Args:" (cleandoc leaves them unindented).
        if (
            section is not None
            and stripped
            and indent == 0
            and not (section in _ARGS_SECTIONS and param_indent in (None, 0) and _PARAM_RE.match(stripped))
        ):
            section = None
        if section in _ARGS_SECTIONS:
            if not stripped:
                continue
            m = _PARAM_RE.match(stripped)
            if m and (param_indent is None or indent <= param_indent):
                param_indent = indent
                current = m.group(1)
                params[current] = m.group(2).strip()
            elif current is not None:
                params[current] = f"{params[current]} {stripped}".strip()
            continue
        if section in _DROPPED_SECTIONS:
            continue
        kept.append(line)
    description = re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip()
    return description, params


def _clean_schema(node: Any) -> Any:
    """Drop pydantic's ``title`` keywords (not property *names*); in every schema object put
    ``type`` and ``description`` first and ``default`` last."""
    if isinstance(node, list):
        return [_clean_schema(v) for v in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key in ("type", "description"):
        if key in node:
            out[key] = node[key]
    for key, value in node.items():
        if key in out or key == "title":
            continue
        if key in ("properties", "$defs", "patternProperties") and isinstance(value, dict):
            out[key] = {name: _clean_schema(sub) for name, sub in value.items()}
        else:
            out[key] = _clean_schema(value)
    if "default" in out:
        out["default"] = out.pop("default")
    return out


def _top_level_order(schema: dict[str, Any]) -> dict[str, Any]:
    order = ["type", "description", "properties", "required", "additionalProperties"]
    out = {k: schema[k] for k in order if k in schema}
    out.update({k: v for k, v in schema.items() if k not in out})
    return out


def _has_description(annotation: Any) -> bool:
    if get_origin(annotation) is Annotated:
        return any(isinstance(m, FieldInfo) and m.description for m in get_args(annotation)[1:])
    return False


def format_input(value: Any) -> str:
    """``repr(value)``, cut to 100 characters (for error messages the model reads)."""
    text = repr(value)
    return text if len(text) <= _MAX_INPUT_REPR else text[: _MAX_INPUT_REPR - 3] + "..."


def error_location(loc: tuple[Any, ...] | Any) -> str:
    """``"edits.0.line"`` for a pydantic / jsonschema error path (``"<arguments>"`` when empty)."""
    return ".".join(str(p) for p in loc) if loc else "<arguments>"


def _schema_kinds(prop: Mapping[str, Any], root: Mapping[str, Any]) -> set[str]:
    """The JSON types a property schema admits (following ``$ref``, ``anyOf`` / ``oneOf``)."""
    ref = prop.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return _schema_kinds(root.get("$defs", {}).get(ref[len("#/$defs/") :], {}), root)
    kinds: set[str] = set()
    declared = prop.get("type")
    if isinstance(declared, str):
        kinds.add(declared)
    elif isinstance(declared, list):
        kinds.update(k for k in declared if isinstance(k, str))
    for key in ("anyOf", "oneOf", "allOf"):
        for sub in prop.get(key, ()):
            kinds |= _schema_kinds(sub, root)
    if not kinds and "properties" in prop:
        kinds.add("object")
    return kinds


def _wants_container(prop: Mapping[str, Any], root: Mapping[str, Any]) -> bool:
    kinds = _schema_kinds(prop, root)
    return bool(kinds & {"array", "object"}) and "string" not in kinds


def _wants_number(prop: Mapping[str, Any], root: Mapping[str, Any]) -> bool:
    kinds = _schema_kinds(prop, root)
    return bool(kinds & {"integer", "number"}) and "boolean" not in kinds


def _deref(schema: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        found = root.get("$defs", {}).get(ref[len("#/$defs/") :], {})
        return found if isinstance(found, Mapping) else {}
    return schema


def boolean_for_number(value: Any, schema: Mapping[str, Any], root: Mapping[str, Any], where: str) -> str | None:
    """Where (``"edits.0.line"``) ``value`` holds a JSON boolean that ``schema`` wants as a number
    (and admits no boolean there), or None. Pydantic's lax mode would read it as 0 / 1."""
    if isinstance(value, bool):
        return where if _wants_number(schema, root) else None
    if not isinstance(value, (list, dict)):
        return None
    schema = _deref(schema, root)
    branches = [b for key in ("anyOf", "oneOf") for b in schema.get(key, ()) if isinstance(b, Mapping)]
    if branches:  # a problem only when every branch of the value's kind has it
        kind = "array" if isinstance(value, list) else "object"
        found = [boolean_for_number(value, b, root, where) for b in branches if kind in _schema_kinds(b, root)]
        return found[0] if found and all(found) else None
    subs: list[tuple[str, Any, Any]] = []
    if isinstance(value, list):
        prefix, items = schema.get("prefixItems", []), schema.get("items")
        subs = [(str(i), v, prefix[i] if i < len(prefix) else items) for i, v in enumerate(value)]
    else:
        props, extra = schema.get("properties", {}), schema.get("additionalProperties")
        subs = [(str(k), v, props.get(k, extra)) for k, v in value.items()]
    for key, item, sub in subs:
        if isinstance(sub, Mapping):
            found_at = boolean_for_number(item, sub, root, f"{where}.{key}")
            if found_at:
                return found_at
    return None


def _annotated_target(function: Callable[..., Any]) -> Any:
    """The plain function whose ``__annotations__`` describe ``function``'s parameters."""
    target: Any = function
    while isinstance(target, functools.partial):
        target = target.func
    target = getattr(target, "__func__", target)  # bound method
    if not inspect.isfunction(target) and not inspect.isclass(target) and callable(target):
        target = getattr(type(target).__call__, "__func__", type(target).__call__)
    return inspect.unwrap(target)


@dataclass(frozen=True)
class FunctionSignature:
    """What a Python function's signature and docstring say about it as a tool.

    Attributes:
        description: the docstring without its ``Args:`` / ``Raises:`` sections.
        parameters: the arguments' JSON Schema (``type``, ``properties``, ``required``,
            ``additionalProperties: false``; no ``title`` keywords).
        model: the pydantic model that coerces arguments (fields ``f0``, ``f1``... aliased to
            the parameter names).
        param_names: the parameters the model sees, in order.
        takes_context: the first parameter receives the run context (not in the schema).
        json_params: parameters whose value may arrive as JSON text (arrays and objects).
        validator: ``jsonschema``'s validator of :attr:`parameters`.
    """

    description: str
    parameters: dict[str, Any]
    model: type[BaseModel]
    param_names: list[str]
    takes_context: bool
    json_params: frozenset[str]
    validator: jsonschema.Draft202012Validator


def function_signature(function: Callable[..., Any], name: str, context_type: type) -> FunctionSignature:
    """Read ``function`` as the tool ``name`` (``context_type``: the run-context class, which
    only a first parameter may take).

    Raises:
        ToolDefinitionError: an unsupported signature (``*args``, ``**kwargs``, positional-only
            or unannotated parameters, a misplaced context parameter), annotations that cannot
            be resolved, or a parameter type pydantic cannot describe.
    """
    description, doc_params = parse_docstring(inspect.getdoc(function))
    try:
        signature = inspect.signature(function)
        hints = get_type_hints(_annotated_target(function), include_extras=True)
    except NameError as e:
        raise ToolDefinitionError(
            f"cannot read the signature of tool {name!r}: {e} (the types of its annotations "
            "must be importable from its module; local classes are not)"
        ) from e
    except (TypeError, ValueError) as e:
        raise ToolDefinitionError(f"cannot read the signature of tool {name!r}: {e}") from e

    takes_context = False
    param_names: list[str] = []
    fields: dict[str, Any] = {}
    for index, (pname, param) in enumerate(signature.parameters.items()):
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ToolDefinitionError(f"tool {name!r}: *args / **kwargs are not supported ({pname})")
        if param.kind is param.POSITIONAL_ONLY:
            raise ToolDefinitionError(f"tool {name!r}: positional-only parameter {pname!r}")
        if pname not in hints:
            raise ToolDefinitionError(f"tool {name!r}: parameter {pname!r} has no type annotation")
        annotation = hints[pname]
        if annotation is context_type:
            if index != 0:
                raise ToolDefinitionError(
                    f"tool {name!r}: the {context_type.__name__} parameter {pname!r} must come first"
                )
            takes_context = True
            continue
        default = PydanticUndefined if param.default is param.empty else param.default
        doc = None if _has_description(annotation) else doc_params.get(pname)
        # Internal field names avoid clashes with BaseModel attributes; the alias is the
        # argument name the model sees.
        # description=None given explicitly would hide an Annotated Field's description
        info = Field(default, alias=pname, description=doc) if doc else Field(default, alias=pname)
        fields[f"f{len(param_names)}"] = (annotation, info)
        param_names.append(pname)

    try:
        model: type[BaseModel] = create_model(
            f"{name}_arguments",
            __config__=ConfigDict(
                # allow_inf_nan=False: "nan" / "inf" text is no number a tool can use (issue 40, B34); a
                # parameter that wants them says so: Annotated[float, Field(allow_inf_nan=True)]
                extra="forbid", coerce_numbers_to_str=True, arbitrary_types_allowed=False, protected_namespaces=(),
                allow_inf_nan=False,
            ),
            **fields,
        )
        schema = model.model_json_schema()
    except Exception as e:  # pydantic raises several types for unsupported annotations
        raise ToolDefinitionError(f"tool {name!r}: unsupported parameter type: {e}") from e
    schema = _top_level_order(_clean_schema(schema))
    schema.setdefault("properties", {})
    import jsonschema

    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as e:  # pragma: no cover - pydantic emits valid schemas
        raise ToolDefinitionError(f"tool {name!r}: invalid JSON schema: {e.message}") from e
    properties: dict[str, Any] = schema["properties"]
    # Parameters whose value may arrive as JSON text (an array or object sent as a string by a
    # server that double-encodes, or a model that typed it so).
    json_params = frozenset(p for p in param_names if _wants_container(properties.get(p, {}), schema))
    return FunctionSignature(description, schema, model, param_names, takes_context, json_params,
                             jsonschema.Draft202012Validator(schema))
