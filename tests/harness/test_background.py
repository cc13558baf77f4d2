"""Background processes: a real HTTP server started by one tool call, queried by a later one, and
ended when the run ends; daemons that leave every trace behind ended too (checked in /proc, not
by timing), with and without the sandbox."""

from __future__ import annotations

import os
import re
import socket
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import anyio
import pytest

from kimik3 import ScriptedEngine
from kimik3._exceptions import ToolError
from kimik3.harness import FEATURES, BackgroundProcesses, CodingHarness

from ..procs import MODES, alive_with, marker
from .helpers import answer, calls

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs Linux /proc")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def until(check: object, seconds: float = 20.0) -> None:
    """Wait until ``check()`` is true (a generous bound: a hang fails, a slow machine does not)."""
    with anyio.fail_after(seconds):
        while not check():  # type: ignore[operator]
            await anyio.sleep(0.02)


async def until_ended(procs: BackgroundProcesses, pid: str) -> None:
    await until(lambda: pid not in procs.running())


@pytest.mark.parametrize("mode", MODES)
async def test_http_server_in_the_background_is_queried_later_and_ended_at_run_end(tmp_path: Path,
                                                                                   mode: str) -> None:
    (tmp_path / "index.html").write_text("hello from the workspace\n")
    port = free_port()
    server = f"{sys.executable} -m http.server {port} --bind 127.0.0.1"
    fetch = (f"{sys.executable} -c \"import time,urllib.request\nfor _ in range(400):\n try:\n"
             f"  print(urllib.request.urlopen('http://127.0.0.1:{port}/index.html').read().decode()); break\n"
             " except OSError: time.sleep(0.05)\"")
    seen: dict[str, list[int]] = {}

    def script(messages: list) -> str:  # type: ignore[type-arg]
        n = sum(m.role == "assistant" for m in messages)
        if n == 0:
            return calls(("bash", {"command": server, "background": True}))
        if n == 1:
            return calls(("bash", {"command": fetch}))
        if n == 2:
            seen["during"] = alive_with(f"http.server {port} ")
            return calls(("read_output", {"id": "bg1"}))
        return answer("served")

    harness = CodingHarness(tmp_path, features=FEATURES - {"subagents"}, sandbox=mode)
    result = await harness.agent(engine=ScriptedEngine(script)).run("serve it")
    texts = [m.content for m in result.messages if m.role == "tool"]
    assert texts[0] == 'Started background process bg1; read_output("bg1") shows its output, stop("bg1") ends it'
    assert texts[1].startswith("hello from the workspace\n[exit code: 0,")
    assert '"GET /index.html HTTP/1.1" 200' in texts[2] and re.search(r"\[bg1: running for \d+ s\]$", texts[2])
    assert len(seen["during"]) == 1  # it really ran (bash -c execs the one command: one process)
    assert alive_with(f"http.server {port} ") == []  # and nothing of it is left after the run
    assert not harness.sandbox.running
    with socket.socket() as s:  # nothing listens on the port any more (TIME_WAIT allowed)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))


@pytest.mark.parametrize("mode", MODES)
async def test_stop_ends_every_process_and_reports_the_status(tmp_path: Path, mode: str) -> None:
    procs = BackgroundProcesses(tmp_path, sandbox=mode)
    m = marker()
    pid = procs.start(f"sleep {m} & sleep {m} & echo started; wait")
    await until(lambda: len(alive_with(m)) == 3)  # the shell and its two sleeps
    out = await procs.stop(pid)
    assert out == "started\n[bg1: stopped]"
    assert alive_with(m) == []
    assert procs.read_output(pid) == "[no new output]\n[bg1: stopped]"
    await procs.close()


async def test_exit_code_and_unknown_id(tmp_path: Path) -> None:
    procs = BackgroundProcesses(tmp_path)
    pid = procs.start("echo out; exit 3")
    await until_ended(procs, pid)
    assert procs.read_output(pid) == "out\n[bg1: exited with code 3]"
    with pytest.raises(Exception, match=r"no background process 'bg9'; started in this run: bg1"):
        procs.read_output("bg9")
    await procs.close()
    assert not procs.sandbox.running  # its own sandbox ends with it


async def test_a_run_that_crashes_still_ends_its_background_processes(tmp_path: Path) -> None:
    from kimik3._exceptions import APIConnectionError

    m = marker()
    during: list[list[int]] = []
    started: list[str] = []

    def script(messages: list) -> str:  # type: ignore[type-arg]
        if not any(m_.role == "tool" for m_ in messages):
            return calls(("bash", {"command": f"sleep {m}", "background": True}))
        started.append(str(messages[-1].content))
        deadline = time.monotonic() + 60  # it starts (a generous bound for a loaded CI machine)...
        while not alive_with(m) and time.monotonic() < deadline:
            time.sleep(0.02)
        during.append(alive_with(m))  # ... and still runs when the engine fails
        raise APIConnectionError("the engine went away")

    harness = CodingHarness(tmp_path, features=FEATURES - {"subagents", "checkpoints"})
    with pytest.raises(APIConnectionError):
        await harness.agent(engine=ScriptedEngine(script)).run("go")
    assert started[0].startswith("Started background process bg1"), started
    assert during[0], f"the background job never showed in /proc: {started}"
    assert alive_with(m) == []


