"""The coding tools against hostile workspaces (issue 15): nothing hangs, nothing blows memory,
nothing leaves the workspace. Anything that could hang runs in a child process with a generous
limit (never a wall-clock assert); memory is measured through ru_maxrss in a child."""

from __future__ import annotations

import ctypes
import json
import os
import re
import socket
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from kimik3.tools import Tool, coding
from kimik3.tools.coding import Sandbox, coding_tools
from kimik3.tools.coding._sandbox import Command

from ..procs import alive_with, marker

REPO = Path(__file__).resolve().parents[2]
CHILD_LIMIT_S = 120


def run_child(code: str, *args: str) -> str:
    """Run ``code`` in a fresh interpreter (``sys.argv[1:]`` = ``args``); its stdout."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True, text=True, timeout=CHILD_LIMIT_S, env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


# The child's preamble: the tools bound to argv[1], and call(name, **args) -> result text.
TOOLS = """
import json, sys, anyio
from kimik3.tools import coding
from kimik3.tools.coding import coding_tools
tools = {t.name: t for t in coding_tools(sys.argv[1])}
def call(name, **args):
    return anyio.run(tools[name].run, args).content
"""


async def _text(t: Tool, **args: object) -> str:
    result = await t.run(args)
    assert isinstance(result.content, str)
    return result.content


# -- 1. nothing blocks: special files, slow patterns, budgets, Ctrl-C -------------------------


def _special_files(ws: Path) -> None:
    os.mkfifo(ws / "fifo")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(ws / "sock"))  # the socket file stays after the socket is closed
    sock.close()
    (ws / "to_fifo").symlink_to("fifo")
    (ws / "dir").mkdir()
    os.mkfifo(ws / "dir" / "p")
    (ws / "dir" / "ok.txt").write_text("fine hit\n")


def test_special_files_are_refused_before_any_blocking_open(ws: Path) -> None:
    _special_files(ws)
    out = run_child(
        TOOLS + """
coding._search.rg_path = lambda: None  # the Python fallback walks the FIFO's directory too
for name, args in [
    ("read_file", {"path": "fifo"}),
    ("read_file", {"path": "to_fifo"}),
    ("write_file", {"path": "fifo", "content": "x"}),
    ("edit_file", {"path": "fifo", "old_string": "a", "new_string": "b"}),
    ("read_file", {"path": "sock"}),
    ("grep", {"pattern": "x", "path": "fifo"}),
    ("grep", {"pattern": "hit", "path": "dir"}),
]:
    print(call(name, **args))
""",
        str(ws),
    )
    fifo = "is a FIFO (named pipe), not a regular file; the file tools only open regular files (use bash for others)"
    assert out.splitlines() == [
        f"Error: ToolError: fifo {fifo}",
        f"Error: ToolError: to_fifo {fifo}",
        f"Error: ToolError: fifo {fifo}",
        f"Error: ToolError: fifo {fifo}",
        "Error: ToolError: sock is a socket, not a regular file; the file tools only open regular files (use bash "
        "for others)",
        f"Error: ToolError: fifo {fifo}",
        "dir/ok.txt:1:fine hit",
    ]


@pytest.mark.skipif(coding._search.rg_path() is None, reason="ripgrep (rg) is not installed")
def test_ripgrep_skips_special_files(ws: Path) -> None:
    _special_files(ws)
    assert run_child(TOOLS + "print(call('grep', pattern='hit'))", str(ws)) == "dir/ok.txt:1:fine hit\n"


def test_catastrophic_pattern_in_the_python_fallback_ends(ws: Path) -> None:
    (ws / "evil.txt").write_text("a" * 40 + "!\n" + "plain\n")
    out = run_child(
        TOOLS + """
coding._search.rg_path = lambda: None
coding._search.GREP_TIMEOUT_S = 1.0
print(call("grep", pattern="(a+)+$"))  # hangs Python's re; the regex module finds no match at once
print(call("grep", pattern="(a|a)+$"))  # exponential in the regex module too: stopped by its timeout
print(call("grep", pattern="plain"))
""",
        str(ws),
    )
    assert out.splitlines() == [
        "[no matches]",
        "[no matches; the search stopped after 1 s (a slow pattern?)]",
        "evil.txt:2:plain",
    ]


AGENT = """
import sys, threading, anyio
from kimik3 import Agent, Budgets, ScriptedEngine, tool
from kimik3.formats.k3 import render_output

