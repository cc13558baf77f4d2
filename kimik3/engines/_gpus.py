"""Which GPUs this node has: ``nvidia-smi`` (NVIDIA) or ``amd-smi`` (AMD ROCm), parsed."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = ["GPU", "NVIDIA_SMI_QUERY", "detect_gpus", "parse_amd_smi", "parse_nvidia_smi"]

Runner = Callable[[Sequence[str]], str]
"""Runs a command and returns its stdout; raises OSError / SubprocessError when it cannot."""

NVIDIA_SMI_QUERY = (
    "nvidia-smi",
    "--query-gpu=name,driver_version,compute_cap,memory.total",
    "--format=csv,noheader",
)
"""The one ``nvidia-smi`` call detection makes (its CSV columns are what :class:`GPU` holds)."""

AMD_SMI_QUERY = ("amd-smi", "static", "--asic", "--vram", "--driver")
"""The one ``amd-smi`` call detection makes when ``nvidia-smi`` finds nothing."""


@dataclass(frozen=True)
class GPU:
    """One GPU as the vendor's tool reports it.

    Attributes:
        vendor: "nvidia" or "amd".
        name: the product name (``NVIDIA H200``, ``NVIDIA B300 SXM6 AC``, ``AMD Instinct MI355X``).
        driver: the driver version string (NVIDIA ``580.95.05``; AMD amdgpu ``6.18.3``).
        arch: NVIDIA compute capability (``9.0``, ``10.3``) or AMD graphics target (``gfx950``).
        memory_mib: device memory in MiB (0 when the tool did not say).
    """

    vendor: Literal["nvidia", "amd"]
    name: str
    driver: str
    arch: str
    memory_mib: int = 0

    @property
    def cc_major(self) -> int:
        """The compute capability's major number (NVIDIA; 0 for AMD or an unreadable value)."""
        head = self.arch.split(".")[0]
        return int(head) if self.vendor == "nvidia" and head.isdigit() else 0


def _leading_int(text: str) -> int:
    digits = ""
    for ch in text.strip():
        if not ch.isdigit():
            break
        digits += ch
    return int(digits) if digits else 0


def parse_nvidia_smi(out: str) -> list[GPU]:
    """GPUs from the CSV of :data:`NVIDIA_SMI_QUERY` (``name, driver, compute_cap, memory`` rows).

    Lines with fewer than three fields are skipped; a missing memory column reads as 0 MiB.
    """
    gpus = []
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 3:
            continue
        memory = _leading_int(parts[3]) if len(parts) > 3 else 0
        gpus.append(GPU("nvidia", parts[0], parts[1], parts[2], memory))
    return gpus


def parse_amd_smi(out: str) -> list[GPU]:
    """GPUs from ``amd-smi static --asic --vram --driver`` text output (one ``GPU: N`` block each).

    Reads ``MARKET_NAME`` and ``TARGET_GRAPHICS_VERSION`` (ASIC), ``SIZE`` (VRAM, in MB) and
    ``VERSION`` (DRIVER) of each block.
    """
    blocks: list[dict[str, str]] = []
    section = ""
    for raw in out.splitlines():
        key, sep, value = raw.strip().partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key == "GPU" and not raw.startswith((" ", "\t")):
            blocks.append({})
        elif blocks and not value:
            section = key
        elif blocks:
            blocks[-1].setdefault(f"{section}.{key}", value)
    return [
        GPU(
            "amd",
            b.get("ASIC.MARKET_NAME", "AMD GPU"),
            b.get("DRIVER.VERSION", ""),
            b.get("ASIC.TARGET_GRAPHICS_VERSION", ""),
            _leading_int(b.get("VRAM.SIZE", "")),
        )
        for b in blocks
    ]


def _run(cmd: Sequence[str]) -> str:
    return subprocess.run(list(cmd), capture_output=True, text=True, check=True, timeout=30).stdout


def detect_gpus(run: Runner = _run) -> list[GPU]:
    """This node's GPUs: ``nvidia-smi`` first, then ``amd-smi``; ``[]`` when neither finds any.

    Args:
        run: runs a command and returns its stdout (injected in tests with recorded outputs).
    """
    for cmd, parse in ((NVIDIA_SMI_QUERY, parse_nvidia_smi), (AMD_SMI_QUERY, parse_amd_smi)):
        try:
            gpus = parse(run(cmd))
        except (OSError, subprocess.SubprocessError):
            continue
        if gpus:
            return gpus
    return []
