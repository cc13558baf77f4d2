#!/usr/bin/env bash
# System packages for kimik3's tool tests, on Debian/Ubuntu: ripgrep (the coding tools' grep uses
# it when installed; its tests need it), bubblewrap (bash runs its commands in a bwrap sandbox:
# docs/sandbox.md; its tests need it) and, for UI automation (kimik3.tools.ui):
#   xvfb (virtual X display), xdotool (X11 input), chromium (driven by Playwright through
#   executable_path; `playwright install` is never run), fonts-dejavu-core (readable text in
#   screenshots), and python3-tk when the venv's Python cannot import tkinter (the Tk test window
#   then runs under /usr/bin/python3).
# Idempotent: installs only what is missing. Without root or apt-get it prints what to install and
# exits 0 (the UI and sandbox tests then skip, saying why). Usage (repo root): bash scripts/setup_ui.sh [VENV=.venv]
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here/.."
VENV="${VENV:-.venv}"
PY="$VENV/bin/python"

missing=()
command -v rg >/dev/null 2>&1 || missing+=(ripgrep)
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v Xvfb >/dev/null 2>&1 || missing+=(xvfb)
command -v xdotool >/dev/null 2>&1 || missing+=(xdotool)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
[[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ]] || missing+=(fonts-dejavu-core)
venv_tk=no
if [[ -x "$PY" ]] && "$PY" -c 'import tkinter' >/dev/null 2>&1; then
    venv_tk=yes
elif ! /usr/bin/python3 -c 'import tkinter' >/dev/null 2>&1; then
    missing+=(python3-tk)
fi

if [[ ${#missing[@]} -eq 0 ]]; then
    echo "setup_ui: ripgrep, bubblewrap, xvfb, xdotool, chromium, fonts and tkinter already present (venv tkinter: $venv_tk)"
    exit 0
fi

echo "setup_ui: missing: ${missing[*]}"
if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup_ui: no apt-get here: install ${missing[*]} with your package manager; the UI tests skip until then" >&2
    exit 0
fi
sudo_=()
if [[ "$(id -u)" -ne 0 ]]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; then
        sudo_=(sudo -n)
    else
        echo "setup_ui: not root and no password-less sudo: run 'apt-get install -y --no-install-recommends ${missing[*]}' as root; the UI tests skip until then" >&2
        exit 0
    fi
fi

export DEBIAN_FRONTEND=noninteractive
if ! "${sudo_[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"; then
    # the package lists may be missing or stale on a fresh machine
    "${sudo_[@]}" apt-get update -q
    "${sudo_[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
command -v Xvfb >/dev/null && command -v xdotool >/dev/null && command -v chromium >/dev/null && command -v bwrap >/dev/null
echo "setup_ui: installed ${missing[*]}"
