"""Call arguments checked against an MCP server's ``inputSchema`` without letting the schema
stall a run (used by :class:`kimik3.tools.mcp.MCPTool`).

- The ``jsonschema`` validator is built on the tool's first call, not when the server lists it
  (checking a schema costs about a millisecond: a server of 16,000 tools would spend seconds of
  CPU on each listing).
- The check runs in a worker thread (:meth:`ArgumentsSchema.check` through
  ``anyio.to_thread``), never on the event loop.
- The schema's regular expressions (``pattern``, ``patternProperties`` and the
  ``additionalProperties`` / ``unevaluatedProperties`` that consult them) are matched by the
  ``regex`` package with a timeout and with the GIL released, against one budget per call
  (:data:`CHECK_BUDGET_S`, or the call's time limit when that is smaller). A pattern that runs
  out of it (catastrophic backtracking such as ``(a+)+$`` against ``"aaaa…b"``) refuses the
  arguments with a :class:`~kimik3.ToolArgumentsError` naming it; the worker thread ends then too.

``jsonschema`` calls ``re.search`` from its keyword modules and has no hook for another regex
engine, so those modules' ``re`` is a stand-in (:class:`_BoundedRe`) that is ``re`` itself except
in a thread running one of these checks.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Mapping
from typing import Any

import jsonschema
import jsonschema._keywords
import jsonschema._legacy_keywords
import jsonschema._utils
import regex

from .._exceptions import ToolArgumentsError

__all__ = ["CHECK_BUDGET_S", "ArgumentsSchema"]

log = logging.getLogger("kimik3.mcp")

CHECK_BUDGET_S = 1.0
"""Seconds the regular expressions of one call's argument check may take in all."""


class _Deadline(threading.local):
    at: float | None = None  # time.monotonic() by which this thread's check must end
    budget_s = 0.0


_deadline = _Deadline()


class _PatternFailed(Exception):
    def __init__(self, pattern: str, why: str) -> None:
        super().__init__(pattern, why)
        self.pattern, self.why = pattern, why


class _BoundedRe:
    """What jsonschema's keyword modules see as ``re``: the module itself, but ``search`` in a
    thread running :meth:`ArgumentsSchema.check` is ``regex.search`` with what is left of the
    check's budget."""

    def __getattr__(self, name: str) -> Any:
        return getattr(re, name)

    @staticmethod
    def search(pattern: str, string: str, flags: int = 0) -> Any:
        at = _deadline.at
        if at is None:  # another user of jsonschema: unchanged
            return re.search(pattern, string, flags)
        left = at - time.monotonic()
        over = f"took longer than the check's budget of {_deadline.budget_s:g} s"
        if left <= 0:
            raise _PatternFailed(pattern, over)
        try:  # regex counts the timeout in CPU seconds, with the GIL released: the loop runs on
            return regex.search(pattern, string, flags, timeout=left, concurrent=True)
        except TimeoutError:
            raise _PatternFailed(pattern, over) from None
        except (regex.error, TypeError) as e:
            raise _PatternFailed(pattern, f"is not a usable regular expression ({e})") from None


for _module in (jsonschema._keywords, jsonschema._utils, jsonschema._legacy_keywords):
    if getattr(_module, "re", None) is re:
        _module.re = _BoundedRe()  # type: ignore[attr-defined]


class ArgumentsSchema:
    """The ``inputSchema`` of one MCP tool, as a check of call arguments.

    Args:
        schema: the JSON Schema object, as the server declared it.
        where: names the tool in warnings (``"MCP tool 'x' of 'server'"``).
    """

    def __init__(self, schema: dict[str, Any], where: str) -> None:
        self.schema = schema
        self.where = where
        self._built = False
        self._validator: jsonschema.protocols.Validator | None = None
        self._lock = threading.Lock()

    def _build(self) -> None:
        cls = jsonschema.validators.validator_for(self.schema, default=jsonschema.Draft202012Validator)
        try:
            cls.check_schema(self.schema)
            self._validator = cls(self.schema)
        except jsonschema.SchemaError as e:
            log.warning("kimik3: %s has an invalid input schema (%s); arguments go unchecked", self.where, e.message)
        self._built = True

    def check(self, arguments: Mapping[str, Any], budget_s: float = CHECK_BUDGET_S) -> None:
        """Check ``arguments`` (blocking: call it in a worker thread from async code).

        Args:
            arguments: the call's arguments object.
            budget_s: seconds the schema's regular expressions may take in all.

        Raises:
            ToolArgumentsError: values the schema rejects (``"<field>: <message>"`` joined with
                ``"; "``), or a pattern that could not be matched within ``budget_s``.
        """
        with self._lock:
            if not self._built:
                self._build()
        if self._validator is None:
            return
        _deadline.at, _deadline.budget_s = time.monotonic() + max(0.0, budget_s), budget_s
        try:
            errors = sorted(self._validator.iter_errors(arguments), key=lambda err: list(map(str, err.path)))
        except _PatternFailed as e:
            raise ToolArgumentsError(
                f"the arguments cannot be checked: the schema's pattern {e.pattern[:80]!r} {e.why}"
            ) from None
        finally:
            _deadline.at = None
        if errors:
            raise ToolArgumentsError(
                "; ".join(f"{'.'.join(map(str, e.path)) or '<arguments>'}: {e.message}" for e in errors)
            )
