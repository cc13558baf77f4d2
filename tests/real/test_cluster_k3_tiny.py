"""Two k3-tiny replicas behind vLLM's router, as ``kimik3 serve --replicas 2 --router consistent_hash``
starts them (issue 32, item 2): agents run through the router, each conversation's requests land on
one replica (read from each replica's /metrics), a resumed conversation finds its prefix in that
replica's cache, and Ctrl-C stops every process the command started (read from /proc).

One cluster for the module (small KV caches: 64 MiB a replica). Run under
``flock /tmp/kimik3-engine.lock``."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from kimik3 import Agent, ModelSettings, RemoteEngine
from kimik3.agents import CODING_INSTRUCTIONS
from kimik3.engines._cluster import parse_metrics
from kimik3.tools.coding import coding_tools

from .conftest import K3_TINY, free_port, require_engine

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "k3_tiny_workspace"
TASKS = ["What is the first line of kettle.txt?", "Show me falcon.cfg.", "What does harbor.md say?"]
GREEDY = ModelSettings(temperature=0.0, max_tokens=200)


@dataclass
class Served:
    proc: subprocess.Popen[bytes]
    base_url: str
    replicas: list[str]
    log: Path


def descendants(pid: int) -> dict[int, bytes]:
    """Every live process below ``pid`` (by parent links in /proc): pid -> its start time (field 22)."""
    parents: dict[int, int] = {}
    starts: dict[int, bytes] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if fields[0] not in (b"Z", b"X"):
            parents[int(entry)], starts[int(entry)] = int(fields[1]), fields[19]
    out: dict[int, bytes] = {}
    frontier = [pid]
    while frontier:
        p = frontier.pop()
        for child, parent in parents.items():
            if parent == p and child not in out:
                out[child] = starts[child]
                frontier.append(child)
    return out


def still_alive(procs: dict[int, bytes]) -> list[int]:
    """Those of ``procs`` that still run (the same pid with the same start time, not a zombie)."""
    alive = []
    for pid, start in procs.items():
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if fields[19] == start and fields[0] not in (b"Z", b"X"):
            alive.append(pid)
    return alive


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    require_engine("kimik3 serve --replicas", K3_TINY)
    try:
        import vllm_router  # noqa: F401
    except ImportError:
        if os.environ.get("KIMIK3_REQUIRE_ENGINE") == "1":
            pytest.fail("vllm-router is not installed (scripts/setup_engine.sh installs it)")
        pytest.skip("vllm-router is not installed (scripts/setup_engine.sh installs it)")
    port = free_port()
    logs = tmp_path_factory.mktemp("cluster")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("VLLM_CPU_KVCACHE_SPACE", None)  # the cluster sizes each replica's cache itself
    cmd = [sys.executable, "-m", "kimik3", "serve", "models/k3-tiny", "--replicas", "2", "--router", "consistent_hash",
           "--port", str(port), "--log-dir", str(logs), "--max-model-len", "8192",
           "--kv-cache-memory-bytes", str(64 * 2**20), "--block-size", "32"]
    log = logs / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    served = Served(proc, f"http://127.0.0.1:{port}/v1", [], log)
    try:
        deadline = time.monotonic() + 900
        while "kimik3 serve: ready at" not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"kimik3 serve did not start ({proc.poll()}):\n{log.read_text()[-3000:]}")
            time.sleep(1)
        text = log.read_text()
        served.replicas = text.split("consistent_hash over ", 1)[1].split(")", 1)[0].split(", ")
        assert len(served.replicas) == 2 and all(u.startswith("http://127.0.0.1:") for u in served.replicas)
        yield served
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def requests_per_replica(served: Served) -> list[float]:
    with httpx.Client(timeout=30, trust_env=False) as http:
        return [parse_metrics(http.get(f"{u}/metrics").text).get("vllm:request_success_total", 0.0)
                for u in served.replicas]


@pytest.mark.asyncio(loop_scope="session")
async def test_each_conversation_stays_on_one_replica_and_finds_its_prefix_there(served: Served,
                                                                                   tmp_path: Path) -> None:
    landed = []
    for n in range(3):
        workspace = Path(shutil.copytree(DATA, tmp_path / f"ws{n}"))
        session = tmp_path / f"s{n}.jsonl"
        before = requests_per_replica(served)
        engine = RemoteEngine(base_url=served.base_url)
        agent = Agent(instructions=CODING_INSTRUCTIONS, tools=coding_tools(workspace), engine=engine,
                      settings=GREEDY, max_turns=4)
        first = await agent.run(TASKS[n], session=session)
        again = await Agent(instructions=CODING_INSTRUCTIONS, tools=coding_tools(workspace), engine=engine,
                            settings=GREEDY, max_turns=4).resume(session, TASKS[(n + 1) % 3])
        await engine.aclose()
        after = requests_per_replica(served)
        calls = first.turns + again.turns
        delta = [a - b for a, b in zip(after, before, strict=True)]
        assert sorted(delta) == [0, calls], (delta, calls)  # every request of the conversation on one replica
        landed.append(delta.index(calls))
        # the resumed run's first request repeats the session's prompt: its prefix is in that cache
        usage = _first_usage(session, len(first.messages))
        assert usage is not None and usage["prompt_tokens_details"]["cached_tokens"] >= usage["prompt_tokens"] // 2
    print("replicas the conversations landed on:", landed)


def _first_usage(session: Path, after: int) -> dict[str, Any] | None:
    """The usage recorded with the first assistant message after the first ``after`` messages."""
    import json

    index = 0
    for line in session.read_text().splitlines()[1:]:
        record = json.loads(line)
        if "message" not in record:
            continue
        if index >= after and record["message"]["role"] == "assistant":
            return dict(record["usage"])
        index += 1
    return None


def test_ctrl_c_stops_every_process_it_started(served: Served) -> None:
    tree = descendants(served.proc.pid)
    assert len(tree) >= 3  # two replicas (and their engine cores), the router
    served.proc.send_signal(signal.SIGINT)
    assert served.proc.wait(timeout=120) == 0
    assert "kimik3 serve: stopped" in served.log.read_text()
    deadline = time.monotonic() + 30
    while still_alive(tree) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert still_alive(tree) == []
