"""Fixtures shared by the tool tests: a workspace with its coding tools, and the real-window
fixtures of test_ui.py (Xvfb display, Tk window, local site)."""

from pathlib import Path

import pytest

from kimik3.tools import Tool
from kimik3.tools.coding import coding_tools

from .test_ui import site, tk_app, xvfb  # noqa: F401 - pytest fixtures


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """An empty workspace directory."""
    root = tmp_path / "ws"
    root.mkdir()
    return root


@pytest.fixture
def tools(ws: Path) -> dict[str, Tool]:
    """The coding tools confined to ``ws``, by name."""
    return {t.name: t for t in coding_tools(ws)}
