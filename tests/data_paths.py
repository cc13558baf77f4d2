"""Where test data lives: copies in tests/data (with PROVENANCE.md), shared fixtures optional."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

DATA = Path(__file__).parent / "data"
SHARED_FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures"


def load_json(relative: str) -> Any:
    """Load ``tests/data/<relative>``."""
    return json.loads((DATA / relative).read_text(encoding="utf-8"))


def shared_fixture(relative: str) -> Path:
    """A file of ``../shared/fixtures``; skips the test with a reason when it is absent."""
    path = SHARED_FIXTURES / relative
    if not path.exists():
        pytest.skip(f"shared fixture {path} is absent (outside the kimik3 workspace)")
    return path
