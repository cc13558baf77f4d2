"""Synthetic agent tasks over small random sandboxes, for the tiny K3-speaking model.

A *task* is a sandbox (a few small text files), a user request and a scripted policy: a Python
generator that yields assistant steps (reasoning, content, tool calls) and receives the real tool
results. :func:`run_episode` materialises the sandbox in a temporary directory, runs kimik3's real
coding tools (``kimik3.tools.coding.coding_tools``) for every call, and returns the OpenAI-shaped
messages of the whole episode, so tool declarations and tool-result texts are exactly what the
agent will see at run time.

Task kinds (issue "A tiny K3-speaking model", item 2):

- ``first_line``: report the first line of a file (read_file).
- ``grep``: find which file contains a word (grep).
- ``bash``: run a simple command and report its output (bash).
- ``copy_line``: copy the first line of one file into a new file (read_file, then write_file).
- ``two_files``: the first lines of two files at once (two parallel read_file calls).
- ``plain``: a question answered without tools.

Words and file names come from two disjoint pools (``train`` / ``heldout``), so held-out tasks use
names and words the model never saw in training. Everything is a pure function of the seed.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import random
import re
import shutil
import tempfile
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# -- word pools ---------------------------------------------------------------------------------

_ENGLISH = """
apple river garden window silver orange planet forest candle button pillow rocket bridge castle
anchor basket blanket bottle bucket camera carpet cattle cereal cherry circle cloud copper cotton
desert dinner doctor dragon drawer engine falcon feather finger flower folder fossil friend
galaxy ginger guitar hammer harbor helmet honey island jacket jungle kettle kitten ladder lemon
letter lizard magnet marble meadow mirror monkey mountain needle number ocean office paddle
paper parrot pepper pencil pirate pocket potato puzzle rabbit radio rainbow ribbon saddle sailor
salmon shadow shovel signal spider spoon square squirrel stable summer sunset table teapot
ticket tiger tomato tunnel turtle valley velvet violin wagon walnut winter wizard yellow zebra
amber breeze canyon dolphin ember fabric glacier harvest igloo jasmine kernel lantern mango
nectar olive pebble quartz ripple saffron thunder umbrella vapor willow yarn zephyr acorn
bamboo cactus daisy echo fern grove hazel iris juniper kiwi lotus maple nutmeg orchid pine
quill reed sage tulip urchin violet wheat yucca basil cedar dune elm fig gull heron ivy jade
kelp lark moss newt oak plum quail robin swan thyme vine wren badge cable dial fence gear hinge
knob lever mast nozzle oven pulley rivet spring valve wire axle beam bolt clamp drill
"""

_ONSETS = ["b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z",
           "br", "cl", "dr", "fl", "gr", "pl", "st", "tr", "sh", "ch", "th", "sk"]
_VOWELS = ["a", "e", "i", "o", "u", "ai", "ea", "oo", "ou", "y"]
_CODAS = ["", "", "", "n", "r", "l", "s", "t", "m", "k", "x", "nd", "rt", "st"]


def _pseudo_words(rng: random.Random, n: int) -> list[str]:
    out: set[str] = set()
    while len(out) < n:
        k = rng.choice([2, 2, 2, 3])
        w = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS) for _ in range(k))
        if 4 <= len(w) <= 11:
            out.add(w)
    return sorted(out)


@dataclass(frozen=True)
class Pools:
    """Disjoint vocabularies for one split."""

    words: tuple[str, ...]


def make_pools(seed: int = 1234, heldout_fraction: float = 0.15) -> dict[str, Pools]:
    """The ``train`` and ``heldout`` word pools (disjoint; fixed by ``seed``)."""
    rng = random.Random(seed)
    english = sorted(set(_ENGLISH.split()))
    pseudo = [w for w in _pseudo_words(rng, 6000) if w not in english]
    words = english + pseudo
    rng.shuffle(words)
    n_held = int(len(words) * heldout_fraction)
    return {"heldout": Pools(tuple(words[:n_held])), "train": Pools(tuple(words[n_held:]))}


# -- sandboxes ----------------------------------------------------------------------------------

_EXTS = [".txt", ".txt", ".txt", ".md", ".log", ".py", ".csv", ".cfg"]
_DIRS = ["", "", "", "", "docs/", "src/", "data/", "notes/"]


class Ctx:
    """Random choices for one task: the split's words and the sandbox being built."""

    def __init__(self, rng: random.Random, pools: Pools) -> None:
        self.rng = rng
        self.pools = pools
        self.files: dict[str, str] = {}
        self._used: set[str] = set()

    def word(self) -> str:
        for _ in range(100):
            w = self.rng.choice(self.pools.words)
            if w not in self._used:
                self._used.add(w)
                return w
        return self.rng.choice(self.pools.words)

    def filler(self) -> str:
        """A word that may repeat (file content only)."""
        return self.rng.choice(self.pools.words)

    def file_name(self) -> str:
        r = self.rng
        base = self.word()
        if r.random() < 0.25:
            base = f"{base}_{self.word()}"
        elif r.random() < 0.1:
            base = f"{base}{r.randint(1, 99)}"
        ext = r.choice(_EXTS)
        path = r.choice(_DIRS) + base + ext
        return path if path not in self.files else self.file_name()

    def line(self, path: str) -> str:
        r = self.rng
        ext = os.path.splitext(path)[1]
        k = r.randint(2, 7)
        ws = [self.filler() for _ in range(k)]
        if ext == ".py":
            return r.choice(
                [
                    f"# {' '.join(ws)}",
                    f'print("{" ".join(ws[:3])}")',
                    f"{ws[0]} = {r.randint(0, 999)}",
                    f"def {ws[0]}_{ws[1]}():",
                    f"import {ws[0]}",
                ]
            )
        if ext == ".csv":
            return ",".join(ws[:4]) if r.random() < 0.6 else ",".join([ws[0], str(r.randint(0, 9999))])
        if ext == ".cfg":
            return f"{ws[0]} = {r.choice([str(r.randint(0, 65535)), ws[1], 'true', 'false'])}"
        if ext == ".md" and r.random() < 0.4:
            return f"# {' '.join(ws[:3]).capitalize()}"
        if ext == ".log":
            return f"{r.choice(['INFO', 'WARN', 'ERROR', 'DEBUG'])} {' '.join(ws)}"
        text = " ".join(ws)
        roll = r.random()
        if roll < 0.3:
            text = text.capitalize() + "."
        elif roll < 0.4:
            text = f"{text} {r.randint(0, 9999)}"
        elif roll < 0.45:
            text = f"TODO: {text}"
        return text

    def add_file(self, path: str | None = None, n_lines: int | None = None) -> str:
        path = path or self.file_name()
        n = n_lines if n_lines is not None else self.rng.randint(1, 6)
        self.files[path] = "".join(self.line(path) + "\n" for _ in range(n))
        return path

    def fill(self, n: int | None = None) -> None:
        for _ in range(n if n is not None else self.rng.randint(2, 5)):
            self.add_file()

    def pick(self) -> str:
        return self.rng.choice(sorted(self.files))


