"""K3 presets from vLLM's recipe: every preset x feature set goes through the installed vLLM's own
argument parser and config classes (a renamed flag or a bad JSON config fails here), env is applied
around vLLM's start and restored, old names warn."""

from __future__ import annotations

import dataclasses
import itertools
import os
import warnings
from typing import Any

import pytest
from pydantic import ValidationError

from kimik3._exceptions import EngineError, UserError
from kimik3.engines import FEATURES, PRESETS, Preset, VLLMEngine
from kimik3.engines._presets import DEPRECATED_PRESETS, RECIPE, applied_env, get_preset

vllm = pytest.importorskip("vllm")
from vllm import AsyncEngineArgs  # noqa: E402
from vllm.utils.argparse_utils import FlexibleArgumentParser  # noqa: E402

FEATURE_SETS = [(), *[(f,) for f in FEATURES], *itertools.combinations(FEATURES, 2), tuple(FEATURES)]


@pytest.fixture(scope="module")
def parser() -> Any:
    return AsyncEngineArgs.add_cli_args(FlexibleArgumentParser())


def vllm_check(parser: Any, preset: Preset) -> Any:
    """Parse the preset's `vllm serve` flags with vLLM's parser and check them against vLLM's own types.

    Returns the parsed AsyncEngineArgs; raises AssertionError with the reason when vLLM refuses.
    """
    flags = [a for a in preset.cli_args() if a.startswith("--")]
    inexact = [f for f in flags if f not in parser._option_string_actions]  # argparse would take a prefix
    assert not inexact, f"not vLLM flags: {inexact}"
    try:
        ns = parser.parse_args(["--model", "/models/k3", *preset.cli_args()])
    except SystemExit as e:
        raise AssertionError(f"vLLM's parser refused {preset.cli_args()}") from e
    parsed = AsyncEngineArgs.from_cli_args(ns)
    direct = AsyncEngineArgs(model="/models/k3", **preset.engine_args)  # what VLLMEngine builds
    for key in preset.engine_args:
        assert getattr(parsed, key) == getattr(direct, key), key
    # What the parser leaves as free strings / dicts, checked against vLLM's registries and types.
    from pydantic import TypeAdapter
    from vllm.config import SpeculativeConfig
    from vllm.model_executor.model_loader import LoadFormats
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    if "attention_backend" in preset.engine_args:
        assert preset.engine_args["attention_backend"] in AttentionBackendEnum.__members__
    if "load_format" in preset.engine_args:
        TypeAdapter(LoadFormats).validate_python(preset.engine_args["load_format"])
    spec = preset.engine_args.get("speculative_config")
    if spec is not None:
        fields = {f.name: f for f in dataclasses.fields(SpeculativeConfig)}
        for key, value in spec.items():
            assert key in fields, f"SpeculativeConfig has no field {key!r}"
            TypeAdapter(fields[key].type).validate_python(value)
    return parsed


@pytest.mark.parametrize("features", FEATURE_SETS, ids=lambda f: "+".join(f) or "base")
@pytest.mark.parametrize("name", list(PRESETS))
def test_every_preset_builds_valid_engine_args_on_installed_vllm(parser: Any, name: str, features: tuple[str, ...]) -> None:
    if "decode_context_parallelism" in features and PRESETS[name].hardware != "blackwell":
        with pytest.raises(UserError, match="'decode_context_parallelism' is defined for blackwell GPUs only"):
            get_preset(name, features)
        return
    preset = get_preset(name, features)
    parsed = vllm_check(parser, preset)
    assert parsed.tensor_parallel_size == 8 and parsed.trust_remote_code is True
    assert preset.features == features


def test_the_check_catches_renamed_flags_and_bad_configs(parser: Any) -> None:
    base = PRESETS["k3-mxfp4-hopper"]
    bad_variants = [
        {"max_num_seq": 5},  # a renamed / misspelt flag
        {"moe_backend": "marlinn"},  # not one of vLLM's MoE backends
        {"attention_backend": "FLASH_MLA"},  # not a vLLM attention backend (FLASHMLA is)
        {"attention_config": {"use_prefill_query_quantisation": True}},  # a JSON config key vLLM lacks
        {"compilation_config": {"cudagraph_mode": "FULL_DECODE"}},
        {"speculative_config": {**FEATURES["spec_decoding"].engine_args["speculative_config"], "method": "d_spark"}},
        {"speculative_config": {"model": "m", "num_speculative_token": 8}},
        {"load_format": "fast_safetensors"},
    ]
    for extra in bad_variants:
        broken = dataclasses.replace(base, engine_args={**base.engine_args, **extra})
        with pytest.raises((AssertionError, KeyError, ValidationError)):
            vllm_check(parser, broken)


