"""A request the server refuses as too big, recovered by the agent (issue 31): against a loopback
stand-in for Moonshot's API (tests/engines/hosted_server.py) that enforces a token limit and a
"total message size" limit with the API's words. A token overflow makes the stated window the
run's and compacts; a request over the byte limit drops the oldest images first, then compacts;
what cannot be made smaller is raised, typed."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from PIL import Image

from kimik3 import Agent, ContextPolicy, RemoteEngine, tool
from kimik3.agents import CompactionEvent, FinalEvent
from kimik3.agents._history import IMAGE_DROPPED
from kimik3.agents._prompts import COMPACTION_REQUEST
from kimik3.media import prepare_image
from kimik3.types import ImagePart, TextPart, ToolMessage
from tests.engines.hosted_server import HostedAPI, message_size, refused, tokens
from tests.engines.sse_server import SSEServer

LOREM = "lorem " * 800


@tool
def read(part: int) -> str:
    """Read one part of the report.

    Args:
        part: which part.
    """
    return f"part {part}: {LOREM}"


def noise(seed: int) -> Image.Image:
    rng = random.Random(seed)
    return Image.frombytes("RGB", (56, 56), bytes(rng.randrange(256) for _ in range(56 * 56 * 3)))


@tool
def screenshot(step: int) -> Any:
    """Take a screenshot.

    Args:
        step: the step number.
    """
    return [f"screen {step}", prepare_image(noise(step))]


def script(calls: int, name: str) -> Any:
    """The model: ``calls`` tool calls one after another, then "done"; a summary when asked."""
    made = [0]

    def reply(n: int, body: dict[str, Any]) -> dict[str, Any]:
        last = body["messages"][-1]
        if last["role"] == "user" and last.get("content") == COMPACTION_REQUEST:
            return {"content": "SUMMARY: parts read so far were all lorem."}
        if made[0] >= calls:
            return {"content": "done"}
        made[0] += 1
        arguments = json.dumps({"part" if name == "read" else "step": made[0]})
        return {"reasoning_content": "next", "tool_calls": [
            {"index": 0, "id": f"call_{made[0]}", "type": "function", "function": {"name": name, "arguments": arguments}}]}

    return reply


async def run(api: HostedAPI, tools: list[Any], task: str, **policy: Any) -> tuple[list[Any], Any]:
    async with SSEServer(api) as server:
        engine = RemoteEngine(base_url=server.base_url, model="kimi-k3", profile="moonshot")
        agent = Agent(tools=tools, engine=engine, context=ContextPolicy(context_window=1_048_576, **policy))
        events = [e async for e in agent.run_stream(task)]
        await engine.aclose()
    final = events[-1]
    assert isinstance(final, FinalEvent)
    return events, final.result


async def test_a_token_overflow_makes_the_stated_window_the_runs_and_compacts() -> None:
    api = HostedAPI(token_limit=3000, reply=script(7, "read"))
    events, result = await run(api, [read], "Read the report.", keep_recent_turns=1)
    assert result.output == "done" and result.stop_reason == "completed"
    (n, words), = api.refusals  # one refusal (the 4th request), then the run went on
    assert n == 3 and words == f"Invalid request: Your request exceeded model token limit: 3000 (requested: {tokens(api.seen[n])})"
    summary_request = api.seen[n + 1]
    assert summary_request["messages"][-1]["content"] == COMPACTION_REQUEST and tokens(summary_request) <= 3000
    assert all(tokens(body) <= 3000 for body in api.seen[n + 1 :])
    # the stated window holds for the rest of the run: the context reaches compact_at (0.8) of 3,000
    # twice more and is compacted before sending (against the configured 1,048,576 it never would be)
    compactions = [e for e in events if isinstance(e, CompactionEvent)]
    assert [c.removed_messages for c in compactions] == [6, 5, 5]
    assert all(c.summary == "SUMMARY: parts read so far were all lorem." for c in compactions)
    assert str(result.messages[1].content).startswith("[Summary of 5 earlier messages, written by you]\nSUMMARY")
    assert [i.split(": ", 1)[1] for i in result.issues] == [
        "compaction summarised 2 of 6 earlier messages: 4 older ones did not fit in the summary request and are "
        "not in the summary"] + [
        "compaction summarised 3 of 5 earlier messages: 2 older ones did not fit in the summary request and are "
        "not in the summary"] * 2
    # a later summary request carries the earlier summary (a user message, kept while it fits)
    second = next(b for b in api.seen[n + 2 :] if b["messages"][-1]["content"] == COMPACTION_REQUEST)
    assert [m["role"] for m in second["messages"]] == ["user", "user", "assistant", "tool", "user"]
    assert second["messages"][1]["content"].startswith("[Summary of 6 earlier messages, written by you]")
    assert second["messages"][3]["content"].startswith("part 5: lorem")


async def test_a_request_over_the_byte_limit_drops_the_oldest_images_first() -> None:
    image = len(prepare_image(noise(1)).data_url())
    api = HostedAPI(size_limit=int(3.5 * image), reply=script(5, "screenshot"))
    events, result = await run(api, [screenshot], "Watch the screen.")
    assert result.output == "done" and not any(isinstance(e, CompactionEvent) for e in events)
    assert [why.split(" exceeds")[0] for _, why in api.refusals] == [
        f"total message size {message_size(api.seen[n])}" for n, _ in api.refusals]
    assert len(api.refusals) == 2
    accepted = [body for n, body in enumerate(api.seen) if n not in {m for m, _ in api.refusals}]
    assert all(message_size(body) <= api.size_limit for body in accepted)  # type: ignore[operator]
    results = [m for m in result.messages if isinstance(m, ToolMessage)]
    kinds = [[type(p).__name__ if not isinstance(p, TextPart) else p.text for p in m.content] for m in results]  # type: ignore[union-attr]
    assert kinds == [["screen 1", IMAGE_DROPPED], ["screen 2", IMAGE_DROPPED], ["screen 3", "ImagePart"],
                     ["screen 4", "ImagePart"], ["screen 5", "ImagePart"]]
    assert [i.split(": ", 1)[1].split(" (")[0] for i in result.issues] == [
        "the server refused the request as too large"] * 2
    assert all(i.endswith("the 1 oldest image left the context") for i in result.issues)


async def test_over_the_byte_limit_without_images_it_compacts_under_the_limit() -> None:
    api = HostedAPI(size_limit=15_000, reply=script(4, "read"))
    events, result = await run(api, [read], "Read the report.", keep_recent_turns=1)
    assert result.output == "done"
    (n, words), = api.refusals
    assert words.startswith(f"total message size {message_size(api.seen[n])} exceeds limit 15000")
    assert api.seen[n + 1]["messages"][-1]["content"] == COMPACTION_REQUEST
    assert all(message_size(body) <= 15_000 for body in api.seen[n + 1 :])
    assert sum(isinstance(e, CompactionEvent) and e.removed_messages > 0 for e in events) == 1


async def test_a_first_task_too_big_for_the_window_ends_the_run_context_overflow_after_one_request() -> None:
    """Before issue 41 the error was raised out of Agent.run; now the run ends with its own stop reason."""
    api = HostedAPI(token_limit=100, reply=script(0, "read"))
    async with SSEServer(api) as server:
        agent = Agent(tools=[read], engine=RemoteEngine(base_url=server.base_url, model="kimi-k3", profile="moonshot"))
        result = await agent.run("word " * 400)
    assert (result.stop_reason, result.output, len(api.seen)) == ("context_overflow", None, 1)
    assert result.issues[-1] == (
        "turn 0: the request does not fit the server's limit and nothing is left to make smaller (old tool results "
        "cleared, old turns dropped, a summary tried): 400: Error code: 400 - Invalid request: Your request exceeded "
        f"model token limit: 100 (requested: {tokens(api.seen[0])})")


def unstated(body: dict[str, Any]) -> str | None:
    """A server whose overflow names no number (its window: 3,000 of its tokens)."""
    return "Invalid request: the prompt is longer than the model's context length" if tokens(body) > 3000 else None


async def test_an_overflow_stating_no_window_is_bounded_by_the_refused_request() -> None:
    api = HostedAPI(rules={"window": unstated}, reply=script(4, "read"))
    events, result = await run(api, [read], "Read the report.", keep_recent_turns=1)
    assert result.output == "done"
    (n, _), = api.refusals
    # the summary request is smaller than the refused one, and fits the server's (unstated) window
    assert tokens(api.seen[n + 1]) < tokens(api.seen[n]) and tokens(api.seen[n + 1]) <= 3000
    assert api.seen[n + 1]["messages"][-1]["content"] == COMPACTION_REQUEST
    # the run's window is now the refused request's size by kimik3's count (each message with its K3
    # framing): half its threshold holds no whole turn beside the task, so the 6 messages after the
    # task are summarised
    assert [e.removed_messages for e in events if isinstance(e, CompactionEvent)] == [6]
    assert len(api.seen) == n + 4  # the summary, the turn again (calls part 4), its result: no second refusal


class Proxy413:
    """A proxy in front of the hosted API that answers 413 (no sizes) above ``limit`` bytes."""

    def __init__(self, api: HostedAPI, limit: int) -> None:
        self.api, self.limit = api, limit

    def __call__(self, n: int, body: dict[str, Any]) -> Any:
        if message_size(body) > self.limit:
            self.api.seen.append(body)
            self.api.refusals.append((n, "413"))
            return refused("<html><body>413 Request Entity Too Large</body></html>", 413)
        return self.api(n, body)


async def test_a_413_without_sizes_drops_the_oldest_half_of_the_images() -> None:
    image = len(prepare_image(noise(1)).data_url())
    api = HostedAPI(reply=script(4, "screenshot"))
    proxy = Proxy413(api, int(3.5 * image))
    async with SSEServer(proxy) as server:
        engine = RemoteEngine(base_url=server.base_url, model="kimi-k3", profile="moonshot")
        agent = Agent(tools=[screenshot], engine=engine)
        result = await agent.run("Watch the screen.")
    assert result.output == "done" and [n for n, _ in api.refusals] == [4]
    results = [m for m in result.messages if isinstance(m, ToolMessage)]
    kept = [sum(isinstance(p, ImagePart) for p in m.content) for m in results]  # type: ignore[union-attr]
    assert kept == [0, 0, 1, 1]  # 4 images, the oldest 2 dropped
    assert [i.split(": ", 1)[1] for i in result.issues] == [
        "the server refused the request as too large (HTTP 413): the 2 oldest images left the context"]


async def test_a_413_without_images_compacts_under_the_refused_size() -> None:
    api = HostedAPI(reply=script(4, "read"))
    proxy = Proxy413(api, 15_000)
    async with SSEServer(proxy) as server:
        agent = Agent(tools=[read], engine=RemoteEngine(base_url=server.base_url, model="kimi-k3", profile="moonshot"),
                      context=ContextPolicy(keep_recent_turns=1))
        result = await agent.run("Read the report.")
    assert result.output == "done"
    (n, _), = api.refusals
    assert api.seen[n + 1]["messages"][-1]["content"] == COMPACTION_REQUEST
    assert message_size(api.seen[n + 1]) < 0.95 * message_size(api.seen[n])
    assert all(message_size(body) <= 15_000 for body in api.seen[n + 1 :])


def over_by_one(body: dict[str, Any]) -> str:
    """A server that says every request is one byte too big, whatever it holds."""
    return f"total message size {10 + 1} exceeds limit 10"


async def test_refusals_in_a_row_are_bounded() -> None:
    """A server that refuses every request as one byte too large: the run drops the one oldest
    image per refusal, at most MAX_OVERFLOW_RECOVERIES (4) times in a row, then ends the run
    (context_overflow: never raised out of Agent.run, issue 41)."""
    api = HostedAPI(rules={"always": over_by_one})
    parts: list[Any] = [TextPart(text="look")] + [ImagePart(image_url={"url": prepare_image(noise(i)).data_url()})
                                                  for i in range(8)]
    async with SSEServer(api) as server:
        agent = Agent(engine=RemoteEngine(base_url=server.base_url, model="kimi-k3", profile="moonshot"))
        result = await agent.run(parts)
    assert len(api.seen) == 5 and (result.stop_reason, result.output) == ("context_overflow", None)
    assert result.issues[-1].endswith("a summary tried): 400: Error code: 400 - total message size 11 exceeds limit 10")
    images = [sum(p["type"] == "image_url" for p in body["messages"][0]["content"]) for body in api.seen]
    assert images == [8, 7, 6, 5, 4]
    first = next(p for p in api.seen[4]["messages"][0]["content"] if p["type"] == "image_url")["image_url"]["url"]
    assert first == prepare_image(noise(4)).data_url()  # the oldest went first


async def test_a_byte_overflow_with_nothing_to_drop_or_compact_ends_the_run_context_overflow() -> None:
    api = HostedAPI(size_limit=50)
    async with SSEServer(api) as server:
        agent = Agent(engine=RemoteEngine(base_url=server.base_url, model="kimi-k3", profile="moonshot"))
        result = await agent.run("word " * 40)
    assert (result.stop_reason, len(api.seen)) == ("context_overflow", 1)
    assert result.issues[-1].endswith(f"total message size {message_size(api.seen[0])} exceeds limit 50")


def _history() -> list[Any]:
    from kimik3.types import AssistantMessage, ToolCall, UserMessage

    def call(i: int) -> AssistantMessage:
        return AssistantMessage(content="", tool_calls=[
            ToolCall(id=f"c{i}", function={"name": "read", "arguments": "{}"})])  # type: ignore[arg-type]

    return [UserMessage(content="task"), UserMessage(content="[Summary of 4 earlier messages, written by you]\nS"),
            call(1), ToolMessage(tool_call_id="c1", content="r1"), UserMessage(content="also do B"),
            call(2), ToolMessage(tool_call_id="c2", content="r2"), call(3), ToolMessage(tool_call_id="c3", content="r3")]


@pytest.mark.parametrize(("budget", "given", "unseen"), [
    (1000, list(range(9)), 0),             # it all fits: the whole history
    (10 + 5 + 5 + 5 + 110 + 109, [0, 1, 4, 7, 8], 4),  # users kept, then the newest turn
    (10 + 5 + 5 + 5 + 220, [0, 1, 4, 5, 6, 7, 8], 2),  # two turns, not three
    (10 + 5 + 5 + 5 + 100, [0, 1, 4], 6),  # a turn is whole or absent: no result without its call
    (10 + 5 + 4, [0], 8),                  # not even the user messages
])  # fmt: skip
def test_summary_input_keeps_users_then_the_newest_whole_turns(budget: int, given: list[int], unseen: int) -> None:
    from kimik3.agents._compaction import summary_input

    msgs = _history()
    sizes = [5, 5, 10, 100, 5, 10, 100, 10, 100]
    got, left_out = summary_input(msgs, 1, len(msgs), sizes, 10, budget)
    assert [next(i for i, x in enumerate(msgs) if x is m) for m in got] == given and left_out == unseen


def test_summary_input_under_a_byte_limit() -> None:
    from kimik3.agents._compaction import summary_input
    from kimik3.types import dump_message

    msgs = _history()
    nbytes = [len(json.dumps(dump_message(m), ensure_ascii=False).encode()) for m in msgs]
    limit = sum(nbytes[i] for i in (0, 1, 4, 7, 8))
    got, left_out = summary_input(msgs, 1, len(msgs), [1] * 9, 0, 10_000, max_bytes=limit)
    assert [next(i for i, x in enumerate(msgs) if x is m) for m in got] == [0, 1, 4, 7, 8] and left_out == 4
    got, left_out = summary_input(msgs, 1, len(msgs), [1] * 9, 0, 10_000, max_bytes=limit - 1)
    assert [next(i for i, x in enumerate(msgs) if x is m) for m in got] == [0, 1, 4] and left_out == 6
