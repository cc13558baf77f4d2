"""K3 launch presets for vLLM, as vLLM's own K3 recipe defines them.

Source of every value below (cited next to each as ``recipe L<line>``)::

    vllm-project/recipes  models/moonshotai/Kimi-K3.yaml
    commit 6f19519bb680e870356b72a06d2638d6efc6da70 (2026-08-20, the file's last change;
    unchanged at the repository's HEAD 8959cf64189c71d36e11c6a30335f923f261b1f7, 2026-08-21)

How the recipe's blocks compose is the recipe site's command builder (``src/lib/command-synthesis.js``
at 8959cf64, ``resolveCommand``): ``base_args``, then ``--tensor-parallel-size <GPUs per node>``
(single_node_tp, the recipe's ``default_strategy``), then ``hardware_overrides.<generation>``,
then the enabled features; a later flag replaces an earlier one ("last wins"). Environment
variables come from ``hardware_overrides.<generation>.extra_env``.

A preset is one hardware generation x one checkpoint on one 8-GPU node. Opt-in features
(``spec_decoding``, ``text_only``, ``decode_context_parallelism``) compose on top of any preset.

In-process (``VLLMEngine``) kimik3 renders K3 prompts and parses K3 output itself, replacing
vLLM's Python/Rust chat frontends: the recipe's frontend-only settings (``--enable-auto-tool-choice
--tool-call-parser kimi_k3``, ``--reasoning-parser kimi_k3`` as default-on features, and
``VLLM_USE_RUST_FRONTEND=1``) appear only in :meth:`Preset.command` for ``vllm serve``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from .._exceptions import EngineNotAvailableError, UserError
from ._gpus import GPU

__all__ = [
    "DEPRECATED_PRESETS",
    "FEATURES",
    "PRESETS",
    "RECIPE",
    "Feature",
    "Preset",
    "applied_env",
    "choose_preset",
    "get_preset",
    "hardware_mismatch",
]

RECIPE = (
    "https://github.com/vllm-project/recipes/blob/6f19519bb680e870356b72a06d2638d6efc6da70/"
    "models/moonshotai/Kimi-K3.yaml"
)
"""The recipe file and commit every preset value comes from."""

Hardware = Literal["blackwell", "hopper", "amd"]

MIN_VLLM = (0, 27, 1)  # recipe L27 model.min_vllm_version "0.27.1"
MIN_NVIDIA_DRIVER = 580  # recipe L30 "CUDA 13 (cu130) build only ... the host needs an r580+ NVIDIA driver"

# recipe L37-42 model.base_args: --trust-remote-code --gpu-memory-utilization 0.95 ("Leave
# --moe-backend unset so vLLM selects its default automatic backend", L40).
_BASE_ARGS: dict[str, Any] = {"trust_remote_code": True, "gpu_memory_utilization": 0.95}

# recipe L160-215 hardware_overrides.<generation>.extra_args, as vLLM AsyncEngineArgs fields.
_HARDWARE_ARGS: dict[Hardware, dict[str, Any]] = {
    "hopper": {
        "gpu_memory_utilization": 0.97,  # recipe L163-164
        "max_num_seqs": 5,  # L165-166
        "max_model_len": 32_768,  # L167-168
        "moe_backend": "marlin",  # L169-170
        "disable_custom_all_reduce": True,  # L171
        "enable_flashinfer_autotune": False,  # L172 --no-enable-flashinfer-autotune
        "max_num_batched_tokens": 4096,  # L173-174
        "attention_backend": "FLASHMLA",  # L175-176
    },
    "blackwell": {
        "load_format": "fastsafetensors",  # recipe L185-186
        "enable_flashinfer_autotune": False,  # L187 --no-enable-flashinfer-autotune
        "max_model_len": 1_048_576,  # L188-189
        "kv_cache_dtype": "fp8",  # L190-191
        "attention_config": {"use_prefill_query_quantization": True, "mla_prefill_backend": "flashinfer"},  # L192-193
        "enable_prefix_caching": True,  # L194
    },
    "amd": {
        "load_format": "auto",  # recipe L208-209
        "gpu_memory_utilization": 0.95,  # L210-211
        "mm_encoder_tp_mode": "data",  # L212-213
        "max_num_seqs": 128,  # L214-215
        "reasoning_parser": "kimi_k3",  # L216-217 (an engine arg too: structured outputs start after reasoning)
        "max_num_batched_tokens": 4096,  # L218-219
        # L220-222 "Fuse the KDA output RMSNorm and sigmoid gate into one Triton kernel."
        "compilation_config": {"cudagraph_mode": "FULL_DECODE_ONLY", "custom_ops": ["+fused_rms_norm_gated"]},
    },
}

# recipe hardware_overrides.<generation>.extra_env, applied by VLLMEngine before vLLM starts.
_HARDWARE_ENV: dict[Hardware, dict[str, str]] = {
    "hopper": {
        "VLLM_ENGINE_READY_TIMEOUT_S": "3600",  # recipe L178
        "VLLM_USE_V2_MODEL_RUNNER": "1",  # L179
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",  # L181
    },
    "blackwell": {
        "VLLM_ALLREDUCE_USE_FLASHINFER": "1",  # recipe L196
        "VLLM_ENGINE_READY_TIMEOUT_S": "3600",  # L197
        "VLLM_USE_V2_MODEL_RUNNER": "1",  # L198
    },
    "amd": {
        "VLLM_ROCM_USE_AITER": "1",  # recipe L202
        "SAFETENSORS_FAST_GPU": "1",  # L203
        "VLLM_ROCM_USE_AITER_MOE_SITUV2_A8W4": "1",  # L204 (not read by vLLM 0.32: the K3 ROCm image's)
        "AITER_BF16_FP8_MOE_BOUND": "0",  # L205
        "VLLM_USE_BREAKABLE_CUDAGRAPH": "0",  # L206 "REQUIRED on ROCm: the build auto-enables =1"
    },
}

# Frontend-only env: recipe L180 (hopper) and L199 (blackwell) VLLM_USE_RUST_FRONTEND=1 selects
# vLLM's Rust API server; `vllm serve` only (in-process it would only switch off
# mm_device_do_normalize, see vllm/config/model.py).
_SERVE_ENV: dict[Hardware, dict[str, str]] = {
    "hopper": {"VLLM_USE_RUST_FRONTEND": "1"},  # recipe L180
    "blackwell": {"VLLM_USE_RUST_FRONTEND": "1"},  # recipe L199
    "amd": {},  # recipe L200-206: none
}

# Default-on features tool_calling (recipe L45-50) and reasoning (L51-55): frontend flags of
# `vllm serve` (recipe opt_in_features L100-103 lists the others; the builder turns the rest on).
_SERVE_ARGS: dict[str, str | None] = {
    "--enable-auto-tool-choice": None,
    "--tool-call-parser": "kimi_k3",
    "--reasoning-parser": "kimi_k3",
}

# recipe L69-70 spec_decoding args (L78-79 the same config for AMD).
_DSPARK = {
    "model": "RedHatAI/Kimi-K3-speculator.dspark",
    "num_speculative_tokens": 8,
    "method": "dspark",
    "draft_sample_method": "probabilistic",
    "rejection_sample_method": "block",
}


@dataclass(frozen=True)
class Feature:
    """An opt-in feature of the recipe (``opt_in_features``), as engine args.

    Attributes:
        name: the recipe's key (``spec_decoding``, ``text_only``, ``decode_context_parallelism``).
        description: the recipe's description.
        engine_args: ``AsyncEngineArgs`` fields it sets (they replace the preset's).
        hardware_args: per-generation args that replace :attr:`engine_args` there.
        hardware: the generations the recipe defines it for (empty: every generation).
        tensor_parallel_size: the only tensor-parallel size it is valid with (None: any).
    """

    name: str
    description: str
    engine_args: Mapping[str, Any]
    hardware_args: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    hardware: tuple[Hardware, ...] = ()
    tensor_parallel_size: int | None = None

    def args_for(self, hardware: Hardware) -> Mapping[str, Any]:
        """The args this feature sets on ``hardware``."""
        return self.hardware_args.get(hardware, self.engine_args)


FEATURES: dict[str, Feature] = {
    "spec_decoding": Feature(
        "spec_decoding",
        "DSpark speculative decoding (recipe L56-79)",
        {"speculative_config": _DSPARK},  # recipe L68-70
        # recipe L71-79: on AMD also --max-num-seqs 128 (the DSpark verify runs on TRITON_MLA).
        {"amd": {"max_num_seqs": 128, "speculative_config": _DSPARK}},
    ),
    "text_only": Feature(
        "text_only",
        "skip the vision encoder for text-only workloads (recipe L80-83)",
        {"language_model_only": True},  # recipe L83 --language-model-only
    ),
    "decode_context_parallelism": Feature(
        "decode_context_parallelism",
        "shard the decode KV cache across the 8 tensor-parallel ranks (recipe L84-98)",
        {
            "decode_context_parallel_size": 8,  # recipe L91-92
            "dcp_comm_backend": "a2a",  # L93-94
            "attention_backend": "TOKENSPEED_MLA",  # L95-96
            # L97-98
            "attention_config": {"use_prefill_query_quantization": True, "mla_prefill_backend": "TRTLLM_RAGGED"},
        },
        # recipe L85: "Pairs the TOKENSPEED_MLA decode backend with TRTLLM_RAGGED MLA prefill under
        # FP8 KV"; FP8 KV is only in hardware_overrides.blackwell (L190-191) and TRTLLM is NVIDIA's,
        # so the feature is Blackwell's. L86-88: "--decode-context-parallel-size is pinned to 8
        # here, which only divides a TP of 8 or more" (scoped to single_node_tp, TP 8).
        hardware=("blackwell",),
        tensor_parallel_size=8,
    ),
}
"""The recipe's opt-in features by name."""


@dataclass(frozen=True)
class Preset:
    """One K3 launch: a hardware generation, a checkpoint, one 8-GPU node, optional features.

    Attributes:
        name: the preset's name (``k3-mxfp4-blackwell``, ...).
        hardware: the recipe's generation key (``blackwell``, ``hopper``, ``amd``).
        gpu_models: the GPUs the recipe validates it on (its ``meta.hardware``).
        gpu_count: GPUs the launch uses (``tensor_parallel_size``).
        checkpoint: ``mxfp4`` (the recipe's default variant) or ``nvfp4``.
        model: the checkpoint's Hugging Face id.
        quantization_backend: how vLLM runs the checkpoint (read from its ``quantization_config``;
            no flag needed).
        vram_minimum_gb: the recipe's memory estimate for the checkpoint (GB, all GPUs together).
        engine_args: ``vllm.AsyncEngineArgs`` fields (with the features applied).
        env: environment variables VLLMEngine sets before vLLM starts and restores afterwards.
        serve_env: extra variables for ``vllm serve`` only (frontend settings).
        features: the opt-in features applied.
        reason: why this preset was chosen (``preset="auto"``), else "".
    """

    name: str
    hardware: Hardware
    gpu_models: tuple[str, ...]
    gpu_count: int
    checkpoint: Literal["mxfp4", "nvfp4"]
    model: str
    quantization_backend: str
    vram_minimum_gb: int
    engine_args: Mapping[str, Any]
    env: Mapping[str, str]
    serve_env: Mapping[str, str] = field(default_factory=dict)
    features: tuple[str, ...] = ()
    reason: str = ""

    @property
    def max_model_len(self) -> int | None:
        """The context length the preset serves (tokens; None: the model's own)."""
        value = self.engine_args.get("max_model_len")
        return int(value) if value is not None else None

    def with_features(self, features: str | Sequence[str] | None) -> Preset:
        """This preset with opt-in features applied (in the order given; later args win).

        Args:
            features: feature names; one name as a ``str``; None for none.

        Raises:
            UserError: an unknown feature name, a wrong type, or a feature the recipe does not
                define for this hardware or tensor-parallel size.
        """
        args = dict(self.engine_args)
        names = list(self.features)
        for name in _feature_names(features):
            if name not in FEATURES:
                raise UserError(f"unknown preset feature {name!r}; known: {', '.join(FEATURES)}")
            feature = FEATURES[name]
            if feature.hardware and self.hardware not in feature.hardware:
                raise UserError(f"preset feature {name!r} is defined for {'/'.join(feature.hardware)} GPUs only "
                                f"(vLLM's K3 recipe), not {self.hardware} ({self.name})")  # fmt: skip
            tp = feature.tensor_parallel_size
            if tp is not None and self.gpu_count != tp:
                raise UserError(f"preset feature {name!r} needs tensor_parallel_size {tp} (vLLM's K3 recipe), "
                                f"not {self.gpu_count}")  # fmt: skip
            if name not in names:
                args.update(FEATURES[name].args_for(self.hardware))
                names.append(name)
        return replace(self, engine_args=args, features=tuple(names))

    def with_gpu_count(self, gpus: int) -> Preset:
        """This preset on ``gpus`` GPUs (``tensor_parallel_size``); the recipe validates 8 only.

        Raises:
            UserError: ``gpus`` is not an int >= 1, or a feature applied needs another size.
        """
        if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 1:
            raise UserError(f"gpus must be an int >= 1, got {gpus!r}")
        args = {**self.engine_args, "tensor_parallel_size": gpus}
        return replace(self, gpu_count=gpus, engine_args=args, features=()).with_features(self.features)

    def cli_args(self) -> list[str]:
        """The engine args as ``vllm serve`` flags (dicts as JSON, booleans as ``--x`` / ``--no-x``)."""
        argv: list[str] = []
        for key, value in self.engine_args.items():
            flag = "--" + key.replace("_", "-")
            if value is True:
                argv.append(flag)
            elif value is False:
                argv.append("--no-" + key.replace("_", "-"))
            elif isinstance(value, (dict, list)):
                argv += [flag, json.dumps(value, separators=(",", ":"))]
            else:
                argv += [flag, str(value)]
        return argv

    def command(self, model: str | None = None) -> str:
        """The one-line shell command that serves this preset with ``vllm serve``.

        Args:
            model: the checkpoint (a directory or Hugging Face id; default :attr:`model`).
        """
        env = {**self.env, **self.serve_env}
        words = [f"{k}={shlex.quote(v)}" for k, v in env.items()]
        words += ["vllm", "serve", shlex.quote(model or self.model)]
        argv = self.cli_args()
        for flag, value in _SERVE_ARGS.items():
            if flag not in argv:  # the AMD block already has --reasoning-parser
                argv += [flag] if value is None else [flag, value]
        return " ".join(words + [shlex.quote(w) for w in argv])


def _preset(
    name: str,
    hardware: Hardware,
    gpu_models: tuple[str, ...],
    checkpoint: Literal["mxfp4", "nvfp4"],
    model: str,
    quantization_backend: str,
    vram_minimum_gb: int,
) -> Preset:
    # command-synthesis.js resolveCommand (single_node_tp): base_args, --tensor-parallel-size
    # <gpu_count: 8 for h200/b200/b300/mi355x in taxonomy.yaml at 8959cf64>, hardware override.
    args = {**_BASE_ARGS, "tensor_parallel_size": 8, **_HARDWARE_ARGS[hardware]}
    return Preset(name, hardware, gpu_models, 8, checkpoint, model, quantization_backend, vram_minimum_gb,
                  args, dict(_HARDWARE_ENV[hardware]), dict(_SERVE_ENV[hardware]))


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        # variants.default (recipe L106-111): precision mxfp4, vram_minimum_gb 1680, model.model_id
        # moonshotai/Kimi-K3 (L26). meta.hardware (L17-23) verifies b200/b300/gb200/gb300 (blackwell),
        # h200 (hopper) and mi355x (amd); default_hardware b300 (L16).
        _preset("k3-mxfp4-blackwell", "blackwell", ("B200", "B300"), "mxfp4", "moonshotai/Kimi-K3",
                "MXFP4 weights, MXFP8 activations (quantization-aware trained)", 1680),
        _preset("k3-mxfp4-hopper", "hopper", ("H200",), "mxfp4", "moonshotai/Kimi-K3",
                "MXFP4 weights, MXFP8 activations (quantization-aware trained)", 1680),
        _preset("k3-mxfp4-mi355x", "amd", ("MI355X", "MI350X"), "mxfp4", "moonshotai/Kimi-K3",
                "MXFP4 weights, MXFP8 activations (quantization-aware trained)", 1680),
        # variants.nvfp4 (recipe L112-116): RedHatAI/Kimi-K3-NVFP4, "RedHatAI compressed-tensors NVFP4
        # quantization; MoE layers quantized to NVFP4", vram_minimum_gb 1650. NVFP4 is Blackwell-only
        # (command-synthesis.js PRECISION_HARDWARE_CONSTRAINTS.nvfp4 at 8959cf64).
        _preset("k3-nvfp4-blackwell", "blackwell", ("B200", "B300"), "nvfp4", "RedHatAI/Kimi-K3-NVFP4",
                "compressed-tensors NVFP4 (MoE layers NVFP4; attention and embeddings full precision)", 1650),
    )
}
"""The K3 presets by name (each on one 8-GPU node, vLLM's recipe; :data:`RECIPE`)."""

