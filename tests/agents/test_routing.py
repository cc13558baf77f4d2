"""The routing key of a conversation (issue 32, item 1): the same on every request of a session, after
``resume`` too, different for another session; a fork and each sub-agent get their own (a sub-agent
names its parent); compaction and retries keep it; ``routing_key=`` sets it, None turns it off; an
edited session file never turns into a header it cannot be."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncGenerator, Sequence
from pathlib import Path
from typing import Any

import pytest

from kimik3 import Agent, Client, ContextPolicy, ModelSettings, ScriptedEngine, ServiceUnavailableError, UserError
from kimik3.agents import fork_session
from kimik3.engines import Engine, ModelCall
from kimik3.formats.k3 import Event
from kimik3.harness import FEATURES, CodingHarness
from kimik3.types import AssistantMessage, ChatCompletion, ChatRequest, Message, Routing, UserMessage

from .test_agent import add, answer, calls


def keys(engine: ScriptedEngine) -> list[Routing | None]:
    return [c.request.routing for c in engine.calls]


def header(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text().splitlines()[0]))


async def test_every_request_of_a_session_and_its_resume_carries_the_sessions_id(tmp_path: Path) -> None:
    session = tmp_path / "s.jsonl"
    engine = ScriptedEngine([calls(("add", {"a": 1, "b": 2})), answer("3"), answer("again 3")])
    agent = Agent(tools=[add], engine=engine)
    await agent.run("1+2?", session=session)
    own = header(session)["id"]
    assert isinstance(own, str) and len(own) == 32 and int(own, 16) >= 0  # 32 hex digits, random
    await Agent(tools=[add], engine=engine).resume(session, "and again?")  # another process would do the same
    assert keys(engine) == [Routing(own)] * 3

    other = ScriptedEngine([answer("3")])
    await Agent(tools=[add], engine=other).run("1+2?", session=tmp_path / "t.jsonl")
    assert keys(other) == [Routing(header(tmp_path / "t.jsonl")["id"])] != [Routing(own)]


async def test_a_fork_is_a_conversation_of_its_own(tmp_path: Path) -> None:
    session = tmp_path / "s.jsonl"
    await Agent(tools=[add], engine=ScriptedEngine([calls(("add", {"a": 1, "b": 2})), answer("3")])).run(
        "1+2?", session=session)
    fork = fork_session(session, 1, tmp_path / "f.jsonl")
    engine = ScriptedEngine([answer("3"), answer("3 still")])
    await Agent(tools=[add], engine=engine).resume(fork, "sure?")
    await Agent(tools=[add], engine=engine).resume(fork, "really?")
    assert header(fork)["id"] != header(session)["id"]
    assert keys(engine) == [Routing(header(fork)["id"])] * 2  # its own, kept across its own resumes


async def test_without_a_session_the_key_follows_the_conversations_head() -> None:
    engine = ScriptedEngine([answer("a"), answer("b"), answer("c"), answer("d")])
    agent = Agent(instructions="Be brief.", engine=engine)
    history: list[Message] = []
    await agent.run("first task", messages=history)
    await agent.run("second task", messages=history)  # the same conversation, continued
    await agent.run("another conversation")
    await Agent(instructions="Be thorough.", engine=engine).run("first task")
    a, b, c, d = keys(engine)
    assert a == b and a is not None
    assert len({a, c, d}) == 3  # another task, other instructions: other conversations


async def test_compaction_and_retries_keep_the_key(tmp_path: Path) -> None:
    turns = [0]  # the model's turns so far (compaction takes assistant messages out of the history)

    def script(messages: list[Message]) -> str:
        last = messages[-1]
        if isinstance(last, UserMessage) and "Summarise the conversation" in str(last.content):
            return answer("SUMMARY: added twice")
        turns[0] += 1
        n = turns[0]
        return calls(("add", {"a": n, "b": 1}), reasoning="word " * 300) if n < 6 else answer("done")

    engine = ScriptedEngine(script)
    flaky = Flaky(engine, fail=[1, 3])  # the 2nd and 4th attempts fail with a 503 and are retried
    policy = ContextPolicy(context_window=3000, compact_at=0.5, keep_recent_turns=1)
    result = await Agent(tools=[add], client=Client(flaky), context=policy).run("go", session=tmp_path / "s.jsonl")
    assert result.output == "done"
    summaries = [c for c in engine.calls if "Summarise the conversation" in str(c.messages[-1].content)]
    assert summaries  # a compaction happened
    assert flaky.attempts == len(engine.calls) + 2
    assert set(flaky.seen) == set(keys(engine)) == {Routing(header(tmp_path / "s.jsonl")["id"])}


async def test_routing_key_sets_the_key_records_it_and_none_turns_it_off(tmp_path: Path) -> None:
    session = tmp_path / "s.jsonl"
    engine = ScriptedEngine([answer("a"), answer("b"), answer("c")])
    await Agent(engine=engine, routing_key="team-7/ticket-42").run("x", session=session)
    await Agent(engine=engine).resume(session, "y")  # "auto" goes on with the key the session was routed by
    await Agent(engine=engine, routing_key=None).run("z")
    assert keys(engine) == [Routing("team-7/ticket-42"), Routing("team-7/ticket-42"), None]
    records = [json.loads(line) for line in session.read_text().splitlines() if line.startswith('{"routing"')]
    assert records == [{"routing": {"key": "team-7/ticket-42", "parent": None}}]  # once: resume found it


@pytest.mark.parametrize("value", ["two words", "", 42, b"bytes"])
def test_a_routing_key_that_cannot_be_one_is_refused(value: Any) -> None:
    with pytest.raises(UserError):
        Agent(engine=ScriptedEngine([]), routing_key=value)


async def test_an_edited_session_never_sends_a_key_that_is_not_one(tmp_path: Path,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    session = tmp_path / "s.jsonl"
    await Agent(engine=ScriptedEngine([answer("a")])).run("x", session=session)
    lines = session.read_text().splitlines()
    head = json.loads(lines[0])
    head["id"] = "evil\r\nX-Injected: 1"
    routing = json.dumps({"routing": {"key": "also evil\n", "parent": None}})
    session.write_text("\n".join([json.dumps(head), *lines[1:], routing]) + "\n")
    engine = ScriptedEngine([answer("b")])
    with caplog.at_level(logging.WARNING, logger="kimik3.agent"):
        await Agent(engine=engine).resume(session, "y")
    (key,) = keys(engine)
    assert key is not None and len(key.key) == 32 and key.key != head["id"]  # the header's hash instead
    assert any("an unusable routing record, skipped" in r.getMessage() for r in caplog.records)


async def test_each_sub_agent_has_its_own_key_its_parent_named_and_the_parents_effort(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("alpha\n")

    def script(messages: list[Message]) -> str:
        child = str(messages[0].content).startswith("You are a sub-agent")
        done = sum(isinstance(m, AssistantMessage) for m in messages)
        if child:
            return calls(("read_file", {"path": "a.txt"})) if done == 0 else answer("alpha")
        if done == 0:
            return calls(("task", {"description": "read a", "prompt": "Read a.txt."}),
                         ("task", {"description": "read a again", "prompt": "Read a.txt once more."}))
        return answer("both said alpha")

    engine = ScriptedEngine(script)
    harness = CodingHarness(tmp_path, features=FEATURES - {"checkpoints", "background"}, sandbox="none", skills=False)
    session = tmp_path / "s.jsonl"
    result = await harness.agent(engine=engine).run("read a twice", session=session,
                                                    settings=ModelSettings(reasoning_effort="high"))
    assert result.output == "both said alpha"
    parent = Routing(header(session)["id"])
    mine = [c for c in engine.calls if not str(c.messages[0].content).startswith("You are a sub-agent")]
    children = [c for c in engine.calls if c not in mine]
    assert [c.request.routing for c in mine] == [parent, parent]
    child_keys = {c.request.routing for c in children}
    assert len(children) == 4 and len(child_keys) == 2  # two children, two calls each, a key per child
    assert {k.parent for k in child_keys if k is not None} == {parent.key}
    assert parent not in child_keys
    # one reasoning effort per conversation tree: the children run with the parent run's
    assert {c.request.settings.reasoning_effort for c in engine.calls} == {"high"}


class Flaky(Engine):
    """Delegates to ``engine``; the attempts numbered in ``fail`` raise a 503 first (retried by the client)."""

    def __init__(self, engine: Engine, fail: Sequence[int]) -> None:
        self.engine, self.fail, self.attempts = engine, set(fail), 0
        self.seen: list[Routing | None] = []

    def stream(self, request: ChatRequest, **k3: Any) -> ModelCall:
        return ModelCall(self._call(request, k3))

    async def _call(self, request: ChatRequest, k3: dict[str, Any]) -> AsyncGenerator[Event | ChatCompletion, None]:
        self.attempts += 1
        self.seen.append(request.routing)
        if self.attempts - 1 in self.fail:
            raise ServiceUnavailableError("503", status_code=503, retry_after=0.0)
        async with self.engine.stream(request, **k3) as call:
            async for event in call:
                yield event
        yield call.completion


_KEY_IN_A_CHILD = """
import asyncio, sys
from kimik3 import Agent, ScriptedEngine
from kimik3.formats.k3 import render_output
engine = ScriptedEngine([render_output({"reasoning_content": "r", "content": "a"})])
asyncio.run(Agent(instructions="Be brief.", engine=engine).run("the same prompt"))
print(engine.calls[0].request.routing.key)
"""


def test_without_a_session_the_key_is_salted_per_process() -> None:
    # issue 40: the key was sha256 of the prompt's head: two users' processes sending the same
    # prompt collided on one replica, and anyone could compute the key of a known prompt
    import hashlib
    import os
    import subprocess
    import sys

    from kimik3.types import SystemMessage, dump_message

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    one, two = (subprocess.run([sys.executable, "-c", _KEY_IN_A_CHILD], capture_output=True, text=True, timeout=300,
                               env=env, check=True).stdout.strip() for _ in range(2))
    assert len(one) == len(two) == 32 and one != two
    head = [dump_message(SystemMessage(content="Be brief.")), dump_message(UserMessage(content="the same prompt"))]
    unsalted = hashlib.sha256(json.dumps(head, ensure_ascii=False, sort_keys=True).encode()).hexdigest()[:32]
    assert unsalted not in (one, two)


_KEYS_IN_FORKED_WORKERS = """
import asyncio, os
from kimik3 import Agent, ScriptedEngine
from kimik3.formats.k3 import render_output

def key():
    engine = ScriptedEngine([render_output({"reasoning_content": "r", "content": "a"})])
    asyncio.run(Agent(instructions="Be brief.", engine=engine).run("the same prompt"))
    return engine.calls[0].request.routing.key

print(key(), flush=True)
for _ in range(2):  # two users' workers of a pre-forking server: each its own salt
    pid = os.fork()
    if pid == 0:
        print(key(), flush=True)
        os._exit(0)
    os.waitpid(pid, 0)
"""


def test_forked_workers_do_not_share_the_salt() -> None:
    # a variant of issue 40's unsalted key (a40c): the salt was drawn once at import, so the
    # workers a pre-forking server forks after importing kimik3 all sent one key for one prompt
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", _KEYS_IN_FORKED_WORKERS], capture_output=True, text=True,
                         timeout=300, env={**os.environ, "PYTHONPATH": str(root)}, check=True).stdout.split()
    assert len(out) == 3 and all(len(k) == 32 for k in out) and len(set(out)) == 3, out
