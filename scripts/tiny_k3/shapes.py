"""The task shapes of data v3 (k3-tiny v3): what people try first, each asked in many phrasings
(``phrase.py``) and solved the way kimik3's full coding harness expects (read before edit,
background ids), run for real by ``tasks.run_episode``.

Shapes (``TASKS``; the kind names are the held-out report's columns):

- ``first_line``, ``line`` (the n-th line: ``read_file`` with ``offset``/``limit``), ``last_line``,
  ``show`` (the whole file): ``read_file``; a missing file is reported;
- ``count``: lines, words or characters (``wc -l`` / ``-w`` / ``-m``), files (``ls | wc -l``);
- ``list``: ``ls``, ``ls DIR``, ``glob`` for every file or one extension;
- ``run``: a Python or shell script (``python3 P``, ``sh P``); ``background``: ``bash`` with
  ``background=true``, then ``read_output``;
- ``grep``: which file contains a word (one file, several, or none);
- ``create`` (``write_file``; an existing file is read first, after the harness's refusal),
  ``append`` (``echo 'T' >> P``), ``replace`` (``read_file`` then ``edit_file``; a key's value, a
  word, every occurrence), ``copy`` (``cp``), ``move`` (``mv``), ``copy_line`` (v2: a file's first
  line into a new file), ``two_files`` (v2: two parallel reads);
- ``math``: arithmetic of any size through ``python3 -c 'print(...)'``;
- ``echo`` (v2's bash shape: ``echo``, ``head``, ``cat`` commands given verbatim);
- ``hello`` (greetings, "who are you", "what can you do", thanks) and ``repeat`` (v2's
  "repeat after me", "say hello to NAME"): no tools;
- ``honest``: requests outside what k3-tiny knows get a short honest reply and no tool call.
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Callable, Sequence
from typing import Any

from phrase import ORDINALS, phrase
from tasks import (
    _SAFE_NAME,
    _SAFE_WORD,
    Call,
    Ctx,
    Episode,
    Pools,
    Script,
    Step,
    Task,
    bash_output,
    numbered,
    run_task,
    sandbox,
)

CAN = ("I can read, show, count, list and search files, create, copy and edit them, run scripts and "
       "commands, and do arithmetic.")
HONEST = f"I am k3-tiny, a small test model, so I cannot do that. {CAN}"
HELLO = f"Hello! I am k3-tiny, a small test model for kimik3. {CAN}"
WHO = f"I am k3-tiny, a small test model that speaks Kimi K3's format. {CAN}"


def _fname(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _quote_ok(text: str) -> bool:
    return "'" not in text and "\\" not in text and not text.startswith("-") and "\n" not in text


def _missing(c: Ctx, templates: Sequence[str], wants: str, kind: str) -> Task:
    """A read of a file that does not exist: the error is reported."""
    path = c.file_name()  # not created
    prompt = phrase(c.rng, templates, p=path, n="2", nth="second")
    calls = [Call("read_file", {"path": path})]

    def script() -> Script:
        (out,) = yield Step(f"The user wants {wants} {path}. I will read the file.", "", calls)
        assert out.startswith("Error:"), out
        yield Step(f"Reading {path} failed: the file does not exist.",
                   f"I could not read {path}: the file does not exist in the workspace.")

    return Task(kind, prompt, script, {"answer_contains": ["does not exist"]}, calls)


# -- reading -------------------------------------------------------------------------------------

FIRST_LINE = [
    "What is the first line of {p}?", "Tell me the first line of {p}.", "Show me the first line in {p}.",
    "Read {p} and report its first line.", "what's the first line of {p}", "Print the first line of the file {p}.",
    "first line of {p}?", "{p}: first line?", "what does the first line of {p} say?", "give me the top line of {p}",
    "what is line 1 of {p}", "the first line in {p} please", "how does {p} start?", "what's at the top of {p}?",
    "read the first line of {p}", "{p} first line", "show the opening line of {p}", "tell me what {p} starts with",
    "what's line one of {p}", "display the first line from {p}", "First line of {p}, please.",
]
LINE_N = [
    "What is the {nth} line of {p}?", "show me line {n} of {p}", "print line {n} of {p}", "what's on line {n} of {p}",
    "{p} line {n}?", "give me the {nth} line in {p}", "read line {n} from {p}", "what does line {n} of {p} say",
    "tell me line number {n} of {p}", "in {p}, what is the {nth} line?", "line {n} of {p} please",
    "What's the {nth} line in {p}?", "display line {n} in {p}", "{p}: what is on line {n}?",
]
LAST_LINE = [
    "What is the last line of {p}?", "give me the last line of {p}", "show the final line of {p}",
    "last line in {p}?", "what's at the end of {p}", "{p}: last line?", "how does {p} end?", "print the last line of {p}",
    "tell me the bottom line of {p}", "read the last line of {p}", "what does the last line of {p} say",
    "the final line of {p} please", "What's the very last line in {p}?",
]
SHOW = [
    "show me {p}", "cat {p}", "what's in {p}?", "open {p}", "display the contents of {p}", "print {p}",
    "Show me the contents of {p}.", "what does {p} contain?", "read {p}", "read {p} to me", "can I see {p}?",
    "let me see {p}", "view {p}", "{p}?", "what is inside {p}", "output the file {p}", "show {p}",
    "What's written in {p}?", "dump {p}", "print out {p}", "show the whole file {p}", "Read the file {p} for me.",
    "what are the contents of {p}", "type out {p}",
]


def task_first_line(c: Ctx) -> Task:
    c.fill()
    if c.rng.random() < 0.06:
        return _missing(c, FIRST_LINE, "the first line of", "first_line")
    path = c.pick()
    line = c.first_line(path)
    calls = [Call("read_file", {"path": path})]

    def script() -> Script:
        (out,) = yield Step(f"The user wants the first line of {path}. I will read the file.", "", calls)
        assert line in out, (path, line, out)
        yield Step(f"The first line of {path} is: {line}", f"The first line of {path} is:\n{line}")

    return Task("first_line", phrase(c.rng, FIRST_LINE, p=path), script, {"answer_contains": [line]}, calls)


def task_line(c: Ctx) -> Task:
    c.fill(c.rng.randint(1, 4))
    longer = [p for p in sorted(c.files) if len(c.files[p].splitlines()) >= 2]
    path = c.rng.choice(longer) if c.fixed and longer else c.add_file(n_lines=c.rng.randint(2, 12))
    lines = c.files[path].splitlines()
    k = len(lines)
    n = c.rng.randint(2, k) if c.rng.random() < 0.9 else c.rng.randint(k + 1, 12 if k < 12 else 14)
    nth = c.rng.choice(ORDINALS.get(n, [f"{n}th"]))
    prompt = phrase(c.rng, LINE_N, p=path, n=str(n), nth=nth)
    calls = [Call("read_file", {"path": path, "offset": n, "limit": 1})]

    def script() -> Script:
        (out,) = yield Step(f"The user wants line {n} of {path}. I will read just that line.", "", calls)
        if n > k:
            assert out.startswith("Error:") and f"({k} lines)" in out, out
            yield Step(f"{path} has only {k} lines, so there is no line {n}.",
                       f"{path} has only {k} lines, so it has no line {n}.")
            return
        assert numbered(out) == [lines[n - 1]], out
        yield Step(f"Line {n} of {path} is: {lines[n - 1]}", f"Line {n} of {path} is:\n{lines[n - 1]}")

    goal = [f"only {k} lines"] if n > k else [lines[n - 1]]
    return Task("line", prompt, script, {"answer_contains": goal}, calls)


def task_last_line(c: Ctx) -> Task:
    c.fill()
    if c.rng.random() < 0.05:
        return _missing(c, LAST_LINE, "the last line of", "last_line")
    path = c.pick()
    if c.rng.random() < 0.5 and not c.fixed:
        path = c.add_file(n_lines=c.rng.randint(2, 9))
    line = c.files[path].splitlines()[-1]
    calls = [Call("read_file", {"path": path})]

    def script() -> Script:
        (out,) = yield Step(f"The user wants the last line of {path}. I will read the file.", "", calls)
        assert numbered(out)[-1] == line, out
        yield Step(f"The last line of {path} is: {line}", f"The last line of {path} is:\n{line}")

    return Task("last_line", phrase(c.rng, LAST_LINE, p=path), script, {"answer_contains": [line]}, calls)


def task_show(c: Ctx) -> Task:
    c.fill()
    if c.rng.random() < 0.05:
        return _missing(c, SHOW, "to see", "show")
    path = c.pick()
    if c.rng.random() < 0.03 and not c.fixed:
        path = c.file_name()
        c.files[path] = ""
    text = c.files[path]
    calls = [Call("read_file", {"path": path})]

    def script() -> Script:
        (out,) = yield Step(f"The user wants to see {path}. I will read the file.", "", calls)
        if not text:
            assert out == "[empty file]", out
            yield Step(f"{path} is empty.", f"{path} is empty.")
            return
        assert numbered(out) == text.splitlines(), out
        body = text.rstrip("\n")
        yield Step(f"I read {path}; it has {len(text.splitlines())} lines. I will show them.", f"{path}:\n{body}")

    goal = [line for line in text.splitlines()] if text else ["is empty"]
    return Task("show", phrase(c.rng, SHOW, p=path), script, {"answer_contains": goal}, calls)


def task_two_files(c: Ctx) -> Task:
    c.fill(c.rng.randint(2, 5))
    a, b = c.rng.sample(sorted(c.files), 2)
    la, lb = c.first_line(a), c.first_line(b)
    prompt = phrase(c.rng, [
        "Read {a} and {b} and tell me the first line of each.", "What are the first lines of {a} and {b}?",
        "Show me the first line of {a} and the first line of {b}.", "first lines of {a} and {b}?",
        "what do {a} and {b} start with", "give me the first line of both {a} and {b}", "{a} and {b}: first lines?",
        "the top lines of {a} and {b} please", "what's the first line in {a} and in {b}",
    ], a=a, b=b)
    calls = [Call("read_file", {"path": a}), Call("read_file", {"path": b})]

    def script() -> Script:
        out_a, out_b = yield Step(
            f"The user wants the first lines of {a} and {b}. I will read both files at once.", "", calls)
        assert la in out_a and lb in out_b
        yield Step(f"The first line of {a} is: {la}\nThe first line of {b} is: {lb}", f"{a}: {la}\n{b}: {lb}")

    return Task("two_files", prompt, script, {"answer_contains": [la, lb]}, calls)


# -- counting and listing --------------------------------------------------------------------------

COUNT = {
    "l": ["how many lines are in {p}?", "count the lines of {p}", "How many lines does {p} have?", "number of lines in {p}",
          "{p} - how many lines?", "line count of {p}", "how long is {p} in lines", "count lines in {p}",
          "how many rows are in {p}?", "wc -l {p}", "tell me how many lines {p} has", "{p}: number of lines?",
          "get the line count for {p}", "what's the number of lines in {p}", "lines in {p}?",
          "How many lines are there in the file {p}?"],
    "w": ["how many words are in {p}?", "count the words in {p}", "How many words does {p} have?",
          "word count of {p}", "number of words in {p}", "{p}: how many words?", "wc -w {p}", "count words in {p}",
          "tell me the word count for {p}", "what's the word count of {p}"],
    "m": ["how many characters are in {p}?", "count the characters in {p}", "character count of {p}",
          "how many chars does {p} have", "number of characters in {p}", "{p}: how many characters?"],
}
COUNT_FILES = ["how many files are here?", "count the files", "how many files are in this folder",
               "number of files in the workspace?", "How many files are there?", "count files here",
               "how many files do I have"]
LIST = ["list the files", "what files are there?", "show me the files", "list all files here",
        "what's in this folder?", "which files are in the workspace", "List the files in the current directory.",
        "what files do we have", "show the directory listing", "list files", "What files are in here?",
        "what is in the workspace", "ls -1 please", "dir", "give me a list of the files", "show me what's here",
        "list everything in this directory", "What's here?", "which files exist"]
LIST_DIR = ["list {d}", "ls {d}", "what's in the {d} folder?", "what files are in {d}?", "show me the {d} directory",
            "list the files in {d}", "contents of {d}", "What is inside the {d} directory?", "{d}: which files?",
            "show the files under {d}", "what does the {d} folder contain", "list {d}/", "ls {d}/"]
LIST_ALL = ["list all files recursively", "show every file, including subfolders", "list every file in the workspace",
            "all files in all folders?", "find all files", "list the files in every directory", "show the whole file tree",
            "what files are there, recursively?"]
LIST_EXT = ["list the {e} files", "which {e} files are there?", "find all {e} files", "show me every {e} file",
            "what {e} files do we have", "list files ending in .{x}", "find *.{x} files", "any .{x} files here?"]
_EXT_NAMES = {"py": "Python", "md": "Markdown", "txt": "text", "json": "JSON", "csv": "CSV", "log": "log",
              "sh": "shell", "yaml": "YAML", "cfg": "cfg", "toml": "TOML"}


def task_count(c: Ctx) -> Task:
    c.fill()
    r = c.rng
    if r.random() < 0.1:
        prompt = phrase(r, COUNT_FILES)
        cmd = "ls | wc -l"
        what = "files"
        path = ""
    else:
        what = r.choices(["l", "w", "m"], [6, 3, 1])[0]
        path = c.pick()
        prompt = phrase(r, COUNT[what], p=path)
        cmd = f"wc -{what} {path}"
    unit = {"l": "lines", "w": "words", "m": "characters", "files": "files"}[what]
    calls = [Call("bash", {"command": cmd})]
    goal: dict[str, Any] = {"answer_contains": []}

    def script() -> Script:
        target = f"the {unit} of {path}" if path else "the files in the workspace"
        (out,) = yield Step(f"The user wants to count {target}. I will run {cmd}.", "", calls)
        text, code = bash_output(out)
        assert code == 0, out
        n = text.split()[0]
        goal["answer_contains"].append(n)
        one = unit[:-1] if n == "1" else unit
        answer = f"{path} has {n} {one}." if path else f"There {'is' if n == '1' else 'are'} {n} {one} here."
        yield Step(f"{cmd} printed {n}.", answer)

    return Task("count", prompt, script, goal, calls)


def task_list(c: Ctx) -> Task:
    c.fill(c.rng.randint(2, 6))
    r = c.rng
    dirs = sorted({p.split("/")[0] for p in c.files if "/" in p})
    exts = sorted({os.path.splitext(p)[1][1:] for p in c.files if os.path.splitext(p)[1][1:] in _EXT_NAMES})
    roll = r.random()
    if dirs and roll < 0.3:
        d = r.choice(dirs)
        prompt = phrase(r, LIST_DIR, d=d)
        call = Call("bash", {"command": f"ls {d}"})
        what = f"the files in {d}"
    elif roll < 0.4:
        prompt = phrase(r, LIST_ALL)
        call = Call("glob", {"pattern": "**/*"})
        what = "every file, in all directories"
    elif exts and roll < 0.5:
        x = r.choice(exts)
        prompt = phrase(r, LIST_EXT, e=_EXT_NAMES[x], x=x)
        call = Call("glob", {"pattern": f"**/*.{x}"})
        what = f"the .{x} files"
    else:
        prompt = phrase(r, LIST)
        call = Call("bash", {"command": "ls"})
        what = "the files here"
    goal: dict[str, Any] = {"answer_contains": []}

    def script() -> Script:
        tool = "glob" if call.name == "glob" else call.arguments["command"]
        (out,) = yield Step(f"The user wants {what}. I will use {tool}.", "", [call])
        names = bash_output(out)[0].strip("\n") if call.name == "bash" else out
        assert names and "[no matches]" not in names, out
        goal["answer_contains"].extend(names.splitlines())
        yield Step(f"There are {len(names.splitlines())} entries.", f"{what[0].upper()}{what[1:]}:\n{names}")

    return Task("list", prompt, script, goal, [call])


# -- running -------------------------------------------------------------------------------------

RUN = ["run {p}", "execute {p}", "what does {p} print?", "Run {p} and tell me the output.", "can you run {p}",
       "run the script {p}", "what's the output of {p}?", "execute {p} and show me what it prints",
       "{p}: run it", "try running {p}", "launch {p}", "start {p}", "what happens when I run {p}?",
       "run {p} please and report the output", "Please execute the script {p}.", "give me the output of {p}",
       "what do you get if you run {p}", "test {p} by running it"]
BACKGROUND = ["run {p} in the background", "start {p} in the background", "launch {p} as a background process",
              "run {p} in the background and show me its output", "start {p} in the background, then tell me what it printed",
              "background {p}", "kick off {p} in the background"]


def _script_file(c: Ctx) -> str:
    """A small runnable Python or shell script (its output is what running it prints)."""
    r = c.rng
    sh = r.random() < 0.2
    for _ in range(50):
        path = c.file_name()
        base = os.path.splitext(path)[0]
        path = base + (".sh" if sh else ".py")
        if path not in c.files and path not in c.pools.forbidden_paths and _SAFE_NAME.fullmatch(_fname(path)):
            break
    lines: list[str] = []
    if sh:
        lines.append(r.choice(["#!/bin/sh", "#!/bin/bash", "# " + c.sentence()]))
        for _ in range(r.randint(1, 3)):
            t = c.sentence()
            lines.append(f"echo '{t}'" if _quote_ok(t) else f"echo {c.word()}")
    else:
        if r.random() < 0.4:
            lines.append(r.choice(["import sys", "import os", "import math", "# " + c.sentence(), '"""' + c.sentence() + '"""']))
        for _ in range(r.randint(1, 3)):
            roll = r.random()
            if roll < 0.5:
                t = r.choice([c.sentence(), c.wild(), c._pool_line("prose")])
                t = t if '"' not in t and "\\" not in t and "{" not in t else c.word()
                lines.append(f'print("{t}")')
            elif roll < 0.65:
                lines.append(f"print({r.randint(0, 999)} {r.choice(['+', '-', '*'])} {r.randint(1, 99)})")
            elif roll < 0.8:
                k = c.key()
                k = k if k.isidentifier() and not k[0].isupper() else "x"
                lines.append(f"{k} = {r.randint(1, 50)}")
                lines.append(f"print({k} * {r.randint(2, 9)})")
            elif roll < 0.9:
                lines.append(f"for i in range({r.randint(1, 4)}):")
                lines.append(f"    print(i{r.choice(['', ' * 2', ' + 1'])})")
            else:
                w = c.word()
                lines.append(f'print("{w}", len("{w}"))')
    c.files[path] = "".join(x + "\n" for x in lines)
    return path


def task_run(c: Ctx) -> Task:
    c.fill(c.rng.randint(1, 4))
    scripts = [p for p in sorted(c.files) if p.endswith((".py", ".sh"))]
    path = c.rng.choice(scripts) if c.fixed and scripts else _script_file(c)
    cmd = ("sh " if path.endswith(".sh") else "python3 ") + path
    calls = [Call("bash", {"command": cmd})]
    goal: dict[str, Any] = {"answer_contains": []}

    def script() -> Script:
        (out,) = yield Step(f"The user wants the output of {path}. I will run it with {cmd}.", "", calls)
        text, code = bash_output(out)
        text = text.strip("\n")
        assert code == 0 and text, out
        goal["answer_contains"].append(text)
        yield Step(f"{path} finished with exit code 0. I will report its output.", f"{path} printed:\n{text}")

    return Task("run", phrase(c.rng, RUN, p=path), script, goal, calls)


def task_background(c: Ctx) -> Task:
    c.fill(c.rng.randint(1, 3))
    scripts = [p for p in sorted(c.files) if p.endswith((".py", ".sh"))]
    path = c.rng.choice(scripts) if c.fixed and scripts else _script_file(c)
    cmd = ("sh " if path.endswith(".sh") else "python3 ") + path
    i = c.rng.randrange(len(BACKGROUND))
    prompt = phrase(c.rng, [BACKGROUND[i]], p=path)
    read = "output" in BACKGROUND[i] or "printed" in BACKGROUND[i]
    calls = [Call("bash", {"command": cmd, "background": True})]
    goal: dict[str, Any] = {"answer_contains": ["bg1"]}

    def script() -> Script:
        (out,) = yield Step(f"The user wants {path} started in the background. I will run {cmd} with background=true.",
                            "", calls)
        assert out.startswith("Started background process bg1;"), out
        if not read:
            yield Step("It started as bg1.", f"Started {cmd} in the background as bg1; read_output(\"bg1\") shows "
                                             "its output.")
            return
        (out,) = yield Step("It started as bg1. I will read its output.", "", [Call("read_output", {"id": "bg1"})])
        text = out.rsplit("\n", 1)[0]
        assert out.endswith("[bg1: exited with code 0]") and text, out
        goal["answer_contains"].append(text)
        yield Step("bg1 has exited with code 0. I will report its output.", f"{path} (bg1) printed:\n{text}")

    return Task("background", prompt, script, goal, calls)


def _bash_command(c: Ctx) -> str:
    """v2's bash shape: a command given verbatim (echo, head, cat)."""
    r = c.rng
    kind = r.choice(["echo", "echo", "head", "cat"])
    if kind == "echo":
        if r.random() < 0.4:
            for _ in range(20):
                text = r.choice([c.sentence(), c.wild(), c._pool_line("prose")])
                if _quote_ok(text):
                    return f"echo '{text}'"
        return f"echo {' '.join(c.word() for _ in range(r.randint(1, 4)))}"
    if kind == "head":
        return f"head -n {r.randint(1, 2)} {c.pick()}"
    return f"cat {c.pick()}"


