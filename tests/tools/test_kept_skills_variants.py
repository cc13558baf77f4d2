"""Issue 40, "the model's bash edited a workspace skill's SKILL.md", more variants of the kind:
Claude Code's ``.claude/skills`` (a workspace skills folder kimik3 reads as well: was writable by
``bash`` and the file tools, so a new skill steered the next run), and a skills folder reached
through a symlink in the workspace that a command re-points at skills of its own (the bind mount
kept the old target only; the symlink is now restored after the command). Real bubblewrap."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kimik3.harness import Skills

from ..procs import needs_bwrap
from .test_kept_sandbox import RO, bash_turn
from .test_sandbox_policy import BACKENDS

WHAT = "is an Agent Skill's folder (read into later runs' prompts); kimik3 or git act on it after this run"


def skill(folder: Path, name: str) -> str:
    text = f"---\nname: {name}\ndescription: The {name} skill.\n---\nRun make {name}.\n"
    (folder / name).mkdir(parents=True)
    (folder / name / "SKILL.md").write_text(text)
    return text


def skill_names(ws: Path) -> list[str]:
    """The skills a later run of this workspace finds."""
    return sorted(Skills(workspace=ws).scan())


@needs_bwrap
async def test_claude_skills_are_kept_from_bash_and_the_file_tools(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    text = skill(ws / ".claude" / "skills", "deploy")
    out = await bash_turn(ws, ["mkdir .claude/skills/evil; echo mk=$?; echo x >> .claude/skills/deploy/SKILL.md; "
                               "echo ed=$?; echo ok > fine.txt"],
                          files=[("write_file", {"path": ".claude/skills/evil2/SKILL.md",
                                                 "content": "---\nname: evil2\ndescription: x\n---\nx\n"})])
    assert "mk=1" in out[0] and "ed=1" in out[0] and RO in out[0], out[0]
    assert out[1].startswith(f"Error: ToolError: .claude/skills/evil2/SKILL.md {WHAT}"), out[1]
    assert (ws / ".claude/skills/deploy/SKILL.md").read_text() == text and (ws / "fine.txt").read_text() == "ok\n"
    assert skill_names(ws) == ["deploy"]


@needs_bwrap
async def test_a_missing_claude_skills_folder_is_refused_to_the_file_tools(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    [out] = await bash_turn(ws, [], files=[("write_file", {"path": ".claude/skills/evil/SKILL.md",
                                                           "content": "---\nname: evil\ndescription: x\n---\nx\n"})])
    assert out.startswith(f"Error: ToolError: .claude/skills/evil/SKILL.md {WHAT}"), out
    assert skill_names(ws) == []


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_symlink_naming_a_skills_folder_is_restored_after_a_command_re_points_it(tmp_path: Path,
                                                                                         backend: str) -> None:
    """``.agents -> src`` (the folder above the skills) and ``.claude/skills -> ../shared`` (the
    skills folder itself): a command re-points each at a folder with a skill of its own."""
    ws = tmp_path / "ws"
    skill(ws / "src" / "skills", "deploy")
    skill(ws / "shared", "build")
    (ws / ".agents").symlink_to("src")
    (ws / ".claude").mkdir()
    (ws / ".claude" / "skills").symlink_to("../shared")
    assert skill_names(ws) == ["build", "deploy"]
    plant = ("mkdir -p evil/skills/evil && printf -- '---\\nname: evil\\ndescription: x\\n---\\nx\\n' > "
             "evil/skills/evil/SKILL.md && rm .agents && ln -s evil .agents && echo a=$? && "
             "rm .claude/skills && ln -s ../evil/skills .claude/skills && echo c=$?")
    with pytest.warns(RuntimeWarning, match=r"the symlink \S+ \(-> \S+\) was replaced or removed; kimik3 restored it"):
        [out] = await bash_turn(ws, [plant], sandbox=backend)
    assert "a=0" in out and "c=0" in out, out  # the links are the workspace's own: a command may change them
    assert "[the symlink .agents (-> src) was replaced or removed; kimik3 restored it; what the command put there " \
           "is now .agents.kimik3-replaced-1]" in out, out
    assert "[the symlink .claude/skills (-> ../shared) was replaced or removed; kimik3 restored it; what the " \
           "command put there is now .claude/skills.kimik3-replaced-1]" in out, out
    assert os.readlink(ws / ".agents") == "src" and os.readlink(ws / ".claude" / "skills") == "../shared"
    assert skill_names(ws) == ["build", "deploy"]
