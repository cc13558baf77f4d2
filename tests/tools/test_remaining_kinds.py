"""The remaining kinds of the public bug corpus (issue 26, item 8), on the tools' side: a CR-only
file reads as lines, ``vi`` and friends fail fast, timeouts that are no usable number of seconds,
a tool raising ``BaseExceptionGroup([CancelledError()])``, a failed call in raw mode."""

from __future__ import annotations

import asyncio
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kimik3 import Agent, ScriptedEngine, UserError, tool
from kimik3.harness import FEATURES, CodingHarness
from kimik3.tools import Tool, coding
from kimik3.tools.coding import coding_tools

from ..harness.helpers import answer, calls

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup

CR_FILE = b"alpha\rbeta two\rgamma\r"  # classic Mac OS line endings: no \n at all


@pytest.fixture(params=["python", "ripgrep"])
def grep_impl(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "python":
        monkeypatch.setattr(coding._search, "rg_path", lambda: None)
    elif shutil.which("rg") is None:
        pytest.skip("ripgrep (rg) is not installed")
    yield request.param


def harness_tools(ws: Path) -> dict[str, Tool]:
    harness = CodingHarness(ws, features=FEATURES - {"background", "subagents", "read_before_edit", "checkpoints"})
    return {t.name: t for t in harness.tools}


# -- CR-only files -----------------------------------------------------------------------------------


async def test_read_file_shows_a_cr_only_file_as_lines(ws: Path, tools: dict[str, Tool]) -> None:
    """Before: one line, "     1\\talpha\\rbeta two\\rgamma"."""
    (ws / "mac.txt").write_bytes(CR_FILE)
    assert (await tools["read_file"].run({"path": "mac.txt"})).text == "     1\talpha\n     2\tbeta two\n     3\tgamma"
    assert (await tools["read_file"].run({"path": "mac.txt", "offset": 2, "limit": 1})).text == (
        "     2\tbeta two\n[1 more line; continue with offset=3]")
    (ws / "wide.txt").write_bytes("\ufeffone\rtwo".encode("utf-16-le"))
    assert (await tools["read_file"].run({"path": "wide.txt"})).text == "     1\tone\n     2\ttwo"


async def test_a_lone_cr_in_a_file_with_newlines_stays_in_its_line(ws: Path, tools: dict[str, Tool]) -> None:
    (ws / "progress.log").write_bytes(b"10%\r50%\r100%\ndone\n")
    assert (await tools["read_file"].run({"path": "progress.log"})).text == "     1\t10%\r50%\r100%\n     2\tdone"


async def test_grep_numbers_a_cr_only_file_as_read_file_does(ws: Path, tools: dict[str, Tool], grep_impl: str) -> None:
    """Before: "mac.txt:1:alpha\\rbeta two\\rgamma" (the whole file as line 1)."""
    (ws / "mac.txt").write_bytes(CR_FILE)
    (ws / "unix.txt").write_bytes(b"beta\n")
    assert (await tools["grep"].run({"pattern": "beta|gamma"})).text == (
        "mac.txt:2:beta two\nmac.txt:3:gamma\nunix.txt:1:beta")
    assert (await tools["grep"].run({"pattern": "two", "path": "mac.txt"})).text == "mac.txt:2:beta two"
    (ws / "sub").mkdir()
    (ws / "sub" / "we[i]rd *{a}.md").write_bytes(b"x\rbeta\r")
    assert (await tools["grep"].run({"pattern": "^beta|^gamma$"})).text == (
        "mac.txt:2:beta two\nmac.txt:3:gamma\nsub/we[i]rd *{a}.md:2:beta\nunix.txt:1:beta")
    assert (await tools["grep"].run({"pattern": "^beta", "glob": "*.md"})).text == "sub/we[i]rd *{a}.md:2:beta"
    assert (await tools["grep"].run({"pattern": "^beta$", "path": "sub"})).text == "sub/we[i]rd *{a}.md:2:beta"


async def test_a_large_cr_only_file_is_searched_line_by_line(ws: Path, tools: dict[str, Tool], grep_impl: str) -> None:
    """Past rg's column limit (1 MiB) rg omits the line: it is searched again too."""
    lines = [f"line {i}" for i in range(200_000)]
    (ws / "big.txt").write_bytes("\r".join(lines).encode())
    assert (await tools["grep"].run({"pattern": "^line 199999$"})).text == "big.txt:200000:line 199999"


@pytest.mark.parametrize("tool_name", ["edit_file", "multi_edit", "apply_patch"])
async def test_edits_of_a_cr_only_file_match_its_lines_and_keep_its_endings(ws: Path, tool_name: str) -> None:
    """Before: old_string "alpha\\nbeta two" (as read_file shows it) was "not found"."""
    (ws / "mac.txt").write_bytes(CR_FILE)
    args = {
        "edit_file": {"path": "mac.txt", "old_string": "alpha\nbeta two", "new_string": "ALPHA\nBETA\nnew"},
        "multi_edit": {"path": "mac.txt", "edits": [{"old_string": "alpha\nbeta two", "new_string": "ALPHA\nBETA\nnew"}]},
        "apply_patch": {"patch": "--- a/mac.txt\n+++ b/mac.txt\n@@ -1,3 +1,4 @@\n-alpha\n-beta two\n+ALPHA\n+BETA\n+new\n"
                                 " gamma\n"},
    }[tool_name]
    result = await harness_tools(ws)[tool_name].run(args)
    assert not result.is_error, result.text
    assert (ws / "mac.txt").read_bytes() == b"ALPHA\rBETA\rnew\rgamma\r"
    if tool_name != "apply_patch":
        assert result.text.splitlines()[1:] == ["--- a/mac.txt", "+++ b/mac.txt", "@@ -1,3 +1,4 @@", "-alpha",
                                                "-beta two", "+ALPHA", "+BETA", "+new", " gamma"]


# -- interactive editors -------------------------------------------------------------------------------


@pytest.mark.parametrize("editor", ["vi", "vim", "view", "vimdiff", "rvim"])
async def test_vi_and_friends_fail_fast_without_escape_codes(tmp_path: Path, editor: str) -> None:
    """Before: ``vi x.txt`` blocked until the timeout and its screen (escape codes, form feeds)
    filled the output."""
    if shutil.which(editor) is None or shutil.which("vim") is None:
        pytest.skip(f"{editor} is not installed")
    bash = coding_tools(tmp_path)[0]
    args = "x.txt y.txt" if editor == "vimdiff" else "x.txt"
    result = await bash.run({"command": f"{editor} {args}; echo rc=$?", "timeout": 60})
    text = result.text
    assert "kimik3: no interactive editor here (vim needs a terminal)" in text, text
    assert "rc=1\n[exit code: 0," in text and "[timed out" not in text
    assert not any(c in text for c in "\x1b\x0c\x9b"), repr(text)
    assert not (tmp_path / "x.txt").exists()


async def test_ex_reads_its_empty_input_and_ends(tmp_path: Path) -> None:
    if shutil.which("ex") is None:
        pytest.skip("ex is not installed")
    result = await coding_tools(tmp_path)[0].run({"command": "ex x.txt; echo rc=$?", "timeout": 60})
    assert result.text.startswith("rc=0\n[exit code: 0,") and not (tmp_path / "x.txt").exists()


async def test_vim_in_ex_mode_still_works(tmp_path: Path) -> None:
    if shutil.which("vim") is None:
        pytest.skip("vim is not installed")
    bash = coding_tools(tmp_path)[0]
    result = await bash.run({"command": "vim -es -c 'call setline(1, \"scripted\")' -c wq s.txt; echo rc=$?"})
    assert result.text.startswith("rc=0\n") and (tmp_path / "s.txt").read_text() == "scripted\n"


# -- timeouts ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [0, -5, 10**400, 2.5, True, 8 * 24 * 3600])
def test_bash_timeout_must_be_a_usable_number_of_seconds(tmp_path: Path, bad: object) -> None:
    """Before: 0 and negative values were taken (every command killed at once)."""
    with pytest.raises(UserError, match=r"^bash_timeout must be a whole number of seconds from 1 to 604800, got "):
        coding_tools(tmp_path, bash_timeout=bad)  # type: ignore[arg-type]
    with pytest.raises(UserError):
        CodingHarness(tmp_path, bash_timeout=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(("timeout", "shown"), [(10**400, "beyond 10^30 s"), (604801, "604801 s")])
async def test_a_bash_timeout_beyond_a_week_is_a_tool_error(tmp_path: Path, timeout: int, shown: str) -> None:
    """Before: ``timeout=10**400`` gave "Error: OverflowError: int too large to convert to float"."""
    bash = coding_tools(tmp_path)[0]
    result = await bash.run({"command": "echo hi", "timeout": timeout})
    assert (result.is_error, result.text) == (
        True, f"Error: ToolError: timeout {shown} is too long: at most 604800 s (a week)")


async def test_a_tool_limit_beyond_any_float_is_no_limit() -> None:
    @tool(timeout=10**400)
    def quick() -> str:
        """Answers."""
        return "ok"

    assert (await quick.run({})).text == "ok"
    assert (await quick.run({}, timeout=10**400)).text == "ok"


# -- a tool's own exception group -----------------------------------------------------------------------


@tool
async def grouped() -> str:
    """Raises what a task group inside a tool raises when its child raised CancelledError."""
    raise BaseExceptionGroup("inner task group", [asyncio.CancelledError()])


@tool
async def sibling() -> str:
    """Finishes after the grouped call failed."""
    await asyncio.sleep(0.05)
    return "sibling finished"


async def test_a_tools_cancelled_error_group_is_its_error_and_siblings_finish() -> None:
    """Before: it cancelled its sibling and CancelledError escaped Agent.run."""
    engine = ScriptedEngine([calls(("grouped", {}), ("sibling", {})), answer("done")])
    result = await Agent(tools=[grouped, sibling], engine=engine).run("go")
    assert (result.stop_reason, result.output, result.failed_calls) == ("completed", "done", 1)
    assert [m.content for m in result.messages if m.role == "tool"] == [
        "Error: BaseExceptionGroup: inner task group (1 sub-exception) (raised by the code itself: nothing "
        "cancelled it)",
        "sibling finished",
    ]
    assert result.degraded and result.issues == [
        "turn 1: the call to 'grouped' failed: BaseExceptionGroup: inner task group (1 sub-exception) (raised by "
        "the code itself: nothing cancelled it)"]


async def test_a_group_with_keyboard_interrupt_still_propagates() -> None:
    @tool
    async def interrupted() -> str:
        """Raises Ctrl-C inside a group."""
        raise BaseExceptionGroup("g", [asyncio.CancelledError(), KeyboardInterrupt()])

    with pytest.raises(BaseExceptionGroup):
        await interrupted.run({})


# -- failed calls in raw mode -----------------------------------------------------------------------------


async def test_a_failed_call_in_raw_mode_marks_the_run_degraded(ws: Path, tools: dict[str, Tool]) -> None:
    """Before: failed_calls == 1 but issues == [] and degraded False (only chat-mode calls counted)."""
    engine = ScriptedEngine([calls(("read_file", {"path": "missing.txt"}), ("nope", {})), answer("done")])
    result = await Agent(tools=list(tools.values()), engine=engine).run("go")
    assert (result.stop_reason, result.failed_calls, result.degraded) == ("completed", 2, True)
    assert result.issues == [
        "turn 1: the call to 'read_file' failed: ToolError: missing.txt: no such file",
        "turn 1: the call to 'nope' failed: unknown tool 'nope'; available tools: bash, edit_file, glob, grep, "
        "read_file, write_file",
    ]
