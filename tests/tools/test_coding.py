"""The coding toolkit: bash, read_file, write_file, edit_file, grep, glob bound to a workspace."""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from kimik3 import ToolDefinitionError
from kimik3.tools import Tool, ToolResult, coding, truncate_middle
from kimik3.tools.coding import Sandbox, coding_tools

from ..procs import MODES, alive_with, marker

HAS_PROC = os.path.isdir("/proc")
STATUS_RE = re.compile(r"\[exit code: (\d+), \d+\.\d\d s\]")


async def _ok(t: Tool, **args: object) -> str:
    result = await t.run(args)
    assert not result.is_error, result.content
    assert isinstance(result.content, str)
    return result.content


async def _err(t: Tool, **args: object) -> str:
    result = await t.run(args)
    assert result.is_error, result.content
    assert isinstance(result.content, str)
    return result.content


def test_tool_names_and_argument_names(ws: Path) -> None:
    ts = coding_tools(ws)
    assert [(t.name, list(t.parameters["properties"]), t.parameters.get("required")) for t in ts] == [
        ("bash", ["command", "timeout"], ["command"]),
        ("read_file", ["path", "offset", "limit"], ["path"]),
        ("write_file", ["path", "content"], ["path", "content"]),
        ("edit_file", ["path", "old_string", "new_string", "replace_all"], ["path", "old_string", "new_string"]),
        ("grep", ["pattern", "path", "glob"], ["pattern"]),
        ("glob", ["pattern"], ["pattern"]),
    ]
    assert ts[0].parameters["properties"]["timeout"] == {
        "type": "integer",
        "description": "seconds before the command and all its child processes are killed.",
        "minimum": 1,
        "default": 120,
    }
    assert coding_tools(ws, bash_timeout=7)[0].parameters["properties"]["timeout"]["default"] == 7
    assert all(t.description and "Args:" not in t.description for t in ts)


def test_root_must_be_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ToolDefinitionError, match="is not a directory"):
        coding_tools(tmp_path / "missing")


# -- bash ------------------------------------------------------------------------------------


async def test_bash_output_and_exit_code(tools: dict[str, Tool], ws: Path) -> None:
    out = await _ok(tools["bash"], command="echo out; echo err >&2; pwd; exit 3")
    lines = out.split("\n")
    assert lines[:3] == ["out", "err", str(ws.resolve())]
    assert STATUS_RE.fullmatch(lines[3]) and STATUS_RE.fullmatch(lines[3]).group(1) == "3"  # type: ignore[union-attr]
    assert len(lines) == 4


async def test_bash_no_output_and_signal_exit(tools: dict[str, Tool]) -> None:
    assert STATUS_RE.fullmatch(await _ok(tools["bash"], command="true"))
    out = await _ok(tools["bash"], command="kill -9 $$")
    assert STATUS_RE.fullmatch(out) and STATUS_RE.fullmatch(out).group(1) == "137"  # type: ignore[union-attr]


async def test_bash_stdin_is_empty(tools: dict[str, Tool]) -> None:
    out = await _ok(tools["bash"], command="cat; echo done")
    assert out.split("\n")[0] == "done"


async def test_bash_output_capped_head_and_tail_exactly(ws: Path) -> None:
    bash = coding_tools(ws, max_output_chars=200)[0]
    out = await _ok(bash, command="seq 1 100000")
    full = "".join(f"{i}\n" for i in range(1, 100001))
    body, status = out.rsplit("\n", 1)
    assert STATUS_RE.fullmatch(status)
    assert body == truncate_middle(full, 200).rstrip("\n")
    assert body.startswith("1\n2\n3\n") and body.endswith("\n99999\n100000")
    assert "\n... [588" in body  # 588895 characters: the exact count is checked through truncate_middle
    assert len(body) <= 200


