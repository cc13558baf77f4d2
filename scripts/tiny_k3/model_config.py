"""Write the tiny model's ``config.json`` and ``generation_config.json`` (step 2b; after
``build_tokenizer.py``, which fixes the vocabulary).

Architecture: a standard Llama decoder (vLLM runs it on CPU), tied embeddings; v3 is ~20M
parameters (bf16 weights ~40 MB) with an 8,192-token window (RoPE), trained on conversations up
to that length. Special ids are read from the model directory's
``tokenizer_config.json``: ``eos_token_id`` is ``<|end_of_msg|>`` (K3's stop token).

Usage: python scripts/tiny_k3/model_config.py [--model models/k3-tiny]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

ARCH = {  # v3 (v1/v2: hidden 384, MLP 768, 6 heads, 4096 positions: 11.9M parameters)
    "hidden_size": 512,
    "intermediate_size": 1024,
    "num_hidden_layers": 8,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "max_position_embeddings": 8192,  # the full harness's header is ~2,400 tokens
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
}


def param_count(vocab: int, a: dict[str, float] = ARCH) -> int:
    d, f, n = int(a["hidden_size"]), int(a["intermediate_size"]), int(a["num_hidden_layers"])
    hd = int(a["head_dim"])
    attn = d * hd * int(a["num_attention_heads"]) * 2 + d * hd * int(a["num_key_value_heads"]) * 2
    return vocab * d + n * (attn + 3 * d * f + 2 * d) + d


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=REPO / "models" / "k3-tiny")
    args = ap.parse_args()
    tok_cfg = json.loads((args.model / "tokenizer_config.json").read_text())
    ids = {v["content"]: int(k) for k, v in tok_cfg["added_tokens_decoder"].items()}
    num_base = sum(1 for line in (args.model / "tiktoken.model").read_text().splitlines() if line.strip())
    vocab = num_base + 256
    config = {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": ids["[BOS]"],
        "dtype": "bfloat16",
        "eos_token_id": ids["<|end_of_msg|>"],
        "head_dim": ARCH["head_dim"],
        "hidden_act": "silu",
        "hidden_size": ARCH["hidden_size"],
        "initializer_range": 0.02,
        "intermediate_size": ARCH["intermediate_size"],
        "max_position_embeddings": ARCH["max_position_embeddings"],
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": ARCH["num_attention_heads"],
        "num_hidden_layers": ARCH["num_hidden_layers"],
        "num_key_value_heads": ARCH["num_key_value_heads"],
        "pad_token_id": ids["[PAD]"],
        "pretraining_tp": 1,
        "rms_norm_eps": ARCH["rms_norm_eps"],
        "rope_parameters": {"rope_theta": ARCH["rope_theta"], "rope_type": "default"},
        "tie_word_embeddings": True,
        "use_cache": True,
        "vocab_size": vocab,
    }
    gen = {
        "bos_token_id": ids["[BOS]"],
        "eos_token_id": ids["<|end_of_msg|>"],
        "pad_token_id": ids["[PAD]"],
        "do_sample": False,
    }
    (args.model / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (args.model / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
    n = param_count(vocab)
    print(f"vocab {vocab}, {n / 1e6:.2f}M parameters, {2 * n / 1e6:.1f} MB in bf16 (tied embeddings)")


if __name__ == "__main__":
    main()
