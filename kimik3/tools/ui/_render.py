"""A trajectory for people: one self-contained HTML page, or an animated GIF.

Each step shows its ``before`` screenshot with the action drawn on it (a red ring at a click, two
for a double click, the path of a drag from a green start to a red end, an arrow for a scroll, a
banner with the typed text or the keys) and, on the page, the model's reasoning and call beside it.

A screenshot whose header gives more pixels than
:data:`~kimik3.tools.ui._records.MAX_SCREENSHOT_PIXELS` (or Pillow's decompression-bomb limit) is
never decoded: its place shows a grey frame saying why (on the page, the reason in text too).
"""

from __future__ import annotations

import base64
import html
import io
import json
import os
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from ..._exceptions import TrajectoryError
from ._trajectory import Trajectory, TrajectoryStep, load_trajectory

__all__ = ["annotate_step", "render_gif", "render_html"]

RED, GREEN, BANNER = (230, 20, 20), (20, 170, 20), (255, 235, 59)
_PAGE_WIDTH = 1280  # widest screenshot on the page, in pixels
_GIF_WIDTH = 800


def _scaled(image: Image.Image, width: int) -> tuple[Image.Image, float]:
    if image.width <= width:
        return image.copy(), 1.0
    f = width / image.width
    return image.resize((width, max(1, round(image.height * f))), Image.Resampling.LANCZOS), f