# -- steps and scripts --------------------------------------------------------------------------


@dataclass
class Call:
    name: str
    arguments: dict[str, Any]


@dataclass
class Step:
    """One assistant turn: reasoning, visible content and tool calls (none = final answer)."""

    reasoning: str
    content: str = ""
    calls: list[Call] = field(default_factory=list)


Script = Generator[Step, list[str], None]
"""A policy: yields steps, receives the tool-result texts of the step's calls (in call order)."""


@dataclass
class Task:
    """A user request, its scripted solution and how to check it."""

    kind: str
    prompt: str
    script: Callable[[], Script]
    goal: dict[str, Any]  # {"answer_contains": [...]} and/or {"files": {path: content}}
    first_calls: list[Call]  # the calls of the first assistant turn (the held-out target)


def _q(rng: random.Random, options: Sequence[str], **kw: str) -> str:
    return rng.choice(options).format(**kw)


def task_first_line(c: Ctx) -> Task:
    c.fill()
    if c.rng.random() < 0.08:
        return _missing_file(c)
    path = c.pick()
    line = c.files[path].splitlines()[0]
    prompt = _q(
        c.rng,
        [
            "What is the first line of {p}?",
            "Tell me the first line of {p}.",
            "Show me the first line in {p}.",
            "Read {p} and report its first line.",
            "what's the first line of {p}",
            "Print the first line of the file {p}.",
        ],
        p=path,
    )
    calls = [Call("read_file", {"path": path})]

    def script() -> Script:
        (out,) = yield Step(f"The user wants the first line of {path}. I will read the file.", "", calls)
        assert line in out, (path, line, out)
        yield Step(
            f"The first line of {path} is: {line}",
            f"The first line of {path} is:\n{line}",
        )

    return Task("first_line", prompt, script, {"answer_contains": [line]}, calls)


