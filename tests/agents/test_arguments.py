"""Misuse of Agent / Client / settings is a UserError naming the parameter, raised at
construction (or at run()'s start), never an AttributeError from deep inside the loop; and
run(messages=...) takes OpenAI-shaped dicts as Client.chat does."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kimik3 import Agent, Budgets, Client, ContextPolicy, ModelSettings, ScriptedEngine, UserError, UserMessage
from tests.agents.test_agent import answer


def _engine() -> ScriptedEngine:
    return ScriptedEngine([answer("done")])


CASES: list[tuple[str, Callable[[], Any], str]] = [
    ("Agent(engine='x')", lambda: Agent(engine="x"), r"Agent\(engine=\.\.\.\) must be an Engine .*got str 'x'"),
    ("Agent(client='x')", lambda: Agent(client="x"), r"Agent\(client=\.\.\.\) must be a kimik3\.Client, got str"),
    ("Client('x')", lambda: Client("x"), r"Client\(engine=\.\.\.\) must be an Engine"),
    ("Client(max_retries=-1)", lambda: Client(_engine(), max_retries=-1), r"max_retries=\.\.\.\) must be an integer >= 0, got -1"),
    ("Client(max_retries='2')", lambda: Client(_engine(), max_retries="2"), r"must be an integer >= 0, got '2'"),
    ("budgets=5", lambda: Agent(engine=_engine(), budgets=5), r"Agent\(budgets=\.\.\.\) must be a Budgets, got int 5"),
    ("settings=dict", lambda: Agent(engine=_engine(), settings={"temperature": 1}), "must be a ModelSettings, got dict"),
    ("context='x'", lambda: Agent(engine=_engine(), context="x"), "must be a ContextPolicy, got str"),
    ("tools=None", lambda: Agent(engine=_engine(), tools=None), r"Agent\(tools=\.\.\.\) must be a list of tools, got NoneType"),
    ("tools='bash'", lambda: Agent(engine=_engine(), tools="bash"), "must be a list of tools, got str 'bash'"),
    ("max_turns='3'", lambda: Agent(engine=_engine(), max_turns="3"), r"Budgets\.turns \(max_turns\) must be an integer >= 1, got '3'"),
    ("max_turns=0", lambda: Agent(engine=_engine(), max_turns=0), r"must be an integer >= 1, got 0"),
    ("max_turns=-1", lambda: Agent(engine=_engine(), max_turns=-1), r"must be an integer >= 1, got -1"),
    ("max_turns=True", lambda: Agent(engine=_engine(), max_turns=True), r"must be an integer >= 1, got True"),
    ("tokenizer=5", lambda: Agent(engine=_engine(), tokenizer=5), "must be a K3Tokenizer or a path, got int 5"),
    ("instructions=5", lambda: Agent(engine=_engine(), instructions=5), r"Agent\(instructions=\.\.\.\) must be a str or None"),
    ("output_type=5", lambda: Agent(engine=_engine(), output_type=5), r"output_type=\.\.\.\) must be a type pydantic can validate, got 5"),
    ("approval='x'", lambda: Agent(engine=_engine(), approval="x"), r"approval=\.\.\.\) must be a callable"),
    ("Budgets(seconds=-1)", lambda: Budgets(seconds=-1), r"Budgets\.seconds must be a finite number > 0 or None, got -1"),
    ("Budgets(seconds=nan)", lambda: Budgets(seconds=float("nan")), r"Budgets\.seconds must be a finite number > 0"),
    ("Budgets(tokens='x')", lambda: Budgets(tokens="x"), r"Budgets\.tokens must be an integer >= 1 or None, got 'x'"),
    ("ModelSettings(reasoning_effort='ultra')", lambda: ModelSettings(reasoning_effort="ultra"),  # type: ignore[arg-type]
     r"ModelSettings\.reasoning_effort must be low, high, max or none, got 'ultra'"),
    ("ModelSettings(top_p=0)", lambda: ModelSettings(top_p=0), r"ModelSettings\.top_p must be a finite number > 0 and <= 1 or None, got 0"),
    ("ContextPolicy(compact_at=2)", lambda: ContextPolicy(compact_at=2), r"ContextPolicy\.compact_at must be a finite number > 0 and <= 1"),
    ("ScriptedEngine('abc')", lambda: ScriptedEngine("abc"), r"takes a list of raw outputs \(or a function\): wrap one string"),
    ("ScriptedEngine([1])", lambda: ScriptedEngine([1]), "must be a list of raw output strings"),
]


@pytest.mark.parametrize(("what", "make", "message"), CASES, ids=[c[0] for c in CASES])
def test_misuse_at_construction_is_a_user_error(what: str, make: Callable[[], Any], message: str) -> None:
    with pytest.raises(UserError, match=message):
        make()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"temperature": "hot"}, r"ModelSettings\.temperature must be a finite number >= 0 or None, got 'hot'"),
        ({"max_tokens": -5}, r"ModelSettings\.max_tokens must be an integer >= 1 or None, got -5"),
        ({"top_p": 1.5}, r"ModelSettings\.top_p must be a finite number > 0 and <= 1 or None, got 1\.5"),
        ({"settings": {"temperature": 0}}, r"settings must be a ModelSettings, got dict"),
    ],
)
async def test_chat_option_misuse_is_a_user_error(options: dict[str, Any], message: str) -> None:
    with pytest.raises(UserError, match=message):
        await Client(_engine()).chat([{"role": "user", "content": "hi"}], **options)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"task": 5}, r"run\(task=\.\.\.\) must be a str or a list of content parts, got int 5"),
        ({"task": [1]}, r"run\(task=\.\.\.\) is not a valid user message content"),
        ({"task": "hi", "session": 5}, r"run\(session=\.\.\.\) must be a file path or a SessionStore, got int 5"),
        ({"task": "hi", "session": "/tmp/a\0b.jsonl"}, r"run\(session=\.\.\.\) contains a NUL byte"),
        ({"messages": ({"role": "user", "content": "hi"},)}, r"run\(messages=\.\.\.\) must be a list of messages, got tuple"),
    ],
)
async def test_run_misuse_is_a_user_error(kwargs: dict[str, Any], message: str) -> None:
    engine = _engine()
    task = kwargs.pop("task", None)
    with pytest.raises(UserError, match=message):
        await Agent(engine=engine).run(task, **kwargs)
    assert engine.calls == []  # refused before any model call


async def test_run_continues_openai_shaped_dicts_in_place() -> None:
    engine = ScriptedEngine([answer("hello back"), answer("second")])
    history: list[Any] = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    result = await Agent(engine=engine).run(messages=history)
    assert result.output == "hello back"
    assert history is not None and [m.role for m in history] == ["system", "user", "assistant"]
    assert isinstance(history[1], UserMessage) and history[1].content == "hi"
    # a typed list mixed with a dict: converted too, the run continues it
    history.append({"role": "user", "content": [{"type": "text", "text": "again"}]})
    result = await Agent(engine=engine).run(messages=history)
    assert result.output == "second"
    assert [m.role for m in history] == ["system", "user", "assistant", "user", "assistant"]