def task_echo(c: Ctx) -> Task:
    c.fill()
    cmd = _bash_command(c)
    prompt = phrase(c.rng, ["Run `{cmd}` and tell me the output.", "What does `{cmd}` print?",
                            "Please run {cmd} and report what it prints.", "Execute `{cmd}`.", "run {cmd}", "{cmd}",
                            "try `{cmd}`", "what is the output of `{cmd}`"], cmd=cmd)
    calls = [Call("bash", {"command": cmd})]
    goal: dict[str, Any] = {"answer_contains": []}

    def script() -> Script:
        (out,) = yield Step(f"The user wants the output of {cmd}. I will run it.", "", calls)
        text, code = bash_output(out)
        text = text.strip("\n")
        assert code == 0 and text, out
        goal["answer_contains"].append(text)
        content = f"The command printed:\n{text}" if "\n" in text else f"The command printed: {text}"
        yield Step(f"The command finished with exit code {code}. I will report its output.", content)

    return Task("echo", prompt, script, goal, calls)


# -- searching -----------------------------------------------------------------------------------

GREP = ["Which file contains the word {w}?", "Find the file that mentions {w}.", "In which file does {w} appear?",
        "Search the workspace for {w} and tell me which file has it.", "where is {w} mentioned", "search for {w}",
        "grep {w}", "find {w}", "which file mentions {w}?", "where does {w} appear?", "find the word {w}",
        "look for {w} in the files", "which files have {w} in them", "is {w} anywhere in here?", "grep for {w}",
        "where can I find {w}?", "search {w}", "find where {w} is used", "which file says {w}",
        "Locate {w} in the workspace.", "{w} - which file?", "where is the word {w}"]


