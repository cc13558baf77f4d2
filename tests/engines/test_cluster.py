"""The cluster's processes (issue 32, item 2) with stand-ins for vLLM and the router
(tests/engines/fake_replica.py: each keeps a child, as vLLM's API server keeps its engine core):
started and waited for, stopped together with everything they started (checked in /proc), also a
replica that ignores SIGTERM, one that dies while starting, and a ``kill -9`` of the process that
started them. The real cluster (vLLM, vllm-router) is tests/real/test_cluster_k3_tiny.py."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kimik3 import EngineError, UserError
from kimik3.engines._cluster import Cluster, free_port, parse_metrics
from tests.procs import alive_with, marker

FAKE = Path(__file__).with_name("fake_replica.py")
ROOT = Path(__file__).resolve().parents[2]


class FakeCluster(Cluster):
    """A cluster of stand-ins; ``broken`` replica indices exit at once, ``stubborn`` ones ignore SIGTERM."""

    def __init__(self, mark: str, *, broken: tuple[int, ...] = (), stubborn: tuple[int, ...] = (),
                 **kwargs: object) -> None:
        super().__init__("models/k3-tiny", port=free_port(), replica_ports=[free_port(), free_port()],
                         startup_timeout=60, **kwargs)  # type: ignore[arg-type]
        self.mark, self.broken, self.stubborn = mark, broken, stubborn

    def replica_command(self, index: int) -> list[str]:
        if index in self.broken:
            return [sys.executable, "-c", "import sys; print('CUDA out of memory (a stand-in)'); sys.exit(3)"]
        flags = ["--stubborn"] if index in self.stubborn else []
        return [sys.executable, str(FAKE), str(self.replica_ports[index]), self.mark, *flags]

    def router_command(self) -> list[str]:
        return [sys.executable, str(FAKE), str(self.port), self.mark]


def gone(pids: list[int]) -> bool:
    """None of ``pids`` is a live process (a zombie not yet reaped counts as gone)."""
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        if stat[stat.rfind(b")") + 2 :][:1] not in (b"Z", b"X"):
            return False
    return True


def test_started_together_and_stopped_with_everything_they_started(tmp_path: Path) -> None:
    mark = marker()
    with FakeCluster(mark, log_dir=tmp_path) as cluster:
        cluster.start()
        assert cluster.exited() is None
        pids = cluster.pids
        # the three, each under kimik3's subreaper (its argv holds the command), each with its own child
        assert len(pids) == 3 and len(alive_with(mark)) == 9
        assert cluster.base_url.endswith(f":{cluster.port}/v1")
    assert gone(pids) and alive_with(mark) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["replica-0.log", "replica-1.log", "router.log"]


def test_a_replica_that_ignores_sigterm_is_killed_with_its_group(tmp_path: Path) -> None:
    mark = marker()
    cluster = FakeCluster(mark, stubborn=(1,), log_dir=tmp_path)
    cluster.start()
    pids = cluster.pids
    cluster.stop(grace=1.0)
    assert gone(pids) and alive_with(mark) == []
    cluster.stop()  # idempotent


def test_a_replica_that_dies_while_starting_stops_the_rest(tmp_path: Path) -> None:
    mark = marker()
    cluster = FakeCluster(mark, broken=(1,), log_dir=tmp_path)
    with pytest.raises(EngineError, match=r"replica 1 exited with code 3 before it was ready; the end of .*"
                                          r"replica-1.log:\nCUDA out of memory \(a stand-in\)"):
        cluster.start()
    assert alive_with(mark) == [] and cluster.pids == []


def test_a_port_in_use_is_named_before_anything_starts(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        cluster = FakeCluster(marker(), log_dir=tmp_path)
        cluster.replica_ports[0] = s.getsockname()[1]
        with pytest.raises(EngineError, match=rf"port\(s\) {s.getsockname()[1]} on 127.0.0.1 are in use"):
            cluster.start()
    assert cluster.pids == []


def test_kill_9_of_the_owner_takes_the_cluster_down(tmp_path: Path) -> None:
    mark = marker()
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from tests.engines.test_cluster import FakeCluster
        cluster = FakeCluster({mark!r}, log_dir={str(tmp_path)!r})
        cluster.start()
        print("ready", flush=True)
        time.sleep(600)
    """)
    owner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert owner.stdout is not None and owner.stdout.readline() == "ready\n"
        assert len(alive_with(mark)) == 10  # the owner, its three reapers, their three children and those's three
        owner.send_signal(signal.SIGKILL)  # no clean-up code runs: the children's PR_SET_PDEATHSIG does it
        owner.wait(timeout=60)
        deadline = time.monotonic() + 60
        while alive_with(mark) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert alive_with(mark) == []
    finally:
        owner.kill()
        owner.wait()