def annotate_step(image: Image.Image, step: TrajectoryStep, width: int | None = None) -> Image.Image:
    """``image`` (the step's screenshot, screen pixels) with the step's action drawn on it.

    Args:
        image: the screenshot (not modified).
        step: the action to draw.
        width: shrink the result to at most this width first (positions follow).

    Returns:
        An RGB image.
    """
    out, f = _scaled(image.convert("RGB"), width or image.width)
    draw = ImageDraw.Draw(out)
    unit = max(2, round(min(out.size) / 60))
    font = ImageFont.load_default(size=max(12, unit * 3))
    s = step.screen

    def ring(x: float, y: float, r: int) -> None:
        draw.ellipse((x - r, y - r, x + r, y + r), outline=RED, width=max(2, unit // 2))

    if "x" in s:
        x, y = s["x"] * f, s["y"] * f
        ring(x, y, unit * 3)
        draw.line((x - unit, y, x + unit, y), fill=RED, width=2)
        draw.line((x, y - unit, x, y + unit), fill=RED, width=2)
        if step.action == "double_click":
            ring(x, y, unit * 5)
        if step.action == "scroll":
            dx, dy = step.args["dx"], step.args["dy"]
            n = max(1.0, (dx * dx + dy * dy) ** 0.5)
            tip = (x + dx / n * unit * 8, y + dy / n * unit * 8)
            draw.line((x, y, *tip), fill=RED, width=max(2, unit // 2))
            ring(tip[0], tip[1], unit)
    elif "path" in s:
        points = [(px * f, py * f) for px, py in s["path"]]
        draw.line(points, fill=RED, width=max(2, unit // 2), joint="curve")
        for (px, py), colour in ((points[0], GREEN), (points[-1], RED)):
            draw.ellipse((px - unit, py - unit, px + unit, py + unit), fill=colour)
    if step.action in ("type_text", "key"):
        label = step.describe()
        box = draw.textbbox((unit, unit), label, font=font)
        draw.rectangle((box[0] - unit // 2, box[1] - unit // 2, box[2] + unit // 2, box[3] + unit // 2), fill=BANNER)
        draw.text((unit, unit), label, fill=(0, 0, 0), font=font)
    return out


def _note(text: str, traj: Trajectory, width: int) -> Image.Image:
    """A grey frame of the recorded screen's shape (``width`` wide) that says ``text``."""
    sw, sh = traj.screen_size
    width = min(width, max(320, sw))
    out = Image.new("RGB", (width, max(120, min(2 * width, round(width * sh / max(1, sw))))), (225, 225, 225))
    draw = ImageDraw.Draw(out)
    font = ImageFont.load_default(size=16)
    words, lines = text.split(), [""]
    for word in words:  # wrapped to the frame
        line = f"{lines[-1]} {word}".strip()
        if lines[-1] and draw.textlength(line, font=font) > width - 24:
            lines.append(word)
        else:
            lines[-1] = line
    draw.multiline_text((12, 12), "\n".join(lines), fill=(90, 0, 0), font=font)
    return out


def _shot(traj: Trajectory, name: str, width: int, step: TrajectoryStep | None = None) -> tuple[Image.Image, str]:
    """Screenshot ``name`` shrunk to ``width`` (with ``step`` drawn on it), and a note: why it is
    not shown ("" when it is)."""
    why = traj.oversized(name)
    if why is not None:
        return _note(why, traj, width), why
    image = traj.image(name)
    return (annotate_step(image, step, width) if step is not None else _scaled(image, width)[0]), ""


def _data_url(image: Image.Image) -> str:
    buf = io.BytesIO()
    image.save(buf, "JPEG", quality=85)
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


_STYLE = """body{font-family:sans-serif;margin:24px;background:#f6f6f6;color:#111}
.step,.end{background:#fff;border:1px solid #ddd;border-radius:6px;margin:0 0 24px;padding:12px}
.row{display:flex;gap:16px;align-items:flex-start}.row img{max-width:70%;height:auto;border:1px solid #ccc}
.side{flex:1;min-width:240px}.note{color:#900;font-weight:bold}pre{white-space:pre-wrap;word-break:break-word;background:#f0f0f0;padding:8px}
h1{font-size:22px}h2{font-size:18px;margin:0 0 8px}.meta{color:#555;font-size:13px}"""


def render_html(trajectory: Trajectory | str | os.PathLike[str], out: str | os.PathLike[str]) -> Path:
    """Write a recorded run as one self-contained HTML page (images inlined as data URLs).

    One ``<section class="step" id="step-N">`` per step: its ``before`` screenshot with the action
    drawn (:func:`annotate_step`), the action, the model's call and reasoning, and timings; then
    ``<section class="end">`` with the screen after the last step.

    Args:
        trajectory: a :class:`Trajectory` or its path.
        out: the HTML file to write.

    Returns:
        ``out`` as a Path.

    Raises:
        TrajectoryError: an unreadable trajectory or screenshot (one too large to decode is shown
            as a note instead, see the module docstring).
    """
    traj = trajectory if isinstance(trajectory, Trajectory) else load_trajectory(trajectory)
    esc = html.escape
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{esc(traj.path.parent.name)} - kimik3 "
             f"trajectory</title><style>{_STYLE}</style></head><body><h1>{len(traj.steps)} steps</h1>"
             f"<p class='meta'>{esc(json.dumps(traj.computer, ensure_ascii=False))}, screen "
             f"{traj.screen_size[0]}x{traj.screen_size[1]}</p>"]  # fmt: skip
    for step in traj.steps:
        shot, note = _shot(traj, step.before, _PAGE_WIDTH, step)
        model = f"<p class='note'>{esc(note)}</p>" if note else ""
        if step.model is not None:
            call = f"{step.model['tool']}({json.dumps(step.model['arguments'], ensure_ascii=False)})"
            model += f"<h3>Model call</h3><pre class='call'>{esc(call)}</pre>"
        reasoning = f"<h3>Reasoning</h3><pre class='reasoning'>{esc(step.reasoning)}</pre>" if step.reasoning else ""
        parts.append(
            f"<section class='step' id='step-{step.index}'><h2>Step {step.index}: {esc(step.describe())}</h2>"
            f"<div class='row'><img alt='step {step.index}' src='{_data_url(shot)}'><div class='side'>{model}"
            f"{reasoning}<p class='meta'>at {step.started_s:.2f} s, took {step.duration_s:.2f} s; "
            f"before: {esc(step.before)}, after: {esc(str(step.after))}</p></div></div></section>"
        )
    last = traj.end or (traj.steps[-1].after if traj.steps else None)
    if last is not None:
        end, note = _shot(traj, last, _PAGE_WIDTH)
        note = f"<p class='note'>{esc(note)}</p>" if note else ""
        parts.append(f"<section class='end'><h2>End state</h2>{note}<img alt='end' src='{_data_url(end)}'></section>")
    parts.append("</body></html>")
    path = Path(out)
    path.write_text("".join(parts), encoding="utf-8")
    return path


def render_gif(
    trajectory: Trajectory | str | os.PathLike[str], out: str | os.PathLike[str], *, frame_ms: int = 1200
) -> Path:
    """Write a recorded run as an animated GIF: one frame per step (:func:`annotate_step`, at most
    800 pixels wide), then the end state; looping.

    Args:
        trajectory: a :class:`Trajectory` or its path.
        out: the GIF file to write.
        frame_ms: how long each frame shows, in milliseconds.

    Returns:
        ``out`` as a Path.

    Raises:
        TrajectoryError: an unreadable trajectory or screenshot (one too large to decode is a
            frame saying so), or one without steps.
    """
    traj = trajectory if isinstance(trajectory, Trajectory) else load_trajectory(trajectory)
    frames = [_shot(traj, step.before, _GIF_WIDTH, step)[0] for step in traj.steps]
    last = traj.end or (traj.steps[-1].after if traj.steps else None)
    if traj.steps and last is not None:
        frames.append(_shot(traj, last, _GIF_WIDTH)[0])
    if not frames:
        raise TrajectoryError(f"{traj.path} has no steps to render")
    path = Path(out)
    frames[0].save(path, "GIF", save_all=True, append_images=frames[1:], duration=frame_ms, loop=0)
    return path
