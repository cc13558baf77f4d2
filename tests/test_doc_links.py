"""Every relative path the repository's Markdown points at (a link target, or a backticked
``./`` / ``../`` path) exists in a clone: nothing points into the workspace around the repository
(``../../shared/spec/...`` in models/k3-tiny/README.md did)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)\s]+)\)|`(\.\.?/[^`\s]+)`")


def relative_targets(text: str) -> list[str]:
    out = []
    for m in LINK.finditer(text):
        target = (m.group(1) or m.group(2)).split("#")[0]
        if target and not re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, mailto:, ...
            out.append(target)
    return out


def test_relative_targets_are_found() -> None:
    text = "see [the format](../../docs/k3-format.md#tools), `../../shared/spec/x.md`, [web](https://x.org), [a](#b)"
    assert relative_targets(text) == ["../../docs/k3-format.md", "../../shared/spec/x.md"]


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs git and a checkout")
def test_every_relative_path_in_the_markdown_exists() -> None:
    listed = subprocess.run(["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True, text=True, check=True)
    files = [ROOT / p for p in listed.stdout.split() if not p.startswith(("notes/", "tests/data/"))]
    assert ROOT / "models/k3-tiny/README.md" in files
    missing = [(str(f.relative_to(ROOT)), t) for f in files if f.exists()
               for t in relative_targets(f.read_text(encoding="utf-8")) if not (f.parent / t).exists()]
    assert missing == []
