"""Scripted K3 turns and real git repositories for the harness tests."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from kimik3.formats.k3 import render_output


def calls(*items: tuple[str, dict[str, Any]], reasoning: str = "plan") -> str:
    """A raw K3 output calling the given tools (in parallel)."""
    return render_output({"reasoning_content": reasoning, "content": "",
                          "tool_calls": [{"id": f"c{i}", "function": {"name": n, "arguments": a}}
                                         for i, (n, a) in enumerate(items)]})


def answer(text: str) -> str:
    return render_output({"reasoning_content": "done", "content": text})


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


def make_repo(path: Path) -> Path:
    """A git repository with one commit (a.txt, user.txt, sub/keep.txt)."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.name", "Test")
    git(path, "config", "user.email", "test@example.com")
    (path / "a.txt").write_bytes(b"alpha\r\nbeta\r\n")  # CRLF, kept byte for byte
    (path / "user.txt").write_text("committed\n")
    (path / "sub").mkdir()
    (path / "sub" / "keep.txt").write_text("keep\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "init")
    return path
