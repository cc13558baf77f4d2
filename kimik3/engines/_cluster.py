"""Several vLLM replicas of one K3 model behind vLLM's router on one host (:class:`Cluster`):
``kimik3 serve MODEL --replicas N --router POLICY`` and ``make cluster``.

The replicas are vLLM's OpenAI servers (:func:`~kimik3.engines._vllm.server_command`, prefix
caching on, the cached prompt tokens reported in ``usage``); the router is ``vllm-router``
(PyPI, a Rust binary behind a Python launcher), which keeps a conversation on one replica when
its requests carry a routing key under an affinity policy (``consistent_hash``,
``sticky_least_loaded``; docs/scale-out.md). Everything listens on ``host`` (127.0.0.1 by
default): the router on ``port``, the replicas on the ports after it.

Lifecycle: :meth:`Cluster.start` starts each replica in a process group of its own, waits until
every ``/health`` answers (a replica that exits first is an :class:`~kimik3.EngineError` with
the end of its log), then starts the router and waits for it; :meth:`Cluster.stop` (also on
leaving ``with``) ends the router, then the replicas, each whole process group: SIGTERM, then
SIGKILL after ``grace`` seconds. Every child runs under kimik3's child subreaper
(:func:`supervised`: ``tools/coding/_reaper.py --stdio``), which gets SIGTERM when the process that
started it dies (``PR_SET_PDEATHSIG``) and then ends every process below it, vLLM's engine cores
and any process that left its group included: nothing outlives a ``kill -9`` of kimik3, during
start-up either (issue 40). A single server (:func:`run_supervised`, ``kimik3 serve`` without
``--replicas``) runs the same way.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO

import httpx

from .._exceptions import EngineError, EngineNotAvailableError, UserError

__all__ = ["ROUTER_POLICIES", "Cluster", "parse_metrics", "run_supervised", "supervised"]

ROUTER_POLICIES = ("consistent_hash", "sticky_least_loaded", "cache_aware", "round_robin", "power_of_two",
                   "random", "kv_aware")
"""vllm-router's policies (0.1.17). The first two read the routing key (``X-Session-ID``);
``cache_aware`` matches prompt prefixes itself; ``kv_aware`` needs the replicas' KV events (its
own flags, given with ``router_args``)."""

_PR_SET_PDEATHSIG = 1


_REAPER = str(Path(__file__).resolve().parents[1] / "tools" / "coding" / "_reaper.py")


def _die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def supervised(cmd: Sequence[str]) -> list[str]:
    """``cmd`` run under kimik3's child subreaper (``_reaper.py --stdio``, standard library only):
    it passes its stdin / stdout / stderr to ``cmd``, ignores SIGINT (``cmd`` gets a terminal's
    Ctrl-C), exits with ``cmd``'s exit code, and when ``cmd`` ends or it gets SIGTERM ends every
    process ``cmd`` left (SIGTERM, a second, SIGKILL), daemons re-parented to it included. Start
    it with :func:`_die_with_parent` so its starter's death is that SIGTERM."""
    return [sys.executable, "-I", "-S", _REAPER, "--stdio", *cmd]


INTERRUPT_GRACE_S = 30.0
"""Seconds a server has to end after a Ctrl-C before :func:`run_supervised` ends it (SIGTERM): a
SIGINT sent to ``kimik3 serve`` alone (``kill -INT PID``) never reached it."""


