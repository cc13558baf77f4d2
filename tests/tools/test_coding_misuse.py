"""Coding tools given arguments they cannot honour answer with a clear ToolError, never a silent
"[no matches]" or a file under a different name."""

from __future__ import annotations

from pathlib import Path

import pytest

from kimik3.tools import Tool
from kimik3.tools.coding import coding_tools


@pytest.fixture
def tools(tmp_path: Path) -> dict[str, Tool]:
    return {t.name: t for t in coding_tools(tmp_path)}


@pytest.mark.parametrize("path", ["zz/", "sub/zz/", "a.txt/"])
async def test_write_file_path_with_trailing_slash_is_refused(tools: dict[str, Tool], tmp_path: Path, path: str) -> None:
    result = await tools["write_file"].run({"path": path, "content": "x"})
    assert (result.is_error, result.content) == (
        True, f"Error: ToolError: {path} names a directory (it ends with '/'); give a file path"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["echo a\0b", "\0", "ls; printf 'x\0y'"])
async def test_bash_command_with_nul_is_a_clear_error(tools: dict[str, Tool], command: str) -> None:
    result = await tools["bash"].run({"command": command})
    assert result.is_error
    assert result.content.startswith("Error: ToolError: the command contains a NUL byte")


@pytest.mark.parametrize("glob", ["../**", "/etc/*", "src/../../x", ".."])
async def test_grep_glob_outside_the_workspace_is_the_glob_tools_error(
    tools: dict[str, Tool], tmp_path: Path, glob: str
) -> None:
    (tmp_path / "x.py").write_text("needle\n")
    grep = await tools["grep"].run({"pattern": "needle", "glob": glob})
    globbed = await tools["glob"].run({"pattern": glob})
    expected = f"Error: ToolError: pattern {glob!r} must be relative to the workspace and not use '..'"
    assert (grep.is_error, grep.content) == (True, expected)
    assert (globbed.is_error, globbed.content) == (True, expected)
