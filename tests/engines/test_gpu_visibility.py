"""Which GPUs count (CUDA_VISIBLE_DEVICES & co.), GPU model names matched by token (GH200 is not
an H200), ``--gpus`` and the command agreeing, features scoped to the recipe's hardware, and the
types preset / features accept."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from kimik3 import UserError
from kimik3._exceptions import EngineNotAvailableError
from kimik3.engines import preflight
from kimik3.engines._gpus import GPU, NVIDIA_SMI_QUERY, detect_gpus, parse_nvidia_smi, visible_gpus
from kimik3.engines._presets import PRESETS, choose_preset, get_preset, hardware_mismatch

H200 = [GPU("nvidia", "NVIDIA H200", "580.65.06", "9.0", 143771, i, f"GPU-{i}aaa-{i}") for i in range(8)]
GH200 = [GPU("nvidia", "NVIDIA GH200 480GB", "580.65.06", "9.0", 97871, i) for i in range(8)]
MI355X = [GPU("amd", "AMD Instinct MI355X", "6.18.3", "gfx950", 294912, i) for i in range(8)]
B300 = [GPU("nvidia", "NVIDIA B300 SXM6 AC", "580.95.05", "10.3", 275040, i) for i in range(8)]


def smi(gpus: Sequence[GPU]) -> Any:
    """nvidia-smi answering the query for ``gpus`` (amd-smi absent)."""

    def run(cmd: Sequence[str]) -> str:
        if tuple(cmd) != NVIDIA_SMI_QUERY:
            raise FileNotFoundError(cmd[0])
        return "".join(f"{g.name}, {g.driver}, {g.arch}, {g.memory_mib} MiB, {g.index}, {g.uuid}\n" for g in gpus)

    return run


def no_vllm(name: str) -> str:
    import importlib.metadata

    raise importlib.metadata.PackageNotFoundError(name)


def test_query_reads_index_and_uuid() -> None:
    assert parse_nvidia_smi("NVIDIA H200, 580.65.06, 9.0, 143771 MiB, 3, GPU-3aaa-3\n") == [H200[3]]


@pytest.mark.parametrize(
    ("env", "indices", "note"),
    [
        ({}, list(range(8)), ""),
        ({"CUDA_VISIBLE_DEVICES": "0,1"}, [0, 1], "2 of 8 GPUs visible (CUDA_VISIBLE_DEVICES=0,1)"),
        ({"CUDA_VISIBLE_DEVICES": "5, 2"}, [5, 2], "2 of 8 GPUs visible (CUDA_VISIBLE_DEVICES=5, 2)"),
        ({"CUDA_VISIBLE_DEVICES": "GPU-4aaa,GPU-6aaa-6"}, [4, 6], "2 of 8 GPUs visible (CUDA_VISIBLE_DEVICES=GPU-4aaa,GPU-6aaa-6)"),
        ({"CUDA_VISIBLE_DEVICES": ""}, [], "0 of 8 GPUs visible (CUDA_VISIBLE_DEVICES=)"),
        ({"CUDA_VISIBLE_DEVICES": "-1"}, [], "0 of 8 GPUs visible (CUDA_VISIBLE_DEVICES=-1)"),
        ({"CUDA_VISIBLE_DEVICES": "1,9,2"}, [1],
         "1 of 8 GPUs visible (CUDA_VISIBLE_DEVICES=1,9,2: '9' matches no GPU, entries from it on are ignored)"),
        ({"NVIDIA_VISIBLE_DEVICES": "all"}, list(range(8)), "8 of 8 GPUs visible (NVIDIA_VISIBLE_DEVICES=all)"),
        ({"NVIDIA_VISIBLE_DEVICES": "0,3,7"}, [0, 3, 7], "3 of 8 GPUs visible (NVIDIA_VISIBLE_DEVICES=0,3,7)"),
        ({"NVIDIA_VISIBLE_DEVICES": "none"}, [], "0 of 8 GPUs visible (NVIDIA_VISIBLE_DEVICES=none)"),
        ({"CUDA_VISIBLE_DEVICES": "0", "NVIDIA_VISIBLE_DEVICES": "all"}, [0], "1 of 8 GPUs visible (CUDA_VISIBLE_DEVICES=0)"),
        ({"ROCR_VISIBLE_DEVICES": "0,1"}, None, None),
    ],
)  # fmt: skip
def test_nvidia_visibility(env: dict[str, str], indices: list[int] | None, note: str | None) -> None:
    visible, said = visible_gpus(H200, env)
    if indices is None:  # an AMD variable does not hide NVIDIA GPUs
        assert visible == H200 and said == ""
        return
    assert [g.index for g in visible] == indices and said == note
    assert [g.index for g in detect_gpus(smi(H200), env)] == indices


def test_container_runtime_already_applied_nvidia_visible_devices() -> None:
    # in a container nvidia-smi lists only the 2 passed-through GPUs, renumbered 0 and 1
    visible, said = visible_gpus(H200[:2], {"NVIDIA_VISIBLE_DEVICES": "4,5"})
    assert (
        visible == H200[:2]
        and said == "2 of 2 GPUs visible (NVIDIA_VISIBLE_DEVICES=4,5: applied by the container runtime)"
    )


@pytest.mark.parametrize(
    ("env", "indices"),
    [
        ({"ROCR_VISIBLE_DEVICES": "0,1,2,3"}, [0, 1, 2, 3]),
        ({"ROCR_VISIBLE_DEVICES": "4,5,6,7", "HIP_VISIBLE_DEVICES": "1,3"}, [5, 7]),  # HIP counts ROCR's survivors
        ({"HIP_VISIBLE_DEVICES": "2"}, [2]),
        ({"CUDA_VISIBLE_DEVICES": "6,7"}, [6, 7]),  # HIP reads it when HIP_VISIBLE_DEVICES is unset
        ({"ROCR_VISIBLE_DEVICES": "-1"}, []),
    ],
)
def test_amd_visibility(env: dict[str, str], indices: list[int]) -> None:
    assert [g.index for g in visible_gpus(MI355X, env)[0]] == indices


def test_auto_and_preflight_count_only_visible_gpus() -> None:
    env = {"CUDA_VISIBLE_DEVICES": "0,1"}
    with pytest.raises(EngineNotAvailableError, match=r"2 x NVIDIA H200 .*k3-mxfp4-hopper needs 8 GPUs"):
        choose_preset(visible_gpus(H200, env)[0])
    report = preflight(run=smi(H200), env=env, package_version=no_vllm, weights_dir="/")
    assert report["preset"].status == "fail"
    assert report["gpus"].status == "fail"
    assert report["gpus"].detail == "2 x NVIDIA H200; 2 of 8 GPUs visible (CUDA_VISIBLE_DEVICES=0,1)"
    hidden = preflight(run=smi(H200), env={"CUDA_VISIBLE_DEVICES": "-1"}, package_version=no_vllm, weights_dir="/")
    assert hidden["gpus"].detail == "none of the 8 GPUs is visible: 0 of 8 GPUs visible (CUDA_VISIBLE_DEVICES=-1)"
    assert hidden["gpus"].status == "fail"
    every = preflight(run=smi(H200), env={}, package_version=no_vllm, weights_dir="/")
    assert every["preset"].detail.startswith("auto: k3-mxfp4-hopper for 8 x NVIDIA H200")
    assert every["gpus"].detail == "8 x NVIDIA H200"


@pytest.mark.parametrize(
    ("name", "fits"),
    [("NVIDIA H200", True), ("NVIDIA H200 NVL", True), ("NVIDIA GH200 480GB", False), ("NVIDIA GH200 144G HBM3e", False),
     ("NVIDIA H200-SXM", True), ("NVIDIA H20", False), ("NVIDIA H100 80GB HBM3", False)],
)  # fmt: skip
def test_hopper_gpu_model_matched_by_token(name: str, fits: bool) -> None:
    gpus = [GPU("nvidia", name, "580.65.06", "9.0", 143771, i) for i in range(8)]
    assert (hardware_mismatch(PRESETS["k3-mxfp4-hopper"], gpus) == "") is fits


def test_gh200_is_not_in_the_recipe_and_says_so() -> None:
    with pytest.raises(EngineNotAvailableError, match=r"GH200 \(Grace Hopper\) is not in vLLM's K3 recipe"):
        choose_preset(GH200)
    assert hardware_mismatch(PRESETS["k3-mxfp4-hopper"], GH200) == (
        "NVIDIA GH200 480GB is not a hopper GPU of this preset (H200); GH200 (Grace Hopper) is not in vLLM's K3 "
        "recipe (it validates H200, B200/B300, MI355X/MI350X)")  # fmt: skip
    report = preflight(preset="k3-mxfp4-hopper", run=smi(GH200), env={}, package_version=no_vllm, weights_dir="/")
    assert report["hardware"].status == "fail" and "GH200 (Grace Hopper)" in report["hardware"].detail


def test_gpus_option_changes_the_command_and_warns() -> None:
    report = preflight(run=smi(H200[:4]), env={}, gpus_needed=4, package_version=no_vllm, weights_dir="/")
    assert report["preset"].detail.startswith("auto: k3-mxfp4-hopper for 4 x NVIDIA H200")
    assert report["tensor_parallel"].status == "warn"
    assert report["tensor_parallel"].detail == ("--gpus 4: the command uses --tensor-parallel-size 4; vLLM's K3 "
                                                "recipe validates 8 GPUs per node")  # fmt: skip
    assert report["gpus"].status == "ok"
    assert "--tensor-parallel-size 4 " in report["command"].detail
    assert "--tensor-parallel-size 8" not in report["command"].detail
    # without --gpus a 4-GPU node fails, and the command (none) does not claim otherwise
    plain = preflight(run=smi(H200[:4]), env={}, package_version=no_vllm, weights_dir="/")
    assert plain["preset"].status == "fail" and "command" not in [f.check for f in plain.findings]
    # a named preset too: 16 GPUs named, 8 found
    named = preflight(preset="k3-mxfp4-hopper", run=smi(H200), env={}, gpus_needed=16, package_version=no_vllm,
                      weights_dir="/")  # fmt: skip
    assert "--tensor-parallel-size 16 " in named["command"].detail and named["gpus"].status == "fail"
    assert PRESETS["k3-mxfp4-hopper"].with_gpu_count(4).engine_args["tensor_parallel_size"] == 4


def test_features_outside_the_recipes_hardware_are_user_errors() -> None:
    for name in ("k3-mxfp4-hopper", "k3-mxfp4-mi355x"):
        with pytest.raises(UserError, match="'decode_context_parallelism' is defined for blackwell GPUs only"):
            get_preset(name, ["decode_context_parallelism"])
    with pytest.raises(UserError, match="'decode_context_parallelism' is defined for blackwell GPUs only"):
        preflight(run=smi(H200), env={}, features=["decode_context_parallelism"],
                  package_version=no_vllm, weights_dir="/")  # fmt: skip
    # on Blackwell it needs the recipe's TP 8
    with pytest.raises(UserError, match=r"needs tensor_parallel_size 8 .*not 4"):
        get_preset("k3-mxfp4-blackwell", ["decode_context_parallelism"]).with_gpu_count(4)
    dcp = get_preset("k3-mxfp4-blackwell", "decode_context_parallelism")
    assert dcp.engine_args["decode_context_parallel_size"] == 8


@pytest.mark.parametrize(
    ("features", "expected"),
    [("spec_decoding", ("spec_decoding",)), (None, ()), ((), ()), (["text_only", "spec_decoding"], ("text_only", "spec_decoding"))],
)  # fmt: skip
def test_features_accept_one_name_or_none(features: Any, expected: tuple[str, ...]) -> None:
    assert get_preset("k3-mxfp4-hopper", features).features == expected


@pytest.mark.parametrize(
    ("name", "features", "message"),
    [
        ("k3-mxfp4-hopper", 5, "features must be a feature name or a list of them, got 5"),
        ("k3-mxfp4-hopper", ["text_only", 3], "features must be a feature name or a list of them, got ['text_only', 3]"),
        ("k3-mxfp4-hopper", {"text_only"}, "features must be a feature name or a list of them, got {'text_only'}"),
        (["k3-mxfp4-hopper"], (), "preset must be a preset name (str), got list ['k3-mxfp4-hopper']"),
        (None, (), "preset must be a preset name (str), got NoneType None"),
    ],
)  # fmt: skip
def test_wrong_types_are_user_errors(name: Any, features: Any, message: str) -> None:
    with pytest.raises(UserError) as e:
        get_preset(name, features)
    assert str(e.value) == message


def test_vllm_engine_takes_one_feature_as_a_string() -> None:
    pytest.importorskip("vllm")
    from kimik3.engines import VLLMEngine

    engine = VLLMEngine("/models/k3", preset="k3-mxfp4-hopper", features="spec_decoding")
    assert engine.preset is not None and engine.preset.features == ("spec_decoding",)
    none = VLLMEngine("/models/k3", preset="k3-mxfp4-hopper", features=None)
    assert none.preset is not None and none.preset.features == ()
    with pytest.raises(UserError, match="preset must be a preset name"):
        VLLMEngine("/models/k3", preset=["k3-mxfp4-hopper"])  # type: ignore[arg-type]


def test_cli_preflight_usage_error_is_one_line_exit_1() -> None:
    from click.testing import CliRunner

    from kimik3.cli import main

    result = CliRunner().invoke(
        main, ["preflight", "--preset", "k3-mxfp4-hopper", "--feature", "decode_context_parallelism"]
    )
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.output.strip() == (
        "kimik3 preflight: UserError: preset feature 'decode_context_parallelism' is defined for blackwell GPUs only "
        "(vLLM's K3 recipe), not hopper (k3-mxfp4-hopper)")  # fmt: skip
