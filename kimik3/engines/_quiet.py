"""Quiet vLLM starts: what vLLM, torch and transformers print while an embedded engine starts goes
to a log file, ``${KIMIK3_HOME:-~/.kimik3}/logs/vllm.log``, instead of the terminal.

vLLM 0.32 prints warnings before it configures its logging (where ``VLLM_LOGGING_LEVEL`` cannot
reach them) and from the processes it starts (the engine core, its workers, multiprocessing's
resource tracker), so the file descriptors 1 and 2 are pointed at the log while it starts: the
processes started then keep writing there. :class:`~kimik3.engines.VLLMEngine` does this unless
``verbose=True``; the command line does it unless ``--verbose``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

__all__ = ["LEAK_WARNINGS", "QUIET_ENV", "kimik3_home", "output_to", "quiet_start", "vllm_log_path",
           "without_leak_warnings"]

QUIET_ENV = {"VLLM_LOGGING_LEVEL": "ERROR", "TRANSFORMERS_VERBOSITY": "error", "PYTHONWARNINGS": "ignore"}
"""Set (where the user did not set them) while vLLM starts, so its processes inherit them."""


LEAK_WARNINGS = "ignore::UserWarning:multiprocessing.resource_tracker"
"""The ``PYTHONWARNINGS`` filter of multiprocessing's resource tracker's shutdown warnings
("There appear to be 3 leaked semaphore objects to clean up at shutdown", one per kind, with the
line that warns: ~35 lines when a served vLLM is stopped by Ctrl-C, whose killed workers leave
their semaphores and shared memory registered). The tracker removes those objects all the same;
only its report of doing so is silenced (issue 43)."""


def without_leak_warnings(env: dict[str, str]) -> dict[str, str]:
    """``env`` (a copy) whose ``PYTHONWARNINGS`` also holds :data:`LEAK_WARNINGS`, for the
    processes of a served vLLM: its resource tracker inherits it; the user's filters are kept."""
    filters = [f for f in env.get("PYTHONWARNINGS", "").split(",") if f.strip()]
    if LEAK_WARNINGS not in filters:
        filters.append(LEAK_WARNINGS)
    return {**env, "PYTHONWARNINGS": ",".join(filters)}


def kimik3_home() -> Path:
    """``${KIMIK3_HOME:-~/.kimik3}``: sessions and logs."""
    return Path(os.environ.get("KIMIK3_HOME") or "~/.kimik3").expanduser()


def vllm_log_path() -> Path:
    """Where a quiet start's output goes: ``${KIMIK3_HOME:-~/.kimik3}/logs/vllm.log``."""
    return kimik3_home() / "logs" / "vllm.log"


@contextlib.contextmanager
def output_to(path: Path | None) -> Iterator[None]:
    """File descriptors 1 and 2 (this process's and its new children's) go to ``path`` (appended;
    its directory is made); None: left as they are."""
    if path is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = (os.dup(1), os.dup(2))
    with open(path, "ab") as f:
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, copy in zip((1, 2), saved, strict=True):
            os.dup2(copy, fd)
            os.close(copy)


@contextlib.contextmanager
def quiet_start(path: Path) -> Iterator[None]:
    """While vLLM starts: :data:`QUIET_ENV` where unset (restored afterwards), Python warnings
    ignored, output to ``path``. vLLM's logger stays at ERROR afterwards (it warns at requests too)."""
    added = {k: v for k, v in QUIET_ENV.items() if k not in os.environ}
    os.environ.update(added)
    logging.getLogger("vllm").setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), output_to(path):
            warnings.simplefilter("ignore")
            yield
    finally:
        for k in added:
            os.environ.pop(k, None)
