"""VLLMEngine is quiet by default in the SDK too (issue 35): what vLLM prints while it starts goes
to ${KIMIK3_HOME:-~/.kimik3}/logs/vllm.log, ``verbose=True`` shows it."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from kimik3 import VLLMEngine
from kimik3.engines._quiet import QUIET_ENV, quiet_start, vllm_log_path


def test_engine_is_quiet_by_default_and_verbose_on_request(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KIMIK3_HOME", str(tmp_path / "home"))
    assert VLLMEngine(tmp_path).log_path == tmp_path / "home" / "logs" / "vllm.log" == vllm_log_path()
    assert VLLMEngine(tmp_path, verbose=True).log_path is None


CHILD = r"""
import logging, os, subprocess, sys, warnings
from pathlib import Path
from kimik3.engines._quiet import quiet_start
os.environ["TRANSFORMERS_VERBOSITY"] = "info"  # the user's own setting is kept
with quiet_start(Path(sys.argv[1])):
    os.write(1, b"stdout noise\n")
    os.write(2, b"stderr noise\n")
    warnings.warn("a warning")
    subprocess.run([sys.executable, "-c", "import os; print(os.environ['VLLM_LOGGING_LEVEL'], os.environ['TRANSFORMERS_VERBOSITY'])"])
print("after", "VLLM_LOGGING_LEVEL" in os.environ, logging.getLogger("vllm").level == logging.ERROR)
"""


def test_quiet_start_sends_output_of_the_process_and_its_children_to_the_log(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "vllm.log"
    env = {k: v for k, v in os.environ.items() if k not in QUIET_ENV}
    run = subprocess.run([sys.executable, "-c", CHILD, str(log)], capture_output=True, text=True, timeout=120,
                         env={**env, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert run.returncode == 0, run.stderr
    assert (run.stdout, run.stderr) == ("after False True\n", "")  # the environment is restored
    assert log.read_text() == "stdout noise\nstderr noise\nERROR info\n"  # the warning was ignored


def test_quiet_start_leaves_warnings_filters_as_they_were(tmp_path: Path) -> None:
    before = list(warnings.filters)
    level = logging.getLogger("vllm").level
    try:
        with quiet_start(tmp_path / "vllm.log"):
            assert warnings.filters[0][0] == "ignore"
        assert warnings.filters == before
    finally:
        logging.getLogger("vllm").setLevel(level)