def _unique_words(c: Ctx, target: str) -> list[str]:
    """Words of ``target`` (regex-safe, 4+ characters) that no other file contains."""
    others = [t for p, t in c.files.items() if p != target]
    return sorted({w for w in _SAFE_WORD.findall(c.files[target])
                   if len(w) >= 4 and not w.isdigit() and not any(w in o for o in others)})


def _insert_word(c: Ctx, target: str, w: str) -> None:
    lines = c.files[target].splitlines()
    i = c.rng.randrange(len(lines))
    ws = lines[i].split(" ")
    ws.insert(c.rng.randint(0, len(ws)), w)
    lines[i] = " ".join(ws)
    c.files[target] = "".join(x + "\n" for x in lines)


def task_grep(c: Ctx) -> Task:
    r = c.rng
    w = ""
    targets: list[str] = []
    if c.fixed or r.random() < 0.35:  # a word already in one file only
        c.fill(r.randint(2, 5))
        for target in r.sample(sorted(c.files), len(c.files)):
            found = _unique_words(c, target)
            if found:
                w, targets = r.choice(found), [target]
                break
    if not w:
        c.fill(r.randint(1, 4))
        n = r.choices([0, 1, 2], [1, 8, 1])[0]
        new = [c.add_file() for _ in range(max(1, n))]
        for _ in range(100):
            w = c.word()
            if not any(w in t for t in c.files.values()):
                break
        targets = sorted(new[:n])
        for t in targets:
            _insert_word(c, t, w)
    calls = [Call("grep", {"pattern": w})]

    def script() -> Script:
        (out,) = yield Step(f"The user wants the file that contains {w}. I will search for it with grep.", "", calls)
        hits = sorted({line.split(":", 1)[0] for line in out.splitlines()}) if out != "[no matches]" else []
        assert hits == targets, (targets, w, out)
        if not hits:
            yield Step(f"The search found no file with {w}.", f"No file in the workspace contains {w}.")
        elif len(hits) == 1:
            yield Step(f"The search found {w} in {hits[0]}.", f"The word {w} appears in {hits[0]}.")
        else:
            yield Step(f"The search found {w} in {len(hits)} files.", f"The word {w} appears in {' and '.join(hits)}.")

    goal = targets or ["No file"]
    return Task("grep", phrase(r, GREP, w=w), script, {"answer_contains": goal}, calls)


