"""Agent Skills on real folders: discovery, the format's rules (agentskills.io/specification), a
bad skill skipped with one warning naming its file, size limits, symlinked skill folders, and the
file tools reading (never writing) a skill's folder outside the workspace."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from kimik3.harness import (
    FEATURES,
    MAX_CATALOG_BYTES,
    MAX_SKILL_BYTES,
    CodingHarness,
    Skills,
    user_skills_folder,
)
from kimik3.harness._skill_files import MAX_FRONT_MATTER_BYTES
from kimik3.tools import Tool

GOOD = "Counts words in text files. Use when the user asks for a word count."


def make_skill(folder: Path, front: str | None = None, body: str = "# Word count\nRun scripts/count.sh FILE.\n") -> Path:
    """A skill folder with a SKILL.md (front matter ``front``, default: name = the folder's)."""
    folder.mkdir(parents=True, exist_ok=True)
    if front is None:
        front = f"name: {folder.name}\ndescription: {GOOD}\n"
    (folder / "SKILL.md").write_text(f"---\n{front}---\n{body}", encoding="utf-8")
    return folder


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


def found(skills: Skills) -> dict[str, str]:
    return {name: str(s.folder) for name, s in skills.scan().items()}


def test_the_three_places_and_which_one_wins(ws: Path, tmp_path: Path) -> None:
    make_skill(ws / ".agents/skills/word-count")
    make_skill(ws / ".agents/skills/lint", f"name: lint\ndescription: {GOOD}\n")
    make_skill(user_skills_folder() / "lint")  # shadowed by the workspace's
    make_skill(user_skills_folder() / "deploy")
    given = make_skill(tmp_path / "mine" / "word-count")  # a folder of skills passed in wins
    one = make_skill(tmp_path / "release")  # a skill folder itself passed in
    warnings: list[str] = []
    skills = Skills([tmp_path / "mine", one], workspace=ws, user=True, on_warning=warnings.append)
    assert found(skills) == {
        "word-count": str(given),
        "release": str(one),
        "lint": str(ws / ".agents/skills/lint"),
        "deploy": str(user_skills_folder() / "deploy"),
    }
    assert skills.found["lint"].source == "workspace" and skills.found["deploy"].source == "user"
    assert warnings == [
        f"skill 'word-count' at {ws}/.agents/skills/word-count/SKILL.md is shadowed by the one at {given}/SKILL.md",
        f"skill 'lint' at {user_skills_folder()}/lint/SKILL.md is shadowed by the one at "
        f"{ws}/.agents/skills/lint/SKILL.md",
    ]
    skills.scan()  # looked at again: each warning is given once
    assert len(warnings) == 2


def test_not_skill_folders_are_ignored_quietly(ws: Path) -> None:
    (ws / ".agents/skills").mkdir(parents=True)
    (ws / ".agents/skills/README.md").write_text("skills live here\n")
    (ws / ".agents/skills/empty").mkdir()
    (ws / ".agents/skills/.hidden").mkdir()
    make_skill(ws / ".agents/skills/.hidden/x")
    warnings: list[str] = []
    assert found(Skills(workspace=ws, user=True, on_warning=warnings.append)) == {}
    assert warnings == []


# Each kind of bad front matter: skipped, one warning line naming the file and what is wrong.
BAD = [
    ("no front matter", None, "# just markdown\n", "it does not start with a '---' line"),
    ("never closed", None, "---\nname: bad\ndescription: x\n", "its front matter is not closed by a '---' line"),
    ("yaml error", "name: bad\ndescription: Use it when: a colon\n", "", "its front matter is not valid YAML: mapping values"),
    ("a list", "- name\n- description\n", "", "its front matter is not a YAML mapping (it is list)"),
    ("empty", "", "", "its front matter is not a YAML mapping (it is empty)"),
    ("null name", f"name:\ndescription: {GOOD}\n", "", "'name' must be a string, not NoneType (quote it)"),
    ("no name", f"description: {GOOD}\n", "", "its front matter has no 'name'"),
    ("uppercase", f"name: Bad\ndescription: {GOOD}\n", "", "'name' 'Bad' must be lowercase"),
    ("underscore", f"name: bad_one\ndescription: {GOOD}\n", "", "'name' 'bad_one' may hold only lowercase letters"),
    ("leading hyphen", f"name: -bad\ndescription: {GOOD}\n", "", "'name' '-bad' must not start or end with a hyphen nor hold '--'"),
    ("double hyphen", f"name: bad--one\ndescription: {GOOD}\n", "", "'name' 'bad--one' must not start or end with a hyphen nor hold '--'"),
    ("65 characters", f"name: {'a' * 65}\ndescription: {GOOD}\n", "", "'name' has 65 characters; at most 64"),
    ("a number", f"name: 123\ndescription: {GOOD}\n", "", "'name' must be a string, not int (quote it)"),
    ("no description", "name: bad\n", "", "its front matter has no 'description'"),
    ("empty description", "name: bad\ndescription: '  '\n", "", "'description' is empty"),
    ("long description", f"name: bad\ndescription: {'x' * 1025}\n", "", "'description' has 1025 characters; at most 1024"),
    ("description list", "name: bad\ndescription: [a, b]\n", "", "'description' must be a string, not list"),
    ("compatibility", f"name: bad\ndescription: {GOOD}\ncompatibility: {'c' * 501}\n", "", "'compatibility' must be a string of 1-500"),
    ("metadata", f"name: bad\ndescription: {GOOD}\nmetadata: [1]\n", "", "'metadata' must be a mapping"),
    ("allowed-tools", f"name: bad\ndescription: {GOOD}\nallowed-tools: 5\n", "", "'allowed-tools' must be a string or a list"),
    ("python object", f"name: bad\ndescription: {GOOD}\nx: !!python/object/apply:os.system ['touch pwned']\n", "",
     "its front matter is not valid YAML: could not determine a constructor"),
]


@pytest.mark.parametrize(("case", "front", "raw", "why"), BAD, ids=[b[0] for b in BAD])
def test_bad_front_matter_is_skipped_with_one_warning(ws: Path, case: str, front: str | None, raw: str,
                                                      why: str) -> None:
    bad = ws / ".agents/skills/bad"
    bad.mkdir(parents=True)
    (bad / "SKILL.md").write_text(raw if front is None else f"---\n{front}---\nbody\n", encoding="utf-8")
    make_skill(ws / ".agents/skills/good")
    warnings: list[str] = []
    cwd = os.getcwd()
    os.chdir(ws)
    try:
        assert list(Skills(workspace=ws, on_warning=warnings.append).scan()) == ["good"]
    finally:
        os.chdir(cwd)
    assert len(warnings) == 1 and "\n" not in warnings[0]
    assert warnings[0].startswith(f"skill skipped: {bad}/SKILL.md: {why}"), warnings[0]
    assert not (ws / "pwned").exists()


def test_name_must_match_its_folder(ws: Path) -> None:
    make_skill(ws / ".agents/skills/word-count", f"name: wordcount\ndescription: {GOOD}\n")
    warnings: list[str] = []
    assert found(Skills(workspace=ws, on_warning=warnings.append)) == {}
    assert warnings == [f"skill skipped: {ws}/.agents/skills/word-count/SKILL.md: 'name' 'wordcount' does not "
                        "match its folder 'word-count'"]


def test_a_warning_is_one_printable_line_whatever_the_folder_is_called(ws: Path) -> None:
    odd = ws / ".agents/skills" / "bad\nname\x1b[31m"
    make_skill(odd, f"name: bad\ndescription: {GOOD}\n")
    warnings: list[str] = []
    assert found(Skills(workspace=ws, on_warning=warnings.append)) == {}
    assert warnings == [f"skill skipped: {ws}/.agents/skills/bad\\nname\\x1b[31m/SKILL.md: 'name' 'bad' does not "
                        "match its folder 'bad\\nname\\x1b[31m'"]


def test_the_limits_themselves_are_valid(ws: Path) -> None:
    make_skill(ws / ".agents/skills" / ("a" * 64), f"name: {'a' * 64}\ndescription: {'d' * 1024}\n")
    make_skill(ws / ".agents/skills/données", f"name: données\ndescription: {GOOD}\nlicense: MIT\n"
                                              "metadata:\n  version: '1.0'\nallowed-tools: Bash Read\n"
                                              "disable-model-invocation: false\n")  # other fields ignored
    make_skill(ws / ".agents/skills/v2", f"name: v2\ndescription: >-\n  Folded\n  text.\ncompatibility: {'c' * 500}\n")
    skills = Skills(workspace=ws)
    assert sorted(skills.scan()) == ["a" * 64, "données", "v2"]
    assert skills.found["a" * 64].description == "d" * 1024
    assert skills.found["v2"].description == "Folded text."
    assert skills.warnings == []


def test_a_fifo_a_broken_link_and_non_utf8_never_block_or_end_the_scan(ws: Path) -> None:
    fifo = ws / ".agents/skills/fifo"
    fifo.mkdir(parents=True)
    os.mkfifo(fifo / "SKILL.md")
    broken = ws / ".agents/skills/broken"
    broken.mkdir()
    (broken / "SKILL.md").symlink_to(ws / "nowhere.md")
    latin = ws / ".agents/skills/latin"
    latin.mkdir()
    (latin / "SKILL.md").write_bytes(b"---\nname: latin\ndescription: caf\xe9\n---\n")
    make_skill(ws / ".agents/skills/good")
    skills = Skills(workspace=ws, on_warning=lambda line: None)
    assert list(skills.scan()) == ["good"]
    assert [w.split(": ", 2)[1] for w in skills.warnings] == [
        f"{broken}/SKILL.md", f"{fifo}/SKILL.md", f"{latin}/SKILL.md"]
    assert "a FIFO (named pipe)" in skills.warnings[1]
    assert "not UTF-8" in skills.warnings[2]


def test_a_huge_skill_file_is_read_only_as_far_as_needed(ws: Path) -> None:
    folder = make_skill(ws / ".agents/skills/huge", body="".join(f"line {i:06d} " + "x" * 87 + "\n" for i in range(100_000)))
    assert (folder / "SKILL.md").stat().st_size > 10_000_000
    unclosed = ws / ".agents/skills/unclosed"
    unclosed.mkdir()
    (unclosed / "SKILL.md").write_text("---\nname: unclosed\n" + "# comment\n" * 200_000)
    skills = Skills(workspace=ws, on_warning=lambda line: None)
    assert list(skills.scan()) == ["huge"]
    assert skills.warnings == [f"skill skipped: {unclosed}/SKILL.md: its front matter is not closed within its "
                               f"first {MAX_FRONT_MATTER_BYTES} bytes"]
    text, body, _ = skills._load("huge")
    assert text.startswith(f'<skill_content name="huge">\n{body}\n\nSkill directory: {folder}\n')
    assert len(body.encode()) < MAX_SKILL_BYTES + 200
    kept = MAX_SKILL_BYTES // 100  # whole lines of 100 bytes
    assert body.splitlines()[kept - 1].startswith(f"line {kept - 1:06d} x")
    more = (folder / "SKILL.md").stat().st_size - len(f"---\nname: huge\ndescription: {GOOD}\n---\n") - kept * 100
    offset = 5 + kept  # the front matter is 4 lines; the first line not shown
    assert body.endswith(f'[SKILL.md cut: {more} more bytes not shown; read_file("{folder}/SKILL.md", '
                         f"offset={offset}) shows the rest]")
    tools = {t.name: t for t in CodingHarness(ws, skills=skills).base_tools}
    shown = anyio.run(tools["read_file"].run, {"path": ".agents/skills/huge/SKILL.md", "offset": offset, "limit": 1})
    assert shown.text.startswith(f"{offset:>6}\tline {kept:06d} x")


def test_the_catalog_is_capped_and_names_what_it_left_out(ws: Path) -> None:
    for i in range(60):
        make_skill(ws / f".agents/skills/s{i:02d}", f"name: s{i:02d}\ndescription: {'d' * 1000}\n")
    warnings: list[str] = []
    skills = Skills(workspace=ws, on_warning=warnings.append)
    catalog = skills._catalog(skills.scan())
    assert sum(len(e.line().encode()) + 1 for e in catalog) <= MAX_CATALOG_BYTES
    kept = [e.name for e in catalog]
    assert kept == [f"s{i:02d}" for i in range(len(kept))] and 20 < len(kept) < 60
    assert warnings == [f"skills not listed to the model (the catalog's {MAX_CATALOG_BYTES} bytes are used up): "
                        + ", ".join(f"s{i:02d}" for i in range(len(kept), 60))]


def test_symlinked_skill_folders(ws: Path, tmp_path: Path) -> None:
    elsewhere = make_skill(tmp_path / "elsewhere" / "deploy")
    user_skills_folder().mkdir(parents=True)
    (user_skills_folder() / "deploy").symlink_to(elsewhere)  # the user's own: followed
    (user_skills_folder() / "alias").symlink_to(elsewhere)  # its name is checked against "alias"
    (ws / ".agents/skills").mkdir(parents=True)
    (ws / ".agents/skills/escape").symlink_to(make_skill(tmp_path / "elsewhere" / "escape"))  # must stay inside
    make_skill(ws / "tools/inside", f"name: inside\ndescription: {GOOD}\n")
    (ws / ".agents/skills/inside").symlink_to("../../tools/inside")  # inside the workspace: followed
    warnings: list[str] = []
    skills = Skills(workspace=ws, user=True, on_warning=warnings.append)
    assert found(skills) == {"inside": str(ws / ".agents/skills/inside"), "deploy": str(elsewhere)}
    assert warnings == [
        f"skill skipped: {ws}/.agents/skills/escape: it is a symlink leading out of the workspace (a workspace "
        "skill must lie inside it)",
        f"skill skipped: {user_skills_folder()}/alias/SKILL.md: 'name' 'deploy' does not match its folder 'alias'",
    ]
    assert skills.read_paths() == [user_skills_folder(), elsewhere]  # what the tools may read outside


def test_a_link_inside_a_skill_folder_never_leads_out(ws: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP SECRET\n")
    folder = make_skill(tmp_path / "skills" / "demo")
    (folder / "reference.md").write_text("ref line\n")
    (folder / "leak.md").symlink_to(secret)
    (folder / "up").symlink_to(tmp_path)
    skills = Skills([tmp_path / "skills"])
    skills.scan()
    text, _, _ = skills._load("demo")
    assert "<file>reference.md</file>" in text and "leak.md" not in text and "up/" not in text
    tools = {t.name: t for t in CodingHarness(ws, features=FEATURES - {"checkpoints"}, skills=skills).tools}

    def call(name: str, **args: object) -> str:
        return anyio.run(tools[name].run, args).text

    assert call("read_file", path=f"{folder}/reference.md") == "     1\tref line"
    assert call("grep", pattern="line", path=str(folder)) == f"{folder}/reference.md:1:ref line"
    assert call("glob", pattern=f"{folder}/*.md").splitlines() == [f"{folder}/SKILL.md", f"{folder}/reference.md"]
    for bad in (f"{folder}/leak.md", f"{folder}/up/secret.txt", f"{folder}/../secret.txt", str(secret)):
        out = call("read_file", path=bad)
        assert out.startswith("Error:") and "TOP SECRET" not in out, out
    assert "TOP SECRET" not in call("grep", pattern="SECRET", path=str(folder))
    for name, args in [("write_file", {"path": f"{folder}/new.md", "content": "x"}),
                       ("edit_file", {"path": f"{folder}/reference.md", "old_string": "ref", "new_string": "x"}),
                       ("multi_edit", {"path": f"{folder}/reference.md", "edits": [{"old_string": "ref",
                                                                                    "new_string": "x"}]}),
                       ("apply_patch", {"patch": f"--- {folder}/reference.md\n+++ {folder}/reference.md\n@@ -1 +1 @@\n"
                                                 "-ref line\n+x\n"})]:
        out = call(name, **args)
        assert out.startswith("Error:") and "outside the workspace" in out, (name, out)
    assert (folder / "reference.md").read_text() == "ref line\n" and not (folder / "new.md").exists()


def test_the_file_tools_without_skills_are_unchanged(ws: Path, tmp_path: Path) -> None:
    folder = make_skill(tmp_path / "skills" / "demo")
    plain = {t.name: t for t in CodingHarness(ws, features=FEATURES - {"checkpoints"}, skills=False).tools}
    out = anyio.run(plain["read_file"].run, {"path": f"{folder}/SKILL.md"}).text
    assert out == f"Error: ToolError: path '{folder}/SKILL.md' is outside the workspace {ws}; use a path inside it"
    tool: Tool = plain["glob"]
    assert anyio.run(tool.run, {"pattern": f"{folder}/*"}).text == (
        f"Error: ToolError: pattern '{folder}/*' must be relative to the workspace and not use '..'")


def test_skills_takes_a_list(ws: Path) -> None:
    from kimik3 import UserError

    with pytest.raises(UserError, match="a list of folders, not one path"):
        Skills("skills")  # type: ignore[arg-type]
    with pytest.raises(UserError, match="a list of folders"):
        CodingHarness(ws, skills="skills")  # type: ignore[arg-type]


def test_claude_skills_are_a_second_workspace_folder_with_the_same_rules(ws: Path, tmp_path: Path) -> None:
    # issue 43 part 5: the Agent Skills client guide's second workspace location
    make_skill(ws / ".agents/skills/lint")
    make_skill(ws / ".claude/skills/lint")  # shadowed: .agents/skills is looked at first
    make_skill(ws / ".claude/skills/review")
    make_skill(user_skills_folder() / "review")  # shadowed by the workspace's .claude/skills
    make_skill(ws / ".claude/skills/Bad", "name: Bad\ndescription: x\n")  # checked as any SKILL.md
    (ws / ".claude/skills/escape").symlink_to(make_skill(tmp_path / "elsewhere" / "escape"))  # must stay inside
    warnings: list[str] = []
    skills = Skills(workspace=ws, user=True, on_warning=warnings.append)
    assert found(skills) == {"lint": str(ws / ".agents/skills/lint"), "review": str(ws / ".claude/skills/review")}
    assert skills.found["review"].source == "workspace"
    assert warnings == [  # in the order looked at: .claude/skills's entries sorted, then the user's
        f"skill skipped: {ws}/.claude/skills/Bad/SKILL.md: 'name' 'Bad' must be lowercase",
        f"skill skipped: {ws}/.claude/skills/escape: it is a symlink leading out of the workspace (a workspace "
        "skill must lie inside it)",
        f"skill 'lint' at {ws}/.claude/skills/lint/SKILL.md is shadowed by the one at {ws}/.agents/skills/lint/SKILL.md",
        f"skill 'review' at {user_skills_folder()}/review/SKILL.md is shadowed by the one at "
        f"{ws}/.claude/skills/review/SKILL.md",
    ]
    # a .claude/skills that leads out of the workspace is skipped as a whole, with one warning
    other = tmp_path / "other"
    other.mkdir()
    make_skill(tmp_path / "outside" / "skills" / "leak")
    (other / ".claude").symlink_to(tmp_path / "outside")
    warned: list[str] = []
    assert found(Skills(workspace=other, on_warning=warned.append)) == {}
    assert len(warned) == 1 and warned[0].startswith(f"skills folder {other}/.claude/skills skipped: ")
