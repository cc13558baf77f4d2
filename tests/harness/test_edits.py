"""Read-before-edit, multi_edit and apply_patch (all or nothing), through scripted runs and directly."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kimik3 import ScriptedEngine
from kimik3._exceptions import ToolError
from kimik3.harness import FEATURES, CodingHarness, EditSpec, FileAccess, apply_patch_text
from kimik3.harness._patch import multi_edit_file

from .helpers import answer, calls


def harness(root: Path) -> CodingHarness:
    return CodingHarness(root, features=FEATURES - {"background", "subagents", "checkpoints"})


async def run(root: Path, *turns: str) -> list[str]:
    result = await harness(root).agent(engine=ScriptedEngine([*turns, answer("ok")])).run("go")
    return [str(m.content) for m in result.messages if m.role == "tool"]


EDIT = ("edit_file", {"path": "f.py", "old_string": "x = 1", "new_string": "x = 2"})


async def test_edit_refused_when_not_read(tmp_path: Path) -> None:
    (tmp_path / "f.py").write_text("x = 1\n")
    out = await run(tmp_path, calls(EDIT))
    assert out == ["Error: f.py has not been read in this run; read it with read_file first, then make the "
                   "change (nothing was written)"]
    assert (tmp_path / "f.py").read_text() == "x = 1\n"


@pytest.mark.parametrize("tool", ["edit_file", "write_file", "multi_edit", "apply_patch"])
async def test_every_writing_tool_refused_when_the_file_changed_since_read(tmp_path: Path, tool: str) -> None:
    f = tmp_path / "f.py"
    f.write_text("x = 1\n")
    st = f.stat()
    args = {"edit_file": EDIT[1], "write_file": {"path": "f.py", "content": "x = 9\n"},
            "multi_edit": {"path": "f.py", "edits": [{"old_string": "x = 1", "new_string": "x = 2"}]},
            "apply_patch": {"patch": "--- a/f.py\n+++ b/f.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"}}[tool]

    def formatter(messages: list) -> str:  # type: ignore[type-arg]
        n = sum(m.role == "assistant" for m in messages)
        if n == 0:
            return calls(("read_file", {"path": "f.py"}))
        if n == 1:  # a formatter rewrites the file, same size and time stamps
            f.write_text("X = 1\n")
            os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
            return calls((tool, args))
        return answer("ok")

    result = await harness(tmp_path).agent(engine=ScriptedEngine(formatter)).run("go")
    out = [str(m.content) for m in result.messages if m.role == "tool"]
    assert out[1] == ("Error: f.py changed on disk since you last read it (another process or a formatter); "
                      "read it again with read_file, then make the change (nothing was written)")
    assert f.read_text() == "X = 1\n"


async def test_read_then_edit_then_edit_again_without_rereading(tmp_path: Path) -> None:
    (tmp_path / "f.py").write_text("x = 1\ny = 1\n")
    out = await run(tmp_path, calls(("read_file", {"path": "f.py"})), calls(EDIT),
                    calls(("edit_file", {"path": "f.py", "old_string": "y = 1", "new_string": "y = 2"})),
                    calls(("write_file", {"path": "new.py", "content": "z\n"})))
    assert out[1].startswith("Edited f.py (1 replacement)")
    assert out[2].startswith("Edited f.py (1 replacement)")  # its own write counts as read
    assert out[3] == "Wrote 2 bytes to new.py"  # a new file needs no read
    assert (tmp_path / "f.py").read_text() == "x = 2\ny = 2\n"


def test_multi_edit_all_or_nothing(tmp_path: Path) -> None:
    f = tmp_path / "m.txt"
    f.write_bytes(b"one\r\ntwo\r\nthree\r\n")
    files = FileAccess(tmp_path)
    with pytest.raises(ToolError, match=r"edit 3: old_string not found in m\.txt"):
        multi_edit_file(files, "m.txt", [EditSpec(old_string="one", new_string="1"),
                                         EditSpec(old_string="two\nthree", new_string="2\n3"),
                                         EditSpec(old_string="four", new_string="4")])
    assert f.read_bytes() == b"one\r\ntwo\r\nthree\r\n"
    out = multi_edit_file(files, "m.txt", [EditSpec(old_string="one", new_string="1"),
                                           EditSpec(old_string="two\nthree", new_string="2\n3")])
    assert out == ("Edited m.txt (2 replacements in 2 edits)\n--- a/m.txt\n+++ b/m.txt\n@@ -1,3 +1,3 @@\n"
                   "-one\n-two\n-three\n+1\n+2\n+3")
    assert f.read_bytes() == b"1\r\n2\r\n3\r\n"  # CRLF kept for the model's LF text
    with pytest.raises(ToolError, match="edit 1: old_string matches 2 times"):
        f.write_text("a a\n")
        multi_edit_file(files, "m.txt", [EditSpec(old_string="a", new_string="b")])


PATCH_OK = """\
--- a/src/app.py
+++ b/src/app.py
@@ -1,3 +1,3 @@
 def f():