def test_blackwell_values_as_the_recipe_states_them(parser: Any) -> None:
    parsed = vllm_check(parser, PRESETS["k3-mxfp4-blackwell"])
    assert parsed.max_model_len == 1_048_576 and parsed.kv_cache_dtype == "fp8"
    assert parsed.load_format == "fastsafetensors" and parsed.enable_flashinfer_autotune is False
    assert parsed.enable_prefix_caching is True and parsed.gpu_memory_utilization == 0.95
    assert parsed.attention_config.use_prefill_query_quantization is True
    assert parsed.attention_config.mla_prefill_backend.name == "FLASHINFER"
    assert parsed.moe_backend == "auto"  # the recipe leaves it to vLLM
    assert PRESETS["k3-mxfp4-blackwell"].command() == (
        "VLLM_ALLREDUCE_USE_FLASHINFER=1 VLLM_ENGINE_READY_TIMEOUT_S=3600 VLLM_USE_V2_MODEL_RUNNER=1 "
        "VLLM_USE_RUST_FRONTEND=1 vllm serve moonshotai/Kimi-K3 --trust-remote-code --gpu-memory-utilization 0.95 "
        "--tensor-parallel-size 8 --load-format fastsafetensors --no-enable-flashinfer-autotune "
        "--max-model-len 1048576 --kv-cache-dtype fp8 "
        """--attention-config '{"use_prefill_query_quantization":true,"mla_prefill_backend":"flashinfer"}' """
        "--enable-prefix-caching --enable-auto-tool-choice --tool-call-parser kimi_k3 --reasoning-parser kimi_k3"
    )


def test_hopper_amd_and_nvfp4_values(parser: Any) -> None:
    hopper = vllm_check(parser, PRESETS["k3-mxfp4-hopper"])
    assert (hopper.max_model_len, hopper.max_num_seqs, hopper.max_num_batched_tokens) == (32_768, 5, 4096)
    assert hopper.moe_backend == "marlin" and hopper.attention_backend == "FLASHMLA"
    assert hopper.disable_custom_all_reduce is True and hopper.gpu_memory_utilization == 0.97
    assert hopper.load_format == "auto" and hopper.kv_cache_dtype == "auto"  # Blackwell-only settings stay off
    amd = vllm_check(parser, PRESETS["k3-mxfp4-mi355x"])
    assert (amd.max_num_seqs, amd.mm_encoder_tp_mode, amd.reasoning_parser) == (128, "data", "kimi_k3")
    assert amd.compilation_config.custom_ops == ["+fused_rms_norm_gated"]
    assert amd.compilation_config.cudagraph_mode.name == "FULL_DECODE_ONLY"
    assert PRESETS["k3-mxfp4-mi355x"].command().count("--reasoning-parser") == 1
    nv = PRESETS["k3-nvfp4-blackwell"]
    assert nv.model == "RedHatAI/Kimi-K3-NVFP4" and nv.checkpoint == "nvfp4" and nv.vram_minimum_gb == 1650
    assert "compressed-tensors" in nv.quantization_backend
    assert nv.engine_args == PRESETS["k3-mxfp4-blackwell"].engine_args  # the recipe's variant adds no flags
    assert nv.command("/models/k3-nvfp4").split(" vllm serve ")[1].startswith("/models/k3-nvfp4 --trust-remote-code")