DEPRECATED_PRESETS: dict[str, tuple[str, str]] = {
    "k3-nvfp4-b300": (
        "k3-nvfp4-blackwell",
        "it followed kimik3's early deployment notes (quantization=modelopt_mixed, moe_backend=flashinfer_trtllm, "
        "max_model_len=196608, max_num_seqs=32); vLLM's K3 recipe reads the quantization from the checkpoint, "
        "leaves moe_backend automatic and serves 1,048,576 tokens: pass the old values as overrides to keep them",
    ),
    "k3-mxfp4": (
        "k3-mxfp4-blackwell",
        "it followed kimik3's early deployment notes (quantization=mxfp4, max_model_len=131072); the recipe "
        "has one MXFP4 preset per hardware (k3-mxfp4-blackwell, k3-mxfp4-hopper, k3-mxfp4-mi355x) or preset='auto'",
    ),
}
"""Old preset names: name -> (the preset it now means, what changed)."""


def _matches(preset: Preset, gpu: GPU) -> bool:
    if preset.hardware == "amd":
        # MI355X and MI350X are both CDNA 4, graphics target gfx950 (recipe guide L373).
        return gpu.vendor == "amd" and gpu.arch == "gfx950"
    if gpu.vendor != "nvidia":
        return False
    if preset.hardware == "blackwell":
        # Data-center Blackwell reports compute capability 10.x (B200/GB200 10.0, B300/GB300 10.3).
        return gpu.cc_major == 10
    # the model name by token: "NVIDIA H200", "NVIDIA H200 NVL"; not "NVIDIA GH200 480GB" (Grace Hopper)
    return gpu.cc_major == 9 and any(model in _name_tokens(gpu) for model in preset.gpu_models)


