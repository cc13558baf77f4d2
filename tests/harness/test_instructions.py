"""AGENTS.md: the root file in the system prompt, nested ones when their directory is first touched."""

from __future__ import annotations

import os
from pathlib import Path

from kimik3 import ScriptedEngine
from kimik3.agents import CODING_INSTRUCTIONS
from kimik3.harness import FEATURES, CodingHarness, ProjectInstructions

from .helpers import answer, calls


def workspace(root: Path) -> Path:
    (root / "AGENTS.md").write_text("Run tests with `make test`.\n")
    (root / "pkg" / "deep").mkdir(parents=True)
    (root / "pkg" / "AGENTS.md").write_text("pkg: use tabs.\n")
    (root / "pkg" / "deep" / "AGENTS.md").write_text("deep: no globals.\n")
    (root / "pkg" / "deep" / "m.py").write_text("x = 1\n")
    (root / "other").mkdir()
    (root / "other" / "AGENTS.md").write_text("other rules\n")
    return root


async def test_root_in_system_prompt_nested_once_when_first_touched(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    listed: list[str] = []
    engine = ScriptedEngine([calls(("read_file", {"path": "pkg/deep/m.py"})),
                             calls(("grep", {"pattern": "x", "path": "pkg"})), answer("ok")])
    harness = CodingHarness(root, features=FEATURES - {"background", "subagents", "checkpoints"}, on_instructions=listed.append)
    result = await harness.agent(engine=engine).run("go")
    assert result.messages[0].content == (CODING_INSTRUCTIONS + "\n\nProject instructions (AGENTS.md at the "
                                          "workspace root):\n\nRun tests with `make test`.")
    tools = [str(m.content) for m in result.messages if m.role == "tool"]
    assert tools[0] == ("     1\tx = 1\n\n[Project instructions from pkg/AGENTS.md; they apply to files under its "
                        "directory]\npkg: use tabs.\n\n[Project instructions from pkg/deep/AGENTS.md; they apply to "
                        "files under its directory]\ndeep: no globals.")
    assert tools[1] == "pkg/deep/m.py:1:x = 1"  # already given: not repeated
    assert listed == ["AGENTS.md", "pkg/AGENTS.md", "pkg/deep/AGENTS.md"]  # other/ never touched


async def test_opt_out_and_no_file(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    engine = ScriptedEngine([calls(("read_file", {"path": "pkg/deep/m.py"})), answer("ok")])
    off = CodingHarness(root, features=FEATURES - {"project_instructions", "background", "subagents", "checkpoints"})
    result = await off.agent(engine=engine).run("go")
    assert result.messages[0].content == CODING_INSTRUCTIONS
    assert [str(m.content) for m in result.messages if m.role == "tool"] == ["     1\tx = 1"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert ProjectInstructions(empty).system_prompt("base") == "base"


def test_size_cap_cuts_on_a_line_and_says_how_much(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text("".join(f"rule {i:03d}\n" for i in range(100)))  # 900 bytes
    text = ProjectInstructions(tmp_path, max_bytes=100).system_prompt(None)
    assert text == ("Project instructions (AGENTS.md at the workspace root):\n\n"
                    + "".join(f"rule {i:03d}\n" for i in range(11)) + "\n[AGENTS.md cut: 801 more bytes not shown]")


def test_symlinked_or_outside_files_are_not_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret.md"
    secret.write_text("secret\n")
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    os.symlink(secret, ws / "AGENTS.md")
    os.symlink(secret, ws / "sub" / "AGENTS.md")
    pi = ProjectInstructions(ws)
    assert pi.system_prompt("base") == "base"
    assert pi.pending("sub/x.py") == []
    assert pi.pending("../secret.md") == []


def test_total_budget_names_the_files_past_it(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text("r" * 60 + "\n")
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "AGENTS.md").write_text(name * 30 + "\n")
    pi = ProjectInstructions(tmp_path, max_total_bytes=100)
    assert pi.system_prompt(None) is not None  # 61 bytes
    assert pi.pending("a/x.py") == [("a/AGENTS.md", "a" * 30)]  # 92 bytes so far
    assert pi.pending("b/x.py") == [("b/AGENTS.md", "[not included: the run's 100 bytes of project instructions are "
                                                    "used up; read b/AGENTS.md with read_file if you need it]")]
    assert pi.loaded == ["AGENTS.md", "a/AGENTS.md"]


def test_a_symlinked_directory_leading_out_is_not_read_one_inside_is(tmp_path: Path) -> None:
    """ws/out -> a directory outside with its own AGENTS.md: never read; ws/alias -> ws/real: read."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "AGENTS.md").write_text("outside secret\n")
    ws = tmp_path / "ws"
    (ws / "real").mkdir(parents=True)
    (ws / "real" / "AGENTS.md").write_text("real rules\n")
    os.symlink(outside, ws / "out")
    os.symlink(ws / "real", ws / "alias")
    os.mkfifo(ws / "fifo")
    (ws / "f").mkdir()
    os.mkfifo(ws / "f" / "AGENTS.md")
    pi = ProjectInstructions(ws)
    assert pi.pending("out/x.py") == []
    assert pi.pending("f/x.py") == []  # a FIFO: not read, and no hang
    assert pi.pending("alias/x.py") == [("alias/AGENTS.md", "real rules")]
    assert pi.loaded == ["alias/AGENTS.md"]
