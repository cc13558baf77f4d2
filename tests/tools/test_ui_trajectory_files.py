"""Crafted trajectory files (kimik3.tools.ui): every malformed line is a TrajectoryError naming
the file and line, from load_trajectory, render_html, render_gif, replay and `kimik3 replay`;
screenshots stay inside the trajectory directory; a step whose ``screen`` (where replay compares)
is not where its ``args`` (what replay performs) land is refused. Pure files, no browser."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from kimik3.tools.ui import (
    Trajectory,
    TrajectoryError,
    TrajectoryStep,
    load_trajectory,
    render_gif,
    render_html,
    replay,
)

from .test_ui import CanvasComputer

HEADER: dict[str, Any] = {"type": "trajectory", "version": 1, "computer": {"kind": "CanvasComputer"},
                          "screen_size": [64, 48], "device_scale": 2.0}  # fmt: skip


def step(**changes: Any) -> dict[str, Any]:
    s = {"type": "step", "index": 1, "action": "click", "args": {"x": 5.5, "y": 5, "button": "left"},
         "screen": {"x": 11, "y": 10}, "model": None, "reasoning": None, "before": "shots/0001.png",
         "after": "shots/0002.png", "started_s": 0.1, "duration_s": 0.01}  # fmt: skip
    return {**s, **changes}


def write(d: Path, *records: dict[str, Any], header: dict[str, Any] | None = None, raw: str | None = None) -> Path:
    (d / "shots").mkdir(parents=True, exist_ok=True)
    for n in ("0001.png", "0002.png"):
        Image.new("RGB", (64, 48), "white").save(d / "shots" / n)
    lines = [json.dumps(header or HEADER)] + [json.dumps(r) for r in records]
    (d / "trajectory.jsonl").write_text(raw if raw is not None else "\n".join(lines) + "\n")
    return d


CASES: dict[str, tuple[dict[str, Any], list[dict[str, Any]], str]] = {
    "header without screen_size": (
        {"type": "trajectory", "computer": {}, "device_scale": 1},
        [],
        r":1: not a trajectory record \(screen_size: Field required",
    ),
    "screen_size a string": ({**HEADER, "screen_size": "ab"}, [], r":1: .*screen_size: Input should be a valid list"),
    "computer a list": ({**HEADER, "computer": [1]}, [], r":1: .*computer: Input should be a valid dictionary"),
    "device_scale a string": (
        {**HEADER, "device_scale": "x"},
        [],
        r":1: .*device_scale: Input should be a valid number",
    ),
    "device_scale a boolean": ({**HEADER, "device_scale": True}, [], r":1: .*device_scale"),
    "screen.x a string": (HEADER, [step(screen={"x": "a", "y": 10})], r":2: .*step 1 \(click\): x: Input should be"),
    "screen without y": (HEADER, [step(screen={"x": 11})], r":2: .*step 1 \(click\): y: Field required"),
    "click args without y": (HEADER, [step(args={"x": 5.5})], r":2: .*step 1 \(click\): y: Field required"),
    "click x a boolean": (HEADER, [step(args={"x": True, "y": 5})], r":2: .*step 1 \(click\): x: Input should be"),
    "drag with an empty path": (
        HEADER,
        [step(action="drag", args={"path": []}, screen={"path": []})],
        r":2: .*step 1 \(drag\): path: List should have at least 2 items",
    ),
    "drag with one point": (
        HEADER,
        [step(action="drag", args={"path": [[1, 1]]}, screen={"path": [[2, 2]]})],
        r":2: .*step 1 \(drag\): path: List should have at least 2 items",
    ),
    "scroll without dx": (
        HEADER,
        [step(action="scroll", args={"x": 5.5, "y": 5, "dy": 1})],
        r":2: .*step 1 \(scroll\): dx: Field required",
    ),
    "key combos 5": (
        HEADER,
        [step(action="key", args={"combos": 5}, screen={})],
        r":2: .*step 1 \(key\): combos: Input should be a valid list",
    ),
    "key combo of numbers": (
        HEADER,
        [step(action="key", args={"combos": [[1]]}, screen={})],
        r":2: .*step 1 \(key\): combos.0.0: Input should be a valid string",
    ),
    "started_s 'soon'": (HEADER, [step(started_s="soon")], r":2: .*started_s: Input should be a valid number"),
    "before null": (HEADER, [step(before=None)], r":2: .*before: Input should be a valid string"),
    "before 5": (HEADER, [step(before=5)], r":2: .*before: Input should be a valid string"),
    "args [1, 2]": (HEADER, [step(args=[1, 2])], r":2: .*args: Input should be a valid dictionary"),
    "unknown action": (HEADER, [step(action="teleport")], r":2: .*action: Input should be 'click'"),
    "a step before the header": (
        {"type": "end", "screenshot": "shots/0001.png"},
        [],
        r":1: .*the first record must be the trajectory header",
    ),
    "absolute before": (HEADER, [step(before="/etc/hostname")], r":2: .*'/etc/hostname' is not a relative path"),
    "before with ..": (HEADER, [step(before="../x.png")], r":2: .*'\.\./x\.png' is not a relative path"),
    "absolute end": (HEADER, [step(), {"type": "end", "screenshot": "/tmp/x.png"}], r":3: .*'/tmp/x\.png'"),
    # the screen position replay compares is not where the args it performs land (2.0 device scale)
    "screen is not where args land": (
        HEADER,
        [step(screen={"x": 40, "y": 40})],
        r":2: .*its screen position \[40, 40\] is not where its args .* land "
        r"\(\[11, 10\] at device scale 2 on a 64x48 screen\)",
    ),
    "drag screen elsewhere": (
        HEADER,
        [step(action="drag", args={"path": [[1, 1], [4, 4]]}, screen={"path": [[2, 2], [30, 30]]})],
        r":2: .*its screen position \[\[2, 2\], \[30, 30\]\] is not where .*\[\[2, 2\], \[8, 8\]\]",
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_every_malformed_line_is_a_trajectory_error_naming_it(name: str, tmp_path: Path) -> None:
    header, steps, message = CASES[name]
    d = write(tmp_path / "t", *steps, header=header)
    for entry in (load_trajectory, lambda p: render_html(p, tmp_path / "o.html"),
                  lambda p: render_gif(p, tmp_path / "o.gif")):  # fmt: skip
        with pytest.raises(TrajectoryError, match=r"trajectory\.jsonl" + message):
            entry(d)
    assert not (tmp_path / "o.html").exists() and not (tmp_path / "o.gif").exists()


def test_a_well_formed_file_loads_and_renders(tmp_path: Path) -> None:
    scroll = step(index=2, action="scroll", args={"x": 31.9, "y": 100, "dx": 0, "dy": -3}, screen={"x": 63, "y": 47})
    d = write(tmp_path / "t", step(), scroll, {"type": "end", "screenshot": "shots/0002.png"})
    traj = load_trajectory(d)
    assert traj.screen_size == (64, 48) and traj.device_scale == 2.0 and traj.end == "shots/0002.png"
    assert [s.describe() for s in traj.steps] == [
        "click left at screen (11, 10)",
        "scroll (0, -3) notches at screen (63, 47)",
    ]
    assert render_html(d, tmp_path / "o.html").read_text().count("<section class='step'") == 2


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            json.dumps(HEADER) + "\n" + json.dumps(step()).replace('"x": 11', '"x": NaN'),
            r":2: .*NaN is not a JSON number",
        ),
        (json.dumps(HEADER) + "\n" + json.dumps(step())[:40], r":2: not a trajectory record \(Unterminated string"),
        (json.dumps(HEADER) + "\n[1, 2]\n", r":2: not a trajectory record \(unknown record type None"),
    ],
)
def test_broken_json_lines(raw: str, message: str, tmp_path: Path) -> None:
    with pytest.raises(TrajectoryError, match=message):
        load_trajectory(write(tmp_path / "t", raw=raw))


def test_not_utf8_and_decompression_bomb(tmp_path: Path) -> None:
    d = write(tmp_path / "bin")
    (d / "trajectory.jsonl").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(
        TrajectoryError, match=r"cannot read trajectory .*trajectory\.jsonl: 'utf-8' codec can't decode"
    ):
        load_trajectory(d)
    d = write(tmp_path / "bomb", step())
    Image.new("1", (20000, 20000)).save(d / "shots" / "0001.png")  # 400 M pixels, a few KB of PNG
    with pytest.raises(TrajectoryError, match=r"screenshot shots/0001\.png is not decoded: .*exceeds limit"):
        load_trajectory(d).image("shots/0001.png")
    page = render_html(d, tmp_path / "o.html").read_text()  # rendered with a note in its place, never decoded
    assert "<p class='note'>screenshot shots/0001.png is not decoded: Image size (400000000 pixels) exceeds limit" in page


def test_a_screenshot_symlinked_out_of_the_directory(tmp_path: Path) -> None:
    outside = tmp_path / "secret.png"
    Image.new("RGB", (64, 48), "red").save(outside)
    d = write(tmp_path / "t", step(before="shots/link.png"))
    (d / "shots" / "link.png").symlink_to(outside)
    with pytest.raises(TrajectoryError, match=r":2: .*'shots/link\.png' leads outside the trajectory directory"):
        load_trajectory(d)
    (d / "shots" / "in.png").symlink_to(d / "shots" / "0001.png")  # a link that stays inside is fine
    write(d, step(before="shots/in.png"))
    assert load_trajectory(d).steps[0].before == "shots/in.png"


async def test_replay_refuses_a_hand_made_step_whose_screen_and_args_disagree(tmp_path: Path) -> None:
    d = write(tmp_path / "t", step())
    good = load_trajectory(d)
    lying = TrajectoryStep(1, "click", {"x": 5.5, "y": 5}, {"x": 40, "y": 40}, "shots/0001.png", None, 0.0, 0.0)
    traj = Trajectory(good.path, good.computer, good.screen_size, good.device_scale, (lying,))
    computer = CanvasComputer((64, 48))
    with pytest.raises(TrajectoryError, match=r"step 1 \(click\): its screen position \[40, 40\] is not where"):
        await replay(traj, computer, timeout=0)
    assert computer.log == []


def test_cli_prints_one_line_and_exits_1(tmp_path: Path) -> None:
    d = write(tmp_path / "t", step(screen={"x": "a", "y": 10}))
    r = subprocess.run([sys.executable, "-m", "kimik3", "replay", str(d), "--html", str(tmp_path / "o.html")],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [
        f"error: TrajectoryError: {d}/trajectory.jsonl:2: not a trajectory record (step 1 (click): x: Input should be "
        "a valid integer)"
    ]


@pytest.mark.parametrize(
    ("computer", "error"),
    [
        ({"kind": "browser", "url": "http://127.0.0.1:1/"}, "KeyError('viewport')"),
        ({"kind": "browser", "viewport": "ab", "device_scale_factor": 1}, "ValueError(\"invalid literal"),
        ({"kind": "browser", "viewport": [64, 48], "device_scale_factor": "x"}, 'ValueError("could not convert string to float'),
        ({"kind": "browser", "viewport": [64, 48], "device_scale_factor": -1},
         "device_scale_factor must be a finite number > 0, got -1.0"),
        # issue 40 (A30): a header asking for a screen whose every screenshot takes seconds and
        # hundreds of MB to decode is refused before anything starts; a variant by the scale factor
        ({"kind": "browser", "viewport": [20000, 20000], "device_scale_factor": 1},
         "a 20000x20000 viewport at device_scale_factor 1 takes screenshots of 400,000,000 pixels, over the "
         "33,177,600-pixel (8K UHD) limit"),
        ({"kind": "browser", "viewport": [1280, 800], "device_scale_factor": 8},
         "takes screenshots of 65,536,000 pixels"),
        ({"kind": "browser", "viewport": [64, 48], "device_scale_factor": "nan"},
         "device_scale_factor must be a finite number > 0, got nan"),
        ({"kind": "x11"}, "KeyError('display')"),
    ],
)
def test_a_header_computer_that_cannot_be_opened(computer: dict[str, Any], error: str, tmp_path: Path) -> None:
    from kimik3.tools.ui import computer_for

    traj = load_trajectory(write(tmp_path / "t", header={**HEADER, "computer": computer}))
    with pytest.raises(TrajectoryError) as e:
        computer_for(traj)
    assert str(e.value).startswith(f"{traj.path}: cannot open the recorded computer ") and error in str(e.value)


async def test_a_screenshot_over_8k_is_refused_from_its_header_not_decoded(monkeypatch: pytest.MonkeyPatch) -> None:
    # A30: whatever makes the page's screenshot huge, it is a ToolError before any pixel is decoded
    import io

    from PIL import Image

    from kimik3 import ToolError
    from kimik3.tools.ui import BrowserComputer

    buf = io.BytesIO()
    Image.new("1", (7000, 5000)).save(buf, "PNG")  # 35,000,000 pixels, a few KB
    png = buf.getvalue()

    class Page:
        async def screenshot(self, type: str) -> bytes:
            return png

    computer = BrowserComputer()
    computer._page = Page()  # type: ignore[assignment]
    decoded: list[object] = []
    monkeypatch.setattr(Image.Image, "convert", lambda self, *a, **k: decoded.append(self) or self)
    with pytest.raises(ToolError) as info:
        await computer.screenshot()
    assert str(info.value) == "the page's screenshot is 7000x5000 pixels, over the 33,177,600-pixel limit; not decoded"
    assert decoded == []