def test_arguments_are_checked() -> None:
    with pytest.raises(UserError, match="1 or more replicas"):
        Cluster("m", replicas=0)
    with pytest.raises(UserError, match="unknown router policy 'sticky'; vllm-router's: consistent_hash, "):
        Cluster("m", policy="sticky")
    with pytest.raises(UserError, match="2 replicas need 2 replica ports, got 1"):
        Cluster("m", replicas=2, replica_ports=[9001])
    assert Cluster("m", replicas=3, port=8000).replica_urls == [
        "http://127.0.0.1:8001", "http://127.0.0.1:8002", "http://127.0.0.1:8003"]


def test_parse_metrics_sums_a_counter_over_its_labels() -> None:
    text = textwrap.dedent("""
        # HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
        # TYPE vllm:prefix_cache_hits_total counter
        vllm:prefix_cache_hits_total{engine="0",model_name="k3 tiny"} 192.0
        vllm:prefix_cache_hits_total{engine="1",model_name="k3 tiny"} 8.0
        vllm:num_requests_running{engine="0"} 0.0
        process_open_fds 12
        broken_line{a="b"} NaNish
    """)
    assert parse_metrics(text) == {"vllm:prefix_cache_hits_total": 200.0, "vllm:num_requests_running": 0.0,
                                   "process_open_fds": 12.0}


@pytest.mark.parametrize(("cores", "replicas", "binds"), [
    ({0, 1}, 2, ["0", "1"]),
    ({0, 1, 2, 3, 4, 5, 6, 7}, 3, ["0,1", "2,3,4", "5,6,7"]),
    ({4, 6}, 3, ["4", "6", "4"]),  # more replicas than cores: in turn
])
def test_on_a_cpu_each_replica_gets_its_own_cores(monkeypatch: pytest.MonkeyPatch, cores: set[int], replicas: int,
                                                  binds: list[str]) -> None:
    from kimik3.engines import _vllm

    monkeypatch.setattr(_vllm, "_on_cpu", lambda: True)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: cores)
    env = {"PATH": "/usr/bin"}
    cluster = Cluster("models/k3-tiny", replicas=replicas, env=env)
    assert [cluster.replica_env(i) for i in range(replicas)] == [{**env, "VLLM_CPU_OMP_THREADS_BIND": b} for b in binds]
    # set by the user, or tensor parallelism (vLLM's per-rank "|" lists): left alone
    assert Cluster("m", replicas=2, env={"VLLM_CPU_OMP_THREADS_BIND": "0-1"}).replica_env(1) == \
        {"VLLM_CPU_OMP_THREADS_BIND": "0-1"}
    assert Cluster("m", replicas=2, env=env, vllm_args=["--tensor-parallel-size", "2"]).replica_env(0) == env
    monkeypatch.setattr(_vllm, "_on_cpu", lambda: False)  # a GPU host: nothing to bind
    assert cluster.replica_env(0) == env


def test_the_temporary_log_folder_goes_with_a_clean_stop_and_stays_when_something_failed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # issue 43: cluster log folders stayed in the temp folder after it stopped
    import tempfile

    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    Cluster("m", replicas=2).describe()  # a dry run makes no folder
    assert list(temp.iterdir()) == []
    with FakeCluster(marker()) as cluster:
        cluster.start()
        logs = cluster.log_dir
        assert logs.parent == temp and (logs / "router.log").is_file()
    assert list(temp.iterdir()) == []  # removed after the clean stop
    kept = FakeCluster(marker(), keep_logs=True)
    kept.start()
    assert kept.stop() == kept.log_dir and (kept.log_dir / "replica-0.log").is_file()
    shutil.rmtree(kept.log_dir)
    failed = FakeCluster(marker(), broken=(1,))
    with pytest.raises(EngineError) as e:
        failed.start()
    folder = failed.log_dir
    assert str(folder / "replica-1.log") in str(e.value)  # named in the error, and still there
    assert (folder / "replica-1.log").read_text() == "CUDA out of memory (a stand-in)\n"
    assert failed.stop(failed=True) == folder and folder.is_dir()
    given = FakeCluster(marker(), log_dir=tmp_path / "mine")
    given.start()
    assert given.stop() == tmp_path / "mine" and (tmp_path / "mine" / "router.log").is_file()  # never removed
