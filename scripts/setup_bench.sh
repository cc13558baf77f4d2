#!/usr/bin/env bash
# System packages the benchmarks need, on Debian/Ubuntu: ffmpeg (bench/media.py compares kimik3's
# video sampling with the ffmpeg CLI). Idempotent: installs only what is missing. Without root or
# apt-get it prints what to install and exits 0 (that bench part then skips, saying why).
# Usage (repo root): bash scripts/setup_bench.sh
set -euo pipefail

if command -v ffmpeg >/dev/null 2>&1; then
    echo "setup_bench: ffmpeg already present"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup_bench: no apt-get here: install ffmpeg with your package manager; the video bench skips until then" >&2
    exit 0
fi
sudo_=()
if [[ "$(id -u)" -ne 0 ]]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; then
        sudo_=(sudo -n)
    else
        echo "setup_bench: not root and no password-less sudo: run 'apt-get install -y --no-install-recommends ffmpeg' as root; the video bench skips until then" >&2
        exit 0
    fi
fi
export DEBIAN_FRONTEND=noninteractive
if ! "${sudo_[@]}" apt-get install -y -q --no-install-recommends ffmpeg; then
    # the package lists may be missing or stale on a fresh machine
    "${sudo_[@]}" apt-get update -q
    "${sudo_[@]}" apt-get install -y -q --no-install-recommends ffmpeg
fi
command -v ffmpeg >/dev/null
echo "setup_bench: installed ffmpeg"