-    return 1
+    return 2
 # end
--- /dev/null
+++ b/src/new.py
@@ -0,0 +1,2 @@
+print("new")
+print("file")
--- a/old.txt
+++ /dev/null
@@ -1 +0,0 @@
-bye
"""


def test_apply_patch_modifies_creates_and_deletes(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src/app.py").write_bytes(b"# head\ndef f():\n    return 1\n# end\nlast")
    (tmp_path / "old.txt").write_text("bye\n")
    out = apply_patch_text(FileAccess(tmp_path), PATCH_OK)
    assert out == "Patched 3 files\nM src/app.py\nA src/new.py\nD old.txt"
    assert (tmp_path / "src/app.py").read_bytes() == b"# head\ndef f():\n    return 2\n# end\nlast"
    assert (tmp_path / "src/new.py").read_text() == 'print("new")\nprint("file")\n'
    assert not (tmp_path / "old.txt").exists()


@pytest.mark.parametrize("bad", [
    PATCH_OK.replace("-    return 1", "-    return 7"),  # a hunk that does not match
    PATCH_OK.replace("-bye", "-hello"),  # deleting a file whose text differs
    PATCH_OK.replace("b/src/new.py", "b/../escape.py"),  # outside the workspace
    PATCH_OK.replace("+++ b/src/new.py", "+++ b/old.txt").replace("--- /dev/null\n+++ b/old.txt",
                                                                  "--- /dev/null\n+++ b/src/app.py"),
])
def test_apply_patch_validates_everything_before_writing(tmp_path: Path, bad: str) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src/app.py").write_bytes(b"def f():\n    return 1\n# end\n")
    (tmp_path / "old.txt").write_text("bye\n")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    with pytest.raises(ToolError):
        apply_patch_text(FileAccess(tmp_path), bad)
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    assert not (tmp_path.parent / "escape.py").exists()


def test_apply_patch_crlf_file_offset_hunk_and_no_newline_marker(tmp_path: Path) -> None:
    (tmp_path / "w.txt").write_bytes(b"0\r\n1\r\n2\r\n3\r\n4")
    patch = "--- a/w.txt\n+++ b/w.txt\n@@ -9,2 +9,2 @@\n 3\n-4\n\\ No newline at end of file\n+four\n"
    assert apply_patch_text(FileAccess(tmp_path), patch) == "Patched 1 file\nM w.txt"
    assert (tmp_path / "w.txt").read_bytes() == b"0\r\n1\r\n2\r\n3\r\nfour\r\n"


def test_apply_patch_holds_the_old_files_missing_final_newline_to_its_word(tmp_path: Path) -> None:
    # "\ No newline at end of file" after an old line says where the old file ends: a file that
    # goes on, or that ends with a newline, is not the file the patch was made from
    patch = "--- a/w.txt\n+++ b/w.txt\n@@ -1,2 +1,2 @@\n 1\n-2\n\\ No newline at end of file\n+two\n"
    for before in (b"1\n2\n", b"1\n2\n3"):
        (tmp_path / "w.txt").write_bytes(before)
        with pytest.raises(ToolError, match=r"hunk 1 .* does not match the file"):
            apply_patch_text(FileAccess(tmp_path), patch)
        assert (tmp_path / "w.txt").read_bytes() == before
    (tmp_path / "w.txt").write_bytes(b"1\n2")
    assert apply_patch_text(FileAccess(tmp_path), patch) == "Patched 1 file\nM w.txt"
    assert (tmp_path / "w.txt").read_bytes() == b"1\ntwo\n"


def test_apply_patch_rejects_garbage(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="no '--- a/PATH' / '\\+\\+\\+ b/PATH' file header"):
        apply_patch_text(FileAccess(tmp_path), "just some text\n")
    with pytest.raises(ToolError, match="patch line 4: 'oops' is not a diff line"):
        apply_patch_text(FileAccess(tmp_path), "--- a/x\n+++ b/x\n@@ -1 +1 @@\noops\n")


@pytest.mark.parametrize("eol", ["\n", "\r\n"])
def test_apply_patch_reproduces_difflib_diffs(tmp_path: Path, eol: str) -> None:
    """800 seeded random edits (zero to three context lines, insertions at the start and end, files
    with and without a final newline): applying difflib's diff gives exactly the new text."""
    import difflib
    import random

    rng = random.Random(7)
    words = ["a", "b", "", "x y", "def f():", "    return 1"]
    checked = 0
    for _ in range(800):
        old = [rng.choice(words) for _ in range(rng.randint(1, 12))]
        new = list(old)
        for _ in range(rng.randint(1, 4)):
            k = rng.random()
            if k < 0.4 and new:
                del new[rng.randrange(len(new))]
            elif k < 0.8:
                new.insert(rng.randint(0, len(new)), rng.choice(words) + "!")
            elif new:
                new[rng.randrange(len(new))] += "?"
        old_text = "\n".join(old) + rng.choice(["\n", ""])
        new_text = "\n".join(new) + rng.choice(["\n", ""]) if new else ""
        if old_text == new_text:
            continue
        diff = "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
                       for line in difflib.unified_diff(old_text.splitlines(keepends=True),
                                                        new_text.splitlines(keepends=True), "a/f", "b/f",
                                                        n=rng.randint(0, 3)))
        (tmp_path / "f").write_bytes(old_text.replace("\n", eol).encode())
        apply_patch_text(FileAccess(tmp_path), diff)
        kept = eol if "\n" in old_text else "\n"  # a file without a line break has no CRLF to keep
        assert (tmp_path / "f").read_bytes() == new_text.replace("\n", kept).encode(), diff
        checked += 1
    assert checked > 700


