"""Process checks for the sandbox and reaper tests, read from the host's /proc.

A command's own pids are those of its PID namespace when it runs in bubblewrap, so the tests find
its processes by a marker in their command line instead (a ``sleep`` of a unique duration):
that works the same with and without the sandbox, and on a machine where others run the same
tests at the same time.
"""

from __future__ import annotations

import os
import random

import pytest

from kimik3.tools.coding._sandbox import _resolve

BWRAP_WORKS = _resolve("auto")[0] == "bwrap"
# `make test` (CI) sets KIMIK3_REQUIRE_ENGINE and installs bubblewrap: there a missing sandbox fails
REQUIRED = bool(os.environ.get("KIMIK3_REQUIRE_ENGINE"))
needs_bwrap = pytest.mark.skipif(not BWRAP_WORKS and not REQUIRED,
                                 reason=f"bubblewrap cannot run here: {_resolve('auto')[1]}")
# both ways a command can run: in the sandbox, and unsandboxed under the same supervisor
MODES = [pytest.param("bwrap", marks=needs_bwrap), "none"]


def marker() -> str:
    """A duration for ``sleep`` that no other process on the machine has in its command line."""
    return f"{3000 + random.random() * 1000:.6f}"


def alive_with(mark: str) -> list[int]:
    """Host pids of the live (not zombie) processes whose command line holds ``mark``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ")
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        if mark.encode() in cmdline and stat[stat.rfind(b")") + 2 :][:1] not in (b"Z", b"X"):
            found.append(int(entry))
    return found
