"""kimik3's own checkpoint git never writes through a symlink out of a repository's git directory,
and a git checkpoint that fails never ends the run (issue 40, the attacker's F1 and F7), with real
git."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from kimik3 import ScriptedEngine
from kimik3.harness import FEATURES, CodingHarness, session_checkpoints
from kimik3.harness._snapshots import _INVALID

from .helpers import answer, calls, git, make_repo

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def files_under(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


async def run(ws: Path, session: Path, *turns: str, sandbox: str = "auto") -> None:
    agent = CodingHarness(ws, features=FEATURES - {"background", "subagents"}, sandbox=sandbox).agent(  # type: ignore[arg-type]
        engine=ScriptedEngine([*turns, answer("done")]))
    result = await agent.run("go", session=session)
    assert result.stop_reason == "completed"


def plant(repo: Path, where: str, outside: Path) -> None:
    """Make ``where`` (a folder of the git directory kimik3's git writes) a symlink to ``outside``
    holding what it held (so the repository still works)."""
    target = repo / ".git" / where
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():
        shutil.copytree(target, outside, dirs_exist_ok=True)
        shutil.rmtree(target)
    else:
        outside.mkdir(exist_ok=True)
    target.symlink_to(outside)


@pytest.mark.parametrize("where", ["objects", "refs/kimik3", "objects/FANOUT"])
async def test_a_store_folder_symlinked_out_is_never_written(tmp_path: Path, where: str) -> None:
    repo = make_repo(tmp_path / "repo")
    payload = b"payload-bytes-unique-123\n"
    blob = subprocess.run(["git", "hash-object", "--stdin"], input=payload, cwd=repo, capture_output=True,
                          check=True).stdout.decode().strip()
    where = where.replace("FANOUT", blob[:2])  # the folder git would write the payload's object into
    outside = tmp_path / "outside"
    plant(repo, where, outside)
    before = files_under(outside)
    session = tmp_path / "s.jsonl"
    with pytest.warns(RuntimeWarning, match=r"git checkpoints cannot start \(kimik3's git does not write this "
                                            r"repository: .*/\.git/.* is a symlink"):
        await run(repo, session, calls(("write_file", {"path": "new.txt", "content": payload.decode()})))
    assert files_under(outside) == before  # no object, no ref, no lock written there
    assert (repo / "new.txt").read_bytes() == payload
    [record] = session_checkpoints(session)
    assert (record["kind"], record["changed"]) == ("copy", ["new.txt"])
    assert "no more git checkpoints" in record["uncovered"]["."]
    # the live control: the same writes done by git from outside go through the symlink
    subprocess.run(["git", "hash-object", "-w", "--stdin"], input=payload, cwd=repo, check=True, capture_output=True)
    git(repo, "update-ref", "refs/kimik3/x", blob)
    written = {"objects": f"{blob[:2]}/{blob[2:]}", "refs/kimik3": "x"}.get(where, blob[2:])
    assert written in files_under(outside) - before


async def test_a_nested_repository_made_mid_run_with_its_objects_out_is_not_written(tmp_path: Path) -> None:
    """The attacker's t2: bash makes ``inner`` a repository whose ``.git/objects`` is a symlink out,
    then a file tool writes into it; its snapshot (``git add`` with its objects) never runs."""
    repo = make_repo(tmp_path / "repo")
    outside = tmp_path / "outside"
    outside.mkdir()
    make = ("git init -q inner && cd inner && echo hi > f && git add f && git -c user.name=a -c user.email=b commit "
            f"-qm x && mv .git/objects .git/objects.real && ln -s {outside} .git/objects")
    session = tmp_path / "s.jsonl"
    await run(repo, session, calls(("bash", {"command": make})))  # in the sandbox when there is one
    assert os.readlink(repo / "inner/.git/objects") == str(outside)
    shutil.copytree(repo / "inner/.git/objects.real", outside, dirs_exist_ok=True)  # so that the repository works
    before = files_under(outside)
    await run(repo, session.with_name("s2.jsonl"),
              calls(("write_file", {"path": "inner/new.txt", "content": "payload-bytes-unique-456\n"})))
    assert files_under(outside) == before
    [record] = session_checkpoints(session.with_name("s2.jsonl"))
    assert record["kind"] == "git"
    assert "inner" in record["uncovered"]  # its files are not in the checkpoints, as for any nested repository
    subprocess.run(["git", "add", "new.txt"], cwd=repo / "inner", check=True)  # live control: git from outside
    assert len(files_under(outside) - before) == 2  # writes the object (and its fan-out folder) there


async def test_a_symlink_planted_mid_run_stops_git_checkpoints_not_the_run(tmp_path: Path) -> None:
    """A command (no sandbox here: in one, the top ``.git`` is read-only) makes ``.git/refs/kimik3`` a symlink out: the
    snapshot after it stops git checkpoints (copies from then on), the ref is never written there."""
    repo = make_repo(tmp_path / "repo")
    outside = tmp_path / "outside"
    outside.mkdir()
    session = tmp_path / "s.jsonl"
    with pytest.warns(RuntimeWarning, match=r"the git checkpoint after turn 1 failed \(kimik3's git does not "
                                            r"write this repository: .*refs/kimik3 is a symlink"):
        await run(repo, session,
                  calls(("write_file", {"path": "one.txt", "content": "1\n"}),
                        ("bash", {"command": f"rm -rf .git/refs/kimik3 && ln -s {outside} .git/refs/kimik3"})),
                  calls(("write_file", {"path": "two.txt", "content": "2\n"})), sandbox="none")
    assert files_under(outside) == set()
    records = session_checkpoints(session)
    assert [(r["turn"], r["kind"], r["changed"]) for r in records] == [(1, "copy", []), (2, "copy", ["two.txt"])]
    assert "refs/kimik3 is a symlink" in records[0]["uncovered"]["."]  # turn 1 is said uncovered, not lost
    git(repo, "update-ref", "refs/kimik3/x", "HEAD")  # the live control: git from outside writes there
    assert files_under(outside) == {"x"}


@pytest.mark.parametrize("name", [".git./config", "GIT~1/config", ".git /x"])
async def test_a_name_git_refuses_never_ends_the_run(tmp_path: Path, name: str) -> None:
    """The attacker's t10: a file git's ``add`` may refuse (a ``.git`` look-alike) made by one
    turn; git checkpoints go on without it, the turn's record names it uncovered when git refused
    it, and later runs go on."""
    repo = make_repo(tmp_path / "repo")
    session = tmp_path / "s.jsonl"
    await run(repo, session, calls(("bash", {"command": f"mkdir -p '{os.path.dirname(name)}' && "
                                                        f"echo x > '{name}'"})),
              calls(("write_file", {"path": "b.txt", "content": "y\n"})))
    assert (repo / "b.txt").read_bytes() == b"y\n"
    records = session_checkpoints(session)
    assert [r["kind"] for r in records] == ["git", "git"] and records[-1]["changed"] == ["b.txt"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_INDEX_FILE"] = str(tmp_path / "probe-index")  # git's own answer, the repository's index untouched
    refused = subprocess.run(["git", "add", "--", name], cwd=repo, env=env, capture_output=True).returncode
    if refused:  # git refuses it here: said, not lost
        assert records[0]["uncovered"] == {name: "a name git refuses: not in the checkpoint; undo cannot restore it"}
    else:  # git takes it (core.protectNTFS off): checkpointed like any file
        assert name in records[0]["changed"]
    await run(repo, tmp_path / "s2.jsonl", calls(("write_file", {"path": "c.txt", "content": "z\n"})))
    assert (repo / "c.txt").read_bytes() == b"z\n"
    assert [r["kind"] for r in session_checkpoints(tmp_path / "s2.jsonl")] == ["git"]


def test_a_refused_name_is_parsed_from_gits_own_message(tmp_path: Path) -> None:
    """The name comes from git's message (``error: invalid path '...'``), as git prints it."""
    repo = make_repo(tmp_path / "repo")
    (repo / ".git ").mkdir()
    (repo / ".git " / "x").write_text("x\n")
    proc = subprocess.run(["git", "add", "-A"], cwd=repo, capture_output=True, text=True)
    assert proc.returncode != 0 and _INVALID.findall(proc.stderr) == [".git /x"]


@pytest.mark.parametrize("at_start", [True, False])
async def test_a_global_git_config_in_the_workspace_is_kept_and_never_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, at_start: bool) -> None:
    """The attacker's t6 (``-w $HOME``): ``~/.gitconfig`` lies in the workspace. One there at the
    start is kept from the file tools (and bash); one a command makes during the run is not read
    by kimik3's own checkpoint git (``GIT_CONFIG_GLOBAL=/dev/null``), so its filter never runs."""
    home = make_repo(tmp_path / "home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    witness = tmp_path / "PWNED"
    filter_config = f'[filter "x"]\n\tclean = "touch {witness}; cat"\n'
    plant = [("write_file", {"path": ".gitattributes", "content": "*.txt filter=x\n"})]
    if at_start:
        (home / ".gitconfig").write_text("[user]\n\tname = T\n")
        plant.append(("write_file", {"path": ".gitconfig", "content": filter_config}))
    else:  # made during the run: no mount, no file tool check existed for it at the start
        plant.append(("bash", {"command": f"printf '{filter_config}' > .gitconfig"}))
    session = tmp_path / "s.jsonl"
    agent = CodingHarness(home, features=FEATURES - {"background", "subagents", "read_before_edit"},
                          skills=False).agent(
        engine=ScriptedEngine([calls(*plant), calls(("write_file", {"path": "b.txt", "content": "hi\n"})),
                               answer("done")]))
    result = await agent.run("go", session=session)
    outs = [m.content for m in result.messages if m.role == "tool"]
    if at_start:
        assert (home / ".gitconfig").read_text() == "[user]\n\tname = T\n"
        assert "git's global configuration" in str(outs[1]), outs
        (home / ".gitconfig").write_text(filter_config)  # the live control below needs the plant
    assert (home / "b.txt").read_text() == "hi\n"
    assert not witness.exists()  # kimik3's git snapshotted b.txt (*.txt filter=x) without the filter
    assert [r["kind"] for r in session_checkpoints(session)] == ["git", "git"]
    subprocess.run(["git", "add", "b.txt"], cwd=home, check=True, capture_output=True)  # the user's git runs it
    assert witness.exists()


async def test_a_symlinked_dot_git_is_never_written(tmp_path: Path) -> None:
    """A variant of t15: the workspace's ``.git`` is a symlink (a command of an earlier run can
    make one to any repository it can name): kimik3's git writes no object or ref there."""
    other = make_repo(tmp_path / "other")  # a repository outside the workspace
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / ".git").symlink_to(other / ".git")
    before = files_under(other / ".git")
    session = tmp_path / "s.jsonl"
    with pytest.warns(RuntimeWarning, match=r"git checkpoints cannot start \(kimik3's git does not write this "
                                            r"repository: .*/ws/\.git is a symlink\)"):
        await run(ws, session, calls(("write_file", {"path": "new.txt", "content": "x\n"})), sandbox="none")
    assert files_under(other / ".git") == before
    assert [r["kind"] for r in session_checkpoints(session)] == ["copy"]
