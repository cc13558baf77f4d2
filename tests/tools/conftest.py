"""The real-window fixtures of test_ui.py (Xvfb display, Tk window, local site), shared with the
other UI test modules."""

from .test_ui import site, tk_app, xvfb  # noqa: F401 - pytest fixtures
