"""A Chromium page as a :class:`Computer`, through Playwright (Python package ``playwright``).

Playwright drives the system's Chromium (Debian's ``/usr/bin/chromium``) through
``executable_path``; ``playwright install`` (a browser download) is never needed.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import math
import shutil
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from PIL import Image
from typing_extensions import Self

from ..._exceptions import ToolError, UserError
from ._computer import Computer, KeyCombo, MouseButton
from ._records import MAX_SCREENSHOT_PIXELS

if TYPE_CHECKING:
    from playwright.async_api import Browser, BrowserContext, Page, Playwright

__all__ = ["CHROMIUM_ARGS", "BrowserComputer"]

CHROMIUM_ARGS: tuple[str, ...] = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
"""Flags for Chromium on a machine without a sandbox, GPU or outside network (root in CI): no
background connections, no first-run UI, no component updates."""

_PLAYWRIGHT_KEYS = {
    "ctrl": "Control",
    "alt": "Alt",
    "shift": "Shift",
    "meta": "Meta",
    "enter": "Enter",
    "tab": "Tab",
    "escape": "Escape",
    "backspace": "Backspace",
    "delete": "Delete",
    "insert": "Insert",
    "space": "Space",
    "up": "ArrowUp",
    "down": "ArrowDown",
    "left": "ArrowLeft",
    "right": "ArrowRight",
    "home": "Home",
    "end": "End",
    "pageup": "PageUp",
    "pagedown": "PageDown",
}
_DRAG_STEP_CSS = 8  # pointer motion granularity of a drag, in CSS pixels


def _key_name(name: str) -> str:
    if name in _PLAYWRIGHT_KEYS:
        return _PLAYWRIGHT_KEYS[name]
    if name.startswith("f") and name[1:].isdigit():
        return name.upper()
    return name


def default_chromium() -> str | None:
    """The system Chromium: ``chromium`` (Debian) or ``chromium-browser`` on ``PATH``, else None."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _check_screen(viewport: Any, device_scale_factor: Any) -> None:
    """Refuse a screen whose screenshots cannot be small (see :class:`BrowserComputer`'s Raises)."""
    if (not isinstance(viewport, (tuple, list)) or len(viewport) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in viewport)):
        raise UserError(f"viewport must be (width, height) in whole CSS pixels >= 1, got {viewport!r:.80}")
    if (not isinstance(device_scale_factor, (int, float)) or isinstance(device_scale_factor, bool)
            or not math.isfinite(device_scale_factor) or device_scale_factor <= 0):
        raise UserError(f"device_scale_factor must be a finite number > 0, got {device_scale_factor!r:.40}")
    pixels = round(viewport[0] * device_scale_factor) * round(viewport[1] * device_scale_factor)
    if pixels > MAX_SCREENSHOT_PIXELS:
        raise UserError(f"a {viewport[0]}x{viewport[1]} viewport at device_scale_factor {device_scale_factor:g} "
                        f"takes screenshots of {pixels:,} pixels, over the {MAX_SCREENSHOT_PIXELS:,}-pixel "
                        "(8K UHD) limit")