@pytest.mark.skipif(not HAS_PROC, reason="process check reads /proc")
async def test_bash_timeout_kills_the_whole_group(tools: dict[str, Tool]) -> None:
    # The inner shell ignores SIGTERM, and so do its children; the background sleep also holds
    # the output pipe. The call must still return, and leave no live process behind.
    m = marker()
    command = f"sh -c 'trap \"\" TERM; sleep {m} & sleep {m}'"
    start = time.monotonic()
    out = await _ok(tools["bash"], command=command, timeout=1)
    print(f"bash timeout=1 returned after {time.monotonic() - start:.2f} s")
    assert out == "[timed out after 1 s; process group killed]"
    assert alive_with(m) == []


@pytest.mark.skipif(not HAS_PROC, reason="process check reads /proc")
async def test_bash_background_process_holding_the_pipe(tools: dict[str, Tool]) -> None:
    m = marker()
    out = await _ok(tools["bash"], command=f"sleep {m} & echo started")
    started, note, status = out.split("\n")
    assert (started, note) == ("started", "[background processes holding the output were killed]")
    assert STATUS_RE.fullmatch(status) and STATUS_RE.fullmatch(status).group(1) == "0"  # type: ignore[union-attr]
    assert alive_with(m) == []


@pytest.mark.skipif(not HAS_PROC, reason="process check reads /proc")
@pytest.mark.parametrize("mode", MODES)
async def test_bash_redirected_background_process_runs_until_the_sandbox_ends(ws: Path, mode: str) -> None:
    """Redirected, it keeps running after the command (the result says so) and ends with the
    sandbox (the run); no process outlives it."""
    box = Sandbox(ws, mode)
    bash = coding_tools(ws, sandbox=box)[0]
    m = marker()
    out = await _ok(bash, command=f"sleep {m} > /dev/null 2>&1 & echo $!")
    pid_line, note, status = out.split("\n")
    assert note == f"[still running after the command: {pid_line}; they end when the run ends]"
    assert STATUS_RE.fullmatch(status)
    assert len(alive_with(m)) == 1
    assert (await _ok(bash, command=f"kill -0 {pid_line} && echo alive")).startswith("alive\n")  # the same sandbox
    await box.aclose()
    assert alive_with(m) == []


@pytest.mark.skipif(not HAS_PROC, reason="process check reads /proc")
async def test_bash_cancellation_kills_the_group(tools: dict[str, Tool], ws: Path) -> None:
    m = marker()

    async def cancel_when_started(scope: anyio.CancelScope) -> None:
        while len(alive_with(m)) < 2:
            await anyio.sleep(0.01)
        scope.cancel()

    async with anyio.create_task_group() as tg:
        with anyio.CancelScope() as scope:
            tg.start_soon(cancel_when_started, scope)
            await tools["bash"].run({"command": f"sleep {m} & sleep {m}"})
    assert scope.cancelled_caught
    assert alive_with(m) == []


async def test_bash_invalid_timeout(tools: dict[str, Tool]) -> None:
    assert await _err(tools["bash"], command="ls", timeout="abc") == (
        "Error: ToolArgumentsError: timeout: Input should be a valid integer, unable to parse string "
        "as an integer (got 'abc')"
    )
    assert await _err(tools["bash"], command="ls", timeout=0) == (
        "Error: ToolArgumentsError: timeout: Input should be greater than or equal to 1 (got 0)"
    )


# -- read_file -------------------------------------------------------------------------------


async def test_read_file_numbered_lines(tools: dict[str, Tool], ws: Path) -> None:
    (ws / "f.txt").write_bytes(b"alpha\nbeta\r\n\tgamma")
    assert await _ok(tools["read_file"], path="f.txt") == "     1\talpha\n     2\tbeta\n     3\t\tgamma"