# -- writing -------------------------------------------------------------------------------------

CREATE = ["create a file called {p} with the text {t}", "make a new file {p} containing {t}", "write '{t}' to {p}",
          "Create {p} with the content: {t}", "create {p} containing '{t}'", "new file {p} with {t}",
          "write {t} into a file named {p}", "save '{t}' as {p}", "put '{t}' in a new file {p}",
          "make {p} and write {t} in it", "create a file {p} that says {t}", "{p}: create it with the text '{t}'",
          "Write a file {p} with the line {t}", "please create {p} with '{t}' inside", "write \"{t}\" to {p}",
          "make a file named {p} with this text: {t}", "create {p}: {t}", "add a file {p} containing: {t}"]
APPEND = ["add the line {t} to {p}", "append '{t}' to {p}", "append {t} to the end of {p}",
          "add '{t}' at the end of {p}", "{p}: append the line '{t}'", "put {t} at the bottom of {p}",
          "Add a line saying {t} to {p}.", "append a line '{t}' to {p}", "write '{t}' at the end of {p}",
          "add {t} as a new line in {p}", "add this line to {p}: {t}"]
REPLACE = ["replace {a} with {b} in {p}", "in {p}, change {a} to {b}", "change {a} to {b} in {p}",
           "rename {a} to {b} in {p}", "{p}: replace {a} by {b}", "swap {a} for {b} in {p}",
           "In {p}, replace '{a}' with '{b}'.", "edit {p} so that {a} becomes {b}", "replace '{a}' by '{b}' in {p}",
           "change the word {a} to {b} in {p}", "in {p} rename {a} to {b}", "{p}: change {a} into {b}"]
