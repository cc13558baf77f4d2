"""Tools: the :class:`Tool` interface every tool implements, and the function tool
(:class:`FunctionTool`: a Python function, sync or async, that the model can call).

:class:`Tool` is what the agent sees: ``name``, ``description``, ``parameters`` (a JSON Schema),
``spec`` (the declaration sent to the model), ``validate`` and ``run``; a function tool, an MCP
server's tool (:mod:`kimik3.tools.mcp`) and the harness's guarded tools implement it, each with
its own constructor. Build a function tool with :func:`tool` (or ``FunctionTool(function)``).

The function tool's JSON schema comes from the signature and the Google-style docstring through
pydantic (the design follows pydantic-ai's function tools); arguments are coerced by pydantic in
lax mode (``"60"`` or ``60.0`` for an ``int`` becomes ``60``) and then checked with ``jsonschema``
against the declared schema. :meth:`Tool.run` never raises for bad arguments or for an exception
inside the tool: it returns a :class:`ToolResult` with ``is_error=True`` whose text the agent sends
back to the model as the tool message. Cancellation still propagates.

Time limits: a tool may have a time limit (``tool(timeout=S)``, or per call
``tool.run(args, timeout=S)``). A call that overruns returns ``"Error: ToolTimeoutError: <name>
did not finish within S s ..."``. A sync function runs in a daemon worker thread
(:mod:`kimik3.tools._threads`: kept for the next call, never shared by two), so a call that
overruns, or whose run is cancelled (a time budget, Ctrl-C), returns at once; Python cannot kill
a thread, so that thread is *abandoned*: it runs on in the background until the function
returns, and being a daemon it does not keep the interpreter from exiting. Tools that can block
(files, sockets, subprocesses) should still bound their own work, so that an abandoned thread
ends soon and leaves nothing behind. Each such call has a :class:`~kimik3.tools._limits.CallToken`
that is marked abandoned then; tools that change files call
:func:`~kimik3.tools._limits.commit_point` before their first change (the coding and patch tools
do), so an abandoned call changes nothing afterwards, and a call abandoned after that point says
so: ``"... was abandoned after it had begun writing its changes: they may be applied in part or
in full; ..."``.
"""

from __future__ import annotations

import cmath
import contextlib
import copy
import functools
import inspect
import json
import math
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, overload

import anyio
import anyio.from_thread
import anyio.lowlevel
from pydantic import ValidationError

from .._exceptions import JSONLimitError, ToolArgumentsError, ToolDefinitionError, ToolError, ToolTimeoutError
from .._json import safe_loads
from .._pricing import Pricing
from ..types import ModelSettings, Routing, ToolSpec
from . import _failures as failures
from ._failures import FailureText, default_failure_text
from ._input import InputReplay, InputWait
from ._limits import CallToken, stray_cancellation
from ._result import ToolResult
from ._schema import boolean_for_number, error_location, format_input, function_signature
from ._threads import call_in_thread as _call_in_thread

__all__ = [
    "PATCH_TEXT", "PATH_OR_COMMAND", "FunctionTool", "Tool", "ToolContext", "ToolResult", "load_arguments",
    "replacement_char", "tool",
]  # fmt: skip

# OpenAI's rule for function names, with Unicode letters and digits (\w) and '.' (common in MCP
# names: "github.create_issue"): K3 carries the name in an escaped attribute, so any of these
# round-trip; OpenAI's own API accepts ASCII only.
_NAME_RE = re.compile(r"^[\w.-]{1,64}$")