async def test_read_output_of_a_flood_reads_only_head_and_tail(tmp_path: Path) -> None:
    """40 MB of output: read_output returns max_output_chars at most and never holds the flood."""
    procs = BackgroundProcesses(tmp_path, max_output_chars=1000)
    tracemalloc.start()
    try:
        pid = procs.start("printf 'FIRST\\n'; head -c 40000000 /dev/zero | tr '\\0' x; printf '\\nLAST\\n'")
        await until_ended(procs, pid)
        out = procs.read_output(pid)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        await procs.close()
    assert peak < 1_000_000  # the flood went through a bounded buffer, never to memory (or a log file)
    assert out.startswith("FIRST\nxxx") and out.endswith("xxx\nLAST\n[bg1: exited with code 0]")
    head, marker_, tail = out.partition("\n... [")
    kept = len(head) + len(tail.split("] ...\n", 1)[1].removesuffix("\n[bg1: exited with code 0]")) + 1
    assert marker_ and f"{40_000_012 - kept} bytes elided" in tail
    assert len(out) <= 1000 + len("\n[bg1: exited with code 0]")


async def test_a_flood_fills_no_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 26: a background log grew 2.1 GB in 3 s. Now 200 MB pass through and nothing is
    written: no file in the temporary directory or the workspace; the buffer stays bounded."""
    tmp, ws = tmp_path / "tmp", tmp_path / "ws"
    tmp.mkdir()
    ws.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    procs = BackgroundProcesses(ws, max_output_chars=1000)
    pid = procs.start("head -c 200000000 /dev/zero")
    await until(lambda: procs._procs[pid].capture.total > 1_000_000)  # flowing
    assert list(tmp.iterdir()) == [] and list(ws.iterdir()) == []
    await until_ended(procs, pid)
    out = procs.read_output(pid)
    await procs.close()
    assert out.endswith("[bg1: exited with code 0]")
    assert int(out.split("\n... [")[1].split(" bytes")[0]) == 200_000_000 - 2 * 460  # all of it went through


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("daemonize", [
    "setsid sleep {m} &",  # a new session and group
    "unset KIMIK3_BACKGROUND; setsid sleep {m} &",  # issue 26: dropping the old tracking tag
    "env -i setsid sleep {m} &",  # an empty environment
    "nohup setsid sleep {m} > /dev/null 2>&1 &",
    "(sh -c 'trap \"\" TERM HUP; exec setsid sleep {m}' &) &",  # a double fork that ignores SIGTERM
    "setsid sh -c 'sleep {m} & exec >&- 2>&-; wait' < /dev/null &",  # closes every descriptor
    "kill -9 $PPID; sleep {m}",  # kills its own reaper
])
async def test_daemons_are_ended_however_they_leave(tmp_path: Path, mode: str, daemonize: str) -> None:
    """Each way to leave the process group, the session or the environment: close() still ends
    it, and the /proc of the host has none of it left."""
    procs = BackgroundProcesses(tmp_path, sandbox=mode)
    m = marker()
    pid = procs.start(daemonize.format(m=m) + "\nsleep 0.2; exit 0")
    await until(lambda: alive_with(m))
    assert procs.running() == [pid]
    await procs.close()
    assert procs.running() == []
    assert alive_with(m) == []


@pytest.mark.parametrize("mode", MODES)
async def test_stop_ends_a_daemon_that_ignores_sigterm(tmp_path: Path, mode: str) -> None:
    procs = BackgroundProcesses(tmp_path, sandbox=mode)
    m = marker()
    pid = procs.start(f"setsid sh -c 'trap \"\" TERM; sleep {m}; sleep {m}' & echo up")
    await until(lambda: alive_with(m) and procs.running() == [pid] and procs._procs[pid].cmd.exit_code == 0)
    assert procs.read_output(pid) == "up\n[bg1: exited with code 0]"  # the shell is done, its daemon not
    assert procs.running() == [pid]
    assert await procs.stop(pid) == "[no new output]\n[bg1: exited with code 0]"
    assert alive_with(m) == [] and procs.running() == []
    await procs.close()


async def test_at_most_max_running_at_once(tmp_path: Path) -> None:
    procs = BackgroundProcesses(tmp_path, max_running=2)
    try:
        procs.start("sleep 300")
        procs.start("sleep 300")
        with pytest.raises(ToolError, match=r"^2 background processes are running \(bg1, bg2\), the limit; stop"):
            procs.start("sleep 300")
        assert procs.running() == ["bg1", "bg2"]
        await procs.stop("bg1")
        assert procs.start("echo ok") == "bg3"
    finally:
        await procs.close()
    assert procs.running() == []


async def test_waiting_on_a_silent_job_is_not_taken_for_a_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 41's loop breaker must not end a run that polls a long, silent job (a build): each
    poll says for how long the job has run, so two polls a second apart differ. The clock is
    advanced 5 s a poll; twelve polls, then the answer."""
    import kimik3.harness._background as background

    clock = [1000.0]
    monkeypatch.setattr(background, "_now", lambda: clock[0])  # the jobs' clock only, not the event loop's
    polls: list[str] = []

    def script(messages: list) -> str:  # type: ignore[type-arg]
        n = sum(m.role == "assistant" for m in messages)
        if n == 0:
            return calls(("bash", {"command": "sleep 300", "background": True}))
        if n <= 12:
            polls.append(str(messages[-1].content))
            clock[0] += 5
            return calls(("read_output", {"id": "bg1"}))
        polls.append(str(messages[-1].content))
        return answer("still building")

    agent = CodingHarness(tmp_path, sandbox="none", features=FEATURES - {"checkpoints"}).agent(
        engine=ScriptedEngine(script))
    result = await agent.run("wait for the build")
    assert (result.stop_reason, result.output) == ("completed", "still building")
    assert [p.splitlines()[-1] for p in polls[1:4]] == ["[bg1: running for 5 s]", "[bg1: running for 10 s]",
                                                         "[bg1: running for 15 s]"]
    assert not any("repeat" in issue for issue in result.issues)
