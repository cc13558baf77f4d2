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

__all__ = ["QUIET_ENV", "kimik3_home", "output_to", "quiet_start", "vllm_log_path"]

QUIET_ENV = {"VLLM_LOGGING_LEVEL": "ERROR", "TRANSFORMERS_VERBOSITY": "error", "PYTHONWARNINGS": "ignore"}
"""Set (where the user did not set them) while vLLM starts, so its processes inherit them."""


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
