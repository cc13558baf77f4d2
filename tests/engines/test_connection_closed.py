"""A connection that closes mid-answer is named as such, never as "cut by the output limit
(max_tokens)" (issue 26, item 8), in raw and chat mode, over a real socket (sse_server)."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from kimik3 import Agent, Client, K3Tokenizer, RemoteEngine, ScriptedEngine, tool
from kimik3.agents._prompts import CONTINUE_REQUEST, INTERRUPTED_REQUEST
from kimik3.engines import Engine, RemoteCompletionsEngine
from kimik3.formats.k3 import render_output
from tests.engines.sse_server import Reply, SSEServer, sse
from tests.engines.test_chat_transcripts import d
from tests.k3vocab import write_model_dir

CLOSED = "a closed connection (the stream ended with no finish_reason)"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model_dir(tmp_path_factory.mktemp("k3") / "k3", num_base_tokens=163_584)


@functools.cache
def load_tokenizer(model_dir: Path) -> K3Tokenizer:
    return K3Tokenizer.from_pretrained(model_dir)


def engine(server: SSEServer, mode: str, model_dir: Path) -> Engine:
    if mode == "raw":
        return RemoteCompletionsEngine(base_url=server.base_url, model="k3", tokenizer=load_tokenizer(model_dir),
                                       max_model_len=8192)
    return RemoteEngine(base_url=server.base_url, model="k3")


def text(t: str, finish: str | None = None) -> dict[str, object]:
    return {"id": "x", "object": "text_completion", "choices": [{"index": 0, "text": t, "finish_reason": finish}]}


@tool
def exec(command: str) -> str:
    """Run a command.

    Args:
        command: the command line.
    """
    return f"ran {command}"


def cut_text(mode: str) -> Reply:
    """An answer whose connection closes in the middle of its text."""
    if mode == "raw":
        return Reply(parts=sse([text("hmm<|close|>think<|sep|>The capital of Fra")], done=False), cut=True)
    return Reply(parts=sse([d({"reasoning_content": "hmm"}), d({"content": "The capital of Fra"})], done=False),
                 cut=True)


def cut_call(mode: str) -> Reply:
    """An answer whose connection closes in the middle of a tool call's arguments."""
    if mode == "raw":
        raw = render_output({"reasoning_content": "r", "content": "",
                             "tool_calls": [{"id": "c1", "function": {"name": "exec", "arguments": {"command": "ls -la"}}}]})
        return Reply(parts=sse([text(raw[: raw.index("ls -la") + 3])], done=False), cut=True)
    call = {"index": 0, "id": "c1", "function": {"name": "exec", "arguments": '{"command": "ls'}}
    return Reply(parts=sse([d({"reasoning_content": "r"}), d({"tool_calls": [call]})], done=False), cut=True)


def good(mode: str) -> Reply:
    if mode == "raw":
        return Reply(parts=sse([text("ok<|close|>think<|sep|>Paris", "stop")]))
    return Reply(parts=sse([d({"reasoning_content": "ok"}), d({"content": "Paris"}, "stop")]))


@pytest.mark.parametrize("mode", ["raw", "chat"])
async def test_a_completion_cut_by_a_closed_connection_says_so(mode: str, model_dir: Path) -> None:
    async with SSEServer([cut_text(mode)]) as server:
        out = await Client(engine(server, mode, model_dir), max_retries=0).chat([{"role": "user", "content": "x"}])
    assert (out.truncated, out.interrupted, out.message.content) == (True, CLOSED, "The capital of Fra")


