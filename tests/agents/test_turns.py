"""The agent's turn shape: named outcomes, one approval helper, one count of the context."""

from __future__ import annotations

import itertools
from typing import Any

from kimik3 import (
    Agent,
    AgentEvent,
    Allow,
    AssistantMessage,
    Edit,
    FinalEvent,
    ScriptedEngine,
    SystemMessage,
    ToolCallApprovedEvent,
    ToolResultEvent,
    UserMessage,
    tool,
)
from kimik3.agents import ContinueWith, Final, ToolsRan
from kimik3.agents._agent import _Run
from kimik3.agents._tokens import RunTokens
from kimik3.formats.k3 import default_tokenizer, render_output


@tool
def echo(text: str) -> str:
    """Echo text back."""
    return text.upper()


def call(text: str) -> str:
    return render_output({"reasoning_content": "r", "content": "",
                          "tool_calls": [{"id": "a", "function": {"name": "echo", "arguments": {"text": text}}}]})


async def test_turn_outcomes_are_named() -> None:
    cut = "partial<|close|>think<|sep|><|open|>response<|sep|>answer"  # no message close: a max_tokens cut
    engine = ScriptedEngine([call("hi"), cut, render_output({"reasoning_content": "d", "content": " is done"})])
    agent = Agent(tools=[echo], engine=engine)
    run = _Run([UserMessage(content="go")], None, None, RunTokens(None, agent.client))
    outcomes = []
    for _ in range(3):
        async for item in agent._turn(run):
            if isinstance(item, ToolsRan | ContinueWith | Final):
                outcomes.append(item)
                if isinstance(item, ContinueWith):
                    run.add(UserMessage(content=item.prompt))
    assert outcomes[0] == ToolsRan()
    assert isinstance(outcomes[1], ContinueWith) and "cut off by the output limit" in outcomes[1].prompt
    assert outcomes[2] == Final("answer is done", "completed")  # the cut reply's text and its continuation


async def test_approved_calls_are_reported_with_their_final_arguments() -> None:
    def approve(pending: Any) -> Any:
        return Edit({"text": "edited"}) if pending.arguments["text"] == "b" else Allow()

    engine = ScriptedEngine([
        render_output({"reasoning_content": "r", "content": "", "tool_calls": [
            {"id": "1", "function": {"name": "echo", "arguments": {"text": "a"}}},
            {"id": "2", "function": {"name": "echo", "arguments": {"text": "b"}}}]}),
        render_output({"reasoning_content": "d", "content": "ok"}),
    ])
    events: list[AgentEvent] = [e async for e in Agent(tools=[echo], engine=engine, approval=approve).run_stream("x")]
    kinds = [(type(e).__name__, getattr(e, "arguments", None)) for e in events
             if isinstance(e, ToolCallApprovedEvent | ToolResultEvent)]
    assert kinds == [("ToolCallApprovedEvent", '{"text": "a"}'), ("ToolResultEvent", None),
                     ("ToolCallApprovedEvent", {"text": "edited"}), ("ToolResultEvent", None)]
    approved = [e for e in events if isinstance(e, ToolCallApprovedEvent)]
    assert [a.edited for a in approved] == [False, True]
    assert isinstance(events[-1], FinalEvent) and events[-1].result.output == "ok"


def test_tokens_in_the_context_count_reasoning_once_and_the_k3_framing() -> None:
    agent = Agent(engine=ScriptedEngine([]))
    run = _Run([], None, None, RunTokens(None, agent.client))
    reasoning = "r" * 400  # 200 tokens in K3's real vocabulary (the agent's default count)
    assistant = AssistantMessage(content="a" * 40, reasoning_content=reasoning)
    run.add(assistant)  # 200 + 5, and 23 of framing: the message, think and response tags, <|end_of_msg|>
    assert run.context_tokens == 228
    user = UserMessage(content="u" * 80)
    run.add(user)  # 40 + 11 (<|open|>message role="user"<|sep|> ... <|close|>message<|sep|><|end_of_msg|>)
    assert run.context_tokens == 279
    # exactly what each message adds to a K3 prompt (the full encoder, one prompt against the next)
    tok, head = default_tokenizer(), [SystemMessage(content="s")]
    lengths = [len(tok.encode_messages(head + ms, add_generation_prompt=False)) for ms in ([], [assistant],
                                                                                        [assistant, user])]
    assert [b - a for a, b in itertools.pairwise(lengths)] == [228, 51]
