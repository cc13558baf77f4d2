"""The JSON records of a trajectory file, validated at one place (:func:`load_trajectory`), and
the step they become (:class:`TrajectoryStep`).

Pydantic models per record (header, step, end) and per action's ``args``/``screen``; strict
numbers (no booleans, no strings, no NaN); screenshots are relative paths that stay inside the
trajectory directory.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from PIL import Image
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..._exceptions import TrajectoryError

__all__ = [
    "MAX_SCREENSHOT_PIXELS", "EndRecord", "HeaderRecord", "StepRecord", "TrajectoryStep", "check_step", "oversized",
    "path_inside", "screen_point", "validation_errors",
]

MAX_SCREENSHOT_PIXELS = 7680 * 4320
"""The most pixels a recorded screenshot may have to be decoded (8K UHD, 33,177,600): its
header is read first, a larger one is never decoded (an RGB decode costs 3 bytes a pixel; a
450 KB PNG of 12000x12000 took 1.3 GB and 6 s)."""


@dataclass(frozen=True)
class TrajectoryStep:
    """One recorded action (its JSON form: the docstring of :mod:`kimik3.tools.ui._trajectory`).

    Attributes:
        index: 1-based position in the trajectory.
        action: the :class:`Computer` method: click, double_click, type_text, key, scroll, drag.
        args: its arguments, in input units (JSON types: a drag path is a list of ``[x, y]``).
        screen: the positions in screen pixels (``{"x", "y"}`` or ``{"path"}``), empty for keys.
        before, after: screenshot paths relative to the trajectory directory (``after`` is None
            only when the recording stopped before any screenshot followed the action).
        started_s, duration_s: when the action began (seconds since the recording began) and
            how long the backend took.
        model: what the model asked for when the action came from :func:`ui_tools` (tool name,
            arguments in model pixels, the coordinate space), else None.
        reasoning: the model's reasoning for the turn that made the call, when known.
    """

    index: int
    action: str
    args: dict[str, Any]
    screen: dict[str, Any]
    before: str
    after: str | None
    started_s: float
    duration_s: float
    model: dict[str, Any] | None = None
    reasoning: str | None = None

    def describe(self) -> str:
        """One line for people: ``click left at screen (240, 128)``, ``type "Ada"``, ..."""
        a, s = self.args, self.screen
        if self.action in ("click", "double_click"):
            return f"{self.action} {a.get('button', 'left')} at screen ({s['x']}, {s['y']})"
        if self.action == "scroll":
            return f"scroll ({a['dx']}, {a['dy']}) notches at screen ({s['x']}, {s['y']})"
        if self.action == "drag":
            return "drag " + " -> ".join(f"({x}, {y})" for x, y in s["path"])
        if self.action == "type_text":
            return f"type {json.dumps(a['text'], ensure_ascii=False)}"
        return "key " + " ".join("+".join(c) for c in a["combos"])


def path_inside(directory: Path, name: str, where: object) -> Path:
    """``directory / name`` when ``name`` is relative and stays inside ``directory`` (symlinks
    resolved), else :class:`TrajectoryError`: a trajectory never points at other files."""
    rel = Path(name)
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        raise TrajectoryError(f"{where}: screenshot {name!r} is not a relative path inside the trajectory")
    target = directory / rel
    if not target.resolve().is_relative_to(directory.resolve()):
        raise TrajectoryError(f"{where}: screenshot {name!r} leads outside the trajectory directory")
    return target


def oversized(path: Path, name: str) -> str | None:
    """Why screenshot ``path`` (``name`` in the trajectory) is not decoded, from its header
    alone: more pixels than :data:`MAX_SCREENSHOT_PIXELS`, or Pillow's decompression-bomb
    limit. None when it is within the limit, or unreadable (decoding it reports that)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # the size is checked here
            with Image.open(path) as im:
                width, height = im.size
    except Image.DecompressionBombError as e:
        return f"screenshot {name} is not decoded: {e}"
    except OSError:
        return None
    if width * height <= MAX_SCREENSHOT_PIXELS:
        return None
    return (f"screenshot {name} is not decoded: {width}x{height} pixels, over the {MAX_SCREENSHOT_PIXELS:,}-pixel "
            "limit")  # fmt: skip


# -- the JSON records, validated at one place (load_trajectory) ------------------------------

_Number = Annotated[float, Field(strict=True, allow_inf_nan=False)]  # int or float, not bool/str/NaN
_Pixel = Annotated[int, Field(strict=True, ge=0)]
_Shot = Annotated[str, Field(strict=True, min_length=1)]


