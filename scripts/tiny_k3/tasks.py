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

Data v2: words, identifiers and whole lines come from real text (``textpool.py``: Python's
standard library, licence texts, /usr/share/doc) mixed with generated ones (pseudo-words, numbers,
key = value, JSON, CSV and log lines, random strings); file names are common ones (notes.txt,
main.py, Makefile, ...) or built from the pools (dashes, underscores, digits, nested directories),
so the model has to copy names and contents rather than recall them. The pools come in two
disjoint splits (``train`` / ``heldout``: words and identifiers split by word, lines by source
file), so held-out tasks use words, generated names and lines never seen in training; the names
and lines of examples/sample_workspace are kept out of training. Everything is a pure function of
the seed (and of the pools file).
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import random
import re
import shutil
import string
import tempfile
import uuid
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# -- word and line pools ------------------------------------------------------------------------
#
# v2: words, identifiers and whole lines come from real text (``textpool.py``: Python's standard
# library, licence texts, /usr/share/doc), mixed with v1's English nouns and pseudo-words and with
# generated lines (key = value, JSON, CSV, log lines, random strings, numbers), so that file names
# and contents cannot be memorised: the model has to copy them.

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


def pseudo_words(seed: int = 1234) -> list[str]:
    """v1's English nouns and generated pseudo-words (added to the harvested words)."""
    return sorted(set(_ENGLISH.split()) | set(_pseudo_words(random.Random(seed), 6000)))


# Common, realistic file names: in both splits (the held-out split also has generated names made
# of held-out words, never seen in training). examples/sample_workspace's paths are left out of
# training (textpool's "forbidden" paths).
COMMON_NAMES = """
notes.txt notes.md README.md README readme.txt main.py hello.py utils.py helpers.py app.py cli.py
server.py client.py config.py settings.py models.py views.py tests.py test_main.py test_utils.py
conftest.py setup.py __init__.py __main__.py server.cfg setup.cfg app.cfg config.cfg config.json
package.json settings.json data.json config.yaml config.yml docker-compose.yml pyproject.toml
Cargo.toml config.toml settings.ini app.ini todo.md TODO.md TODO todo.txt CHANGELOG.md CHANGES.txt
LICENSE NOTICE AUTHORS Makefile Dockerfile Procfile Gemfile requirements.txt data.csv users.csv
results.csv scores.csv app.log server.log error.log errors.log build.log output.txt out.txt log.txt
run.sh build.sh install.sh deploy.sh test.sh index.html style.css main.js app.js index.js main.ts
main.go main.rs lib.rs main.c util.h schema.sql query.sql report.txt report.md summary.md plan.md
ideas.txt draft.txt letter.txt list.txt words.txt names.txt input.txt version.txt hosts.txt
CONTRIBUTING.md INSTALL.md guide.md api.md design.md notes-2024.md meeting_notes.md todo-list.txt
"""
COMMON_DIRS = ["docs/", "src/", "tests/", "lib/", "data/", "config/", "scripts/", "notes/", "app/",
               "examples/", "logs/", "build/", "src/app/", "docs/api/", "tools/", "bin/", "web/", "pkg/"]
_EXTS = [".txt", ".txt", ".md", ".md", ".py", ".py", ".log", ".csv", ".cfg", ".json", ".yaml", ".yml",
         ".toml", ".ini", ".conf", ".sh", ".js", ".ts", ".go", ".rs", ".c", ".h", ".html", ".css", ".sql",
         ".rst", ".env", ".xml", ".dat", ".out", ""]
_EXT_KIND = {".py": "py", ".md": "md", ".rst": "md", ".txt": "txt", "": "txt", ".dat": "txt", ".out": "txt",
             ".cfg": "cfg", ".ini": "cfg", ".conf": "cfg", ".toml": "cfg", ".env": "env", ".yaml": "yaml",
             ".yml": "yaml", ".json": "json", ".csv": "csv", ".log": "log", ".sh": "sh", ".js": "code",
             ".ts": "code", ".go": "code", ".rs": "code", ".c": "code", ".h": "code", ".css": "code",
             ".sql": "code", ".html": "txt", ".xml": "txt"}
_SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_SAFE_WORD = re.compile(r"[A-Za-z0-9_]+")


@dataclass(frozen=True)
class Pools:
    """The vocabulary of one split (train and heldout are disjoint in words, identifiers and lines)."""

    words: tuple[str, ...]  # plain words (real English words, v1's nouns and pseudo-words)
    idents: tuple[str, ...]  # identifiers from Python sources
    code: tuple[str, ...]  # whole lines of code
    comment: tuple[str, ...]  # comment lines ("# ...")
    prose: tuple[str, ...]  # docstring, licence and documentation lines
    names: tuple[str, ...]  # common file names
    forbidden_paths: frozenset[str] = frozenset()  # never generated (training: the README demo's)
    forbidden_lines: frozenset[str] = frozenset()


_POOLS_FILE = Path(__file__).resolve().parents[2] / ".cache" / "tiny_k3" / "pools.json"


def make_pools(path: Path | None = None) -> dict[str, Pools]:
    """The ``train`` and ``heldout`` pools, from ``textpool.py``'s file (built when missing)."""
    path = path or _POOLS_FILE
    if not path.exists():
        import textpool

        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(textpool.build(pseudo=pseudo_words()), ensure_ascii=False) + "\n")
    d = json.loads(path.read_text(encoding="utf-8"))
    bad_paths = frozenset(d["forbidden"]["paths"])
    bad_lines = frozenset(d["forbidden"]["lines"])
    names = sorted(set(COMMON_NAMES.split()))
    out = {}
    for split in ("train", "heldout"):
        p = d[split]
        out[split] = Pools(
            words=tuple(p["words"]), idents=tuple(p["idents"]), code=tuple(p["code"]),
            comment=tuple(p["comment"]), prose=tuple(p["prose"]),
            names=tuple(n for n in names if split == "heldout" or n not in bad_paths),
            forbidden_paths=bad_paths if split == "train" else frozenset(),
            forbidden_lines=bad_lines if split == "train" else frozenset(),
        )
    return out


# -- sandboxes ----------------------------------------------------------------------------------

_PUNCT = ".,;:!?-_/()[]{}'\"@#$%&*+=~^`|\\<>"
_LEVELS = ["INFO", "WARN", "WARNING", "ERROR", "DEBUG", "TRACE", "FATAL", "info", "error", "warn"]


