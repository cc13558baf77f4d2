"""``ui_tools``: screenshot / click / double_click / type_text / key / scroll / drag / wait."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

import anyio
import anyio.to_thread
from PIL import Image, ImageChops
from pydantic import Field

from ..._exceptions import ToolError, UserError
from ...media import MediaConfig, PreparedImage, image_token_count, prepare_image
from .._tool import FunctionTool, Tool
from ._computer import Computer, parse_keys
from ._coords import CoordinateSpace, media_config_for_tokens
from ._grounding import Mark, accessibility_text, draw_marks, marks_for, parse_aria_snapshot
from ._trajectory import TrajectoryRecorder

__all__ = ["changed_region", "ui_tools"]

_DIFF_LEVEL = 24  # a channel must change by more than this (0-255) for a pixel to count
_MIN_CHANGE_SIDE = 5  # changed regions thinner than this (model pixels) are ignored: a blinking caret
_MAX_ECHO_CHARS = 200

ToolOutput = list[str | PreparedImage] | str
Grounding = Literal["accessibility", "marks"]


def changed_region(before: Image.Image, after: Image.Image) -> tuple[int, int, int, int] | None:
    """Where two screenshots visibly differ: the bounding box of changed pixels, or None.

    A pixel changed when one of its channels moved by more than 24 (of 255). A region less
    than 5 pixels wide or high (a blinking text cursor, antialiasing noise) is not a visible
    change. Images of different sizes differ everywhere.

    Args:
        before, after: images of the same screen (the model-size screenshots of
            :class:`~kimik3.media.PreparedImage`).

    Returns:
        ``(left, top, right, bottom)`` in pixels (right/bottom exclusive), or None.
    """
    if before.size != after.size:
        return (0, 0, *after.size)
    a = before if before.mode == "RGB" else before.convert("RGB")
    b = after if after.mode == "RGB" else after.convert("RGB")
    r, g, bl = ImageChops.difference(a, b).split()
    strongest = ImageChops.lighter(ImageChops.lighter(r, g), bl)
    box = strongest.point(lambda v: 255 if v > _DIFF_LEVEL else 0).getbbox()
    if box is None or box[2] - box[0] < _MIN_CHANGE_SIDE or box[3] - box[1] < _MIN_CHANGE_SIDE:
        return None
    return box


def _echo(text: str) -> str:
    shown = json.dumps(text if len(text) <= _MAX_ECHO_CHARS else text[:_MAX_ECHO_CHARS], ensure_ascii=False)
    return shown if len(text) <= _MAX_ECHO_CHARS else f"{shown} (first {_MAX_ECHO_CHARS} characters)"


class _UIState:
    """What the tools of one :func:`ui_tools` call share: the latest frame, the coordinate space
    the model is using, the repeated-action counter, and a lock (one action at a time)."""

    def __init__(
        self, computer: Computer, settle: float, media_config: MediaConfig | None, show_after_action: bool,
        max_tokens: int | None, grounding: Grounding | None,
    ) -> None:  # fmt: skip
        self.computer = computer
        self.settle = settle
        self.media_config = media_config
        self.show_after_action = show_after_action
        self.max_tokens = max_tokens
        self.grounding = grounding
        self.lock = anyio.Lock()
        self.frame: PreparedImage | None = None  # the latest screenshot taken (shown or not)
        self.screen: Image.Image | None = None  # its pixels as captured (for zoom)
        self.space: CoordinateSpace | None = None  # of the latest image shown to the model
        self.marks: dict[int, Mark] = {}  # of the latest image shown to the model
        self.stuck_action: str | None = None
        self.stuck_count = 0
        self._configs: dict[tuple[int, int], MediaConfig | None] = {}

    def config_for(self, size: tuple[int, int]) -> MediaConfig | None:
        """The media config for an image of ``size``: ``media_config`` lowered to the token budget."""
        if self.max_tokens is None:
            return self.media_config
        if size not in self._configs:
            self._configs[size] = media_config_for_tokens(*size, self.max_tokens, self.media_config)
        return self._configs[size]

    async def capture(self) -> PreparedImage:
        """Settle, grab the screen, prepare it the way K3 sees it."""
        if self.settle > 0:
            await anyio.sleep(self.settle)
        shot = await self.computer.screenshot()
        prepared = await self.prepare(shot)
        self.frame, self.screen = prepared, shot
        return prepared

    async def prepare(self, image: Image.Image) -> PreparedImage:
        """Resize for the model (to the token budget); the token count is what a server with
        ``media_config`` charges for the result."""
        prepared = await anyio.to_thread.run_sync(prepare_image, image, self.config_for(image.size))
        if self.max_tokens is None:
            return prepared
        return dataclasses.replace(prepared, token_count=image_token_count(*prepared.size, self.media_config))

    async def show(self, prepared: PreparedImage, offset: tuple[int, int] = (0, 0)) -> tuple[list[str], PreparedImage]:
        """Make ``prepared`` the image positions refer to; with grounding, the accessibility
        text or the marks (and the marked image) to show instead."""
        self.space = CoordinateSpace(screen_size=prepared.original_size, model_size=prepared.size,
                                     device_scale=self.computer.device_scale, offset=offset)  # fmt: skip
        self.marks = {}
        if self.grounding is None:
            return [], prepared
        snapshot = await self.computer.accessibility_snapshot()
        if self.grounding == "accessibility":
            return [accessibility_text(snapshot, self.space)], prepared
        marks = marks_for(parse_aria_snapshot(snapshot), self.space)
        self.marks = {m.number: m for m in marks}
        drawn = PreparedImage(image=draw_marks(prepared.image, marks), original_size=prepared.original_size,
                              size=prepared.size, token_count=prepared.token_count)  # fmt: skip
        listing = "\n".join(m.describe() for m in marks) if marks else "(no interactive element in view)"
        return [f"Numbered marks on interactive elements (click one with click_mark):\n{listing}"], drawn

    async def current_space(self) -> CoordinateSpace:
        if self.space is None:  # an action before any screenshot: learn the geometry first
            await self.show(await self.capture())
        assert self.space is not None
        return self.space

    def annotate(self, tool: str, space: CoordinateSpace, **arguments: Any) -> None:
        """Tell a :class:`TrajectoryRecorder` what the model asked, in its own pixels."""
        if isinstance(self.computer, TrajectoryRecorder):
            self.computer.annotate_next({
                "tool": tool, "arguments": arguments, "model_size": list(space.model_size),
                "screen_size": list(space.screen_size), "offset": list(space.offset),
            })  # fmt: skip

    @staticmethod
    def point(space: CoordinateSpace, x: int, y: int) -> tuple[float, float]:
        if not space.contains(x, y):
            w, h = space.model_size
            raise ToolError(
                f"({x}, {y}) is outside the screenshot, which is {w}x{h} pixels: use x in 0..{w - 1}, y in 0..{h - 1}"
            )
        return space.to_input(x, y)

    async def act(self, action: str, description: str, do: Callable[[], Awaitable[None]]) -> ToolOutput:
        """Run ``do``, then screenshot, compare with the frame before, and report."""
        before = self.frame
        await do()
        after = await self.capture()
        box = (0, 0, *after.size) if before is None else changed_region(before.image, after.image)
        lines = [description]
        if box is None:
            if action == self.stuck_action:
                self.stuck_count += 1
            else:
                self.stuck_action, self.stuck_count = action, 1
            if self.stuck_count >= 2:
                lines.append(
                    "The screen did not change after this action; the same action was repeated "
                    f"{self.stuck_count} times with no visible change — try something else "
                    "(other coordinates, another tool, or wait)."
                )
            else:
                lines.append("The screen did not visibly change after this action.")
        else:
            self.stuck_action, self.stuck_count = None, 0
            lines.append(_changed_text(box, after.size, "after this action"))
        return await self.result(lines, after)

    async def result(self, lines: list[str], after: PreparedImage) -> ToolOutput:
        if not self.show_after_action:
            return "\n".join(lines)
        extra, shown = await self.show(after)
        lines.append(f"Screenshot after it: {after.width}x{after.height} pixels.")
        return ["\n".join([*lines, *extra]), shown]


def _changed_text(box: tuple[int, int, int, int], size: tuple[int, int], when: str) -> str:
    if box == (0, 0, *size):
        return f"The whole screen changed {when}."
    return f"The screen changed {when} in the region x {box[0]}..{box[2] - 1}, y {box[1]}..{box[3] - 1}."


def _action_key(tool: str, **args: Any) -> str:
    return tool + json.dumps(args, sort_keys=True, ensure_ascii=False)


def ui_tools(
    computer: Computer,
    *,
    settle: float = 0.3,
    screenshot_after_action: bool = True,
    media_config: MediaConfig | None = None,
    max_wait: float = 30.0,
    max_screenshot_tokens: int | None = None,
    grounding: Grounding | None = None,
) -> list[Tool]:
    """Tools that let a K3 agent see and drive ``computer``: ``screenshot``, ``click``,
    ``double_click``, ``type_text``, ``key``, ``scroll``, ``drag``, ``wait``, ``zoom`` (and
    ``click_mark`` with ``grounding="marks"``).

    The model sees every screenshot after :func:`kimik3.media.prepare_image` (NaViT resize with
    ``media_config``) and gives positions in pixels of the latest screenshot it was shown; a
    :class:`~kimik3.tools.ui.CoordinateSpace` of that screenshot maps them to screen pixels and
    the backend's input units (device scale included), and every result reports positions back
    in the model's pixels (the pixel actually hit). A position outside the screenshot is an
    error result, never a clamp.

    Each action waits ``settle`` seconds, takes a screenshot, and returns text plus (with
    ``screenshot_after_action``) that screenshot: ``[text, PreparedImage]``. The text says
    whether the screen visibly changed (:func:`changed_region` against the previous
    screenshot, in model pixels). When the same action (same tool and arguments) is repeated
    with no visible change, the result says so: "the screen did not change after this action;
    the same action was repeated N times with no visible change — try something else".

    The tools share one lock: calls run one at a time, in the order the agent starts them.

    Token budget and zoom: with ``max_screenshot_tokens`` every screenshot is resized (through
    :func:`kimik3.media.prepare_image`, :func:`~kimik3.tools.ui.media_config_for_tokens`) to cost
    at most that many tokens, and the coordinate mapping follows the resize. ``zoom(x, y, width,
    height)`` shows a region of the latest image at up to full screen resolution (same budget);
    positions then refer to the zoomed image until the next screenshot.

    Grounding (browser pages, :meth:`Computer.accessibility_snapshot`): ``"accessibility"`` adds
    the page's accessibility tree (roles, names, boxes in the model's pixels) to each screenshot
    result; ``"marks"`` draws numbered boxes on the interactive elements of each screenshot, lists
    them, and adds ``click_mark(mark)``, which clicks the centre of that element.

    Recording: pass a :class:`~kimik3.tools.ui.TrajectoryRecorder` as ``computer``; each action
    is recorded with the model's arguments in its own pixels as well.

    Old screenshots: every action adds an image to the history; keep only the latest few with
    the agent's context policy, e.g. ``Agent(tools=ui_tools(computer),
    context=ContextPolicy(max_images=3))`` (older ones become a short text note).

    Args:
        computer: the screen to drive (:class:`~kimik3.tools.ui.X11Computer`,
            :class:`~kimik3.tools.ui.BrowserComputer` or your own :class:`~kimik3.tools.ui.Computer`).
        settle: seconds to wait before each screenshot (animations, page loads, repaints).
        screenshot_after_action: return a fresh screenshot with each action (otherwise text only;
            positions keep referring to the last screenshot the model was shown).
        media_config: how screenshots are resized for the model (K3 defaults when None); a
            smaller ``in_patch_limit`` makes screenshots cheaper in tokens.
        max_wait: the most seconds one ``wait`` call may ask for.
        max_screenshot_tokens: the most tokens one screenshot (or zoomed image) may cost; None:
            the ``media_config`` resize alone.
        grounding: None, ``"accessibility"`` or ``"marks"`` (see above).

    Returns:
        The tools, in the order listed above.

    Raises:
        UserError: ``settle`` not a finite number >= 0, ``max_wait`` not a finite number > 0,
            ``max_screenshot_tokens`` not an integer >= 1 (or None), or an unknown ``grounding``
            (booleans are not numbers here).
    """

    def number(value: object) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)

    if not (number(settle) and settle >= 0):
        raise UserError(f"ui_tools: settle must be a finite number of seconds >= 0, got {settle!r}")
    if not (number(max_wait) and max_wait > 0):
        raise UserError(f"ui_tools: max_wait must be a finite number of seconds > 0, got {max_wait!r}")
    tokens = max_screenshot_tokens
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1):
        raise UserError(f"ui_tools: max_screenshot_tokens must be an integer >= 1 or None, got {tokens!r}")
    if grounding not in (None, "accessibility", "marks"):
        raise UserError(f"ui_tools: grounding must be None, 'accessibility' or 'marks', got {grounding!r}")
    state = _UIState(computer, settle, media_config, screenshot_after_action, max_screenshot_tokens, grounding)
    c = computer

    async def screenshot() -> ToolOutput:
        """Take a screenshot of the screen.

        Positions you give the other tools are pixels of the latest screenshot you were shown:
        x grows to the right and y downwards from its top-left corner (0, 0).
        """
        async with state.lock:
            prepared = await state.capture()
            extra, shown = await state.show(prepared)
            text = f"Screenshot: {prepared.width}x{prepared.height} pixels. Give positions in pixels of this image."
            return ["\n".join([text, *extra]), shown]

    async def click(x: int, y: int, button: Literal["left", "right", "middle"] = "left") -> ToolOutput:
        """Click at a position of the screenshot (moves the mouse there first).

        Returns what happened and a new screenshot.

        Args:
            x: pixels from the left edge of the screenshot.
            y: pixels from the top edge of the screenshot.
            button: mouse button.
        """
        async with state.lock:
            space = await state.current_space()
            ix, iy = state.point(space, x, y)
            mx, my = space.input_to_model(ix, iy)
            state.annotate("click", space, x=x, y=y, button=button)
            return await state.act(
                _action_key("click", x=x, y=y, button=button),
                f"Clicked the {button} button at ({mx}, {my}).",
                lambda: c.click(ix, iy, button),
            )

    async def double_click(x: int, y: int) -> ToolOutput:
        """Double-click with the left button at a position of the screenshot (e.g. to open an item
        or select a word).

        Args:
            x: pixels from the left edge of the screenshot.
            y: pixels from the top edge of the screenshot.
        """
        async with state.lock:
            space = await state.current_space()
            ix, iy = state.point(space, x, y)
            mx, my = space.input_to_model(ix, iy)
            state.annotate("double_click", space, x=x, y=y)
            return await state.act(
                _action_key("double_click", x=x, y=y),
                f"Double-clicked at ({mx}, {my}).",
                lambda: c.double_click(ix, iy, "left"),
            )

    async def type_text(text: str) -> ToolOutput:
        """Type text with the keyboard into whatever has the focus (click a field first).

        A newline in the text presses Enter. For shortcuts and special keys use `key`.

        Args:
            text: the text to type.
        """
        async with state.lock:
            state.annotate("type_text", await state.current_space(), text=text)
            return await state.act(
                _action_key("type_text", text=text),
                f"Typed {len(text)} characters: {_echo(text)}.",
                lambda: c.type_text(text),
            )

    async def key(keys: str) -> ToolOutput:
        """Press a key or a key combination, e.g. "Return", "Tab", "Escape", "ctrl+a",
        "shift+Tab", "ctrl+shift+t", "PageDown", "F5".

        Several combos separated by spaces are pressed one after the other ("ctrl+a BackSpace").
        Names: ctrl, alt, shift, meta, enter/Return, tab, escape, backspace, delete, insert, space,
        up, down, left, right, home, end, pageup, pagedown, f1..f24, or one character ("plus"
        for +).

        Args:
            keys: the key combo(s).
        """
        async with state.lock:
            combos = parse_keys(keys)
            state.annotate("key", await state.current_space(), keys=keys)
            pressed = ", then ".join("+".join(combo) for combo in combos)
            return await state.act(_action_key("key", keys=keys), f"Pressed {pressed}.", lambda: c.key(combos))

    async def scroll(
        x: int,
        y: int,
        direction: Literal["up", "down", "left", "right"],
        amount: Annotated[int, Field(ge=1, le=50)] = 3,
    ) -> ToolOutput:
        """Scroll with the mouse wheel over a position of the screenshot.

        Args:
            x: pixels from the left edge of the screenshot (what to scroll: the pointer goes here).
            y: pixels from the top edge of the screenshot.
            direction: which way the content moves into view ("down" shows what is below).
            amount: wheel notches (each scrolls a few lines).
        """
        async with state.lock:
            space = await state.current_space()
            ix, iy = state.point(space, x, y)
            mx, my = space.input_to_model(ix, iy)
            dx = {"left": -amount, "right": amount}.get(direction, 0)
            dy = {"up": -amount, "down": amount}.get(direction, 0)
            state.annotate("scroll", space, x=x, y=y, direction=direction, amount=amount)
            return await state.act(
                _action_key("scroll", x=x, y=y, direction=direction, amount=amount),
                f"Scrolled {direction} by {amount} at ({mx}, {my}).",
                lambda: c.scroll(ix, iy, dx, dy),
            )

    async def drag(path: Annotated[list[tuple[int, int]], Field(min_length=2, max_length=64)]) -> ToolOutput:
        """Drag with the left button held: press at the first point, move through the others,
        release at the last (to move a slider, a window, a file, or select text).

        Args:
            path: [x, y] points in pixels of the screenshot, at least two, e.g. [[100, 200], [400, 200]].
        """
        async with state.lock:
            space = await state.current_space()
            points = [state.point(space, x, y) for x, y in path]
            shown = [space.input_to_model(ix, iy) for ix, iy in points]
            via = "".join(f" through ({x}, {y})" for x, y in shown[1:-1])
            text = f"Dragged from ({shown[0][0]}, {shown[0][1]}){via} to ({shown[-1][0]}, {shown[-1][1]})."
            state.annotate("drag", space, path=[list(p) for p in path])
            return await state.act(_action_key("drag", path=path), text, lambda: c.drag(points))

    async def wait(seconds: float = 1.0) -> ToolOutput:
        """Wait for the screen to update (a page loading, an animation), then look again.

        Args:
            seconds: how long to wait.
        """
        if not 0 < seconds <= max_wait:
            raise ToolError(f"seconds must be in (0, {max_wait:g}], got {seconds:g}")
        async with state.lock:
            before = state.frame
            await anyio.sleep(seconds)
            after = await state.capture()
            box = (0, 0, *after.size) if before is None else changed_region(before.image, after.image)
            lines = [f"Waited {seconds:g} seconds."]
            if box is None:
                lines.append("The screen did not visibly change while waiting.")
            else:
                lines.append(_changed_text(box, after.size, "while waiting"))
            return await state.result(lines, after)

    async def zoom(
        x: int, y: int, width: Annotated[int, Field(ge=1)], height: Annotated[int, Field(ge=1)]
    ) -> ToolOutput:
        """Look closer at a region of the latest screenshot (small text, icons), at up to full
        screen resolution.

        The zoomed image has its own pixels: until the next screenshot, positions you give
        (click, drag, ...) are pixels of the zoomed image.

        Args:
            x: left edge of the region, in pixels of the latest image.
            y: top edge of the region.
            width: region width in pixels of the latest image.
            height: region height.
        """
        async with state.lock:
            space = await state.current_space()
            state.point(space, x, y)
            w, h = space.model_size
            right, bottom = min(w, x + width), min(h, y + height)
            left, top = space.to_screen(x, y)
            sr, sb = space.to_screen(right - 1, bottom - 1)
            if state.screen is None:
                await state.capture()
            assert state.screen is not None
            crop = state.screen.crop((left, top, sr + 1, sb + 1))
            prepared = await state.prepare(crop)
            extra, shown = await state.show(prepared, offset=(left, top))
            lines = [
                f"Zoomed into x {x}..{right - 1}, y {y}..{bottom - 1} of the previous image: screen pixels "
                f"{left}..{sr}, {top}..{sb}, shown at {prepared.width}x{prepared.height} pixels "
                f"({prepared.token_count} tokens). Positions now refer "
                "to this zoomed image until the next screenshot.",
                *extra,
            ]
            return ["\n".join(lines), shown]

    async def click_mark(mark: int, button: Literal["left", "right", "middle"] = "left") -> ToolOutput:
        """Click the centre of a numbered mark of the latest screenshot.

        Args:
            mark: the number drawn on the element.
            button: mouse button.
        """
        async with state.lock:
            space = await state.current_space()
            if mark not in state.marks:
                known = f"1..{len(state.marks)}" if state.marks else "none (take a screenshot)"
                raise ToolError(f"no mark {mark} on the latest screenshot; marks: {known}")
            m = state.marks[mark]
            ix, iy = m.target
            mx, my = space.input_to_model(ix, iy)
            state.annotate("click_mark", space, mark=mark, button=button)
            return await state.act(
                _action_key("click_mark", mark=mark, button=button),
                f"Clicked mark {mark} ({m.element.role} {json.dumps(m.element.name, ensure_ascii=False)}) "
                f"at ({mx}, {my}).",
                lambda: c.click(ix, iy, button),
            )

    functions: list[Callable[..., Awaitable[ToolOutput]]] = [
        screenshot, click, double_click, type_text, key, scroll, drag, wait, zoom,
    ]  # fmt: skip
    if grounding == "marks":
        functions.append(click_mark)
    return [FunctionTool(f) for f in functions]
