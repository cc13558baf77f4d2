"""CodingHarness's features are one set (issue 29's debris: seven booleans before)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kimik3 import UserError
from kimik3.harness import FEATURES, CodingHarness
from kimik3.tools.coding import coding_tools


def test_the_features_are_one_set(tmp_path: Path) -> None:
    assert {"project_instructions", "read_before_edit", "checkpoints", "background", "subagents",
                        "edit_tools"} == FEATURES
    full = CodingHarness(tmp_path)
    assert full.features == FEATURES and full.processes is not None and full.checkpoints is not None
    assert [t.name for t in full.tools] == ["bash", "read_file", "write_file", "edit_file", "grep", "glob",
                                            "multi_edit", "apply_patch", "read_output", "stop"]
    core = CodingHarness(tmp_path, features={"checkpoints"})
    assert core.features == {"checkpoints"} and core.processes is None and core.instructions is None
    assert [t.spec for t in core.tools] == [t.spec for t in coding_tools(tmp_path)]  # the model's tools, unchanged


def test_an_unknown_feature_is_misuse(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"unknown CodingHarness feature\(s\) 'sandbox'; the features: background, "):
        CodingHarness(tmp_path, features={"checkpoints", "sandbox"})  # type: ignore[arg-type]
    with pytest.raises(UserError, match="takes a set of features, not the string 'checkpoints'"):
        CodingHarness(tmp_path, features="checkpoints")  # type: ignore[arg-type]


def test_the_former_switches_still_work_and_say_they_are_deprecated(tmp_path: Path) -> None:
    with pytest.deprecated_call(match=r"CodingHarness\(name=bool\) is deprecated"):
        old = CodingHarness(tmp_path, background=False, subagents=False)
    assert old.features == FEATURES - {"background", "subagents"}
    with pytest.raises(UserError, match="unknown CodingHarness feature\\(s\\) 'backgrund'"):
        CodingHarness(tmp_path, backgrund=False)
