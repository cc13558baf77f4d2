"""Visual UI automation (kimik3.tools.ui): coordinates, key parsing, change detection, and agents
driving real windows — a Tk window on Xvfb (X11Computer) and a page served on 127.0.0.1 in headless
Debian Chromium (BrowserComputer) — through the tools, with a ScriptedEngine that picks its
coordinates from the screenshots it is shown.

The system packages (xvfb, xdotool, chromium, fonts) come from scripts/setup_ui.sh, which `make
install` runs; the fixtures here run it too when something is missing, and skip (saying why) only
when it could not install them (no root, no apt-get).
"""

from __future__ import annotations

import functools
import importlib.util
import io
import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image, ImageChops, ImageDraw

from kimik3 import Agent, ContextPolicy, ScriptedEngine, ToolError, ToolMessage
from kimik3.agents import ToolResultEvent
from kimik3.formats.k3 import render_output
from kimik3.media import MediaConfig, PreparedImage, decode_data_url, prepare_image
from kimik3.tools import Tool, ToolResult
from kimik3.tools.ui import (
    BrowserComputer,
    Computer,
    CoordinateSpace,
    KeyCombo,
    MouseButton,
    X11Computer,
    changed_region,
    model_size_for,
    parse_keys,
    ui_tools,
)
from kimik3.types import ImagePart, Message

ROOT = Path(__file__).resolve().parents[2]
TK_APP = Path(__file__).with_name("tk_app.py")
# 1280x960 for a 2048x1536 screenshot: sqrt(6217 / (146 * 109)) = 0.6250 (spec k3-media.md § Image size)
SMALL = MediaConfig(in_patch_limit=6217)
DROPPED = "[an older screenshot was dropped from the context]"


# -- scripted model helpers ------------------------------------------------------------------


def call(name: str, **args: Any) -> str:
    return render_output(
        {"reasoning_content": f"use {name}", "content": "", "tool_calls": [{"id": "c", "function": {"name": name, "arguments": args}}]}
    )


def answer(text: str) -> str:
    return render_output({"reasoning_content": "done", "content": text})


def images_in(messages: Sequence[Message]) -> list[Image.Image]:
    out = []
    for m in messages:
        if isinstance(m, ToolMessage) and isinstance(m.content, list):
            for p in m.content:
                if isinstance(p, ImagePart):
                    _, data = decode_data_url(p.image_url.url)
                    out.append(Image.open(io.BytesIO(data)).convert("RGB"))
    return out


def find_colour(img: Image.Image, rgb: tuple[int, int, int], tol: int = 40) -> tuple[int, int, int, int]:
    """Bounding box of the pixels within ``tol`` of ``rgb`` on every channel."""
    masks = [band.point(lambda v, c=c: 255 if abs(v - c) <= tol else 0) for band, c in zip(img.split(), rgb, strict=True)]
    both = ImageChops.multiply(ImageChops.multiply(masks[0], masks[1]), masks[2])
    box = both.getbbox()
    assert box is not None, f"no pixel of colour {rgb} in the {img.size} screenshot"
    return box


def centre(box: tuple[int, int, int, int]) -> tuple[int, int]:
    return (box[0] + box[2] - 1) // 2, (box[1] + box[3] - 1) // 2


Step = Callable[[Image.Image | None], "str | None"]


class Script:
    """A ScriptedEngine function: each step answers a model call given the latest screenshot the
    model was shown; a step that returns None is not done yet and makes the model wait and look
    again (as a model would while a page loads). Records how many images each request carried."""

    def __init__(self, steps: Sequence[Step]) -> None:
        self.steps = list(steps)
        self.position = 0
        self.waits = 0
        self.images_per_call: list[int] = []
        self.chosen: list[tuple[int, int]] = []

    def __call__(self, messages: list[Message]) -> str:
        shots = images_in(messages)
        self.images_per_call.append(len(shots))
        out = self.steps[self.position](shots[-1] if shots else None)
        if out is None:
            self.waits += 1
            assert self.waits < 20, "the screen never showed what the script waits for"
            return call("wait", seconds=0.5)
        self.position += 1
        return out

    def click_on(self, rgb: tuple[int, int, int], tool: str = "click", tol: int = 40) -> Step:
        def step(shot: Image.Image | None) -> str:
            assert shot is not None
            x, y = centre(find_colour(shot, rgb, tol))
            self.chosen.append((x, y))
            return call(tool, x=x, y=y)

        return step


