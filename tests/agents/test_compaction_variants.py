"""Compaction that cannot sink a run, against shapes its own tests do not make (issue 41,
deliverable 2, tried point by point): a summary that fails with an empty reply, a length cut, an
exception or a reply that is only a tool call; a resumed session whose first request overflows;
a window stated only by an overflow error, with or without a size; the coding harness's head in
a 4,096-token window; a conversation that overflowed, resumed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from kimik3 import Agent, Client, ContextLengthExceededError, EngineError, K3Tokenizer, ScriptedEngine, tool
from kimik3.agents import Budgets
from kimik3.agents._prompts import COMPACTION_REQUEST
from kimik3.formats.k3 import render_output
from kimik3.harness import FEATURES, CodingHarness
from kimik3.types import AssistantMessage, Message, ToolMessage, UserMessage

from .test_compaction_fallback import SUMMARY_ASK, calls, check_history, read_file, reasoning_only, tok

__all__ = ["tok"]  # the fixture


def empty(n: int) -> str:
    return render_output({"content": ""})


def cut(n: int) -> str:
    return "<|close|>think<|sep|><|open|>response<|sep|>I read m1 to"  # the message not closed: finish "length"


def crash(n: int) -> str:
    raise EngineError("the summary request crashed")


def only_a_call(n: int) -> str:
    return render_output({"reasoning_content": "More first.", "tool_calls": [
        {"id": "s1", "function": {"name": "read_file", "arguments": {"path": "m1.py"}}}]})


def echo(n: int) -> str:
    """Attacker (x41): the request sent back as the summary (spacing changed). Before: applied, so
    every earlier message was replaced by the words that asked for a summary."""
    return render_output({"content": "  " + COMPACTION_REQUEST.replace(" ", "\n", 3) + "\n"})


FAILURES: dict[str, tuple[Callable[[int], str], str]] = {
    "echo": (echo, "compaction's summary came back as the request itself (echoed, nothing summarised)"),
    "empty": (empty, "compaction's summary came back empty"),
    "reasoning": (reasoning_only, "compaction's summary came back empty (no text, only reasoning)"),
    "cut": (cut, "compaction's summary was cut by "),
    "exception": (crash, "compaction's summary could not be made (EngineError: the summary request crashed)"),
    "only a call": (only_a_call, "compaction's summary came back empty"),
}


def sizes(tok: K3Tokenizer, engine: ScriptedEngine) -> list[int]:
    return [len(tok.encode_messages(list(c.messages), c.request.tools)) for c in engine.calls]


def no_empty_ids(messages: list[Message]) -> None:
    for m in messages:
        if isinstance(m, AssistantMessage):
            assert all(c.id for c in m.tool_calls or ())
        elif isinstance(m, ToolMessage):
            assert m.tool_call_id


@pytest.mark.parametrize("kind", list(FAILURES))
async def test_every_kind_of_failed_summary_backs_off_and_the_run_completes(tok: K3Tokenizer, kind: str) -> None:
    failure, said = FAILURES[kind]
    asked: list[int] = []
    engine = ScriptedEngine(calls(200, failure, asked), tokenizer=tok, chunk_size=512, max_model_len=8192)
    result = await Agent(client=Client(engine, max_retries=0), tools=[read_file], max_turns=300).run("Read all.")
    assert (result.stop_reason, result.output, result.turns) == ("completed", "All read.", 201)
    attempts = len(set(asked))
    assert 1 <= attempts <= 5  # back-off: not one a turn once due
    assert result.summaries == len(asked) == (attempts if kind == "exception" else 2 * attempts)  # a crash: no retry
    assert result.cleared_results > 50
    assert max(sizes(tok, engine)) < 8192
    assert said in result.issues[0]
    check_history(result.messages)
    no_empty_ids(result.messages)


class Unstated(ScriptedEngine):
    """A server whose window only its overflow error tells (``sized``: the error says the
    window and the request's tokens, vLLM's words; else it says no size at all)."""

    def __init__(self, *args: object, sized: bool = True, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.sized = sized

    async def context_window(self) -> None:
        return None

    def _too_long(self, n: int) -> ContextLengthExceededError:
        if self.sized:
            return super()._too_long(n)
        return ContextLengthExceededError("prompt is too long", status_code=400)


def good(n: int) -> str:
    return render_output({"content": f"Read m1 to m{n}."})


@pytest.mark.parametrize("sized", [True, False])
async def test_a_window_stated_only_by_an_overflow_error_is_learnt_once(tok: K3Tokenizer, sized: bool) -> None:
    engine = Unstated(calls(200, good), tokenizer=tok, chunk_size=512, max_model_len=8192, sized=sized)
    result = await Agent(client=Client(engine, max_retries=0), tools=[read_file], max_turns=300).run("Read all.")
    assert (result.stop_reason, result.output) == ("completed", "All read.")
    refused = [n for n in sizes(tok, engine) if n >= 8192]
    assert len(refused) <= 2 and result.summaries >= 2
    check_history(result.messages)


@pytest.mark.parametrize("kind", ["exception", "only a call", "cut"])
async def test_a_resume_whose_first_request_overflows_survives_a_failing_summary(
        tok: K3Tokenizer, tmp_path: Path, kind: str) -> None:
    """A conversation grown at a large window, resumed twice where the window is 8,192 and the
    engine does not state it: the first request is refused, the summary fails, clearing and
    dropping bring it in; the second resume goes on from there."""
    session = tmp_path / "s.jsonl"
    big = ScriptedEngine(calls(40, good), tokenizer=tok, chunk_size=512)
    await Agent(tools=[read_file], engine=big, max_turns=60).run("Read.", session=session)
    for task in ("Read three more.", "And three more."):
        small = Unstated(calls(3, FAILURES[kind][0]), tokenizer=tok, chunk_size=512, max_model_len=8192)
        again = await Agent(client=Client(small, max_retries=0), tools=[read_file], max_turns=40).resume(session, task)
        assert (again.stop_reason, again.output) == ("completed", "All read.")
        assert sum(n >= 8192 for n in sizes(tok, small)) <= 1
        check_history(again.messages)
        no_empty_ids(again.messages)
        users = [m.content for m in again.messages if isinstance(m, UserMessage)]
        assert users[0] == "Read." and task in users


@tool
def dump(name: str) -> str:
    """Print a log.

    Args:
        name: the log.
    """
    return "".join(f"{name} entry {i}: status ok, value {i * 7}\n" for i in range(400))


@pytest.mark.parametrize("summary", [good, reasoning_only])
async def test_a_conversation_that_overflowed_can_be_resumed(tok: K3Tokenizer, tmp_path: Path,
                                                            summary: Callable[[int], str]) -> None:
    """A tool result too big for the window, in the last turn: cleared too once nothing else is
    left (x41: before, never while it was the last, so the run ended with context_overflow at
    turn 1 after a refused request); a model that asks for it again each turn is a loop, ended
    with no request over the window; a resume with a new task goes on. Before that: with a
    summary that fails, every resume ended with context_overflow."""
    session = tmp_path / "s.jsonl"
    turn = [0]

    def reply(messages: list[Message]) -> str:
        if str(messages[-1].content).startswith((SUMMARY_ASK, "Your summary")):
            return summary(0)
        turn[0] += 1
        if isinstance(messages[-1], UserMessage) and messages[-1].content == "Now say done.":
            return render_output({"content": "done"})
        return render_output({"reasoning_content": "Dump it.", "tool_calls": [
            {"id": f"d{turn[0]}", "function": {"name": "dump", "arguments": {"name": "big"}}}]})

    engine = ScriptedEngine(reply, tokenizer=tok, chunk_size=512, max_model_len=4096)
    first = await Agent(tools=[dump], engine=engine, max_turns=10).run("Dump big.", session=session)
    assert (first.stop_reason, first.output, first.turns) == ("loop_detected", None, 8)
    assert max(sizes(tok, engine)) < 4096  # no request the server refused
    stub = str(first.messages[2].content)
    assert first.cleared_results >= 4 and stub.startswith(
        '[Result cleared from the context: dump {"name": "big"} returned ')
    assert stub.endswith(" tokens, more than the context can hold. Called again as it is, it gives the same: ask "
                         "for a smaller part.]")
    assert int(stub.split(" returned ")[1].split()[0].replace(",", "")) > 4096  # bigger than the window
    engine = ScriptedEngine(reply, tokenizer=tok, chunk_size=512, max_model_len=4096)
    again = await Agent(tools=[dump], engine=engine, max_turns=10).resume(session, "Now say done.")
    assert (again.stop_reason, again.output) == ("completed", "done")
    assert max(sizes(tok, engine)) < 4096
    assert again.issues == []  # the session kept the stubs: nothing left to make smaller
    check_history(again.messages)


async def test_the_coding_harness_at_a_4096_token_window_says_so_and_keeps_going(
        tok: K3Tokenizer, tmp_path: Path) -> None:
    """Issue 41's k3-tiny at 4,096 tokens: the harness's head (~2,440 tokens) cannot be summarised
    under half the threshold; said at the start, and the run goes on by clearing and dropping
    (before: lost at turn 19)."""
    for i in range(60):
        (tmp_path / f"m{i}.py").write_text("".join(f"x{j} = {i * j}\n" for j in range(30)))
    done = [0]

    def reply(messages: list[Message]) -> str:
        if str(messages[-1].content).startswith((SUMMARY_ASK, "Your summary")):
            return good(0)
        done[0] += 1
        if done[0] > 60:
            return render_output({"content": "All read."})
        return render_output({"reasoning_content": "Next.", "tool_calls": [
            {"id": f"c{done[0]}", "function": {"name": "read_file", "arguments": {"path": f"m{done[0] - 1}.py"}}}]})

    engine = ScriptedEngine(reply, tokenizer=tok, chunk_size=512, max_model_len=4096)
    agent = CodingHarness(tmp_path, features=FEATURES - {"background", "checkpoints"}).agent(
        engine=engine, budgets=Budgets(turns=80))
    result = await agent.run("Read every module.", session=tmp_path / "s.jsonl")
    assert (result.stop_reason, result.output) == ("completed", "All read.")
    assert "the prompt's head (tool declarations, instructions and the first task: " in result.issues[0]
    # before: "once it fills the window it cannot be resumed", false for a head that fits the window
    assert result.issues[0].endswith("(1,638 tokens of the 4,096-token window): compaction cannot summarise this "
                                     "conversation, old tool results are cleared and the oldest turns dropped "
                                     "instead, without a summary; give fewer tools or shorter instructions or task, "
                                     "or serve a larger window (vLLM --max-model-len)")
    assert result.summaries == 0 and result.cleared_results + result.dropped_messages > 20
    assert max(sizes(tok, engine)) < 4096
    check_history(result.messages)
    done[0] = 30  # the conversation resumed: 30 more reads
    engine.calls.clear()
    again = await agent.resume(tmp_path / "s.jsonl", "Read the last 30 again.")
    assert (again.stop_reason, again.output, again.turns) == ("completed", "All read.", 31)
    assert max(sizes(tok, engine)) < 4096
    check_history(again.messages)


def chat_server(window: int) -> tuple[list[str], object]:
    """An OpenAI chat server (vLLM's) whose ``/v1/models`` states ``window``; it answers "Hi".
    Returns the paths asked and the handler."""
    import httpx

    from tests.engines.test_remote_offline import chat_chunk, sse, usage_chunk

    seen: list[str] = []

    def respond(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        if request.url.path == "/v1/models":
            card = {"id": "k3", "object": "model", "created": 0, "owned_by": "vllm", "max_model_len": window}
            return httpx.Response(200, json={"object": "list", "data": [card]})
        return sse([chat_chunk({"role": "assistant", "content": "Hi"}), chat_chunk({}, "stop"), usage_chunk(9, 1)])

    return seen, respond


def chat_engine(respond: object, model: str | None) -> object:
    import httpx
    import openai

    from kimik3 import RemoteEngine

    client = openai.AsyncOpenAI(base_url="http://fake/v1", api_key="k", max_retries=0,
                                http_client=httpx.AsyncClient(transport=httpx.MockTransport(respond)))  # type: ignore[arg-type]
    return RemoteEngine(model=model, client=client)


async def test_a_chat_agent_plans_for_the_window_v1_models_states() -> None:
    """The window compaction plans for is the one /v1/models states (4,096), not 131,072: the head
    that cannot fit under half its threshold is said with that window."""
    seen, respond = chat_server(4096)
    engine = chat_engine(respond, None)
    result = await Agent(engine=engine, instructions="Be careful. " * 700).run("Hello")  # type: ignore[arg-type]
    assert (result.stop_reason, result.output) == ("completed", "Hi")
    assert "of the 4,096-token window)" in result.issues[0]
    assert seen.count("/v1/models") == 1


def many_tools(n: int) -> list[object]:
    """``n`` tools with long descriptions: about 2,400 tokens of declarations, as issue 41's harness."""
    out = []
    for i in range(n):
        def f(path: str, pattern: str = "", limit: int = 10) -> str:
            return "unused"

        f.__name__ = f"tool_{i}"
        f.__doc__ = (f"Tool number {i}: " + "it searches, lists and reports on files of the workspace. " * 6 +
                     "\n\nArgs:\n    path: the file.\n    pattern: a regular expression.\n    limit: most results.\n")
        out.append(tool(f))
    return out


async def test_a_resume_with_many_tool_declarations_never_sends_a_larger_request_than_the_refused_one(
        tok: K3Tokenizer, tmp_path: Path) -> None:
    """Issue 41's 8,347 vs 8,211: ~2,400 tokens of tool declarations were not counted until a call
    succeeded, so the forced summary request was larger than the refused one."""
    session = tmp_path / "s.jsonl"
    tools = [read_file, *many_tools(16)]
    big = ScriptedEngine(calls(40, good), tokenizer=tok, chunk_size=512)
    await Agent(tools=tools, engine=big, max_turns=60).run("Read.", session=session)  # type: ignore[arg-type]
    declared = len(tok.encode_messages([UserMessage(content="x")], big.calls[0].request.tools))
    assert declared > 2000
    for summary in (good, reasoning_only):
        small = Unstated(calls(3, summary), tokenizer=tok, chunk_size=512, max_model_len=8192)
        again = await Agent(client=Client(small, max_retries=0), tools=tools,  # type: ignore[arg-type]
                            max_turns=40).resume(session, "Read three more.")
        assert (again.stop_reason, again.output) == ("completed", "All read.")
        seen = sizes(tok, small)
        refused = [i for i, n in enumerate(seen) if n >= 8192]
        assert refused in ([], [0]) and max(seen[1:] if refused else seen) < 8192  # the summary request too
        assert all(n < seen[0] for n in seen[1:]) if refused else True
        check_history(again.messages)


@pytest.mark.parametrize("summary", [reasoning_only, good])
async def test_a_conversation_whose_task_overflowed_can_be_resumed_even_when_summaries_fail(
        tok: K3Tokenizer, tmp_path: Path, summary: Callable[[int], str]) -> None:
    """A later task too big for the window ends its run with context_overflow and stays in the
    session. Before: with a summary that fails, every resume ended with context_overflow too
    (clearing and dropping never touch user messages, and the old task alone overflowed the
    window). Now the largest old user message is cut to its start, last; a small operator
    message stays verbatim."""
    session = tmp_path / "s.jsonl"
    agent = Agent(tools=[read_file], engine=ScriptedEngine(calls(5, good), tokenizer=tok, max_model_len=4096))
    assert (await agent.run("Read.", session=session)).stop_reason == "completed"
    operator = "Operator: never touch prod."
    agent = Agent(tools=[read_file], engine=ScriptedEngine(calls(0, good), tokenizer=tok, max_model_len=4096))
    assert (await agent.resume(session, operator)).stop_reason == "completed"
    huge = "Consider this log: " + " ".join(f"entry{i}=ok" for i in range(2500))
    agent = Agent(tools=[read_file], engine=ScriptedEngine(calls(5, good), tokenizer=tok, max_model_len=4096))
    assert (await agent.resume(session, huge)).stop_reason == "context_overflow"
    engine = ScriptedEngine(calls(2, summary), tokenizer=tok, chunk_size=512, max_model_len=4096)
    again = await Agent(tools=[read_file], engine=engine).resume(session, "Say done.")
    assert (again.stop_reason, again.output) == ("completed", "All read.")
    assert max(sizes(tok, engine)) < 4096
    users = [str(m.content) for m in again.messages if isinstance(m, UserMessage)]
    assert users[0] == "Read." and users[-1] == "Say done." and operator in users
    if summary is reasoning_only:
        stub = next(u for u in users if u.startswith("[An earlier message of the user"))
        assert stub.startswith("[An earlier message of the user, ") and stub.endswith(
            " tokens, cut from the context: it did not fit the context window. It began: " + huge[:200] + "...]")
        assert "turn 0: 1 earlier user message cut to its first characters: the context did not fit under the " \
               "compaction threshold otherwise" in again.issues
    check_history(again.messages)


@tool
def log_of(name: str) -> str:
    """Print a log.

    Args:
        name: the log.
    """
    return "".join(f"{name} entry {i}: ok {i * 7}\n" for i in range(145))


@pytest.mark.parametrize("stated", [True, False])
async def test_a_turn_budget_that_ends_in_a_full_window_still_gets_its_summary_turn(
        tok: K3Tokenizer, stated: bool) -> None:
    """The turn budget ends the run right after a tool result filled the window: the tool-free
    summary turn was sent as it was, and its refusal came out of Agent.run as
    ContextLengthExceededError. Now it is compacted first (a window the engine states) or made
    smaller after the refusal (a window only the error states), as any turn."""
    from kimik3.agents._prompts import SUMMARY_INSTRUCTIONS

    n = [0]

    def reply(messages: list[Message]) -> str:
        if messages[-1].content == SUMMARY_INSTRUCTIONS:
            return render_output({"reasoning_content": "sum up", "content": "Dumped three logs."})
        if str(messages[-1].content).startswith((SUMMARY_ASK, "Your summary")):
            return reasoning_only(0)
        n[0] += 1
        return render_output({"reasoning_content": "d", "tool_calls": [
            {"id": f"d{n[0]}", "function": {"name": "log_of", "arguments": {"name": f"l{n[0]}"}}}]})

    kind = ScriptedEngine if stated else Unstated
    engine = kind(reply, tokenizer=tok, chunk_size=512, max_model_len=4096)
    result = await Agent(client=Client(engine, max_retries=0), tools=[log_of], max_turns=3).run("Dump.")
    assert (result.stop_reason, result.output, result.turns) == ("turn_budget", "Dumped three logs.", 4)
    seen = sizes(tok, engine)
    assert sum(s >= 4096 for s in seen) == (0 if stated else 1) and seen[-1] < 4096
    assert engine.calls[-1].messages[-1].content == SUMMARY_INSTRUCTIONS
    check_history(result.messages)


async def test_a_window_smaller_than_one_tool_result_clears_it_and_the_run_goes_on(tok: K3Tokenizer) -> None:
    """Attacker (x41): each result bigger than the whole window (2,048). Before: the request was
    sent, refused, and the run ended with context_overflow at turn 1 (the last turn's result was
    never cleared). Now the result is cleared before the request (the model is told its size),
    no request reaches the window, and the model answers."""
    left = [1, 2]

    def reply(messages: list[Message]) -> str:
        if str(messages[-1].content).startswith((SUMMARY_ASK, "Your summary")):
            return reasoning_only(0)
        if not left:
            return render_output({"content": "done"})
        n = left.pop(0)
        return render_output({"reasoning_content": "Dump it.", "tool_calls": [
            {"id": f"d{n}", "function": {"name": "dump", "arguments": {"name": f"log{n}"}}}]})

    engine = ScriptedEngine(reply, tokenizer=tok, chunk_size=512, max_model_len=2048)
    result = await Agent(tools=[dump], engine=engine, max_turns=10).run("Dump the logs.")
    assert (result.stop_reason, result.output, result.turns, result.cleared_results) == ("completed", "done", 3, 2)
    assert max(sizes(tok, engine)) < 2048
    # the first turn was dropped to make room for the second; the second's result is a stub
    assert [str(m.content).split(" returned ")[0] for m in result.messages if isinstance(m, ToolMessage)] == [
        '[Result cleared from the context: dump {"name": "log2"}']
    check_history(result.messages)
