"""The window a chat endpoint states (issue 41): with ``--model`` given, ``/v1/models`` is asked
once all the same, and its ``max_model_len`` for that model is the window the Agent and the CLI
plan compaction for (before: 131,072 until the first refusal). A server without ``/v1/models``
(404), or one that does not list the model, leaves the window to what else is known, said once
in a log line. Against a loopback server (tests/engines/sse_server.py) that enforces the window
with vLLM's words, counting the request's JSON characters / 4."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from kimik3 import Agent, RemoteEngine, tool
from kimik3.agents import load_session
from kimik3.agents._prompts import COMPACTION_REQUEST
from kimik3.engines import _remote as remote
from tests.engines.hosted_server import HostedAPI, tokens
from tests.engines.sse_server import Reply, SSEServer

ROOT = Path(__file__).resolve().parents[2]
WINDOW = 4096


@tool
def read(part: int) -> str:
    """Read one part of the report.

    Args:
        part: which part.
    """
    return f"part {part}: " + "lorem " * 100


def model(calls: int, name: str = "read", arguments: Any = None) -> Any:
    """The model: ``calls`` calls of ``name`` one after another (``arguments(i)``, default
    ``{"part": i}``), then "done"; a summary when asked."""
    made = [0]

    def reply(n: int, body: dict[str, Any]) -> dict[str, Any]:
        last = body["messages"][-1]
        if last["role"] == "user" and last.get("content") == COMPACTION_REQUEST:
            return {"content": "SUMMARY: the parts read so far were all lorem."}
        if made[0] >= calls:
            return {"content": "done"}
        made[0] += 1
        args = arguments(made[0]) if arguments else {"part": made[0]}
        return {"reasoning_content": "next", "tool_calls": [{"index": 0, "id": f"call_{made[0]}", "type": "function",
                                                             "function": {"name": name, "arguments": json.dumps(args)}}]}

    return reply


def vllm(calls: int, **kwargs: Any) -> HostedAPI:
    """A server that refuses a request over :data:`WINDOW` tokens (no hosted API's other rules)."""
    return HostedAPI(token_limit=WINDOW, rules={}, reply=model(calls, **kwargs))


async def test_a_given_model_gets_the_window_v1_models_states_and_compacts_before_any_overflow() -> None:
    api = vllm(40)
    listed = [{"id": "other", "max_model_len": 1_048_576}, {"id": "k3", "max_model_len": WINDOW}]
    async with SSEServer(api, models=listed) as server:
        engine = RemoteEngine(base_url=server.base_url, model="k3")
        assert await engine.context_window() == WINDOW
        result = await Agent(tools=[read], engine=engine).run("Read the 40 parts.")
        again = await Agent(tools=[read], engine=engine).run("Read them again.")  # the window is kept
        await engine.aclose()
    assert server.models_asked == 1  # once, cached
    assert (result.stop_reason, result.output, result.issues) == ("completed", "done", [])
    assert result.summaries + result.cleared_results >= 1  # compacted ...
    assert api.refusals == [] and max(map(tokens, api.seen)) <= WINDOW  # ... before any overflow
    assert (again.stop_reason, again.output) == ("completed", "done")


@pytest.mark.parametrize("models", ["404", [{"id": "other", "max_model_len": WINDOW}], [{"id": "k3"}]],
                         ids=["404", "not-listed", "no-window"])
async def test_no_window_in_v1_models_falls_back_with_one_log_line(models: Any,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    api = vllm(3)
    async with SSEServer(api, models=models) as server:
        engine = RemoteEngine(base_url=server.base_url, model="k3")
        with caplog.at_level(logging.WARNING, logger="kimik3"):
            result = await Agent(tools=[read], engine=engine).run("Read 3 parts.")
            assert await engine.context_window() is None  # nothing else knows an id "k3" on this host
        await engine.aclose()
    assert (result.stop_reason, result.output) == ("completed", "done")
    assert server.models_asked == 1 and [r["path"] for r in server.requests] == ["/v1/chat/completions"] * 4
    (line,) = [r.getMessage() for r in caplog.records]
    why = ("GET /models failed (NotFoundError: 404: Error code: 404 - Not Found)" if models == "404"
           else "/models states no window for 'k3'")
    assert line == f"kimik3: {why}; the context window is unknown until a request is refused as too long"


async def test_a_fallback_keeps_a_window_kimik3_knows_of_the_model(caplog: pytest.LogCaptureFixture) -> None:
    async with SSEServer(vllm(0), models="404") as server:
        engine = RemoteEngine(base_url=server.base_url, model="kimi-k3.1-pro")
        with caplog.at_level(logging.WARNING, logger="kimik3"):
            assert await engine.context_window() == 1_048_576
        await engine.aclose()
    assert [r.getMessage() for r in caplog.records] == [
        "kimik3: GET /models failed (NotFoundError: 404: Error code: 404 - Not Found); the context window is taken as 1,048,576 tokens"]


async def test_a_v1_models_that_does_not_answer_is_not_waited_for(monkeypatch: pytest.MonkeyPatch,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    """A hung ``/v1/models`` (its answer's body never comes) costs MODELS_TIMEOUT, then the run
    goes on; logged at INFO, as an unreachable endpoint is (the first request says that, typed)."""
    monkeypatch.setattr(remote, "MODELS_TIMEOUT", 0.2)
    api = vllm(1)
    hung = Reply(headers={"content-type": "application/json"}, parts=[3.0, b"{}"])
    async with SSEServer(lambda n, body: hung if n == 0 else api(n, body), models="respond") as server:
        engine = RemoteEngine(base_url=server.base_url, model="kimi-k3.1-pro")
        with caplog.at_level(logging.INFO, logger="kimik3.engines.remote"):
            result = await Agent(tools=[read], engine=engine).run("Read 1 part.")
        await engine.aclose()
    assert (result.stop_reason, result.output) == ("completed", "done")
    assert [r["path"] for r in server.requests] == ["/v1/models"] + ["/v1/chat/completions"] * 2
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("INFO", "kimik3: GET /models did not answer (nothing in 0.2 s); the context window is taken as "
                 "1,048,576 tokens")]


async def test_the_cli_with_model_plans_for_the_window_v1_models_states(tmp_path: Path) -> None:
    """``kimik3 run --base-url URL --model k3`` against a server whose /v1/models states 4,096:
    the coding harness's head is said against 4,096, and old results are cleared before any
    request is refused."""
    for i in range(30):
        (tmp_path / f"m{i}.py").write_text("".join(f"x{j} = {i * j}\n" for j in range(30)))
    api = vllm(30, name="read_file", arguments=lambda i: {"path": f"m{i - 1}.py"})
    home, session = tmp_path / "home", tmp_path / "s.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIMIK3_", "OPENAI_", "MOONSHOT_"))}
    async with SSEServer(api, models=[{"id": "k3", "max_model_len": WINDOW}]) as server:
        run = await anyio.run_process(
            [sys.executable, "-m", "kimik3", "run", "Read every module.", "--plain", "--base-url", server.base_url,
             "--model", "k3", "--session", str(session), "-w", str(tmp_path), "--sandbox", "none"],
            env={**env, "KIMIK3_HOME": str(home), "PYTHONPATH": str(ROOT)}, cwd=tmp_path, check=False)
    out, err = run.stdout.decode(), run.stderr.decode()
    assert run.returncode == 0, err
    assert err == ("kimik3: the prompt's head (tool declarations, instructions and the first task: "
                   "2,257 tokens) does not fit under half of the compaction threshold (1,638 tokens of the "
                   "4,096-token window): compaction cannot summarise this conversation, old tool results are "
                   "cleared and the oldest turns dropped instead, without a summary; give fewer tools or "
                   "shorter instructions or task, or serve a larger window (vLLM --max-model-len)\n")
    lines = out.splitlines()
    assert "[turn 5] cleared 3 old tool results, dropped 6 messages of the oldest turns" in lines
    assert "[turn 31] answer: done" in lines
    assert api.refusals == [] and max(map(tokens, api.seen)) <= WINDOW and server.models_asked == 1
    assert load_session(session)[-1].content == "done"