async def test_read_file_range_and_more_note(tools: dict[str, Tool], ws: Path) -> None:
    (ws / "f.txt").write_text("".join(f"line {i}\n" for i in range(1, 13)))
    read = tools["read_file"]
    assert await _ok(read, path="f.txt", offset=10, limit=2) == (
        "    10\tline 10\n    11\tline 11\n[1 more line; continue with offset=12]"
    )
    assert await _ok(read, path="f.txt", offset="2", limit=3) == (
        "     2\tline 2\n     3\tline 3\n     4\tline 4\n[8 more lines; continue with offset=5]"
    )
    assert await _ok(read, path="f.txt", offset=12) == "    12\tline 12"
    assert await _err(read, path="f.txt", offset=13) == (
        "Error: ToolError: offset 13 is past the end of f.txt (12 lines)"
    )


async def test_read_file_special_cases(tools: dict[str, Tool], ws: Path) -> None:
    read = tools["read_file"]
    (ws / "empty.txt").write_bytes(b"")
    (ws / "img.bin").write_bytes(b"\x89PNG\x00\x01")
    (ws / "latin.txt").write_bytes(b"caf\xe9\n")
    (ws / "bom.txt").write_bytes(b"\xef\xbb\xbfhi\n")
    (ws / "long.txt").write_text("x" * 2005 + "\n")
    (ws / "dir").mkdir()
    assert await _ok(read, path="empty.txt") == "[empty file]"
    assert await _err(read, path="img.bin") == "Error: ToolError: img.bin is a binary file (6 bytes)"
    assert await _ok(read, path="latin.txt") == "     1\tcafé"
    assert await _ok(read, path="bom.txt") == "     1\thi"
    assert await _ok(read, path="long.txt") == "     1\t" + "x" * 2000 + "... [5 more characters]"
    assert await _err(read, path="nope.txt") == "Error: ToolError: nope.txt: no such file"
    assert await _err(read, path="dir") == "Error: ToolError: dir is a directory"


# -- write_file ------------------------------------------------------------------------------


async def test_write_file(tools: dict[str, Tool], ws: Path) -> None:
    write = tools["write_file"]
    assert await _ok(write, path="sub/dir/f.txt", content="héllo\n") == "Wrote 7 bytes to sub/dir/f.txt"
    assert (ws / "sub/dir/f.txt").read_bytes() == "héllo\n".encode()
    assert await _ok(write, path="./sub/../g.txt", content="") == "Wrote 0 bytes to g.txt"
    assert await _ok(write, path=str(ws / "abs.txt"), content="a\r\nb") == "Wrote 4 bytes to abs.txt"
    assert (ws / "abs.txt").read_bytes() == b"a\r\nb"
    assert await _err(write, path="sub", content="x") == "Error: ToolError: sub is a directory"


# -- edit_file -------------------------------------------------------------------------------


async def test_edit_crlf_file_with_lf_strings_keeps_crlf(tools: dict[str, Tool], ws: Path) -> None:
    original = b"one\r\ntwo\r\nthree\r\nfour\r\n"
    (ws / "win.txt").write_bytes(original)
    out = await _ok(tools["edit_file"], path="win.txt", old_string="two\nthree", new_string="TWO\nTHREE\nextra")
    assert (ws / "win.txt").read_bytes() == b"one\r\nTWO\r\nTHREE\r\nextra\r\nfour\r\n"
    assert out == (
        "Edited win.txt (1 replacement)\n"
        "--- a/win.txt\n"
        "+++ b/win.txt\n"
        "@@ -1,4 +1,5 @@\n"
        " one\n"
        "-two\n"
        "-three\n"
        "+TWO\n"
        "+THREE\n"
        "+extra\n"
        " four"
    )