started = threading.Event()

@tool
def stuck() -> str:
    \"\"\"Blocks forever (a FIFO nobody writes, a hung NFS read).\"\"\"
    started.set()
    threading.Event().wait()
    return "never"

calls = render_output({"reasoning_content": "r", "content": "",
                       "tool_calls": [{"id": "x", "function": {"name": "stuck", "arguments": "{}"}}]})
answer = render_output({"reasoning_content": "r", "content": "summary"})
"""


def test_time_budget_ends_a_run_blocked_in_a_sync_tool() -> None:
    out = run_child(
        AGENT + """
engine = ScriptedEngine([calls, answer])
r = anyio.run(Agent(tools=[stuck], engine=engine, budgets=Budgets(seconds=1)).run, "go")
print(r.stop_reason, r.output)
print([m.content for m in r.messages if m.role == "tool"])
"""
    )  # and the interpreter exits although the tool's thread is still blocked
    first, second = out.splitlines()
    assert first == "time_budget summary"
    # the agent hands the tool what was left of the budget as its limit (how much depends on load)
    assert re.fullmatch(r"\['Error: ToolTimeoutError: stuck did not finish within \d+(\.\d+)? s and was abandoned "
                        r"\(its thread may still be running\)'\]", second), second


def test_ctrl_c_in_the_cli_ends_a_run_blocked_in_a_sync_tool() -> None:
    code = AGENT + """
import os, signal
from kimik3.cli.progress import PlainProgress
from kimik3.cli.run import execute

async def main() -> int:
    engine = ScriptedEngine([calls, answer])
    async def interrupt() -> None:
        while not started.is_set():  # Ctrl-C while the tool is blocked
            await anyio.sleep(0.01)
        os.kill(os.getpid(), signal.SIGINT)
    async with anyio.create_task_group() as tg:
        tg.start_soon(interrupt)
        await Agent(tools=[stuck], engine=engine).run("go")
    return 0