@pytest.mark.parametrize("mode", ["raw", "chat"])
async def test_an_agent_names_the_closed_connection_not_max_tokens(mode: str, model_dir: Path) -> None:
    """Before: the cut text was answered "cut off by the output limit" and no issue was kept;
    a cut call was "cut by the output limit (max_tokens)"."""
    async with SSEServer([cut_text(mode), cut_call(mode), good(mode)]) as server:
        agent = Agent(tools=[exec], engine=engine(server, mode, model_dir))
        result = await agent.run("capital of France?")
    assert result.output == "The capital of FraParis" and result.degraded  # the continued answer is whole (N39)
    assert result.issues == [
        f"turn 1: the answer was cut by {CLOSED}",
        f"turn 2: the call to 'exec' was cut by {CLOSED} before it finished and did not run",
    ]
    users = [m.content for m in result.messages if m.role == "user"]
    assert users[1] == INTERRUPTED_REQUEST == "Your last message was cut off: the connection closed. Continue where you stopped."
    assert users[2] == ("Some of your tool calls did not run:\n"
                        f"- The call to 'exec' was cut by {CLOSED} before it finished and did not run. "
                        "Make the call again.")
    assert not any("max_tokens" in i for i in result.issues)


async def test_a_max_tokens_cut_is_still_the_output_limit() -> None:
    cut = "still thinking<|close|>think<|sep|>The capital"  # the scripted engine reports finish_reason "length"
    out = await Client(ScriptedEngine([cut])).chat([{"role": "user", "content": "x"}])
    assert (out.truncated, out.interrupted, out.finish_reason) == (True, None, "length")
    engine = ScriptedEngine([cut, render_output({"reasoning_content": "r", "content": "Paris"})])
    result = await Agent(engine=engine).run("capital of France?")
    assert result.output == "The capitalParis" and result.issues == []  # the cut part and its continuation (N39)
    assert [m.content for m in result.messages if m.role == "user"][1] == CONTINUE_REQUEST


@pytest.mark.parametrize("mode", ["raw", "chat"])
async def test_the_session_records_a_closed_connection_as_interrupted_not_length(
    mode: str, model_dir: Path, tmp_path: Path
) -> None:
    # issue 40: the record said finish_reason "length" (the output limit) for a cut connection;
    # a variant: a cut tool call; the output limit itself stays "length"
    async with SSEServer([cut_text(mode), cut_call(mode), good(mode)]) as server:
        await Agent(tools=[exec], engine=engine(server, mode, model_dir)).run("x", session=tmp_path / "s.jsonl")
    records = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert [r["finish_reason"] for r in records if "finish_reason" in r] == ["interrupted", "interrupted", "stop"]
    cut = "still thinking<|close|>think<|sep|>The capital"
    engine_ = ScriptedEngine([cut, render_output({"reasoning_content": "r", "content": "Paris"})])
    await Agent(engine=engine_).run("x", session=tmp_path / "t.jsonl")
    records = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert [r["finish_reason"] for r in records if "finish_reason" in r] == ["length", "stop"]


@pytest.mark.parametrize(("reply", "recorded"), [
    # cut while the model still reasons (nothing of the answer yet): interrupted, never "length"
    (lambda: Reply(parts=sse([d({"reasoning_content": "let me th"})], done=False), cut=True), "interrupted"),
    # cut after the finish chunk, before usage and [DONE]: the answer was whole
    (lambda: Reply(parts=sse([d({"reasoning_content": "ok"}), d({"content": "Paris"}, "stop")], done=False),
                   cut=True), "stop"),
    # cut after the output limit's own finish chunk: that is "length"
    (lambda: Reply(parts=sse([d({"reasoning_content": "ok"}), d({"content": "Par"}, "length")], done=False),
                   cut=True), "length"),
], ids=["mid-reasoning", "after-stop", "after-length"])
async def test_a_cut_at_another_moment_is_recorded_as_what_happened(reply: object, recorded: str,
                                                                     tmp_path: Path) -> None:
    async with SSEServer([reply(), good("chat")]) as server:  # type: ignore[operator]
        agent = Agent(engine=RemoteEngine(base_url=server.base_url, model="k3"))
        await agent.run("x", session=tmp_path / "s.jsonl")
    records = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert next(r["finish_reason"] for r in records if "finish_reason" in r) == recorded