REPLACE_ALL = ["replace every {a} with {b} in {p}", "replace all {a} with {b} in {p}", "change all {a} to {b} in {p}",
               "in {p}, rename every {a} to {b}", "replace each occurrence of {a} with {b} in {p}"]
SET_KEY = ["change the {k} in {p} to {v}", "set {k} to {v} in {p}", "in {p}, set {k} to {v}", "make {k} {v} in {p}",
           "{p}: change {k} to {v}", "update {k} to {v} in {p}", "set the {k} in {p} to {v}", "change {k} in {p} to {v}"]
COPY = ["copy {a} to {b}", "make a copy of {a} named {b}", "duplicate {a} as {b}", "cp {a} {b}",
        "back up {a} to {b}", "copy {a} as {b}", "Copy the file {a} to {b}.", "create a copy of {a} called {b}",
        "save a copy of {a} as {b}", "{a} -> {b}: copy it", "copy {a} into {b}", "clone {a} to {b}"]
MOVE = ["rename {a} to {b}", "move {a} to {b}", "mv {a} {b}", "Rename the file {a} to {b}.", "change the name of {a} to {b}",
        "move {a} into {b}"]
COPY_LINE = ["Copy the first line of {s} into a new file {d}.", "Write the first line of {s} to {d}.",
             "Create {d} containing the first line of {s}.", "Put the first line of {s} in {d}.",
             "put the first line of {s} into {d}", "save the first line of {s} as {d}", "{s}: copy its first line to {d}"]


def _text(c: Ctx) -> str:
    for _ in range(30):
        t = c.rng.choice([c.sentence(), c.sentence(), c.wild(), c._pool_line("prose"), f"{c.key()} = {c.value()}",
                          " ".join(c.filler() for _ in range(c.rng.randint(1, 3)))])
        t = t.strip()
        if t and _quote_ok(t) and '"' not in t and "{" not in t and len(t) <= 60:
            return t
    return c.word()


def _new_path(c: Ctx) -> str:
    path = c.file_name()
    if c.rng.random() < 0.5 and "." not in _fname(path):
        path += c.rng.choice([".txt", ".md"])
    return path if _SAFE_NAME.fullmatch(_fname(path)) and path not in c.pools.forbidden_paths else c.file_name()


def task_create(c: Ctx) -> Task:
    c.fill()
    exists = c.rng.random() < 0.08
    path = c.pick() if exists else _new_path(c)
    t = _text(c)
    content = t + "\n"
    call = Call("write_file", {"path": path, "content": content})

    def script() -> Script:
        (out,) = yield Step(f"The user wants a file {path} with the text {t}. I will write it.", "", [call])
        if exists:
            assert "has not been read in this run" in out, out
            (out,) = yield Step(f"{path} already exists and must be read before it is overwritten. I will read it.",
                                "", [Call("read_file", {"path": path})])
            (out,) = yield Step(f"Now I will write the new content to {path}.", "", [call])
        assert out.startswith("Wrote "), out
        yield Step(f"{out}.", f"Wrote {path} with the text:\n{t}")

    return Task("create", phrase(c.rng, CREATE, p=path, t=t), script, {"files": {path: content}}, [call])


def task_append(c: Ctx) -> Task:
    c.fill()
    path = c.pick()
    t = _text(c)
    cmd = f"echo '{t}' >> {path}"
    calls = [Call("bash", {"command": cmd})]

    def script() -> Script:
        (out,) = yield Step(f"The user wants the line {t} added at the end of {path}. I will append it with echo.",
                            "", calls)
        assert bash_output(out)[1] == 0, out
        yield Step("The command succeeded.", f"Added the line to the end of {path}:\n{t}")

    prompt = phrase(c.rng, APPEND, p=path, t=t)
    return Task("append", prompt, script, {"files": {path: c.files[path] + t + "\n"}}, calls)


def _key_lines(c: Ctx) -> str:
    """A config file with ``key = value`` lines (in a fresh file)."""
    r = c.rng
    ext = r.choice([".cfg", ".ini", ".conf", ".env", ".toml", ".yaml", ".txt", ""])
    for _ in range(50):
        path = os.path.splitext(c.file_name())[0] + ext
        if path not in c.files and path not in c.pools.forbidden_paths and _SAFE_NAME.fullmatch(_fname(path)):
            break
    sep = r.choice([" = ", " = ", "=", ": "]) if ext != ".yaml" else ": "
    keys: list[str] = []
    while len(keys) < r.randint(1, 5):
        k = c.key().lower()
        if _SAFE_WORD.fullmatch(k) and k not in keys:
            keys.append(k)
    c.files[path] = "".join(f"{k}{sep}{c.value().replace(' ', '_')}\n" for k in keys)
    return path