def test_features_compose_per_hardware() -> None:
    spec = FEATURES["spec_decoding"].engine_args["speculative_config"]
    assert spec == {"model": "RedHatAI/Kimi-K3-speculator.dspark", "num_speculative_tokens": 8, "method": "dspark",
                    "draft_sample_method": "probabilistic", "rejection_sample_method": "block"}
    amd = get_preset("k3-mxfp4-mi355x", ["spec_decoding"])
    assert amd.engine_args["max_num_seqs"] == 128 and amd.engine_args["speculative_config"] == spec
    hopper = get_preset("k3-mxfp4-hopper", ["spec_decoding", "text_only"])
    assert hopper.engine_args["max_num_seqs"] == 5 and hopper.engine_args["language_model_only"] is True
    dcp = get_preset("k3-mxfp4-blackwell", ["decode_context_parallelism"])
    assert dcp.engine_args["attention_config"] == {"use_prefill_query_quantization": True,
                                                    "mla_prefill_backend": "TRTLLM_RAGGED"}
    assert (dcp.engine_args["decode_context_parallel_size"], dcp.engine_args["dcp_comm_backend"],
            dcp.engine_args["attention_backend"]) == (8, "a2a", "TOKENSPEED_MLA")
    assert PRESETS["k3-mxfp4-blackwell"].engine_args["attention_config"]["mla_prefill_backend"] == "flashinfer"
    twice = get_preset("k3-mxfp4-hopper", ["text_only", "text_only"])
    assert twice.features == ("text_only",)
    with pytest.raises(UserError, match="unknown preset feature 'mtp'"):
        get_preset("k3-mxfp4-hopper", ["mtp"])
    with pytest.raises(UserError, match="unknown preset 'k3-fp8'"):
        get_preset("k3-fp8")


def test_env_names_against_vllm_032() -> None:
    import vllm.envs

    env_names = {k for p in PRESETS.values() for k in (*p.env, *p.serve_env)}
    unknown = sorted(k for k in env_names if k.startswith("VLLM_") and k not in vllm.envs.environment_variables)
    # The recipe's AMD a8w4 MoE switch is read by the ROCm K3 image, not by vLLM 0.32's envs.py.
    assert unknown == ["VLLM_ROCM_USE_AITER_MOE_SITUV2_A8W4"]
    assert PRESETS["k3-mxfp4-blackwell"].env == {"VLLM_ALLREDUCE_USE_FLASHINFER": "1",
                                                 "VLLM_ENGINE_READY_TIMEOUT_S": "3600",
                                                 "VLLM_USE_V2_MODEL_RUNNER": "1"}
    assert PRESETS["k3-mxfp4-hopper"].serve_env == {"VLLM_USE_RUST_FRONTEND": "1"}  # frontend: vllm serve only
    assert PRESETS["k3-mxfp4-mi355x"].env["VLLM_USE_BREAKABLE_CUDAGRAPH"] == "0"


def test_applied_env_sets_and_restores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_ENGINE_READY_TIMEOUT_S", "60")
    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
    monkeypatch.setenv("KIMIK3_TEST_UNSET", "x")
    env = {"VLLM_ENGINE_READY_TIMEOUT_S": "3600", "VLLM_USE_V2_MODEL_RUNNER": "1", "KIMIK3_TEST_UNSET": None}
    with applied_env(env):
        assert os.environ["VLLM_ENGINE_READY_TIMEOUT_S"] == "3600" and os.environ["VLLM_USE_V2_MODEL_RUNNER"] == "1"
        assert "KIMIK3_TEST_UNSET" not in os.environ
    assert os.environ["VLLM_ENGINE_READY_TIMEOUT_S"] == "60" and os.environ["KIMIK3_TEST_UNSET"] == "x"
    assert "VLLM_USE_V2_MODEL_RUNNER" not in os.environ
    with pytest.raises(RuntimeError, match="boom"), applied_env(env):
        raise RuntimeError("boom")
    assert os.environ["VLLM_ENGINE_READY_TIMEOUT_S"] == "60" and "VLLM_USE_V2_MODEL_RUNNER" not in os.environ