def shows(rgb: tuple[int, int, int], then: Step) -> Step:
    """A step that waits until the screenshot has a pixel of colour ``rgb``, then runs ``then``."""

    def step(shot: Image.Image | None) -> str | None:
        if shot is None or not has_colour(shot, rgb):
            return None
        return then(shot)

    return step


def has_colour(img: Image.Image, rgb: tuple[int, int, int], tol: int = 40) -> bool:
    try:
        find_colour(img, rgb, tol)
    except AssertionError:
        return False
    return True


def results_of(events: Sequence[Any]) -> list[ToolResult]:
    return [e.result for e in events if isinstance(e, ToolResultEvent)]


# -- pure: coordinates -----------------------------------------------------------------------


def test_two_x_scale_click_lands_on_the_screen_pixel() -> None:
    # a 1024x768 CSS viewport at device scale 2 = 2048x1536 screen pixels, shown at 1280x960
    assert model_size_for(2048, 1536, SMALL) == (1280, 960)
    space = CoordinateSpace.for_screen((2048, 1536), device_scale=2.0, config=SMALL)
    assert space == CoordinateSpace(screen_size=(2048, 1536), model_size=(1280, 960), device_scale=2.0)
    assert space.to_screen(640, 480) == (1024, 768)
    assert space.to_input(640, 480) == (512.0, 384.0)
    assert space.input_size == (1024.0, 768.0)
    assert space.to_model(1024, 768) == (640, 480)
    assert space.input_to_model(512.0, 384.0) == (640, 480)
    # corners and clamping
    assert space.to_screen(0, 0) == (0, 0)
    assert space.to_screen(1279, 959) == (2047, 1535)  # floor(1279.5 * 1.6) = floor(2047.2)
    assert space.to_model(2047, 1535) == (1279, 959)
    assert space.to_screen(5000, -3) == (2047, 0)
    assert space.contains(1279, 959) and not space.contains(1280, 0) and not space.contains(0, -1)
    # the same screen without device scale (X11): input units are screen pixels
    x11 = CoordinateSpace.for_screen((2048, 1536), config=SMALL)
    assert x11.to_input(640, 480) == (1024.0, 768.0)


def test_coordinate_space_rejects_bad_sizes() -> None:
    with pytest.raises(ValueError, match="positive"):
        CoordinateSpace(screen_size=(0, 10), model_size=(10, 10))
    with pytest.raises(ValueError, match="device_scale"):
        CoordinateSpace(screen_size=(10, 10), model_size=(10, 10), device_scale=0)


@given(
    sw=st.integers(1, 5000),
    sh=st.integers(1, 5000),
    scale=st.sampled_from([1.0, 1.25, 1.5, 2.0, 3.0]),
    fx=st.floats(0, 1, exclude_max=True),
    fy=st.floats(0, 1, exclude_max=True),
)
def test_every_model_pixel_round_trips(sw: int, sh: int, scale: float, fx: float, fy: float) -> None:
    space = CoordinateSpace.for_screen((sw, sh), device_scale=scale, config=SMALL)
    mw, mh = space.model_size
    assert mw <= sw and mh <= sh
    x, y = int(fx * mw), int(fy * mh)
    sx, sy = space.to_screen(x, y)
    assert 0 <= sx < sw and 0 <= sy < sh
    assert space.to_model(sx, sy) == (x, y)
    assert space.input_to_model(*space.to_input(x, y)) == (x, y)


def test_model_size_matches_prepare_image() -> None:
    shot = Image.new("RGB", (2048, 1536), "white")
    prepared = prepare_image(shot, SMALL)
    assert prepared.size == model_size_for(2048, 1536, SMALL) == (1280, 960)
    fixed = SMALL.model_copy(update={"resize_to_fixed_point": True})
    assert prepare_image(Image.new("RGB", (1999, 1333)), fixed).size == model_size_for(1999, 1333, fixed)


# -- pure: keys and change detection ---------------------------------------------------------


def test_parse_keys() -> None:
    assert parse_keys("Return") == [("enter",)]
    assert parse_keys("ctrl+a BackSpace") == [("ctrl", "a"), ("backspace",)]
    assert parse_keys("shift+ctrl+T") == [("ctrl", "shift", "T")]
    assert parse_keys("cmd+plus esc PageDown F5 Up") == [("meta", "+"), ("escape",), ("pagedown",), ("f5",), ("up",)]
    assert parse_keys("shift") == [("shift",)]
    for bad, message in [("", "no key"), ("ctrl+", "empty key"), ("hyper+x", "unknown key 'hyper'"),
                         ("a+b", "more than one non-modifier")]:  # fmt: skip
        with pytest.raises(ToolError, match=message):
            parse_keys(bad)


