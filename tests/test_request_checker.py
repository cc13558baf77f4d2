"""RequestChecker: check_request for a growing conversation, each message checked once (issue 30,
item 1), with the same verdicts as a full check whatever changes between requests."""

from __future__ import annotations

import pytest

from kimik3 import ChatRequest, InvalidRequestError, MessageError, UserError
from kimik3.types import (
    AssistantMessage,
    Message,
    RequestChecker,
    SystemMessage,
    ToolMessage,
    UserMessage,
    check_request,
    to_tool_specs,
)
from kimik3.types import _request as request_module

TOOLS = to_tool_specs([{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
                       for n in ("read", "write")])  # fmt: skip


def spec(name: str) -> list:  # type: ignore[type-arg]
    return to_tool_specs([{"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}])


def turn(i: int) -> list[Message]:
    return [AssistantMessage(content="", tool_calls=[{"id": f"c{i}", "function": {"name": "read", "arguments": "{}"}}]),
            ToolMessage(content=f"r{i}", tool_call_id=f"c{i}")]


def test_each_message_is_checked_once_over_a_growing_conversation(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []
    real = request_module._check_message

    def counting(i: int, msg: Message, declared: set[str]) -> list[str]:
        seen.append(i)
        return real(i, msg, declared)

    monkeypatch.setattr(request_module, "_check_message", counting)
    checker = RequestChecker()
    history: list[Message] = [SystemMessage(content="sys"), UserMessage(content="go")]
    for i in range(300):
        request = ChatRequest(messages=history, tools=TOOLS, checker=checker)
        assert request.messages == history and request.messages is not history  # a snapshot
        history += turn(i)
    # 2 + 2 x 299 messages were sent, each checked once: not 300 requests x the history (90,300)
    assert seen == list(range(600))


def test_dicts_are_typed_and_the_verdicts_are_the_full_checks() -> None:
    checker = RequestChecker()
    history: list[object] = [{"role": "system", "content": "sys"}, {"role": "user", "content": "go"}]
    out = checker.check(history, TOOLS)
    assert [type(m) for m in out] == [SystemMessage, UserMessage]
    history = [*out, {"role": "tool", "content": "r"}]  # a tool message without tool_call_id
    with pytest.raises(InvalidRequestError, match="tool message #2 has no tool_call_id"):
        checker.check(history, TOOLS)
    with pytest.raises(InvalidRequestError, match="tool message #2 has no tool_call_id"):
        check_request(history, TOOLS)  # type: ignore[arg-type]
    # the refused request kept nothing: the same history with the message fixed passes
    assert len(checker.check([*out, ToolMessage(content="r", tool_call_id="c0")], TOOLS)) == 3


def test_a_message_replaced_in_the_middle_is_checked_again() -> None:
    checker = RequestChecker()
    history: list[Message] = [SystemMessage(content="sys"), UserMessage(content="go"), *turn(0), *turn(1)]
    checker.check(history, TOOLS)
    history[3] = UserMessage(content="oops", tools=[{"type": "function", "function": {"name": "x"}}])  # type: ignore[call-arg]
    with pytest.raises(InvalidRequestError, match=r"message #3 \(role 'user'\) carries tools"):
        checker.check(history, TOOLS)


def test_declarations_dropped_from_the_history_may_be_declared_again() -> None:
    """Compaction can drop a dynamic declaration: declaring the tool again is then valid, and a
    second declaration while the first is still there is not."""
    checker = RequestChecker()
    decl = SystemMessage(content="", tools=spec("search"))
    history: list[Message] = [SystemMessage(content="sys"), UserMessage(content="go"), decl, *turn(0)]
    checker.check(history, TOOLS)
    again = SystemMessage(content="", tools=spec("search"))
    with pytest.raises(InvalidRequestError, match=r"duplicate tool name\(s\) in system message #5: 'search'"):
        checker.check([*history, again], TOOLS)
    compacted: list[Message] = [history[0], history[1], UserMessage(content="[Summary]"), again]
    assert len(checker.check(compacted, TOOLS)) == 4
    with pytest.raises(InvalidRequestError, match=r"duplicate tool name\(s\) in system message #4: 'search'"):
        checker.check([*compacted, SystemMessage(content="", tools=spec("search"))], TOOLS)


def test_other_request_tools_check_everything_again() -> None:
    checker = RequestChecker()
    history: list[Message] = [SystemMessage(content="sys"), SystemMessage(content="", tools=spec("write")),
                              UserMessage(content="go")]  # fmt: skip
    assert len(checker.check(history, spec("read"))) == 3
    with pytest.raises(InvalidRequestError, match=r"duplicate tool name\(s\) in system message #1: 'write'"):
        checker.check(history, TOOLS)  # now the head declares write too
    with pytest.raises(InvalidRequestError, match="tool_choice 'required' with no tools declared"):
        checker.check(history[:1], [], tool_choice="required")
    assert len(checker.check(history, [], tool_choice="required")) == 3  # the declaration counts


def test_checker_is_keyword_only_typed_and_not_kept() -> None:
    checker = RequestChecker()
    request = ChatRequest(messages=[UserMessage(content="hi")], checker=checker)
    assert "checker" not in request.__dict__
    with pytest.raises(TypeError):
        ChatRequest([UserMessage(content="hi")], [], None, None, None, checker)  # type: ignore[misc]
    with pytest.raises(UserError, match=r"ChatRequest\(checker=...\) must be a RequestChecker"):
        ChatRequest(messages=[UserMessage(content="hi")], checker="yes")  # type: ignore[arg-type]
    with pytest.raises(MessageError, match="messages must be a list of messages, got str"):
        ChatRequest(messages="hi", checker=checker)  # type: ignore[arg-type]
