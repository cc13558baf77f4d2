"""Background processes: a real HTTP server started by one tool call, queried by a later one, and
ended when the run ends (checked in /proc, not by timing)."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import anyio
import pytest

from kimik3 import ScriptedEngine
from kimik3._exceptions import ToolError
from kimik3.harness import FEATURES, BackgroundProcesses, CodingHarness, group_members

from .helpers import answer, calls

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs Linux /proc")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_http_server_in_the_background_is_queried_later_and_ended_at_run_end(tmp_path: Path) -> None:
    (tmp_path / "index.html").write_text("hello from the workspace\n")
    port = free_port()
    server = f"{sys.executable} -m http.server {port} --bind 127.0.0.1"
    fetch = (f"{sys.executable} -c \"import time,urllib.request\nfor _ in range(200):\n try:\n"
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
            pgid = int(harness.processes._procs["bg1"].popen.pid)  # type: ignore[union-attr]
            seen["during"] = group_members(pgid)
            seen["pgid"] = [pgid]
            return calls(("read_output", {"id": "bg1"}))
        return answer("served")

    harness = CodingHarness(tmp_path, features=FEATURES - {"subagents"})
    result = await harness.agent(engine=ScriptedEngine(script)).run("serve it")
    texts = [m.content for m in result.messages if m.role == "tool"]
    assert texts[0] == 'Started background process bg1; read_output("bg1") shows its output, stop("bg1") ends it'
    assert texts[1].startswith("hello from the workspace\n[exit code: 0,")
    assert '"GET /index.html HTTP/1.1" 200' in texts[2] and texts[2].endswith("[bg1: running]")
    pgid = seen["pgid"][0]
    assert pgid in seen["during"]  # it really ran, in its own group led by the shell
    assert group_members(pgid) == []  # and nothing of it is left after the run
    with socket.socket() as s:  # nothing listens on the port any more (TIME_WAIT allowed)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))


async def test_stop_ends_the_whole_group_and_reports_the_status(tmp_path: Path) -> None:
    procs = BackgroundProcesses(tmp_path)
    pid = procs.start("sleep 300 & sleep 300 & echo started; wait")
    pgid = procs._procs[pid].popen.pid
    for _ in range(500):
        if len(group_members(pgid)) == 3:
            break
        import anyio

        await anyio.sleep(0.01)
    assert len(group_members(pgid)) == 3  # the shell and its two sleeps
    out = await procs.stop(pid)
    assert out == "started\n[bg1: stopped]"
    assert group_members(pgid) == []
    assert procs.read_output(pid) == "[no new output]\n[bg1: stopped]"
    await procs.close()


async def test_exit_code_and_unknown_id(tmp_path: Path) -> None:
    procs = BackgroundProcesses(tmp_path)
    pid = procs.start("echo out; exit 3")
    procs._procs[pid].popen.wait()
    assert procs.read_output(pid) == "out\n[bg1: exited with code 3]"
    with pytest.raises(Exception, match=r"no background process 'bg9'; started in this run: bg1"):
        procs.read_output("bg9")
    log_dir = procs._dir
    assert log_dir is not None and log_dir.is_dir()
    await procs.close()
    assert not log_dir.exists()  # the logs are removed


async def test_a_run_that_crashes_still_ends_its_background_processes(tmp_path: Path) -> None:
    from kimik3._exceptions import APIConnectionError

    pgids: list[int] = []

    def script(messages: list) -> str:  # type: ignore[type-arg]
        if not any(m.role == "tool" for m in messages):
            return calls(("bash", {"command": "sleep 300", "background": True}))
        pgids.append(harness.processes._procs["bg1"].popen.pid)  # type: ignore[union-attr]
        assert group_members(pgids[0])  # still running when the engine fails
        raise APIConnectionError("the engine went away")

    harness = CodingHarness(tmp_path, features=FEATURES - {"subagents", "checkpoints"})
    with pytest.raises(APIConnectionError):
        await harness.agent(engine=ScriptedEngine(script)).run("go")
    assert group_members(pgids[0]) == []


async def test_read_output_of_a_flood_reads_only_head_and_tail(tmp_path: Path) -> None:
    """40 MB of output: read_output returns max_output_chars at most and never holds the flood."""
    import tracemalloc

    procs = BackgroundProcesses(tmp_path, max_output_chars=1000)
    pid = procs.start("printf 'FIRST\\n'; head -c 40000000 /dev/zero | tr '\\0' x; printf '\\nLAST\\n'")
    procs._procs[pid].popen.wait()
    tracemalloc.start()
    try:
        out = procs.read_output(pid)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        await procs.close()
    assert peak < 1_000_000
    assert out.startswith("FIRST\nxxx") and out.endswith("xxx\nLAST\n[bg1: exited with code 0]")
    head, marker, tail = out.partition("\n... [")
    kept = len(head) + len(tail.split("] ...\n", 1)[1].removesuffix("\n[bg1: exited with code 0]")) + 1
    assert marker and f"{40_000_012 - kept} bytes elided" in tail
    assert len(out) <= 1000 + len("\n[bg1: exited with code 0]")


async def test_children_that_leave_the_group_with_setsid_are_ended_too(tmp_path: Path) -> None:
    """setsid (new session and group) and a double fork: close() still ends them (/proc)."""
    procs = BackgroundProcesses(tmp_path)
    pid = procs.start("setsid sh -c 'echo $$ > s.pid; exec sleep 300' & "
                      "(sh -c 'echo $$ > d.pid; trap \"\" TERM; exec setsid sleep 301' &); sleep 302")
    while not ((tmp_path / "s.pid").exists() and (tmp_path / "d.pid").exists()):
        await anyio.sleep(0.02)
    escaped = [int((tmp_path / n).read_text()) for n in ("s.pid", "d.pid")]
    while not all(group_members(os.getpgid(p)) == [p] for p in escaped):  # both led their own group
        await anyio.sleep(0.02)
    assert all(os.getpgid(p) != procs._procs[pid].popen.pid for p in escaped)
    assert procs.running() == ["bg1"]
    await procs.close()
    assert procs.running() == []
    for p in escaped:
        stat = Path(f"/proc/{p}/stat")
        assert not stat.exists() or stat.read_text().rsplit(") ", 1)[1][0] in "ZX"  # gone or a zombie


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