async def test_edit_exactly_once_unless_replace_all(tools: dict[str, Tool], ws: Path) -> None:
    edit = tools["edit_file"]
    (ws / "f.py").write_text("x = 1\ny = 1\nz = 2\n")
    assert await _err(edit, path="f.py", old_string="= 1", new_string="= 3") == (
        "Error: ToolError: old_string matches 2 times in f.py; add surrounding lines to make it unique, "
        "or set replace_all to true"
    )
    assert await _err(edit, path="f.py", old_string="w = 1", new_string="w = 3") == (
        "Error: ToolError: old_string not found in f.py; it must match the file exactly"
    )
    assert await _err(edit, path="f.py", old_string="", new_string="a") == (
        "Error: ToolError: old_string is empty; use write_file to create or overwrite a file"
    )
    assert await _err(edit, path="f.py", old_string="x", new_string="x") == (
        "Error: ToolError: old_string and new_string are identical; nothing to change"
    )
    assert (ws / "f.py").read_text() == "x = 1\ny = 1\nz = 2\n"
    out = await _ok(edit, path="f.py", old_string="= 1", new_string="= 3", replace_all="true")
    assert (ws / "f.py").read_text() == "x = 3\ny = 3\nz = 2\n"
    assert out.split("\n")[0] == "Edited f.py (2 replacements)"
    out = await _ok(edit, path="f.py", old_string="z = 2\n", new_string="")
    assert out == "Edited f.py (1 replacement)\n--- a/f.py\n+++ b/f.py\n@@ -1,3 +1,2 @@\n x = 3\n y = 3\n-z = 2"


async def test_edit_keeps_encoding(tools: dict[str, Tool], ws: Path) -> None:
    edit = tools["edit_file"]
    (ws / "bom.txt").write_bytes(b"\xef\xbb\xbfname = 'a'\n")
    await _ok(edit, path="bom.txt", old_string="'a'", new_string="'é'")
    assert (ws / "bom.txt").read_bytes() == b"\xef\xbb\xbfname = '\xc3\xa9'\n"
    (ws / "latin.txt").write_bytes(b"caf\xe9 au lait\n")
    await _ok(edit, path="latin.txt", old_string="café au", new_string="CAFÉ AU")
    assert (ws / "latin.txt").read_bytes() == b"CAF\xc9 AU lait\n"
    assert await _err(edit, path="latin.txt", old_string="lait", new_string="牛奶") == (
        "Error: ToolError: latin.txt is not UTF-8 (kept as latin-1) and new_string has characters "
        "it cannot hold"
    )
    assert (ws / "latin.txt").read_bytes() == b"CAF\xc9 AU lait\n"


async def test_edit_lf_file_and_binary(tools: dict[str, Tool], ws: Path) -> None:
    (ws / "unix.txt").write_bytes(b"a\nb\r\nc\n")  # mostly LF: strings used as given
    await _ok(tools["edit_file"], path="unix.txt", old_string="a\nb", new_string="A\nB")
    assert (ws / "unix.txt").read_bytes() == b"A\nB\r\nc\n"
    (ws / "x.bin").write_bytes(b"\x00abc")
    assert await _err(tools["edit_file"], path="x.bin", old_string="abc", new_string="d") == (
        "Error: ToolError: x.bin is a binary file (4 bytes)"
    )


# -- path checks -----------------------------------------------------------------------------


@pytest.fixture
def outside(tmp_path: Path, ws: Path) -> Path:
    out = tmp_path / "outside"
    out.mkdir()
    (out / "secret.txt").write_text("secret\n")
    (ws / "link.txt").symlink_to(out / "secret.txt")
    (ws / "linkdir").symlink_to(out)
    (ws / "inner.txt").write_text("inner\n")
    (ws / "ok_link.txt").symlink_to(ws / "inner.txt")
    return out


