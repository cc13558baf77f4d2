"""Compaction that cannot sink a run (issue 41, deliverable 2): a failing summary backs off and
the run stays inside its window without the model (old tool results cleared, then the oldest
turns dropped); clearing as a policy; user messages kept; requests that fit the window with the
tool declarations counted from the first request; a continued answer that is the whole answer;
a raw-mode Agent that re-sizes to a window the server states."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from kimik3 import Agent, Client, ContextPolicy, K3Tokenizer, ScriptedEngine, tool
from kimik3.agents import CompactionEvent, FinalEvent
from kimik3.agents._prompts import CLEARED_START, CONTINUE_REQUEST
from kimik3.formats.k3 import default_tokenizer, render_output
from kimik3.types import AssistantMessage, Message, ToolMessage, UserMessage

SUMMARY_ASK = "Summarise the conversation"


@pytest.fixture(scope="module")
def tok() -> K3Tokenizer:
    return default_tokenizer()


@tool
def read_file(path: str) -> str:
    """Read a file.

    Args:
        path: the file.
    """
    return f"# {path}\n" + "".join(f"line {i} of {path}: x = {i}\n" for i in range(20))


def calls(turns: int, summary: Callable[[int], str], asked: list[int] | None = None,
          extra: dict[int, str] | None = None) -> Callable[[list[Message]], str]:
    """``turns`` read_file calls then "All read."; a summary request gets ``summary(n)``."""
    done = [0]

    def reply(messages: list[Message]) -> str:
        last = messages[-1]
        if isinstance(last, UserMessage) and str(last.content).startswith((SUMMARY_ASK, "Your summary")):
            if asked is not None:
                asked.append(done[0])
            return summary(done[0])
        done[0] += 1
        if done[0] > turns:
            return render_output({"reasoning_content": "Done.", "content": "All read."})
        return render_output({"reasoning_content": "Next.", "tool_calls": [
            {"id": f"c{done[0]}", "function": {"name": "read_file", "arguments": {"path": f"m{done[0]}.py"}}}]})

    return reply


def reasoning_only(n: int) -> str:
    return render_output({"reasoning_content": "I should summarise but I will think instead."})


def check_history(messages: list[Message]) -> None:
    """Every tool message answers a call of the assistant message before its run, with an id."""
    open_ids: set[str] = set()
    for m in messages:
        if isinstance(m, AssistantMessage):
            open_ids = {c.id for c in m.tool_calls or ()}
            assert all(open_ids)
        elif isinstance(m, ToolMessage):
            assert m.tool_call_id and m.tool_call_id in open_ids
            open_ids.discard(m.tool_call_id)


async def test_a_summary_that_always_fails_backs_off_and_the_run_completes_inside_the_window(
        tok: K3Tokenizer) -> None:
    """Before: a summary request on every turn once due (80 in 193 turns in a 16k window), then
    ContextLengthExceededError out of Agent.run."""
    asked: list[int] = []
    window = 8192
    engine = ScriptedEngine(calls(300, reasoning_only, asked), tokenizer=tok, chunk_size=512, max_model_len=window)
    events = [e async for e in Agent(tools=[read_file], engine=engine, max_turns=400).run_stream("Read all.")]
    final = events[-1]
    assert isinstance(final, FinalEvent)
    result = final.result
    assert (result.stop_reason, result.output, result.turns) == ("completed", "All read.", 301)
    compactions = [e for e in events if isinstance(e, CompactionEvent)]
    assert result.summaries == len(asked) == 2 * len(set(asked))  # each attempt asks twice (one retry)
    assert len(set(asked)) <= 6 < len(compactions)  # back-off: attempts grow with the log of the run
    assert result.cleared_results > 100
    assert sum(e.cleared_results for e in compactions) == result.cleared_results
    sizes = [len(tok.encode_messages(list(c.messages), c.request.tools)) for c in engine.calls]
    assert max(sizes) < window  # no request was ever refused
    check_history(result.messages)
    stubs = [m for c in engine.calls for m in c.messages
             if isinstance(m, ToolMessage) and str(m.content).startswith(CLEARED_START)]
    assert stubs and str(stubs[0].content) == (
        '[Result cleared from the context to save room: read_file {"path": "m2.py"} returned '
        f'{tok_count(tok, read_file_result("m2.py"))} tokens here. Call it again if you need it.]')
    assert "compaction's summary came back empty (no text, only reasoning)" in result.issues[0]


def read_file_result(path: str) -> str:
    return f"# {path}\n" + "".join(f"line {i} of {path}: x = {i}\n" for i in range(20))


def tok_count(tok: K3Tokenizer, text: str) -> int:
    from kimik3.agents._tokens import RunTokens
    from kimik3.types import ToolMessage as TM

    return RunTokens(tok, None).message(TM(content=text, tool_call_id="c1", name="read_file"))


async def test_when_clearing_is_not_enough_the_oldest_turns_are_dropped_and_user_messages_stay(
        tok: K3Tokenizer) -> None:
    """Long reasoning, small results: clearing frees little, so whole turns go (user messages stay)."""
    done = [0]

    def reply(messages: list[Message]) -> str:
        if str(messages[-1].content).startswith((SUMMARY_ASK, "Your summary")):
            return reasoning_only(0)
        done[0] += 1
        if done[0] > 120:
            return "All read."
        return render_output({"reasoning_content": "think " * 60, "tool_calls": [
            {"id": f"c{done[0]}", "function": {"name": "read_file", "arguments": {"path": f"x{done[0]}"}}}]})

    engine = ScriptedEngine(reply, tokenizer=tok, chunk_size=512, max_model_len=3000)
    history: list[Message] = [UserMessage(content="Read x."), AssistantMessage(content="Reading."),
                              UserMessage(content="Operator: never touch prod.")]
    agent = Agent(tools=[read_file], engine=engine, max_turns=200)
    result = await agent.run("Go on.", messages=history)
    assert (result.stop_reason, result.output) == ("completed", "All read.")
    assert result.dropped_messages > 50
    users = [m.content for m in result.messages if isinstance(m, UserMessage)]
    assert users[:3] == ["Read x.", "Operator: never touch prod.", "Go on."]  # verbatim, in order
    check_history(result.messages)
    assert max(len(tok.encode_messages(list(c.messages), c.request.tools)) for c in engine.calls) < 3000


async def test_clearing_as_a_policy_comes_before_the_summary(tok: K3Tokenizer) -> None:
    asked: list[int] = []
    good = lambda n: render_output({"content": f"Read m1 to m{n}."})  # noqa: E731
    engine = ScriptedEngine(calls(25, good, asked), tokenizer=tok, chunk_size=512, max_model_len=8192)
    policy = ContextPolicy(clear_tool_results=True)
    events = [e async for e in Agent(tools=[read_file], engine=engine, context=policy, max_turns=60).run_stream("go")]
    result = events[-1].result  # type: ignore[union-attr]
    assert (result.stop_reason, result.issues) == ("completed", [])  # chosen: not an issue
    assert result.cleared_results > 10 and result.summaries == 0 and asked == []
    compactions = [e for e in events if isinstance(e, CompactionEvent)]
    assert all(e.summary == "" and e.removed_messages == 0 and e.cleared_results > 0 for e in compactions)
    # batched: far fewer clearings than cleared results (the prefix stays stable in between)
    assert len(compactions) * 4 <= result.cleared_results
    # past what clearing can free, the summary comes next
    engine = ScriptedEngine(calls(60, good, asked), tokenizer=tok, chunk_size=512, max_model_len=8192)
    events = [e async for e in Agent(tools=[read_file], engine=engine, context=policy, max_turns=80).run_stream("go")]
    kinds = ["summary" if e.summary else "cleared" for e in events if isinstance(e, CompactionEvent)]
    assert kinds[0] == "cleared" and "summary" in kinds and asked


async def test_a_summary_keeps_the_users_later_messages_verbatim(tok: K3Tokenizer) -> None:
    good = lambda n: render_output({"content": f"Read m1 to m{n}."})  # noqa: E731
    engine = ScriptedEngine(calls(60, good), tokenizer=tok, chunk_size=512, max_model_len=8192)
    history: list[Message] = [UserMessage(content="Read every module."), AssistantMessage(content="Sure."),
                              UserMessage(content="Approved: you may edit m3.py.")]
    result = await Agent(tools=[read_file], engine=engine, max_turns=80).run("Continue.", messages=history)
    assert result.stop_reason == "completed" and result.summaries >= 1
    users = [str(m.content) for m in result.messages if isinstance(m, UserMessage)]
    assert users[0] == "Read every module." and users[1].startswith("[Summary of ")
    assert users[2:4] == ["Approved: you may edit m3.py.", "Continue."]
    check_history(result.messages)


async def test_a_resumed_conversation_over_the_window_compacts_before_its_first_request(
        tok: K3Tokenizer, tmp_path: Path) -> None:
    """Before: the resumed run's first request was refused, and the forced summary request was
    larger than it (tool declarations were not counted until a call succeeded)."""
    session = tmp_path / "s.jsonl"
    good = lambda n: render_output({"content": f"Read m1 to m{n}."})  # noqa: E731
    big = ScriptedEngine(calls(30, good), tokenizer=tok, chunk_size=512)  # 1,048,576: no compaction
    first = await Agent(tools=[read_file], engine=big, max_turns=40).run("Read.", session=session)
    assert first.summaries == 0
    small = ScriptedEngine(calls(3, good), tokenizer=tok, chunk_size=512, max_model_len=3000)
    again = await Agent(tools=[read_file], engine=small, max_turns=40).resume(session, "Read three more.")
    assert again.stop_reason == "completed" and again.summaries == 1
    sizes = [len(tok.encode_messages(list(c.messages), c.request.tools)) for c in small.calls]
    assert max(sizes) < 3000  # the summary request included: nothing refused


async def test_a_head_that_cannot_fit_is_said_at_the_start(tok: K3Tokenizer) -> None:
    engine = ScriptedEngine(["Done."], tokenizer=tok, max_model_len=1000)
    result = await Agent(tools=[read_file], engine=engine, instructions="Be careful. " * 150).run("Go.")
    assert result.stop_reason == "completed"
    assert result.issues[0].startswith("turn 0: the prompt's head (tool declarations, instructions and the first "
                                       "task: ")
    assert result.issues[0].endswith("does not fit under half of the compaction threshold (400 tokens of the "
                                     "1,000-token window): compaction cannot summarise this conversation, old "
                                     "tool results are cleared and the oldest turns dropped instead, without a "
                                     "summary; "
                                     "give fewer tools or shorter instructions or task, or serve a larger window "
                                     "(vLLM --max-model-len)")


CUT = "Counting.<|close|>think<|sep|><|open|>response<|sep|>One, two, three,"


async def test_a_continued_answer_is_the_whole_answer() -> None:
    """N39: the output was only the continuation (" four, five."), completed, no issue."""
    engine = ScriptedEngine([CUT, " four, five."])
    result = await Agent(engine=engine).run("Count to five.")
    assert (result.stop_reason, result.output) == ("completed", "One, two, three, four, five.")
    assert [m.content for m in result.messages if isinstance(m, UserMessage)][-1] == CONTINUE_REQUEST
    # a model that starts over is not doubled; two cuts in a row join all three parts
    engine = ScriptedEngine([CUT, "One, two, three, four, five."])
    assert (await Agent(engine=engine).run("Count.")).output == "One, two, three, four, five."
    engine = ScriptedEngine([CUT, CUT.replace("One, two, three,", " four,"), " five."])
    assert (await Agent(engine=engine).run("Count.")).output == "One, two, three, four, five."


REFUSALS = [  # how servers state the window they accept (tests/engines/test_overflow_wording.py has them all)
    "Invalid request: Your request exceeded model token limit: 262144 (requested: 1048576)",
    "This model's maximum context length is 262144 tokens. However, you requested 1048576 tokens (12 in the "
    "messages, 1048564 in the completion). Please reduce the length of the messages or completion.",
    "The input (1048576 tokens) is longer than the model's context length (262144 tokens).",
]


@pytest.mark.parametrize("refusal", REFUSALS, ids=["moonshot", "vllm", "sglang"])
async def test_a_raw_mode_agent_resizes_to_the_window_the_server_states(tmp_path: Path, refusal: str) -> None:
    """N36: /v1/models advertises 1,048,576, the server accepts 262,144: the agent's first
    request was refused and ContextLengthExceededError came out of Agent.run. Each wording of the
    refusal; a second run on the same engine sends the window it learnt at once."""
    from tests.engines.test_overflow_wording import _completion
    from tests.engines.test_remote_offline import FakeServer
    from tests.k3vocab import write_model_dir

    tok = K3Tokenizer.from_pretrained(write_model_dir(tmp_path / "k3", num_base_tokens=163_584))
    seen: list[int] = []

    def respond(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            card = {"id": "k3", "object": "model", "created": 0, "owned_by": "x", "max_model_len": 1_048_576}
            return httpx.Response(200, json={"object": "list", "data": [card]})
        body: dict[str, Any] = json.loads(request.content)
        seen.append(body["max_tokens"])
        if body["max_tokens"] > 262_144 - 100:
            return httpx.Response(400, json={"error": {"message": refusal}})
        return _completion()

    engine = FakeServer(respond).engine(mode="raw", tokenizer=tok)
    agent = Agent(client=Client(engine, max_retries=0))
    result = await agent.run("Hello")
    assert (result.stop_reason, result.output, result.issues) == ("completed", "Hi", [])
    prompt = 1_048_576 - seen[0]
    assert seen == [1_048_576 - prompt, 262_144 - prompt]
    assert (await agent.run("Hello")).output == "Hi" and seen[2:] == [262_144 - prompt]  # learnt: no refusal


class Unstated(ScriptedEngine):
    """A served window the engine does not state (a chat endpoint whose model id is unknown)."""

    async def context_window(self) -> None:
        return None


async def test_a_resume_refused_as_too_long_with_a_failing_summary_recovers(tok: K3Tokenizer, tmp_path: Path) -> None:
    """Issue 41: at 8,192 tokens a resumed run's first request was refused, the forced summary
    request was larger than it, and every later resume failed the same way."""
    session = tmp_path / "s.jsonl"
    good = lambda n: render_output({"content": f"Read m1 to m{n}."})  # noqa: E731
    big = ScriptedEngine(calls(40, good), tokenizer=tok, chunk_size=512)
    await Agent(tools=[read_file], engine=big, max_turns=60).run("Read.", session=session)
    for task in ("Read three more.", "And three more."):
        small = Unstated(calls(3, reasoning_only), tokenizer=tok, chunk_size=512, max_model_len=8192)
        again = await Agent(tools=[read_file], engine=small, max_turns=40).resume(session, task)
        assert (again.stop_reason, again.output) == ("completed", "All read.")
        sizes = [len(tok.encode_messages(list(c.messages), c.request.tools)) for c in small.calls]
        refused = [n for n in sizes if n >= 8192]
        assert len(refused) <= 1  # the first request, before the window was known
        after = sizes[sizes.index(refused[0]) + 1:] if refused else sizes
        assert after and max(after) < refused[0] if refused else max(sizes) < 8192
        check_history(again.messages)
