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
import time
import uuid
from collections.abc import Callable, Generator
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
    spaced: tuple[str, ...] = ()  # words the vocabulary has as one token with a leading space (" hello")
    spaced_p: float = 0.0  # the share of drawn words taken from ``spaced``
    forbidden_paths: frozenset[str] = frozenset()  # never generated (training: the README demo's)
    forbidden_lines: frozenset[str] = frozenset()


_POOLS_FILE = Path(__file__).resolve().parents[2] / ".cache" / "tiny_k3" / "pools.json"


def spaced_words(model: Path | None = None) -> tuple[str, ...]:
    """The words (3+ lower-case letters) that k3-tiny's vocabulary has as one token with a
    leading space, e.g. " hello" (while "hello" is "he" + "llo"). A request says "run hello.py"
    with that token; the path argument must spell "hello" without it. k3-tiny v3's first run
    copied the spaced token into arguments (" hello.py") for words rare in names, so data v3 draws
    names, words and texts from this list too."""
    import base64

    model = model or Path(__file__).resolve().parents[2] / "models" / "k3-tiny"
    words = []
    for line in (model / "tiktoken.model").read_text().splitlines():
        if line.strip():
            raw = base64.b64decode(line.split()[0])
            if re.fullmatch(rb" [a-z]{3,}", raw):
                words.append(raw[1:].decode())
    return tuple(sorted(words))