@pytest.mark.parametrize(
    ("tool_name", "args"),
    [
        ("read_file", {"path": "../outside/secret.txt"}),
        ("read_file", {"path": "sub/../../outside/secret.txt"}),
        ("read_file", {"path": "link.txt"}),
        ("read_file", {"path": "linkdir/secret.txt"}),
        ("write_file", {"path": "../evil.txt", "content": "x"}),
        ("write_file", {"path": "linkdir/new.txt", "content": "x"}),
        ("edit_file", {"path": "link.txt", "old_string": "secret", "new_string": "x"}),
        ("grep", {"pattern": "secret", "path": ".."}),
        ("grep", {"pattern": "secret", "path": "linkdir"}),
    ],
)
async def test_path_escapes_refused(
    tools: dict[str, Tool], ws: Path, outside: Path, tool_name: str, args: dict[str, str]
) -> None:
    text = await _err(tools[tool_name], **args)
    assert text == f"Error: ToolError: path {args['path']!r} is outside the workspace {ws}; use a path inside it"
    assert (outside / "secret.txt").read_text() == "secret\n"
    assert not (outside / "new.txt").exists() and not (outside.parent / "evil.txt").exists()


async def test_absolute_paths(tools: dict[str, Tool], ws: Path, outside: Path) -> None:
    path = str(outside / "secret.txt")
    assert await _err(tools["read_file"], path=path) == (
        f"Error: ToolError: path {path!r} is outside the workspace {ws}; use a path inside it"
    )
    assert await _err(tools["write_file"], path="/etc/kimik3-test", content="x") == (
        f"Error: ToolError: path '/etc/kimik3-test' is outside the workspace {ws}; use a path inside it"
    )
    assert await _ok(tools["read_file"], path=str(ws / "inner.txt")) == "     1\tinner"
    assert await _ok(tools["read_file"], path="ok_link.txt") == "     1\tinner"  # a link inside is fine


async def test_glob_refuses_escapes_and_hides_outside_links(tools: dict[str, Tool], ws: Path, outside: Path) -> None:
    g = tools["glob"]
    for pattern in ("../*", "/etc/*", "sub/../../*"):
        assert await _err(g, pattern=pattern) == (
            f"Error: ToolError: pattern {pattern!r} must be relative to the workspace and not use '..'"
        )
    assert await _ok(g, pattern="*") == "inner.txt\nok_link.txt"
    assert await _ok(g, pattern="linkdir/*") == "[no matches]"


# -- grep ------------------------------------------------------------------------------------


