"""ScriptedEngine keeps every message once (issue 30, item 3): the calls of a growing conversation
cost O(messages) memory, where a copy of the message list per call (two, before) was O(n^2).
Measured with tracemalloc in a child process (its own interpreter, nothing else allocated)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import gc, json, sys, tracemalloc
import anyio
from kimik3 import Agent, ScriptedEngine, tool
from kimik3.formats.k3 import render_output
from kimik3.types import UserMessage

@tool
def read_file(path: str) -> str:
    '''Read a file.

    Args:
        path: the file.
    '''
    return f"x = {path!r}"

def script(turns):
    done = [0]
    def reply(messages):
        done[0] += 1
        if done[0] > turns:
            return render_output({"reasoning_content": "Done.", "content": "All read."})
        return render_output({"reasoning_content": "Next.", "tool_calls": [
            {"id": f"c{done[0]}", "function": {"name": "read_file", "arguments": {"path": f"m{done[0]}"}}}]})
    return reply

async def held(turns):
    engine = ScriptedEngine(script(turns), chunk_size=256)
    agent = Agent(tools=[read_file], engine=engine, max_turns=turns + 5)
    gc.collect()
    before = tracemalloc.get_traced_memory()[0]
    result = await agent.run("Read.")
    gc.collect()
    grown = tracemalloc.get_traced_memory()[0] - before
    calls = engine.calls
    # the log is faithful: each call's messages are the history as it was sent
    assert [len(c.messages) for c in calls[:3]] == [1, 3, 5], [len(c.messages) for c in calls[:3]]
    assert list(calls[-1].messages) == result.messages[:-1]
    assert isinstance(calls[0].messages[0], UserMessage) and calls[0].messages[0].content == "Read."
    return grown, len(calls), len(result.messages)

anyio.run(held, 3)  # warm: the vocabulary, lazy imports, caches (before tracing, which is slow)
tracemalloc.start()
out = {}
for turns in (100, 400):
    out[turns] = anyio.run(held, turns)
print(json.dumps(out))
"""


def test_the_scripted_engine_holds_each_message_once() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=600, env=env,
                          cwd=ROOT)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    (small, small_calls, small_messages), (big, big_calls, big_messages) = out["100"], out["400"]
    assert (small_calls, small_messages, big_calls, big_messages) == (101, 202, 401, 802)
    # 4x the turns: up to 4x the memory when each message is held once (a run's fixed part, ~0.1 MB,
    # brings it under: 2.98x once a call's record shrank to a shared head and one range tuple);
    # a copy per call would be ~16x
    assert 2.5 < big / small < 5.0, (small, big)


def test_the_calls_of_a_run_share_one_request_head_and_each_reads_back_as_sent() -> None:
    from kimik3 import ModelSettings, ScriptedEngine
    from kimik3.types import AssistantMessage, ChatRequest, UserMessage

    spec = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}
    engine = ScriptedEngine(["a"] * 3)
    history = [UserMessage(content="one")]
    engine.encode(ChatRequest(messages=list(history), tools=[spec]))
    history += [AssistantMessage(content="a"), UserMessage(content="two")]
    engine.encode(ChatRequest(messages=list(history), tools=[spec]))
    engine.encode(ChatRequest(messages=list(history), settings=ModelSettings(temperature=0.5)))
    first, second, third = engine.calls
    # equal heads (each request built its own settings and tools): the second call keeps the first's
    assert first.request.settings is second.request.settings and first.request.tools is second.request.tools
    assert third.request.settings is not second.request.settings
    assert first.request == ChatRequest(messages=history[:1], tools=[spec])
    assert second.request == ChatRequest(messages=history, tools=[spec])
    assert third.request == ChatRequest(messages=history, settings=ModelSettings(temperature=0.5))
    assert third.request.settings.temperature == 0.5 and third.request.tools == []