def test_changed_region_ignores_a_blinking_caret() -> None:
    a = Image.new("RGB", (200, 100), (240, 240, 240))
    b = a.copy()
    assert changed_region(a, b) is None
    ImageDraw.Draw(b).rectangle((50, 20, 51, 40), fill=(0, 0, 0))  # a 2-pixel-wide caret
    assert changed_region(a, b) is None
    ImageDraw.Draw(b).rectangle((100, 30, 129, 49), fill=(200, 0, 0))  # a real change
    assert changed_region(a, b) == (50, 20, 130, 50)
    c = a.copy()
    c.putpixel((10, 10), (250, 250, 250))  # within the noise level
    assert changed_region(a, c) is None
    assert changed_region(a, Image.new("RGB", (100, 100))) == (0, 0, 100, 100)


# -- an in-memory computer: tool behaviour without a display ---------------------------------


class CanvasComputer(Computer):
    """A fake screen: a grey canvas with a blue button at screen pixels (300..499, 200..299); a
    click on the button turns it green. Input units are screen pixels / ``scale``."""

    BUTTON = (300, 200, 500, 300)

    def __init__(self, size: tuple[int, int] = (1600, 1200), scale: float = 1.0) -> None:
        self._screen = size
        self._scale = scale
        self.pressed = False
        self.log: list[tuple[str, Any]] = []

    @property
    def size(self) -> tuple[int, int]:
        return self._screen

    @property
    def device_scale(self) -> float:
        return self._scale

    async def screenshot(self) -> Image.Image:
        im = Image.new("RGB", self._screen, (200, 200, 200))
        ImageDraw.Draw(im).rectangle((300, 200, 499, 299), fill=(0, 160, 0) if self.pressed else (0, 0, 220))
        return im

    async def click(self, x: float, y: float, button: MouseButton = "left") -> None:
        self.log.append(("click", (x, y, button)))
        sx, sy = x * self._scale, y * self._scale
        left, top, right, bottom = self.BUTTON
        if button == "left" and left <= sx < right and top <= sy < bottom:
            self.pressed = not self.pressed

    async def double_click(self, x: float, y: float, button: MouseButton = "left") -> None:
        self.log.append(("double_click", (x, y, button)))

    async def type_text(self, text: str) -> None:
        self.log.append(("type_text", text))

    async def key(self, combos: Sequence[KeyCombo]) -> None:
        self.log.append(("key", list(combos)))

    async def scroll(self, x: float, y: float, dx: int, dy: int) -> None:
        self.log.append(("scroll", (x, y, dx, dy)))

    async def drag(self, path: Sequence[tuple[float, float]]) -> None:
        self.log.append(("drag", list(path)))


def tools_by_name(tools: list[Tool]) -> dict[str, Tool]:
    return {t.name: t for t in tools}


async def test_tools_map_model_pixels_and_report_them_back() -> None:
    # 1600x1200 screen pixels at device scale 2 (800x600 input units), shown smaller
    cfg = MediaConfig(in_patch_limit=4000)
    computer = CanvasComputer((1600, 1200), scale=2.0)
    tools = tools_by_name(ui_tools(computer, settle=0, media_config=cfg))
    assert list(tools) == ["screenshot", "click", "double_click", "type_text", "key", "scroll", "drag", "wait", "zoom"]
    shot = await tools["screenshot"].run({})
    assert not shot.is_error and isinstance(shot.content, list)
    w, h = model_size_for(1600, 1200, cfg)
    assert (w, h) == (1027, 770)
    assert shot.text == f"Screenshot: {w}x{h} pixels. Give positions in pixels of this image."
    space = CoordinateSpace(screen_size=(1600, 1200), model_size=(w, h), device_scale=2.0)

    r = await tools["click"].run({"x": 100, "y": 50, "button": "right"})
    sx, sy = space.to_screen(100, 50)
    assert computer.log[-1] == ("click", (sx / 2, sy / 2, "right"))
    assert r.text.splitlines()[0] == "Clicked the right button at (100, 50)."
    await tools["double_click"].run({"x": 10, "y": 20})
    assert computer.log[-1] == ("double_click", (*space.to_input(10, 20), "left"))
    await tools["scroll"].run({"x": 30, "y": 40, "direction": "up", "amount": 2})
    assert computer.log[-1] == ("scroll", (*space.to_input(30, 40), 0, -2))
    r = await tools["drag"].run({"path": [[1, 2], [300, 400], [500, 6]]})
    assert computer.log[-1] == ("drag", [space.to_input(1, 2), space.to_input(300, 400), space.to_input(500, 6)])
    assert r.text.splitlines()[0] == "Dragged from (1, 2) through (300, 400) to (500, 6)."
    r = await tools["type_text"].run({"text": "héllo\n"})
    assert computer.log[-1] == ("type_text", "héllo\n") and r.text.startswith('Typed 6 characters: "héllo\\n".')
    r = await tools["key"].run({"keys": "ctrl+a Delete"})
    assert computer.log[-1] == ("key", [("ctrl", "a"), ("delete",)])
    assert r.text.startswith("Pressed ctrl+a, then delete.")

    # positions outside the screenshot are errors, never clamped silently
    r = await tools["click"].run({"x": w, "y": 0})
    assert r.is_error and r.text == (
        f"Error: ToolError: ({w}, 0) is outside the screenshot, which is {w}x{h} pixels: use x in 0..{w - 1}, y in 0..{h - 1}"
    )
    r = await tools["key"].run({"keys": "hyper+x"})
    assert r.is_error and "unknown key 'hyper'" in r.text
    r = await tools["wait"].run({"seconds": 31})
    assert r.is_error and r.text == "Error: ToolError: seconds must be in (0, 30], got 31"


