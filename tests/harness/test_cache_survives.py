"""The prefix cache survives what long runs do (issue 32, item 4), on token ids: after ``resume``
(a new harness and agent, as another process would build them), a fork, a sub-agent's return, with
nested AGENTS.md loaded, a ``tool_search`` catalog restored and skills listed, the first new
prompt's ids start with the last prompt's ids; compaction and ``task`` children keep the
conversation's reasoning effort, and a run that switches it is warned about (the effort is in the
prompt's head: no cache serves it). The same measured with cached tokens on embedded k3-tiny:
``bench/cache.py --engine`` (resume by a new Agent, a fork)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from kimik3 import Agent, ChatRequest, ContextPolicy, K3Tokenizer, ModelSettings, ScriptedEngine, tool
from kimik3.agents import fork_session
from kimik3.formats.k3 import EncodedPrompt
from kimik3.harness import FEATURES, CodingHarness
from kimik3.tools import tool_search
from kimik3.types import AssistantMessage, Message, UserMessage
from tests.k3vocab import write_model_dir

from .helpers import answer, calls
from .test_skills import make_skill


class Recording(ScriptedEngine):
    """Records the prompt ids of every call, with whether it was a sub-agent's."""

    def __init__(self, responses: Any, tokenizer: K3Tokenizer) -> None:
        super().__init__(responses, tokenizer=tokenizer)
        self.ids: list[list[int]] = []
        self.child: list[bool] = []
        self.efforts: list[str | None] = []

    def encode(self, request: ChatRequest, **k3: Any) -> EncodedPrompt:
        out = super().encode(request, **k3)
        self.ids.append(list(out.ids))
        self.child.append(str(request.messages[0].content).startswith("You are a sub-agent"))
        self.efforts.append(request.settings.reasoning_effort)
        return out


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory) -> K3Tokenizer:
    return K3Tokenizer.from_pretrained(write_model_dir(tmp_path_factory.mktemp("k3"), num_base_tokens=163_584))


@tool
def get_time(city: str) -> str:
    """The local time in a city.

    Args:
        city: the city.
    """
    return f"noon in {city}"


@tool
def get_weather(city: str) -> str:
    """The weather in a city.

    Args:
        city: the city.
    """
    return f"rain in {city}"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "pkg" / "deep").mkdir(parents=True)
    (root / "AGENTS.md").write_text("Run tests with `make test`.\n")
    (root / "pkg" / "AGENTS.md").write_text("pkg: use tabs.\n")
    (root / "pkg" / "deep" / "m.py").write_text("x = 1\n")
    make_skill(root / ".agents" / "skills" / "word-count")
    (root / "notes.txt").write_text("one two three\n")
    return root


def agent(ws: Path, engine: ScriptedEngine, **harness: Any) -> Agent[str]:
    """The coding harness (AGENTS.md, skills, sub-agents) plus a tool search over two more tools:
    built anew each time, as a new ``kimik3 resume`` process builds it."""
    h = CodingHarness(ws, features=FEATURES - {"checkpoints", "background"}, sandbox="none", **harness)
    tools, instructions, hooks = h.parts(engine=engine)
    return Agent(instructions=instructions, tools=[*tools, tool_search([get_time, get_weather])], engine=engine,
                 hooks=hooks)


FIRST_RUN = [
    calls(("read_file", {"path": "pkg/deep/m.py"})),  # loads pkg/AGENTS.md into the result
    calls(("search_tools", {"query": "get_time"})),  # a dynamic declaration of get_time
    calls(("get_time", {"city": "Oslo"})),
    calls(("load_skill", {"name": "word-count"})),  # the skills listed in load_skill's declaration
    answer("x is 1; noon in Oslo."),
]


def starts_with(ids: list[int], prefix: list[int]) -> bool:
    return len(ids) > len(prefix) and ids[: len(prefix)] == prefix


async def first_run(ws: Path, tok: K3Tokenizer, session: Path) -> Recording:
    engine = Recording(list(FIRST_RUN), tok)
    result = await agent(ws, engine).run("What is x, and the time in Oslo?", session=session)
    assert (result.output, result.stop_reason) == ("x is 1; noon in Oslo.", "completed")
    tools = [str(m.content) for m in result.messages if m.role == "tool"]
    assert "[Project instructions from pkg/AGENTS.md" in tools[0] and tools[2] == "noon in Oslo"
    assert '<skill_content name="word-count">' in tools[3]
    return engine


