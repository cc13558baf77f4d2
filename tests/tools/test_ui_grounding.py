"""Zoom, the screenshot token budget, and grounding beyond pixels (accessibility tree and
set-of-marks) of kimik3.tools.ui: on an in-memory canvas, a real Tk window on Xvfb, and real pages
in headless Chromium."""

from __future__ import annotations

from typing import Any

import pytest
from PIL import Image

from kimik3 import Agent, ScriptedEngine, ToolMessage, UserError
from kimik3.media import K3_MEDIA_CONFIG, MediaConfig, image_token_count
from kimik3.tools.ui import (
    BrowserComputer,
    CoordinateSpace,
    X11Computer,
    media_config_for_tokens,
    model_size_for,
    parse_aria_snapshot,
    ui_tools,
)
from kimik3.tools.ui._grounding import accessibility_text

from .test_ui import (
    FORM,
    RED,
    SMALL,
    CanvasComputer,
    Script,
    Site,
    TkApp,
    answer,
    call,
    centre,
    find_colour,
    images_in,
    tools_by_name,
)

BLUE = (0, 0, 220)


def image_of(content: Any) -> Image.Image:
    """The one image of a tool result, as the model receives it."""
    assert isinstance(content, list)
    images = images_in([ToolMessage(content=content, tool_call_id="c")])
    assert len(images) == 1
    return images[0]


# -- token budget ----------------------------------------------------------------------------


def test_token_budget_for_a_hidpi_screenshot() -> None:
    assert image_token_count(2880, 1800) == 6695  # K3 defaults send it unresized
    cfg = media_config_for_tokens(2880, 1800, 1500)
    assert cfg.in_patch_limit == 5728
    assert model_size_for(2880, 1800, cfg) == (1345, 840)
    assert image_token_count(1345, 840) == 1470  # what a K3 server charges for it
    bigger = cfg.model_copy(update={"in_patch_limit": 5729})  # the next budget up is over
    assert image_token_count(*model_size_for(2880, 1800, bigger)) == 1519
    assert media_config_for_tokens(800, 600, 1500) is K3_MEDIA_CONFIG  # fits already: unchanged
    assert media_config_for_tokens(2880, 1800, 100).in_patch_limit < 500
    with pytest.raises(ValueError, match="max_tokens"):
        media_config_for_tokens(10, 10, 0)
    with pytest.raises(ValueError, match="max_screenshot_tokens"):
        ui_tools(CanvasComputer(), max_screenshot_tokens=0)
    with pytest.raises(ValueError, match="grounding"):
        ui_tools(CanvasComputer(), grounding="pixels")  # type: ignore[arg-type]


async def test_budgeted_screenshot_and_click_on_a_hidpi_screen() -> None:
    # 2880x1800 screen pixels at device scale 2 (1440x900 input units), 1500 tokens at most
    computer = CanvasComputer((2880, 1800), scale=2.0)
    tools = tools_by_name(ui_tools(computer, settle=0, max_screenshot_tokens=1500))
    shot = await tools["screenshot"].run({})
    assert shot.text == "Screenshot: 1345x840 pixels. Give positions in pixels of this image."
    prepared = image_of(shot.content)
    assert prepared.size == (1345, 840) and image_token_count(*prepared.size) == 1470
    x, y = centre(find_colour(prepared, BLUE))  # the button, 300..499 x 200..299 on the screen
    r = await tools["click"].run({"x": x, "y": y})
    space = CoordinateSpace(screen_size=(2880, 1800), model_size=(1345, 840), device_scale=2.0)
    assert computer.log == [("click", (*space.to_input(x, y), "left"))] and computer.pressed
    assert r.text.splitlines()[0] == f"Clicked the left button at ({x}, {y})."
    assert image_of(r.content).size == (1345, 840)


# -- zoom ------------------------------------------------------------------------------------