def run_supervised(cmd: Sequence[str], env: Mapping[str, str] | None = None) -> int:
    """Run ``cmd`` (a server) under :func:`supervised` in this terminal until it ends, with ``env``
    (default: this process's); the exit code.

    Ctrl-C reaches the server as a terminal's does (it shuts down; this process waits for it, at
    most :data:`INTERRUPT_GRACE_S`, then ends it);
    SIGTERM to this process is passed on; ``kill -9`` of this process ends the server and every
    process it started (``PR_SET_PDEATHSIG``). Returns the server's exit code (128 + N for
    signal N).
    """
    proc = subprocess.Popen(supervised(cmd), preexec_fn=_die_with_parent, env=env)
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: proc.send_signal(signal.SIGTERM))
    interrupted = False
    try:
        while True:
            try:
                code = proc.wait(timeout=INTERRUPT_GRACE_S if interrupted else None)
                break
            except KeyboardInterrupt:  # a terminal's Ctrl-C: the server got it too, its shutdown waited for
                interrupted = True
            except subprocess.TimeoutExpired:  # a SIGINT sent to this process alone: the server never got it
                proc.send_signal(signal.SIGTERM)
                interrupted = False
    finally:
        signal.signal(signal.SIGTERM, previous)
    return code if code >= 0 else 128 - code


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def parse_metrics(text: str) -> dict[str, float]:
    """A Prometheus text exposition summed by metric name (labels dropped): ``{"vllm:prefix_cache_hits_total":
    1234.0, ...}``. Comment lines and values that are not numbers are skipped."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        head, _, value = line.strip().rpartition(" ")
        name = head.split("{", 1)[0].strip()
        try:
            out[name] = out.get(name, 0.0) + float(value)
        except ValueError:
            continue
    return out


class _Process:
    """One child: its command, process (a group leader) and log file."""

    def __init__(self, name: str, cmd: list[str], log: Path, env: dict[str, str]) -> None:
        self.name, self.cmd, self.log = name, cmd, log
        self._out: IO[bytes] = open(log, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(supervised(cmd), stdin=subprocess.DEVNULL, stdout=self._out,
                                     stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                     preexec_fn=_die_with_parent)

    def tail(self, lines: int = 15) -> str:
        try:
            text = self.log.read_bytes()[-8000:].decode("utf-8", "replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def terminate(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGTERM)

    def kill(self, grace: float) -> None:
        """Wait ``grace`` seconds for the group leader, then SIGKILL the whole group."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=max(grace, 0.0))
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # what is left of the group (vLLM's engine core)
        self.proc.wait()
        self._out.close()


