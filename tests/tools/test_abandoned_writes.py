"""A file tool reported abandoned (timed out) has no effect later (issue 26, item 2): its thread runs
on, but it writes only while the call is live (a temporary file, renamed past the commit point).

Before: an ``apply_patch`` reported as timed out wrote the file 12 s after the run ended. Each
test holds the tool's thread at a slow step with an event, lets the call time out, then releases
the thread and waits for it to end (no wall-clock sleeps) before reading the bytes on disk.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kimik3 import Agent, ScriptedEngine
from kimik3.harness import FEATURES, CodingHarness, _patch
from kimik3.tools import Tool
from kimik3.tools.coding import _files, _write

from ..harness.helpers import answer, calls

PATCH = "--- a/f.txt\n+++ b/f.txt\n@@ -1,2 +1,2 @@\n one\n-two\n+TWO\n"
ORIGINAL = b"one\ntwo\n"


class Gate:
    """Holds the tool's thread in a patched function until released."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def hold(self, inner: Callable[..., Any]) -> Callable[..., Any]:
        def held(*args: Any, **kwargs: Any) -> Any:
            self.entered.set()
            assert self.release.wait(60), "the test never released the tool"
            return inner(*args, **kwargs)
        return held

    def finish(self) -> None:
        """Release the abandoned thread and wait until it has ended."""
        self.release.set()
        for thread in threading.enumerate():
            if thread.name.startswith("kimik3 tool "):
                thread.join(60)
                assert not thread.is_alive()


@pytest.fixture
def gate() -> Iterator[Gate]:
    g = Gate()
    yield g
    g.release.set()


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "f.txt").write_bytes(ORIGINAL)
    return tmp_path


def tools_of(ws: Path) -> dict[str, Tool]:
    harness = CodingHarness(ws, features=FEATURES - {"background", "subagents", "read_before_edit", "checkpoints"})
    return {t.name: t for t in harness.tools}


# (tool, arguments, where the thread is held: a step before its commit point)
CASES: list[tuple[str, dict[str, Any], tuple[Any, str]]] = [
    ("apply_patch", {"patch": PATCH}, (_patch, "_patch_text")),
    ("apply_patch", {"patch": PATCH + "--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1 @@\n+new\n"}, (_patch, "_patch_text")),
    ("write_file", {"path": "f.txt", "content": "written\n"}, (_write, "_write_all")),
    ("write_file", {"path": "new/dir/f.txt", "content": "new\n"}, (_files, "to_utf8")),
    ("edit_file", {"path": "f.txt", "old_string": "two", "new_string": "TWO"}, (_files, "replace_keeping_endings")),
    ("multi_edit", {"path": "f.txt", "edits": [{"old_string": "two", "new_string": "TWO"}]}, (_patch, "apply_edits")),
]


def disk(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(("name", "args", "where"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
async def test_a_call_that_timed_out_writes_nothing_afterwards(
        ws: Path, gate: Gate, monkeypatch: pytest.MonkeyPatch, name: str, args: dict[str, Any],
        where: tuple[Any, str]) -> None:
    module, attr = where
    monkeypatch.setattr(module, attr, gate.hold(getattr(module, attr)))
    result = await tools_of(ws)[name].run(args, timeout=0.2)
    assert gate.entered.is_set()
    assert result.is_error and result.text == (
        f"Error: ToolTimeoutError: {name} did not finish within 0.2 s and was abandoned (its thread may still be "
        "running)")
    gate.finish()  # the thread goes on past the point where it would have written, and ends
    assert disk(ws) == {"f.txt": ORIGINAL}  # no change, no temporary file left
    assert sorted(os.listdir(ws)) == ["f.txt"]


async def test_a_call_abandoned_while_committing_says_so(ws: Path, gate: Gate, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past its commit point the write goes through; the result names what the call may still do."""
    monkeypatch.setattr(_write.Staged, "commit", gate.hold(_write.Staged.commit))
    result = await tools_of(ws)["apply_patch"].run({"patch": PATCH}, timeout=0.2)
    assert result.text == (
        "Error: ToolTimeoutError: apply_patch did not finish within 0.2 s and was abandoned after it had begun "
        "writing its changes: they may be applied in part or in full; read the files before changing them again")
    gate.finish()
    assert disk(ws) == {"f.txt": b"one\nTWO\n"}


async def test_an_agent_run_ends_before_the_abandoned_patch_and_the_file_stays(
        ws: Path, gate: Gate, monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's input: apply_patch overruns its limit inside a run; the run ends; the file is
    never written (nor by the checkpoint-less tail of the thread)."""
    monkeypatch.setattr(_patch, "_patch_text", gate.hold(_patch._patch_text))
    harness = CodingHarness(ws, features=FEATURES - {"background", "subagents", "read_before_edit"})
    tools = harness.tools
    for t in tools:
        if t.name == "apply_patch":
            t.timeout = 0.3
    _, instructions, hooks = harness.parts(engine=None)
    engine = ScriptedEngine([calls(("apply_patch", {"patch": PATCH})), answer("gave up")])
    result = await Agent(instructions=instructions, tools=tools, engine=engine, hooks=hooks).run("patch it")
    assert result.output == "gave up"
    [tool_message] = [m for m in result.messages if m.role == "tool"]
    assert tool_message.content.startswith("Error: ToolTimeoutError: apply_patch did not finish within 0.3 s")
    gate.finish()
    assert disk(ws) == {"f.txt": ORIGINAL}


async def test_writes_keep_the_file_s_mode_and_replace_atomically(ws: Path) -> None:
    """The temporary file takes the target's permission bits; the old inode is never half written."""
    os.chmod(ws / "f.txt", 0o640)
    before = os.stat(ws / "f.txt").st_ino
    result = await tools_of(ws)["write_file"].run({"path": "f.txt", "content": "x\n"})
    assert result.text == "Wrote 2 bytes to f.txt"
    st = os.stat(ws / "f.txt")
    assert (st.st_mode & 0o777, st.st_ino != before, (ws / "f.txt").read_bytes()) == (0o640, True, b"x\n")
    assert sorted(os.listdir(ws)) == ["f.txt"]


async def test_a_file_with_hard_links_is_written_in_place_when_allowed(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (tmp_path / "outside.txt").write_bytes(ORIGINAL)
    os.link(tmp_path / "outside.txt", ws / "f.txt")
    harness = CodingHarness(ws, features=FEATURES - {"background", "subagents", "read_before_edit", "checkpoints"}, write_hard_links=True)
    tool = next(t for t in harness.tools if t.name == "write_file")
    assert (await tool.run({"path": "f.txt", "content": "both\n"})).text == "Wrote 5 bytes to f.txt"
    assert (tmp_path / "outside.txt").read_bytes() == b"both\n"  # one file, two names: as before
