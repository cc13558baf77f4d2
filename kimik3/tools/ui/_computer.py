"""The :class:`Computer` protocol every UI backend implements, and key-combo parsing."""

from __future__ import annotations

import abc
import re
from collections.abc import Sequence
from types import TracebackType
from typing import Literal, TypeAlias

from PIL import Image
from typing_extensions import Self

from ..._exceptions import ToolError

__all__ = ["Computer", "KeyCombo", "MouseButton", "parse_keys"]

MouseButton: TypeAlias = Literal["left", "right", "middle"]

KeyCombo: TypeAlias = tuple[str, ...]
"""One key chord in canonical names, modifiers first: ``("ctrl", "shift", "t")``."""

# canonical name <- accepted spellings (lower case)
_ALIASES: dict[str, tuple[str, ...]] = {
    "ctrl": ("ctrl", "control", "ctl", "control_l", "ctrl_l"),
    "alt": ("alt", "option", "opt", "alt_l"),
    "shift": ("shift", "shift_l"),
    "meta": ("meta", "super", "win", "windows", "cmd", "command", "super_l"),
    "enter": ("enter", "return", "kp_enter"),
    "tab": ("tab",),
    "escape": ("escape", "esc"),
    "backspace": ("backspace", "back_space", "bksp"),
    "delete": ("delete", "del"),
    "insert": ("insert", "ins"),
    "space": ("space", "spacebar"),
    "up": ("up", "arrowup", "up_arrow"),
    "down": ("down", "arrowdown", "down_arrow"),
    "left": ("left", "arrowleft", "left_arrow"),
    "right": ("right", "arrowright", "right_arrow"),
    "home": ("home",),
    "end": ("end",),
    "pageup": ("pageup", "page_up", "pgup", "prior"),
    "pagedown": ("pagedown", "page_down", "pgdn", "next"),
}
_CANONICAL = {spelling: name for name, spellings in _ALIASES.items() for spelling in spellings}
MODIFIERS = ("ctrl", "alt", "shift", "meta")
_FKEY = re.compile(r"^f([1-9]|1[0-9]|2[0-4])$")


def parse_keys(keys: str) -> list[KeyCombo]:
    """Parse key combos the way the ``key`` tool documents them.

    ``keys`` is one combo or several separated by spaces, pressed one after the other; a combo
    is key names joined by ``+`` (``ctrl+a``, ``shift+Tab``, ``Return``). Names are case-
    insensitive and common spellings are accepted (``Return``/``enter``, ``esc``, ``PageDown``,
    ``cmd``/``super``/``meta``, ``ArrowUp``/``up``, ``F1``-``F24``). A single character is that
    key (``a``, ``7``, ``/``; upper-case letters stay upper-case). ``+`` itself is ``plus``.

    Args:
        keys: e.g. ``"ctrl+a Delete"``.

    Returns:
        One :data:`KeyCombo` per combo, modifiers first, in canonical names (``ctrl alt shift
        meta enter tab escape backspace delete insert space up down left right home end pageup
        pagedown f1..f24``, or the single character).

    Raises:
        ToolError: no combo, an empty or unknown key name, or two non-modifier keys in one
            combo. A combo of modifiers only is allowed (``"shift"`` taps Shift).
    """
    combos: list[KeyCombo] = []
    for chunk in keys.split():
        names = chunk.split("+")
        if any(not n for n in names):
            raise ToolError(f"bad key combo {chunk!r}: empty key name (write 'plus' for the + key)")
        canonical = [_canonical_key(n) for n in names]
        mods = [k for k in canonical if k in MODIFIERS]
        others = [k for k in canonical if k not in MODIFIERS]
        if len(others) > 1:
            raise ToolError(f"bad key combo {chunk!r}: more than one non-modifier key ({', '.join(others)})")
        ordered = [m for m in MODIFIERS if m in mods] + others
        combos.append(tuple(ordered))
    if not combos:
        raise ToolError("no key given: pass e.g. 'Return', 'ctrl+a' or 'shift+Tab'")
    return combos


def _canonical_key(name: str) -> str:
    if len(name) == 1:
        return name
    low = name.lower()
    if low == "plus":
        return "+"
    if low in _CANONICAL:
        return _CANONICAL[low]
    if _FKEY.match(low):
        return low
    known = ", ".join(sorted(_ALIASES)) + ", f1..f24, or one character"
    raise ToolError(f"unknown key {name!r}; known keys: {known}")


class Computer(abc.ABC):
    """A screen the agent can see and drive: screenshots in, mouse and keyboard actions out.

    Positions are in **input units** (CSS pixels for a browser page, screen pixels on X11); the
    screenshot is in **screen pixels** (device pixels); ``device_scale`` is screen pixels per
    input unit. :class:`~kimik3.tools.ui.CoordinateSpace` maps the model's pixels onto both.
    Backends: :class:`~kimik3.tools.ui.X11Computer`, :class:`~kimik3.tools.ui.BrowserComputer`.

    Use as an async context manager (``async with computer:``) or call :meth:`aclose`.
    """

    @property
    @abc.abstractmethod
    def size(self) -> tuple[int, int]:
        """``(width, height)`` of the screen in screen pixels (what :meth:`screenshot` returns)."""

    @property
    def device_scale(self) -> float:
        """Screen pixels per input unit (1.0 unless the backend renders at a higher density)."""
        return 1.0

    @abc.abstractmethod
    async def screenshot(self) -> Image.Image:
        """The whole screen now, an RGB image of :attr:`size` screen pixels."""

    @abc.abstractmethod
    async def click(self, x: float, y: float, button: MouseButton = "left") -> None:
        """Move the pointer to input position ``(x, y)`` and click ``button`` once."""

    @abc.abstractmethod
    async def double_click(self, x: float, y: float, button: MouseButton = "left") -> None:
        """Move the pointer to ``(x, y)`` and click ``button`` twice in quick succession."""

    @abc.abstractmethod
    async def type_text(self, text: str) -> None:
        """Type ``text`` into whatever has keyboard focus (``\\n`` presses Enter)."""

    @abc.abstractmethod
    async def key(self, combos: Sequence[KeyCombo]) -> None:
        """Press each combo of :func:`parse_keys` in turn (modifiers held while the key is pressed)."""

    @abc.abstractmethod
    async def scroll(self, x: float, y: float, dx: int, dy: int) -> None:
        """Move the pointer to ``(x, y)`` and turn the wheel ``dx`` notches right (negative: left)
        and ``dy`` notches down (negative: up)."""

    @abc.abstractmethod
    async def drag(self, path: Sequence[tuple[float, float]]) -> None:
        """Press the left button at ``path[0]``, move through every later point, release at the
        last one (at least two points)."""

    async def accessibility_snapshot(self) -> str:
        """The screen's accessibility tree as Playwright's AI-mode aria snapshot (YAML lines like
        ``- button "Send" [ref=e6] [box=100,220,200,60]``, boxes ``x,y,width,height`` in input
        units), for :func:`~kimik3.tools.ui.ui_tools`'s ``grounding``.

        Raises:
            ToolError: the backend has no accessibility tree (the default; browser pages have one).
        """
        raise ToolError(f"{type(self).__name__} has no accessibility tree (grounding needs a browser page)")

    async def aclose(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Release what the backend holds (a browser, a connection); idempotent."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
