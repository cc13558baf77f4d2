"""Trajectories of UI runs: record every action a :class:`Computer` performs, replay it without a model.

A trajectory is a directory: ``trajectory.jsonl`` (a header line, then one line per step) and the
screenshots, ``shots/NNNN.png`` (screen pixels, as captured). A step line::

    {"type": "step", "index": 1, "action": "click",
     "args": {"x": 120.0, "y": 64.0, "button": "left"},        # what the Computer got (input units)
     "screen": {"x": 240, "y": 128},                             # the same position in screen pixels
     "model": {"tool": "click", "arguments": {"x": 150, "y": 80}, "model_size": [1280, 960],
               "screen_size": [2048, 1536], "offset": [0, 0]},   # what the model asked (ui_tools), or null
     "reasoning": "...",                                         # the model's think text, or null
     "before": "shots/0001.png", "after": "shots/0002.png",      # the screen before and after
     "started_s": 3.25, "duration_s": 0.08}                      # seconds since the recording began

and a last line ``{"type": "end", "screenshot": "shots/0009.png"}`` (the end state) once the
recording is closed.

Before each step :func:`replay` waits (up to ``timeout``) until the screen matches the recorded
``before`` over the step's target region (a square around the pointer or the path of a drag; for
keys and text, around where the latest pointer step put the focus): the fraction of pixels of that
region whose strongest channel differs by more than 32 (of 255) must be at most ``tolerance``.
Otherwise it stops with :class:`~kimik3.ReplayMismatchError` naming the step.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
from PIL import Image, ImageChops
from pydantic import ValidationError

from ..._exceptions import ReplayMismatchError, ToolError, TrajectoryError
from ...formats.k3 import ReasoningDelta
from ._computer import Computer, KeyCombo, MouseButton
from ._records import (
    MAX_SCREENSHOT_PIXELS,
    EndRecord,
    HeaderRecord,
    StepRecord,
    TrajectoryStep,
    check_step,
    oversized,
    path_inside,
    screen_point,
    validation_errors,
)

__all__ = [
    "MAX_SCREENSHOT_PIXELS",
    "TRAJECTORY_FILE",
    "Trajectory",
    "TrajectoryRecorder",
    "TrajectoryStep",
    "check_step",
    "computer_for",
    "load_trajectory",
    "replay",
    "screen_difference",
    "screen_point",
]

TRAJECTORY_FILE = "trajectory.jsonl"
_LEVEL = 32  # a channel must differ by more than this (0-255) for a pixel to count as changed
_RADIUS = 48  # half the side of the region checked around a pointer target, in input units
_VERSION = 1


@dataclass(frozen=True)
class Trajectory:
    """A recorded run, as :func:`load_trajectory` reads it.

    Attributes:
        path: the ``trajectory.jsonl`` file.
        computer: how to open the same screen again (:func:`computer_for`): ``{"kind": "browser",
            "url", "viewport", "device_scale_factor"}``, ``{"kind": "x11", "display"}`` or just
            ``{"kind": <class name>}``.
        screen_size: ``(width, height)`` of the screen in screen pixels when recording began.
        device_scale: screen pixels per input unit.
        steps: the actions, in order.
        end: the last screenshot taken before the recording stopped (the end state), or None
            when the recording was not closed.
    """

    path: Path
    computer: dict[str, Any]
    screen_size: tuple[int, int]
    device_scale: float
    steps: tuple[TrajectoryStep, ...]
    end: str | None = None

    @property
    def directory(self) -> Path:
        """The directory holding the JSONL file and the screenshots."""
        return self.path.parent

    def oversized(self, name: str) -> str | None:
        """Why screenshot ``name`` is not decoded (too many pixels, from its header), or None.

        Raises:
            TrajectoryError: ``name`` is not a relative path inside the trajectory directory.
        """
        return oversized(path_inside(self.directory, name, self.path), name)

    def image(self, name: str) -> Image.Image:
        """A recorded screenshot (RGB) by its relative path.

        Raises:
            TrajectoryError: the file is missing, unreadable, too large to decode (its header
                gives more than :data:`MAX_SCREENSHOT_PIXELS` pixels, checked before decoding),
                or ``name`` is not a relative path inside the trajectory directory (no absolute
                path, no ``..``, no symlink out).
        """
        target = path_inside(self.directory, name, self.path)
        too_large = oversized(target, name)
        if too_large is not None:
            raise TrajectoryError(f"{too_large} ({self.path})")
        try:
            with Image.open(target) as im:
                return im.convert("RGB")
        except (OSError, Image.DecompressionBombError) as e:
            raise TrajectoryError(f"cannot read screenshot {name} of {self.path}: {e}") from e


def load_trajectory(path: str | os.PathLike[str]) -> Trajectory:
    """Read a trajectory: its directory or its ``trajectory.jsonl``.

    Every line is validated here (the one boundary): the header first, then steps whose fields
    have the types of :class:`TrajectoryStep`, whose ``args`` fit their action and whose
    ``screen`` is where those args land (:func:`check_step`), and whose screenshots are relative
    paths inside the directory.

    Raises:
        TrajectoryError: no such file, not UTF-8, a line that is not JSON or not a valid record,
            no header (the message names the file and line).
    """
    p = Path(path)
    if p.is_dir():
        p = p / TRAJECTORY_FILE
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise TrajectoryError(f"cannot read trajectory {p}: {e}") from e
    header: HeaderRecord | None = None
    end: str | None = None
    steps: list[TrajectoryStep] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line, parse_constant=_no_constant)
            kind = record.get("type") if isinstance(record, dict) else None
            if header is None and kind != "trajectory":
                raise ValueError("the first record must be the trajectory header")
            if kind == "trajectory":
                if header is not None:
                    raise ValueError("a second trajectory header")
                header = HeaderRecord.model_validate(record)
            elif kind == "step":
                assert header is not None  # the first record is the header (checked above)
                r = StepRecord.model_validate(record)
                step = TrajectoryStep(r.index, r.action, r.args, r.screen, r.before, r.after, r.started_s,
                                      r.duration_s, r.model, r.reasoning)  # fmt: skip
                size = (header.screen_size[0], header.screen_size[1])
                check_step(step, size, header.device_scale)
                for shot in (r.before, r.after):
                    if shot is not None:
                        path_inside(p.parent, shot, f"step {r.index}")
                steps.append(step)
            elif kind == "end":
                end = EndRecord.model_validate(record).screenshot
                path_inside(p.parent, end, "end")
            else:
                raise ValueError(f"unknown record type {kind!r}")
        except ValidationError as e:
            raise TrajectoryError(f"{p}:{number}: not a trajectory record ({validation_errors(e)})") from e
        except (ValueError, TrajectoryError) as e:
            raise TrajectoryError(f"{p}:{number}: not a trajectory record ({e})") from e
    if header is None:
        raise TrajectoryError(f"{p}: no trajectory header line")
    w, h = header.screen_size
    return Trajectory(p, dict(header.computer), (w, h), header.device_scale, tuple(steps), end)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _describe_computer(computer: Computer) -> dict[str, Any]:
    from ._browser import BrowserComputer
    from ._x11 import X11Computer

    if isinstance(computer, BrowserComputer):
        try:
            url: str | None = computer.page.url
        except ToolError:
            url = computer.url
        return {"kind": "browser", "url": url, "viewport": list(computer.viewport),
                "device_scale_factor": computer.device_scale_factor}  # fmt: skip
    if isinstance(computer, X11Computer):
        return {"kind": "x11", "display": computer.display}
    return {"kind": type(computer).__name__}


def computer_for(trajectory: Trajectory, *, url: str | None = None, display: str | None = None) -> Computer:
    """A new (not yet started) :class:`Computer` like the one a trajectory was recorded on.

    Args:
        trajectory: the recording.
        url: open this page instead of the recorded one (browser trajectories).
        display: use this X display instead of the recorded one (X11 trajectories).

    Raises:
        TrajectoryError: the trajectory was recorded on another kind of computer (give it your
            own instance: ``replay(trajectory, computer)``), or its header's computer lacks or
            garbles a field (viewport, device_scale_factor, display).
    """
    from ._browser import BrowserComputer
    from ._x11 import X11Computer

    c = trajectory.computer
    try:
        if c.get("kind") == "browser":
            vw, vh = c["viewport"]
            return BrowserComputer(url or c.get("url"), viewport=(int(vw), int(vh)),
                                   device_scale_factor=float(c["device_scale_factor"]))  # fmt: skip
        if c.get("kind") == "x11":
            return X11Computer(display or c["display"])
    except (KeyError, TypeError, ValueError) as e:  # a header whose computer lacks or garbles a field
        raise TrajectoryError(f"{trajectory.path}: cannot open the recorded computer {c!r:.200}: {e!r}") from e
    raise TrajectoryError(f"{trajectory.path} was recorded on a {c.get('kind')!r}; replay it with your own computer")


class TrajectoryRecorder(Computer):
    """Wraps a :class:`Computer` and records every action through it into a trajectory directory.

    Works under any agent: pass the recorder where the computer would go (``ui_tools(recorder)``
    adds what the model asked, in its own pixels). Each action is written with the screenshot
    taken last before it (the one the model decided on; a fresh one when an action follows an
    action) and the first screenshot after it. Feed agent events to :meth:`observe` to keep the
    model's reasoning with each step. :meth:`aclose` (or leaving ``async with``) finishes the file;
    the wrapped computer stays open.

    Args:
        computer: the screen to drive.
        directory: created if needed; it must not already hold a trajectory unless ``overwrite``.
        overwrite: replace an existing trajectory in ``directory``.

    Raises:
        TrajectoryError: ``directory`` already holds a trajectory, or cannot be written.
    """

    def __init__(self, computer: Computer, directory: str | os.PathLike[str], *, overwrite: bool = False) -> None:
        self.inner = computer
        self.directory = Path(directory)
        self.path = self.directory / TRAJECTORY_FILE
        if self.path.exists() and not overwrite:
            raise TrajectoryError(f"{self.path} exists: record into another directory or pass overwrite=True")
        try:
            (self.directory / "shots").mkdir(parents=True, exist_ok=True)
            for old in (self.directory / "shots").glob("[0-9][0-9][0-9][0-9].png"):
                old.unlink()
            self._file = self.path.open("w", encoding="utf-8")
        except OSError as e:
            raise TrajectoryError(f"cannot write a trajectory into {self.directory}: {e}") from e
        self._t0 = time.monotonic()
        self._frames = 0
        self._frame: str | None = None  # the latest screenshot (relative path)
        self._pending: dict[str, Any] | None = None  # the last step, until a screenshot follows it
        self._steps = 0
        self._next_model: dict[str, Any] | None = None
        self._reasoning: list[str] = []
        self._turn_over = False
        self._write({"type": "trajectory", "version": _VERSION, "computer": _describe_computer(computer),
                     "screen_size": list(computer.size), "device_scale": computer.device_scale})  # fmt: skip

    def __repr__(self) -> str:
        return f"TrajectoryRecorder({self.inner!r}, {str(self.directory)!r})"

    @property
    def steps(self) -> int:
        """Actions recorded so far."""
        return self._steps

    def _write(self, record: dict[str, Any]) -> None:
        if self._file.closed:
            raise TrajectoryError(f"the trajectory {self.path} is closed")
        self._file.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._file.flush()

    def annotate_next(self, model: dict[str, Any]) -> None:
        """Attach what the model asked (tool, arguments in model pixels, space) to the next action."""
        self._next_model = model

    def observe(self, event: object) -> None:
        """Feed an agent event (:meth:`Agent.run_stream`): the reasoning of each turn is kept
        with the actions that turn makes. Other events are ignored."""
        if isinstance(event, ReasoningDelta):
            if self._turn_over:
                self._reasoning, self._turn_over = [], False
            self._reasoning.append(event.delta)
        elif getattr(event, "type", None) == "turn_end":
            self._turn_over = True

    # -- Computer ----------------------------------------------------------------------------

    @property
    def size(self) -> tuple[int, int]:
        return self.inner.size

    @property
    def device_scale(self) -> float:
        return self.inner.device_scale

    async def accessibility_snapshot(self) -> str:
        return await self.inner.accessibility_snapshot()

    async def screenshot(self) -> Image.Image:
        im = await self.inner.screenshot()
        self._frames += 1
        name = f"shots/{self._frames:04d}.png"
        target = self.directory / name
        try:
            await anyio.to_thread.run_sync(lambda: im.save(target, "PNG", compress_level=1))
        except OSError as e:
            raise TrajectoryError(f"cannot save screenshot {target}: {e}") from e
        self._frame = name
        if self._pending is not None:
            self._write({**self._pending, "after": name})
            self._pending = None
        return im

    async def _act(
        self, action: str, args: dict[str, Any], screen: dict[str, Any], do: Callable[[], Awaitable[None]]
    ) -> None:
        if self._pending is not None or self._frame is None:
            await self.screenshot()  # the screen before this action
        assert self._frame is not None
        started = time.monotonic()
        await do()
        self._steps += 1
        reasoning = None if self._turn_over else "".join(self._reasoning) or None  # a turn without reasoning: none
        self._pending = {
            "type": "step", "index": self._steps, "action": action, "args": args, "screen": screen,
            "model": self._next_model, "reasoning": reasoning, "before": self._frame, "after": None,
            "started_s": round(started - self._t0, 4), "duration_s": round(time.monotonic() - started, 4),
        }  # fmt: skip
        self._next_model = None

    def _screen(self, x: float, y: float) -> dict[str, int]:
        sx, sy = screen_point(x, y, self.size, self.device_scale)
        return {"x": sx, "y": sy}

    async def click(self, x: float, y: float, button: MouseButton = "left") -> None:
        await self._act(
            "click", {"x": x, "y": y, "button": button}, self._screen(x, y), lambda: self.inner.click(x, y, button)
        )

    async def double_click(self, x: float, y: float, button: MouseButton = "left") -> None:
        args = {"x": x, "y": y, "button": button}
        await self._act("double_click", args, self._screen(x, y), lambda: self.inner.double_click(x, y, button))

    async def type_text(self, text: str) -> None:
        await self._act("type_text", {"text": text}, {}, lambda: self.inner.type_text(text))

    async def key(self, combos: Sequence[KeyCombo]) -> None:
        await self._act("key", {"combos": [list(c) for c in combos]}, {}, lambda: self.inner.key(combos))

    async def scroll(self, x: float, y: float, dx: int, dy: int) -> None:
        args = {"x": x, "y": y, "dx": dx, "dy": dy}
        await self._act("scroll", args, self._screen(x, y), lambda: self.inner.scroll(x, y, dx, dy))

    async def drag(self, path: Sequence[tuple[float, float]]) -> None:
        screen = {"path": [list(self._screen(x, y).values()) for x, y in path]}
        await self._act("drag", {"path": [list(p) for p in path]}, screen, lambda: self.inner.drag(path))

    async def aclose(self) -> None:
        """Finish the trajectory: a last screenshot for an action not yet followed by one, the
        end record (the latest screenshot), then close the file (idempotent). The wrapped
        computer stays open."""
        if self._file.closed:
            return
        try:
            if self._pending is not None:
                await self.screenshot()
            if self._frame is not None:
                self._write({"type": "end", "screenshot": self._frame})
        finally:
            self._file.close()


# -- replay ----------------------------------------------------------------------------------


def screen_difference(
    expected: Image.Image, actual: Image.Image, region: tuple[int, int, int, int] | None = None
) -> float:
    """Fraction (0-1) of the pixels of ``region`` whose strongest channel differs by more than 32.

    Args:
        expected, actual: screenshots (any mode; compared as RGB).
        region: ``(left, top, right, bottom)`` in pixels (right/bottom exclusive); None: all.

    Returns:
        1.0 when the images have different sizes.
    """
    if expected.size != actual.size:
        return 1.0
    box = region or (0, 0, *expected.size)
    a, b = (im.convert("RGB").crop(box) for im in (expected, actual))
    r, g, bl = ImageChops.difference(a, b).split()
    strongest = ImageChops.lighter(ImageChops.lighter(r, g), bl)
    changed = sum(strongest.histogram()[_LEVEL + 1 :])
    return changed / max(1, a.width * a.height)


def _points(step: TrajectoryStep) -> list[list[int]]:
    s = step.screen
    return list(s.get("path") or ([[s["x"], s["y"]]] if "x" in s else []))


def target_region(
    step: TrajectoryStep, size: tuple[int, int], device_scale: float, focus: TrajectoryStep | None = None
) -> tuple[int, int, int, int]:
    """The screen region :func:`replay` compares before ``step``: a square of 2 x 48 input units
    around the pointer, or the bounding box of a drag path plus that margin. Keys and text go to
    what has the focus: the region of ``focus`` (the latest pointer step before, where the focus
    was put), or the whole screen when there is none."""
    w, h = size
    points = _points(step) or (_points(focus) if focus is not None else [])
    if not points:
        return 0, 0, w, h
    r = math.ceil(_RADIUS * device_scale)
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    return max(0, min(xs) - r), max(0, min(ys) - r), min(w, max(xs) + r + 1), min(h, max(ys) + r + 1)


async def _matches(
    computer: Computer, expected: Image.Image, region: tuple[int, int, int, int] | None,
    tolerance: float, timeout: float, poll: float,
) -> tuple[bool, float]:  # fmt: skip
    deadline = time.monotonic() + timeout
    while True:
        diff = screen_difference(expected, await computer.screenshot(), region)
        if diff <= tolerance or time.monotonic() >= deadline:
            return diff <= tolerance, diff
        await anyio.sleep(poll)


async def replay(
    trajectory: Trajectory | str | os.PathLike[str],
    computer: Computer,
    *,
    tolerance: float = 0.02,
    timeout: float = 10.0,
    poll: float = 0.1,
    check_end: bool = True,
    on_step: Callable[[TrajectoryStep], None] | None = None,
) -> int:
    """Run a recorded trajectory on ``computer`` again, without any model.

    Before each step the screen must match the step's ``before`` screenshot over its target
    region (:func:`target_region`: around the pointer, or for keys and text around where the
    latest pointer step put the focus; :func:`screen_difference` at most ``tolerance``); the screen
    is polled every ``poll`` seconds for up to ``timeout`` seconds (pages load, windows repaint).
    With ``check_end`` the screen after the last step must match the recorded end state (the
    last screenshot taken while recording) too.

    Args:
        trajectory: a :class:`Trajectory` or the path of one (directory or JSONL file).
        computer: a started computer showing the same screen as when recording began.
        tolerance: largest fraction of differing pixels that still matches (0-1).
        timeout: seconds to wait for a match before each step.
        poll: seconds between screenshots while waiting.
        check_end: also compare the end state.
        on_step: called with each step just before it runs.

    Returns:
        The number of steps run.

    Raises:
        ReplayMismatchError: the screen did not match in time; ``.step`` is the step not run
            (``len(steps) + 1`` for the end state), nothing of it was done.
        TrajectoryError: an unreadable trajectory or screenshot, an unknown action, or a step
            whose ``screen`` is not where its ``args`` land (:func:`check_step`).
        ToolError: the backend failed an action.
    """
    traj = trajectory if isinstance(trajectory, Trajectory) else load_trajectory(trajectory)
    for step in traj.steps:  # a Trajectory built by hand is checked too, before anything runs
        check_step(step, traj.screen_size, traj.device_scale)
    focus: TrajectoryStep | None = None  # the latest pointer step
    for step in traj.steps:
        expected = traj.image(step.before)
        region = target_region(step, expected.size, traj.device_scale, focus)
        focus = step if _points(step) else focus
        ok, diff = await _matches(computer, expected, region, tolerance, timeout, poll)
        if not ok:
            raise ReplayMismatchError(
                f"replay stopped at step {step.index} ({step.describe()}): the screen differs from the recorded "
                f"{step.before} in {diff:.1%} of the region x {region[0]}..{region[2] - 1}, "
                f"y {region[1]}..{region[3] - 1} (tolerance {tolerance:.1%}, waited {timeout:g} s)",
                step=step.index, difference=diff, region=region,
            )  # fmt: skip
        if on_step is not None:
            on_step(step)
        await _perform(computer, step)
    if check_end and traj.steps and traj.end is not None:
        expected = traj.image(traj.end)
        ok, diff = await _matches(computer, expected, None, tolerance, timeout, poll)
        if not ok:
            region = (0, 0, *expected.size)
            raise ReplayMismatchError(
                f"replay ran all {len(traj.steps)} steps but the end state differs from the recorded {traj.end} "
                f"in {diff:.1%} of the screen (tolerance {tolerance:.1%})",
                step=len(traj.steps) + 1, difference=diff, region=region,
            )  # fmt: skip
    return len(traj.steps)


async def _perform(computer: Computer, step: TrajectoryStep) -> None:
    a = step.args
    match step.action:
        case "click":
            await computer.click(a["x"], a["y"], a.get("button", "left"))
        case "double_click":
            await computer.double_click(a["x"], a["y"], a.get("button", "left"))
        case "type_text":
            await computer.type_text(a["text"])
        case "key":
            await computer.key([tuple(c) for c in a["combos"]])
        case "scroll":
            await computer.scroll(a["x"], a["y"], a["dx"], a["dy"])
        case "drag":
            await computer.drag([(p[0], p[1]) for p in a["path"]])
        case _:
            raise TrajectoryError(f"step {step.index}: unknown action {step.action!r}")