async def test_engine_applies_the_preset_env_while_vllm_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm.v1.engine.async_llm import AsyncLLM

    seen: dict[str, str | None] = {}

    def from_engine_args(engine_args: Any, *args: Any, **kwargs: Any) -> Any:
        for key in ("VLLM_ENGINE_READY_TIMEOUT_S", "VLLM_USE_V2_MODEL_RUNNER", "PYTORCH_CUDA_ALLOC_CONF",
                    "VLLM_USE_RUST_FRONTEND", "KIMIK3_EXTRA"):
            seen[key] = os.environ.get(key)
        seen["max_model_len"] = str(engine_args.max_model_len)
        raise RuntimeError("stop before loading weights")

    monkeypatch.setattr(AsyncLLM, "from_engine_args", staticmethod(from_engine_args))
    for key in ("VLLM_ENGINE_READY_TIMEOUT_S", "VLLM_USE_V2_MODEL_RUNNER", "PYTORCH_CUDA_ALLOC_CONF", "KIMIK3_EXTRA"):
        monkeypatch.delenv(key, raising=False)
    engine = VLLMEngine("/models/k3", preset="k3-mxfp4-hopper", env={"KIMIK3_EXTRA": "1"}, max_model_len=8192)
    with pytest.raises(EngineError, match=r"^vLLM did not start: RuntimeError: stop before loading weights") as info:
        await engine.start()  # typed (issue 40), vLLM's error kept as the cause
    assert isinstance(info.value.__cause__, RuntimeError)
    assert seen == {"VLLM_ENGINE_READY_TIMEOUT_S": "3600", "VLLM_USE_V2_MODEL_RUNNER": "1",
                    "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "VLLM_USE_RUST_FRONTEND": None,
                    "KIMIK3_EXTRA": "1", "max_model_len": "8192"}
    for key in ("VLLM_ENGINE_READY_TIMEOUT_S", "VLLM_USE_V2_MODEL_RUNNER", "PYTORCH_CUDA_ALLOC_CONF", "KIMIK3_EXTRA"):
        assert key not in os.environ  # restored


def test_engine_takes_preset_features_and_overrides() -> None:
    engine = VLLMEngine.from_preset("k3-mxfp4-blackwell", "/models/k3", features=["text_only"], max_model_len=65_536)
    assert engine.engine_args["max_model_len"] == 65_536 and engine.engine_args["language_model_only"] is True
    assert engine.engine_args["model"] == "/models/k3" and engine.preset is not None
    assert engine.preset.features == ("text_only",) and engine.env["VLLM_ALLREDUCE_USE_FLASHINFER"] == "1"
    engine.engine_args["attention_config"]["mla_prefill_backend"] = "x"  # a copy: the preset stays intact
    assert PRESETS["k3-mxfp4-blackwell"].engine_args["attention_config"]["mla_prefill_backend"] == "flashinfer"
    with pytest.raises(UserError, match="features apply to a preset"):
        VLLMEngine("/models/k3", features=["text_only"])
    plain = VLLMEngine("/models/k3", max_model_len=4096)
    assert plain.preset is None and plain.env == {} and plain.engine_args == {"max_model_len": 4096, "model": "/models/k3"}


@pytest.mark.parametrize(("old", "new"), [("k3-nvfp4-b300", "k3-nvfp4-blackwell"), ("k3-mxfp4", "k3-mxfp4-blackwell")])
def test_old_names_keep_working_with_a_deprecation_warning(old: str, new: str) -> None:
    with pytest.warns(DeprecationWarning, match=f"'{old}' is deprecated and now means '{new}'") as record:
        engine = VLLMEngine("/models/k3", preset=old)
    assert record[0].filename == __file__  # points at the caller
    assert engine.preset is not None and engine.preset.name == new
    assert engine.engine_args == {**PRESETS[new].engine_args, "model": "/models/k3"}
    assert DEPRECATED_PRESETS[old][0] == new
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        VLLMEngine("/models/k3", preset=new)  # the new names do not warn


def test_every_value_cites_the_recipe_line() -> None:
    import inspect
    import re

    from kimik3.engines import _presets

    assert "6f19519bb680e870356b72a06d2638d6efc6da70" in RECIPE and "models/moonshotai/Kimi-K3.yaml" in RECIPE
    lines = inspect.getsource(_presets).splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("_BASE_ARGS"))
    end = next(i for i, ln in enumerate(lines) if ln.startswith("class Feature"))
    values = [i for i in range(start, end) if re.match(r'\s+"[A-Za-z_0-9]+": .*,$', lines[i].split("  #")[0])
              or re.match(r'\s+"[A-Za-z_0-9]+": .*,\s+#', lines[i])]
    assert len(values) >= 30
    uncited = [lines[i] for i in values if not re.search(r"L\d+", lines[i] + lines[i - 1])
               and not lines[i].strip().startswith(('"model"', '"num_spec', '"method"', '"draft', '"rejection'))]
    assert uncited == []  # the DSpark dict's keys are cited once, at its definition (L69-70)