async def test_zoom_shows_full_resolution_and_clicks_map_through_it() -> None:
    computer = CanvasComputer((2880, 1800), scale=2.0)
    tools = tools_by_name(ui_tools(computer, settle=0, max_screenshot_tokens=1500))
    await tools["screenshot"].run({})
    # the model's region x 100..299, y 50..149 of the 1345x840 image
    z = await tools["zoom"].run({"x": 100, "y": 50, "width": 200, "height": 100})
    space = CoordinateSpace(screen_size=(2880, 1800), model_size=(1345, 840), device_scale=2.0)
    (left, top), (right, bottom) = space.to_screen(100, 50), space.to_screen(299, 149)
    assert (left, top, right, bottom) == (215, 108, 641, 320)
    zoomed = image_of(z.content)
    assert zoomed.size == (right - left + 1, bottom - top + 1) == (427, 213)  # 1 pixel per screen pixel
    assert z.text == (
        "Zoomed into x 100..299, y 50..149 of the previous image: screen pixels 215..641, 108..320, shown at "
        "427x213 pixels (128 tokens). Positions now refer to this zoomed image until the next screenshot."
    )
    bl, bt, br, bb = find_colour(zoomed, BLUE)
    assert (bl + left, bt + top, br + left, bb + top) == (300, 200, 500, 300)  # exactly the button's pixels
    # a click chosen on the zoomed image lands on the screen pixel under it
    r = await tools["click"].run({"x": bl, "y": bt})
    assert computer.log[-1] == ("click", (300 / 2, 200 / 2, "left")) and computer.pressed
    assert r.text.splitlines()[0] == f"Clicked the left button at ({bl}, {bt})."
    # ... and the screenshot after the action is a whole screen again
    r = await tools["click"].run({"x": 1000, "y": 600})
    assert computer.log[-1] == ("click", (*space.to_input(1000, 600), "left"))
    # a region outside the image is an error; a region running off the edge is cut
    r = await tools["zoom"].run({"x": 1345, "y": 0, "width": 10, "height": 10})
    assert r.is_error and "outside the screenshot" in r.text
    r = await tools["zoom"].run({"x": 1300, "y": 800, "width": 500, "height": 500})
    assert r.text.startswith("Zoomed into x 1300..1344, y 800..839 of the previous image")


async def test_x11_click_chosen_on_a_zoomed_image_hits_the_tk_button(xvfb: str) -> None:
    app = TkApp(xvfb)  # the red Go button is at screen 100..259 x 120..179
    try:
        computer = X11Computer(xvfb)
        script = Script([])
        zoom_box: list[int] = []

        def zoom_on_red(shot: Image.Image | None) -> str:
            assert shot is not None and shot.size == (1280, 960)
            left, top, right, bottom = find_colour(shot, RED)
            zoom_box.extend([left - 20, top - 20, right - left + 40, bottom - top + 40])
            return call("zoom", x=left - 20, y=top - 20, width=right - left + 40, height=bottom - top + 40)

        script.steps = [lambda shot: call("screenshot"), zoom_on_red, script.click_on(RED), lambda shot: answer("ok")]
        agent = Agent(engine=ScriptedEngine(script), tools=ui_tools(computer, settle=0.2, media_config=SMALL))
        result = await agent.run("Click Go, zooming in first.")
        assert result.output == "ok"
        zoomed = images_in([m for m in result.messages if isinstance(m, ToolMessage)])[1]
        full = CoordinateSpace(screen_size=(2048, 1536), model_size=(1280, 960))
        x, y, w, h = zoom_box
        left, top = full.to_screen(x, y)
        right, bottom = full.to_screen(x + w - 1, y + h - 1)
        assert zoomed.size == (right - left + 1, bottom - top + 1)  # full screen resolution
        (cx, cy) = script.chosen[0]
        press = app.wait_for(lambda e: e["event"] == "press")
        assert (press["x"], press["y"]) == (left + cx, top + cy)
        assert 100 <= press["x"] < 260 and 120 <= press["y"] < 180
        assert app.wait_for(lambda e: e["event"] == "click") == {"event": "click", "count": 1}
        # X11 has no accessibility tree: grounding is an error result, not a crash
        tools = tools_by_name(ui_tools(computer, settle=0, grounding="marks"))
        r = await tools["screenshot"].run({})
        assert (
            r.is_error
            and r.text == "Error: ToolError: X11Computer has no accessibility tree (grounding needs a browser page)"
        )
    finally:
        app.close()


# -- grounding on browser pages --------------------------------------------------------------

GRID = """<!doctype html><html><head><style>body{margin:0;background:#fff;height:2000px}
button{position:absolute;width:90px;height:40px;border:0;background:#ddd;font-size:14px}</style></head><body>
%s<script>window.clicked = []; document.querySelectorAll("button").forEach(
  b => b.addEventListener("click", () => window.clicked.push(b.id)));</script></body></html>"""