print("exit code", execute(main, PlainProgress()))
"""
    assert run_child(code) == "exit code 130\n"


# -- 2. TOCTOU and hard links ----------------------------------------------------------------


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    out = tmp_path / "outside"
    out.mkdir()
    (out / "secret.txt").write_text("secret\n")
    return out


_LIBC = ctypes.CDLL(None, use_errno=True)
_HAS_EXCHANGE = hasattr(_LIBC, "renameat2")


class Swapper:
    """Exchanges ``ws/d`` (a real directory) and ``ws/dlink`` (a symlink to ``outside``) atomically
    (``renameat2(RENAME_EXCHANGE)``) as fast as it can: ``d`` always exists, and is a directory or
    a link to outside at any instant. On the old check-then-open code this leaked writes, edits
    and reads outside within a few calls."""

    def __init__(self, ws: Path, outside: Path) -> None:
        self.ws, self.outside = ws, outside
        self.stop = threading.Event()
        self.swaps = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        a, b = os.fsencode(self.ws / "d"), os.fsencode(self.ws / "dlink")
        while not self.stop.is_set():
            assert _LIBC.renameat2(-100, a, -100, b, 2) == 0, ctypes.get_errno()  # AT_FDCWD, RENAME_EXCHANGE
            self.swaps += 1

    def __enter__(self) -> Swapper:
        (self.ws / "d").mkdir()
        (self.ws / "d" / "secret.txt").write_text("inside\n")
        (self.ws / "dlink").symlink_to(self.outside)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


@pytest.mark.skipif(not _HAS_EXCHANGE, reason="needs renameat2 (Linux, glibc >= 2.28)")
async def test_racing_swapper_never_leads_outside(tools: dict[str, Tool], ws: Path, outside: Path) -> None:
    seen: list[str] = []
    with Swapper(ws, outside) as swapper:
        for i in range(300):
            seen.append(await _text(tools["write_file"], path=f"d/new{i}.txt", content="x"))
            seen.append(await _text(tools["read_file"], path="d/secret.txt"))
            seen.append(await _text(tools["edit_file"], path="d/secret.txt", old_string="side", new_string="SIDE"))
            seen.append(await _text(tools["grep"], pattern="secret", path="d"))
    assert swapper.swaps > 300
    assert sorted(os.listdir(outside)) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "secret\n"
    assert [s for s in seen if "\tsecret" in s or s.startswith("d/secret.txt:1:secret")] == []
    assert any(s.startswith("Wrote 1 bytes to d/new") for s in seen)  # the race was run: some calls landed
    assert [s for s in seen if s.startswith("Error:") and not s.startswith("Error: ToolError: ")] == []


async def test_hard_links_are_not_written_by_default(ws: Path, outside: Path) -> None:
    os.link(outside / "secret.txt", ws / "hl.txt")
    tools = {t.name: t for t in coding_tools(ws)}
    refused = (
        "Error: ToolError: hl.txt has 2 hard links (it may be a file outside the workspace too); not written. "
        "Use bash to change it if that is intended"
    )
    assert await _text(tools["write_file"], path="hl.txt", content="x") == refused
    assert await _text(tools["edit_file"], path="hl.txt", old_string="secret", new_string="x") == refused
    assert await _text(tools["read_file"], path="hl.txt") == "     1\tsecret"  # reading is allowed (documented)
    assert (outside / "secret.txt").read_text() == "secret\n"
    allowed = {t.name: t for t in coding_tools(ws, write_hard_links=True)}
    assert await _text(allowed["edit_file"], path="hl.txt", old_string="secret", new_string="shared") == (
        "Edited hl.txt (1 replacement)\n--- a/hl.txt\n+++ b/hl.txt\n@@ -1 +1 @@\n-secret\n+shared"
    )
    assert (outside / "secret.txt").read_text() == "shared\n"


async def test_symlink_chains_inside_and_out(tools: dict[str, Tool], ws: Path, outside: Path) -> None:
    (ws / "a").mkdir()
    (ws / "a" / "f.txt").write_text("inner\n")
    (ws / "abs").symlink_to(ws / "a")  # absolute target inside
    (ws / "rel").symlink_to("abs/../a")  # relative, through another link
    (ws / "loop").symlink_to("loop")
    (ws / "out").symlink_to(outside / "secret.txt")
    (ws / "a" / "up").symlink_to("../../outside")
    assert await _text(tools["read_file"], path="abs/f.txt") == "     1\tinner"
    assert await _text(tools["read_file"], path="rel/f.txt") == "     1\tinner"
    assert await _text(tools["read_file"], path="loop") == (
        "Error: ToolError: cannot resolve path 'loop': too many levels of symbolic links"
    )
    for path in ("out", "a/up/secret.txt", "rel/up/secret.txt"):
        assert await _text(tools["read_file"], path=path) == (
            f"Error: ToolError: path {path!r} is outside the workspace {ws}; use a path inside it"
        )
    assert await _text(tools["write_file"], path="a/up/new.txt", content="x") == (
        f"Error: ToolError: path 'a/up/new.txt' is outside the workspace {ws}; use a path inside it"
    )
    assert sorted(os.listdir(outside)) == ["secret.txt"]


# -- 3. memory -------------------------------------------------------------------------------


MEMORY = TOOLS + """
import resource
def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
call("read_file", path="small.txt")  # warm up imports and threads
base = peak_mb()
text = call(sys.argv[2], **eval(sys.argv[3]))
print(json.dumps({"growth_mb": peak_mb() - base, "text": text}))
"""


LOG_LINE = b"2026-11-30 12:00:00 INFO request handled in 12 ms by worker 7 of the pool\n"
LOG_LINES = 64 * 1024 * 1024 // len(LOG_LINE) - 1  # 906,875 lines, just under 64 MiB


def _big_files(ws: Path) -> None:
    (ws / "small.txt").write_text("x\n")
    line = LOG_LINE
    with open(ws / "log.txt", "wb") as f:
        for _ in range(LOG_LINES):
            f.write(line)
    with open(ws / "one_line.txt", "wb") as f:  # 60 MB without a newline
        for _ in range(60):
            f.write(b"y" * (1 << 20))


@pytest.fixture
def big(ws: Path) -> Path:
    _big_files(ws)
    return ws


def _measure(ws: Path, tool: str, args: dict[str, object]) -> tuple[float, str]:
    out = json.loads(run_child(MEMORY, str(ws), tool, repr(args)))
    return out["growth_mb"], out["text"]


def test_reading_five_lines_of_a_64_mb_log_stays_small(big: Path) -> None:
    growth, text = _measure(big, "read_file", {"path": "log.txt", "limit": 5})
    lines = text.split("\n")
    assert lines[0] == "     1\t2026-11-30 12:00:00 INFO request handled in 12 ms by worker 7 of the pool"
    assert lines[5] == f"[{LOG_LINES - 5} more lines; continue with offset=6]"
    print(f"read_file 5 lines of a 64 MB log: peak memory +{growth:.1f} MB")
    assert growth < 16, growth


def test_reading_a_60_mb_single_line_stays_small(big: Path) -> None:
    growth, text = _measure(big, "read_file", {"path": "one_line.txt"})
    assert text == "     1\t" + "y" * 2000 + f"... [{60 * (1 << 20) - 2000} more characters]"
    print(f"read_file of a 60 MB single line: peak memory +{growth:.1f} MB")
    assert growth < 16, growth


def test_grep_stops_at_its_count_cap_in_bounded_memory(ws: Path) -> None:
    (ws / "small.txt").write_text("x\n")
    with open(ws / "hits.txt", "wb") as f:
        f.write(b"hit\n" * 3_000_000)
    growth, text = _measure(ws, "grep", {"pattern": "hit"})
    lines = text.split("\n")
    assert lines[0] == "hits.txt:1:hit" and lines[199] == "hits.txt:200:hit"
    assert lines[200:] == [
        "[at least 99800 more matching lines not shown]",
        "[counting stopped at 100000 matching lines; results are incomplete]",
    ]
    print(f"grep of 3,000,000 matching lines: peak memory +{growth:.1f} MB")
    assert growth < 32, growth


async def test_edit_size_cap_and_binary_detection_on_the_first_block(tools: dict[str, Tool], ws: Path) -> None:
    with open(ws / "huge.txt", "wb") as f:
        f.truncate(coding._files.MAX_EDIT_BYTES + 1)  # sparse: nothing is read before the refusal
    assert await _text(tools["edit_file"], path="huge.txt", old_string="a", new_string="b") == (
        "Error: ToolError: huge.txt is 10485761 bytes, over edit_file's limit of 10485760 bytes; change it with "
        "bash tools (sed -i, a python script) instead"
    )
    (ws / "late_nul.txt").write_bytes(b"a\n" * 5000 + b"\x00\n")  # NUL after the first 8 KiB block
    assert (await _text(tools["read_file"], path="late_nul.txt", limit=1)).startswith("     1\ta\n[5000 more lines")
    (ws / "early_nul.txt").write_bytes(b"a\n" * 10 + b"\x00")
    assert await _text(tools["read_file"], path="early_nul.txt") == (
        "Error: ToolError: early_nul.txt is a binary file (21 bytes)"
    )


# -- 4. glob ---------------------------------------------------------------------------------


def test_glob_with_self_referencing_symlinks_is_linear(ws: Path) -> None:
    d = ws
    for i in range(12):
        d = d / f"l{i}"
        d.mkdir()
        (d / "f.txt").write_text("")
        (d / "up").symlink_to("..")
        (d / "self").symlink_to(".")
        (d / "root").symlink_to(ws)
    chain = ws / "chain"
    chain.mkdir()
    c = chain
    for _ in range(60):
        c = c / "c"
        c.mkdir()
    out = run_child(
        TOOLS + """