def _missing_file(c: Ctx) -> Task:
    path = c.file_name()  # not created
    prompt = _q(c.rng, ["What is the first line of {p}?", "Tell me the first line of {p}."], p=path)
    calls = [Call("read_file", {"path": path})]

    def script() -> Script:
        (out,) = yield Step(f"The user wants the first line of {path}. I will read the file.", "", calls)
        assert out.startswith("Error:"), out
        yield Step(
            f"Reading {path} failed: the file does not exist.",
            f"I could not read {path}: the file does not exist in the workspace.",
        )

    return Task("first_line", prompt, script, {"answer_contains": ["does not exist"]}, calls)


def task_grep(c: Ctx) -> Task:
    c.fill(c.rng.randint(1, 4))
    target = c.add_file()  # a new file, so earlier tasks on the same sandbox keep their files
    w = c.word()
    lines = c.files[target].splitlines()
    i = c.rng.randrange(len(lines))
    ws = lines[i].split(" ")
    ws.insert(c.rng.randint(0, len(ws)), w)
    lines[i] = " ".join(ws)
    c.files[target] = "".join(x + "\n" for x in lines)
    prompt = _q(
        c.rng,
        [
            "Which file contains the word {w}?",
            "Find the file that mentions {w}.",
            "In which file does {w} appear?",
            "Search the workspace for {w} and tell me which file has it.",
            "where is {w} mentioned",
        ],
        w=w,
    )
    calls = [Call("grep", {"pattern": w})]

    def script() -> Script:
        (out,) = yield Step(f"The user wants the file that contains {w}. I will search for it with grep.", "", calls)
        assert target in out, (target, w, out)
        yield Step(
            f"The search found {w} in {target}.",
            f"The word {w} appears in {target}.",
        )

    return Task("grep", prompt, script, {"answer_contains": [target]}, calls)


def _bash_command(c: Ctx) -> tuple[str, str]:
    """A simple command and a short phrase describing it."""
    r = c.rng
    kind = r.choice(["echo", "wc", "ls", "python", "head", "cat", "echo"])
    if kind == "echo":
        return f"echo {' '.join(c.filler() for _ in range(r.randint(1, 4)))}", "print some words"
    if kind == "wc":
        return f"wc -l {c.pick()}", "count the lines"
    if kind == "ls":
        d = sorted({p.split("/")[0] + "/" for p in c.files if "/" in p})
        if d and r.random() < 0.4:
            return f"ls {r.choice(d)}", "list a directory"
        return "ls", "list the files"
    if kind == "python":
        a, b = r.randint(0, 999), r.randint(1, 99)
        op = r.choice(["+", "-", "*"])
        return f"python3 -c 'print({a} {op} {b})'", "compute a number"
    if kind == "head":
        return f"head -n {r.randint(1, 2)} {c.pick()}", "show the first lines"
    return f"cat {c.pick()}", "show a file"


