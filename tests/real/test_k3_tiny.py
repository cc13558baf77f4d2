"""The whole real path with the tiny K3-speaking model (models/k3-tiny) on this CPU:
kimik3 encoding -> vLLM (in-process, and vLLM's OpenAI server with its own kimi_k3 renderer and
parsers) -> K3 output -> parsing -> tool execution -> back."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from kimik3 import Agent, Client, K3Tokenizer, ModelSettings, RemoteEngine, UserError, VLLMEngine
from kimik3.agents import CODING_INSTRUCTIONS, FinalEvent, ToolResultEvent
from kimik3.engines import ChatRequest, RemoteCompletionsEngine
from kimik3.formats.k3 import CLOSE, OPEN, SEP, ContentDelta, ReasoningDelta, ToolCallDone
from kimik3.tools.coding import coding_tools

from .conftest import K3_TINY

pytestmark = pytest.mark.asyncio(loop_scope="session")

DATA = Path(__file__).resolve().parents[1] / "data" / "k3_tiny_workspace"
TASK = "What is the first line of kettle.txt?"
GREEDY = ModelSettings(temperature=0.0, max_tokens=300)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return Path(shutil.copytree(DATA, tmp_path / "ws"))


def no_markers(text: str) -> bool:
    return not any(m in text for m in (OPEN, CLOSE, SEP, "<|end_of_msg|>"))


async def test_exact_prompt_ids_reach_vllm_and_generation_stops_at_end_of_msg(tiny_vllm: Any, workspace: Path) -> None:
    engine: VLLMEngine = tiny_vllm
    tok = K3Tokenizer.from_pretrained(K3_TINY)
    tools = [t.spec for t in coding_tools(workspace)]
    request = ChatRequest(
        messages=[{"role": "system", "content": CODING_INSTRUCTIONS}, {"role": "user", "content": TASK}],
        tools=tools, settings=GREEDY,
    )
    ids = engine.encode(request).ids
    assert list(ids) == tok.encode_messages(request.messages, tools)
    chunks = [c async for c in engine.generate(ids, request)]
    assert list(chunks[0].prompt_token_ids or []) == list(ids)
    text = "".join(c.text for c in chunks)
    assert chunks[-1].finish_reason == "stop"  # stopped by <|end_of_msg|>, not by max_tokens
    assert text.endswith("<|close|>message<|sep|>") and "<|end_of_msg|>" not in text
    # non-streaming from the encoded prompt, parsed by kimik3: the same greedy output
    done = await engine.complete(ChatRequest(messages=[], settings=GREEDY), prompt_ids=ids)
    assert done.raw_text == text and done.finish_reason == "tool_calls"
    assert done.message.tool_calls and done.message.tool_calls[0].function.name == "read_file"
    assert done.usage.prompt_tokens == len(ids)


async def test_leaving_a_model_call_early_aborts_the_request(tiny_vllm: Any) -> None:
    engine: VLLMEngine = tiny_vllm
    request = ChatRequest(
        messages=[{"role": "user", "content": TASK}],
        settings=ModelSettings(temperature=1.0, max_tokens=2000, extra={"ignore_eos": True, "stop_token_ids": []}),
    )
    got = []
    async with engine.stream(request) as call:
        async for event in call:
            got.append(event)
            if len(got) == 2:
                assert engine.num_unfinished_requests() == 1  # still generating
                break
    # no polling: leaving the `async with` closed the call, which aborted the request in vLLM
    assert len(got) == 2 and engine.num_unfinished_requests() == 0
    with pytest.raises(UserError, match="not finished"):
        call.completion  # noqa: B018 - the call was left early: no completion
    # and a Client call (retry wrapper included) does the same
    async with Client(engine).stream_request(request) as call2:
        async for _ in call2:
            break
    assert engine.num_unfinished_requests() == 0


async def test_agent_end_to_end_on_embedded_vllm(tiny_vllm: Any, workspace: Path) -> None:
    agent = Agent(instructions=CODING_INSTRUCTIONS, tools=coding_tools(workspace), engine=tiny_vllm,
                  settings=GREEDY, max_turns=4)
    events = [e async for e in agent.run_stream(TASK)]
    calls = [e for e in events if isinstance(e, ToolCallDone)]
    assert [(c.name, c.arguments) for c in calls[:1]] == [("read_file", {"path": "kettle.txt"})]
    results = [e for e in events if isinstance(e, ToolResultEvent)]
    assert results[0].result.content == "     1\tember lantern quartz\n     2\tmaple nutmeg"
    final = events[-1]
    assert isinstance(final, FinalEvent) and final.result.stop_reason == "completed"
    assert isinstance(final.result.output, str) and final.result.output and no_markers(final.result.output)
    reasoning = "".join(e.delta for e in events if isinstance(e, ReasoningDelta))
    assert reasoning and no_markers(reasoning)
    # every assistant message went back with its reasoning (K3 preserved thinking)
    assert all(m.reasoning_content for m in final.result.messages if m.role == "assistant")
    assert final.result.usage.prompt_tokens > 1000  # the tool declarations alone are ~1,170 tokens


async def test_server_chat_mode_and_raw_mode_agree(tiny_server: str, workspace: Path) -> None:
    url = tiny_server + "/v1"
    tools = [t.spec for t in coding_tools(workspace)]
    messages = [{"role": "system", "content": CODING_INSTRUCTIONS}, {"role": "user", "content": TASK}]
    chat = Client(RemoteEngine(base_url=url, model="k3-tiny"))  # vLLM renders and parses (kimi_k3)
    raw = Client(RemoteCompletionsEngine(base_url=url, model="k3-tiny", tokenizer=K3_TINY))  # kimik3 does
    c = await chat.chat(messages, tools=tools, temperature=0.0, max_tokens=300)
    r = await raw.chat(messages, tools=tools, temperature=0.0, max_tokens=300)
    assert r.message.tool_calls and c.message.tool_calls
    r_call, c_call = r.message.tool_calls[0], c.message.tool_calls[0]
    assert r_call.function.name == c_call.function.name == "read_file"
    assert r_call.function.parsed_arguments() == c_call.function.parsed_arguments() == {"path": "kettle.txt"}
    assert c.message.reasoning_content == r.message.reasoning_content and no_markers(r.message.reasoning_content or "")
    # vLLM's kimi_k3 renderer (through the model's tokenizer class, which delegates to kimik3's
    # encoder) and kimik3's own encoding give the same prompt
    assert c.usage.prompt_tokens == r.usage.prompt_tokens
    assert r.finish_reason == c.finish_reason == "tool_calls"
    # streaming through the server's parsers gives the same call
    events = [e async for e in chat.stream(messages, tools=tools, temperature=0.0, max_tokens=300)]
    done = [e for e in events if isinstance(e, ToolCallDone)]
    assert [(d.name, d.arguments) for d in done] == [("read_file", {"path": "kettle.txt"})]
    assert all(no_markers(e.delta) for e in events if isinstance(e, ReasoningDelta | ContentDelta))
    await chat.aclose()
    await raw.aclose()


@pytest.mark.parametrize("mode", ["chat", "raw"])
async def test_agent_over_the_server(tiny_server: str, workspace: Path, mode: str) -> None:
    engine = (RemoteCompletionsEngine(base_url=tiny_server + "/v1", model="k3-tiny", tokenizer=K3_TINY) if mode == "raw"
              else RemoteEngine(base_url=tiny_server + "/v1", model="k3-tiny"))
    agent = Agent(instructions=CODING_INSTRUCTIONS, tools=coding_tools(workspace), engine=engine,
                  settings=GREEDY, max_turns=4)
    result = await agent.run(TASK)
    assert result.stop_reason == "completed"
    tool_msgs = [m for m in result.messages if m.role == "tool"]
    assert tool_msgs and tool_msgs[0].content == "     1\tember lantern quartz\n     2\tmaple nutmeg"
    assert isinstance(result.output, str) and no_markers(result.output)
    await engine.aclose()