print(json.dumps([call("glob", pattern="**/*.txt"), call("glob", pattern="chain/**/**/**/**/*"),
                  call("glob", pattern="l0/up/l0/f.txt"), call("glob", pattern=".")]))
""",
        str(ws),
    )
    txt, deep, through_link, dot = json.loads(out)
    assert txt.split("\n") == ["/".join(f"l{j}" for j in range(i + 1)) + "/f.txt" for i in range(12)]
    deep_lines = deep.split("\n")
    assert len(deep_lines) == 60 and deep_lines[0] == "chain/c/" and deep_lines[-1] == "chain/" + "c/" * 60
    assert through_link == "[no matches]"  # l0 was already entered as itself: not again through up/
    assert dot == "."


async def test_glob_and_grep_depth_is_bounded(tools: dict[str, Tool], ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    c = ws
    for _ in range(coding._search.MAX_DEPTH + 2):
        c = c / "c"
        c.mkdir()
    (c / "deep.txt").write_text("hit\n")
    (ws / "c" / "shallow.txt").write_text("hit\n")
    assert await _text(tools["glob"], pattern="**/*.txt") == (
        "c/shallow.txt\n[directories more than 128 levels deep were not searched]"
    )
    monkeypatch.setattr(coding._search, "rg_path", lambda: None)
    assert await _text(tools["grep"], pattern="hit") == "c/shallow.txt:1:hit"


async def test_glob_symlinked_directory_inside_is_followed_once(tools: dict[str, Tool], ws: Path) -> None:
    (ws / "real").mkdir()
    (ws / "real" / "a.py").write_text("")
    (ws / "alias").symlink_to("real")
    (ws / "elsewhere").mkdir()
    (ws / "elsewhere" / "b.py").write_text("")
    (ws / "zlink").symlink_to("elsewhere")
    assert await _text(tools["glob"], pattern="**/*.py") == "elsewhere/b.py\nreal/a.py"
    assert await _text(tools["glob"], pattern="alias/*") == "alias/a.py"  # named: followed
    assert await _text(tools["glob"], pattern="*") == "alias/\nelsewhere/\nreal/\nzlink/"


# -- 5. interactive programs -----------------------------------------------------------------


async def test_editors_pagers_and_prompts_fail_fast(tools: dict[str, Tool], ws: Path) -> None:
    out = await _text(tools["bash"], command="echo $PAGER $GIT_PAGER $TERM $GIT_TERMINAL_PROMPT; tty", timeout=60)
    assert out.split("\n")[:2] == ["cat cat dumb 0", "not a tty"]
    git = "git -c user.name=t -c user.email=t@t -c commit.gpgsign=false"
    out = await _text(tools["bash"], command=f"git init -q . && {git} commit --allow-empty", timeout=60)
    lines = out.split("\n")
    assert lines[0].startswith("kimik3: no interactive editor here (asked to edit ")
    assert lines[0].endswith("Give the text on the command line instead: git commit -m MSG, git merge --no-edit, "
                             "git rebase without -i.")
    assert "error: There was a problem with the editor" in out
    assert lines[-1].startswith("[exit code: 1, ")  # not "[timed out after 60 s ...]"
    assert "\x1b" not in out


async def test_escape_codes_are_stripped(tools: dict[str, Tool]) -> None:
    command = r"printf '\033[1;31mred\033[0m \033]0;title\007plain \033(Bdone\n'"
    out = await _text(tools["bash"], command=command)
    assert out.split("\n")[0] == "red plain done"


# -- 6. setsid descendants -------------------------------------------------------------------


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
async def test_setsid_descendants_are_killed_on_timeout(tools: dict[str, Tool], ws: Path) -> None:
    m = marker()
    command = (
        f"setsid sleep {m} > /dev/null 2>&1 & "
        f"(setsid sh -c 'sleep {m} & echo $! > daemon.pid; wait' > /dev/null 2>&1 &); "
        "while [ ! -s daemon.pid ]; do sleep 0.05; done; sleep 30"
    )
    out = await _text(tools["bash"], command=command, timeout=5)
    assert out == "[timed out after 5 s; process group killed]"
    assert alive_with(m) == []


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
async def test_setsid_process_holding_the_output_is_killed(tools: dict[str, Tool]) -> None:
    m = marker()
    out = await _text(tools["bash"], command=f"setsid sleep {m} & echo started")
    started, note, status = out.split("\n")
    assert (started, note) == ("started", "[background processes holding the output were killed]")
    assert status.startswith("[exit code: 0, ")
    assert alive_with(m) == []


def test_reaper_reports_are_parsed(ws: Path) -> None:
    box = Sandbox(ws, "none")
    fds = [os.pipe() for _ in range(3)]
    (out_r, out_w), (r, w), (ctl_r, ctl_w) = fds
    cmd = Command(box, 1, out_r, r, ctl_w, None)
    os.write(w, b"noreaper\nexit -9\nsurvi")
    cmd.poll()
    assert (cmd.exit_code, cmd.contained, cmd.survivors, cmd.closed) == (-9, False, [], False)
    os.write(w, b"vors 12 34\nleft 5\nlimit processes 64\n")
    os.close(w)
    cmd.poll()
    assert (cmd.survivors, cmd.left, cmd.limit, cmd.closed) == ([12, 34], [5], "processes 64", True)
    assert cmd.send(b"q") and os.read(ctl_r, 1) == b"q"
    cmd.close()
    for fd in (out_w, ctl_r):
        os.close(fd)


# -- 7. edits --------------------------------------------------------------------------------


async def test_edit_spanning_a_bare_lf_line_in_a_crlf_file(tools: dict[str, Tool], ws: Path) -> None:
    (ws / "mixed.txt").write_bytes(b"one\r\ntwo\nthree\r\nfour\r\n")
    shown = await _text(tools["read_file"], path="mixed.txt")
    assert shown == "     1\tone\n     2\ttwo\n     3\tthree\n     4\tfour"
    out = await _text(tools["edit_file"], path="mixed.txt", old_string="one\ntwo\nthree", new_string="1\n2\n3\n3b")
    assert out.startswith("Edited mixed.txt (1 replacement)\n")
    assert (ws / "mixed.txt").read_bytes() == b"1\r\n2\n3\r\n3b\r\nfour\r\n"  # each line keeps its own ending
    await _text(tools["edit_file"], path="mixed.txt", old_string="2\r\n3\r\n", new_string="two\n")
    assert (ws / "mixed.txt").read_bytes() == b"1\r\ntwo\n3b\r\nfour\r\n"


async def test_edit_keeps_undecodable_bytes_and_writes_utf8(tools: dict[str, Tool], ws: Path) -> None:
    (ws / "bad.txt").write_bytes(b"na\xc3\xafve \xff caf\xc3\xa9\nline two\n")  # UTF-8 with one bad byte
    assert await _text(tools["read_file"], path="bad.txt") == "     1\tnaïve \\xff café\n     2\tline two"
    await _text(tools["edit_file"], path="bad.txt", old_string="line two", new_string="ligne deux é")
    assert (ws / "bad.txt").read_bytes() == b"na\xc3\xafve \xff caf\xc3\xa9\nligne deux \xc3\xa9\n"
    await _text(tools["edit_file"], path="bad.txt", old_string="café", new_string="thé")
    assert (ws / "bad.txt").read_bytes() == b"na\xc3\xafve \xff th\xc3\xa9\nligne deux \xc3\xa9\n"


async def test_edit_in_a_large_file_diffs_only_the_change(tools: dict[str, Tool], ws: Path) -> None:
    (ws / "big.py").write_text("".join(f"line {i}\n" for i in range(1, 50_001)))
    out = await _text(tools["edit_file"], path="big.py", old_string="line 25000\n", new_string="changed\nadded\n")
    assert out == (
        "Edited big.py (1 replacement)\n--- a/big.py\n+++ b/big.py\n@@ -24997,7 +24997,8 @@\n"
        " line 24997\n line 24998\n line 24999\n-line 25000\n+changed\n+added\n line 25001\n line 25002\n line 25003"
    )


async def test_overlapping_matches_count(tools: dict[str, Tool], ws: Path) -> None:
    (ws / "a.txt").write_text("aaa\n")
    assert await _text(tools["edit_file"], path="a.txt", old_string="aa", new_string="b") == (
        "Error: ToolError: old_string matches 2 times in a.txt; add surrounding lines to make it unique, or set "
        "replace_all to true"
    )
    (ws / "b.txt").write_text("abab\n")
    assert (await _text(tools["edit_file"], path="b.txt", old_string="aba", new_string="x")).startswith(
        "Edited b.txt (1 replacement)"
    )
    assert (ws / "b.txt").read_text() == "xb\n"


# -- 8. file names that are not UTF-8 --------------------------------------------------------


@pytest.fixture(params=["python", "ripgrep"])
def grep_impl(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "python":
        monkeypatch.setattr(coding._search, "rg_path", lambda: None)
    elif coding._search.rg_path() is None:
        pytest.skip("ripgrep (rg) is not installed")
    yield request.param


async def test_odd_file_names_are_shown_escaped(tools: dict[str, Tool], ws: Path, grep_impl: str) -> None:
    (ws / os.fsdecode(b"caf\xe9.txt")).write_text("hit one\n")
    (ws / "two\nlines.txt").write_text("hit two\n")
    out = await _text(tools["grep"], pattern="hit")
    assert sorted(out.split("\n")) == ["caf\\xe9.txt:1:hit one", "two\\nlines.txt:1:hit two"]
    out.encode("utf-8")
    assert sorted((await _text(tools["glob"], pattern="*")).split("\n")) == ["caf\\xe9.txt", "two\\nlines.txt"]


async def test_lone_surrogates_in_arguments_are_typed_errors(tools: dict[str, Tool], ws: Path) -> None:
    assert await _text(tools["write_file"], path="a\ud800.txt", content="x") == (
        "Error: ToolError: invalid path 'a\\ud800.txt'"
    )
    assert await _text(tools["write_file"], path="a.txt", content="x\ud800") == (
        "Error: ToolError: content has a lone surrogate '\\ud800' that UTF-8 cannot hold"
    )
    assert await _text(tools["write_file"], path="b.txt", content="na\u00efve \udcff") == "Wrote 8 bytes to b.txt"
    assert (ws / "b.txt").read_bytes() == b"na\xc3\xafve \xff"  # an escaped byte is written as that byte
    assert not (ws / "a.txt").exists()


async def test_an_agent_run_with_odd_file_names_completes(ws: Path, tmp_path: Path) -> None:
    from kimik3 import Agent, ScriptedEngine
    from kimik3.agents import load_session
    from kimik3.formats.k3 import render_output

    (ws / os.fsdecode(b"caf\xe9.txt")).write_text("")
    calls = render_output({"reasoning_content": "r", "content": "", "tool_calls": [
        {"id": "x", "function": {"name": "glob", "arguments": '{"pattern": "*"}'}}]})
    engine = ScriptedEngine([calls, render_output({"reasoning_content": "r", "content": "done"})])
    session = tmp_path / "s.jsonl"
    r = await Agent(tools=coding_tools(ws), engine=engine).run("list", session=session)
    assert (r.stop_reason, r.output) == ("completed", "done")
    assert [m.content for m in r.messages if m.role == "tool"] == ["caf\\xe9.txt"]
    assert [m.content for m in load_session(session) if m.role == "tool"] == ["caf\\xe9.txt"]


# -- 9. arguments from the model -------------------------------------------------------------


async def test_json_block_holding_a_string_is_a_failed_call(ws: Path) -> None:
    from kimik3 import Agent, ScriptedEngine
    from kimik3.formats.k3 import render_output

    # the encoder's json block, holding a JSON *string* (a double-encoded arguments object)
    text = render_output({"reasoning_content": "r", "content": "", "tool_calls": [
        {"id": "x", "function": {"name": "read_file", "arguments": "{not json"}}]})
    assert text.count("{not json") == 1
    text = text.replace("{not json", '"{\\"path\\": \\"f.txt\\"}"')
    engine = ScriptedEngine([text, render_output({"reasoning_content": "r", "content": "ok"})])
    r = await Agent(tools=coding_tools(ws), engine=engine).run("read")
    assert [m.content for m in r.messages if m.role == "tool"] == [
        "Error: the call was not run: its json arguments block is a JSON string, not an object"
    ]


async def test_dotted_tool_names_round_trip_through_k3() -> None:
    from kimik3 import Agent, ScriptedEngine, tool
    from kimik3.formats.k3 import render_output

    @tool(name="my.namespace.do_thing")
    def do_thing(text: str) -> str:
        """Do it."""
        return text.upper()

    calls = render_output({"reasoning_content": "r", "content": "", "tool_calls": [
        {"id": "x", "function": {"name": "my.namespace.do_thing", "arguments": '{"text": "hi"}'}}]})
    assert '<|open|>call tool="my.namespace.do_thing" index="1"<|sep|>' in calls
    engine = ScriptedEngine([calls, render_output({"reasoning_content": "r", "content": "ok"})])
    r = await Agent(tools=[do_thing], engine=engine).run("go")
    assert [(m.name, m.content) for m in r.messages if m.role == "tool"] == [("my.namespace.do_thing", "HI")]
