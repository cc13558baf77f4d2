"""bash in the bubblewrap sandbox, tried as an attacker would: writes outside the workspace
(directly, through a symlink it made, through /proc/self/root), secrets in $HOME, the network and
unix sockets outside, ptrace, the terminal, /dev/shm, /proc/sys, new namespaces, the supervisor
itself, code planted for git outside; the limits (processes, memory, file size, CPU); and the
switch (auto / bwrap / none) with its typed error. Every check reads the host: its files, its
/proc, its sockets."""

from __future__ import annotations

import os
import shutil
import socket
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from kimik3 import SandboxUnavailableError, ScriptedEngine, UserError
from kimik3.agents import load_session
from kimik3.harness import FEATURES, CodingHarness
from kimik3.tools import Tool
from kimik3.tools.coding import ProcessLimits, Sandbox, _cgroup, _sandbox, coding_tools

from ..harness.helpers import answer, calls, git, make_repo
from ..procs import MODES, alive_with, marker, needs_bwrap

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs Linux /proc")
PYTHON = os.path.realpath(sys.executable)  # visible in the sandbox (it runs the supervisor)


@pytest.fixture
def host_dir(pytestconfig: pytest.Config) -> Iterator[Path]:
    """A real directory outside the workspace, /tmp and $HOME (under pytest's cache directory in
    the checkout): what the sandbox shows of it is the host's file system itself."""
    d = pytestconfig.cache.mkdir("sandbox") / uuid.uuid4().hex
    d.mkdir()
    yield d
    shutil.rmtree(d, ignore_errors=True)


async def run(bash: Tool, command: str, timeout: int = 60) -> str:
    result = await bash.run({"command": command, "timeout": timeout})
    assert isinstance(result.content, str) and not result.is_error, result.content
    return result.content


def bash_in(box: Sandbox) -> Tool:
    return coding_tools(box.root, sandbox=box)[0]


# -- the file system ----------------------------------------------------------------------------