def make_pools(path: Path | None = None, spaced_p: float = 0.0) -> dict[str, Pools]:
    """The ``train`` and ``heldout`` pools, from ``textpool.py``'s file (built when missing);
    ``spaced_p``: the share of words drawn from :func:`spaced_words` (0: none, as data v2 and v3's
    seed-0 set)."""
    path = path or _POOLS_FILE
    if not path.exists():
        import textpool

        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(textpool.build(pseudo=pseudo_words()), ensure_ascii=False) + "\n")
    d = json.loads(path.read_text(encoding="utf-8"))
    bad_paths = frozenset(d["forbidden"]["paths"])
    bad_lines = frozenset(d["forbidden"]["lines"])
    names = sorted(set(COMMON_NAMES.split()))
    spaced = spaced_words() if spaced_p > 0 else ()
    out = {}
    for split in ("train", "heldout"):
        p = d[split]
        out[split] = Pools(
            words=tuple(p["words"]), idents=tuple(p["idents"]), code=tuple(p["code"]),
            comment=tuple(p["comment"]), prose=tuple(p["prose"]),
            names=tuple(n for n in names if split == "heldout" or n not in bad_paths), spaced=spaced,
            spaced_p=spaced_p,
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
        if not p.spaced:  # v2's draw: an identifier 30% of the time, else a word
            w = r.choice(p.idents) if r.random() < 0.3 else r.choice(p.words)
        else:  # a spaced word spaced_p of the time, then v2's shares
            roll = r.random()
            w = (r.choice(p.spaced) if roll < p.spaced_p else r.choice(p.idents)
                 if roll < p.spaced_p + 0.3 * (1 - p.spaced_p) else r.choice(p.words))
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


def _harness(root: Path) -> Any:
    from kimik3.harness import CodingHarness

    # what `kimik3 run` builds (checkpoints change no text the model sees)
    return CodingHarness(root, checkpoints=False)


def tool_specs(root: Path | None = None) -> list[dict[str, Any]]:
    """The full harness's tool declarations as OpenAI dicts (what the prompt header renders and
    what ``kimik3 run`` sends: ``CodingHarness(root).parts(engine=...)``, the ``task`` tool included)."""
    from kimik3.agents import CODING_INSTRUCTIONS
    from kimik3.engines import ScriptedEngine

    with tempfile.TemporaryDirectory() as tmp:
        tools, _, _ = _harness(Path(root or tmp)).parts(engine=ScriptedEngine([]), instructions=CODING_INSTRUCTIONS)
        return [t.spec.model_dump(mode="json", exclude_none=True) for t in tools]


_EXIT_LINE = re.compile(r"\[exit code: (\d+), \d+\.\d\d s\]\Z")


class Sandbox:
    """One workspace directory and kimik3's full coding harness over it, per process (building
    the tools is the slow part). Each task of an episode is a new run of the agent, as each
    ``kimik3 run`` / ``resume`` is: what the model read is forgotten (read-before-edit) and
    background ids start again at bg1."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="k3tiny_"))
        atexit.register(shutil.rmtree, self.root, True)
        self.harness = _harness(self.root)
        self.tools = {t.name: t for t in self.harness.tools}
        self.loop = asyncio.new_event_loop()

    def reset(self, files: dict[str, str]) -> None:
        for child in self.root.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
        self.sync(files)

    def sync(self, files: dict[str, str]) -> None:
        """Write the files that are new or differ from the disk (the user's own changes between runs)."""
        for path, text in files.items():
            p = self.root / path
            if p.is_file() and p.read_text(encoding="utf-8") == text:
                continue
            try:
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_text(text, encoding="utf-8")
            except OSError as e:  # e.g. a file where an earlier run left an (empty) directory: draw again
                raise AssertionError(f"cannot write {path}: {e}") from None

    def state(self) -> dict[str, str]:
        return {p.relative_to(self.root).as_posix(): p.read_text(encoding="utf-8")
                for p in sorted(self.root.rglob("*")) if p.is_file()}

    def system_prompt(self, base: str) -> str:
        """``base`` with the root AGENTS.md appended, as the harness does."""
        inst = self.harness.instructions
        return inst.system_prompt(base) if inst is not None else base

    def new_run(self) -> None:
        h = self.harness
        if h.tracker is not None:
            h.tracker.seen.clear()
        if h.processes is not None:
            self.loop.run_until_complete(h.processes.close())
            h.processes._procs.clear()
            h.processes._n = 0

    def call(self, call: Call) -> str:
        if call.name == "read_output":  # the model's next turn comes later: let the process finish
            proc = self.harness.processes._procs.get(call.arguments.get("id"))
            end = time.monotonic() + 10
            while proc is not None and (proc.popen.poll() is None or proc.members()) and time.monotonic() < end:
                time.sleep(0.01)
        result = self.loop.run_until_complete(self.tools[call.name].run(dict(call.arguments)))
        text = result.text() if callable(getattr(result, "text", None)) else result.content
        assert isinstance(text, str), type(text)
        return text


_SANDBOX: Sandbox | None = None


def sandbox() -> Sandbox:
    global _SANDBOX
    if _SANDBOX is None:
        _SANDBOX = Sandbox()
    return _SANDBOX


def bash_output(tool_text: str) -> tuple[str, int | None]:
    """(printed output, exit code) from the bash tool's result text, whose last line is
    ``[exit code: N, S s]`` (kimik3.tools.coding ``bash``)."""
    head, _, last = tool_text.rpartition("\n")
    m = _EXIT_LINE.match(last)
    if m is None:
        return tool_text, None
    return head, int(m.group(1))


def numbered(read_text: str) -> list[str]:
    """The lines of a read_file result (``cat -n`` format), without their numbers."""
    return [m.group(1) for m in re.finditer(r"(?m)^ *\d+\t(.*)$", read_text)]


def run_task(sb: Sandbox, task: Task, messages: list[dict[str, Any]], *, thinking: bool,
             rng: random.Random) -> list[dict[str, Any]]:
    """Run one scripted task (a new run of the agent) on the sandbox; append its messages.
    Returns the calls of its first assistant turn.

    The one thing not taken verbatim from the tools is the wall-clock time in bash's last line
    (``[exit code: 0, 0.01 s]``): it is redrawn from ``rng`` so episodes are reproducible."""
    sb.new_run()
    n_calls = sum(len(m.get("tool_calls") or []) for m in messages)
    messages.append({"role": "user", "content": task.prompt})
    gen = task.script()
    step = next(gen)
    first_calls: list[dict[str, Any]] | None = None
    while True:
        msg: dict[str, Any] = {"role": "assistant", "content": step.content}
        if thinking:
            msg["reasoning_content"] = step.reasoning
        if first_calls is None:
            first_calls = [{"name": c.name, "arguments": c.arguments} for c in step.calls]
        if not step.calls:
            messages.append(msg)
            break
        ids = []
        for _ in step.calls:
            n_calls += 1
            ids.append(f"call_{n_calls}")
        msg["tool_calls"] = [
            {"id": i, "type": "function",
             "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)}}
            for i, c in zip(ids, step.calls, strict=True)
        ]
        messages.append(msg)
        outs = [sb.call(c) for c in step.calls]
        for k, c in enumerate(step.calls):
            if c.name == "bash" and not c.arguments.get("background"):
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
        got = (sb.root / path).read_text(encoding="utf-8")
        assert got == text, (path, got, text)
    return first_calls