def task_bash(c: Ctx) -> Task:
    c.fill()
    cmd, _ = _bash_command(c)
    prompt = _q(
        c.rng,
        [
            "Run `{cmd}` and tell me the output.",
            "What does `{cmd}` print?",
            "Please run {cmd} and report what it prints.",
            "Execute `{cmd}`.",
            "run {cmd}",
        ],
        cmd=cmd,
    )
    calls = [Call("bash", {"command": cmd})]
    goal: dict[str, Any] = {"answer_contains": []}  # the output, filled in when the command runs

    def script() -> Script:
        (out,) = yield Step(f"The user wants the output of {cmd}. I will run it.", "", calls)
        text, code = bash_output(out)
        text = text.strip("\n")
        assert code == 0 and text, out
        goal["answer_contains"].append(text)
        content = f"The command printed:\n{text}" if "\n" in text else f"The command printed: {text}"
        yield Step(f"The command finished with exit code {code}. I will report its output.", content)

    return Task("bash", prompt, script, goal, calls)


def task_copy_line(c: Ctx) -> Task:
    c.fill()
    src = c.pick()
    dst = c.file_name()
    line = c.files[src].splitlines()[0]
    prompt = _q(
        c.rng,
        [
            "Copy the first line of {s} into a new file {d}.",
            "Write the first line of {s} to {d}.",
            "Create {d} containing the first line of {s}.",
            "Put the first line of {s} in {d}.",
        ],
        s=src,
        d=dst,
    )
    calls = [Call("read_file", {"path": src})]

    def script() -> Script:
        (out,) = yield Step(
            f"The user wants the first line of {src} copied into {dst}. First I will read {src}.", "", calls
        )
        assert line in out
        yield Step(
            f"The first line of {src} is: {line}\nNow I will write it to {dst}.",
            "",
            [Call("write_file", {"path": dst, "content": line + "\n"})],
        )
        yield Step(
            f"I wrote the line to {dst}.",
            f"Done: {dst} now contains the first line of {src}:\n{line}",
        )

    return Task("copy_line", prompt, script, {"files": {dst: line + "\n"}}, calls)


def task_two_files(c: Ctx) -> Task:
    c.fill(c.rng.randint(2, 5))
    a, b = c.rng.sample(sorted(c.files), 2)
    la, lb = c.files[a].splitlines()[0], c.files[b].splitlines()[0]
    prompt = _q(
        c.rng,
        [
            "Read {a} and {b} and tell me the first line of each.",
            "What are the first lines of {a} and {b}?",
            "Show me the first line of {a} and the first line of {b}.",
            "first lines of {a} and {b}?",
        ],
        a=a,
        b=b,
    )
    calls = [Call("read_file", {"path": a}), Call("read_file", {"path": b})]

    def script() -> Script:
        out_a, out_b = yield Step(
            f"The user wants the first lines of {a} and {b}. I will read both files at once.", "", calls
        )
        assert la in out_a and lb in out_b
        yield Step(
            f"The first line of {a} is: {la}\nThe first line of {b} is: {lb}",
            f"{a}: {la}\n{b}: {lb}",
        )

    return Task("two_files", prompt, script, {"answer_contains": [la, lb]}, calls)