@needs_bwrap
async def test_writes_outside_the_workspace_fail(tmp_path: Path, host_dir: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (host_dir / "data.txt").write_text("the user's\n")
    box = Sandbox(ws, "bwrap", read=[host_dir])  # visible, to show it is read-only (not just hidden)
    bash = bash_in(box)
    ro = "Read-only file system"
    attempts = {
        f"echo x > {host_dir}/direct": ro,
        f"echo x > {host_dir}/data.txt": ro,
        f"ln -s {host_dir} link && echo x > link/via_symlink": ro,  # a symlink it made
        f"echo x > /proc/self/root{host_dir}/via_proc_self_root": ro,
        f"echo x > /proc/1/root{host_dir}/via_pid1_root": ro,
        f"echo x > inside.txt && mv inside.txt {host_dir}/moved": ro,
        f"ln {host_dir}/data.txt hard && echo more >> hard": "Invalid cross-device link",  # then write through it
        "touch /etc/kimik3-sandbox-escape": ro,
    }
    for command, error in attempts.items():
        out = await run(bash, command)
        assert error in out and not out.split("\n")[-1].startswith("[exit code: 0"), command
    assert sorted(p.name for p in host_dir.iterdir()) == ["data.txt"]
    assert (host_dir / "data.txt").read_text() == "the user's\n"
    assert not os.path.lexists("/etc/kimik3-sandbox-escape")
    assert (await run(bash, f"cat {host_dir}/data.txt")).startswith("the user's\n[exit code: 0")
    # what is hidden (here /tmp outside the workspace) takes writes into a private tmpfs: the host
    # never sees them
    out = await run(bash, f"mkdir -p {tmp_path}/outside && echo x > {tmp_path}/outside/f && cat {tmp_path}/outside/f")
    assert out.startswith("x\n[exit code: 0") and not (tmp_path / "outside").exists()
    assert (await run(bash, "echo in > ok.txt")).startswith("[exit code: 0") and (ws / "ok.txt").read_text() == "in\n"
    await box.aclose()


@needs_bwrap
async def test_dev_shm_proc_sys_and_mounts_are_the_sandbox_own(tmp_path: Path) -> None:
    box = Sandbox(tmp_path, "bwrap")
    bash = bash_in(box)
    name = f"kimik3-{uuid.uuid4().hex}"
    out = await run(bash, f"echo x > /dev/shm/{name} && ls /dev/shm")
    assert out.startswith(f"{name}\n[exit code: 0") and not os.path.exists(f"/dev/shm/{name}")
    # a sysctl written with its own value: refused (it would change the host's kernel otherwise)
    out = await run(bash, "v=$(cat /proc/sys/kernel/core_pattern); echo \"$v\" > /proc/sys/kernel/core_pattern")
    assert "Read-only file system" in out
    out = await run(bash, "unshare -U true; echo unshare=$?; mount -t tmpfs none /mnt; echo mount=$?; "
                          "grep -c . /proc/self/status >/dev/null; grep CapEff /proc/self/status")
    assert "unshare=1" in out and "mount=" in out and "mount=0" not in out
    assert "CapEff:\t0000000000000000" in out
    # root owns /etc/shadow and reads it without capabilities: hidden; bwrap's own process (pid 1,
    # dumpable) holds no environment worth reading and no file of the host
    out = await run(bash, "cat /etc/shadow; tr '\\0' '\\n' < /proc/1/environ | cut -d= -f1; ls -l /proc/1/fd | "
                          "grep -c ' -> /'")
    lines = out.split("\n")
    assert ("root:" not in out) and lines[1:3] == ["PATH", "1"]  # fd 1: /dev/null
    await box.aclose()


@needs_bwrap
async def test_files_in_memory_are_bounded_by_the_memory_limit(tmp_path: Path) -> None:
    box = Sandbox(tmp_path, "bwrap", limits=ProcessLimits(memory_bytes=8 << 20))
    bash = bash_in(box)
    # private tmpfs, in memory, sized together (issue 40): /tmp the memory limit, /dev/shm a quarter
    for where, most in (("/tmp", 8192), ("/dev/shm", 2048), ("/var/tmp", 1024)):
        out = await run(bash, f"mkdir {where}/fill && for i in $(seq 1 20); do head -c 500000 /dev/zero > "
                              f"{where}/fill/f$i || break; done; du -sk {where}/fill | cut -f1")
        assert "No space left on device" in out and most - 600 < int(out.split("\n")[-2]) <= most, where  # KiB
    await box.aclose()


@needs_bwrap
async def test_git_config_and_hooks_cannot_plant_code_that_runs_outside(tmp_path: Path) -> None:
    """A clean filter in .git/config runs when kimik3's checkpoint does `git add -A` on the host,
    outside the sandbox; a hook runs when the user commits. Both stay read-only, as the whole of
    .git (which cannot be renamed away): committing inside fails with git's own error (more in
    test_sandbox_git.py)."""
    ws = make_repo(tmp_path / "ws")
    witness = tmp_path / "ran-outside"
    plant = (f"git config filter.x.clean 'sh -c \"echo pwned > {witness}; cat\"'; echo '* filter=x' > .gitattributes; "
             "echo 'touch /tmp/pwned' > .git/hooks/pre-commit; mv .git .git-away; "
             "git -c user.name=a -c user.email=a@a commit -q --allow-empty -m inside && git log --format=%s -1")

    def script(messages: list) -> str:  # type: ignore[type-arg]
        n = sum(m.role == "assistant" for m in messages)
        return calls(("bash", {"command": plant})) if n == 0 else answer("done")

    harness = CodingHarness(ws, features=FEATURES - {"subagents"}, sandbox="bwrap")
    result = await harness.agent(engine=ScriptedEngine(script)).run("go", session=tmp_path / "s.jsonl")
    out = next(m.content for m in result.messages if m.role == "tool")
    assert "could not lock config file .git/config: Read-only file system" in out
    assert ".git/hooks/pre-commit: Read-only file system" in out
    assert "cannot move '.git' to '.git-away': Device or resource busy" in out
    assert "index.lock': Read-only file system" in out and "inside" not in out
    assert not witness.exists() and not (ws / ".git" / "hooks" / "pre-commit").exists()
    assert "filter" not in (ws / ".git" / "config").read_text()
    assert git(ws, "log", "--format=%s", "-1") == "init\n"


# -- processes ----------------------------------------------------------------------------------


@needs_bwrap
async def test_the_host_processes_are_out_of_reach(tmp_path: Path) -> None:
    box = Sandbox(tmp_path, "bwrap")
    bash = bash_in(box)
    me = os.getpid()
    out = await run(bash, f"kill -0 {me}; echo kill=$?; ls /proc | grep -c '^[0-9]'")
    assert "kill=1" in out and int(out.split("\n")[-2]) < 10  # only the sandbox's few processes
    # ptrace of the reaper and the supervisor (its ancestors, same user): refused, they are not dumpable
    trace = (f"{PYTHON} -c \"import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
             "reaper = os.getppid()\nsup = int(open(f'/proc/{reaper}/stat').read().rsplit(')', 1)[1].split()[1])\n"
             "for pid in (reaper, sup): print(libc.ptrace(16, pid, 0, 0), ctypes.get_errno())\"")
    out = await run(bash, f"exec {trace}")
    assert out.split("\n")[:2] == ["-1 1", "-1 1"]  # PTRACE_ATTACH: EPERM
    await box.aclose()


@pytest.mark.parametrize("mode", MODES)
async def test_no_terminal_to_inject_into(tmp_path: Path, mode: str) -> None:
    box = Sandbox(tmp_path, mode)
    bash = bash_in(box)
    inject = (f"{PYTHON} -c \"import fcntl, termios, os\nfor fd in (0, 1, 2):\n try:\n"
              "  fcntl.ioctl(fd, termios.TIOCSTI, b'x'); print('injected', fd)\n except OSError as e: print(fd, e.errno)\n"
              "try: os.open('/dev/tty', os.O_RDWR); print('tty')\nexcept OSError as e: print('tty', e.errno)\"")
    out = await run(bash, inject)
    assert out.split("\n")[:4] == ["0 25", "1 25", "2 25", "tty 6"]  # ENOTTY, and no controlling terminal (ENXIO)
    await box.aclose()


@needs_bwrap
async def test_killing_the_supervisor_ends_the_sandbox_and_a_new_one_starts(tmp_path: Path) -> None:
    box = Sandbox(tmp_path, "bwrap")
    bash = bash_in(box)
    m = marker()
    assert "[still running after the command:" in await run(bash, f"sleep {m} > /dev/null 2>&1 &")
    out = await run(bash, "kill -9 $(cut -d' ' -f4 /proc/$PPID/stat); sleep 5")
    assert out.endswith("s]")
    for _ in range(200):  # the namespace dies with it; the kernel reaps its processes a moment later
        if not alive_with(m):
            break
        await anyio.sleep(0.05)
    assert alive_with(m) == []
    out = await run(bash, "echo again")
    assert out.startswith("again\n[the sandbox had ended (a command killed its supervisor?); a new one was started: "
                          "processes left by earlier commands are gone]\n[exit code: 0, ")
    await box.aclose()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("daemonize", [
    "setsid sleep {m} > /dev/null 2>&1 &",
    "nohup setsid sleep {m} > /dev/null 2>&1 &",  # issue 26: survived the run, with no note
    "(setsid sleep {m} > /dev/null 2>&1 &) &",  # a double fork
    "unset KIMIK3_BACKGROUND; env -i setsid sleep {m} > /dev/null 2>&1 &",
])
async def test_what_a_command_leaves_running_is_named_and_ends_with_the_run(tmp_path: Path, mode: str,
                                                                           daemonize: str) -> None:
    m = marker()

    def script(messages: list) -> str:  # type: ignore[type-arg]
        n = sum(x.role == "assistant" for x in messages)
        if n == 0:
            return calls(("bash", {"command": daemonize.format(m=m) + "\nsleep 0.3"}))
        seen.append(alive_with(m))
        return answer("done")

    seen: list[list[int]] = []
    harness = CodingHarness(tmp_path, features=FEATURES - {"subagents", "checkpoints", "background"}, sandbox=mode)
    result = await harness.agent(engine=ScriptedEngine(script)).run("go")
    out = next(x.content for x in result.messages if x.role == "tool")
    assert "[still running after the command: " in out and out.split("\n")[-2].endswith("they end when the run ends]")
    assert len(seen[0]) == 1  # it ran after the command...
    assert alive_with(m) == []  # ...and not after the run


# -- the network --------------------------------------------------------------------------------


class _Server:
    """A TCP server on the host's 127.0.0.1 and an abstract unix socket, counting connections."""

    def __init__(self) -> None:
        self.tcp = socket.create_server(("127.0.0.1", 0))
        self.port = self.tcp.getsockname()[1]
        self.abstract = f"kimik3-test-{uuid.uuid4().hex}"
        self.unix = socket.socket(socket.AF_UNIX)
        self.unix.bind("\0" + self.abstract)
        self.unix.listen()
        self.accepted = 0
        for s in (self.tcp, self.unix):
            threading.Thread(target=self._serve, args=(s,), daemon=True).start()

    def _serve(self, s: socket.socket) -> None:
        while True:
            try:
                conn, _ = s.accept()
            except OSError:
                return
            self.accepted += 1
            conn.sendall(b"hello\n")
            conn.close()

    def close(self) -> None:
        self.tcp.close()
        self.unix.close()


@needs_bwrap
@pytest.mark.parametrize("network", [False, True])
async def test_servers_outside_answer_only_with_network(tmp_path: Path, network: bool) -> None:
    server = _Server()
    box = Sandbox(tmp_path, "bwrap", network=network)
    bash = bash_in(box)
    try:
        tcp = await run(bash, f"exec 3<>/dev/tcp/127.0.0.1/{server.port} && head -1 <&3")
        unix = await run(bash, f"{PYTHON} -c \"import socket; s = socket.socket(socket.AF_UNIX); "
                               f"s.connect('\\0{server.abstract}'); print(s.recv(6).decode())\"")
    finally:
        server.close()
        await box.aclose()
    if network:
        assert tcp.startswith("hello\n[exit code: 0") and unix.startswith("hello\n[exit code: 0")
        assert server.accepted == 2
    else:
        assert "Connection refused" in tcp and "Connection refused" in unix
        assert server.accepted == 0


# -- limits -------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_a_process_storm_stops_at_the_limit_and_the_run_goes_on(tmp_path: Path, mode: str) -> None:
    box = Sandbox(tmp_path, mode, limits=ProcessLimits(processes=40))
    bash = bash_in(box)
    m = marker()
    out = await run(bash, f"for i in $(seq 1 5000); do sleep {m} & done; wait")
    assert "[the command reached the limit of 40 processes; all of its processes were killed]" in out
    assert alive_with(m) == []
    assert (await run(bash, "echo on")).startswith("on\n[exit code: 0")
    await box.aclose()


HARD_LIMIT = _cgroup._parent() is not None or (os.geteuid() != 0 and _sandbox._resolve("auto")[0] == "bwrap")


@needs_bwrap
@pytest.mark.skipif(not HARD_LIMIT, reason="no hard process limit here (root without a writable pids cgroup)")
async def test_a_fork_bomb_is_contained(tmp_path: Path) -> None:
    box = Sandbox(tmp_path, "bwrap", limits=ProcessLimits(processes=64))
    bash = bash_in(box)
    out = await run(bash, ":(){ :|:& };:", timeout=120)
    assert "[the command reached the limit of 64 processes; all of its processes were killed]" in out
    assert (await run(bash, "echo on")).startswith("on\n[exit code: 0")
    await box.aclose()


@pytest.mark.parametrize("mode", MODES)
async def test_memory_file_size_and_cpu_limits_are_reported(tmp_path: Path, mode: str) -> None:
    limits = ProcessLimits(memory_bytes=256 << 20, file_bytes=1 << 20, cpu_seconds=1)
    box = Sandbox(tmp_path, mode, limits=limits)
    bash = bash_in(box)
    out = await run(bash, f"{PYTHON} -c 'b = bytearray(1 << 30)'")
    assert "MemoryError" in out and out.split("\n")[-1].startswith("[exit code: 1, ")
    out = await run(bash, "head -c 3000000 /dev/zero > big")
    assert out.split("\n")[-2:-1] == ["[killed at the file size limit (1048576 bytes per file)]"]
    assert out.split("\n")[-1].startswith("[exit code: 153, ") and (tmp_path / "big").stat().st_size == 1 << 20
    out = await run(bash, "while :; do :; done", timeout=120)
    assert out.split("\n")[-2:-1] == ["[killed at the CPU time limit (1 s per process)]"]
    assert out.split("\n")[-1].startswith("[exit code: 152, ")
    assert (await run(bash, "echo on")).startswith("on\n[exit code: 0")
    await box.aclose()


# -- the switch ---------------------------------------------------------------------------------


def test_bwrap_refuses_to_start_without_bubblewrap_and_auto_says_so(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_sandbox, "_bwrap", lambda: None)
    with pytest.raises(SandboxUnavailableError, match=r"^sandbox='bwrap' but bubblewrap \(bwrap\) is not installed; "
                                                      r"to fix it, install bubblewrap \(Debian/Ubuntu: apt-get install"):
        coding_tools(tmp_path, sandbox="bwrap")
    monkeypatch.setattr(_sandbox, "_landlock_abi", lambda: 0)  # and no Landlock: unsandboxed
    with pytest.warns(RuntimeWarning) as caught:
        box = Sandbox(tmp_path, "auto")
    assert [str(w.message) for w in caught] == [
        "kimik3: sandbox: none (bubblewrap (bwrap) is not installed, and this kernel has no Landlock; commands run "
        "unsandboxed, with your rights)"]
    assert (box.mode, box.info()) == ("none", {"mode": "none", "requested": "auto", "reason": "bubblewrap (bwrap) is "
                                               "not installed, and this kernel has no Landlock"})
    with pytest.raises(SandboxUnavailableError, match=r"^sandbox='landlock' but this kernel has no Landlock"):
        Sandbox(tmp_path, "landlock")


def test_a_bubblewrap_that_cannot_make_namespaces_names_the_fix(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(_sandbox, "_bwrap", lambda: str(fake))
    with pytest.raises(SandboxUnavailableError) as e:
        Sandbox(tmp_path, "bwrap")
    assert str(e.value).startswith(f"sandbox='bwrap' but {fake} cannot create its namespaces here (bwrap: setting up "
                                   "uid map: Permission denied); to fix it, allow user namespaces: sysctl "
                                   "kernel.unprivileged_userns_clone=1 (Debian); on Ubuntu 23.10+ an AppArmor profile")


def test_bad_options_are_user_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="sandbox must be 'auto', 'bwrap', 'landlock' or 'none', got 'docker'"):
        Sandbox(tmp_path, "docker")  # type: ignore[arg-type]
    with pytest.raises(UserError, match="sandbox_read: /no/such/path does not exist"):
        coding_tools(tmp_path, sandbox_read=["/no/such/path"])
    with pytest.raises(UserError, match="sandbox_write takes a list of paths, not one path"):
        coding_tools(tmp_path, sandbox_write=str(tmp_path))  # type: ignore[arg-type]
    with pytest.raises(UserError, match="options of the Sandbox given"):
        coding_tools(tmp_path, sandbox=Sandbox(tmp_path, "none"), network=True)


@needs_bwrap
async def test_the_session_header_records_the_sandbox(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    session = tmp_path / "s.jsonl"

    def script(messages: list) -> str:  # type: ignore[type-arg]
        return calls(("bash", {"command": "echo hi"})) if messages[-1].role == "user" else answer("ok")

    harness = CodingHarness(ws, features=FEATURES - {"subagents"}, sandbox="bwrap")
    await harness.agent(engine=ScriptedEngine(script)).run("go", session=session)
    import json

    header = json.loads(session.read_text().split("\n")[0])
    assert header["sandbox"] == {"mode": "bwrap", "requested": "bwrap", "network": False, "read": [], "write": []}
    other = CodingHarness(ws, features=FEATURES - {"subagents"}, sandbox="none")
    await other.agent(engine=ScriptedEngine(script)).run("again", messages=load_session(session), session=session)
    records = [json.loads(line) for line in session.read_text().splitlines()]
    assert [r["sandbox"] for r in records[1:] if "sandbox" in r] == [{"mode": "none", "requested": "none"}]
    assert [m.role for m in load_session(session)][-3:] == ["assistant", "tool", "assistant"]


@needs_bwrap
async def test_a_preloaded_library_under_a_hidden_folder_stays_loadable(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's CPU build sets LD_PRELOAD to its venv's libgomp; with the venv under /tmp (hidden by
    the sandbox's private /tmp) every command printed ld.so's "cannot be preloaded" error."""
    lib = tmp_path / "venv" / "libm-copy.so.6"
    lib.parent.mkdir()
    shutil.copyfile("/lib/x86_64-linux-gnu/libm.so.6", lib)
    gone = tmp_path / "gone.so"  # named, but not there: ld.so's own error, as without the sandbox
    ws = tmp_path / "ws"
    ws.mkdir()
    monkeypatch.setenv("LD_PRELOAD", f"{lib}:{gone}")
    box = Sandbox(ws, "bwrap")
    out = await run(bash_in(box), "echo ok; tr ' ' '\\n' <<< \"$LD_PRELOAD\"; test -r " + str(lib) + " && echo readable")
    assert out.split("\n")[:3] == ["ok", str(lib), "readable"]
    assert "cannot be preloaded" not in out
    assert box.preloaded == [str(lib)]
    await box.aclose()


@pytest.mark.parametrize(("cgroup_line", "limit_file", "limit"), [
    ("0::/user.slice/job", "user.slice/job/memory.max", "4294967296"),  # v2: the process's own cgroup
    ("0::/user.slice/job", "user.slice/memory.max", "4294967296"),  # v2: a parent's limit holds too
    ("4:memory:/docker/abc", "memory/docker/abc/memory.limit_in_bytes", "4294967296"),  # v1
])  # fmt: skip
def test_the_tmpfs_size_follows_a_containers_memory_limit(tmp_path: Path, cgroup_line: str, limit_file: str,
                                                          limit: str) -> None:
    # a variant of issue 40's five 8 GiB tmpfs on a 24 GiB host (a40c): in a container, /proc/meminfo
    # shows the host's 1 TiB; the cgroup's 4 GiB is what the tmpfs are sized against (/tmp 1 GiB)
    from kimik3.tools.coding._places import memory_bytes, tmpfs_bytes

    proc, cgroup = tmp_path / "proc", tmp_path / "cgroup"
    (proc / "self").mkdir(parents=True)
    (proc / "meminfo").write_text("MemTotal:       1073741824 kB\nMemFree: 1 kB\n")
    (proc / "self" / "cgroup").write_text(f"{cgroup_line}\n")
    assert memory_bytes(str(proc), str(cgroup)) == 1 << 40  # no limit file: the host's
    (cgroup / limit_file).parent.mkdir(parents=True)
    (cgroup / limit_file).write_text("max\n")  # v2's "no limit"
    assert memory_bytes(str(proc), str(cgroup)) == 1 << 40
    (cgroup / limit_file).write_text(limit + "\n")
    total = memory_bytes(str(proc), str(cgroup))
    assert total == 4 << 30 and tmpfs_bytes(8 << 30, total) == 1 << 30 and tmpfs_bytes(None, total) == 1 << 30
