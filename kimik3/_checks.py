"""Argument checks at construction: a wrong type or an out-of-range number is a
:class:`~kimik3.UserError` naming the parameter, raised where the object is built rather than
as an ``AttributeError`` deep inside a later call."""

from __future__ import annotations

import math
from typing import Any

from ._exceptions import UserError

__all__ = ["check_instance", "check_int", "check_number"]


def _shown(value: Any) -> str:
    return f"{value!r:.80}"


def check_int(name: str, value: Any, *, minimum: int, optional: bool = False) -> None:
    """``value`` is an int (not a bool) ``>= minimum`` (or None when ``optional``).

    Raises:
        UserError: otherwise, naming ``name``.
    """
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        none = " or None" if optional else ""
        raise UserError(f"{name} must be an integer >= {minimum}{none}, got {_shown(value)}")


def check_number(
    name: str,
    value: Any,
    *,
    minimum: float | None = None,
    above: float | None = None,
    maximum: float | None = None,
    optional: bool = False,
) -> None:
    """``value`` is a finite int or float (not a bool) within the bounds (``minimum`` inclusive,
    ``above`` exclusive, ``maximum`` inclusive), or None when ``optional``.

    Raises:
        UserError: otherwise, naming ``name``.
    """
    if value is None and optional:
        return
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (minimum is None or value >= minimum) and (above is None or value > above)
    ok = ok and (maximum is None or value <= maximum)
    if not ok:
        bounds = [f">= {minimum}"] if minimum is not None else []
        bounds += [f"> {above}"] if above is not None else []
        bounds += [f"<= {maximum}"] if maximum is not None else []
        none = " or None" if optional else ""
        raise UserError(
            f"{name} must be a finite number {' and '.join(bounds)}{none}, got {_shown(value)}".replace("  ", " ")
        )


def check_instance(name: str, value: Any, kinds: type | tuple[type, ...], what: str, *, optional: bool = True) -> None:
    """``value`` is an instance of ``kinds`` (or None when ``optional``).

    Raises:
        UserError: otherwise: ``"<name> must be <what>, got <type>"``.
    """
    if value is None and optional:
        return
    if not isinstance(value, kinds):
        raise UserError(f"{name} must be {what}, got {type(value).__name__} {_shown(value)}")