def _name_tokens(gpu: GPU) -> set[str]:
    return set(re.split(r"[\s_-]+", gpu.name.upper()))


def _feature_names(features: Any) -> list[str]:
    """``features`` as a list of names: one ``str`` is one feature, None none."""
    if features is None:
        return []
    if isinstance(features, str):
        return [features]
    if isinstance(features, Sequence) and all(isinstance(f, str) for f in features):
        return list(features)
    raise UserError(f"features must be a feature name or a list of them, got {features!r}")


def hardware_mismatch(preset: Preset, gpus: Sequence[GPU]) -> str:
    """Why ``gpus`` do not fit ``preset`` ("" when they do): wrong GPU model or too few."""
    if not gpus:
        return "no GPU found"
    wrong = sorted({g.name for g in gpus if not _matches(preset, g)})
    if wrong:
        note = ""
        if any("GH200" in _name_tokens(g) for g in gpus):
            note = "; GH200 (Grace Hopper) is not in vLLM's K3 recipe (it validates H200, B200/B300, MI355X/MI350X)"
        return f"{', '.join(wrong)} is not a {preset.hardware} GPU of this preset ({'/'.join(preset.gpu_models)}){note}"
    if len(gpus) < preset.gpu_count:
        return f"{len(gpus)} GPUs, the preset needs {preset.gpu_count} (tensor_parallel_size)"
    return ""