class Ctx:
    """Random choices for one task: the split's pools and the sandbox being built.

    ``realistic``: common file names and harvested lines only (no generated noise);
    ``fixed``: the sandbox is given (e.g. examples/sample_workspace) and ``fill`` adds nothing.
    """

    def __init__(self, rng: random.Random, pools: Pools, *, realistic: bool = False,
                 files: dict[str, str] | None = None) -> None:
        self.rng = rng
        self.pools = pools
        self.realistic = realistic
        self.fixed = files is not None
        self.files: dict[str, str] = dict(files or {})
        self._used: set[str] = set()

    # words
    def _any_word(self) -> str:
        r = self.rng
        p = self.pools
        w = r.choice(p.idents) if r.random() < 0.3 else r.choice(p.words)
        roll = r.random()
        if roll < 0.08:
            w = w.upper()
        elif roll < 0.2:
            w = w.capitalize()
        return w

    def word(self) -> str:
        """A fresh regex- and shell-safe word ([A-Za-z0-9_]+, at least 3 characters)."""
        for _ in range(100):
            w = self._any_word()
            if w not in self._used and len(w) >= 3 and _SAFE_WORD.fullmatch(w):
                self._used.add(w)
                return w
        return self.rng.choice(self.pools.words)

    def filler(self) -> str:
        """A word that may repeat (file content only)."""
        return self._any_word()

    def number(self) -> str:
        r = self.rng
        roll = r.random()
        if roll < 0.45:
            return str(r.randint(0, 99999) if r.random() < 0.5 else r.randint(0, 99))
        if roll < 0.6:
            return f"{r.uniform(0, 1000):.{r.randint(1, 3)}f}"
        if roll < 0.7:
            return f"{r.randint(0, 9)}.{r.randint(0, 30)}.{r.randint(0, 20)}"
        if roll < 0.8:
            return f"{r.randint(1990, 2030)}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}"
        if roll < 0.9:
            return f"-{r.randint(1, 999)}"
        return "0x" + "".join(r.choice("0123456789abcdef") for _ in range(r.randint(2, 8)))

    def value(self) -> str:
        r = self.rng
        roll = r.random()
        if roll < 0.35:
            return self.number()
        if roll < 0.55:
            return self.filler()
        if roll < 0.65:
            return r.choice(["true", "false", "yes", "no", "on", "off", "none", "null", "True", "False"])
        if roll < 0.75:
            return "/".join(["", *[self.filler().lower() for _ in range(r.randint(1, 3))]])
        if roll < 0.82:
            return f"{r.choice(['http', 'https'])}://{self.filler().lower()}.{r.choice(['com', 'org', 'io', 'net'])}" \
                   f"{r.choice(['', '/' + self.filler().lower(), ':' + str(r.randint(1, 65535))])}"
        if roll < 0.88:
            return f"{r.randint(0, 255)}.{r.randint(0, 255)}.{r.randint(0, 255)}.{r.randint(0, 255)}"
        return " ".join(self.filler() for _ in range(r.randint(2, 4)))

    def key(self) -> str:
        r = self.rng
        k = r.choice(self.pools.idents) if r.random() < 0.5 else r.choice(self.pools.words)
        if r.random() < 0.3:
            k = f"{k}_{r.choice(self.pools.words)}"
        return k.lower() if r.random() < 0.7 else k

    def wild(self) -> str:
        """Arbitrary text: random characters, hashes, ids, mixed-case words with punctuation."""
        r = self.rng
        roll = r.random()
        if roll < 0.3:
            alphabet = string.ascii_letters + string.digits + (_PUNCT if r.random() < 0.6 else "") + "  "
            s = "".join(r.choice(alphabet) for _ in range(r.randint(3, 40)))
        elif roll < 0.4:
            s = "".join(r.choice("0123456789abcdef") for _ in range(r.choice([7, 8, 12, 16, 32, 40])))
        elif roll < 0.47:
            s = str(uuid.UUID(int=r.getrandbits(128)))
        elif roll < 0.6:
            s = " ".join(self.number() for _ in range(r.randint(1, 6)))
        else:
            parts = []
            for _ in range(r.randint(1, 6)):
                w = self.filler()
                if r.random() < 0.3:
                    w += r.choice(_PUNCT)
                if r.random() < 0.15:
                    w = r.choice(_PUNCT) + w
                parts.append(w)
            s = r.choice([" ", " ", " ", "-", "_", ", ", "/", ".", ""]).join(parts)
        s = s.strip()[:56]
        return s if s and "<|" not in s and "|>" not in s else self.filler()

    def sentence(self) -> str:
        r = self.rng
        ws = [self.filler() for _ in range(r.randint(2, 8))]
        text = " ".join(ws)
        roll = r.random()
        if roll < 0.35:
            text = text[0].upper() + text[1:] + r.choice([".", ".", "!", "?", ":", ""])
        elif roll < 0.45:
            text = f"{text} {self.number()}"
        elif roll < 0.5:
            text = f"{r.choice(['TODO', 'FIXME', 'NOTE', 'Todo', 'todo'])}: {text}"
        return text[:56].strip()

    # file names
    def _base(self) -> str:
        r = self.rng
        parts = [self.word() for _ in range(1 if r.random() < 0.6 else r.randint(2, 3))]
        roll = r.random()
        if roll < 0.45:
            base = "_".join(p.lower() for p in parts)
        elif roll < 0.7:
            base = "-".join(p.lower() for p in parts)
        elif roll < 0.8:
            base = parts[0].lower() + "".join(p.capitalize() for p in parts[1:])
        elif roll < 0.9:
            base = "".join(p.capitalize() for p in parts)
        else:
            base = "".join(p.lower() for p in parts)
        if r.random() < 0.15:
            base += r.choice(["", "_", "-"]) + str(r.randint(0, 2025) if r.random() < 0.3 else r.randint(1, 99))
        return base[:40]

    def _dir(self) -> str:
        r = self.rng
        roll = r.random()
        if roll < 0.55:
            return ""
        if roll < 0.8:
            return r.choice(COMMON_DIRS)
        if self.realistic:
            return r.choice(COMMON_DIRS)
        return "".join(self.word().lower() + "/" for _ in range(r.randint(1, 3)))

    def file_name(self) -> str:
        r = self.rng
        for _ in range(100):
            if self.realistic or r.random() < 0.35:
                name = r.choice(self.pools.names)
                path = (self._dir() if r.random() < 0.4 else "") + name
            else:
                path = self._dir() + self._base() + r.choice(_EXTS)
            if (path not in self.files and path not in self.pools.forbidden_paths
                    and all(_SAFE_NAME.fullmatch(part) for part in path.split("/"))
                    and not any(f.startswith(path + "/") or path.startswith(f + "/") for f in self.files)):
                return path
        raise AssertionError("no file name")

    # file contents
    def _pool_line(self, kind: str) -> str:
        return self.rng.choice(getattr(self.pools, kind))

    def _line(self, path: str) -> str:
        r = self.rng
        name = path.rsplit("/", 1)[-1]
        ext = os.path.splitext(name)[1]
        kind = _EXT_KIND.get(ext, "txt")
        if not self.realistic and r.random() < 0.12:
            return self.wild()
        if kind == "py":
            roll = r.random()
            if roll < 0.55:
                return self._pool_line("code")
            if roll < 0.7:
                return self._pool_line("comment")
            ws = [self.filler() for _ in range(4)]
            k = self.key()
            return r.choice([
                f"# {self.sentence()}",
                f'print("{self.sentence()}")',
                f"{k} = {self.value() if r.random() < 0.5 else repr(self.filler())}",
                f"def {k}({', '.join(w.lower() for w in ws[:r.randint(0, 3)] if _SAFE_WORD.fullmatch(w))}):",
                f"import {self.key()}",
                f"from {self.key()} import {ws[0]}",
                f"class {ws[0].capitalize()}:",
                f"return {self.value()}",
            ])
        if kind == "md":
            roll = r.random()
            if roll < 0.25:
                title = self._pool_line("prose") if r.random() < 0.4 else self.sentence()
                return f"{r.choice(['#', '#', '##', '###'])} {title}"[:60]
            if roll < 0.45:
                return f"{r.choice(['-', '-', '*', '1.', '- [ ]', '- [x]'])} {self.sentence() if r.random() < 0.6 else self.filler()}"
            return self._pool_line("prose") if r.random() < 0.7 else self.sentence()
        if kind in ("cfg", "env", "yaml"):
            roll = r.random()
            if kind == "cfg" and roll < 0.12:
                return f"[{self.key()}]"
            if kind == "yaml" and roll < 0.15:
                return f"- {self.value()}"
            if kind == "env":
                return f"{self.key().upper()}={self.value().replace(' ', '_')}"
            sep = " = " if kind == "cfg" and r.random() < 0.8 else ": " if kind == "yaml" or r.random() < 0.5 else "="
            return f"{self.key()}{sep}{self.value()}"
        if kind == "json":
            if r.random() < 0.5:
                items = [f'"{self.key()}": {self._json_value()}' for _ in range(r.randint(1, 3))]
                return "{" + ", ".join(items) + "}"
            return f'"{self.key()}": {self._json_value()}{r.choice([",", ",", ""])}'
        if kind == "csv":
            return ",".join(self.number() if r.random() < 0.35 else self.filler() for _ in range(r.randint(2, 5)))
        if kind == "log":
            ts = f"{r.randint(2019, 2026)}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d} " \
                 f"{r.randint(0, 23):02d}:{r.randint(0, 59):02d}:{r.randint(0, 59):02d}"
            msg = self.sentence() if r.random() < 0.6 else self._pool_line("prose")
            return r.choice([f"{ts} {r.choice(_LEVELS)} {msg}", f"[{r.choice(_LEVELS)}] {msg}",
                             f"{r.choice(_LEVELS)} {msg}", f"{ts} [{self.key()}] {msg}"])[:64]
        if kind == "sh":
            return r.choice([
                "#!/bin/sh", "#!/bin/bash", "set -e", f"echo {self.filler()}", f"export {self.key().upper()}={self.number()}",
                f"cd {self.filler().lower()}", f"# {self.sentence()}", f"{self.key()} --{self.filler().lower()}",
            ])
        if kind == "code":
            if r.random() < 0.5:
                return self._pool_line("code")
            k = self.key()
            return r.choice([
                f"const {k} = {self.value() if r.random() < 0.5 else repr(self.filler())};", f"let {k} = {self.number()};",
                f"func {k}() {{", f"fn {k}() {{", f"// {self.sentence()}", f"int {k} = {self.number()};",
                f"SELECT * FROM {k};", f".{k} {{ color: {self.filler().lower()}; }}", f"return {k};",
            ])
        # txt, README, LICENSE, Makefile, ...
        roll = r.random()
        if roll < 0.5:
            return self._pool_line("prose")
        if roll < 0.8 or self.realistic:
            return self.sentence()
        return f"{self.key()}: {self.value()}"

    def _json_value(self) -> str:
        v = self.value()
        if re.fullmatch(r"-?\d+(\.\d+)?", v) or v in ("true", "false", "null"):
            return v
        return json.dumps(v)

    def line(self, path: str) -> str:
        for _ in range(20):
            s = self._line(path).strip()
            if s and len(s) <= 64 and "<|" not in s and "|>" not in s and "\t" not in s \
                    and s not in self.pools.forbidden_lines:
                return s
        return self.filler()

    def add_file(self, path: str | None = None, n_lines: int | None = None) -> str:
        path = path or self.file_name()
        n = n_lines if n_lines is not None else self.rng.randint(1, 6)
        lines = [self.line(path) for _ in range(n)]
        if path.endswith(".py"):  # later lines of code may be indented
            lines = [x if k == 0 or self.rng.random() < 0.6 else "    " + x for k, x in enumerate(lines)]
        self.files[path] = "".join(x + "\n" for x in lines)
        return path

    def fill(self, n: int | None = None) -> None:
        if self.fixed:
            return
        for _ in range(n if n is not None else self.rng.randint(2, 5)):
            self.add_file()

    def pick(self) -> str:
        return self.rng.choice(sorted(self.files))

    def first_line(self, path: str) -> str:
        return self.files[path].splitlines()[0]


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


