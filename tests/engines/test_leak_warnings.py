"""``kimik3 serve``'s Ctrl-C without multiprocessing's leak report (issue 43: ~35 lines of
"There appear to be N leaked semaphore objects"): the source reproduced by a child that dies with
semaphores and shared memory registered, silenced by the filter the served processes inherit, the
objects still removed by the tracker."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kimik3.engines._quiet import LEAK_WARNINGS, without_leak_warnings

CHILD = Path(__file__).with_name("leak_child.py")


def run_child(env: dict[str, str]) -> tuple[str, str]:
    # the tracker holds the pipes until it has cleaned up: run() returns after its report
    done = subprocess.run([sys.executable, str(CHILD)], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == -9
    return done.stdout.strip(), done.stderr


def test_the_resource_trackers_report_is_the_noise_and_the_filter_silences_only_it() -> None:
    base = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    _, noisy = run_child(base)
    assert "There appear to be 3 leaked semaphore objects to clean up at shutdown" in noisy
    assert "There appear to be 1 leaked shared_memory objects to clean up at shutdown" in noisy
    name, quiet = run_child(without_leak_warnings(base))
    assert quiet == ""
    assert not Path("/dev/shm", name.lstrip("/")).exists()  # the tracker removed the memory all the same


def test_the_users_own_filters_are_kept() -> None:
    assert without_leak_warnings({"PYTHONWARNINGS": "error::DeprecationWarning"})["PYTHONWARNINGS"] == (
        "error::DeprecationWarning," + LEAK_WARNINGS)
    assert without_leak_warnings({"PYTHONWARNINGS": LEAK_WARNINGS})["PYTHONWARNINGS"] == LEAK_WARNINGS
    assert without_leak_warnings({})["PYTHONWARNINGS"] == LEAK_WARNINGS


def test_the_served_vllm_inherits_the_filter(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from kimik3.cli import main
    from kimik3.engines import _cluster
    from kimik3.engines._vllm import server_command

    seen: dict[str, Any] = {}

    def run_supervised(cmd: list[str], env: dict[str, str] | None = None) -> int:  # vLLM is not started
        seen.update(path=cmd[0], env=env)
        return 0

    monkeypatch.setattr(_cluster, "run_supervised", run_supervised)
    monkeypatch.setenv("PYTHONWARNINGS", "default")
    model = str(Path(__file__).resolve().parents[2] / "models" / "k3-tiny")
    result = CliRunner().invoke(main, ["serve", model])
    assert result.exit_code == 0, result.output
    assert seen["env"]["PYTHONWARNINGS"] == "default," + LEAK_WARNINGS
    assert seen["path"] == server_command(model)[0]