@pytest.fixture(params=["python", "ripgrep"])
def grep_impl(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "python":
        monkeypatch.setattr(coding._search, "rg_path", lambda: None)
    elif shutil.which("rg") is None:
        pytest.skip("ripgrep (rg) is not installed; the Python fallback is tested instead")
    yield request.param


@pytest.fixture
def tree(ws: Path) -> Path:
    (ws / "src").mkdir()
    (ws / "src/a.py").write_text("def foo():\n    return 1\n")
    (ws / "src/b.py").write_bytes(b"def bar():\r\n    pass\r\n# foo here\r\n")
    (ws / "src/c.txt").write_text("".join(f"{'match' if i in (2, 10, 11) else 'x'} {i}\n" for i in range(1, 13)))
    (ws / "README.md").write_text("foo docs\n")
    (ws / "data.bin").write_bytes(b"foo\x00bar\n")
    (ws / ".hidden").mkdir()
    (ws / ".hidden/h.py").write_text("foo = 1\n")
    (ws / ".git").mkdir()
    (ws / ".git/config").write_text("foo\n")
    return ws


async def test_grep(tools: dict[str, Tool], tree: Path, grep_impl: str) -> None:
    grep = tools["grep"]
    assert await _ok(grep, pattern="foo") == "README.md:1:foo docs\nsrc/a.py:1:def foo():\nsrc/b.py:3:# foo here"
    assert await _ok(grep, pattern=r"def \w+\(", glob="*.py") == "src/a.py:1:def foo():\nsrc/b.py:1:def bar():"
    assert await _ok(grep, pattern="foo", path="src") == "src/a.py:1:def foo():\nsrc/b.py:3:# foo here"
    assert await _ok(grep, pattern="return", path="src/a.py") == "src/a.py:2:    return 1"
    assert await _ok(grep, pattern="^match", path="src") == "src/c.txt:2:match 2\nsrc/c.txt:10:match 10\nsrc/c.txt:11:match 11"
    assert await _ok(grep, pattern="foo", glob="src/*.py") == "src/a.py:1:def foo():\nsrc/b.py:3:# foo here"
    assert await _ok(grep, pattern="foo", path="src", glob="src/*.py") == "src/a.py:1:def foo():\nsrc/b.py:3:# foo here"
    assert await _ok(grep, pattern="foo", path="src", glob="*.py") == "src/a.py:1:def foo():\nsrc/b.py:3:# foo here"
    assert await _ok(grep, pattern="nothing to see") == "[no matches]"
    assert await _err(grep, pattern="x", path="missing") == "Error: ToolError: missing: no such file or directory"
    invalid = await _err(grep, pattern="(unclosed")
    assert invalid.startswith("Error: ToolError: ")
    if grep_impl == "python":
        assert invalid == (
            "Error: ToolError: invalid regular expression '(unclosed': missing ) at position 9"
        )


async def test_grep_caps_lines(tools: dict[str, Tool], ws: Path, grep_impl: str) -> None:
    (ws / "many.txt").write_text("hit\n" * 203 + "y" * 600 + " hit\n")
    out = (await _ok(tools["grep"], pattern="hit")).split("\n")
    assert out[0] == "many.txt:1:hit" and out[199] == "many.txt:200:hit"
    assert out[200:] == ["[4 more matching lines not shown]"]
    (ws / "many.txt").write_text("y" * 600 + " hit\n")
    assert await _ok(tools["grep"], pattern="hit") == "many.txt:1:" + "y" * 500 + "... [104 more characters]"


# -- glob ------------------------------------------------------------------------------------


async def test_glob(tools: dict[str, Tool], tree: Path) -> None:
    g = tools["glob"]
    assert await _ok(g, pattern="**/*.py") == ".hidden/h.py\nsrc/a.py\nsrc/b.py"
    assert await _ok(g, pattern="*") == ".hidden/\nREADME.md\ndata.bin\nsrc/"
    assert await _ok(g, pattern="src/*") == "src/a.py\nsrc/b.py\nsrc/c.txt"
    assert await _ok(g, pattern=".git/*") == ".git/config"
    assert await _ok(g, pattern="*.rs") == "[no matches]"
    assert await _err(g, pattern="") == "Error: ToolError: invalid glob pattern '': it is empty"


async def test_glob_caps_paths(tools: dict[str, Tool], ws: Path) -> None:
    for i in range(503):
        (ws / f"f{i:03d}.txt").write_text("")
    out = (await _ok(tools["glob"], pattern="*.txt")).split("\n")
    assert out[:2] == ["f000.txt", "f001.txt"] and out[499] == "f499.txt"
    assert out[500:] == ["[3 more paths not shown]"]


# -- truncation ------------------------------------------------------------------------------


def test_truncate_middle() -> None:
    assert truncate_middle("short", 10) == "short"
    text = "".join(f"line {i:02d}\n" for i in range(40))  # 40 lines of 8 characters
    out = truncate_middle(text, 100)
    assert out == (
        "line 00\nline 01\nline 02\nline 03"
        "\n... [257 characters elided] ...\n"
        "line 36\nline 37\nline 38\nline 39\n"
    )
    assert len(out) <= 100
    assert len(text) - 257 == len(out) - len("\n... [257 characters elided] ...\n")
    no_lines = "a" * 1000
    out = truncate_middle(no_lines, 50)
    assert out == "a" * 8 + "\n... [984 characters elided] ...\n" + "a" * 8
    assert truncate_middle(no_lines, 5) == "\n... [1000 characters elided] ...\n"
    with pytest.raises(ValueError):
        truncate_middle("x", -1)


def test_tool_result_is_plain_text_for_coding_tools() -> None:
    assert ToolResult.from_value("x").content == "x"