def choose_preset(
    gpus: Sequence[GPU], *, checkpoint: Literal["mxfp4", "nvfp4"] = "mxfp4", gpu_count: int | None = None
) -> Preset:
    """The preset for these GPUs (``preset="auto"``), its :attr:`~Preset.reason` saying why.

    Args:
        gpus: the node's GPUs (:func:`~kimik3.engines._gpus.detect_gpus`).
        checkpoint: ``mxfp4`` (the recipe's default) or ``nvfp4`` (Blackwell only).
        gpu_count: GPUs the launch uses (default: the recipe's 8; see :meth:`Preset.with_gpu_count`).

    Raises:
        EngineNotAvailableError: no preset fits (no GPUs, too few, or hardware the recipe does not
            cover on one node, e.g. H100: the recipe needs 32 of them); the message says what was found.
    """
    found = _describe(gpus)
    candidates = [p if gpu_count is None else p.with_gpu_count(gpu_count)
                  for p in PRESETS.values() if p.checkpoint == checkpoint]  # fmt: skip
    for preset in candidates:
        if not hardware_mismatch(preset, gpus):
            return replace(preset, reason=f"{found}: {preset.hardware} with {preset.gpu_count}+ GPUs")
    near = [p.name for p in candidates if gpus and all(_matches(p, g) for g in gpus)]
    hint = f"; {near[0]} needs {gpu_count or PRESETS[near[0]].gpu_count} GPUs" if near else ""
    if any("GH200" in _name_tokens(g) for g in gpus):
        hint += "; GH200 (Grace Hopper) is not in vLLM's K3 recipe"
    raise EngineNotAvailableError(
        f"no K3 {checkpoint} preset fits this node ({found}){hint}. vLLM's K3 recipe covers 8 x B200/B300 "
        "(Blackwell), 8 x H200 (Hopper) and 8 x MI355X/MI350X (AMD); NVFP4 is Blackwell-only. Pass a "
        "preset by name, engine args of your own, or use RemoteEngine against a node that fits"
    )


