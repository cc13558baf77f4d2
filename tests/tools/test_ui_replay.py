"""Trajectories (kimik3.tools.ui): record a scripted-model run through TrajectoryRecorder, replay it
without any model on a fresh screen (an in-memory canvas, a real Tk window on Xvfb, a real page in
headless Chromium), stop at the right step when the screen changed, and render the run as HTML
(checked in Chromium) and GIF."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from PIL import Image, ImageDraw

from kimik3 import Agent, ContextPolicy, ScriptedEngine, ToolError
from kimik3.agents import TurnEndEvent
from kimik3.engines import Usage
from kimik3.formats.k3 import ReasoningDelta
from kimik3.tools.ui import (
    BrowserComputer,
    ReplayMismatchError,
    TrajectoryError,
    TrajectoryRecorder,
    X11Computer,
    load_trajectory,
    render_gif,
    render_html,
    replay,
    screen_difference,
    ui_tools,
)
from kimik3.types import AssistantMessage

from .test_ui import (
    FORM,
    GREEN,
    RED,
    ROOT,
    SMALL,
    YELLOW,
    CanvasComputer,
    Script,
    Site,
    TkApp,
    _ensure_system,
    answer,
    call,
    find_colour,
    has_colour,
    shows,
)

# -- in memory -------------------------------------------------------------------------------


class MovedButton(CanvasComputer):
    """The canvas with its button 200 screen pixels further right (a changed screen)."""

    async def screenshot(self) -> Image.Image:
        im = Image.new("RGB", self._screen, (200, 200, 200))
        ImageDraw.Draw(im).rectangle((500, 200, 699, 299), fill=(0, 0, 220))
        return im


async def record_canvas(tmp_path: Path) -> tuple[Path, list[tuple[str, Any]]]:
    computer = CanvasComputer((800, 600), scale=2.0)  # 400x300 input units
    script = Script([
        lambda shot: call("screenshot"),
        lambda shot: call("click", x=400, y=250),
        lambda shot: call("type_text", text="hi"),
        lambda shot: call("drag", path=[[10, 10], [60, 40]]),
        lambda shot: answer("done"),
    ])  # fmt: skip
    async with TrajectoryRecorder(computer, tmp_path / "run") as recorder:
        agent = Agent(
            engine=ScriptedEngine(script), tools=ui_tools(recorder, settle=0), context=ContextPolicy(max_images=2)
        )
        async for event in agent.run_stream("press the button"):
            recorder.observe(event)
    assert computer.pressed
    return tmp_path / "run", computer.log


async def test_recorder_writes_actions_in_model_and_screen_space(tmp_path: Path) -> None:
    directory, log = await record_canvas(tmp_path)
    lines = [json.loads(line) for line in (directory / "trajectory.jsonl").read_text().splitlines()]
    assert lines[0] == {"type": "trajectory", "version": 1, "computer": {"kind": "CanvasComputer"},
                        "screen_size": [800, 600], "device_scale": 2.0}  # fmt: skip
    assert [line["type"] for line in lines] == ["trajectory", "step", "step", "step", "end"]
    click, typed, drag = lines[1:4]
    # the model clicked (400, 250) of the 800x600 image = screen pixel (400, 250) = input (200, 125)
    assert click["action"] == "click" and click["args"] == {"x": 200.0, "y": 125.0, "button": "left"}
    assert click["screen"] == {"x": 400, "y": 250}
    assert click["model"] == {"tool": "click", "arguments": {"x": 400, "y": 250, "button": "left"},
                              "model_size": [800, 600], "screen_size": [800, 600], "offset": [0, 0]}  # fmt: skip
    assert click["reasoning"] == "use click"  # from observe(ReasoningDelta)
    assert (click["before"], click["after"]) == ("shots/0001.png", "shots/0002.png")
    assert (typed["before"], typed["after"]) == ("shots/0002.png", "shots/0003.png")
    assert typed["args"] == {"text": "hi"} and typed["screen"] == {} and typed["reasoning"] == "use type_text"
    assert drag["args"] == {"path": [[5.0, 5.0], [30.0, 20.0]]} and drag["screen"] == {"path": [[10, 10], [60, 40]]}
    assert lines[4] == {"type": "end", "screenshot": "shots/0004.png"}
    assert [click["index"], typed["index"], drag["index"]] == [1, 2, 3]
    assert click["started_s"] <= typed["started_s"] <= drag["started_s"]
    shots = sorted(p.name for p in (directory / "shots").iterdir())
    assert shots == ["0001.png", "0002.png", "0003.png", "0004.png"]
    with Image.open(directory / "shots/0001.png") as first, Image.open(directory / "shots/0002.png") as second:
        assert first.getpixel((400, 250)) == (0, 0, 220) and second.getpixel((400, 250)) == (0, 160, 0)
    assert log == [("click", (200.0, 125.0, "left")), ("type_text", "hi"), ("drag", [(5.0, 5.0), (30.0, 20.0)])]
    with pytest.raises(TrajectoryError, match="exists"):
        TrajectoryRecorder(CanvasComputer(), directory)


async def test_replay_runs_the_same_actions_without_a_model(tmp_path: Path) -> None:
    directory, log = await record_canvas(tmp_path)
    fresh = CanvasComputer((800, 600), scale=2.0)
    seen: list[int] = []
    assert await replay(directory, fresh, on_step=lambda s: seen.append(s.index)) == 3
    assert seen == [1, 2, 3] and fresh.log == log and fresh.pressed


async def test_replay_stops_at_the_step_whose_screen_changed(tmp_path: Path) -> None:
    directory, _ = await record_canvas(tmp_path)
    moved = MovedButton((800, 600), scale=2.0)
    with pytest.raises(ReplayMismatchError) as caught:
        await replay(directory, moved, timeout=0.2, poll=0.05)
    err = caught.value
    assert err.step == 1 and moved.log == []  # nothing of step 1 ran
    assert err.region == (304, 154, 497, 347)  # 2 x 48 input units (device scale 2) around (400, 250)
    assert str(err).startswith("replay stopped at step 1 (click left at screen (400, 250)): the screen differs")
    # the same screen with another size differs everywhere
    with pytest.raises(ReplayMismatchError, match="step 1") as caught:
        await replay(directory, CanvasComputer((801, 600), scale=2.0), timeout=0.1, poll=0.05)
    assert caught.value.difference == 1.0
    # an end state that differs: the button starts pressed, so the click un-presses it
    pressed = CanvasComputer((800, 600), scale=2.0)
    pressed.pressed = True
    with pytest.raises(ReplayMismatchError, match="step 1"):
        await replay(directory, pressed, timeout=0.1, poll=0.05)


def test_screen_difference_and_unreadable_trajectories(tmp_path: Path) -> None:
    a = Image.new("RGB", (100, 100), (255, 255, 255))
    b = a.copy()
    ImageDraw.Draw(b).rectangle((0, 0, 9, 9), fill=(0, 0, 0))
    assert screen_difference(a, b) == 0.01
    assert screen_difference(a, b, (0, 0, 20, 20)) == 0.25
    assert screen_difference(a, b, (50, 50, 100, 100)) == 0.0
    c = a.copy()
    c.putpixel((50, 50), (230, 230, 230))  # 25 levels: under the threshold
    assert screen_difference(a, c) == 0.0
    with pytest.raises(TrajectoryError, match="cannot read trajectory"):
        load_trajectory(tmp_path / "nothing")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"type": "trajectory", "computer": {}, "screen_size": [1, 1], "device_scale": 1}\n{"type": "step"}\n'
    )
    with pytest.raises(TrajectoryError, match=r"bad.jsonl:2: not a trajectory record \(index: Field required"):
        load_trajectory(bad)
    bad.write_text("not json\n")
    with pytest.raises(TrajectoryError, match=r"bad\.jsonl:1"):
        load_trajectory(bad)
    assert issubclass(ReplayMismatchError, TrajectoryError) and issubclass(TrajectoryError, ToolError)


async def test_recorder_without_an_agent_and_html_escaping(tmp_path: Path) -> None:
    # any code driving a Computer can record: here plain calls, with reasoning fed by hand
    computer = CanvasComputer((800, 600))
    async with TrajectoryRecorder(computer, tmp_path / "plain") as recorder:
        recorder.observe(ReasoningDelta(delta="<script>alert(1)</script> & "))
        recorder.observe(ReasoningDelta(delta="press it"))
        await recorder.click(400, 250)
        recorder.observe(TurnEndEvent(1, AssistantMessage(content="x"), Usage()))  # the next turn has no reasoning
        await recorder.key([("ctrl", "a")])  # no screenshot in between: a fresh one is taken
    traj = load_trajectory(tmp_path / "plain")
    assert [(s.action, s.before, s.after) for s in traj.steps] == [
        ("click", "shots/0001.png", "shots/0002.png"),
        ("key", "shots/0002.png", "shots/0003.png"),  # the last one at close
    ]
    assert traj.end == "shots/0003.png" and traj.steps[0].model is None
    assert traj.steps[0].reasoning == "<script>alert(1)</script> & press it" and traj.steps[1].reasoning is None
    assert traj.steps[1].describe() == "key ctrl+a"
    html = render_html(traj, tmp_path / "plain.html").read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; press it" in html and "<script" not in html
    # a missing screenshot, a directory that cannot hold a trajectory, nothing to render
    (tmp_path / "plain" / "shots" / "0002.png").unlink()
    with pytest.raises(TrajectoryError, match=r"cannot read screenshot shots/0002\.png"):
        await replay(traj, CanvasComputer((800, 600)), timeout=0.1)
    (tmp_path / "file").write_text("")
    with pytest.raises(TrajectoryError, match="cannot write a trajectory into"):
        TrajectoryRecorder(computer, tmp_path / "file")
    async with TrajectoryRecorder(computer, tmp_path / "empty"):
        pass
    assert load_trajectory(tmp_path / "empty").steps == ()
    with pytest.raises(TrajectoryError, match="has no steps to render"):
        render_gif(tmp_path / "empty", tmp_path / "empty.gif")


# -- X11: a real Tk window on Xvfb -----------------------------------------------------------


async def test_x11_record_then_replay_on_a_new_tk_window(xvfb: str, tmp_path: Path) -> None:
    app = TkApp(xvfb)
    try:
        computer = X11Computer(xvfb)
        script = Script([])
        script.steps = [
            lambda shot: call("screenshot"),
            script.click_on(RED),
            script.click_on(YELLOW),
            lambda shot: call("type_text", text="hello k3"),
            lambda shot: call("key", keys="Return"),
            lambda shot: answer("done"),
        ]
        async with TrajectoryRecorder(computer, tmp_path / "tk") as recorder:
            agent = Agent(engine=ScriptedEngine(script), tools=ui_tools(recorder, settle=0.2, media_config=SMALL))
            assert (await agent.run("go")).output == "done"
        assert app.wait_for(lambda e: e["event"] == "submit") == {"event": "submit", "value": "hello k3"}
    finally:
        app.close()
    traj = load_trajectory(tmp_path / "tk")
    assert [s.action for s in traj.steps] == ["click", "click", "type_text", "key"]
    assert traj.computer == {"kind": "x11", "display": xvfb} and traj.screen_size == (2048, 1536)
    assert traj.steps[3].args == {"combos": [["enter"]]}

    replayed = TkApp(xvfb)  # a new window: "clicked 0", an empty entry
    try:
        assert await replay(traj, X11Computer(xvfb)) == 4
        press = replayed.wait_for(lambda e: e["event"] == "press")
        assert (press["x"], press["y"]) == (traj.steps[0].screen["x"], traj.steps[0].screen["y"])
        assert replayed.wait_for(lambda e: e["event"] == "click") == {"event": "click", "count": 1}
        assert replayed.wait_for(lambda e: e["event"] == "submit") == {"event": "submit", "value": "hello k3"}
    finally:
        replayed.close()


# -- browser: a real page in headless Chromium -----------------------------------------------

MOVED_BUTTON = FORM.replace(b"top: 220px; width: 200px", b"top: 420px; width: 200px")
MOVED_FIELD = FORM.replace(b"left: 100px; top: 120px", b"left: 500px; top: 120px")
RELABELLED = FORM.replace(b">Send</button>", b">Pay now</button>")


async def record_form(site: Site, directory: Path) -> None:
    async with BrowserComputer(f"{site.url}/", viewport=(800, 600), device_scale_factor=1.5) as computer:
        script = Script([])
        script.steps = [
            lambda shot: call("screenshot"),
            script.click_on(YELLOW),
            lambda shot: call("type_text", text="Ada Lovelace"),
            script.click_on(GREEN),
            shows((0, 0, 0xCC), lambda shot: answer("submitted")),
        ]
        async with TrajectoryRecorder(computer, directory) as recorder:
            agent = Agent(engine=ScriptedEngine(script), tools=ui_tools(recorder, settle=0.2, media_config=SMALL))
            async for event in agent.run_stream("Enter Ada Lovelace and submit."):
                recorder.observe(event)
    assert site.submissions == [{"name": ["Ada Lovelace"]}]


@pytest.fixture
async def form_run(site: Site, tmp_path: Path) -> Path:
    await record_form(site, tmp_path / "form")
    return tmp_path / "form"


async def test_browser_replay_submits_the_form_again(site: Site, form_run: Path) -> None:
    traj = load_trajectory(form_run)
    assert [s.action for s in traj.steps] == ["click", "type_text", "click"]
    assert traj.computer == {
        "kind": "browser",
        "url": f"{site.url}/",
        "viewport": [800, 600],
        "device_scale_factor": 1.5,
    }
    async with BrowserComputer(f"{site.url}/", viewport=(800, 600), device_scale_factor=1.5) as computer:
        assert await replay(traj, computer) == 3
        assert await computer.page.inner_text("#thanks") == "Thanks, Ada Lovelace!"
    assert site.submissions == [{"name": ["Ada Lovelace"]}] * 2


@pytest.mark.parametrize(
    ("page", "step", "typed"),
    [(MOVED_BUTTON, 3, "Ada Lovelace"), (RELABELLED, 3, "Ada Lovelace"), (MOVED_FIELD, 1, "")],
)
async def test_browser_replay_stops_where_the_page_changed(
    site: Site, form_run: Path, page: bytes, step: int, typed: str
) -> None:
    site.form = page
    async with BrowserComputer(f"{site.url}/", viewport=(800, 600), device_scale_factor=1.5) as computer:
        with pytest.raises(ReplayMismatchError) as caught:
            await replay(form_run, computer, timeout=1.0)
        assert caught.value.step == step
        assert str(caught.value).startswith(f"replay stopped at step {step} (click left at screen (")
        assert await computer.page.input_value("#name") == typed  # the steps before it ran, it did not
    assert site.submissions == [{"name": ["Ada Lovelace"]}]  # only the recording submitted


def _kimik3(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "kimik3", *args], capture_output=True, text=True, env=env,
                          timeout=300, check=False)  # fmt: skip


async def test_cli_replay_and_html_page_in_a_real_browser(site: Site, form_run: Path, tmp_path: Path) -> None:
    out = _kimik3("replay", str(form_run))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("step 1: click left at screen (") and lines[1] == 'step 2: type "Ada Lovelace"'
    assert lines[-1] == "replayed 3 steps"
    assert site.submissions == [{"name": ["Ada Lovelace"]}] * 2

    site.form = MOVED_BUTTON
    out = _kimik3("replay", str(form_run / "trajectory.jsonl"), "--timeout", "1")
    assert out.returncode == 1
    assert out.stderr.startswith("error: ReplayMismatchError: replay stopped at step 3 (click left at screen (")

    page = tmp_path / "run.html"
    out = _kimik3("replay", str(form_run), "--html", str(page), "--gif", str(tmp_path / "run.gif"))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [f"wrote {page} (3 steps)", f"wrote {tmp_path / 'run.gif'} (3 steps)"]
    async with BrowserComputer(page.as_uri(), viewport=(1400, 900)) as browser:
        p = browser.page
        assert await p.locator("section.step").count() == 3
        assert await p.locator("section.end").count() == 1
        assert await p.locator("section.step h2").all_inner_texts() == [
            f"Step {s.index}: {s.describe()}" for s in load_trajectory(form_run).steps
        ]
        # every screenshot decoded (inline JPEG data URLs), at the recorded aspect ratio
        sizes = await p.eval_on_selector_all(
            "img", "els => els.map(e => [e.complete, e.naturalWidth, e.naturalHeight])"
        )
        assert sizes == [[True, 1200, 900]] * 4
        assert await p.locator("#step-2 .call").inner_text() == 'type_text({"text": "Ada Lovelace"})'
        assert await p.locator("#step-1 .reasoning").inner_text() == "use click"
        shot = await browser.screenshot()  # the page as a person sees it: step 1's red click ring
        assert has_colour(shot, (230, 20, 20), tol=50)


async def test_render_gif_and_html_directly(form_run: Path, tmp_path: Path) -> None:
    traj = load_trajectory(form_run)
    gif = render_gif(traj, tmp_path / "run.gif", frame_ms=500)
    with Image.open(gif) as im:
        assert im.n_frames == 4 and im.size == (800, 600) and im.info["duration"] == 500
        im.seek(0)
        frame = im.convert("RGB")
    # step 1's click, drawn at the screen position scaled to the 800-pixel-wide frame (1200 -> 800)
    x, y = traj.steps[0].screen["x"] * 800 // 1200, traj.steps[0].screen["y"] * 600 // 900
    ring = find_colour(frame.crop((x - 40, y - 40, x + 40, y + 40)), (230, 20, 20), tol=60)
    assert ring[2] - ring[0] > 20  # a ring around the point, not a stray pixel
    html = render_html(traj, tmp_path / "run.html").read_text()
    assert html.count("<section class='step'") == 3 and "<script" not in html
    sources = re.findall(r"src='([^']*)'", html)  # self-contained: every image inline
    assert len(sources) == 4 and all(src.startswith("data:image/jpeg;base64,") for src in sources)


# -- the example -----------------------------------------------------------------------------


async def test_example_records_then_replays_with_no_engine_calls(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    _ensure_system("chromium")
    pytest.importorskip("playwright", reason="playwright is not installed (pip install -e '.[dev]')")
    spec = importlib.util.spec_from_file_location(
        "ui_automation_example_replay", ROOT / "examples" / "ui_automation.py"
    )
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)

    script = Script([])
    script.steps = [
        lambda shot: call("screenshot"),
        script.click_on((0xFF, 0xF3, 0xB0), tol=10),
        lambda shot: call("type_text", text="Ada Lovelace"),
        script.click_on((0xCF, 0xE8, 0xFF), tol=10),
        lambda shot: call("type_text", text="ada@example.org"),
        script.click_on((0x2E, 0x7D, 0x32), tol=10),
        lambda shot: answer("Subscribed."),
    ]
    engines: list[ScriptedEngine] = []

    def make_engine() -> ScriptedEngine:
        engines.append(ScriptedEngine(script if not engines else []))
        return engines[-1]

    monkeypatch.setattr(example, "make_engine", make_engine)
    run = tmp_path / "form"
    assert await example.main("Ada Lovelace", "ada@example.org", record=str(run)) == [
        {"name": "Ada Lovelace", "email": "ada@example.org"}
    ]
    assert len(engines) == 1 and len(engines[0].calls) == 7
    assert [s.action for s in load_trajectory(run).steps] == ["click", "type_text", "click", "type_text", "click"]
    capsys.readouterr()

    # the second run: a new server and browser, the recorded actions, no model at all
    assert await example.main(replay_from=str(run)) == [{"name": "Ada Lovelace", "email": "ada@example.org"}]
    assert engines == [engines[0]] and len(engines[0].calls) == 7  # 0 engine calls in the replay
    out = capsys.readouterr().out.splitlines()
    assert out[1] == 'step 2: type "Ada Lovelace"' and out[3] == 'step 4: type "ada@example.org"'
    assert out[-2:] == [
        "replayed 5 steps without a model",
        "server received: [{'name': 'Ada Lovelace', 'email': 'ada@example.org'}]",
    ]