def test_patch_tools_stay_confined_through_symlinks_and_refuse_special_files(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "t.txt").write_text("secret\n")
    ws = tmp_path / "ws"
    ws.mkdir()
    os.symlink(outside, ws / "link")  # a directory symlink leading out
    os.mkfifo(ws / "fifo")
    files = FileAccess(ws)
    with pytest.raises(ToolError, match="outside the workspace"):
        apply_patch_text(files, "--- a/link/t.txt\n+++ b/link/t.txt\n@@ -1 +1 @@\n-secret\n+owned\n")
    with pytest.raises(ToolError, match="outside the workspace"):
        multi_edit_file(files, "link/t.txt", [EditSpec(old_string="secret", new_string="owned")])
    with pytest.raises(ToolError, match="FIFO"):  # refused without blocking on the open
        multi_edit_file(files, "fifo", [EditSpec(old_string="a", new_string="b")])
    assert (outside / "t.txt").read_text() == "secret\n"
    (ws / "h.txt").write_text("x\n")
    os.link(ws / "h.txt", outside / "hard.txt")  # a hard link from outside: not written
    with pytest.raises(ToolError, match="2 hard links"):
        multi_edit_file(files, "h.txt", [EditSpec(old_string="x", new_string="y")])
    assert (outside / "hard.txt").read_text() == "x\n"


async def test_read_tracking_knows_a_file_under_any_spelling(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f.py").write_text("x = 1\n")
    os.symlink("d/f.py", tmp_path / "alias.py")
    out = await run(tmp_path, calls(("read_file", {"path": "./d/../d/f.py"})),
                    calls(("edit_file", {"path": "alias.py", "old_string": "x = 1", "new_string": "x = 2"})),
                    calls(("read_file", {"path": "alias.py"})),
                    calls(("edit_file", {"path": str(tmp_path / "d" / "f.py"), "old_string": "x = 2",
                                         "new_string": "x = 3"})))
    assert out[1].startswith("Edited d/f.py (1 replacement)")
    assert out[3].startswith("Edited d/f.py (1 replacement)")
    assert (tmp_path / "d" / "f.py").read_text() == "x = 3\n"


def test_multi_edit_keeps_a_latin1_file_and_its_bom_free_bytes(tmp_path: Path) -> None:
    (tmp_path / "l.txt").write_bytes(b"caf\xe9 = 1\nna\xefve = 2\n")  # legacy 8-bit text
    out = multi_edit_file(FileAccess(tmp_path), "l.txt", [EditSpec(old_string="= 1", new_string="= 10"),
                                                          EditSpec(old_string="= 2", new_string="= 20")])
    assert out.startswith("Edited l.txt (2 replacements in 2 edits)")
    assert (tmp_path / "l.txt").read_bytes() == b"caf\xe9 = 10\nna\xefve = 20\n"


@pytest.mark.parametrize("block", [
    "diff --git a/img.png b/img.png\nBinary files a/img.png and b/img.png differ\n",
    "diff --git a/img.png b/img.png\nGIT binary patch\nliteral 3\nKcmZ>}0000\n\n",
    "diff --git a/f.py b/g.py\nsimilarity index 100%\nrename from f.py\nrename to g.py\n",
    "diff --git a/empty.txt b/empty.txt\nnew file mode 100644\nindex 0000000..e69de29\n",
])
def test_apply_patch_refuses_git_blocks_it_would_skip(tmp_path: Path, block: str) -> None:
    """A binary change, pure rename or empty new file beside a text hunk: refused, not skipped."""
    (tmp_path / "f.py").write_text("x = 1\n")
    text = "diff --git a/f.py b/f.py\n--- a/f.py\n+++ b/f.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"
    for patch in (block + text, text + block):
        with pytest.raises(ToolError, match="nothing was changed"):
            apply_patch_text(FileAccess(tmp_path), patch)
    assert (tmp_path / "f.py").read_text() == "x = 1\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.py"]


