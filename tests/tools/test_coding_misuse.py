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


async def test_names_differing_by_a_backslash_show_apart_and_read_back(tools: dict[str, Tool], tmp_path: Path) -> None:
    (tmp_path / "a\\nb").write_text("literal\n")  # a backslash and an n
    (tmp_path / "a\nb").write_text("newline\n")  # a line feed
    (tmp_path / "t\\x41").write_text("not an A\n")
    with open(bytes(tmp_path) + b"/c\xff", "w") as f:  # an undecodable byte
        f.write("undecodable\n")
    shown = (await tools["glob"].run({"pattern": "*"})).content.splitlines()
    assert sorted(shown) == ["a\\\\nb", "a\\nb", "c\\xff", "t\\\\x41"]
    read = {name: (await tools["read_file"].run({"path": name})).content for name in shown}
    assert read == {
        "a\\\\nb": "     1\tliteral",
        "a\\nb": "     1\tnewline",
        "c\\xff": "     1\tundecodable",
        "t\\\\x41": "     1\tnot an A",
    }
    grep = (await tools["grep"].run({"pattern": "l"})).content.splitlines()
    assert sorted(grep) == ["a\\\\nb:1:literal", "a\\nb:1:newline", "c\\xff:1:undecodable"]
    wrote = await tools["write_file"].run({"path": "new\\\\x", "content": "y"})
    assert wrote.content == "Wrote 1 bytes to new\\\\x"
    assert (tmp_path / "new\\x").read_text() == "y"


@pytest.mark.parametrize("codec", ["utf-16", "utf-16-be", "utf-32", "utf-32-be"])
async def test_utf16_and_utf32_with_bom_are_read_and_edited_in_their_encoding(
    tools: dict[str, Tool], tmp_path: Path, codec: str
) -> None:
    bom = {"utf-16": b"\xff\xfe", "utf-16-be": b"\xfe\xff", "utf-32": b"\xff\xfe\x00\x00", "utf-32-be": b"\x00\x00\xfe\xff"}
    plain = codec if codec.endswith("be") else codec + "-le"
    path = tmp_path / "w.txt"
    path.write_bytes(bom[codec] + "héllo\r\nworld\r\n".encode(plain))
    read = await tools["read_file"].run({"path": "w.txt"})
    assert (read.is_error, read.content) == (False, "     1\théllo\n     2\tworld")
    edit = await tools["edit_file"].run({"path": "w.txt", "old_string": "world", "new_string": "wörld ✓"})
    assert not edit.is_error and edit.content.startswith("Edited w.txt (1 replacement)")
    assert path.read_bytes() == bom[codec] + "héllo\r\nwörld ✓\r\n".encode(plain)


@pytest.mark.parametrize("data", [b"\xff\xfe", b"\xfe\xff", b"\xff\xfe\x00\x00"])
async def test_a_lone_wide_bom_is_an_empty_file_not_latin1(tools: dict[str, Tool], tmp_path: Path, data: bytes) -> None:
    (tmp_path / "b.txt").write_bytes(data)
    read = await tools["read_file"].run({"path": "b.txt"})
    assert (read.is_error, read.content) == (False, "[empty file]")


async def test_broken_utf16_after_its_bom_is_a_clear_error(tools: dict[str, Tool], tmp_path: Path) -> None:
    (tmp_path / "b.txt").write_bytes(b"\xff\xfea\x00\x00\xd8")  # a lone high surrogate
    read = await tools["read_file"].run({"path": "b.txt"})
    assert read.is_error and read.content.startswith("Error: ToolError: b.txt starts with a utf-16-le BOM but is not valid")
