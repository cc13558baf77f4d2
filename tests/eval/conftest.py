"""Fixtures of the eval tests: a host directory the sandbox shows as it is (read-only)."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def host_dir(pytestconfig: pytest.Config) -> Iterator[Path]:
    """A real directory outside the attempt, /tmp and $HOME (under pytest's cache directory in the
    checkout): bubblewrap shows it read-only as the host's own, so a write there that fails shows
    the sandbox at work (not a private /tmp taking the write)."""
    assert pytestconfig.cache is not None
    d = pytestconfig.cache.mkdir("eval-sandbox") / uuid.uuid4().hex
    d.mkdir()
    yield d
    shutil.rmtree(d, ignore_errors=True)