def _unique_words(c: Ctx, target: str) -> list[str]:
    """Words of ``target`` (regex-safe, 3+ characters) that no other file contains."""
    others = [t for p, t in c.files.items() if p != target]
    return sorted({w for w in _SAFE_WORD.findall(c.files[target])
                   if len(w) >= 4 and not w.isdigit() and not any(w in o for o in others)})


def task_grep(c: Ctx) -> Task:
    w = ""
    if c.fixed or c.rng.random() < 0.35:  # a word already in one file only
        c.fill(c.rng.randint(2, 5))
        for target in c.rng.sample(sorted(c.files), len(c.files)):
            found = _unique_words(c, target)
            if found:
                w = c.rng.choice(found)
                break
    if not w:
        c.fill(c.rng.randint(1, 4))
        target = c.add_file()  # a new file, so earlier tasks on the same sandbox keep their files
        for _ in range(100):
            w = c.word()
            if not any(w in t for t in c.files.values()):
                break
        lines = c.files[target].splitlines()
        i = c.rng.randrange(len(lines))
        ws = lines[i].split(" ")
        ws.insert(c.rng.randint(0, len(ws)), w)
        lines[i] = " ".join(ws)
        c.files[target] = "".join(x + "\n" for x in lines)
        assert not any(w in t for p, t in c.files.items() if p != target), w
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
        assert target in out and all(line.startswith(target + ":") for line in out.splitlines()), (target, w, out)
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
        if r.random() < 0.4:
            for _ in range(20):
                text = r.choice([c.sentence(), c.wild(), c._pool_line("prose")])
                if "'" not in text and "\\" not in text and not text.startswith("-"):
                    return f"echo '{text}'", "print some text"
        return f"echo {' '.join(c.word() for _ in range(r.randint(1, 4)))}", "print some words"
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
    if c.rng.random() < 0.2:  # copy.cfg, notes_copy.txt, ...
        stem, ext = os.path.splitext(src.rsplit("/", 1)[-1])
        for cand in (c.rng.choice(["copy", "copy2", f"{stem}_copy", f"{stem}-copy", f"{stem}.bak", "backup"]) + ext,):
            if cand not in c.files and cand not in c.pools.forbidden_paths and _SAFE_NAME.fullmatch(cand):
                dst = cand
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
    if kind in ("add", "sub"):  # single digits: v1's two-digit sums were too hard for 12M parameters
        a, b = r.randint(0, 9), r.randint(0, 9)
        if kind == "add":
            ans = str(a + b)
            prompt = r.choice([f"What is {a} plus {b}?", f"What is {a} + {b}?", f"Compute {a}+{b}.", f"{a}+{b}=?"])
            reasoning = f"This is simple arithmetic: {a} + {b} = {ans}. No tools are needed."
        else:
            a, b = max(a, b), min(a, b)
            ans = str(a - b)
            prompt = r.choice([f"What is {a} minus {b}?", f"What is {a} - {b}?", f"Compute {a}-{b}."])
            reasoning = f"This is simple arithmetic: {a} - {b} = {ans}. No tools are needed."
        content = ans
    elif kind == "greet":
        ws = [c.word() for _ in range(1 if r.random() < 0.75 else 2)]
        name = " ".join(w if w[:1].isupper() else w.capitalize() for w in ws)
        prompt = r.choice([f"Say hello to {name}.", f"Greet {name}.", f"Please greet {name}.", f"say hi to {name}"])
        reasoning = f"The user wants me to greet {name}. No tools are needed."
        content = ans = f"Hello, {name}!"
    elif kind == "repeat":
        roll = r.random()
        if roll < 0.3:
            words = " ".join(c.filler() for _ in range(r.randint(1, 5)))
        elif roll < 0.55:
            words = c._pool_line("prose")
        elif roll < 0.7:
            words = c._pool_line("code")
        elif roll < 0.85:
            words = c.sentence()
        else:
            words = c.wild()
        prompt = r.choice([f"Repeat after me: {words}", f"Say exactly this: {words}", f"Repeat this text: {words}"])
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
                   multi_turn: float = 0.15, settings: tuple[bool, str | None] | None = None,
                   realistic: float = 0.2, files: dict[str, str] | None = None) -> Episode:
    """One random episode (one task, or two on the same sandbox with probability ``multi_turn``).

    ``realistic``: probability of a sandbox of common file names and harvested lines only;
    ``files``: a given sandbox (e.g. examples/sample_workspace) instead of a random one."""
    names = list(kinds or TASKS)
    weights = [WEIGHTS[k] for k in names]
    c = Ctx(rng, pools, realistic=rng.random() < realistic, files=files)
    n = 2 if rng.random() < multi_turn else 1
    thinking, effort = settings or sample_settings(rng)
    for attempt in range(20):  # a rare clash (e.g. a later file also holds grep's word): draw again
        c = Ctx(rng, pools, realistic=c.realistic, files=files)
        try:
            tasks = [TASKS[rng.choices(names, weights)[0]](c) for _ in range(n)]
            # the second task's sandbox edits (e.g. grep's inserted word) happen before the run: freeze now
            return run_episode(tasks, dict(c.files), system=system, thinking=thinking, effort=effort, rng=rng)
        except AssertionError:
            if attempt == 19:
                raise
    raise AssertionError("unreachable")