def grid_page() -> str:
    buttons = [
        f'<button id="b{i + 1}" style="left:{20 + (i % 4) * 110}px;top:{20 + (i // 4) * 60}px">b{i + 1}</button>'
        for i in range(12)
    ]
    return GRID % "".join(buttons)


def test_parse_aria_snapshot() -> None:
    text = """- generic [active] [ref=e1] [box=40,40,720,120]:
  - heading "Join \\"us\\"" [level=1] [ref=e2] [box=40,40,720,38]
  - textbox "Name" [ref=e4] [box=87.5,99,179,21]
  - option "Two" [box=0,0,0,0]
  - button "Go" [ref=f2e7] [cursor=pointer] [box=10,20,30,40]
  - text: Name"""
    elements = parse_aria_snapshot(text)
    assert [(e.role, e.name, e.ref, e.box) for e in elements] == [
        ("generic", "", "e1", (40.0, 40.0, 720.0, 120.0)),
        ("heading", 'Join "us"', "e2", (40.0, 40.0, 720.0, 38.0)),
        ("textbox", "Name", "e4", (87.5, 99.0, 179.0, 21.0)),
        ("button", "Go", "f2e7", (10.0, 20.0, 30.0, 40.0)),
    ]
    # in a 100x100 view at device scale 2 shown at 50x50: boxes in model pixels, refs dropped
    space = CoordinateSpace(screen_size=(100, 100), model_size=(50, 50), device_scale=2.0)
    assert accessibility_text(text, space).splitlines()[1:] == [
        "- generic [active] [box=40,40,49,49]:",
        '  - heading "Join \\"us\\"" [level=1] [box=40,40,49,49]',
        '  - textbox "Name" [not in view]',
        '  - option "Two" [not in view]',
        '  - button "Go" [box=10,20,39,49]',
        "  - text: Name",
    ]


async def test_click_by_mark_lands_on_the_intended_element(site: Site) -> None:
    # device scale 1.5 and a smaller model image: marks are drawn and clicked through both mappings
    cfg = MediaConfig(in_patch_limit=2000)
    async with BrowserComputer(viewport=(480, 220), device_scale_factor=1.5) as computer:
        await computer.page.set_content(grid_page())
        tools = tools_by_name(ui_tools(computer, settle=0.05, media_config=cfg, grounding="marks"))
        assert list(tools)[-2:] == ["zoom", "click_mark"]
        shot = await tools["screenshot"].run({})
        w, h = model_size_for(720, 330, cfg)
        space = CoordinateSpace(screen_size=(720, 330), model_size=(w, h), device_scale=1.5)
        lines = shot.text.splitlines()
        assert lines[1] == "Numbered marks on interactive elements (click one with click_mark):"
        assert len(lines) == 14
        # mark 6 is button b6: CSS 130..219 x 80..119
        (l6, t6), (r6, b6) = space.input_to_model(130, 80), space.input_to_model(219.9, 119.9)
        assert lines[7] == f'[6] button "b6" at x {l6}..{r6}, y {t6}..{b6}'
        marked = image_of(shot.content)
        assert marked.getpixel((l6, t6 + 10)) == (0, 128, 128)  # mark 6's outline (the sixth colour)
        for mark in (1, 6, 12, 7):
            r = await tools["click_mark"].run({"mark": mark})
            assert r.text.startswith(f'Clicked mark {mark} (button "b{mark}") at (')
        assert await computer.page.evaluate("window.clicked") == ["b1", "b6", "b12", "b7"]
        r = await tools["click_mark"].run({"mark": 13})
        assert r.is_error and r.text == "Error: ToolError: no mark 13 on the latest screenshot; marks: 1..12"
        # scrolled by 70 CSS pixels: the first row left the view, the marks are numbered again
        await computer.page.evaluate("window.scrollTo(0, 70); window.clicked = []")
        shot = await tools["screenshot"].run({})
        lines = shot.text.splitlines()
        assert len(lines) == 10 and lines[2].startswith('[1] button "b5" at x ')
        await tools["click_mark"].run({"mark": 1})
        await tools["click_mark"].run({"mark": 8})
        assert await computer.page.evaluate("window.clicked") == ["b5", "b12"]