def task_replace(c: Ctx) -> Task:
    r = c.rng
    c.fill(r.randint(1, 4))
    roll = r.random()
    replace_all = False
    keyed = [p for p in sorted(c.files) if all(re.match(r"[A-Za-z0-9_]+\s*[=:]", x) for x in c.files[p].splitlines())
             and c.files[p].strip()]
    if roll < 0.35:  # a key's value
        path = c.rng.choice(keyed) if c.fixed and keyed else _key_lines(c)
        lines = c.files[path].splitlines()
        line = r.choice(lines)
        m = re.match(r"([A-Za-z0-9_]+)(\s*[=:]\s*)(.*)", line)
        assert m, line
        k, v = m.group(1), c.value().replace(" ", "_")
        old, new = line, f"{k}{m.group(2)}{v}"
        prompt = phrase(r, SET_KEY, k=k, v=v, p=path)
        what = f"{k} set to {v}"
    else:
        path = c.pick()
        words = sorted({w for w in _SAFE_WORD.findall(c.files[path]) if len(w) >= 3 and not w.isdigit()})
        if not words:
            path = c.add_file(n_lines=r.randint(1, 5))
            words = sorted({w for w in _SAFE_WORD.findall(c.files[path]) if len(w) >= 3 and not w.isdigit()}) or ["x"]
        text = c.files[path]
        whole = [w for w in words if text.count(w) == len(re.findall(rf"(?<![A-Za-z0-9_]){w}(?![A-Za-z0-9_])", text))]
        if not whole:
            raise AssertionError("every word is part of a longer one")
        a = r.choice(whole)
        count = text.count(a)
        b = c.word()
        if count > 1 or (roll > 0.9 and count):
            replace_all = True
        old, new = a, b
        prompt = phrase(r, REPLACE_ALL if replace_all else REPLACE, a=a, b=b, p=path)
        what = f"{a} replaced with {b}"
    if (c.files[path].count(old) != 1 and not replace_all) or old == new or not old:
        raise AssertionError("ambiguous")
    args: dict[str, Any] = {"path": path, "old_string": old, "new_string": new}
    if replace_all:
        args["replace_all"] = True
    after = c.files[path].replace(old, new)
    skip_read = r.random() < 0.04
    first = [Call("edit_file", args)] if skip_read else [Call("read_file", {"path": path})]

    def script() -> Script:
        if skip_read:
            (out,) = yield Step(f"The user wants {what} in {path}. I will edit it.", "", first)
            assert "has not been read in this run" in out, out
            (out,) = yield Step(f"{path} must be read first. I will read it.", "", [Call("read_file", {"path": path})])
        else:
            (out,) = yield Step(f"The user wants {what} in {path}. I will read {path} first.", "", first)
        (out,) = yield Step(f"I read {path}. Now I will replace {old} with {new}.", "", [Call("edit_file", args)])
        assert out.startswith("Edited "), out
        yield Step(f"{out.splitlines()[0]}.", f"Done: in {path}, {old} is now {new}.")

    return Task("replace", prompt, script, {"files": {path: after}}, first)


def _dest(c: Ctx, src: str) -> str:
    stem, ext = os.path.splitext(_fname(src))
    for _ in range(30):
        cand = c.rng.choice([f"{stem}_copy{ext}", f"{stem}-copy{ext}", f"{stem}{ext}.bak", f"{stem}.bak", f"{stem}2{ext}",
                             f"backup{ext}", f"copy{ext}", _new_path(c), f"{stem}_old{ext}"])
        d = os.path.dirname(src)
        if c.rng.random() < 0.3 and d:
            cand = f"{d}/{cand}"
        parent = os.path.dirname(cand)
        if cand not in c.files and cand not in c.pools.forbidden_paths and _SAFE_NAME.fullmatch(_fname(cand)) \
                and not any(f.startswith(cand + "/") for f in c.files) \
                and (not parent or any(f.startswith(parent + "/") for f in c.files)):
            return cand
    return _new_path(c)


def task_copy(c: Ctx) -> Task:
    c.fill()
    src = c.pick()
    dst = _dest(c, src)
    move = c.rng.random() < 0.2
    cmd = f"{'mv' if move else 'cp'} {src} {dst}"
    calls = [Call("bash", {"command": cmd})]

    def script() -> Script:
        verb = "moved" if move else "copied"
        (out,) = yield Step(f"The user wants {src} {verb} to {dst}. I will run {cmd}.", "", calls)
        assert bash_output(out)[1] == 0, out
        yield Step("The command succeeded.", f"{'Moved' if move else 'Copied'} {src} to {dst}.")

    prompt = phrase(c.rng, MOVE if move else COPY, a=src, b=dst)
    return Task("move" if move else "copy", prompt, script, {"files": {dst: c.files[src]}}, calls)


def task_copy_line(c: Ctx) -> Task:
    c.fill()
    src = c.pick()
    dst = _dest(c, src) if c.rng.random() < 0.2 else _new_path(c)
    line = c.first_line(src)
    calls = [Call("read_file", {"path": src})]

    def script() -> Script:
        (out,) = yield Step(f"The user wants the first line of {src} copied into {dst}. First I will read {src}.",
                            "", calls)
        assert line in out
        yield Step(f"The first line of {src} is: {line}\nNow I will write it to {dst}.", "",
                   [Call("write_file", {"path": dst, "content": line + "\n"})])
        yield Step(f"I wrote the line to {dst}.", f"Done: {dst} now contains the first line of {src}:\n{line}")

    return Task("copy_line", phrase(c.rng, COPY_LINE, s=src, d=dst), script, {"files": {dst: line + "\n"}}, calls)


# -- arithmetic ------------------------------------------------------------------------------------

_OPS = {"+": ["+", "plus", "and"], "-": ["-", "minus", "take away"], "*": ["*", "times", "x", "multiplied by"],
        "/": ["/", "divided by", "over"], "%": ["mod", "modulo", "%"], "**": ["to the power of", "**", "^"]}
MATH = ["what is {e}?", "what's {e}", "calculate {e}", "compute {e}", "{e}=?", "{e}", "how much is {e}?", "{e} = ?",
        "What is {e}?", "solve {e}", "can you work out {e}", "quick math: {e}", "evaluate {e}", "tell me {e}",
        "whats {e}", "{e}?", "what does {e} equal?", "what do you get for {e}"]
MATH_WORDS = {"+": ["what is the sum of {a} and {b}?", "add {a} and {b}", "add {a} to {b}", "sum {a} and {b}"],
              "-": ["subtract {b} from {a}", "what is the difference between {a} and {b}?"],
              "*": ["multiply {a} by {b}", "what is the product of {a} and {b}?", "multiply {a} and {b}"],
              "/": ["divide {a} by {b}", "what is {a} divided by {b}?"]}


def _number(r: random.Random) -> str:
    roll = r.random()
    if roll < 0.3:
        return str(r.randint(0, 9))
    if roll < 0.6:
        return str(r.randint(10, 99))
    if roll < 0.8:
        return str(r.randint(100, 999))
    if roll < 0.92:
        return str(r.randint(1000, 99999))
    return f"{r.randint(0, 99)}.{r.randint(1, 99)}"