def task_plain(c: Ctx) -> Task:
    r = c.rng
    kind = r.choice(["add", "add", "greet", "repeat", "hello", "sub"])
    if kind in ("add", "sub"):
        a, b = r.randint(0, 20), r.randint(0, 9)
        if kind == "add":
            ans = str(a + b)
            prompt = r.choice([f"What is {a} plus {b}?", f"What is {a} + {b}?", f"Compute {a}+{b}."])
            reasoning = f"This is simple arithmetic: {a} + {b} = {ans}. No tools are needed."
        else:
            ans = str(a - b)
            prompt = r.choice([f"What is {a} minus {b}?", f"What is {a} - {b}?"])
            reasoning = f"This is simple arithmetic: {a} - {b} = {ans}. No tools are needed."
        content = ans
    elif kind == "greet":
        name = c.word().capitalize()
        prompt = r.choice([f"Say hello to {name}.", f"Greet {name}.", f"Please greet {name}."])
        reasoning = f"The user wants me to greet {name}. No tools are needed."
        content = ans = f"Hello, {name}!"
    elif kind == "repeat":
        words = " ".join(c.filler() for _ in range(r.randint(1, 4)))
        prompt = r.choice([f"Repeat after me: {words}", f"Say exactly this: {words}"])
        reasoning = "The user wants me to repeat some words. No tools are needed."
        content = ans = words
    else:
        prompt = r.choice(["Hello!", "Hi", "hello", "Hi there!", "Who are you?", "What can you do?"])
        reasoning = "The user is greeting me. No tools are needed."
        content = "Hello! I am a coding agent. I can read, write and search files in this workspace and run commands."
        ans = "Hello"
    c.fill()  # a workspace exists even when it is not needed

    def script() -> Script:
        yield Step(reasoning, content)

    return Task("plain", prompt, script, {"answer_contains": [ans]}, [])


TASKS: dict[str, Callable[[Ctx], Task]] = {
    "first_line": task_first_line,
    "grep": task_grep,
    "bash": task_bash,
    "copy_line": task_copy_line,
    "two_files": task_two_files,
    "plain": task_plain,
}
WEIGHTS = {"first_line": 3, "grep": 3, "bash": 3, "copy_line": 2, "two_files": 2, "plain": 1.5}


# -- running episodes with the real tools ------------------------------------------------------


@dataclass
class Episode:
    kind: list[str]  # kinds of the tasks, in order
    messages: list[dict[str, Any]]
    thinking: bool
    effort: str | None
    goals: list[dict[str, Any]]
    files: dict[str, str]  # the sandbox before the run
    first_calls: list[dict[str, Any]]  # calls of the first assistant turn of the LAST task


def _load_tools(root: Path) -> Any:
    from kimik3.tools.coding import coding_tools

    return coding_tools(root)


def tool_specs(root: Path | None = None) -> list[dict[str, Any]]:
    """The coding tools' declarations as OpenAI dicts (what the prompt header renders)."""
    with tempfile.TemporaryDirectory() as tmp:
        tools = _load_tools(Path(root or tmp))
        return [t.spec.model_dump(mode="json", exclude_none=True) for t in tools]


async def _run_call(tools: dict[str, Any], call: Call) -> str:
    result = await tools[call.name].run(dict(call.arguments))
    text = getattr(result, "text", None)
    if callable(text):
        text = text()
    if text is None:
        text = result.content
    assert isinstance(text, str), type(text)
    return text


_EXIT_LINE = re.compile(r"\[exit code: (\d+), \d+\.\d\d s\]\Z")
_WORKSPACE: tuple[Path, dict[str, Any]] | None = None


def _workspace() -> tuple[Path, dict[str, Any]]:
    """One workspace directory and its tools per process (building the tools is the slow part)."""
    global _WORKSPACE
    if _WORKSPACE is None:
        root = Path(tempfile.mkdtemp(prefix="k3tiny_"))
        atexit.register(shutil.rmtree, root, True)
        _WORKSPACE = (root, {t.spec.function.name: t for t in _load_tools(root)})
    return _WORKSPACE


def bash_output(tool_text: str) -> tuple[str, int | None]:
    """(printed output, exit code) from the bash tool's result text, whose last line is
    ``[exit code: N, S s]`` (kimik3.tools.coding ``bash``)."""
    head, _, last = tool_text.rpartition("\n")
    m = _EXIT_LINE.match(last)
    if m is None:
        return tool_text, None
    return head, int(m.group(1))