class _Record(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class HeaderRecord(_Record):
    """A trajectory file's first record: the computer, its screen size (pixels) and device scale."""

    type: Literal["trajectory"]
    computer: dict[str, Any]
    screen_size: Annotated[
        list[Annotated[int, Field(strict=True, ge=1, le=100_000)]], Field(min_length=2, max_length=2)
    ]
    device_scale: Annotated[float, Field(strict=True, gt=0, le=100, allow_inf_nan=False)]


class StepRecord(_Record):
    """One recorded action: its arguments, its screen coordinates, the screenshots before and after."""

    type: Literal["step"]
    index: Annotated[int, Field(strict=True, ge=1)]
    action: Literal["click", "double_click", "type_text", "key", "scroll", "drag"]
    args: dict[str, Any]
    screen: dict[str, Any]
    before: _Shot
    after: _Shot | None
    started_s: Annotated[float, Field(strict=True, ge=0, allow_inf_nan=False)]
    duration_s: Annotated[float, Field(strict=True, ge=0, allow_inf_nan=False)]
    model: dict[str, Any] | None = None
    reasoning: Annotated[str, Field(strict=True)] | None = None


class EndRecord(_Record):
    """A trajectory file's last record: the final screenshot."""

    type: Literal["end"]
    screenshot: _Shot


class _PointArgs(_Record):
    x: _Number
    y: _Number
    button: Literal["left", "right", "middle"] = "left"


class _ScrollArgs(_PointArgs):
    dx: Annotated[int, Field(strict=True)]
    dy: Annotated[int, Field(strict=True)]


class _DragArgs(_Record):
    path: Annotated[list[Annotated[list[_Number], Field(min_length=2, max_length=2)]], Field(min_length=2)]


class _TextArgs(_Record):
    text: Annotated[str, Field(strict=True)]


class _KeyArgs(_Record):
    combos: Annotated[
        list[Annotated[list[Annotated[str, Field(strict=True, min_length=1)]], Field(min_length=1)]],
        Field(min_length=1),
    ]


class _PointScreen(_Record):
    x: _Pixel
    y: _Pixel


class _PathScreen(_Record):
    path: list[Annotated[list[_Pixel], Field(min_length=2, max_length=2)]]


_ARGS: dict[str, type[_Record]] = {"click": _PointArgs, "double_click": _PointArgs, "scroll": _ScrollArgs,
                                   "drag": _DragArgs, "type_text": _TextArgs, "key": _KeyArgs}  # fmt: skip


def screen_point(x: float, y: float, size: tuple[int, int], device_scale: float) -> list[int]:
    """The screen pixel ``[x, y]`` an input position lands on (what the recorder writes as
    ``screen``): ``floor(input * device_scale)``, clamped to the screen."""
    w, h = size
    return [min(w - 1, max(0, math.floor(x * device_scale))), min(h - 1, max(0, math.floor(y * device_scale)))]


def check_step(step: TrajectoryStep, size: tuple[int, int], device_scale: float) -> None:
    """Check one step: its ``args`` fit its action, and its ``screen`` (where :func:`replay`
    compares the screen) is where ``args`` (what replay performs) land, recomputed with the
    recorded ``device_scale`` and screen size. A step that compares one place and acts on
    another is refused.

    Raises:
        TrajectoryError: the step names the mismatch.
    """
    where = f"step {step.index} ({step.action})"
    try:
        args = _ARGS[step.action].model_validate(step.args)
        if isinstance(args, _PointArgs):
            got = _PointScreen.model_validate(step.screen)
            want = screen_point(args.x, args.y, size, device_scale)
            shown = [got.x, got.y]
        elif isinstance(args, _DragArgs):
            got_path = _PathScreen.model_validate(step.screen)
            want = [screen_point(x, y, size, device_scale) for x, y in args.path]  # type: ignore[misc]
            shown = got_path.path  # type: ignore[assignment]
        else:
            want = shown = []
    except KeyError as e:
        raise TrajectoryError(f"{where}: unknown action") from e
    except ValidationError as e:
        raise TrajectoryError(f"{where}: {validation_errors(e)}") from e
    if shown != want:
        raise TrajectoryError(
            f"{where}: its screen position {shown} is not where its args {step.args} land ({want} at device "
            f"scale {device_scale:g} on a {size[0]}x{size[1]} screen): replay would check one place and act on another"
        )


def validation_errors(e: ValidationError) -> str:
    """The first three of pydantic's errors as one line: ``loc: message; ...``."""
    return "; ".join(f"{'.'.join(map(str, err['loc'])) or 'record'}: {err['msg']}" for err in e.errors()[:3])