class Cluster:
    """``replicas`` vLLM servers of ``model`` behind vllm-router (see the module doc).

    Usage::

        with Cluster("models/k3-tiny", replicas=2, policy="consistent_hash") as cluster:
            cluster.start()
            engine = RemoteEngine(base_url=cluster.base_url)   # requests carry the routing key
            ...

    Args:
        model: the model directory (or a name vLLM can load).
        replicas: how many vLLM servers (1 or more).
        policy: the router's policy (:data:`ROUTER_POLICIES`).
        host: where everything listens (default 127.0.0.1).
        port: the router's port; replica ``i`` listens on ``port + 1 + i`` unless
            ``replica_ports`` says otherwise.
        replica_ports: the replicas' ports.
        vllm_args: more vLLM server flags for every replica (``--max-model-len 4096``, ...). On a
            CPU without a KV-cache size, each replica gets kimik3's CPU size for a share of the
            memory available (:func:`~kimik3.engines._vllm.cpu_kv_cache_bytes`).
        router_args: more vllm-router flags.
        log_dir: where ``replica-<i>.log`` and ``router.log`` go (default: a new temporary
            directory, made at :meth:`start`, removed by a :meth:`stop` after a clean run; kept,
            and named in the error, when a start or a child failed). A folder given is never removed.
        keep_logs: keep the temporary log directory after a clean stop too.
        startup_timeout: seconds for each replica and the router to answer ``/health``.
        env: the children's environment (default: this process's); each replica's adds its
            CPU cores on a CPU (:meth:`replica_env`).

    Attributes:
        base_url: the router's OpenAI endpoint, ``http://HOST:PORT/v1``.
        replica_urls: each replica's ``http://HOST:PORT``.

    Raises:
        UserError: fewer than 1 replica, an unknown policy, ``replica_ports`` of the wrong length.
    """

    def __init__(self, model: str | os.PathLike[str], *, replicas: int = 2, policy: str = "consistent_hash",
                 host: str = "127.0.0.1", port: int = 8000, replica_ports: Sequence[int] | None = None,
                 vllm_args: Sequence[str] = (), router_args: Sequence[str] = (),
                 log_dir: str | os.PathLike[str] | None = None, startup_timeout: float = 900.0,
                 env: dict[str, str] | None = None, keep_logs: bool = False) -> None:
        if replicas < 1:
            raise UserError(f"a cluster needs 1 or more replicas, got {replicas}")
        if policy not in ROUTER_POLICIES:
            raise UserError(f"unknown router policy {policy!r}; vllm-router's: {', '.join(ROUTER_POLICIES)}")
        ports = list(replica_ports) if replica_ports is not None else [port + 1 + i for i in range(replicas)]
        if len(ports) != replicas:
            raise UserError(f"{replicas} replicas need {replicas} replica ports, got {len(ports)}")
        self.model, self.policy, self.host, self.port = str(model), policy, host, port
        self.replica_ports = ports
        self.vllm_args, self.router_args = list(vllm_args), list(router_args)
        self._log_dir = Path(log_dir) if log_dir is not None else None
        self._temporary_logs: Path | None = None  # the log directory kimik3 made (removed after a clean stop)
        self.keep_logs = keep_logs
        self.startup_timeout = startup_timeout
        self.env = dict(os.environ if env is None else env)
        self.base_url = f"http://{host}:{port}/v1"
        self.replica_urls = [f"http://{host}:{p}" for p in ports]
        self._replicas: list[_Process] = []
        self._router: _Process | None = None

    # -- commands ---------------------------------------------------------------------------

    def replica_command(self, index: int) -> list[str]:
        """The argv of replica ``index`` (vLLM's OpenAI server with kimik3's K3 flags).

        Raises:
            EngineNotAvailableError: vLLM is not installed.
        """
        from ._vllm import _on_cpu, cpu_kv_cache_bytes, server_command

        args = ["--enable-prefix-caching"]  # server_command adds --enable-prompt-tokens-details
        sized = any(a.startswith("--kv-cache-memory") for a in self.vllm_args) or self.env.get("VLLM_CPU_KVCACHE_SPACE")
        if not sized and _on_cpu():
            from ._vllm import _available_memory

            args += ["--kv-cache-memory-bytes", str(cpu_kv_cache_bytes(_available_memory() // len(self.replica_ports)))]
        # the user's flags last: a later flag wins
        return server_command(self.model, *args, *self.vllm_args, host=self.host, port=self.replica_ports[index])

    def replica_env(self, index: int) -> dict[str, str]:
        """The environment of replica ``index``: :attr:`env`, and on a CPU its own share of this
        process's cores (``VLLM_CPU_OMP_THREADS_BIND``; vLLM's ``auto`` binding would put every
        replica's engine on the same core) unless that variable is set or the replica uses
        tensor parallelism (then binding is vLLM's ``|``-separated per-rank list: set it in ``env``).
        With more replicas than cores, replicas share cores in turn."""
        env = dict(self.env)
        tensor_parallel = any(a.startswith(("--tensor-parallel", "-tp")) for a in self.vllm_args)
        if "VLLM_CPU_OMP_THREADS_BIND" in env or tensor_parallel:
            return env
        from ._vllm import _on_cpu

        if _on_cpu():
            cores = sorted(os.sched_getaffinity(0))
            n = len(self.replica_ports)
            share = cores[index * len(cores) // n : (index + 1) * len(cores) // n] if n <= len(cores) \
                else [cores[index % len(cores)]]
            env["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(map(str, share))
        return env

    def router_command(self) -> list[str]:
        """The argv of the router (``python -m vllm_router.launch_router``).

        Raises:
            EngineNotAvailableError: vllm-router is not installed.
        """
        import importlib.util

        if importlib.util.find_spec("vllm_router") is None:
            raise EngineNotAvailableError("a cluster needs vLLM's router: pip install vllm-router")
        return [sys.executable, "-m", "vllm_router.launch_router", "--host", self.host, "--port", str(self.port),
                "--worker-urls", *self.replica_urls, "--policy", self.policy,
                "--worker-startup-check-interval", "1", "--prometheus-host", self.host,
                "--prometheus-port", str(free_port(self.host)), *self.router_args]  # fmt: skip

    @property
    def log_dir(self) -> Path:
        """Where the logs go: ``log_dir`` as given, else a temporary directory made on first use
        (a dry run, :meth:`describe`, makes none)."""
        if self._log_dir is None:
            self._log_dir = self._temporary_logs = Path(tempfile.mkdtemp(prefix="kimik3-cluster-"))
        return self._log_dir

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Start the replicas, wait for each, then the router (see the module doc).

        Raises:
            EngineError: a port in use, a child that exited or did not answer ``/health`` within
                ``startup_timeout`` (the end of its log is in the message); everything started is
                stopped first.
            EngineNotAvailableError: vLLM or vllm-router is not installed.
        """
        busy = [p for p in (self.port, *self.replica_ports) if not _port_free(self.host, p)]
        if busy:
            raise EngineError(f"port(s) {', '.join(map(str, busy))} on {self.host} are in use")
        try:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            for i in range(len(self.replica_ports)):
                cmd = self.replica_command(i)
                self._replicas.append(_Process(f"replica {i}", cmd, self.log_dir / f"replica-{i}.log",
                                              self.replica_env(i)))
            for replica, url in zip(self._replicas, self.replica_urls, strict=True):
                self._wait(replica, f"{url}/health")
            self.start_router()
        except BaseException:
            self.stop(failed=True)  # the logs stay: the error names them
            raise

    def start_router(self, policy: str | None = None) -> None:
        """Start the router (again, after :meth:`stop_router`), with ``policy`` if given.

        Raises:
            UserError: an unknown policy.
            EngineError: it exited or did not answer in time.
        """
        if policy is not None:
            if policy not in ROUTER_POLICIES:
                raise UserError(f"unknown router policy {policy!r}; vllm-router's: {', '.join(ROUTER_POLICIES)}")
            self.policy = policy
        self._router = _Process("router", self.router_command(), self.log_dir / "router.log", self.env)
        self._wait(self._router, f"http://{self.host}:{self.port}/health")
        self._wait(self._router, f"{self.base_url}/models")

    def stop_router(self, grace: float = 5.0) -> None:
        """End the router (the replicas keep running)."""
        if self._router is not None:
            self._router.terminate()
            self._router.kill(grace)
            self._router = None

    def _wait(self, child: _Process, url: str) -> None:
        deadline = time.monotonic() + self.startup_timeout
        with httpx.Client(timeout=5.0, trust_env=False) as http:
            while True:
                code = child.proc.poll()
                if code is not None:
                    raise EngineError(f"{child.name} exited with code {code} before it was ready; the end of "
                                      f"{child.log}:\n{child.tail()}")
                with contextlib.suppress(httpx.HTTPError):
                    if http.get(url).status_code == 200:
                        return
                if time.monotonic() > deadline:
                    raise EngineError(f"{child.name} did not answer {url} within {self.startup_timeout:.0f} s; the "
                                      f"end of {child.log}:\n{child.tail()}")
                time.sleep(0.5)

    def stop(self, grace: float = 10.0, *, failed: bool = False) -> Path | None:
        """End the router, then every replica with its whole process group (idempotent); then
        remove the temporary log directory unless ``failed`` (a start or a child failed) or
        :attr:`keep_logs`.

        Returns:
            The log directory when it is kept (to name it), None when it was removed or never made.
        """
        self.stop_router(min(grace, 5.0))
        for replica in self._replicas:
            replica.terminate()
        for replica in self._replicas:
            replica.kill(grace)
        self._replicas = []
        temporary = self._temporary_logs
        if temporary is not None and not failed and not self.keep_logs:
            shutil.rmtree(temporary, ignore_errors=True)
            self._temporary_logs = self._log_dir = None
            return None
        return self._log_dir

    def exited(self) -> str | None:
        """The name and exit code of a child that is no longer running (None: all run)."""
        for child in [*self._replicas, *([self._router] if self._router is not None else [])]:
            code = child.proc.poll()
            if code is not None:
                return f"{child.name} exited with code {code} (log {child.log})"
        return None

    @property
    def pids(self) -> list[int]:
        """The process ids of the children started (group leaders: replicas, then the router)."""
        return [c.proc.pid for c in [*self._replicas, *([self._router] if self._router else [])]]

    def metrics(self) -> list[dict[str, float]]:
        """Each replica's ``/metrics``, summed by name (:func:`parse_metrics`).

        Raises:
            EngineError: a replica did not answer.
        """
        out = []
        with httpx.Client(timeout=10.0, trust_env=False) as http:
            for url in self.replica_urls:
                try:
                    out.append(parse_metrics(http.get(f"{url}/metrics").raise_for_status().text))
                except httpx.HTTPError as e:
                    raise EngineError(f"cannot read {url}/metrics: {e}") from e
        return out

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop(failed=exc is not None and not isinstance(exc, KeyboardInterrupt))

    def describe(self) -> list[str]:
        """One line per child: its name and command (for a dry run or a start-up message)."""
        lines = [f"replica {i}: {' '.join(self.replica_command(i))}" for i in range(len(self.replica_ports))]
        return [*lines, f"router: {' '.join(self.router_command())}"]