def run_episode(
    tasks: list[Task],
    files: dict[str, str],
    *,
    system: str,
    thinking: bool,
    effort: str | None,
    rng: random.Random,
) -> Episode:
    """Run the scripted tasks in order against a fresh sandbox with kimik3's real coding tools.

    The one thing not taken verbatim from the tools is the wall-clock time in bash's last line
    (``[exit code: 0, 0.01 s]``): it is redrawn from ``rng`` so episodes are reproducible.
    """
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
    n_calls = 0
    first_calls: list[dict[str, Any]] = []
    root, tools = _workspace()
    for child in root.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()
    for path, text in files.items():
        p = root / path
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    loop = asyncio.new_event_loop()
    try:
        for task in tasks:
            messages.append({"role": "user", "content": task.prompt})
            gen = task.script()
            step = next(gen)
            first = True
            while True:
                msg: dict[str, Any] = {"role": "assistant", "content": step.content}
                if thinking:
                    msg["reasoning_content"] = step.reasoning
                if first:
                    first_calls = [{"name": c.name, "arguments": c.arguments} for c in step.calls]
                    first = False
                if not step.calls:
                    messages.append(msg)
                    break
                ids = []
                for _ in step.calls:
                    n_calls += 1
                    ids.append(f"call_{n_calls}")
                msg["tool_calls"] = [
                    {
                        "id": i,
                        "type": "function",
                        "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)},
                    }
                    for i, c in zip(ids, step.calls, strict=True)
                ]
                messages.append(msg)
                outs = [loop.run_until_complete(_run_call(tools, c)) for c in step.calls]
                for k, c in enumerate(step.calls):
                    if c.name == "bash":
                        out, code = bash_output(outs[k])
                        assert code is not None, outs[k]
                        secs = rng.choice([0.0, 0.0, 0.01, 0.01, 0.01, 0.02, 0.03, 0.05])
                        outs[k] = (out + "\n" if out else "") + f"[exit code: {code}, {secs:.2f} s]"
                for i, c, out in zip(ids, step.calls, outs, strict=True):
                    messages.append({"role": "tool", "tool_call_id": i, "name": c.name, "content": out})
                try:
                    step = gen.send(outs)
                except StopIteration:
                    raise AssertionError(f"{task.kind}: script ended after tool calls") from None
            for path, text in task.goal.get("files", {}).items():
                got = (root / path).read_text(encoding="utf-8")
                assert got == text, (path, got, text)
    finally:
        loop.close()
    return Episode(
        kind=[t.kind for t in tasks],
        messages=messages,
        thinking=thinking,
        effort=effort,
        goals=[t.goal for t in tasks],
        files=dict(files),
        first_calls=first_calls,
    )


def sample_settings(rng: random.Random) -> tuple[bool, str | None]:
    """Thinking on/off and effort: mostly what kimik3's Agent sends (thinking on, effort max)."""
    r = rng.random()
    if r < 0.70:
        return True, "max"
    if r < 0.78:
        return True, "high"
    if r < 0.86:
        return True, "low"
    if r < 0.90:
        return True, None
    return False, None


def sample_episode(rng: random.Random, pools: Pools, *, system: str, kinds: Sequence[str] | None = None,
                   multi_turn: float = 0.15, settings: tuple[bool, str | None] | None = None) -> Episode:
    """One random episode (one task, or two on the same sandbox with probability ``multi_turn``)."""
    names = list(kinds or TASKS)
    weights = [WEIGHTS[k] for k in names]
    c = Ctx(rng, pools)
    n = 2 if rng.random() < multi_turn else 1
    tasks = [TASKS[rng.choices(names, weights)[0]](c) for _ in range(n)]
    # the second task's sandbox edits (e.g. grep's inserted word) happen before the run: freeze now
    thinking, effort = settings or sample_settings(rng)
    return run_episode(tasks, dict(c.files), system=system, thinking=thinking, effort=effort, rng=rng)
