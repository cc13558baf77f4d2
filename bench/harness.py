"""Benchmark the coding harness (issue 23, item 6): a 50-turn coding session replayed through the
agent with a scripted model, on a fresh git repository per configuration.

The session (``session()`` below, deterministic: the recording) works through ten modules of a
small package: read a module, grep, edit it (twice, once with multi-line context), run a check
with bash; 49 tool turns and one answer. It reads before it edits, so it runs unchanged with
read-before-edit on.

Per configuration (baseline: ``coding_tools`` + CODING_INSTRUCTIONS, no hooks; then each feature
alone; then everything; then Agent Skills with 20 skills in the repository, whose catalog is in
every prompt's head, so not gated):
    tokens/turn   prompt tokens sent per model call (exact: K3's real vocabulary), and its ratio
                  to the baseline; each feature alone must stay within +5% (PASS / FAIL; the
                  exit status is 1 on a FAIL). The new tools cost their declarations.
    overhead/turn kimik3's own CPU time per turn: the process's CPU time (``process_time``, all
                  its threads) over the run minus the CPU time inside the tool functions
                  (``thread_time`` of the thread each ran on; bash's child processes are in
                  neither), min / median / max of REPEATS runs, the configurations interleaved;
                  and its ratio to the baseline's run of the same repeat (min / median / max).

Run: .venv/bin/python bench/harness.py
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kimik3 import Agent, ScriptedEngine  # noqa: E402
from kimik3.agents import CODING_INSTRUCTIONS, Budgets, TurnEndEvent  # noqa: E402
from kimik3.formats.k3 import default_tokenizer, render_output  # noqa: E402
from kimik3.harness import CodingHarness  # noqa: E402
from kimik3.tools import Tool  # noqa: E402
from kimik3.tools.coding import coding_tools  # noqa: E402

MODULES = 10
REPEATS = 3
LIMIT = 0.05
AGENTS_MD = "\n".join([
    "# Project conventions",
    "- Python 3.11, type hints everywhere, `ruff` and `mypy --strict` must pass.",
    "- Run the checks with `python -m compileall -q pkg` before you finish.",
    "- Keep functions small; no new dependencies without asking.",
    "- Constants live at the top of each module, in UPPER_CASE.",
    "- Tests go under tests/, one file per module.",
]) + "\n"
REASONING = "I will look at the module, then change the constant and check that it still compiles."


def module_text(i: int) -> str:
    funcs = "\n\n".join(f"def f{i}_{k}(x: int) -> int:\n    \"\"\"Step {k}.\"\"\"\n    return x * {k} + LIMIT"
                        for k in range(12))
    return f'"""Module {i}."""\n\nLIMIT = {i}\n\n\n{funcs}\n'


def make_repo(path: Path) -> None:
    (path / "pkg").mkdir(parents=True)
    for i in range(MODULES):
        (path / "pkg" / f"m{i}.py").write_text(module_text(i))
    (path / "AGENTS.md").write_text(AGENTS_MD)
    (path / "pkg" / "AGENTS.md").write_text("- Modules in pkg/ never import each other.\n")
    for cmd in (["init", "-q", "-b", "main"], ["add", "-A"],
                ["-c", "user.name=b", "-c", "user.email=b@b", "commit", "-q", "-m", "init"]):
        subprocess.run(["git", *cmd], cwd=path, check=True, capture_output=True)


def turn(name: str, args: dict[str, Any]) -> str:
    return render_output({"reasoning_content": REASONING, "content": "",
                          "tool_calls": [{"id": "c", "function": {"name": name, "arguments": args}}]})


def session() -> list[str]:
    """The recorded session: 49 tool turns, then the answer."""
    out: list[str] = []
    for i in range(MODULES):
        path = f"pkg/m{i}.py"
        out += [
            turn("read_file", {"path": path}),
            turn("grep", {"pattern": "LIMIT", "path": path}),
            turn("edit_file", {"path": path, "old_string": f"LIMIT = {i}\n", "new_string": f"LIMIT = {i + 100}\n"}),
            turn("edit_file", {"path": path, "old_string": f"def f{i}_3(x: int) -> int:\n    \"\"\"Step 3.\"\"\"",
                               "new_string": f"def f{i}_3(x: int) -> int:\n    \"\"\"Step three.\"\"\""}),
            turn("bash", {"command": f"{sys.executable} -m py_compile {path} && echo ok"}),
        ]
    out = out[:49]
    out.append(render_output({"reasoning_content": "All done.", "content": "Updated the limits in pkg/."}))
    return out


def timed(tool: Tool, spent: list[float]) -> None:
    """Make ``tool`` add the CPU time inside its function (its thread's) to ``spent``."""
    fn = tool.function
    if tool.is_async:
        async def afn(*a: Any, **kw: Any) -> Any:
            t = time.thread_time()
            try:
                return await fn(*a, **kw)
            finally:
                spent.append(time.thread_time() - t)
        tool.function = afn
    else:
        def sfn(*a: Any, **kw: Any) -> Any:
            t = time.thread_time()
            try:
                return fn(*a, **kw)
            finally:
                spent.append(time.thread_time() - t)
        tool.function = sfn


FEATURES = ("project_instructions", "read_before_edit", "checkpoints", "background", "subagents", "edit_tools",
            "skills")
SKILLS = 20  # skill folders in .agents/skills for the last configuration
CONFIGS: dict[str, dict[str, bool] | None] = {
    "baseline (coding_tools, no hooks)": None,
    "+ AGENTS.md instructions": {"project_instructions": True},
    "+ read-before-edit tracking": {"read_before_edit": True},
    "+ checkpoints (git side refs)": {"checkpoints": True},
    "+ multi_edit, apply_patch": {"edit_tools": True},
    "+ background bash, read_output, stop": {"background": True},
    "+ task (sub-agents)": {"subagents": True},
    "+ skills (none found: looked for every turn)": {"skills": True},
    "everything (--tools full)": dict.fromkeys(FEATURES, True),
    f"with {SKILLS} skills (their catalog)": {"skills": True, "skills_in_repo": True},
}
GATED = tuple(name for name in CONFIGS if name.startswith("+ "))


def build(features: dict[str, bool] | None, repo: Path, engine: ScriptedEngine,
          spent: list[float]) -> Agent[str]:
    budgets = Budgets(turns=60)
    if features is None:
        tools = coding_tools(repo)
        for t in tools:
            timed(t, spent)
        return Agent(instructions=CODING_INSTRUCTIONS, tools=tools, engine=engine, budgets=budgets)
    skills = features.pop("skills", False)  # not a feature: CodingHarness(skills=), on by default
    harness = CodingHarness(repo, features={name for name, on in features.items() if on}, skills=skills)
    for t in harness.base_tools:
        timed(t, spent)
    return harness.agent(engine=engine, budgets=budgets)


async def one_run(features: dict[str, bool] | None, work: Path) -> tuple[float, float, int, list[int]]:
    repo = Path(tempfile.mkdtemp(dir=work))
    make_repo(repo)
    features = dict(features) if features is not None else None
    if features is not None and features.pop("skills_in_repo", False):
        for i in range(SKILLS):
            folder = repo / ".agents" / "skills" / f"skill-{i:02d}"
            folder.mkdir(parents=True)
            (folder / "SKILL.md").write_text(f"---\nname: skill-{i:02d}\ndescription: Does task {i} of the "
                                             f"project. Use when asked for task {i}.\n---\nSteps for task {i}.\n")
    spent: list[float] = []
    engine = ScriptedEngine(session(), tokenizer=default_tokenizer())
    agent = build(features, repo, engine, spent)
    prompts: list[int] = []
    start = time.process_time()
    async for event in agent.run_stream("Raise every LIMIT in pkg/ by 100 and rename step 3."):
        if isinstance(event, TurnEndEvent):
            prompts.append(event.usage.prompt_tokens)
    cpu = time.process_time() - start
    check = (repo / "pkg" / "m9.py").read_text()
    assert "LIMIT = 109" in check and "Step three." in check, "the session did not replay"
    shutil.rmtree(repo)
    return cpu, sum(spent), len(prompts), prompts


async def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="kimik3-bench-harness-"))
    os.environ["KIMIK3_HOME"] = str(work / "home")  # none of the user's own skills
    rows = []
    try:
        await one_run(None, work)  # warm-up: tokenizer, imports
        overheads: dict[str, list[float]] = {name: [] for name in CONFIGS}
        measured: dict[str, tuple[int, float]] = {}
        for _ in range(REPEATS):  # configurations interleaved: a busy machine slows them alike
            for name, features in CONFIGS.items():
                cpu, tools, turns, prompts = await one_run(features, work)
                overheads[name].append((cpu - tools) / turns)
                measured[name] = (turns, sum(prompts) / turns)
        base = overheads[next(iter(CONFIGS))]
        rows = [(name, *measured[name], overheads[name], [o / b for o, b in zip(overheads[name], base, strict=True)])
                for name in CONFIGS]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    base_tokens = rows[0][2]
    print(f"kimik3's CPU per turn (tool functions' CPU taken out), min / median / max of {REPEATS} runs")
    print(f"{'configuration':44s} {'turns':>5s} {'tokens/turn':>12s} {'ratio':>7s} {'CPU ms/turn':>20s} "
          f"{'ratio to baseline':>20s}")
    failed = False
    report = {}
    for name, turns, tokens, over, ratios in rows:
        ratio = tokens / base_tokens
        verdict = ""
        if name in GATED:
            ok = ratio <= 1 + LIMIT
            failed |= not ok
            verdict = "PASS" if ok else "FAIL"
        ms = " ".join(f"{v * 1e3:6.2f}" for v in (min(over), statistics.median(over), max(over)))
        rs = " ".join(f"{v:6.2f}" for v in (min(ratios), statistics.median(ratios), max(ratios)))
        print(f"{name:44s} {turns:5d} {tokens:12.1f} {ratio:7.3f} {ms:>20s} {rs:>20s} {verdict}")
        report[name] = {"turns": turns, "tokens_per_turn": tokens, "token_ratio": ratio,
                        "cpu_ms_per_turn": [round(v * 1e3, 3) for v in over],
                        "cpu_ratio": [round(v, 3) for v in ratios]}
    print(f"gate: each feature alone adds at most {LIMIT:.0%} tokens per turn: {'FAIL' if failed else 'PASS'}")
    print(json.dumps(report))
    if failed:
        raise SystemExit(1)


run: Callable[[], None] = lambda: anyio.run(main)  # noqa: E731

if __name__ == "__main__":
    run()
