"""Visual UI automation: screenshots in, mouse and keyboard actions out.

A :class:`Computer` is a screen an agent can see and drive: :class:`X11Computer` (an X11 display,
Xvfb included: Pillow screenshots, xdotool input) or :class:`BrowserComputer` (a Chromium page
through Playwright, using the system Chromium). :func:`ui_tools` turns one into the model's tools
(``screenshot``, ``click``, ``double_click``, ``type_text``, ``key``, ``scroll``, ``drag``,
``wait``); :class:`CoordinateSpace` maps the model's pixels (of the resized screenshot it sees) to
screen pixels and input units, device scale included.

Usage::

    from kimik3 import Agent, ContextPolicy
    from kimik3.tools.ui import BrowserComputer, ui_tools

    async with BrowserComputer("http://127.0.0.1:8000/", viewport=(1024, 768)) as computer:
        agent = Agent(engine=engine, tools=ui_tools(computer), context=ContextPolicy(max_images=3))
        result = await agent.run("Fill in the form with the name Ada and submit it.")

System packages (Debian): ``xvfb xdotool chromium`` (``scripts/setup_ui.sh``); Python:
``pip install 'kimik3[ui]'`` (playwright; never ``playwright install``).
"""

from ._browser import CHROMIUM_ARGS, BrowserComputer, default_chromium
from ._computer import Computer, KeyCombo, MouseButton, parse_keys
from ._coords import CoordinateSpace, model_size_for
from ._tools import changed_region, ui_tools
from ._x11 import X11Computer

__all__ = [
    "CHROMIUM_ARGS",
    "BrowserComputer",
    "Computer",
    "CoordinateSpace",
    "KeyCombo",
    "MouseButton",
    "X11Computer",
    "changed_region",
    "default_chromium",
    "model_size_for",
    "parse_keys",
    "ui_tools",
]
