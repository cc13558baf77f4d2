"""Which GPUs this node has: ``nvidia-smi`` (NVIDIA) or ``amd-smi`` (AMD ROCm), parsed."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "GPU", "NVIDIA_SMI_QUERY", "detect_gpus", "parse_amd_smi", "parse_nvidia_smi", "run_command", "visible_gpus",
]

Runner = Callable[[Sequence[str]], str]
"""Runs a command and returns its stdout; raises OSError / SubprocessError when it cannot."""

NVIDIA_SMI_QUERY = (
    "nvidia-smi",
    "--query-gpu=name,driver_version,compute_cap,memory.total,index,uuid",
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
        index: the tool's device index (its position in the list when the tool did not say).
        uuid: NVIDIA ``GPU-…`` UUID ("" when the tool did not say).
    """

    vendor: Literal["nvidia", "amd"]
    name: str
    driver: str
    arch: str
    memory_mib: int = 0
    index: int = -1
    uuid: str = ""

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
    """GPUs from the CSV of :data:`NVIDIA_SMI_QUERY` (``name, driver, compute_cap, memory, index,
    uuid`` rows).

    Lines with fewer than three fields are skipped; a missing memory column reads as 0 MiB, a
    missing index as the row's position, a missing uuid as "".
    """
    gpus: list[GPU] = []
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 3:
            continue
        memory = _leading_int(parts[3]) if len(parts) > 3 else 0
        index = int(parts[4]) if len(parts) > 4 and parts[4].isdigit() else len(gpus)
        uuid = parts[5] if len(parts) > 5 else ""
        gpus.append(GPU("nvidia", parts[0], parts[1], parts[2], memory, index, uuid))
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
            i,
        )
        for i, b in enumerate(blocks)
    ]


def run_command(cmd: Sequence[str]) -> str:
    """The default :data:`Runner`: ``cmd``'s stdout (30 s limit).

    Raises:
        OSError: the program is missing.
        subprocess.SubprocessError: it failed (non-zero exit) or ran over 30 s.
    """
    return subprocess.run(list(cmd), capture_output=True, text=True, check=True, timeout=30).stdout


# The variables that hide GPUs from a process, per vendor, in the order they apply (each one's
# indices count the GPUs the previous left visible). CUDA: CUDA_VISIBLE_DEVICES, else the container
# runtime's NVIDIA_VISIBLE_DEVICES. ROCm: ROCR_VISIBLE_DEVICES, then HIP_VISIBLE_DEVICES (HIP also
# reads CUDA_VISIBLE_DEVICES when HIP_VISIBLE_DEVICES is unset).
_VISIBILITY: dict[str, tuple[tuple[str, ...], ...]] = {
    "nvidia": (("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"),),
    "amd": (("ROCR_VISIBLE_DEVICES",), ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")),
}


def _pick(gpus: list[GPU], value: str) -> tuple[list[GPU], str]:
    """The GPUs a ``*_VISIBLE_DEVICES`` value selects, and what in it did not resolve ("")."""
    value = value.strip()
    if value.lower() == "all":
        return gpus, ""
    if value in ("", "-1") or value.lower() in ("none", "void", "nodevfiles"):
        return [], ""
    picked: list[GPU] = []
    for token in (t.strip() for t in value.split(",")):
        if token.isdigit() and int(token) < len(gpus):
            gpu = gpus[int(token)]
        else:
            matches = [g for g in gpus if g.uuid and token and g.uuid.upper().startswith(token.upper())]
            if len(matches) != 1:
                # CUDA stops at the first entry it cannot use: later ones are ignored too
                return picked, f"'{token}' matches no GPU, entries from it on are ignored"
            gpu = matches[0]
        if gpu not in picked:
            picked.append(gpu)
    return picked, ""


def visible_gpus(gpus: Sequence[GPU], env: Mapping[str, str] | None = None) -> tuple[list[GPU], str]:
    """The GPUs a process started with ``env`` can use, and a note saying which variable hid which.

    Indices count the GPUs left visible so far (``0`` is the first); ``GPU-…`` UUIDs (or unique
    prefixes) match too; ``""``, ``-1``, ``none`` and ``void`` hide every GPU; ``all`` none.

    Args:
        gpus: every GPU the vendor tool lists (``nvidia-smi`` ignores these variables).
        env: the environment (default ``os.environ``).

    Returns:
        ``(visible, note)``: note is "" when no variable is set, else e.g.
        ``"2 of 8 GPUs visible (CUDA_VISIBLE_DEVICES=0,1)"``.
    """
    env = os.environ if env is None else env
    visible = list(gpus)
    said: list[str] = []
    if not visible:
        return visible, ""
    for names in _VISIBILITY[visible[0].vendor]:
        name = next((n for n in names if n in env), None)
        if name is None:
            continue
        entries = [t for t in env[name].split(",") if t.strip()]
        if name == "NVIDIA_VISIBLE_DEVICES" and env[name].strip().lower() != "all" and len(entries) == len(visible):
            # inside a container the runtime already hid the others (and renumbered the rest)
            said.append(f"{name}={env[name]}: applied by the container runtime")
            continue
        visible, problem = _pick(visible, env[name])
        said.append(f"{name}={env[name]}" + (f": {problem}" if problem else ""))
    if not said:
        return visible, ""
    return visible, f"{len(visible)} of {len(gpus)} GPUs visible ({'; '.join(said)})"


def detect_all_gpus(run: Runner = run_command) -> list[GPU]:
    """Every GPU ``nvidia-smi`` (first) or ``amd-smi`` lists, visible to this process or not."""
    for cmd, parse in ((NVIDIA_SMI_QUERY, parse_nvidia_smi), (AMD_SMI_QUERY, parse_amd_smi)):
        try:
            gpus = parse(run(cmd))
        except (OSError, subprocess.SubprocessError):
            continue
        if gpus:
            return gpus
    return []


def detect_gpus(run: Runner = run_command, env: Mapping[str, str] | None = None) -> list[GPU]:
    """This node's GPUs this process can use: ``nvidia-smi`` first, then ``amd-smi``, less those
    ``CUDA_VISIBLE_DEVICES`` & co. hide (:func:`visible_gpus`); ``[]`` when none.

    Args:
        run: runs a command and returns its stdout (injected in tests with recorded outputs).
        env: the environment (default ``os.environ``).
    """
    return visible_gpus(detect_all_gpus(run), env)[0]
