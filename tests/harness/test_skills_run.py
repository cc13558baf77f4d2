"""Agent Skills in runs: the frozen prompt without skills, a scripted run that loads a skill and
follows it (the prompt ids of every call a prefix of the next), skills found or changed mid-run
declared dynamically, sessions and resume, approval, the toolset at the Agent level, the CLI."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import shlex
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kimik3 import Agent, Allow, ChatRequest, Deny, K3Tokenizer, ScriptedEngine, SessionError, ToolMessage
from kimik3.agents import CODING_INSTRUCTIONS, PendingCall, fork_session
from kimik3.cli import main
from kimik3.formats.k3 import EncodedPrompt, check_request, render
from kimik3.harness import CodingHarness, Skills, user_skills_folder
from kimik3.harness._skill_files import digest
from kimik3.tools.coding import coding_tools
from kimik3.types import SystemMessage
from tests.k3vocab import write_model_dir
from tests.test_k3_tiny import TRAINED_PROMPT_SHA256

from ..procs import needs_bwrap
from .helpers import answer, calls
from .test_skills import GOOD, make_skill

CORE: dict[str, Any] = {"features": {"project_instructions"}}  # the six coding tools, AGENTS.md
# Skills changed mid-run by an unsandboxed command, as the user would change them: no tool of a run may
# write the workspace's skills (issue 40; the file tools refuse, the sandbox binds them read-only).
UNSANDBOXED: dict[str, Any] = {**CORE, "sandbox": "none"}


def put(path: str, text: str) -> str:
    """A bash command that writes ``text`` to ``path`` (its folders made)."""
    return f"mkdir -p {shlex.quote(os.path.dirname(path))} && printf %s {shlex.quote(text)} > {shlex.quote(path)}"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "notes.txt").write_text("one two three\nfour\n")
    return root


def word_count_skill(folder: Path) -> Path:
    make_skill(folder, body="# Word count\n1. Read references/rules.md.\n2. Run scripts/count.sh FILE and report it.\n")
    (folder / "references").mkdir()
    (folder / "references/rules.md").write_text("Words are split on spaces.\n")
    (folder / "scripts").mkdir()
    (folder / "scripts/count.sh").write_text('wc -w < "$1" | tr -d " "\n')
    return folder


def declarations(messages: Sequence[Any]) -> list[list[str]]:
    return [[t.function.name for t in m.tools] for m in messages
            if isinstance(m, SystemMessage) and m.tools is not None and not m.content]


def assert_prefixes(prompts: Sequence[Sequence[Any]]) -> None:
    for before, after in itertools.pairwise(prompts):
        assert after[: len(before)] == before


class Recording(ScriptedEngine):
    """Records the prompt ids of every call."""

    def __init__(self, responses: list[str], tokenizer: K3Tokenizer) -> None:
        super().__init__(responses, tokenizer=tokenizer)
        self.ids: list[list[int]] = []

    def encode(self, request: ChatRequest, **k3: Any) -> EncodedPrompt:
        out = super().encode(request, **k3)
        self.ids.append(list(out.ids))
        return out


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory) -> K3Tokenizer:
    return K3Tokenizer.from_pretrained(write_model_dir(tmp_path_factory.mktemp("k3"), num_base_tokens=163_584))


# -- no skill: the prompt k3-tiny was trained on -------------------------------------------


async def test_without_a_skill_the_prompt_is_byte_identical(ws: Path) -> None:
    (ws / ".agents/skills/empty").mkdir(parents=True)  # a skills folder with no skill in it
    user_skills_folder().mkdir(parents=True)
    prompts = []
    for skills in (True, False):
        engine = ScriptedEngine([answer("hi")])
        harness = CodingHarness(ws, **CORE, skills=skills)
        await harness.agent(engine=engine).run("hi")
        prompts.append((engine.calls[0].prompt, engine.calls[0].request.tools))
    assert prompts[0] == prompts[1]
    assert prompts[0][1] == [t.spec for t in coding_tools(ws)]
    text = render([{"role": "system", "content": CODING_INSTRUCTIONS}, {"role": "user", "content": "hi"}],
                  prompts[0][1])
    assert hashlib.sha256(text.encode()).hexdigest() == TRAINED_PROMPT_SHA256


# -- a run that loads a skill and follows it ----------------------------------------------


async def test_a_scripted_run_loads_a_skill_outside_the_workspace_and_follows_it(ws: Path, tok: K3Tokenizer) -> None:
    folder = word_count_skill(user_skills_folder() / "word-count")
    engine = Recording([
        calls(("load_skill", {"name": "word-count"})),
        calls(("read_file", {"path": f"{folder}/references/rules.md"})),
        calls(("bash", {"command": f"bash {folder}/scripts/count.sh notes.txt"})),
        answer("notes.txt has 4 words."),
    ], tok)
    harness = CodingHarness(ws, **CORE)
    session = ws.parent / "s.jsonl"
    result = await harness.agent(engine=engine).run("How many words are in notes.txt?", session=session)
    assert (result.output, result.stop_reason) == ("notes.txt has 4 words.", "completed")
    loaded, read, ran = [m.content for m in result.messages if isinstance(m, ToolMessage)]
    assert loaded == (
        '<skill_content name="word-count">\n# Word count\n1. Read references/rules.md.\n'
        "2. Run scripts/count.sh FILE and report it.\n\n"
        f"Skill directory: {folder}\n"
        "Relative paths in this skill are relative to the skill directory; give read_file and bash absolute paths.\n\n"
        "<skill_resources>\n  <file>references/rules.md</file>\n  <file>scripts/count.sh</file>\n</skill_resources>\n"
        "</skill_content>")
    assert read == "     1\tWords are split on spaces."
    assert isinstance(ran, str) and ran.startswith("4\n[exit code: 0,")
    head = engine.calls[0].request.tools
    assert [t.function.name for t in head] == ["bash", "read_file", "write_file", "edit_file", "grep", "glob",
                                               "load_skill"]
    assert head[-1].function.description is not None and head[-1].function.description.endswith(
        f"Available skills:\n- word-count: {GOOD}")
    assert [c.request.tools for c in engine.calls] == [head] * 4  # the head never changes
    assert declarations(result.messages) == []
    assert len(engine.ids) == 4
    assert_prefixes(engine.ids)  # each earlier prompt's ids a prefix of the later ones, across the load
    records = [json.loads(line) for line in session.read_text().splitlines() if line.startswith('{"skills"')]
    body = "# Word count\n1. Read references/rules.md.\n2. Run scripts/count.sh FILE and report it."
    assert records == [
        {"skills": {"listed": [{"name": "word-count", "description": GOOD, "file": str(folder / "SKILL.md")}]}},
        {"skills": {"loaded": {"name": "word-count", "file": str(folder / "SKILL.md"), "sha256": digest(body)}}},
    ]
    assert harness.skills is not None and harness.skills.loaded == ["word-count"]


async def test_an_unknown_skill_is_an_error_the_model_sees(ws: Path) -> None:
    make_skill(ws / ".agents/skills/lint")
    engine = ScriptedEngine([calls(("load_skill", {"name": "nope"})), answer("ok")])
    result = await CodingHarness(ws, **CORE).agent(engine=engine).run("go")
    assert [m.content for m in result.messages if isinstance(m, ToolMessage)] == [
        "Error: ToolError: skill 'nope' is unknown; available skills: lint"]


# -- found or changed mid-run: declared dynamically ---------------------------------------


AGAIN = ("Load a skill, as load_skill does: every load_skill tool loads any skill available now. The skills "
         "available changed since they were last listed.")


def assert_valid_requests(engine: ScriptedEngine) -> None:
    """Every request a K3 endpoint takes: each tool name declared once (the Vendor Verifier's contract)."""
    assert engine.calls
    for c in engine.calls:
        check_request(c.request.messages, c.request.tools, tool_choice=c.request.tool_choice)


def declared_specs(messages: Sequence[Any]) -> dict[str, str | None]:
    return {t.function.name: t.function.description for m in messages
            if isinstance(m, SystemMessage) and m.tools and not m.content for t in m.tools}


async def test_skills_found_or_changed_mid_run_are_declared_never_in_the_head(ws: Path, tok: K3Tokenizer) -> None:
    new = f"---\nname: fresh\ndescription: {GOOD}\n---\nSay fresh.\n"
    engine = Recording([
        calls(("bash", {"command": put(".agents/skills/fresh/SKILL.md", new)})),
        calls(("load_skill", {"name": "fresh"})),
        calls(("bash", {"command": put(".agents/skills/fresh/SKILL.md", new.replace(GOOD, "Says fresh."))})),
        calls(("load_skill_2", {"name": "fresh"}), ("load_skill", {"name": "fresh"})),  # either loader: one skill
        answer("fresh"),
    ], tok)
    session = ws.parent / "s.jsonl"
    result = await CodingHarness(ws, **UNSANDBOXED).agent(engine=engine).run("go", session=session)
    assert result.output == "fresh"
    core = [t.spec for t in coding_tools(ws)]
    assert [c.request.tools for c in engine.calls] == [core] * 5  # no skill at the start: no load_skill in the head
    assert declarations(result.messages) == [["load_skill"], ["load_skill_2"]]  # a new name for each change
    first, second = declared_specs(result.messages).values()
    assert first is not None and first.endswith(f"Available skills:\n- fresh: {GOOD}")
    assert second == f"{AGAIN}\n\nNew or changed skills:\n- fresh: Says fresh.\n\nThe other skills listed before are unchanged."
    loads = [m.content for m in result.messages if isinstance(m, ToolMessage)][1::2]
    assert len(loads) == 2 and loads[0] is not None and loads[0].startswith('<skill_content name="fresh">\nSay fresh.\n')
    assert [m.content for m in result.messages if isinstance(m, ToolMessage)][3:] == [loads[0], loads[0]]
    assert_prefixes(engine.ids)
    assert_valid_requests(engine)
    records = [json.loads(line)["skills"] for line in session.read_text().splitlines() if line.startswith('{"skills"')]
    assert [(next(iter(r)), r.get("tool")) for r in records] == [
        ("declared", "load_skill"), ("loaded", None), ("declared", "load_skill_2"), ("loaded", None), ("loaded", None)]


async def test_a_skill_removed_mid_run_is_declared_gone(ws: Path) -> None:
    make_skill(ws / ".agents/skills/lint")
    engine = ScriptedEngine([calls(("bash", {"command": "rm -r .agents/skills/lint"})),
                             calls(("load_skill", {"name": "lint"})), answer("ok")])
    result = await CodingHarness(ws, **UNSANDBOXED).agent(engine=engine).run("go")
    assert declared_specs(result.messages) == {
        "load_skill_2": f"{AGAIN}\n\nRemoved skills (loading one gives an error): lint\n\nNo skills are available now."}
    assert [m.content for m in result.messages if isinstance(m, ToolMessage)][1] == (
        "Error: ToolError: skill 'lint' is no longer available (its SKILL.md was removed or is no longer valid); "
        "available skills: none")
    assert_valid_requests(engine)


async def test_a_description_changed_back_and_forth_gets_a_loader_each_time(ws: Path) -> None:
    make_skill(ws / ".agents/skills/lint")
    edit = ".agents/skills/lint/SKILL.md"
    text = (ws / edit).read_text()
    engine = ScriptedEngine([
        calls(("bash", {"command": put(edit, text.replace(GOOD, "Lints."))})),
        calls(("bash", {"command": put(edit, text)})),
        calls(("bash", {"command": "mkdir .agents/skills/b && cp .agents/skills/lint/SKILL.md .agents/skills/b/ && "
                                   "sed -i 's/name: lint/name: b/' .agents/skills/b/SKILL.md"})),
        calls(("load_skill_4", {"name": "b"})), answer("ok")])
    result = await CodingHarness(ws, **UNSANDBOXED).agent(engine=engine).run("go")
    assert [t.function.name for t in engine.calls[0].request.tools][-1] == "load_skill"
    assert declarations(result.messages) == [["load_skill_2"], ["load_skill_3"], ["load_skill_4"]]
    unchanged = "The other skills listed before are unchanged."
    assert list(declared_specs(result.messages).values()) == [
        f"{AGAIN}\n\nNew or changed skills:\n- lint: Lints.\n\n{unchanged}",
        f"{AGAIN}\n\nNew or changed skills:\n- lint: {GOOD}\n\n{unchanged}",
        f"{AGAIN}\n\nNew or changed skills:\n- b: {GOOD}\n\n{unchanged}"]
    last = [m.content for m in result.messages if isinstance(m, ToolMessage)][-1]
    assert isinstance(last, str) and last.startswith('<skill_content name="b">')
    assert_valid_requests(engine)


# -- sessions and resume -------------------------------------------------------------------


async def test_resume_lists_the_same_skills_and_names_what_changed(ws: Path, tmp_path: Path) -> None:
    make_skill(ws / ".agents/skills/alpha")
    make_skill(ws / ".agents/skills/beta")
    session = tmp_path / "s.jsonl"
    engine = ScriptedEngine([calls(("load_skill", {"name": "alpha"})), answer("done")])
    await CodingHarness(ws, **CORE).agent(engine=engine).run("go", session=session)
    head = engine.calls[0].request.tools
    shutil.rmtree(ws / ".agents/skills/beta")
    make_skill(ws / ".agents/skills/alpha", body="Changed steps.\n")
    make_skill(ws / ".agents/skills/gamma")
    warnings: list[str] = []
    skills = Skills(workspace=ws, user=True, on_warning=warnings.append)
    again = ScriptedEngine([calls(("load_skill", {"name": "beta"})), answer("resumed")])
    result = await CodingHarness(ws, **CORE, skills=skills).agent(engine=again).resume(session, "more")
    assert result.output == "resumed"
    assert warnings == [
        f"skill 'beta' of session {session} is gone (it was {ws}/.agents/skills/beta/SKILL.md); loading it gives "
        "an error",
        f"skill 'alpha' changed since session {session} loaded it ({ws}/.agents/skills/alpha/SKILL.md); the model "
        "has the old instructions until it loads the skill again",
    ]
    assert again.calls[0].request.tools == head  # the same catalog in the head: the prefix cache holds
    before = engine.calls[-1].prompt
    assert again.calls[0].prompt.startswith(before[: before.rindex('<|open|>message role="assistant"')])
    assert declared_specs(result.messages) == {"load_skill_2": (
        f"{AGAIN}\n\nNew or changed skills:\n- gamma: {GOOD}\n\nRemoved skills (loading one gives an error): beta\n\n"
        "The other skills listed before are unchanged.")}
    assert [m.content for m in result.messages if isinstance(m, ToolMessage)][-1].startswith(
        "Error: ToolError: skill 'beta' is no longer available")
    lines = [json.loads(line)["skills"] for line in session.read_text().splitlines() if line.startswith('{"skills"')]
    assert [next(iter(r)) for r in lines] == ["listed", "loaded", "listed", "declared"]
    assert lines[0] == lines[2] and lines[3]["tool"] == "load_skill_2"
    assert [e["name"] for e in lines[3]["declared"]] == ["alpha", "gamma"]
    assert_valid_requests(again)
    # resumed again (and forked after the declaration): the same head, load_skill_2 restored as it was
    # declared (no warning, no second declaration), a new change gets load_skill_3
    shutil.rmtree(ws / ".agents/skills/gamma")
    for target in (session, fork_session(session, -1, tmp_path / "fork.jsonl")):
        warnings.clear()
        third = ScriptedEngine([calls(("load_skill_2", {"name": "alpha"})), answer("third")])
        with_skills = Skills(workspace=ws, user=True, on_warning=warnings.append)
        resumed = await CodingHarness(ws, **CORE, skills=with_skills).agent(engine=third).resume(target, "again")
        assert third.calls[0].request.tools == head
        previous = again.calls[-1].prompt
        assert third.calls[0].prompt.startswith(previous[: previous.rindex('<|open|>message role="assistant"')])
        assert declarations(resumed.messages) == [["load_skill_2"], ["load_skill_3"]]
        assert declared_specs(resumed.messages)["load_skill_3"] == (
            f"{AGAIN}\n\nRemoved skills (loading one gives an error): gamma\n\nThe other skills listed before are "
            "unchanged.")
        assert [m.content for m in resumed.messages if isinstance(m, ToolMessage)][-1].startswith(
            '<skill_content name="alpha">\nChanged steps.')
        assert warnings == [
            f"skill 'gamma' of session {target} is gone (it was {ws}/.agents/skills/gamma/SKILL.md); loading it gives "
            "an error",
            f"skill 'alpha' changed since session {target} loaded it ({ws}/.agents/skills/alpha/SKILL.md); the model "
            "has the old instructions until it loads the skill again"]
        assert_valid_requests(third)


async def test_a_session_written_before_loaders_had_names_resumes(ws: Path, tmp_path: Path) -> None:
    """Sessions written before each loader had a name of its own recorded ``{"declared": [...]}``
    alone: the first one declared ``load_skill`` (no skill at the start), a later one a change the
    endpoint never got (the name was taken)."""
    session = tmp_path / "s.jsonl"
    engine = ScriptedEngine([calls(("bash", {"command": put(".agents/skills/alpha/SKILL.md", (
        f"---\nname: alpha\ndescription: {GOOD}\n---\nSteps.\n"))})), answer("done")])
    await CodingHarness(ws, **UNSANDBOXED).agent(engine=engine).run("go", session=session)
    lines = session.read_text().splitlines()
    old = [line.replace(', "tool": "load_skill"}}', "}}") for line in lines]  # the record as it was written then
    old.append(json.dumps({"skills": {"declared": [{"name": "alpha", "description": "Later.", "file": "/x"}]}}))
    assert old[:-1] != lines
    session.write_text("\n".join(old) + "\n")
    again = ScriptedEngine([calls(("load_skill", {"name": "alpha"})), answer("resumed")])
    result = await CodingHarness(ws, **CORE).agent(engine=again).resume(session, "more")
    assert declarations(result.messages) == [["load_skill"]]  # restored as declared: nothing new to say
    assert [m.content for m in result.messages if isinstance(m, ToolMessage)][-1].startswith(
        '<skill_content name="alpha">')
    assert_valid_requests(again)


async def test_resume_of_a_session_without_skills_keeps_its_head(ws: Path, tmp_path: Path) -> None:
    session = tmp_path / "s.jsonl"
    engine = ScriptedEngine([answer("done")])
    await CodingHarness(ws, **CORE, skills=False).agent(engine=engine).run("go", session=session)
    make_skill(ws / ".agents/skills/alpha")
    again = ScriptedEngine([answer("resumed")])
    result = await CodingHarness(ws, **CORE).agent(engine=again).resume(session, "more")
    assert again.calls[0].request.tools == engine.calls[0].request.tools
    assert declarations(result.messages) == [["load_skill"]]


@pytest.mark.parametrize("record", [
    {"skills": {"listed": "nope"}},
    {"skills": {"listed": [{"name": "Bad", "description": "x", "file": "/x"}]}},
    {"skills": {"loaded": {"name": 5}}},
    {"skills": {"frobbed": []}},
    {"skills": {"declared": [], "tool": "load_skill_9"}},  # not the session's next loader
    {"skills": {"declared": [], "tool": "load_skill", "more": 1}},
])
async def test_a_bad_skills_record_is_a_session_error_naming_its_line(ws: Path, tmp_path: Path,
                                                                      record: dict[str, Any]) -> None:
    session = tmp_path / "s.jsonl"
    await CodingHarness(ws, **CORE).agent(engine=ScriptedEngine([answer("a")])).run("go", session=session)
    with session.open("a") as f:
        f.write(json.dumps(record) + "\n")
    line = len(session.read_text().splitlines())
    agent = CodingHarness(ws, **CORE).agent(engine=ScriptedEngine([answer("b")]))
    with pytest.raises(SessionError, match=f"^{session}:{line}: not a valid skills record"):
        await agent.resume(session, "more")


# -- scripts run only through bash, under the approval hook --------------------------------


async def test_a_skills_script_goes_through_the_approval_hook(ws: Path) -> None:
    folder = make_skill(user_skills_folder() / "deploy")
    (folder / "run.sh").write_text(f"touch {ws}/deployed\n")
    seen: list[PendingCall] = []

    def hook(call: PendingCall) -> Allow | Deny:
        seen.append(call)
        return Deny("no deploys") if call.name == "bash" else Allow()

    engine = ScriptedEngine([calls(("load_skill", {"name": "deploy"})),
                             calls(("bash", {"command": f"bash {folder}/run.sh"})), answer("not deployed")])
    result = await CodingHarness(ws, **CORE).agent(engine=engine, approval=hook).run("deploy")
    assert [c.name for c in seen] == ["load_skill", "bash"]
    assert [m.content for m in result.messages if isinstance(m, ToolMessage)][1] == (
        "Error: the user denied this call: no deploys")
    assert not (ws / "deployed").exists()


@needs_bwrap
async def test_the_skills_folders_are_readable_never_writable_in_the_sandbox(ws: Path, tmp_path: Path) -> None:
    folder = word_count_skill(user_skills_folder() / "word-count")  # under /tmp, which bwrap hides
    (tmp_path / "other.txt").write_text("not a skill\n")
    engine = ScriptedEngine([
        calls(("bash", {"command": f"bash {folder}/scripts/count.sh notes.txt; cat {tmp_path}/other.txt; "
                                   f"touch {folder}/new || echo read-only"})),
        answer("done")])
    harness = CodingHarness(ws, **{**CORE, "sandbox": "bwrap"})
    assert harness.sandbox.mode == "bwrap" and harness.sandbox.read == [str(user_skills_folder())]
    result = await harness.agent(engine=engine).run("count")
    out = next(m.content for m in result.messages if isinstance(m, ToolMessage))
    assert isinstance(out, str)
    lines = out.splitlines()
    assert lines[0] == "4" and "No such file or directory" in lines[1] and lines[-2] == "read-only", out
    assert not (folder / "new").exists()


# -- the toolset at the Agent level ----------------------------------------------------------


async def test_any_agent_takes_skills_as_a_toolset(tmp_path: Path) -> None:
    folder = make_skill(tmp_path / "mine" / "lint")
    skills = Skills([tmp_path / "mine"])
    engine = ScriptedEngine([calls(("load_skill", {"name": "lint"})), answer("linted")])
    session = tmp_path / "s.jsonl"
    result = await Agent(instructions="You lint.", tools=[skills], engine=engine).run("lint", session=session)
    assert result.output == "linted"
    assert [t.function.name for t in engine.calls[0].request.tools] == ["load_skill"]
    assert skills.loaded == ["lint"]
    assert f'"file": "{folder}/SKILL.md"' in session.read_text()


# -- the command line -------------------------------------------------------------------------


def invoke(args: list[str], home: Path) -> tuple[int, str, str]:
    env: dict[str, str | None] = {k: None for k in ("KIMIK3_BASE_URL", "KIMIK3_API_KEY", "KIMIK3_MODEL",
                                                    "KIMIK3_MODEL_PATH")}
    env["KIMIK3_HOME"] = str(home)
    r = CliRunner().invoke(main, args, env=env, catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def test_cli_skills_and_no_skills(ws: Path, tmp_path: Path) -> None:
    word_count_skill(tmp_path / "team" / "word-count")
    make_skill(tmp_path / "team" / "broken", f"name: Broken\ndescription: {GOOD}\n")
    script = tmp_path / "script.json"
    script.write_text(json.dumps([calls(("load_skill", {"name": "word-count"})), answer("ok")]))
    base = ["run", "go", "-w", str(ws), "--script", str(script), "--plain"]
    code, out, _ = invoke([*base, "--skills", str(tmp_path / "team"), "--session", str(tmp_path / "a.jsonl")],
                          tmp_path / "home")
    assert code == 0, out
    assert f"skill skipped: {tmp_path}/team/broken/SKILL.md: 'name' 'Broken' must be lowercase" in out.splitlines()
    recorded = (tmp_path / "a.jsonl").read_text()
    assert '"loaded": {"name": "word-count"' in recorded
    code, out, _ = invoke([*base, "--no-skills", "--session", str(tmp_path / "b.jsonl")], tmp_path / "home")
    assert code == 0, out
    assert "unknown tool 'load_skill'" in (tmp_path / "b.jsonl").read_text()
    code, _, err = invoke([*base, "--no-skills", "--skills", str(tmp_path / "team")], tmp_path / "home")
    assert code == 2 and "--skills and --no-skills exclude each other" in err


async def test_a_fork_keeps_the_skills_records_and_show_names_them(ws: Path, tmp_path: Path) -> None:
    from kimik3.agents import fork_session, format_session

    make_skill(ws / ".agents/skills/alpha")
    session = tmp_path / "s.jsonl"
    engine = ScriptedEngine([calls(("load_skill", {"name": "alpha"})), answer("done")])
    await CodingHarness(ws, **CORE).agent(engine=engine).run("go", session=session)
    shown = format_session(session)
    assert "--- skills listed: alpha\n" in shown and "--- skill loaded: alpha\n" in shown
    fork = fork_session(session, -1, tmp_path / "fork.jsonl")
    again = ScriptedEngine([answer("forked")])
    await CodingHarness(ws, **CORE).agent(engine=again).resume(fork, "more")
    assert again.calls[0].request.tools == engine.calls[0].request.tools


async def test_a_fork_before_a_declaration_names_its_own_next_loader(ws: Path, tmp_path: Path) -> None:
    from kimik3.agents import fork_session, format_session, load_session

    make_skill(ws / ".agents/skills/alpha")
    session = tmp_path / "s.jsonl"
    engine = ScriptedEngine([calls(("bash", {"command": "rm -r .agents/skills/alpha"})), answer("done")])
    await CodingHarness(ws, **UNSANDBOXED).agent(engine=engine).run("go", session=session)
    assert "--- skills declared with load_skill_2: none\n" in format_session(session)
    history = load_session(session)
    at = next(i for i, m in enumerate(history) if isinstance(m, SystemMessage) and m.tools) - 1
    fork = fork_session(session, at, tmp_path / "fork.jsonl")  # the bash call's result, before the declaration
    make_skill(ws / ".agents/skills/beta")
    again = ScriptedEngine([calls(("load_skill_2", {"name": "beta"})), answer("forked")])
    result = await CodingHarness(ws, **CORE).agent(engine=again).resume(fork, "more")
    assert again.calls[0].request.tools == engine.calls[0].request.tools
    assert declared_specs(result.messages) == {"load_skill_2": (
        f"{AGAIN}\n\nNew or changed skills:\n- beta: {GOOD}\n\nRemoved skills (loading one gives an error): alpha\n\n"
        "The other skills listed before are unchanged.")}
    assert [m.content for m in result.messages if isinstance(m, ToolMessage)][-1].startswith(
        '<skill_content name="beta">')
    assert_valid_requests(again)
