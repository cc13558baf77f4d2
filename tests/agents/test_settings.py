"""One settings type, merged model < agent < run (issue 29, item 2): K3's card defaults, then the
client's settings, then the agent's, then the run's (or the call's) — each field a later level
sets wins, what it leaves unset (None) stays."""

from __future__ import annotations

import pytest

from kimik3 import Agent, ChatRequest, Client, InvalidEffortError, ModelSettings, ScriptedEngine, UserError
from kimik3.types import AGENTIC_SETTINGS, SINGLE_STEP_SETTINGS

HI = [{"role": "user", "content": "hi"}]


def test_merged_takes_the_fields_the_override_sets_and_adds_extra_keys() -> None:
    base = ModelSettings(temperature=0.5, top_p=0.9, max_tokens=100, extra={"top_k": 20, "min_p": 0.1})
    top = ModelSettings(temperature=0.0, seed=7, extra={"min_p": 0.2})
    assert base.merged(top) == ModelSettings(temperature=0.0, top_p=0.9, max_tokens=100, seed=7,
                                             extra={"top_k": 20, "min_p": 0.2})
    assert base.merged(None) is base
    assert base.merged(ModelSettings()) == base
    assert base.extra == {"top_k": 20, "min_p": 0.1}  # merging never mutates a level


def test_a_bare_request_takes_the_cards_single_step_defaults() -> None:
    request = ChatRequest(messages=HI)
    assert request.settings == ModelSettings(reasoning_effort="max", temperature=1.0, top_p=0.95)
    assert request.settings == SINGLE_STEP_SETTINGS and request.thinking
    low = ChatRequest(messages=HI, settings=ModelSettings(top_p=0.5, reasoning_effort="none"))
    assert (low.settings.temperature, low.settings.top_p, low.thinking) == (1.0, 0.5, False)


def test_bad_settings_are_refused_where_they_are_built() -> None:
    with pytest.raises(InvalidEffortError, match=r"ModelSettings\.reasoning_effort must be low, high, max or none"):
        ModelSettings(reasoning_effort="medium")  # type: ignore[arg-type]
    with pytest.raises(UserError, match="unexpected option\\(s\\) temprature; expected reasoning_effort, "):
        ModelSettings.of(temprature=0.5)
    with pytest.raises(UserError, match=r"ChatRequest\(settings=\.\.\.\) must be a ModelSettings, got dict"):
        ChatRequest(messages=HI, settings={"temperature": 0})  # type: ignore[arg-type]
    with pytest.raises(UserError, match=r"Client\(settings=\.\.\.\) must be a ModelSettings"):
        Client(ScriptedEngine([]), settings={"top_p": 1})  # type: ignore[arg-type]


async def test_client_call_settings_merge_over_the_clients_and_the_card() -> None:
    engine = ScriptedEngine(["a", "b", "c"])
    client = Client(engine, settings=ModelSettings(temperature=0.3, seed=1, extra={"top_k": 5}))
    await client.chat(HI)
    await client.chat(HI, settings=ModelSettings(temperature=0.7, max_tokens=40), seed=2)
    await client.chat(HI, max_tokens=None, extra={"min_p": 0.1})  # None: not set
    first, second, third = (c.request.settings for c in engine.calls)
    assert first == ModelSettings(reasoning_effort="max", temperature=0.3, top_p=0.95, seed=1, extra={"top_k": 5})
    assert second == ModelSettings(reasoning_effort="max", temperature=0.7, top_p=0.95, max_tokens=40, seed=2,
                                   extra={"top_k": 5})
    assert third.max_tokens is None and third.extra == {"top_k": 5, "min_p": 0.1}


async def test_agent_settings_merge_model_then_agent_then_run() -> None:
    engine = ScriptedEngine(["one", "two", "three"])
    client = Client(engine, settings=ModelSettings(seed=3, max_tokens=500))
    agent = Agent(client=client, settings=ModelSettings(temperature=0.5, max_tokens=200))
    await agent.run("go")
    await agent.run("go", settings=ModelSettings(temperature=0.0, reasoning_effort="low", extra={"top_k": 1}))
    await agent.run("go")  # a run's settings are for that run only
    first, second, third = (c.request.settings for c in engine.calls)
    assert first == ModelSettings(reasoning_effort="max", temperature=0.5, top_p=1.0, max_tokens=200, seed=3)
    assert second == ModelSettings(reasoning_effort="low", temperature=0.0, top_p=1.0, max_tokens=200, seed=3,
                                   extra={"top_k": 1})
    assert third == first
    assert agent.settings == ModelSettings(temperature=0.5, max_tokens=200)  # the agent's own level is kept
    assert "thinking_effort=low" in engine.calls[1].prompt


async def test_an_agent_without_settings_samples_with_the_cards_agentic_defaults() -> None:
    engine = ScriptedEngine(["ok"])
    await Agent(engine=engine).run("go")
    assert engine.calls[0].request.settings == AGENTIC_SETTINGS
    assert ModelSettings(reasoning_effort="max", temperature=1.0, top_p=1.0) == AGENTIC_SETTINGS


async def test_a_run_refuses_settings_of_the_wrong_type() -> None:
    agent = Agent(engine=ScriptedEngine(["ok"]))
    with pytest.raises(UserError, match=r"run\(settings=\.\.\.\) must be a ModelSettings, got dict"):
        await agent.run("go", settings={"temperature": 0})  # type: ignore[arg-type]