async def test_agent_fills_the_form_by_marks_and_reads_the_accessibility_tree(site: Site) -> None:
    async with BrowserComputer(f"{site.url}/", viewport=(800, 600), device_scale_factor=1.5) as computer:
        script = Script([
            lambda shot: call("screenshot"),
            lambda shot: call("click_mark", mark=1),  # the name field (document order)
            lambda shot: call("type_text", text="Grace Hopper"),
            lambda shot: call("click_mark", mark=2),  # Send
            lambda shot: answer("sent"),
        ])  # fmt: skip
        agent = Agent(
            engine=ScriptedEngine(script), tools=ui_tools(computer, settle=0.3, media_config=SMALL, grounding="marks")
        )
        result = await agent.run("Enter Grace Hopper and send.")
        assert result.output == "sent"
        assert site.submissions == [{"name": ["Grace Hopper"]}]
        first = next(m for m in result.messages if isinstance(m, ToolMessage))
        assert isinstance(first.content, list)
        # 800x600 CSS at 1.5 = 1200x900, not resized by SMALL: model pixels are screen pixels
        assert first.content[0].text.splitlines()[2:] == [  # type: ignore[union-attr]
            "[1] textbox at x 150..773, y 180..251",  # 400 + 2 x 8 padding CSS px,
            '[2] button "Send" at x 150..449, y 330..419',
        ]

        site.form = FORM
        await computer.goto(f"{site.url}/")
        tools = tools_by_name(
            ui_tools(computer, settle=0.05, media_config=MediaConfig(in_patch_limit=3000), grounding="accessibility")
        )
        shot = await tools["screenshot"].run({})
        w, h = model_size_for(1200, 900, MediaConfig(in_patch_limit=3000))
        space = CoordinateSpace(screen_size=(1200, 900), model_size=(w, h), device_scale=1.5)
        (bl, bt), (br, bb) = space.to_model(150, 330), space.to_model(449, 419)
        lines = shot.text.splitlines()
        assert lines[1] == 'Accessibility tree (role "name"; box=left,top,right,bottom in pixels of this screenshot):'
        assert f'    - button "Send" [box={bl},{bt},{br},{bb}]' in lines
        assert '  - heading "Sign up" [level=1] [box=' in shot.text and "[ref=" not in shot.text


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"grounding": "bogus"}, "grounding must be None, 'accessibility' or 'marks', got 'bogus'"),
        ({"settle": -1}, "settle must be a finite number of seconds >= 0, got -1"),
        ({"settle": float("nan")}, "settle must be a finite number of seconds >= 0, got nan"),
        ({"settle": True}, "settle must be a finite number of seconds >= 0, got True"),
        ({"max_wait": float("nan")}, "max_wait must be a finite number of seconds > 0, got nan"),
        ({"max_wait": float("inf")}, "max_wait must be a finite number of seconds > 0, got inf"),
        ({"max_wait": 0}, "max_wait must be a finite number of seconds > 0, got 0"),
        ({"max_wait": "5"}, "max_wait must be a finite number of seconds > 0, got '5'"),
        ({"max_screenshot_tokens": 0}, "max_screenshot_tokens must be an integer >= 1 or None, got 0"),
        ({"max_screenshot_tokens": float("nan")}, "max_screenshot_tokens must be an integer >= 1 or None, got nan"),
        ({"max_screenshot_tokens": 1500.5}, "max_screenshot_tokens must be an integer >= 1 or None, got 1500.5"),
        ({"max_screenshot_tokens": True}, "max_screenshot_tokens must be an integer >= 1 or None, got True"),
    ],
)
def test_ui_tools_misuse_is_a_user_error(options: dict[str, Any], message: str) -> None:
    with pytest.raises(UserError) as e:
        ui_tools(CanvasComputer(), **options)
    assert str(e.value) == f"ui_tools: {message}"
    assert [t.name for t in ui_tools(CanvasComputer(), settle=0, max_wait=1, max_screenshot_tokens=1)][:2] == [
        "screenshot",
        "click",
    ]


async def test_booleans_are_not_marks_or_pixels() -> None:
    computer = CanvasComputer()
    tools = {t.name: t for t in ui_tools(computer, grounding="marks")}
    for name, args, field in (("click_mark", {"mark": True}, "mark"), ("click", {"x": True, "y": 5}, "x")):
        result = await tools[name].run(args)
        assert result.is_error and result.content == (
            f"Error: ToolArgumentsError: {field}: Input should be a number, not a boolean (got True)"
        )
    assert computer.log == []  # nothing was clicked