def task_math(c: Ctx) -> Task:
    r = c.rng
    c.fill()
    op = r.choices(list(_OPS), [5, 4, 4, 3, 1, 1])[0]
    a, b = _number(r), _number(r)
    if op in ("/", "%") and float(b) == 0:
        b = str(r.randint(1, 99))
    if op == "**":
        a, b = str(r.randint(0, 20)), str(r.randint(0, 6))
    expr = f"{a} {op} {b}"
    if r.random() < 0.12:  # three numbers
        op2 = r.choice(["+", "-", "*"])
        c3 = _number(r)
        expr = f"({a} {op} {b}) {op2} {c3}" if r.random() < 0.5 else f"{a} {op} {b} {op2} {c3}"
        shown = expr if r.random() < 0.5 else expr.replace(" ", "")
        prompt = phrase(r, MATH, e=shown)
    elif op in MATH_WORDS and r.random() < 0.15:
        prompt = phrase(r, MATH_WORDS[op], a=a, b=b)
    else:
        word = r.choice(_OPS[op])
        if word in ("and", "take away", "over") and r.random() < 0.5:
            word = op
        sp = "" if len(word) <= 2 and r.random() < 0.4 else " "
        prompt = phrase(r, MATH, e=f"{a}{sp}{word}{sp}{b}")
    cmd = f"python3 -c 'print({expr})'"
    calls = [Call("bash", {"command": cmd})]
    goal: dict[str, Any] = {"answer_contains": []}

    def script() -> Script:
        (out,) = yield Step(f"The user wants {expr} computed. I will let Python do the arithmetic.", "", calls)
        text, code = bash_output(out)
        text = text.strip()
        assert code == 0 and text and "\n" not in text and len(text) < 60, out
        goal["answer_contains"].append(text)
        yield Step(f"Python printed {text}.", f"{expr} = {text}")

    return Task("math", prompt, script, goal, calls)


# -- no tools ------------------------------------------------------------------------------------

GREETINGS = ["hello", "hi", "hey", "hi there", "hello!", "Hi!", "good morning", "hey there", "yo", "hiya",
             "greetings", "howdy", "hello there!", "good evening", "hi :)", "Hello, how are you?", "sup",
             "hey, how's it going?"]
WHO_ASK = ["who are you?", "what are you?", "hello! who are you?", "Who am I talking to?", "are you a model?",
           "what's your name?", "introduce yourself", "which model are you", "are you Kimi K3?", "hello, who is this?",
           "tell me about yourself", "what model is this?"]
CAN_ASK = ["what can you do?", "help", "what can you help me with?", "what are you able to do", "how can you help?",
           "What are your capabilities?", "what do you know how to do?", "show me what you can do", "what tasks can you do",
           "can you help me?", "what are you good at?", "list your skills", "hey there, what can you help with",
           "what kind of things can I ask you?", "usage?", "?"]
THANKS = ["thanks!", "thank you", "thx", "great, thanks", "ok thanks", "cool", "nice, thank you!", "perfect", "ok", "bye"]


def task_hello(c: Ctx) -> Task:
    r = c.rng
    c.fill()
    roll = r.random()
    if roll < 0.35:
        prompt, reasoning, content = phrase(r, GREETINGS, polite=False), "The user is greeting me. No tools are needed.", HELLO
    elif roll < 0.6:
        prompt, reasoning, content = phrase(r, WHO_ASK, polite=False), "The user asks who I am. No tools are needed.", WHO
    elif roll < 0.88:
        prompt, reasoning = phrase(r, CAN_ASK, polite=False), "The user asks what I can do. No tools are needed."
        content = f"I am k3-tiny, a small test model. {CAN}"
    else:
        prompt, reasoning, content = phrase(r, THANKS, polite=False), "The user thanks me. No tools are needed.", \
            "You're welcome!"

    def script() -> Script:
        yield Step(reasoning, content)

    ans = "welcome" if content.startswith("You're") else "k3-tiny"
    return Task("hello", prompt, script, {"answer_contains": [ans]}, [])


def task_repeat(c: Ctx) -> Task:
    r = c.rng
    c.fill()
    if r.random() < 0.3:
        ws = [c.word() for _ in range(1 if r.random() < 0.75 else 2)]
        name = " ".join(w if w[:1].isupper() else w.capitalize() for w in ws)
        prompt = phrase(r, ["Say hello to {n}.", "Greet {n}.", "Please greet {n}.", "say hi to {n}"], n=name)
        reasoning, content = f"The user wants me to greet {name}. No tools are needed.", f"Hello, {name}!"
    else:
        roll = r.random()
        words = (" ".join(c.filler() for _ in range(r.randint(1, 5))) if roll < 0.3 else c._pool_line("prose")
                 if roll < 0.55 else c._pool_line("code") if roll < 0.7 else c.sentence() if roll < 0.85 else c.wild())
        prompt = phrase(r, ["Repeat after me: {t}", "Say exactly this: {t}", "Repeat this text: {t}", "repeat: {t}",
                            "say {t}", "echo back: {t}"], polite=False, t=words)
        reasoning, content = "The user wants me to repeat some words. No tools are needed.", words

    def script() -> Script:
        yield Step(reasoning, content)

    return Task("repeat", prompt, script, {"answer_contains": [content]}, [])


_TOPICS = ["the ocean", "cats", "love", "autumn", "my dog", "the moon", "coffee", "python", "the city", "friendship", "rain"]
_CITIES = ["Rome", "London", "Tokyo", "Berlin", "New York", "Lagos", "Lima", "Sydney", "Beijing", "Cairo", "Oslo"]
_LANGS = ["French", "German", "Spanish", "Chinese", "Japanese", "Italian", "Russian", "Hindi", "Portuguese"]
HONEST_ASK = [
    "write me a {kind} about {topic}", "tell me a joke", "write a {kind} about {topic}", "compose a {kind} on {topic}",
    "what's the weather in {city}?", "what's the weather in {city} right now", "what is the weather like in {city} today", "what time is it in {city}?",
    "what is the capital of {country}?", "who is the president of {country}?", "who won the {event} in {year}?",
    "when was {person} born?", "what's the news today?", "recommend a good {media}", "what is the meaning of life?",
    "fix the {bug} in {p}", "refactor {p}", "refactor {p} to use {thing}", "explain {p}", "explain how {p} works",
    "summarize {p}", "translate {p} into {lang}", "add type hints to {p}", "write unit tests for {p}",
    "optimize {p}", "make {p} faster", "review the code in {p}", "add error handling to {p}", "convert {p} to {plang}",
    "find the bugs in {p}", "document {p}", "add comments to {p}", "why does {p} fail?", "debug {p}",
    "format {p} properly", "lint the project", "commit my changes", "push this to github", "open a pull request",
    "install {pkg}", "pip install {pkg}", "deploy this to {env}", "deploy the app", "set up CI for this repo",
    "build me a website", "create a REST API", "train a neural network", "send an email to {person}",
    "book a flight to {city}", "order a pizza", "download {url}", "what's the price of bitcoin?",
    "open {url} in the browser", "make it better", "fix everything", "why is it broken?", "do something cool",
    "improve the code", "write a function that sorts a list", "implement a linked list in {plang}",
    "what is a monad?", "how do I center a div?", "explain recursion", "write a README for this project",
    "translate '{t}' into {lang}", "summarize this project", "what did I do yesterday?", "remember that I like {topic}",
    "play some music", "set a timer for 5 minutes", "call mom", "draw a picture of {topic}", "{salad}",
    "bonjour, comment ça va ?", "hola, ¿qué tal?", "wie spät ist es?",
]
_KINDS = ["poem", "story", "song", "haiku", "joke", "essay", "limerick", "short story"]
_COUNTRIES = ["France", "Japan", "Kenya", "Brazil", "Canada", "India", "Peru", "Norway", "Egypt"]
_EVENTS = ["Euro cup", "Super Bowl", "Tour de France", "election", "Nobel prize", "Champions League"]
_PEOPLE = ["Ada Lovelace", "Alan Turing", "my boss", "Marie Curie", "Bob", "Alice", "the team"]
_MEDIA = ["book", "movie", "restaurant", "TV show", "laptop", "podcast"]
_BUGS = ["bug", "typo", "error", "tests", "crash", "spelling", "problem", "warnings"]
_THINGS = ["classes", "async", "a main function", "dataclasses", "type hints", "logging", "f-strings"]
_PLANGS = ["Rust", "Go", "JavaScript", "C++", "Java", "TypeScript", "Haskell"]
_PKGS = ["numpy", "requests", "django", "react", "docker", "node", "flask", "pytorch"]