async def test_no_visible_change_is_detected_and_repetition_reported() -> None:
    computer = CanvasComputer()
    tools = tools_by_name(ui_tools(computer, settle=0))  # 1600x1200: not resized by K3 defaults
    await tools["screenshot"].run({})
    texts = [(await tools["click"].run({"x": 50, "y": 50})).text for _ in range(3)]
    assert texts[0] == "Clicked the left button at (50, 50).\nThe screen did not visibly change after this action.\nScreenshot after it: 1600x1200 pixels."
    assert texts[1].splitlines()[1] == (
        "The screen did not change after this action; the same action was repeated 2 times with no "
        "visible change — try something else (other coordinates, another tool, or wait)."
    )
    assert "repeated 3 times" in texts[2]
    # another action with no change starts a new count; a change resets it
    other = (await tools["click"].run({"x": 60, "y": 50})).text
    assert other.splitlines()[1] == "The screen did not visibly change after this action."
    hit = (await tools["click"].run({"x": 400, "y": 250})).text
    assert hit.splitlines()[1] == "The screen changed after this action in the region x 300..499, y 200..299."
    assert computer.pressed
    again = (await tools["click"].run({"x": 50, "y": 50})).text
    assert again.splitlines()[1] == "The screen did not visibly change after this action."
    waited = await tools["wait"].run({"seconds": 0.01})
    assert waited.text.splitlines()[:2] == ["Waited 0.01 seconds.", "The screen did not visibly change while waiting."]


async def test_actions_without_screenshots_and_an_action_before_any_screenshot() -> None:
    computer = CanvasComputer()
    tools = tools_by_name(ui_tools(computer, settle=0, screenshot_after_action=False))
    r = await tools["click"].run({"x": 400, "y": 250})  # no screenshot yet: the geometry is read first
    assert r.content == (
        "Clicked the left button at (400, 250).\nThe screen changed after this action in the region x 300..499, y 200..299."
    )
    assert computer.pressed


async def test_agent_max_images_keeps_only_the_latest_screenshots() -> None:
    computer = CanvasComputer()
    script = Script(
        [
            lambda shot: call("screenshot"),
            *[lambda shot, i=i: call("click", x=10 + i, y=10) for i in range(4)],
            lambda shot: answer("looked around"),
        ]
    )
    agent = Agent(engine=ScriptedEngine(script), tools=ui_tools(computer, settle=0), context=ContextPolicy(max_images=2))
    result = await agent.run("look")
    assert result.output == "looked around"
    # pruned in a batch (cache-stable): up to 2 + 2 images, then back to the latest 2
    assert script.images_per_call == [0, 1, 2, 3, 4, 2]
    tool_msgs = [m for m in result.messages if isinstance(m, ToolMessage)]
    assert len(tool_msgs) == 5
    dropped = [m for m in tool_msgs if isinstance(m.content, list) and any(getattr(p, "text", None) == DROPPED for p in m.content)]
    assert len(dropped) == 3 and tool_msgs[-1] not in dropped and tool_msgs[-2] not in dropped
    # the dropped ones keep their text (the positions and change notes)
    assert any("Clicked the left button at (10, 10)." in str(p) for p in dropped[1].content)


# -- system set-up for the real-window tests -------------------------------------------------

