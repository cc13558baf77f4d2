"""An X11 display as a :class:`Computer`: Pillow grabs the screen, xdotool drives the input."""

from __future__ import annotations

import functools
import itertools
import math
import os
import shutil
import subprocess
from collections.abc import Sequence

import anyio
import anyio.to_thread
from PIL import Image, ImageGrab

from ..._exceptions import ToolError
from ._computer import Computer, KeyCombo, MouseButton
from ._records import MAX_SCREENSHOT_PIXELS

__all__ = ["X11Computer"]

_BUTTONS = {"left": "1", "middle": "2", "right": "3"}
_XDOTOOL_KEYS = {
    "ctrl": "ctrl",
    "alt": "alt",
    "shift": "shift",
    "meta": "super",
    "enter": "Return",
    "tab": "Tab",
    "escape": "Escape",
    "backspace": "BackSpace",
    "delete": "Delete",
    "insert": "Insert",
    "space": "space",
    "up": "Up",
    "down": "Down",
    "left": "Left",
    "right": "Right",
    "home": "Home",
    "end": "End",
    "pageup": "Prior",
    "pagedown": "Next",
}
# X keysym names of printable ASCII punctuation (xdotool's `key` wants names, not characters)
_PUNCTUATION = {
    " ": "space", "!": "exclam", '"': "quotedbl", "#": "numbersign", "$": "dollar", "%": "percent",
    "&": "ampersand", "'": "apostrophe", "(": "parenleft", ")": "parenright", "*": "asterisk",
    "+": "plus", ",": "comma", "-": "minus", ".": "period", "/": "slash", ":": "colon",
    ";": "semicolon", "<": "less", "=": "equal", ">": "greater", "?": "question", "@": "at",
    "[": "bracketleft", "\\": "backslash", "]": "bracketright", "^": "asciicircum",
    "_": "underscore", "`": "grave", "{": "braceleft", "|": "bar", "}": "braceright", "~": "asciitilde",
}  # fmt: skip
_DRAG_STEP_PX = 8  # pointer motion granularity of a drag, in screen pixels


def _keysym(name: str) -> str:
    if name in _XDOTOOL_KEYS:
        return _XDOTOOL_KEYS[name]
    if len(name) == 1:
        return _PUNCTUATION.get(name, name)
    if name.startswith("f") and name[1:].isdigit():
        return name.upper()
    return name


def _px(v: float) -> str:
    return str(math.floor(v))


