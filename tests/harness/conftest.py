"""The harness tests never see the developer's own ``~/.kimik3`` (its skills above all)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _own_kimik3_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "kimik3-home"
    monkeypatch.setenv("KIMIK3_HOME", str(home))
    return home
