"""Helpers for the newcomer tests (issue 16): README snippets and commands run as a new user runs
them, in child processes."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
NOTES_FIRST_LINE = "Ship the parser before the agent."


def readme_python_blocks() -> list[str]:
    """The README's ```python blocks, in order."""
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def sdk_snippet() -> str:
    (block,) = [b for b in readme_python_blocks() if "VLLMEngine(" in b and "async def main" in b]
    return block


def offline_snippet() -> str:
    (block,) = [b for b in readme_python_blocks() if "ScriptedEngine(" in b and "@tool" in b
                and "CodingHarness(" not in b]
    return block


def own_tool_snippet() -> str:
    (block,) = [b for b in readme_python_blocks() if "CodingHarness(" in b and "tools=[deploy]" in b]
    return block


def new_user_dir(tmp_path: Path) -> Path:
    """A directory laid out like the repository root for snippets with relative paths: models/
    linked, examples/ copied (the agent may write there)."""
    home = tmp_path / "user"
    home.mkdir()
    (home / "models").symlink_to(ROOT / "models")
    shutil.copytree(ROOT / "examples", home / "examples")
    return home


def run_python(cwd: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """This Python with kimik3 importable (as after `make`), in ``cwd``; KIMIK3_HOME under cwd."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KIMIK3_HOME": str(cwd / ".kimik3")}
    env.pop("VLLM_CPU_KVCACHE_SPACE", None)  # as a new user has it: kimik3 sizes the CPU KV cache
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