_setup_done: dict[str, str] = {}


def _ensure_system(*binaries: str) -> None:
    """Run scripts/setup_ui.sh (once per session) if a binary is missing; skip if still missing."""
    missing = [b for b in binaries if shutil.which(b) is None]
    if missing and "ran" not in _setup_done:
        proc = subprocess.run(
            ["bash", str(ROOT / "scripts" / "setup_ui.sh")],
            capture_output=True, text=True, env={**os.environ, "VENV": str(Path(sys.executable).parents[1])},
            check=False,
        )  # fmt: skip
        _setup_done["ran"] = (proc.stdout + proc.stderr).strip()
        missing = [b for b in binaries if shutil.which(b) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed and scripts/setup_ui.sh could not install them: {_setup_done.get('ran', '')}")


def _tk_python() -> str:
    for python in (sys.executable, "/usr/bin/python3"):
        if os.path.exists(python) and subprocess.run([python, "-c", "import tkinter"], capture_output=True, check=False).returncode == 0:
            return python
    pytest.skip("no Python with tkinter (install python3-tk: scripts/setup_ui.sh)")


@pytest.fixture(scope="session")
def xvfb() -> Iterator[str]:
    """A 2048x1536 Xvfb display on a free display number (Xvfb picks it: -displayfd)."""
    _ensure_system("Xvfb", "xdotool")
    read_fd, write_fd = os.pipe()
    proc = subprocess.Popen(
        ["Xvfb", "-displayfd", str(write_fd), "-screen", "0", "2048x1536x24", "-nolisten", "tcp"],
        pass_fds=(write_fd,), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    os.close(write_fd)
    with os.fdopen(read_fd) as f:
        number = f.readline().strip()
    if not number:
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        proc.kill()
        pytest.skip(f"Xvfb did not start: {err[-500:]}")
    try:
        yield f":{number}"
    finally:
        proc.terminate()
        proc.wait(10)


class TkApp:
    """The Tk window of tk_app.py, its JSON-lines events collected by a reader thread."""

    def __init__(self, display: str) -> None:
        self.proc = subprocess.Popen(
            [_tk_python(), str(TK_APP)], env={**os.environ, "DISPLAY": display},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.events: list[dict[str, Any]] = []
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.geometry = self.wait_for(lambda e: e["event"] == "ready")

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(json.loads(line))
        self._queue.put(None)

    def wait_for(self, match: Callable[[dict[str, Any]], bool], timeout: float = 20.0) -> dict[str, Any]:
        for e in self.events:
            if match(e):
                return e
        deadline = time.monotonic() + timeout
        while True:
            try:
                e = self._queue.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            if e is None:
                break
            self.events.append(e)
            if match(e):
                return e
        err = self.proc.stderr.read() if self.proc.poll() is not None and self.proc.stderr else ""
        raise AssertionError(f"the Tk app never reported the expected event; events: {self.events} {err}")

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


@pytest.fixture
def tk_app(xvfb: str) -> Iterator[TkApp]:
    app = TkApp(xvfb)
    try:
        yield app
    finally:
        app.close()


# -- X11: a real Tk window on Xvfb -----------------------------------------------------------

RED, YELLOW = (0xDD, 0, 0), (0xFF, 0xEE, 0)


async def test_x11_agent_clicks_the_button_and_types_into_the_entry(xvfb: str, tk_app: TkApp) -> None:
    assert tk_app.geometry == {"event": "ready", "x": 40, "y": 60, "width": 600, "height": 400}
    computer = X11Computer(xvfb)
    assert computer.size == (2048, 1536) and computer.device_scale == 1.0
    script = Script([])
    script.steps = [
        lambda shot: call("screenshot"),
        script.click_on(RED),
        script.click_on(YELLOW),
        lambda shot: call("type_text", text="hello k3"),
        lambda shot: call("key", keys="Return"),
        lambda shot: answer("clicked Go and entered hello k3"),
    ]
    agent = Agent(
        engine=ScriptedEngine(script), tools=ui_tools(computer, settle=0.2, media_config=SMALL), context=ContextPolicy(max_images=2)
    )
    events = [e async for e in agent.run_stream("Click Go, then type 'hello k3' in the yellow field and press Enter.")]
    results = results_of(events)
    assert [r.is_error for r in results] == [False] * 5

    # the model saw 1280x960 screenshots of the 2048x1536 screen; the red button (screen
    # 100..259 x 120..179) was found at model pixels and the click landed on the screen pixel
    # under the centre of the chosen model pixel
    shots = images_in([m for m in events[-1].result.messages if isinstance(m, ToolMessage)])
    assert all(s.size == (1280, 960) for s in shots)
    (rx, ry), (yx, yy) = script.chosen
    space = CoordinateSpace(screen_size=(2048, 1536), model_size=(1280, 960))
    press = tk_app.wait_for(lambda e: e["event"] == "press")
    assert (press["x"], press["y"]) == space.to_screen(rx, ry)
    assert 100 <= press["x"] < 260 and 120 <= press["y"] < 180
    assert tk_app.wait_for(lambda e: e["event"] == "click") == {"event": "click", "count": 1}
    assert tk_app.wait_for(lambda e: e["event"] == "submit") == {"event": "submit", "value": "hello k3"}
    entry_values = [e["value"] for e in tk_app.events if e["event"] == "entry"]
    assert entry_values[-1] == "hello k3" and entry_values == ["hello k3"[:i] for i in range(1, 9)]

    # what the model read back: positions in its own pixels, and the screen changes
    assert results[1].text.splitlines()[0] == f"Clicked the left button at ({rx}, {ry})."
    assert results[1].text.splitlines()[1].startswith("The screen changed after this action in the region")  # "clicked 1"
    assert results[2].text.splitlines()[0] == f"Clicked the left button at ({yx}, {yy})."
    assert results[3].text.splitlines()[:2] == ['Typed 8 characters: "hello k3".', results[3].text.splitlines()[1]]
    assert results[3].text.splitlines()[1].startswith("The screen changed")
    assert results[4].text.splitlines()[0] == "Pressed enter."
    assert script.images_per_call == [0, 1, 2, 3, 4, 2]  # max_images=2 (+ 2 before a batch prune)


async def test_x11_two_x_scale_and_no_change_on_the_real_display(xvfb: str) -> None:
    # a 2048x1536 screen seen at 1280x960: model (640, 480) is screen pixel (1024, 768), which is
    # the bare root window (nothing reacts), so repeating the click changes nothing
    computer = X11Computer(xvfb)
    tools = tools_by_name(ui_tools(computer, settle=0.1, media_config=SMALL))
    shot = await tools["screenshot"].run({})
    assert shot.text.startswith("Screenshot: 1280x960 pixels.")
    texts = []
    for _ in range(2):
        r = await tools["click"].run({"x": 640, "y": 480})
        texts.append(r.text)
        where = subprocess.run(["xdotool", "getmouselocation", "--shell"], env={**os.environ, "DISPLAY": xvfb},
                               capture_output=True, text=True, check=True).stdout  # fmt: skip
        assert "X=1024\nY=768\n" in where
    assert texts[0].splitlines()[:2] == ["Clicked the left button at (640, 480).", "The screen did not visibly change after this action."]
    assert "the same action was repeated 2 times with no visible change — try something else" in texts[1]
    r = await tools["scroll"].run({"x": 640, "y": 480, "direction": "down"})
    assert not r.is_error and r.text.startswith("Scrolled down by 3 at (640, 480).")


# -- browser: a real page in headless Chromium -----------------------------------------------

FORM = b"""<!doctype html>
<html><head><meta charset="utf-8"><title>Sign up</title><style>
body { margin: 0; background: #f4f4f4; font-family: "DejaVu Sans", sans-serif; }
h1 { position: absolute; left: 100px; top: 10px; margin: 0; font-size: 32px; }
input:focus, button:focus { outline: none; }
#name { position: absolute; left: 100px; top: 120px; width: 400px; height: 48px; border: 0; padding: 0 8px;
        font-size: 24px; background: #ffee00; }
#send { position: absolute; left: 100px; top: 220px; width: 200px; height: 60px; border: 0;
        font-size: 24px; background: #00aa00; color: #fff; }
</style></head><body><h1>Sign up</h1>
<form method="post" action="/submit"><input id="name" name="name" autocomplete="off"><button id="send" type="submit">Send</button></form>
</body></html>"""

PROBE = b"""<!doctype html>
<html><head><style>html, body { margin: 0; height: 100%; background: #ffffff; }</style></head>
<body><script>
window.clicks = [];
document.addEventListener("mousedown", e => window.clicks.push([e.clientX, e.clientY, window.devicePixelRatio]));
</script></body></html>"""


class Site:
    """A tiny site on 127.0.0.1: the form, its /submit handler, and a click probe page."""

    def __init__(self) -> None:
        submissions: list[dict[str, list[str]]] = []
        self.submissions = submissions
        self.form = FORM  # what GET / serves (a test may change the page)
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._send(PROBE if self.path == "/probe" else site.form)

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode()
                fields = urllib.parse.parse_qs(body)
                submissions.append(fields)
                name = fields.get("name", [""])[0].replace("<", "&lt;")
                self._send(f'<!doctype html><p id="thanks" style="font-size:40px;color:#0000cc">Thanks, {name}!</p>'.encode())

            def _send(self, body: bytes) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def site() -> Iterator[Site]:
    _ensure_system("chromium")
    pytest.importorskip("playwright", reason="playwright is not installed (pip install -e '.[dev]')")
    s = Site()
    try:
        yield s
    finally:
        s.close()


GREEN = (0, 0xAA, 0)


async def test_browser_agent_fills_and_submits_the_form(site: Site) -> None:
    # 1.5 device pixels per CSS pixel, and screenshots shrunk for the model: both mappings at once
    cfg = MediaConfig(in_patch_limit=4096)
    async with BrowserComputer(f"{site.url}/", viewport=(1024, 768), device_scale_factor=1.5) as computer:
        assert computer.size == (1536, 1152) and computer.device_scale == 1.5
        script = Script([])
        script.steps = [
            lambda shot: call("screenshot"),
            script.click_on(YELLOW),
            lambda shot: call("type_text", text="Ada Lovelace"),
            script.click_on(GREEN),
            shows((0, 0, 0xCC), lambda shot: answer("submitted")),  # the blue "Thanks" text
        ]
        agent = Agent(engine=ScriptedEngine(script), tools=ui_tools(computer, settle=0.2, media_config=cfg),
                      context=ContextPolicy(max_images=3))  # fmt: skip
        result = await agent.run("Enter the name Ada Lovelace and submit the form.")
        assert result.output == "submitted"
        assert site.submissions == [{"name": ["Ada Lovelace"]}]
        assert await computer.page.inner_text("#thanks") == "Thanks, Ada Lovelace!"
        tool_texts = [m for m in result.messages if isinstance(m, ToolMessage)]
        model_w, model_h = model_size_for(1536, 1152, cfg)
        assert (model_w, model_h) != (1536, 1152)  # really resized
        last = images_in(tool_texts[-1:])[0]
        assert last.size == (model_w, model_h)
        assert has_colour(last, (0, 0, 0xCC))  # the thanks page is what the model saw last
        assert not has_colour(last, YELLOW)


async def test_browser_two_x_device_scale_click_lands_on_the_css_pixel(site: Site) -> None:
    # 1024x768 CSS viewport at device scale 2 = a 2048x1536 screenshot, shown at 1280x960:
    # a click at model (640, 480) lands on screen pixel (1024, 768) = CSS pixel (512, 384)
    async with BrowserComputer(f"{site.url}/probe", viewport=(1024, 768), device_scale_factor=2) as computer:
        tools = tools_by_name(ui_tools(computer, settle=0.05, media_config=SMALL))
        shot = await tools["screenshot"].run({})
        assert isinstance(shot.content, list) and shot.text.startswith("Screenshot: 1280x960 pixels.")
        assert (await computer.screenshot()).size == (2048, 1536)
        r = await tools["click"].run({"x": 640, "y": 480})
        assert r.text.splitlines()[:2] == ["Clicked the left button at (640, 480).", "The screen did not visibly change after this action."]
        assert await computer.page.evaluate("window.clicks") == [[512, 384, 2]]
        r = await tools["click"].run({"x": 640, "y": 480})
        assert "the same action was repeated 2 times with no visible change" in r.text
        await tools["click"].run({"x": 1, "y": 959})  # screen (2, 1535) = CSS (1.0, 767.5)
        assert (await computer.page.evaluate("window.clicks"))[-1] == [1, 767, 2]


async def test_browser_keys_scroll_and_drag(site: Site) -> None:
    page_html = """<!doctype html><html><head><style>body{margin:0;height:3000px;background:linear-gradient(#fff,#000)}
    input{position:fixed;left:10px;top:10px;width:300px;height:40px;font-size:20px}</style></head><body>
    <input id="f" value="old text"><script>
    window.drag = [];
    document.addEventListener("mousedown", e => window.drag.push(["down", e.clientX, e.clientY]));
    document.addEventListener("mouseup", e => window.drag.push(["up", e.clientX, e.clientY]));
    </script></body></html>"""
    async with BrowserComputer(viewport=(800, 600)) as computer:
        await computer.page.set_content(page_html)
        tools = tools_by_name(ui_tools(computer, settle=0.05))
        await tools["click"].run({"x": 100, "y": 30})
        r = await tools["key"].run({"keys": "ctrl+a BackSpace"})
        assert r.text.startswith("Pressed ctrl+a, then backspace.")
        await tools["type_text"].run({"text": "new"})
        assert await computer.page.input_value("#f") == "new"
        r = await tools["scroll"].run({"x": 400, "y": 300, "direction": "down", "amount": 2})
        assert r.text.splitlines()[1].startswith("The ")  # a gradient page: the view changed
        await computer.page.wait_for_function("window.scrollY === 200")  # smooth scrolling may animate
        await computer.page.evaluate("window.drag = []")
        r = await tools["drag"].run({"path": [[400, 300], [450, 320], [500, 400]]})
        assert await computer.page.evaluate("window.drag") == [["down", 400, 300], ["up", 500, 400]]
        assert r.text.startswith("Dragged from (400, 300) through (450, 320) to (500, 400).")


def test_prepared_image_in_tool_results_is_the_model_image() -> None:
    prepared = prepare_image(Image.new("RGB", (2048, 1536), "red"), SMALL)
    result = ToolResult.from_value(["text", prepared])
    assert isinstance(result.content, list) and isinstance(result.content[1], ImagePart)
    assert images_in([ToolMessage(content=result.content, tool_call_id="c")])[0].size == (1280, 960)
    assert isinstance(prepared, PreparedImage)


# -- the example -----------------------------------------------------------------------------


async def test_example_fills_and_submits_the_form(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _ensure_system("chromium")
    pytest.importorskip("playwright", reason="playwright is not installed (pip install -e '.[dev]')")
    path = ROOT / "examples" / "ui_automation.py"
    spec = importlib.util.spec_from_file_location("ui_automation_example", path)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)  # import-safe: nothing runs
    assert capsys.readouterr().out == ""

    script = Script([])
    click_on = functools.partial(script.click_on, tol=10)
    script.steps = [
        lambda shot: call("screenshot"),
        click_on((0xFF, 0xF3, 0xB0)),  # the pale yellow name field
        lambda shot: call("type_text", text="Ada Lovelace"),
        click_on((0xCF, 0xE8, 0xFF)),  # the pale blue email field
        lambda shot: call("type_text", text="ada@example.org"),
        click_on((0x2E, 0x7D, 0x32)),  # the green Subscribe button
        lambda shot: answer("Subscribed Ada Lovelace <ada@example.org>."),
    ]
    monkeypatch.setattr(example, "make_engine", lambda: ScriptedEngine(script))
    received = await example.main("Ada Lovelace", "ada@example.org")
    assert received == [{"name": "Ada Lovelace", "email": "ada@example.org"}]
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "tool screenshot {}"
    assert out[1] == "  -> Screenshot: 1024x768 pixels. Give positions in pixels of this image."
    assert out[4] == 'tool type_text {"text": "Ada Lovelace"}'
    assert out[5] == '  -> Typed 12 characters: "Ada Lovelace".'
    assert "Subscribed Ada Lovelace <ada@example.org>." in out
    assert out[-1] == "server received: [{'name': 'Ada Lovelace', 'email': 'ada@example.org'}]"
    assert script.images_per_call == [0, 1, 2, 3, 4, 5, 6]  # ContextPolicy(max_images=3): pruned after 6


async def test_an_x_display_over_8k_is_refused_before_any_grab() -> None:
    # a variant of A30 (a40c): not a browser page but an X display of 9000x4000 (36,000,000 pixels):
    # its size is asked first (xdotool getdisplaygeometry), nothing is grabbed
    from kimik3 import ToolError
    from kimik3.tools.ui import X11Computer

    _ensure_system("Xvfb", "xdotool")
    read_fd, write_fd = os.pipe()
    proc = subprocess.Popen(["Xvfb", "-displayfd", str(write_fd), "-screen", "0", "9000x4000x8", "-nolisten", "tcp"],
                            pass_fds=(write_fd,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(write_fd)
    try:
        with os.fdopen(read_fd) as f:
            display = f":{f.readline().strip()}"
        grabbed: list[object] = []
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr("PIL.ImageGrab.grab", lambda *a, **k: grabbed.append(k))
            with pytest.raises(ToolError) as e:
                await X11Computer(display).screenshot()
        assert grabbed == [] and str(e.value) == (
            f"X display {display} is 9000x4000 pixels, over the 33,177,600-pixel (8K UHD) limit; not grabbed")
    finally:
        proc.terminate()
        proc.wait(10)