def test_apply_patch_renames_old_to_new(tmp_path: Path) -> None:
    """'--- a/OLD +++ b/NEW': OLD's patched text becomes NEW and OLD goes (git's rename)."""
    (tmp_path / "old.py").write_bytes(b"a\r\nb\r\n")
    (tmp_path / "other.py").write_text("b\n")  # same text as the hunk's: must not be the one edited
    patch = ("diff --git a/old.py b/new.py\nsimilarity index 50%\nrename from old.py\nrename to new.py\n"
             "--- a/old.py\n+++ b/new.py\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n")
    assert apply_patch_text(FileAccess(tmp_path), patch) == "Patched 1 file\nR old.py -> new.py"
    assert (tmp_path / "new.py").read_bytes() == b"a\r\nc\r\n"
    assert not (tmp_path / "old.py").exists()
    (tmp_path / "x.py").write_text("a\nb\n")
    with pytest.raises(ToolError, match=r"other\.py already exists; the patch renames x\.py to it"):
        apply_patch_text(FileAccess(tmp_path), patch.replace("old.py", "x.py").replace("new.py", "other.py"))
    assert (tmp_path / "x.py").read_text() == "a\nb\n" and (tmp_path / "other.py").read_text() == "b\n"


async def test_rename_patch_needs_the_old_file_read(tmp_path: Path) -> None:
    (tmp_path / "old.py").write_text("a\n")
    patch = "--- a/old.py\n+++ b/new.py\n@@ -1 +1 @@\n-a\n+b\n"
    out = await run(tmp_path, calls(("apply_patch", {"patch": patch})))
    assert out == ["Error: old.py has not been read in this run; read it with read_file first, then make the "
                   "change (nothing was written)"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.py"]


async def test_what_a_previous_run_read_does_not_count(tmp_path: Path) -> None:
    """One agent, two runs: run 2 has not read f.py, whatever run 1 did."""
    (tmp_path / "f.py").write_text("x = 1\n")
    agent = harness(tmp_path).agent(engine=ScriptedEngine([
        calls(("read_file", {"path": "f.py"})), answer("read"),
        calls(EDIT), answer("edited?")]))
    assert (await agent.run("read it")).output == "read"
    second = await agent.run("edit it")
    assert [str(m.content) for m in second.messages if m.role == "tool"] == [
        "Error: f.py has not been read in this run; read it with read_file first, then make the change "
        "(nothing was written)"]
    assert (tmp_path / "f.py").read_text() == "x = 1\n"


async def test_what_one_child_read_does_not_let_another_child_edit(tmp_path: Path) -> None:
    from kimik3.harness import SUBAGENT_INSTRUCTIONS
    from kimik3.types import Message

    (tmp_path / "f.py").write_text("x = 1\n")

    def script(messages: list[Message]) -> str:
        tools_done = [m for m in messages if m.role == "tool"]
        if messages[0].content == SUBAGENT_INSTRUCTIONS:
            prompt = str(next(m.content for m in messages if m.role == "user"))
            if tools_done:
                return answer(str(tools_done[-1].content))
            return calls(("read_file", {"path": "f.py"}) if prompt == "read" else EDIT)
        if len(tools_done) < 2:
            return calls(("task", {"description": "step", "prompt": ["read", "edit"][len(tools_done)]}))
        return answer("done")

    h = CodingHarness(tmp_path, features=FEATURES - {"background", "checkpoints"})
    result = await h.agent(engine=ScriptedEngine(script)).run("go")
    edit_result = [str(m.content) for m in result.messages if m.role == "tool"][1]
    assert edit_result.startswith("Error: f.py has not been read in this run; read it with read_file first")
    assert (tmp_path / "f.py").read_text() == "x = 1\n"


@pytest.mark.parametrize(("old", "new", "lost"), [
    ("b/src/new.py", "b/src/n\ufffdw.py", "src/n\ufffdw.py"),  # a created file (issue 40, N46; attack round)
    ("a/old.txt", "a/\ufffd.txt", "\ufffd.txt"),  # a deleted one: never another file than meant
])
def test_apply_patch_refuses_a_file_name_holding_u_fffd(tmp_path: Path, old: str, new: str, lost: str) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src/app.py").write_bytes(b"# head\ndef f():\n    return 1\n# end\nlast")
    (tmp_path / "old.txt").write_text("bye\n")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    with pytest.raises(ToolError) as e:
        apply_patch_text(FileAccess(tmp_path), PATCH_OK.replace(old, new))
    assert str(e.value) == (f"{lost!r}: the file name holds U+FFFD, the replacement character for bytes that could "
                            "not be decoded: the real name was lost; nothing was changed")
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
