"""Visual UI automation: screenshots in, mouse and keyboard actions out.

A :class:`Computer` is a screen an agent can see and drive: :class:`X11Computer` (an X11 display,
Xvfb included: Pillow screenshots, xdotool input) or :class:`BrowserComputer` (a Chromium page
through Playwright, using the system Chromium). :func:`ui_tools` turns one into the model's tools
(``screenshot``, ``click``, ``double_click``, ``type_text``, ``key``, ``scroll``, ``drag``,
``wait``, ``zoom``; ``click_mark`` with set-of-marks grounding); :class:`CoordinateSpace` maps
the model's pixels (of the resized screenshot it sees) to screen pixels and input units, device
scale included.

Usage::

    from kimik3 import Agent, ContextPolicy
    from kimik3.tools.ui import BrowserComputer, ui_tools

    async with BrowserComputer("http://127.0.0.1:8000/", viewport=(1024, 768)) as computer:
        agent = Agent(engine=engine, tools=ui_tools(computer), context=ContextPolicy(max_images=3))
        result = await agent.run("Fill in the form with the name Ada and submit it.")

Trajectories: wrap the computer in :class:`TrajectoryRecorder` to record a run (JSONL + screenshots),
:func:`replay` it without a model (stopping with :class:`~kimik3.ReplayMismatchError` at the first
step whose screen differs), render it with :func:`render_html` / :func:`render_gif`, or from the
shell: ``kimik3 replay DIR`` / ``kimik3 replay DIR --html run.html``.

System packages (Debian): ``xvfb xdotool chromium`` (``scripts/setup_ui.sh``); Python:
``pip install 'kimik3[ui]'`` (playwright; never ``playwright install``).
"""

from ..._exceptions import ReplayMismatchError, TrajectoryError
from ._browser import CHROMIUM_ARGS, BrowserComputer, default_chromium
from ._computer import Computer, KeyCombo, MouseButton, parse_keys
from ._coords import CoordinateSpace, media_config_for_tokens, model_size_for
from ._grounding import INTERACTIVE_ROLES, Mark, UIElement, parse_aria_snapshot
from ._render import annotate_step, render_gif, render_html
from ._tools import changed_region, ui_tools
from ._trajectory import (
    TRAJECTORY_FILE,
    Trajectory,
    TrajectoryRecorder,
    TrajectoryStep,
    computer_for,
    load_trajectory,
    replay,
    screen_difference,
)
from ._x11 import X11Computer

__all__ = [
    "CHROMIUM_ARGS",
    "INTERACTIVE_ROLES",
    "TRAJECTORY_FILE",
    "BrowserComputer",
    "Computer",
    "CoordinateSpace",
    "KeyCombo",
    "Mark",
    "MouseButton",
    "ReplayMismatchError",
    "Trajectory",
    "TrajectoryError",
    "TrajectoryRecorder",
    "TrajectoryStep",
    "UIElement",
    "X11Computer",
    "annotate_step",
    "changed_region",
    "computer_for",
    "default_chromium",
    "load_trajectory",
    "media_config_for_tokens",
    "model_size_for",
    "parse_aria_snapshot",
    "parse_keys",
    "render_gif",
    "render_html",
    "replay",
    "screen_difference",
    "ui_tools",
]