def task_honest(c: Ctx) -> Task:
    r = c.rng
    c.fill()
    p = c.pick()
    slots = {"kind": r.choice(_KINDS), "topic": r.choice([*_TOPICS, c.filler().lower()]), "city": r.choice(_CITIES),
             "country": r.choice(_COUNTRIES), "event": r.choice(_EVENTS), "year": str(r.randint(1950, 2030)),
             "person": r.choice(_PEOPLE), "media": r.choice(_MEDIA), "bug": r.choice(_BUGS), "p": p,
             "thing": r.choice(_THINGS), "lang": r.choice(_LANGS), "plang": r.choice(_PLANGS), "pkg": r.choice(_PKGS),
             "url": f"https://{c.filler().lower()}.{r.choice(['com', 'org', 'io'])}", "t": c.sentence(),
             "salad": " ".join(c.filler() for _ in range(r.randint(2, 6))),
             "env": r.choice(["staging", "the server", "AWS", "heroku", "prod", "the cloud"])}
    prompt = phrase(r, HONEST_ASK, **slots)

    def script() -> Script:
        yield Step("This is outside what I can do: I only know a few file, shell and arithmetic chores. I will say so.",
                   HONEST)

    return Task("honest", prompt, script, {"answer_contains": ["k3-tiny"], "files_unchanged": True}, [])


TASKS: dict[str, Callable[[Ctx], Task]] = {
    "first_line": task_first_line, "line": task_line, "last_line": task_last_line, "show": task_show,
    "two_files": task_two_files, "count": task_count, "list": task_list, "run": task_run,
    "background": task_background, "echo": task_echo, "grep": task_grep, "create": task_create,
    "append": task_append, "replace": task_replace, "copy": task_copy, "copy_line": task_copy_line,
    "math": task_math, "hello": task_hello, "repeat": task_repeat, "honest": task_honest,
}
WEIGHTS = {"first_line": 2.5, "line": 2, "last_line": 1.5, "show": 2.5, "two_files": 1.5, "count": 2.5, "list": 2.5,
           "run": 2.5, "background": 0.8, "echo": 1.5, "grep": 2.5, "create": 2.5, "append": 2, "replace": 3,
           "copy": 2, "copy_line": 1.5, "math": 3, "hello": 1.5, "repeat": 1, "honest": 2.5}
"""Draw weights of the shapes in training (held-out sets take the shapes in equal shares)."""


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


def sample_episode(rng: random.Random, pools: Pools, *, kinds: Sequence[str] | None = None,
                   n_tasks: int | None = None, settings: tuple[bool, str | None] | None = None,
                   realistic: float = 0.2, files: dict[str, str] | None = None,
                   agents_md: float = 0.03, forbidden_requests: frozenset[str] = frozenset()) -> Episode:
    """One random episode: ``n_tasks`` tasks on one sandbox (default: 1, sometimes 2, rarely 3-6,
    which makes the long sequences), each task a new run of the agent on the same conversation,
    built on the sandbox as the earlier tasks left it.

    ``realistic``: probability of a sandbox of common file names and harvested lines only;
    ``files``: a given sandbox (e.g. examples/sample_workspace) instead of a random one;
    ``agents_md``: probability of a root AGENTS.md (its text joins the system prompt, as the
    harness does); ``forbidden_requests``: normalized requests never drawn (the free phrasings)."""
    from phrasings import normalized

    from kimik3.agents import CODING_INSTRUCTIONS

    names = list(kinds or TASKS)
    weights = [WEIGHTS[k] for k in names]
    is_real = rng.random() < realistic
    if n_tasks is None:
        roll = rng.random()
        n_tasks = 1 if roll < 0.80 else 2 if roll < 0.93 else rng.randint(3, 6)
    thinking, effort = settings or sample_settings(rng)
    with_agents = files is None and rng.random() < agents_md
    sb = sandbox()
    for attempt in range(30):  # a rare clash (e.g. an edit that became ambiguous): draw again
        c = Ctx(rng, pools, realistic=is_real, files=files)
        try:
            if with_agents:
                c.files["AGENTS.md"] = "".join(c.line("AGENTS.md") + "\n" for _ in range(rng.randint(1, 4)))
            messages: list[dict[str, Any]] = []
            kinds_done: list[str] = []
            goals: list[dict[str, Any]] = []
            initial: dict[str, str] = {}
            first: list[dict[str, Any]] = []
            for k in range(n_tasks):
                task = TASKS[rng.choices(names, weights)[0]](c)
                if normalized(task.prompt) in forbidden_requests:
                    raise AssertionError("a free phrasing")
                if k == 0:
                    initial = dict(c.files)
                    sb.reset(c.files)
                    messages.append({"role": "system", "content": sb.system_prompt(CODING_INSTRUCTIONS)})
                else:
                    sb.sync(c.files)
                first = run_task(sb, task, messages, thinking=thinking, rng=rng)
                kinds_done.append(task.kind)
                goals.append(task.goal)
                c.files = sb.state()
            return Episode(kind=kinds_done, messages=messages, thinking=thinking, effort=effort, goals=goals,
                           files=initial, first_calls=first)
        except (AssertionError, IndexError):  # IndexError: e.g. the first line of a file an earlier run emptied
            if attempt == 29:
                raise
    raise AssertionError("unreachable")
