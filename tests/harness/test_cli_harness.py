"""``kimik3 run --tools full`` lists AGENTS.md files and records checkpoints; ``kimik3 undo`` restores."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import anyio
import pytest
from click.testing import CliRunner

from kimik3.agents import CODING_INSTRUCTIONS
from kimik3.cli import main
from kimik3.engines import ScriptedEngine
from kimik3.formats.k3 import render
from kimik3.harness import CodingHarness
from kimik3.tools import Tool
from tests.test_k3_tiny import HARNESS_TOOLS, TRAINED_HARNESS_PROMPT_SHA256

from ..procs import needs_bwrap
from .helpers import answer, calls, git, make_repo

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

_CLEAN = ("KIMIK3_BASE_URL", "KIMIK3_API_KEY", "KIMIK3_MODEL", "KIMIK3_MODEL_PATH")


def invoke(args: list[str], home: Path) -> tuple[int, str, str]:
    env: dict[str, str | None] = {k: None for k in _CLEAN}
    env["KIMIK3_HOME"] = str(home)
    r = CliRunner().invoke(main, args, env=env, catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


@needs_bwrap
def test_run_full_then_undo_to_turn_1(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    (repo / "AGENTS.md").write_text("Be careful.\n")
    (repo / "sub" / "AGENTS.md").write_text("Sub rules.\n")
    script = tmp_path / "script.json"
    script.write_text(json.dumps([
        calls(("read_file", {"path": "sub/keep.txt"})),
        calls(("edit_file", {"path": "sub/keep.txt", "old_string": "keep", "new_string": "v2"})),
        calls(("multi_edit", {"path": "sub/keep.txt", "edits": [{"old_string": "v2", "new_string": "v3"}]})),
        answer("done"),
    ]))
    session = tmp_path / "s.jsonl"
    code, out, _ = invoke(["run", "go", "-w", str(repo), "--script", str(script), "--session", str(session),
                           "--plain", "--tools", "full"], tmp_path / "home")
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0] == "sandbox: bwrap (workspace read-write, the rest read-only, secrets hidden, /tmp private, network off)"
    assert lines[1] == "project instructions: AGENTS.md"
    assert "project instructions: sub/AGENTS.md" in lines
    assert (repo / "sub/keep.txt").read_text() == "v3\n"
    code, out, _ = invoke(["undo", str(session), "--to", "2", "-w", str(repo)], tmp_path / "home")
    assert (code, out) == (0, "restored sub/keep.txt\n")
    assert (repo / "sub/keep.txt").read_text() == "v2\n"
    code, out, _ = invoke(["undo", str(session), "-w", str(repo)], tmp_path / "home")
    assert (code, out) == (0, "restored sub/keep.txt\n")
    assert (repo / "sub/keep.txt").read_text() == "keep\n"
    assert git(repo, "status", "--porcelain") == "?? AGENTS.md\n?? sub/AGENTS.md\n"
    code, _, err = invoke(["undo", str(session), "-w", str(repo)], tmp_path / "home")
    assert (code, err) == (1, f"error: {session}: the changes recorded after turn 0 (turns 2, 3) were already undone "
                              "(the session records an undo to turn 0); nothing to undo\n")


def test_core_tools_keep_the_trained_prompt_and_no_agents_md_opts_out(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    (repo / "AGENTS.md").write_text("Be careful.\n")
    script = tmp_path / "script.json"
    script.write_text(json.dumps([answer("hi")]))
    session = tmp_path / "s.jsonl"
    code, out, _ = invoke(["run", "go", "-w", str(repo), "--script", str(script), "--session", str(session),
                           "--plain", "--no-agents-md", "--tools", "core"], tmp_path / "home")
    assert code == 0
    header = json.loads(session.read_text().splitlines()[0])
    assert header["tools"] == ["bash", "edit_file", "glob", "grep", "read_file", "write_file"]
    assert "project instructions" not in out
    assert "Be careful" not in header["instructions"]


def test_run_gives_the_full_harness_by_default_with_the_prompt_k3_tiny_was_trained_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kimik3.cli import engine as cli_engine

    engines: list[ScriptedEngine] = []

    class Recording(ScriptedEngine):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            engines.append(self)

    monkeypatch.setattr(cli_engine, "ScriptedEngine", Recording)
    repo = make_repo(tmp_path / "repo")
    script = tmp_path / "script.json"
    script.write_text(json.dumps([answer("hi")]))
    session = tmp_path / "s.jsonl"
    code, _, _ = invoke(["run", "hi", "-w", str(repo), "--script", str(script), "--session", str(session), "--plain"],
                        tmp_path / "home")
    assert code == 0
    header = json.loads(session.read_text().splitlines()[0])
    assert header["tools"] == sorted(HARNESS_TOOLS)
    # what the command sent (sandbox, skills, cost and all on): byte for byte the trained prompt
    (sent,) = engines[0].calls
    assert [m.role for m in sent.messages] == ["system", "user"] and sent.messages[0].content == CODING_INSTRUCTIONS
    assert hashlib.sha256(sent.prompt.encode()).hexdigest() == TRAINED_HARNESS_PROMPT_SHA256
    tools, instructions, _ = CodingHarness(repo).parts(engine=ScriptedEngine([]))
    assert header["instructions"] == instructions
    own = [t for t in tools if isinstance(t, Tool)]
    text = render([{"role": "system", "content": instructions}, {"role": "user", "content": "hi"}], own)
    assert hashlib.sha256(text.encode()).hexdigest() == TRAINED_HARNESS_PROMPT_SHA256


def test_core_harness_tools_are_exactly_the_trained_coding_tools(tmp_path: Path) -> None:
    from kimik3 import ScriptedEngine
    from kimik3.harness import FEATURES, CodingHarness
    from kimik3.tools.coding import coding_tools

    harness = CodingHarness(tmp_path, features=FEATURES - {"background", "subagents", "edit_tools"})  # tracking on
    *tools, skills = harness.parts(engine=ScriptedEngine([]))[0]
    assert [t.spec for t in tools if isinstance(t, Tool)] == [t.spec for t in coding_tools(tmp_path)]
    assert skills is harness.skills and anyio.run(skills.get_tools) == []  # no skill: nothing more declared
    _, _, hooks = harness.parts(engine=ScriptedEngine([]))
    assert [type(h).__name__ for h in hooks] == ["WorkspaceHook", "Checkpoints", "ProjectInstructions", "ReadTracker",
                                                 "SandboxHooks"]


@needs_bwrap
def test_the_first_line_says_which_sandbox_runs_and_the_header_records_it(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from kimik3.tools.coding import _sandbox

    repo = make_repo(tmp_path / "repo")
    (tmp_path / "cache").mkdir()
    script = tmp_path / "script.json"
    script.write_text(json.dumps([calls(("bash", {"command": "echo hi > out.txt; cat notes; echo \"[$HF_TOKEN] "
                                                         "[$OPENAI_API_KEY]\""})), answer("done")]))
    session = tmp_path / "s.jsonl"
    (repo / "notes").write_text("SECRET notes\n")
    monkeypatch.setenv("HF_TOKEN", "hf-1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-1")
    code, out, _ = invoke(["run", "go", "-w", str(repo), "--script", str(script), "--session", str(session), "--plain",
                           "--network", "--allow-read", str(repo / "a.txt"), "--allow-write", str(tmp_path / "cache"),
                           "--deny-read", str(repo / "notes"), "--allow-env", "HF_TOKEN"], tmp_path / "home")
    assert code == 0, out
    record = session.read_text()  # the tool result: the denied file unreadable, one credential passed
    assert "SECRET" not in record and "cat: notes: Permission denied\\n[hf-1] []\\n" in record, record
    assert out.splitlines()[0] == ("sandbox: bwrap (workspace read-write, the rest read-only, secrets hidden, /tmp "
                                   "private, 1 more readable, 1 more writable, network on)")
    assert json.loads(session.read_text().splitlines()[0])["sandbox"] == {
        "mode": "bwrap", "requested": "auto", "network": True, "read": [str(repo / "a.txt")],
        "write": [str(tmp_path / "cache")], "deny_read": [str(repo / "notes")], "allow_env": ["HF_TOKEN"]}
    assert (repo / "out.txt").read_text() == "hi\n"
    code, out, _ = invoke(["chat", "-w", str(repo), "--script", str(script), "--plain", "--sandbox", "none",
                           "--session", str(tmp_path / "chat.jsonl")], tmp_path / "home")
    assert out.splitlines()[0] == "sandbox: none (commands run unsandboxed, with your rights)"
    monkeypatch.setattr(_sandbox, "_bwrap", lambda: None)  # bubblewrap missing
    monkeypatch.setattr(_sandbox, "_landlock_abi", lambda: 0)  # and no Landlock (test_sandbox_policy.py has it)
    code, out, err = invoke(["run", "go", "-w", str(repo), "--script", str(script), "--plain"], tmp_path / "home")
    assert (code, out.splitlines()[0]) == (0, "sandbox: none (bubblewrap (bwrap) is not installed, and this kernel "
                                              "has no Landlock; commands run unsandboxed, with your rights)")
    code, out, err = invoke(["run", "go", "-w", str(repo), "--script", str(script), "--plain", "--sandbox", "bwrap"],
                            tmp_path / "home")
    assert code == 1 and out == ""
    assert err.startswith("error: SandboxUnavailableError: sandbox='bwrap' but bubblewrap (bwrap) is not installed; "
                          "to fix it, install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap;")


def test_undo_says_removed_for_a_file_the_undone_turns_created(tmp_path: Path) -> None:
    # issue 43: undo said "restored" for a file it deleted
    repo = make_repo(tmp_path / "repo")
    script = tmp_path / "script.json"
    script.write_text(json.dumps([
        calls(("write_file", {"path": "new/made.txt", "content": "x\n"})),
        calls(("read_file", {"path": "sub/keep.txt"})),
        calls(("edit_file", {"path": "sub/keep.txt", "old_string": "keep", "new_string": "v2"})),
        answer("done"),
    ]))
    session = tmp_path / "s.jsonl"
    code, out, _ = invoke(["run", "go", "-w", str(repo), "--script", str(script), "--session", str(session),
                           "--plain", "--tools", "full", "--sandbox", "none"], tmp_path / "home")
    assert code == 0, out
    assert (repo / "new/made.txt").read_text() == "x\n" and (repo / "sub/keep.txt").read_text() == "v2\n"
    code, out, _ = invoke(["undo", str(session), "-w", str(repo)], tmp_path / "home")
    assert (code, out) == (0, "removed new/made.txt\nrestored sub/keep.txt\n")
    assert not (repo / "new").exists() and (repo / "sub/keep.txt").read_text() == "keep\n"


@pytest.mark.parametrize("backend", ["bwrap", "landlock"])
def test_undo_after_a_run_whose_commands_ran_in_each_sandbox(tmp_path: Path, backend: str) -> None:
    """kimik3's own checkpoint refs (refs/kimik3/...) survive the sandbox putting back git control
    data after each command and at the run's end (Landlock copies it and puts it back): undo works."""
    if backend == "bwrap" and not shutil.which("bwrap"):
        pytest.skip("bubblewrap is not installed")
    repo = make_repo(tmp_path / "repo")
    script = tmp_path / "script.json"
    script.write_text(json.dumps([
        calls(("read_file", {"path": "sub/keep.txt"})),
        calls(("edit_file", {"path": "sub/keep.txt", "old_string": "keep", "new_string": "v2"})),
        calls(("bash", {"command": "cat sub/keep.txt"})),
        calls(("edit_file", {"path": "sub/keep.txt", "old_string": "v2", "new_string": "v3"})),
        calls(("bash", {"command": "git status --porcelain"})),
        answer("done"),
    ]))
    session = tmp_path / "s.jsonl"
    code, out, err = invoke(["run", "go", "-w", str(repo), "--script", str(script), "--session", str(session),
                             "--plain", "--tools", "full", "--sandbox", backend], tmp_path / "home")
    assert code == 0, out + err
    assert out.splitlines()[0].startswith(f"sandbox: {backend} "), out
    assert "warning" not in (out + err).lower(), out + err
    refs = git(repo, "for-each-ref", "--format=%(refname)", "refs/kimik3").split()
    assert len(refs) >= 2, refs
    assert (repo / "sub/keep.txt").read_text() == "v3\n"
    code, out, _ = invoke(["undo", str(session), "-w", str(repo)], tmp_path / "home")
    assert (code, out) == (0, "restored sub/keep.txt\n")
    assert (repo / "sub/keep.txt").read_text() == "keep\n"