async def test_after_resume_the_first_prompt_starts_with_the_last_one(ws: Path, tok: K3Tokenizer) -> None:
    session = ws.parent / "s.jsonl"
    before = await first_run(ws, tok, session)
    after = Recording([calls(("get_time", {"city": "Rome"})), answer("noon in Rome.")], tok)
    result = await agent(ws, after).resume(session, "And in Rome?")  # get_time restored from the catalog
    assert result.output == "noon in Rome." and result.issues == []
    assert starts_with(after.ids[0], before.ids[-1])
    assert starts_with(after.ids[1], after.ids[0])


async def test_a_fork_starts_with_the_prompt_of_the_message_it_forks_at(ws: Path, tok: K3Tokenizer) -> None:
    session = ws.parent / "s.jsonl"
    before = await first_run(ws, tok, session)
    # messages: 0 system, 1 user, 2 assistant (read_file), 3 tool, 4 assistant (search_tools), ...
    fork = fork_session(session, 4, ws.parent / "fork.jsonl")
    after = Recording([answer("x is 1.")], tok)
    await agent(ws, after).resume(fork, "Just x, then.")  # the unanswered search gets an error result
    assert starts_with(after.ids[0], before.ids[1])  # the prompt that wrote message 4


async def test_after_a_sub_agent_the_parents_prompt_extends_its_last_one(ws: Path, tok: K3Tokenizer) -> None:
    def script(messages: list[Message]) -> str:
        turns = sum(isinstance(m, AssistantMessage) for m in messages)
        if str(messages[0].content).startswith("You are a sub-agent"):
            return calls(("read_file", {"path": "notes.txt"})) if turns == 0 else answer("one two three")
        return calls(("task", {"description": "read notes", "prompt": "Read notes.txt."})) if turns == 0 \
            else answer("notes.txt says one two three")

    engine = Recording(script, tok)
    result = await agent(ws, engine).run("What does notes.txt say?", session=ws.parent / "s.jsonl",
                                         settings=ModelSettings(reasoning_effort="low"))
    assert result.output == "notes.txt says one two three"
    assert engine.child == [False, True, True, False]
    parent = [ids for ids, child in zip(engine.ids, engine.child, strict=True) if not child]
    children = [ids for ids, child in zip(engine.ids, engine.child, strict=True) if child]
    assert starts_with(parent[1], parent[0])  # the child's messages never entered the parent's history
    assert starts_with(children[1], children[0])
    assert engine.efforts == ["low"] * 4  # the child runs with the conversation's effort


async def test_compaction_keeps_the_effort_and_extends_the_prompt(tok: K3Tokenizer) -> None:
    turns: list[int] = []

    def script(messages: list[Message]) -> str:
        last = messages[-1]
        if isinstance(last, UserMessage) and "Summarise the conversation" in str(last.content):
            return answer("SUMMARY: read three times")
        turns.append(len(turns))  # compaction shortens the history: count the turns here
        return calls(("get_time", {"city": f"city {len(turns)} " + "far " * 300})) if len(turns) < 5 else answer("done")

    engine = Recording(script, tok)
    policy = ContextPolicy(context_window=4000, compact_at=0.5, keep_recent_turns=1)
    result = await Agent(tools=[get_time], engine=engine, context=policy).run(
        "go", settings=ModelSettings(reasoning_effort="high"))
    assert result.output == "done"
    asks = [i for i, c in enumerate(engine.calls) if "Summarise the conversation" in str(c.messages[-1].content)]
    assert asks and all(starts_with(engine.ids[i], engine.ids[i - 1]) for i in asks)
    assert set(engine.efforts) == {"high"}


async def test_a_run_that_switches_the_effort_is_warned_about(ws: Path, tok: K3Tokenizer,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    session = ws.parent / "s.jsonl"
    before = Recording([answer("a")], tok)
    await Agent(engine=before).run("hi", session=session)  # effort max (K3's agentic default)
    same = Recording([answer("b")], tok)
    with caplog.at_level(logging.WARNING, logger="kimik3.agent"):
        await Agent(engine=same).resume(session, "again")
    assert caplog.records == []
    switched = Recording([answer("c")], tok)
    with caplog.at_level(logging.WARNING, logger="kimik3.agent"):
        await Agent(engine=switched).resume(session, "once more", settings=ModelSettings(reasoning_effort="low"))
    (warning,) = [r.getMessage() for r in caplog.records]
    assert warning == (f"kimik3: {session} ran with reasoning_effort 'max', this run uses 'low': the effort is part "
                       "of the prompt's head, so no prefix cache serves this run's first request (keep one effort "
                       "per conversation, or start a new one)")
    assert starts_with(same.ids[0], before.ids[-1])
    assert not starts_with(switched.ids[0], same.ids[-1])  # what the warning is about