def _describe(gpus: Sequence[GPU]) -> str:
    if not gpus:
        return "no GPU found"
    names = sorted({g.name for g in gpus})
    arch = sorted({g.arch for g in gpus})
    label = "compute capability" if gpus[0].vendor == "nvidia" else "graphics target"
    return f"{len(gpus)} x {', '.join(names)} ({label} {', '.join(arch)})"


def get_preset(name: str, features: str | Sequence[str] | None = (), *, gpus: Sequence[GPU] | None = None) -> Preset:
    """Look a preset up by name, with features applied.

    Args:
        name: a :data:`PRESETS` key, an old name (:data:`DEPRECATED_PRESETS`, with a
            DeprecationWarning), or ``"auto"`` / ``"auto-nvfp4"`` (chosen from ``gpus``).
        features: opt-in :data:`FEATURES` to apply (one name as a ``str``; None for none).
        gpus: the node's GPUs for ``auto`` (default: detected with nvidia-smi / amd-smi, only
            those ``CUDA_VISIBLE_DEVICES`` & co. leave visible).

    Raises:
        UserError: an unknown preset or feature name, a wrong type, or a feature the recipe
            does not define for the preset's hardware.
        EngineNotAvailableError: ``auto`` and no preset fits the GPUs.
    """
    if not isinstance(name, str):
        raise UserError(f"preset must be a preset name (str), got {type(name).__name__} {name!r}")
    _feature_names(features)  # a wrong type is an error before any GPU detection
    if name in ("auto", "auto-nvfp4"):
        if gpus is None:
            from ._gpus import detect_gpus

            gpus = detect_gpus()
        preset = choose_preset(gpus, checkpoint="nvfp4" if name == "auto-nvfp4" else "mxfp4")
    elif name in DEPRECATED_PRESETS:
        new, why = DEPRECATED_PRESETS[name]
        warnings.warn(f"K3 preset {name!r} is deprecated and now means {new!r}: {why}", DeprecationWarning,
                      stacklevel=3)
        preset = PRESETS[new]
    elif name in PRESETS:
        preset = PRESETS[name]
    else:
        known = [*PRESETS, "auto", "auto-nvfp4", *DEPRECATED_PRESETS]
        raise UserError(f"unknown preset {name!r}; known: {', '.join(known)}")
    return preset.with_features(features)


@contextlib.contextmanager
def applied_env(env: Mapping[str, str | None]) -> Iterator[None]:
    """Set environment variables for the block (``None`` unsets one), then restore each as it was.

    vLLM's engine-core and worker processes inherit the environment when they start, so a block
    around the engine's start is enough.
    """
    saved = {k: os.environ.get(k) for k in env}
    try:
        for k, v in env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, old in saved.items():
            if old is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = old
