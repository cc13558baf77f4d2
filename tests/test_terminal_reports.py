"""Terminals and reports (issue 26, item 7): ``kimik3 show`` prints recorded model text through
the same sanitiser as ``kimik3 run``'s live view, and ``kimik3 replay --html/--gif`` never
decodes a screenshot whose header is too large (memory checked in a child process)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from click.testing import CliRunner
from PIL import Image

from kimik3 import Agent, ScriptedEngine, tool
from kimik3.cli import main
from kimik3.formats.k3 import render_output
from kimik3.tools.ui import load_trajectory, render_gif, render_html
from kimik3.tools.ui._records import MAX_SCREENSHOT_PIXELS

ROOT = str(Path(__file__).resolve().parents[1])
# what a model (or a hand-edited session) can put in its text: a clipboard write, a link, a DCS
# string, C1 controls (8-bit CSI, OSC), a cursor move, a bidi override
HOSTILE = ("A\x1b]52;c;cm0gLXJmIH4=\x07B\x1b]8;;https://evil.example/\x1b\\C\x1b]8;;\x1b\\D\x1bP1$r0m\x1b\\E"
           "\x9d52;c;QQ==\x07F\x9b2JG\x1b[1AH\u202eI\x90q\x9cJ")  # fmt: skip
CLEAN = "ABCDEFGHIJ"
_ESCAPES = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


@tool
def echo(text: str) -> str:
    """Echo."""
    return text


async def test_show_strips_control_sequences_as_run_does(tmp_path: Path) -> None:
    session = tmp_path / "s.jsonl"
    engine = ScriptedEngine([
        render_output({"reasoning_content": f"think {HOSTILE}", "content": f"text {HOSTILE}",
                       "tool_calls": [{"id": "x", "function": {"name": "echo", "arguments": {"text": HOSTILE}}}]}),
        render_output({"reasoning_content": "r", "content": f"final {HOSTILE}"}),
    ])  # fmt: skip
    result = await Agent(tools=[echo], engine=engine).run(f"user {HOSTILE}", session=session)
    assert result.output == f"final {HOSTILE}"
    assert "\\u001b]52;c;cm0gLXJmIH4=" in session.read_text(encoding="utf-8")  # recorded as it came
    for flags in ([], ["--reasoning", "--full"]):
        shown = CliRunner().invoke(main, ["show", str(session), *flags], env={"KIMIK3_HOME": str(tmp_path / "h")})
        assert shown.exit_code == 0, shown.output
        out = shown.output
        assert not _ESCAPES.search(out), [c for c in out if _ESCAPES.match(c)]
        texts = [line for line in out.splitlines()  # a call's arguments are JSON: escaped (its wrapped
                 if "->" not in line and not line.startswith(" " * 8)]  # continuation lines too, indented 8)
        assert not [t for t in texts if "evil.example" in t or "cm0gLXJmIH4" in t or "QQ==" in t or "52;" in t]
        assert f"user {CLEAN}" in out and f"text {CLEAN}" in out and f"final {CLEAN}" in out
        assert f"    {CLEAN}" in out  # the tool's result
    assert f"think {CLEAN}" in CliRunner().invoke(main, ["show", str(session), "--reasoning"]).output


# -- replay reports --------------------------------------------------------------------------


def huge_png(path: Path, side: int = 12000) -> int:
    """A one-colour ``side`` x ``side`` PNG (12000: 144 M pixels in about 450 KB); its size."""
    Image.new("1", (side, side)).save(path, optimize=True)
    return path.stat().st_size


def trajectory(d: Path, huge: str = "before") -> Path:
    (d / "shots").mkdir(parents=True)
    for n in ("0001.png", "0002.png", "0003.png"):
        Image.new("RGB", (64, 48), "white").save(d / "shots" / n)
    big = {"before": "0001.png", "end": "0003.png"}[huge]
    huge_png(d / "shots" / big)
    header = {"type": "trajectory", "version": 1, "computer": {"kind": "CanvasComputer"}, "screen_size": [64, 48],
              "device_scale": 1.0}
    steps = [{"type": "step", "index": i, "action": "click", "args": {"x": 10, "y": 10, "button": "left"},
              "screen": {"x": 10, "y": 10}, "model": None, "reasoning": None, "before": f"shots/000{i}.png",
              "after": f"shots/000{i + 1}.png", "started_s": 0.1 * i, "duration_s": 0.01} for i in (1, 2)]
    lines = [header, *steps, {"type": "end", "screenshot": "shots/0003.png"}]
    (d / "trajectory.jsonl").write_text("\n".join(json.dumps(r) for r in lines) + "\n")
    return d


def test_an_oversized_screenshot_is_a_visible_note_not_a_decode(tmp_path: Path) -> None:
    d = trajectory(tmp_path / "t")
    assert (d / "shots" / "0001.png").stat().st_size < 600_000
    note = (f"screenshot shots/0001.png is not decoded: 12000x12000 pixels, over the {MAX_SCREENSHOT_PIXELS:,}-pixel "
            "limit")  # fmt: skip
    traj = load_trajectory(d)
    assert traj.oversized("shots/0001.png") == note and traj.oversized("shots/0002.png") is None
    page = render_html(d, tmp_path / "o.html").read_text()
    assert page.count("<section class='step'") == 2 and f"<p class='note'>{note}</p>" in page
    gif = Image.open(render_gif(d, tmp_path / "o.gif"))
    assert gif.n_frames == 3
    first = gif.convert("RGB")
    assert first.size == (320, 240) and first.getpixel((2, 2)) == (225, 225, 225)  # the grey note frame
    assert first.getpixel((200, 200)) == (225, 225, 225)
    result = CliRunner().invoke(main, ["replay", str(d), "--html", str(tmp_path / "c.html")])
    assert result.exit_code == 0 and "wrote" in result.output


def test_replay_refuses_to_decode_an_oversized_screenshot(tmp_path: Path) -> None:
    from kimik3.tools.ui import TrajectoryError

    traj = load_trajectory(trajectory(tmp_path / "t", huge="end"))
    try:
        traj.image("shots/0003.png")
    except TrajectoryError as e:
        assert str(e).startswith("screenshot shots/0003.png is not decoded: 12000x12000 pixels, over the ")
    else:
        raise AssertionError("decoded")


CHILD = textwrap.dedent("""
    import resource, sys
    sys.path.insert(0, ROOT)
    from kimik3.tools.ui import render_gif, render_html
    size = int(next(l for l in open("/proc/self/status") if l.startswith("VmSize:")).split()[1]) * 1024
    limit = size + 512 * 1024 ** 2  # 512 MiB more address space: one 12000x12000 RGB decode is 432 MB
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    render_html(DIR, OUT + ".html")
    render_gif(DIR, OUT + ".gif")
    # VmHWM: this process's peak resident memory (ru_maxrss would carry the forking parent's)
    print("ok", next(l for l in open("/proc/self/status") if l.startswith("VmHWM:")).split()[1])
""")


def test_rendering_oversized_screenshots_stays_within_memory(tmp_path: Path) -> None:
    d = trajectory(tmp_path / "t")
    huge_png(d / "shots" / "0002.png")
    huge_png(d / "shots" / "0003.png")
    code = CHILD.replace("ROOT", repr(ROOT)).replace("DIR", repr(str(d))).replace("OUT", repr(str(tmp_path / "o")))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": ROOT})
    assert proc.returncode == 0, proc.stderr[-2000:]
    status, peak_kb = proc.stdout.split()
    assert status == "ok" and int(peak_kb) < 400_000  # KB; a single decode of one screenshot is 432 MB