def _seconds(value: float) -> float:
    """``value`` as float seconds: ``inf`` for an int beyond any float (``10**400``), NaN for
    what is not a number."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf
    except (TypeError, ValueError):
        return math.nan


@dataclass
class ToolContext:
    """What the agent passes to a tool that asks for it.

    A tool function receives it when its *first* parameter is annotated ``ToolContext``; that
    parameter is not part of the tool's JSON schema.

    Attributes:
        tool_call_id: the id of the tool call being answered ("" outside an agent run).
        deps: whatever the agent was given as dependencies (a workspace, a usage counter...).
        add_tools: inside an agent run, :meth:`kimik3.Agent.add_tools`: tools given to it are
            declared to the model dynamically before its next turn (None outside a run).
        failure_text: words a failure as the error text the model reads (the run's
            ``Agent(failure_text=...)``; default ``"Error: <message>"``, :mod:`._failures`).
        pricing: the run's prices (``Agent(pricing=...)``: a :class:`~kimik3.Pricing`, "auto"
            or None), for a tool that makes model calls of its own (a sub-agent).
        usd_left: USD left of the run's ``Budgets(usd=...)`` when the call started (None: no
            USD budget, or outside a run).
        charge: inside an agent run, adds USD the tool spent on its own model calls to the
            run's cost (:attr:`~kimik3.RunResult.cost`), which its ``Budgets(usd=...)`` counts
            (None outside a run).
        routing: the run's conversation routing key (None outside a run, or without one): a
            tool that starts a conversation of its own (a sub-agent) names it as the parent.
        settings: the run's merged :class:`~kimik3.ModelSettings` (None outside a run): a
            sub-agent keeps the conversation's reasoning effort.
        approval: the run's approval hook (``Agent(approval=...)``; None: none): a sub-agent's
            calls go through it too, so a hook that defers a tool governs it in sub-agents
            (issue 40).
        defer_input: inside an agent run with a session: keeps a call's questions that only a
            person can answer (an MCP server's ``input_required`` result, no input handler) in
            the session; the run stops and a later one replays the call with the answers
            (:mod:`kimik3.tools._input`). None: nowhere to wait (the call fails saying so).
        input_replay: the recorded answers this call is replayed with (None: a first call).
    """

    tool_call_id: str = ""
    deps: Any = None
    add_tools: Callable[..., None] | None = None
    failure_text: FailureText = default_failure_text
    pricing: Pricing | Literal["auto"] | None = None
    usd_left: float | None = None
    charge: Callable[[float], None] | None = None
    routing: Routing | None = None
    settings: ModelSettings | None = None
    approval: Callable[..., Any] | None = None
    defer_input: Callable[[InputWait], None] | None = None
    input_replay: InputReplay | None = None


def load_arguments(arguments: Mapping[str, Any] | str | None) -> Mapping[str, Any]:
    """Call arguments as a mapping: a dict, or its JSON text ("" and None mean no arguments).

    Raises:
        ToolArgumentsError: text that is not JSON, JSON beyond the limits of
            :func:`~kimik3.formats.k3.safe_loads` (``1e999``, nesting deeper than 128, ...), or
            JSON that is not an object.
    """
    if arguments is None:
        args: Any = {}
    elif isinstance(arguments, str):
        if not arguments.strip():
            args = {}
        else:
            try:
                args = safe_loads(arguments)
            except json.JSONDecodeError as e:
                raise ToolArgumentsError(f"arguments are not valid JSON: {e}") from e
            except JSONLimitError as e:
                raise ToolArgumentsError(f"arguments beyond the JSON limits: {e}") from e
    else:
        args = arguments
    if not isinstance(args, Mapping):
        raise ToolArgumentsError(f"arguments must be a JSON object, got {type(args).__name__}")
    return args


PATH_OR_COMMAND = frozenset({
    "path", "paths", "file", "files", "file_path", "file_paths", "filepath", "filename", "old_path", "new_path",
    "destination", "dir", "directory", "cwd", "workdir", "working_dir", "command", "cmd", "shell_command", "argv",
})  # fmt: skip
"""Parameter names whose text names a file or is run (issue 40, N46: a U+FFFD in one is refused)."""


PATCH_TEXT = frozenset({"patch", "diff"})
"""Parameter names whose text is a patch: its file-header lines name files (issue 40, N46)."""

_PATCH_HEADER = re.compile(  # unified diff and git headers, and the "*** Update File:" patch format
    r"^(?:--- |\+\+\+ |diff --git |rename (?:from|to) |\*\*\* (?:Add|Update|Delete) File:|\*\*\* Move to:)")


def replacement_char(name: str, value: Any) -> str | None:
    """Why argument ``name`` cannot be used as sent: a path or a command (:data:`PATH_OR_COMMAND`,
    as the parameter or as a key at any depth inside it, e.g. ``edits.0.path``; a string or a
    list of strings), or a file-header line of a patch (:data:`PATCH_TEXT`), holding U+FFFD, the
    replacement character a decoder writes for bytes it could not read: the model (or a server)
    lost the real characters, and a file named with it (or a command on one) would silently be
    another than the one meant (issue 40, N46). None otherwise; else ``"<where>: <why>"``."""
    where = _lost_chars(name, value)
    if where is None:
        return None
    return (f"{where}: it holds U+FFFD (\ufffd), the replacement character for bytes that could not be decoded: "
            "the real characters were lost on the way; write the path or command again with its real characters")


def _lost_chars(where: str, value: Any) -> str | None:
    key = where.rsplit(".", 1)[-1]
    if key in PATCH_TEXT and isinstance(value, str) and "\ufffd" in value:
        header = next((line for line in value.splitlines() if "\ufffd" in line and _PATCH_HEADER.match(line)), None)
        return where if header is not None else None
    if key in PATH_OR_COMMAND:
        texts = [value] if isinstance(value, str) else [v for v in value if isinstance(v, str)] if isinstance(
            value, list) else []
        if any("\ufffd" in t for t in texts):
            return where
    if isinstance(value, Mapping):
        items: Any = ((f"{where}.{k}", v) for k, v in value.items())
    elif isinstance(value, list):
        items = ((f"{where}.{i}", v) for i, v in enumerate(value))
    else:
        return None
    return next((w for sub, v in items if (w := _lost_chars(sub, v)) is not None), None)


def _non_finite(where: str, value: Any) -> tuple[str, float | complex] | None:
    """``(where, value)`` of a non-finite float (or complex) in a validated value (issue 40, B34), else None."""
    if isinstance(value, float):
        return None if math.isfinite(value) else (where, value)
    if isinstance(value, complex):  # 'nan+infj' reaches a complex parameter as one
        return None if cmath.isfinite(value) else (where, value)
    if isinstance(value, Mapping):
        items: Any = ((f"{where}.{k}", v) for k, v in value.items())
    elif isinstance(value, (list, tuple, set, frozenset)):
        items = ((f"{where}.{i}", v) for i, v in enumerate(value))
    else:
        return None
    return next((w for sub, v in items if (w := _non_finite(sub, v)) is not None), None)


class Tool(ABC):
    """The interface of every tool the agent can call (a function tool, an MCP server's tool, a
    wrapper such as the harness's read-before-edit guard).

    Implementations set the attributes in their own constructor and implement :meth:`validate`
    and :meth:`run`; :attr:`spec` is built from the attributes. ``Tool(function, ...)`` still
    builds a :class:`FunctionTool` (the former meaning of the name; prefer :func:`tool` or
    ``FunctionTool``).

    Attributes:
        name: the name the model calls: 1-64 Unicode letters or digits, ``_``, ``.`` or ``-``.
        description: what the model reads about the tool, possibly "".
        parameters: the JSON Schema of the arguments (an object schema).
        timeout: the time limit of one call in seconds, or None (no limit); see :meth:`run`.
        in_thread: the call's own code runs only in a worker thread (a sync function tool): it
            cannot reach the agent's task, so a turn's only call of it runs in the run's own task,
            without a task group (issue 44). False (the default) for anything that runs code of
            its own on the event loop, which could cancel the task it runs in: an async function,
            a wrapper (the harness's read-before-edit guard), a ``FunctionTool`` subclass that
            overrides ``run`` or ``validate``.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    timeout: float | None = None
    in_thread: bool = False

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        # ``Tool(function)``: the function tool, as the name meant before it was the interface.
        return super().__new__(FunctionTool if cls is Tool else cls)

    @classmethod
    def from_function(
        cls,
        function: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        timeout: float | None = None,
    ) -> FunctionTool:
        """Wrap ``function`` as a :class:`FunctionTool` (``name`` defaults to its ``__name__``,
        ``description`` to its docstring without the ``Args:`` / ``Raises:`` sections, ``timeout``
        in seconds to no limit).

        Raises:
            ToolDefinitionError: see :class:`FunctionTool`.
        """
        return FunctionTool(function, name=name, description=description, timeout=timeout)

    @property
    def spec(self) -> ToolSpec:
        """The declaration sent to the model: ``{"type": "function", "function": {"name",
        "description", "parameters"}}`` (``description`` left out when empty). Built once and
        reused while the name, description and parameters stay equal (the agent reads it every
        turn); treat it as read-only."""
        key = (self.name, self.description, self.parameters)
        cached: tuple[tuple[str, str, dict[str, Any]], ToolSpec] | None = getattr(self, "_spec_cache", None)
        if cached is not None and cached[0] == key:
            return cached[1]
        spec = ToolSpec.model_validate(
            {
                "type": "function",
                "function": {
                    "name": self.name,
                    "description": self.description or None,
                    "parameters": self.parameters,
                },
            }
        )
        key = (self.name, self.description, copy.deepcopy(self.parameters))
        with contextlib.suppress(AttributeError, TypeError):  # a subclass with __slots__: built each time
            object.__setattr__(self, "_spec_cache", (key, spec))
        return spec

    @abstractmethod
    def validate(self, arguments: Mapping[str, Any] | str | None) -> dict[str, Any]:
        """Check (and coerce) call arguments: a dict, or its JSON text ("" and None: none).

        Returns:
            The arguments the call runs with.

        Raises:
            ToolArgumentsError: arguments the tool cannot run with (the message says why).
        """

    @abstractmethod
    async def run(
        self,
        arguments: Mapping[str, Any] | str | None,
        context: ToolContext | None = None,
        *,
        timeout: float | None = None,
    ) -> ToolResult:
        """Validate ``arguments`` and run the tool.

        Never raises for invalid arguments, a failure inside the tool or a call over its time
        limit (``timeout``, default :attr:`timeout`): those are a ``ToolResult(is_error=True)``
        whose text the model reads. Cancellation of the caller and ``KeyboardInterrupt``
        propagate.
        """


class FunctionTool(Tool):
    """A Python function (sync or async) the model can call.

    Build one with :func:`tool` or :meth:`Tool.from_function`. Every parameter needs a type
    annotation; its description comes from the docstring's ``Args:`` section (or from an
    ``Annotated[..., Field(description=...)]``), and a parameter without a default is required.
    An optional first parameter annotated :class:`ToolContext` receives the run context and is not
    part of the schema. ``*args`` / ``**kwargs`` / positional-only parameters are not supported.

    Attributes:
        name: the name the model calls: 1-64 Unicode letters or digits, ``_``, ``.`` or ``-``.
        description: what the model reads about the tool (docstring without ``Args:`` /
            ``Raises:``), possibly "".
        parameters: the JSON Schema of the arguments: ``{"type": "object", "properties": {...},
            "required": [...], "additionalProperties": false}`` (no ``title`` keywords).
        function: the wrapped function.
        takes_context: whether the function's first parameter is a :class:`ToolContext`.
        timeout: the time limit of one call in seconds, or None (no limit); see :meth:`run`.
    """

    def __init__(
        self,
        function: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        timeout: float | None = None,
    ) -> None:
        """Wrap ``function``; same as :meth:`Tool.from_function`.

        Raises:
            ToolDefinitionError: ``function`` is not callable (the message names its type), an
                unsupported signature (``*args``, ``**kwargs``, positional-only or unannotated
                parameters, a misplaced :class:`ToolContext`), an invalid name, a parameter type
                pydantic cannot describe, or a ``timeout`` that is not positive.
        """
        if timeout is not None and not _seconds(timeout) > 0:
            raise ToolDefinitionError(f"tool timeout must be a positive number of seconds, got {timeout!r:.40}")
        if not callable(function):  # e.g. None, 5, an MCP server: say what it is, not "invalid name ''"
            what = f"{type(function).__name__} {function!r:.60}"
            if hasattr(function, "get_tools"):
                what = "a toolset (an MCP server), which only Agent(tools=[...]) takes"
            raise ToolDefinitionError(f"a tool must be a Tool or a typed function, not {what}")
        self.function = function
        self.timeout = timeout
        self.name = name if name is not None else getattr(function, "__name__", "")
        if not _NAME_RE.fullmatch(self.name):
            raise ToolDefinitionError(
                f"invalid tool name {self.name!r}: use 1-64 letters, digits, '_', '.' or '-' (pass name=...)"
            )
        sig = function_signature(function, self.name, ToolContext)
        self.description = description if description is not None else sig.description
        self.parameters: dict[str, Any] = sig.parameters
        self.takes_context = sig.takes_context
        self._param_names = sig.param_names
        self._model = sig.model
        self._validator = sig.validator
        self._json_params = sig.json_params
        self._inf_nan_ok = frozenset(  # parameters that opted in to NaN / infinity (B34)
            pname for i, pname in enumerate(self._param_names)
            if any(getattr(m, "allow_inf_nan", None) is True for m in self._model.model_fields[f"f{i}"].metadata))
        self.is_async = inspect.iscoroutinefunction(function) or (
            not inspect.isroutine(function)  # an object with an async __call__
            and inspect.iscoroutinefunction(type(function).__call__)
        )
        # Only FunctionTool's own run (and the validate it calls) runs on the loop: a subclass that
        # overrides either runs code of its own in the caller's task, which could cancel it.
        self.in_thread = not self.is_async and all(
            getattr(type(self), m) is getattr(FunctionTool, m) for m in ("run", "validate"))

    def __repr__(self) -> str:
        return f"FunctionTool(name={self.name!r}, parameters={list(self._param_names)!r})"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the wrapped function directly (no validation)."""
        return self.function(*args, **kwargs)

    def validate(self, arguments: Mapping[str, Any] | str | None) -> dict[str, Any]:
        """Check and coerce call arguments.

        Args:
            arguments: a dict, or its JSON text ("" and None mean no arguments).

        Returns:
            ``{parameter name: value}`` for every schema parameter (defaults filled in), values
            coerced by pydantic in lax mode (``"60"`` and ``60.0`` -> ``60`` for an ``int``).

        An array or object parameter given as a string is decoded once as JSON (``'[1, 2]'`` ->
        ``[1, 2]``); a JSON boolean is refused where the schema wants a number, at any depth
        (checked on the value as sent, before pydantic's coercion would read it as 0 / 1).

        Raises:
            ToolArgumentsError: text that is not JSON or not an object, JSON beyond the limits of
                :func:`~kimik3.formats.k3.safe_loads` (``1e999``, nesting deeper than 128, ...), unknown argument names
                (``unexpected argument(s): a, b (expected: x, y)``), or values pydantic cannot
                coerce or the schema rejects, one ``"<field>: <what is wrong> (got <input>)"``
                per problem joined with ``"; "``, e.g. ``timeout: Input should be a valid
                integer, unable to parse string as an integer (got 'abc')``.
        """
        args = load_arguments(arguments)
        unknown = [str(k) for k in args if k not in self._param_names]
        if unknown:
            expected = ", ".join(self._param_names) or "no arguments"
            raise ToolArgumentsError(f"unexpected argument(s): {', '.join(unknown)} (expected: {expected})")
        args = dict(args)
        problems = [why for p, v in args.items() if (why := replacement_char(p, v)) is not None]
        properties = self.parameters["properties"]
        beyond_limits: dict[str, str] = {}  # parameter -> why its JSON text was not decoded
        for pname, value in args.items():
            if pname in self._json_params and isinstance(value, str):
                try:
                    decoded = safe_loads(value)
                except json.JSONDecodeError:
                    decoded = None  # left as text
                except JSONLimitError as e:  # left as text; the reason is shown if text is refused
                    decoded, beyond_limits[pname] = None, f"its JSON text is beyond the JSON limits: {e}"
                if isinstance(decoded, (list, dict)):
                    args[pname] = value = decoded
            where = boolean_for_number(value, properties.get(pname, {}), self.parameters, pname)
            if where is not None:
                problems.append(f"{where}: Input should be a number, not a boolean (got {format_input(value)})")
        if problems:
            raise ToolArgumentsError("; ".join(problems))
        try:
            model = self._model.model_validate(args)
        except ValidationError as e:
            problems = []
            for err in e.errors():
                where = error_location(err["loc"])
                if err["type"] == "missing":
                    problems.append(f"{where}: missing required argument")
                elif len(err["loc"]) == 1 and where in beyond_limits:
                    problems.append(f"{where}: {beyond_limits.pop(where)}")
                else:
                    problems.append(f"{where}: {err['msg']} (got {format_input(err.get('input'))})")
            raise ToolArgumentsError("; ".join(problems)) from e
        # Decision (issue 40, B34): a non-finite float anywhere in the validated arguments (a nested
        # BaseModel, a dataclass, a dict of floats) is refused, whatever the nested model's own
        # config; a float parameter opts in with Annotated[float, Field(allow_inf_nan=True)].
        dumped = model.model_dump()
        for i, pname in enumerate(self._param_names):
            if pname not in self._inf_nan_ok and (found := _non_finite(pname, dumped.get(f"f{i}"))) is not None:
                raise ToolArgumentsError(f"{found[0]}: Input should be a finite number (got {found[1]})")
        coerced = model.model_dump(mode="json", by_alias=True, exclude_unset=True)
        errors = sorted(self._validator.iter_errors(coerced), key=lambda err: list(map(str, err.path)))
        if errors:
            raise ToolArgumentsError("; ".join(f"{error_location(tuple(err.path))}: {err.message}" for err in errors))
        return {pname: getattr(model, f"f{i}") for i, pname in enumerate(self._param_names)}

    async def run(
        self,
        arguments: Mapping[str, Any] | str | None,
        context: ToolContext | None = None,
        *,
        timeout: float | None = None,
    ) -> ToolResult:
        """Validate ``arguments``, call the function and convert what it returns.

        Never raises for invalid arguments, for an exception inside the tool (any
        :class:`Exception`, ``SystemExit`` / ``GeneratorExit`` (e.g. an argparse main's
        ``sys.exit(2)``), and an ``asyncio.CancelledError`` the tool raised itself, see
        :func:`~kimik3.tools._limits.stray_cancellation`) or for a call that overruns its time
        limit: those come back as ``ToolResult(is_error=True, content="Error: <ExceptionType>:
        <message>")``, e.g. ``"Error: ToolTimeoutError: grep did not finish within 60 s and was
        abandoned"``. Cancellation of the caller (``asyncio.CancelledError``, anyio's
        cancellation) and ``KeyboardInterrupt`` propagate.

        A sync function runs in a daemon worker thread (reused, one call at a time), an async
        one in the caller's task. When the time limit passes or the caller is cancelled, the call
        returns at once: an async function is cancelled; a sync function's thread is abandoned
        (Python cannot kill a thread; it runs on until the function returns, is never reused, and
        never blocks interpreter exit).

        Args:
            arguments: the call's arguments, a dict or its JSON text.
            context: handed to a function whose first parameter is a :class:`ToolContext`
                (``ToolContext()`` when omitted).
            timeout: this call's time limit in seconds (default: :attr:`timeout`; None and no
                tool default: no limit; a number beyond any float, ``10**400``, is no limit
                either). An agent passes what is left of its time budget.

        Returns:
            The :class:`ToolResult` (see :meth:`ToolResult.from_value`). A function that returns
            a :class:`Tool` or a non-empty list of them gives them to the agent
            (``context.add_tools``) and its result is ``"new tools: <name>, <name>"``; a list
            mixing tools with other values adds none and is a tool error naming the other items.
        """
        limit = self.timeout if timeout is None else timeout
        if limit is not None and _seconds(limit) == math.inf:  # beyond any float (10**400): no limit
            limit = None
        try:
            kwargs = self.validate(arguments)
            call_args: tuple[Any, ...] = (context or ToolContext(),) if self.takes_context else ()
            live = CallToken()
            with anyio.move_on_after(limit) as scope:
                if self.is_async:
                    value = await self.function(*call_args, **kwargs)
                else:
                    call = functools.partial(self.function, *call_args, **kwargs)
                    value = await _call_in_thread(call, self.name, live)
            if scope.cancelled_caught:
                how = "was cancelled" if self.is_async else "was abandoned (its thread may still be running)"
                if live.state == "committing":
                    how = ("was abandoned after it had begun writing its changes: they may be applied in part or "
                           "in full; read the files before changing them again")
                raise ToolTimeoutError(f"{self.name} did not finish within {limit:g} s and {how}")
            new = [value] if isinstance(value, Tool) else value if isinstance(value, list) else None
            if new and any(isinstance(t, Tool) for t in new) and not all(isinstance(t, Tool) for t in new):
                bad = [f"item {i}: {type(t).__name__} {t!r:.40}" for i, t in enumerate(new) if not isinstance(t, Tool)]
                raise ToolError(f"{self.name} returned tools mixed with other values ({'; '.join(bad)}); "
                                "none were added: return only tools, or no tool")  # fmt: skip
            if new and all(isinstance(t, Tool) for t in new):
                if context is None or context.add_tools is None:
                    raise ToolError(f"{self.name} returns tools, which only an agent run can take")
                context.add_tools(*new)
                return ToolResult(content="new tools: " + ", ".join(t.name for t in new))
            return ToolResult.from_value(value)
        except (Exception, SystemExit, GeneratorExit) as e:  # cancellation, KeyboardInterrupt pass
            # SystemExit (an argparse/click main's sys.exit) and GeneratorExit are the tool's
            # failure, not the program's: the model reads "Error: SystemExit: 2".
            return ToolResult.from_failure(failures.exception(e), _failure_text(context))
        except BaseException as e:
            if not stray_cancellation(e):
                raise
            return ToolResult.from_failure(failures.stray_cancellation(e), _failure_text(context))


def _failure_text(context: ToolContext | None) -> FailureText:
    return context.failure_text if context is not None else default_failure_text


@overload
def tool(function: Callable[..., Any], /) -> FunctionTool: ...


@overload
def tool(
    *, name: str | None = None, description: str | None = None, timeout: float | None = None
) -> Callable[[Callable[..., Any]], FunctionTool]: ...


def tool(
    function: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Turn a typed function into a :class:`FunctionTool`; use bare (``@tool``) or with options
    (``@tool(name="search", description="...", timeout=30)``; ``timeout`` is each call's time
    limit in seconds, see :meth:`Tool.run`).

    Example::

        @tool
        async def get_weather(city: str, unit: Literal["C", "F"] = "C") -> dict[str, float]:
            \"\"\"Current weather of a city.

            Args:
                city: the city name, e.g. "Paris".
                unit: temperature unit.
            \"\"\"

    Raises:
        ToolDefinitionError: see :class:`FunctionTool`.
    """
    if function is not None:
        return FunctionTool(function, name=name, description=description, timeout=timeout)

    def decorate(fn: Callable[..., Any]) -> FunctionTool:
        return FunctionTool(fn, name=name, description=description, timeout=timeout)

    return decorate
