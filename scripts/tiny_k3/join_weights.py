"""Join the sharded bf16 weights written by ``train.py`` into one ``model.safetensors`` in the
model directory (the device tool returns files of at most 16 MiB, so training writes shards).

Checks that the trained architecture equals the model directory's ``config.json`` and copies
``train_log.json`` beside the weights.

Usage: python scripts/tiny_k3/join_weights.py TRAIN_OUT_DIR [--model models/k3-tiny]
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from safetensors import safe_open
from safetensors.torch import save_file

REPO = Path(__file__).resolve().parents[2]
_ARCH_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "head_dim", "tie_word_embeddings", "eos_token_id")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", type=Path)
    ap.add_argument("--model", type=Path, default=REPO / "models" / "k3-tiny")
    args = ap.parse_args()
    trained = json.loads((args.src / "config.json").read_text())
    ours = json.loads((args.model / "config.json").read_text())
    diff = {k: (trained.get(k), ours.get(k)) for k in _ARCH_KEYS if trained.get(k) != ours.get(k)}
    if diff:
        raise SystemExit(f"trained config differs from {args.model}/config.json: {diff}")
    index = args.src / "model.safetensors.index.json"
    files = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.exists() else ["model.safetensors"]
    tensors = {}
    for name in files:
        with safe_open(str(args.src / name), framework="pt") as f:
            for key in f.keys():  # noqa: SIM118 - safe_open has no __iter__
                tensors[key] = f.get_tensor(key)
    out = args.model / "model.safetensors"
    save_file(dict(sorted(tensors.items())), str(out), metadata={"format": "pt"})
    out.chmod(0o644)
    if (args.src / "train_log.json").exists():
        shutil.copyfile(args.src / "train_log.json", args.model / "train_log.json")
    n = sum(t.numel() for t in tensors.values())
    print(f"{out}: {len(tensors)} tensors, {n / 1e6:.2f}M parameters, {out.stat().st_size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