class X11Computer(Computer):
    """An X11 display (a real desktop, or Xvfb) driven like a person would.

    Screenshots come from Pillow's ``ImageGrab.grab(xdisplay=...)`` (XCB, no extra dependency;
    the pointer is not drawn); input goes through ``xdotool`` (Debian: ``apt-get install
    xdotool``; ``scripts/setup_ui.sh`` installs it). Input units are screen pixels
    (``device_scale`` 1.0).

    Args:
        display: the X display, e.g. ``":99"`` (what ``DISPLAY`` would be).
        xdotool: the xdotool executable (name on ``PATH`` or path).
        type_delay_ms: delay between typed characters, in milliseconds.
        double_click_ms: delay between the two clicks of a double click, in milliseconds.

    Raises:
        ToolError: xdotool is not installed.
    """

    def __init__(
        self,
        display: str = ":99",
        *,
        xdotool: str = "xdotool",
        type_delay_ms: int = 12,
        double_click_ms: int = 80,
    ) -> None:
        exe = shutil.which(xdotool)
        if exe is None:
            raise ToolError(f"{xdotool!r} not found: install it (apt-get install -y xdotool, or scripts/setup_ui.sh)")
        self.display = display
        self.type_delay_ms = type_delay_ms
        self.double_click_ms = double_click_ms
        self._xdotool = exe
        self._env = {**os.environ, "DISPLAY": display}
        self._size: tuple[int, int] | None = None

    def __repr__(self) -> str:
        return f"X11Computer(display={self.display!r})"

    @property
    def size(self) -> tuple[int, int]:
        """Screen size in pixels (``xdotool getdisplaygeometry`` the first time, then the size of
        the latest screenshot)."""
        if self._size is None:
            out = subprocess.run(
                [self._xdotool, "getdisplaygeometry"], env=self._env, capture_output=True, text=True, check=False
            )
            parts = out.stdout.split()
            if out.returncode != 0 or len(parts) != 2:
                raise ToolError(f"cannot read the size of X display {self.display}: {out.stderr.strip() or out.stdout}")
            self._size = (int(parts[0]), int(parts[1]))
        return self._size

    async def _xdo(self, *args: str) -> str:
        result = await anyio.run_process([self._xdotool, *args], env=self._env, check=False)
        if result.returncode != 0:
            err = result.stderr.decode(errors="replace").strip()
            raise ToolError(f"xdotool {args[0]} failed on display {self.display}: {err or result.returncode}")
        return result.stdout.decode(errors="replace")

    async def screenshot(self) -> Image.Image:
        """Grab the whole display (RGB, screen pixels).

        Raises:
            ToolError: the display cannot be opened, or it has more pixels than
                :data:`~kimik3.tools.ui._records.MAX_SCREENSHOT_PIXELS` (8K UHD; never grabbed:
                issue 40's A30, a 53 s / 367 MB screenshot path).
        """
        size = (await self._xdo("getdisplaygeometry")).split()
        w, h = (int(size[0]), int(size[1])) if len(size) == 2 and all(v.isdigit() for v in size) else (0, 0)
        if w * h > MAX_SCREENSHOT_PIXELS:
            raise ToolError(f"X display {self.display} is {w}x{h} pixels, over the {MAX_SCREENSHOT_PIXELS:,}-pixel "
                            "(8K UHD) limit; not grabbed")
        try:
            im = await anyio.to_thread.run_sync(functools.partial(ImageGrab.grab, xdisplay=self.display))
        except OSError as e:
            raise ToolError(f"cannot grab X display {self.display}: {e}") from e
        if im.mode != "RGB":
            im = im.convert("RGB")
        self._size = im.size
        return im

    async def click(self, x: float, y: float, button: MouseButton = "left") -> None:
        await self._xdo("mousemove", _px(x), _px(y), "click", _BUTTONS[button])

    async def double_click(self, x: float, y: float, button: MouseButton = "left") -> None:
        delay = str(self.double_click_ms)
        await self._xdo("mousemove", _px(x), _px(y), "click", "--repeat", "2", "--delay", delay, _BUTTONS[button])

    async def type_text(self, text: str) -> None:
        if text:
            await self._xdo("type", "--delay", str(self.type_delay_ms), "--", text)

    async def key(self, combos: Sequence[KeyCombo]) -> None:
        names = ["+".join(_keysym(k) for k in combo) for combo in combos]
        if names:
            await self._xdo("key", "--clearmodifiers", "--delay", "30", "--", *names)

    async def scroll(self, x: float, y: float, dx: int, dy: int) -> None:
        args = ["mousemove", _px(x), _px(y)]
        for amount, negative, positive in ((dy, "4", "5"), (dx, "6", "7")):
            if amount:
                args += ["click", "--repeat", str(abs(amount)), "--delay", "30", negative if amount < 0 else positive]
        await self._xdo(*args)

    async def drag(self, path: Sequence[tuple[float, float]]) -> None:
        if len(path) < 2:
            raise ToolError("a drag needs at least two points")
        args = ["mousemove", _px(path[0][0]), _px(path[0][1]), "mousedown", "1"]
        for (x0, y0), (x1, y1) in itertools.pairwise(path):
            steps = max(1, min(50, math.ceil(math.hypot(x1 - x0, y1 - y0) / _DRAG_STEP_PX)))
            for i in range(1, steps + 1):
                t = i / steps
                args += ["mousemove", _px(x0 + (x1 - x0) * t), _px(y0 + (y1 - y0) * t), "sleep", "0.01"]
        args += ["mouseup", "1"]
        await self._xdo(*args)
