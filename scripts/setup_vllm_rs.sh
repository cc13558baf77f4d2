#!/usr/bin/env bash
# Fetch vLLM's Rust frontend binary (`vllm/vllm-rs` inside the vllm==0.33.0 wheel on PyPI, runs on
# CPU, no GPU or engine needed) into ${KIMIK3_CACHE:-.cache}/vllm-rs/vllm-rs, for the differential
# renderer test (tests/formats/test_k3_vllm_rs_oracle.py). The wheel is ~336 MB; only the ~61 MB
# binary is kept. Idempotent: re-running is a no-op once the binary is there.
# Usage (repo root): bash scripts/setup_vllm_rs.sh      [VENV=.venv KIMIK3_CACHE=.cache]
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here/.."
VENV="${VENV:-.venv}"
KIMIK3_CACHE="${KIMIK3_CACHE:-.cache}"
DEST="$KIMIK3_CACHE/vllm-rs"
BIN="$DEST/vllm-rs"
VERSION=0.33.0

if [[ -x "$BIN" ]]; then
    echo "setup_vllm_rs: $BIN already there"
    exit 0
fi
if [[ "$(uname -s)-$(uname -m)" != "Linux-x86_64" && "$(uname -s)-$(uname -m)" != "Linux-aarch64" ]]; then
    echo "setup_vllm_rs: vllm==$VERSION ships vllm-rs for Linux x86_64/aarch64 only; skipping" >&2
    exit 0
fi
mkdir -p "$DEST/wheel"
"$VENV/bin/python" -m pip download --disable-pip-version-check -q "vllm==$VERSION" --no-deps \
    --only-binary=:all: --platform "manylinux_2_28_$(uname -m)" --python-version 3.11 -d "$DEST/wheel"
"$VENV/bin/python" - "$DEST" <<'PY'
import glob, os, sys, zipfile
dest = sys.argv[1]
wheel = sorted(glob.glob(os.path.join(dest, "wheel", "vllm-*.whl")))[-1]
with zipfile.ZipFile(wheel) as z, z.open("vllm/vllm-rs") as src, open(os.path.join(dest, "vllm-rs.tmp"), "wb") as out:
    out.write(src.read())
os.chmod(os.path.join(dest, "vllm-rs.tmp"), 0o755)
os.replace(os.path.join(dest, "vllm-rs.tmp"), os.path.join(dest, "vllm-rs"))
print(f"setup_vllm_rs: extracted vllm/vllm-rs from {os.path.basename(wheel)}")
PY
rm -rf "$DEST/wheel"
