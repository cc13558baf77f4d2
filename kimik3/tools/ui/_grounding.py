"""Grounding beyond pixels: a page's accessibility tree and set-of-marks, in the model's pixels.

Both start from Playwright's AI-mode aria snapshot (:meth:`Computer.accessibility_snapshot`):
lines such as ``- button "Send" [ref=e6] [box=100,220,200,60]`` with boxes
``x,y,width,height`` in input units (CSS pixels of the viewport). :func:`accessibility_text`
rewrites the boxes into pixels of the screenshot the model sees; :func:`marks_for` numbers the
interactive elements in view and :func:`draw_marks` draws numbered boxes on the screenshot
(set-of-marks, Yang et al. 2023, https://arxiv.org/abs/2310.11441).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from PIL import Image, ImageDraw, ImageFont

from ._coords import CoordinateSpace

__all__ = [
    "INTERACTIVE_ROLES",
    "Mark",
    "UIElement",
    "accessibility_text",
    "draw_marks",
    "marks_for",
    "parse_aria_snapshot",
]

INTERACTIVE_ROLES = frozenset({
    "button", "link", "textbox", "searchbox", "combobox", "checkbox", "radio", "switch", "slider",
    "spinbutton", "tab", "menuitem", "menuitemcheckbox", "menuitemradio", "option", "treeitem", "listbox",
})  # fmt: skip
"""ARIA roles that get a mark (WAI-ARIA 1.2 widget roles people click or type into)."""

_LINE = re.compile(r'^(?P<indent>\s*)- (?P<role>[a-z]+)(?: (?P<name>"(?:[^"\\]|\\.)*"))?(?P<attrs>.*?):?$')
_BOX = re.compile(r"\[box=(-?[\d.]+),(-?[\d.]+),(-?[\d.]+),(-?[\d.]+)\]")
_REF = re.compile(r"\[ref=(\w+)\]")
_DROP = re.compile(r" \[(?:ref=\w+|cursor=pointer)\]")
_COLOURS = ((230, 25, 75), (0, 130, 200), (60, 160, 60), (145, 30, 180), (245, 130, 48), (0, 128, 128))


@dataclass(frozen=True)
class UIElement:
    """One node of an aria snapshot that has a box.

    Attributes:
        role: the ARIA role (``button``, ``textbox``, ...).
        name: the accessible name ("" when none).
        ref: Playwright's reference (``e5``, ``f2e1`` after a navigation), or None.
        box: ``(x, y, width, height)`` in input units (CSS pixels of the viewport).
    """

    role: str
    name: str
    ref: str | None
    box: tuple[float, float, float, float]


def parse_aria_snapshot(text: str) -> list[UIElement]:
    """The elements of an AI-mode aria snapshot that have a non-empty box, in document order."""
    out = []
    for line in text.splitlines():
        m = _LINE.match(line)
        box = _BOX.search(line)
        if m is None or box is None:
            continue
        x, y, w, h = (float(v) for v in box.groups())
        if w <= 0 or h <= 0:
            continue
        name = json.loads(m["name"]) if m["name"] else ""
        ref = _REF.search(line)
        out.append(UIElement(m["role"], name, ref[1] if ref else None, (x, y, w, h)))
    return out


def _model_box(space: CoordinateSpace, box: tuple[float, float, float, float]) -> tuple[int, int, int, int] | None:
    """The element's visible part in model pixels ``(left, top, right, bottom)`` inclusive, or None."""
    x, y, w, h = box
    s = space.device_scale
    (ox, oy), (sw, sh) = space.offset, space.screen_size
    left, top = max(ox, x * s), max(oy, y * s)
    right, bottom = min(ox + sw, (x + w) * s), min(oy + sh, (y + h) * s)
    if right - left < 1 or bottom - top < 1:
        return None
    ml, mt = space.to_model(left, top)
    mr, mb = space.to_model(right - 1, bottom - 1)
    return ml, mt, mr, mb


def accessibility_text(snapshot: str, space: CoordinateSpace) -> str:
    """The snapshot with every box in pixels of the model's image (``[box=left,top,right,bottom]``,
    inclusive) or ``[not in view]``, without refs; a header line says so."""

    def box(m: re.Match[str]) -> str:
        b = _model_box(space, (float(m[1]), float(m[2]), float(m[3]), float(m[4])))
        return "[not in view]" if b is None else f"[box={b[0]},{b[1]},{b[2]},{b[3]}]"

    body = _DROP.sub("", _BOX.sub(box, snapshot))
    return 'Accessibility tree (role "name"; box=left,top,right,bottom in pixels of this screenshot):\n' + body


@dataclass(frozen=True)
class Mark:
    """A numbered interactive element of a screenshot.

    Attributes:
        number: 1-based, in document order.
        element: the element.
        model_box: its visible part in model pixels ``(left, top, right, bottom)``, inclusive.
        target: where a click on the mark goes: the centre of the visible part, in input units.
    """

    number: int
    element: UIElement
    model_box: tuple[int, int, int, int]
    target: tuple[float, float]

    def describe(self) -> str:
        """``[3] button "Send" at x 100..299, y 220..279``."""
        left, top, right, bottom = self.model_box
        name = f" {json.dumps(self.element.name, ensure_ascii=False)}" if self.element.name else ""
        return f"[{self.number}] {self.element.role}{name} at x {left}..{right}, y {top}..{bottom}"


def marks_for(elements: list[UIElement], space: CoordinateSpace) -> list[Mark]:
    """Number the interactive elements (:data:`INTERACTIVE_ROLES`) at least partly in view."""
    marks: list[Mark] = []
    s = space.device_scale
    (ox, oy), (sw, sh) = space.offset, space.screen_size
    for e in elements:
        if e.role not in INTERACTIVE_ROLES:
            continue
        mb = _model_box(space, e.box)
        if mb is None:
            continue
        x, y, w, h = e.box
        left, top = max(ox / s, x), max(oy / s, y)
        right, bottom = min((ox + sw) / s, x + w), min((oy + sh) / s, y + h)
        marks.append(Mark(len(marks) + 1, e, mb, ((left + right) / 2, (top + bottom) / 2)))
    return marks


def draw_marks(image: Image.Image, marks: list[Mark]) -> Image.Image:
    """A copy of ``image`` (the model's) with each mark's box outlined and its number in a filled
    label at the box's top-left corner."""
    out = image.copy()
    draw = ImageDraw.Draw(out)
    font = ImageFont.load_default(size=max(10, min(out.size) // 50))
    for m in marks:
        colour = _COLOURS[(m.number - 1) % len(_COLOURS)]
        left, t, r, b = m.model_box
        draw.rectangle((left, t, r, b), outline=colour, width=2)
        label = str(m.number)
        tl, tt, tr, tb = draw.textbbox((0, 0), label, font=font)
        lw, lh = tr - tl + 6, tb - tt + 4
        lx, ly = left, (t - lh if t >= lh else t)
        draw.rectangle((lx, ly, lx + lw - 1, ly + lh - 1), fill=colour)
        draw.text((lx + 3 - tl, ly + 2 - tt), label, fill=(255, 255, 255), font=font)
    return out