class BrowserComputer(Computer):
    """One Chromium page (tab) as the screen: screenshots of the viewport, mouse and keyboard
    through Playwright.

    Screenshots are in device pixels (``viewport * device_scale_factor``); input is in CSS pixels;
    ``device_scale`` is ``device_scale_factor``, so a
    :class:`~kimik3.tools.ui.CoordinateSpace` maps the model's clicks onto the right CSS pixel.

    Use ``async with BrowserComputer(url) as computer:`` (or ``await computer.start()`` and
    :meth:`aclose`). Requires the ``playwright`` package (``pip install 'kimik3[ui]'``) and a system
    Chromium (Debian: ``apt-get install chromium``; ``scripts/setup_ui.sh`` does it).

    Args:
        url: opened once the browser starts (None: ``about:blank``).
        viewport: ``(width, height)`` of the page in CSS pixels.
        device_scale_factor: device pixels per CSS pixel (2 renders a "retina" page).
        executable_path: the Chromium binary; default :func:`default_chromium`.
        headless: run without a window (the default). With ``headless=False`` the browser needs a
            ``DISPLAY``.
        args: Chromium flags (:data:`CHROMIUM_ARGS` by default).
        wheel_notch_css: CSS pixels scrolled per wheel notch of :meth:`scroll`.
        type_delay_ms: delay between typed characters, in milliseconds.
        launch_options: extra keyword arguments for Playwright's ``chromium.launch``.

    Raises:
        UserError: a viewport that is not two whole numbers >= 1, a ``device_scale_factor`` that
            is not a finite number > 0, or a screen of more device pixels than
            :data:`~kimik3.tools.ui._records.MAX_SCREENSHOT_PIXELS` (8K UHD): every screenshot
            would cost seconds and hundreds of MB to decode (a trajectory's header may ask for one).
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        viewport: tuple[int, int] = (1280, 800),
        device_scale_factor: float = 1.0,
        executable_path: str | None = None,
        headless: bool = True,
        args: Sequence[str] = CHROMIUM_ARGS,
        wheel_notch_css: int = 100,
        type_delay_ms: int = 0,
        launch_options: dict[str, Any] | None = None,
    ) -> None:
        _check_screen(viewport, device_scale_factor)
        self.url = url
        self.viewport = viewport
        self.device_scale_factor = float(device_scale_factor)
        self.executable_path = executable_path
        self.headless = headless
        self.args = tuple(args)
        self.wheel_notch_css = wheel_notch_css
        self.type_delay_ms = type_delay_ms
        self.launch_options = dict(launch_options or {})
        self._playwright: Playwright | None = None
        self._browser: Browser | None = None
        self._context: BrowserContext | None = None
        self._page: Page | None = None
        self._size: tuple[int, int] | None = None

    def __repr__(self) -> str:
        return f"BrowserComputer(viewport={self.viewport}, device_scale_factor={self.device_scale_factor})"

    # -- life cycle --------------------------------------------------------------------------

    async def start(self) -> Self:
        """Launch Chromium, open a page of ``viewport`` at ``device_scale_factor`` and go to ``url``
        (idempotent).

        Raises:
            ToolError: playwright is not installed, or no Chromium was found or it failed to start.
        """
        if self._page is not None:
            return self
        try:
            from playwright.async_api import Error as PlaywrightError
            from playwright.async_api import async_playwright
        except ImportError as e:
            raise ToolError("BrowserComputer needs the playwright package: pip install 'kimik3[ui]'") from e
        exe = self.executable_path or default_chromium()
        if exe is None:
            raise ToolError(
                "no Chromium found: install the system one (apt-get install -y chromium, or scripts/setup_ui.sh) "
                "or pass executable_path=...; kimik3 never runs `playwright install`"
            )
        self._playwright = await async_playwright().start()
        try:
            self._browser = await self._playwright.chromium.launch(
                executable_path=exe, headless=self.headless, args=list(self.args), **self.launch_options
            )
            self._context = await self._browser.new_context(
                viewport={"width": self.viewport[0], "height": self.viewport[1]},
                device_scale_factor=self.device_scale_factor,
            )
            self._page = await self._context.new_page()
            if self.url:
                await self._page.goto(self.url)
        except PlaywrightError as e:
            await self.aclose()
            raise ToolError(f"cannot start Chromium ({exe}): {e}") from e
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aenter__(self) -> Self:
        return await self.start()

    async def aclose(self) -> None:
        """Close the page, the browser and Playwright (idempotent)."""
        context, browser, pw = self._context, self._browser, self._playwright
        self._page = self._context = self._browser = self._playwright = None
        try:
            for closable in (context, browser):
                if closable is not None:
                    with contextlib.suppress(Exception):  # a crashed browser: still stop the driver
                        await closable.close()
        finally:
            if pw is not None:
                await pw.stop()

    @property
    def page(self) -> Page:
        """The Playwright page (to navigate, read the DOM, ...).

        Raises:
            ToolError: the browser is not started.
        """
        if self._page is None:
            raise ToolError("the browser is not started: use `async with BrowserComputer(...)` or await start()")
        return self._page

    async def goto(self, url: str) -> None:
        """Navigate the page to ``url`` and wait for its ``load`` event."""
        await self.page.goto(url)

    # -- Computer ----------------------------------------------------------------------------

    @property
    def size(self) -> tuple[int, int]:
        """Viewport size in device pixels (the latest screenshot's size once one was taken)."""
        if self._size is not None:
            return self._size
        scale = self.device_scale_factor
        return round(self.viewport[0] * scale), round(self.viewport[1] * scale)

    @property
    def device_scale(self) -> float:
        return self.device_scale_factor

    async def screenshot(self) -> Image.Image:
        """The viewport as an RGB image in device pixels (the text caret hidden, like Playwright's
        default). Chromium cannot capture a page in the middle of a navigation: then this waits
        for the new page's ``load`` event and tries again (three attempts in all).

        Raises:
            ToolError: no screenshot after three attempts.
        """
        from playwright.async_api import Error as PlaywrightError

        for attempt in range(3):
            try:
                png = await self.page.screenshot(type="png")
                break
            except PlaywrightError as e:
                if attempt == 2:
                    raise ToolError(f"cannot take a screenshot of the page: {e}") from e
                with contextlib.suppress(PlaywrightError):
                    await self.page.wait_for_load_state("load")
        try:
            with Image.open(io.BytesIO(png)) as opened:  # the header only, so far
                if opened.width * opened.height > MAX_SCREENSHOT_PIXELS:
                    raise ToolError(f"the page's screenshot is {opened.width}x{opened.height} pixels, over the "
                                    f"{MAX_SCREENSHOT_PIXELS:,}-pixel limit; not decoded")
                im = opened.convert("RGB")  # also decodes the pixels
        except (OSError, Image.DecompressionBombError) as e:
            raise ToolError(f"cannot read the page's screenshot: {e}") from e
        self._size = im.size
        return im

    async def accessibility_snapshot(self) -> str:
        """Playwright's ``page.aria_snapshot(mode="ai", boxes=True)``: roles, names, ``[ref=eN]``
        and ``[box=x,y,width,height]`` in CSS pixels of the viewport.

        Raises:
            ToolError: a Playwright without ``aria_snapshot(boxes=...)`` (an older release).
        """
        try:
            return await self.page.aria_snapshot(mode="ai", boxes=True)
        except TypeError as e:
            raise ToolError(f"accessibility snapshots with boxes need a newer playwright: {e}") from e

    async def click(self, x: float, y: float, button: MouseButton = "left") -> None:
        await self.page.mouse.click(x, y, button=button)

    async def double_click(self, x: float, y: float, button: MouseButton = "left") -> None:
        await self.page.mouse.dblclick(x, y, button=button)

    async def type_text(self, text: str) -> None:
        if text:
            await self.page.keyboard.type(text, delay=self.type_delay_ms)

    async def key(self, combos: Sequence[KeyCombo]) -> None:
        for combo in combos:
            await self.page.keyboard.press("+".join(_key_name(k) for k in combo))

    async def scroll(self, x: float, y: float, dx: int, dy: int) -> None:
        mouse = self.page.mouse
        await mouse.move(x, y)
        await mouse.wheel(dx * self.wheel_notch_css, dy * self.wheel_notch_css)

    async def drag(self, path: Sequence[tuple[float, float]]) -> None:
        if len(path) < 2:
            raise ToolError("a drag needs at least two points")
        mouse = self.page.mouse
        await mouse.move(*path[0])
        await mouse.down()
        for (x0, y0), (x1, y1) in itertools.pairwise(path):
            steps = max(1, min(50, math.ceil(math.hypot(x1 - x0, y1 - y0) / _DRAG_STEP_CSS)))
            await mouse.move(x1, y1, steps=steps)
        await mouse.up()
