"""Chat mode's checker against stream transcripts: one row per shape real servers send (chunks in,
the exact events and completion out). A new shape is one more row.

Each row's chunks are what an OpenAI-compatible server streams as ``data:`` lines; ``DONE`` stands
for ``data: [DONE]``; a row whose chunks are one dict with ``"object": "chat.completion"`` is a
non-streaming answer (a server or proxy that ignored ``stream: true``).
"""

from __future__ import annotations

import itertools
import json
import logging
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kimik3 import (
    APIResponseValidationError,
    APIStatusError,
    BadRequestError,
    ChatCompletion,
    ContextLengthExceededError,
    NotFoundError,
    RateLimitError,
    ServiceUnavailableError,
)
from kimik3.engines._chat import ChatStreamChecker
from kimik3.formats.k3 import (
    ContentDelta,
    Event,
    ReasoningDelta,
    ToolCallArgumentsDelta,
    ToolCallDone,
    ToolCallIncomplete,
    ToolCallStarted,
)

DONE = "[DONE]"


def d(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    """A ``chat.completion.chunk`` with one choice."""
    return {"id": "c", "object": "chat.completion.chunk", "model": "k3", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def tc(**call: Any) -> dict[str, Any]:
    """A delta with one tool-call fragment (``name``/``arguments`` go under ``function``)."""
    function = {k: call.pop(k) for k in ("name", "arguments") if k in call}
    if function:
        call["function"] = function
    return {"tool_calls": [call]}


USAGE = {"id": "c", "object": "chat.completion.chunk", "model": "k3", "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13}}  # fmt: skip
LEAK = (
    '<|open|>tools<|sep|><|open|>call tool="lookup" index="1"<|sep|>'
    '<|open|>argument key="q" type="string"<|sep|>x<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>'
)


@dataclass
class Row:
    name: str
    chunks: list[Any]
    events: list[tuple[Any, ...]]
    content: str = ""
    reasoning: str | None = ""
    calls: list[tuple[str, str, str]] = field(default_factory=list)
    finish: str = "stop"
    truncated: bool = False
    thinking: bool = True
    dropped: list[str] = field(default_factory=list)
    failed: list[tuple[str, str, str, str]] = field(default_factory=list)  # id, name, raw, reason start
    tools: tuple[str, ...] = ("lookup",)  # the tools the request declared
    tool_choice: str | None = None
    misplaced: list[str] = field(default_factory=list)


ROWS = [
    Row(
        "vllm: reasoning_content then content, usage chunk, [DONE]",
        [d({"role": "assistant", "reasoning_content": "Think"}), d({"reasoning_content": "ing."}),
         d({"content": "Paris"}), d({"content": "."}, "stop"), USAGE, DONE],
        [("r", "Think"), ("r", "ing."), ("c", "Paris"), ("c", ".")],
        content="Paris.", reasoning="Thinking.",
    ),
    Row(
        "vllm >= 0.10: the field is named reasoning",
        [d({"reasoning": "hm"}), d({"content": "ok"}, "stop"), DONE],
        [("r", "hm"), ("c", "ok")],
        content="ok", reasoning="hm",
    ),
    Row(
        "tool-call deltas without index: the open call continues (issue 13, input 1)",
        [d(tc(id="call_a", type="function", name="lookup", arguments="")), d(tc(arguments='{"q": ')),
         d(tc(arguments='"x"}')), d({}, "tool_calls"), DONE],
        [("start", 0, "call_a", "lookup"), ("args", 0, '{"q": '), ("args", 0, '"x"}'),
         ("done", 0, "call_a", "lookup", {"q": "x"})],
        calls=[("call_a", "lookup", '{"q": "x"}')], finish="tool_calls",
    ),
    Row(
        "no index, then a new id: a second call",
        [d(tc(id="a", name="f", arguments='{"n": 1}')), d(tc(id="b", name="g", arguments='{"n": 2}')), d({}, "tool_calls")],
        [("start", 0, "a", "f"), ("args", 0, '{"n": 1}'), ("start", 1, "b", "g"), ("args", 1, '{"n": 2}'),
         ("done", 0, "a", "f", {"n": 1}), ("done", 1, "b", "g", {"n": 2})],
        calls=[("a", "f", '{"n": 1}'), ("b", "g", '{"n": 2}')], finish="tool_calls",
    ),
    Row(
        "the id after the first argument fragment: deltas still join to the arguments (input 2)",
        [d(tc(index=0, name="lookup", arguments='{"q": "pa')), d(tc(index=0, id="call_x", arguments='ris"}')),
         d({}, "tool_calls"), DONE],
        [("start", 0, "k3_0", "lookup"), ("args", 0, '{"q": "pa'), ("args", 0, 'ris"}'),
         ("done", 0, "k3_0", "lookup", {"q": "paris"})],
        calls=[("k3_0", "lookup", '{"q": "paris"}')], finish="tool_calls",
    ),
    Row(
        "arguments before the name: held, then sent whole when the call starts",
        [d(tc(index=0, id="i", arguments='{"a"')), d(tc(index=0, arguments=": 1}")), d(tc(index=0, name="f")),
         d({}, "tool_calls")],
        [("start", 0, "i", "f"), ("args", 0, '{"a": 1}'), ("done", 0, "i", "f", {"a": 1})],
        calls=[("i", "f", '{"a": 1}')], finish="tool_calls",
    ),
    Row(
        "every call at index 0, each with its own id: a new id starts a new call",
        [d(tc(index=0, id="a", name="f", arguments="{}")), d(tc(index=0, id="b", name="f", arguments='{"x": 2}')),
         d({}, "tool_calls")],
        [("start", 0, "a", "f"), ("args", 0, "{}"), ("start", 1, "b", "f"), ("args", 1, '{"x": 2}'),
         ("done", 0, "a", "f", {}), ("done", 1, "b", "f", {"x": 2})],
        calls=[("a", "f", "{}"), ("b", "f", '{"x": 2}')], finish="tool_calls",
    ),
    Row(
        "two calls of one turn share an id: the second gets a unique one (input 7)",
        [d(tc(index=0, id="call00003", name="exec", arguments='{"c": "ls"}')),
         d(tc(index=1, id="call00003", name="exec", arguments='{"c": "pwd"}')), d({}, "tool_calls")],
        [("start", 0, "call00003", "exec"), ("args", 0, '{"c": "ls"}'), ("start", 1, "k3_0", "exec"),
         ("args", 1, '{"c": "pwd"}'), ("done", 0, "call00003", "exec", {"c": "ls"}),
         ("done", 1, "k3_0", "exec", {"c": "pwd"})],
        calls=[("call00003", "exec", '{"c": "ls"}'), ("k3_0", "exec", '{"c": "pwd"}')], finish="tool_calls",
    ),
    Row(
        "shared id and no index: a name after complete arguments starts a new call",
        [d(tc(id="s", name="exec", arguments='{"c": "ls"}')), d(tc(id="s", name="exec", arguments='{"c": "pwd"}')),
         d({}, "tool_calls")],
        [("start", 0, "s", "exec"), ("args", 0, '{"c": "ls"}'), ("start", 1, "k3_0", "exec"),
         ("args", 1, '{"c": "pwd"}'), ("done", 0, "s", "exec", {"c": "ls"}), ("done", 1, "k3_0", "exec", {"c": "pwd"})],
        calls=[("s", "exec", '{"c": "ls"}'), ("k3_0", "exec", '{"c": "pwd"}')], finish="tool_calls",
    ),
    Row(
        "a connection closed mid-answer: no finish_reason, no [DONE] -> truncated (input 3)",
        [d({"reasoning_content": "x"}), d({"content": "The capital of Fra"})],
        [("r", "x"), ("c", "The capital of Fra")],
        content="The capital of Fra", reasoning="x", finish="length", truncated=True,
    ),
    Row(
        "[DONE] without any finish_reason: a proper end, not a cut",
        [d({"reasoning_content": "x"}), d({"content": "Hi"}), DONE],
        [("r", "x"), ("c", "Hi")],
        content="Hi", reasoning="x",
    ),
    Row(
        "cut by max_tokens inside a call's arguments: the call is dropped, never run",
        [d({"reasoning_content": "x"}), d(tc(index=0, id="a", name="write", arguments='{"text": "hel')), d({}, "length")],
        [("r", "x"), ("start", 0, "a", "write"), ("args", 0, '{"text": "hel'), ("incomplete", 0, "a", "write")],
        reasoning="x", finish="length", truncated=True, dropped=["write"],
    ),
    Row(
        "text ending in '<' arrives intact (input 5)",
        [d({"content": "if a <"}, "stop"), DONE],
        [("c", "if a "), ("c", "<")],
        content="if a <", reasoning=None, thinking=False,
    ),
    Row(
        "text ending in '<|', split over chunks, arrives intact",
        [d({"content": "x <"}), d({"content": "|"}, "stop"), DONE],
        [("c", "x "), ("c", "<|")],
        content="x <|", reasoning=None, thinking=False,
    ),
    Row(
        "a partial marker that does not become one is released with the next chunk",
        [d({"content": "a <|op"}), d({"content": "en sesame"}, "stop")],
        [("c", "a "), ("c", "<|open sesame")],
        content="a <|open sesame", reasoning=None, thinking=False,
    ),
    Row(
        "content quoting markers arrives intact (not a K3 structure)",
        [d({"content": "K3 uses <|open|> and "}), d({"content": "<|close|> tokens."}, "stop"), DONE],
        [("c", "K3 uses "), ("c", "<|open|> and <|close|> tokens.")],
        content="K3 uses <|open|> and <|close|> tokens.", reasoning=None, thinking=False,
    ),
    Row(
        "a quoted incomplete call block stays text",
        [d({"content": 'see <|open|>call tool="x"<|sep|> there'}, "stop")],
        [("c", "see "), ("c", '<|open|>call tool="x"<|sep|> there')],
        content='see <|open|>call tool="x"<|sep|> there', reasoning=None, thinking=False,
    ),
    Row(
        "a whole call block a server leaked into content is recovered",
        [d({"content": "Looking." + LEAK[:30]}), d({"content": LEAK[30:]}, "stop"), DONE],
        [("c", "Looking."), ("start", 0, "k3_0", "lookup"), ("args", 0, '{"q": "x"}'),
         ("done", 0, "k3_0", "lookup", {"q": "x"})],
        content="Looking.", reasoning=None, thinking=False, calls=[("k3_0", "lookup", '{"q": "x"}')], finish="tool_calls",
    ),
    Row(
        "a missed think close: the rest of the message leaked into reasoning is recovered",
        [d({"reasoning": "plan<|open|>response<|sep|>Reading.<|close|>response<|sep|>"}),
         d({"reasoning": LEAK + "<|close|>message<|sep|>"}, "stop")],
        [("r", "plan"), ("c", "Reading."), ("start", 0, "k3_0", "lookup"), ("args", 0, '{"q": "x"}'),
         ("done", 0, "k3_0", "lookup", {"q": "x"})],
        content="Reading.", reasoning="plan", calls=[("k3_0", "lookup", '{"q": "x"}')], finish="tool_calls",
    ),
    Row(
        "malformed arguments passed through: kept as a failed call (input 6)",
        [d(tc(index=0, id="a", name="exec", arguments='{"command": "ls", "bg": true, note": "x"}')), d({}, "tool_calls")],
        [("start", 0, "a", "exec"), ("args", 0, '{"command": "ls", "bg": true, note": "x"}'), ("incomplete", 0, "a", "exec")],
        failed=[("a", "exec", '{"command": "ls", "bg": true, note": "x"}', "arguments are not valid JSON (Expecting")],
    ),
    Row(
        "a raw newline inside a JSON string: escaped as it streams",
        [d(tc(index=0, id="a", name="say", arguments='{"msg": "line1\nli')), d(tc(index=0, arguments='ne2"}')),
         d({}, "tool_calls")],
        [("start", 0, "a", "say"), ("args", 0, '{"msg": "line1\\nli'), ("args", 0, 'ne2"}'),
         ("done", 0, "a", "say", {"msg": "line1\nline2"})],
        calls=[("a", "say", '{"msg": "line1\\nline2"}')], finish="tool_calls",
    ),
    Row(
        "a raw tab and newline between tokens are JSON whitespace: kept as they are",
        [d(tc(index=0, id="a", name="f", arguments='{\n\t"k": "v\tw"\n}')), d({}, "tool_calls")],
        [("start", 0, "a", "f"), ("args", 0, '{\n\t"k": "v\\tw"\n}'), ("done", 0, "a", "f", {"k": "v\tw"})],
        calls=[("a", "f", '{\n\t"k": "v\\tw"\n}')], finish="tool_calls",
    ),
    Row(
        "arguments JSON-encoded twice: decoded once more",
        [d(tc(index=0, id="a", name="exec", arguments='"{\\"command\\": ')), d(tc(index=0, arguments='\\"ls\\"}"')),
         d({}, "tool_calls")],
        [("start", 0, "a", "exec"), ("args", 0, '{"command": "ls"}'), ("done", 0, "a", "exec", {"command": "ls"})],
        calls=[("a", "exec", '{"command": "ls"}')], finish="tool_calls",
    ),
    Row(
        "a JSON string that is not an encoded object: failed",
        [d(tc(index=0, id="a", name="exec", arguments='"ls -la"')), d({}, "tool_calls")],
        [("start", 0, "a", "exec"), ("incomplete", 0, "a", "exec")],
        failed=[("a", "exec", '"ls -la"', "arguments are JSON but not an object (str)")],
    ),
    Row(
        "an array where an object must be: failed",
        [d(tc(index=0, id="a", name="f", arguments="[1, 2]")), d({}, "tool_calls")],
        [("start", 0, "a", "f"), ("args", 0, "[1, 2]"), ("incomplete", 0, "a", "f")],
        failed=[("a", "f", "[1, 2]", "arguments are JSON but not an object (list)")],
    ),
    Row(
        "a 5000-digit integer: failed, naming the limit",
        [d(tc(index=0, id="a", name="f", arguments='{"n": ' + "9" * 5000 + "}")), d({}, "tool_calls")],
        [("start", 0, "a", "f"), ("args", 0, '{"n": ' + "9" * 5000 + "}"), ("incomplete", 0, "a", "f")],
        failed=[("a", "f", '{"n": ' + "9" * 5000 + "}", "arguments beyond kimik3's JSON limits: an integer has more than 640 digits")],
    ),
    Row(
        "nesting 1000 deep: failed, naming the limit",
        [d(tc(index=0, id="a", name="f", arguments='{"a": ' + "[" * 1000 + "]" * 1000 + "}")), d({}, "tool_calls")],
        [("start", 0, "a", "f"), ("args", 0, '{"a": ' + "[" * 1000 + "]" * 1000 + "}"), ("incomplete", 0, "a", "f")],
        failed=[("a", "f", '{"a": ' + "[" * 1000 + "]" * 1000 + "}", "arguments beyond kimik3's JSON limits: nested deeper than 128 arrays/objects")],
    ),
    Row(
        "NaN is not JSON: failed (re-sending it would be invalid JSON)",
        [d(tc(index=0, id="a", name="f", arguments='{"x": NaN}')), d({}, "tool_calls")],
        [("start", 0, "a", "f"), ("args", 0, '{"x": NaN}'), ("incomplete", 0, "a", "f")],
        failed=[("a", "f", '{"x": NaN}', "arguments beyond kimik3's JSON limits: NaN is not a JSON number")],
    ),
    Row(
        "empty arguments are {}",
        [d(tc(index=0, id="a", name="now", arguments="")), d({}, "tool_calls")],
        [("start", 0, "a", "now"), ("args", 0, "{}"), ("done", 0, "a", "now", {})],
        calls=[("a", "now", "{}")], finish="tool_calls",
    ),
    Row(
        "arguments sent as an object, not text: JSON text",
        [d(tc(index=0, id="a", name="f", arguments={"k": [1, "é"]})), d({}, "tool_calls")],
        [("start", 0, "a", "f"), ("args", 0, '{"k": [1, "é"]}'), ("done", 0, "a", "f", {"k": [1, "é"]})],
        calls=[("a", "f", '{"k": [1, "é"]}')], finish="tool_calls",
    ),
    Row(
        "a call with no name: failed",
        [d(tc(index=0, id="a", arguments="{}")), d({}, "tool_calls")],
        [("start", 0, "a", ""), ("incomplete", 0, "a", "")],
        failed=[("a", "", "{}", "the server sent no function name")],
    ),
    Row(
        "thinking off, the answer labelled reasoning: relabelled content (input 8)",
        [d({"reasoning_content": "The answer "}), d({"reasoning_content": "is 4."}, "stop"), DONE],
        [("c", "The answer is 4.")],
        content="The answer is 4.", reasoning=None, thinking=False,
    ),
    Row(
        "thinking off, reasoning then content: the model did think",
        [d({"reasoning_content": "hm"}), d({"content": "4"}, "stop")],
        [("r", "hm"), ("c", "4")],
        content="4", reasoning="hm", thinking=False,
    ),
    Row(
        "thinking on, cut, unclosed thinking labelled content: relabelled reasoning",
        [d({"content": "Let me think about"}), d({"content": " this"}, "length")],
        [("r", "Let me think about this")],
        reasoning="Let me think about this", finish="length", truncated=True,
    ),
    Row(
        "thinking on, no reasoning, a normal stop: the content is the answer",
        [d({"content": "Hi"}), d({"content": "!"}, "stop"), DONE],
        [("c", "Hi!")],
        content="Hi!",
    ),
    Row(
        "a non-streaming body (stream ignored): tool calls without index",
        [{"id": "x", "object": "chat.completion", "model": "k3-srv", "usage": {"prompt_tokens": 3, "completion_tokens": 2},
          "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
              "role": "assistant", "reasoning_content": "r", "content": None,
              "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": '{"k": 1}'}},
                             {"id": "b", "type": "function", "function": {"name": "g", "arguments": "{}"}}]}}]}],
        [("r", "r"), ("start", 0, "a", "f"), ("args", 0, '{"k": 1}'), ("start", 1, "b", "g"), ("args", 1, "{}"),
         ("done", 0, "a", "f", {"k": 1}), ("done", 1, "b", "g", {})],
        reasoning="r", calls=[("a", "f", '{"k": 1}'), ("b", "g", "{}")], finish="tool_calls",
    ),
    Row(
        "a non-streaming body with finish_reason length and unclosed thinking as content",
        [{"object": "chat.completion", "choices": [{"finish_reason": "length", "message": {"content": "Hmm, so"}}]}],
        [("r", "Hmm, so")],
        reasoning="Hmm, so", finish="length", truncated=True,
    ),
    Row(
        "content as a list of text parts (some gateways)",
        [d({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}, "stop")],
        [("c", "ab")],
        content="ab", reasoning=None, thinking=False,
    ),
    Row(
        "an unknown finish_reason (content_filter): truncated, visibly",
        [d({"reasoning_content": "x"}), d({"content": "Part"}, "content_filter")],
        [("r", "x"), ("c", "Part")],
        content="Part", reasoning="x", finish="length", truncated=True,
    ),
    Row(
        "a name split across deltas: joined (the call starts with its arguments)",
        [d(tc(index=0, id="a", name="look", arguments="")), d(tc(index=0, name="up", arguments="")),
         d(tc(index=0, arguments='{"q": 1}')), d({}, "tool_calls")],
        [("start", 0, "a", "lookup"), ("args", 0, '{"q": 1}'), ("done", 0, "a", "lookup", {"q": 1})],
        calls=[("a", "lookup", '{"q": 1}')], finish="tool_calls",
    ),
    Row(
        "the whole name resent in every delta (or cumulatively): one name, one call",
        [d(tc(index=0, id="a", name="look", arguments="")), d(tc(index=0, name="lookup", arguments='{"q": ')),
         d(tc(index=0, name="lookup", arguments="1}")), d(tc(index=0, name="lookup")), d({}, "tool_calls")],
        [("start", 0, "a", "lookup"), ("args", 0, '{"q": '), ("args", 0, "1}"), ("done", 0, "a", "lookup", {"q": 1})],
        calls=[("a", "lookup", '{"q": 1}')], finish="tool_calls",
    ),
    Row(
        "the id changes mid-arguments at one index (a fresh id per chunk): one call, the first id",
        [d(tc(index=0, id="a", name="f", arguments='{"x": ')), d(tc(index=0, id="b", arguments="1}")),
         d({}, "tool_calls")],
        [("start", 0, "a", "f"), ("args", 0, '{"x": '), ("args", 0, "1}"), ("done", 0, "a", "f", {"x": 1})],
        calls=[("a", "f", '{"x": 1}')], finish="tool_calls",
    ),
    Row(
        "an id per chunk, the name in the first and the arguments from the second: one call",
        [d(tc(index=0, id="a", name="f", arguments="")), d(tc(index=0, id="b", arguments='{"x": ')),
         d(tc(index=0, id="c", arguments="1}")), d({}, "tool_calls")],
        [("start", 0, "a", "f"), ("args", 0, '{"x": '), ("args", 0, "1}"), ("done", 0, "a", "f", {"x": 1})],
        calls=[("a", "f", '{"x": 1}')], finish="tool_calls",
    ),
    Row(
        "every call at index 0 without ids: a name after complete arguments starts the next call",
        [d(tc(index=0, name="f", arguments='{"x": 1}')), d(tc(index=0, name="g", arguments="{}")), d({}, "tool_calls")],
        [("start", 0, "k3_0", "f"), ("args", 0, '{"x": 1}'), ("start", 1, "k3_1", "g"), ("args", 1, "{}"),
         ("done", 0, "k3_0", "f", {"x": 1}), ("done", 1, "k3_1", "g", {})],
        calls=[("k3_0", "f", '{"x": 1}'), ("k3_1", "g", "{}")], finish="tool_calls",
    ),
    Row(
        "a lone UTF-16 surrogate escape in the arguments: failed, not run",
        [d(tc(index=0, id="a", name="f", arguments='{"s": "\\ud800"}')), d({}, "tool_calls")],
        [("start", 0, "a", "f"), ("args", 0, '{"s": "\\ud800"}'), ("incomplete", 0, "a", "f")],
        failed=[("a", "f", '{"s": "\\ud800"}', "arguments beyond kimik3's JSON limits: a string holds a lone UTF-16 surrogate ('\\ud800')")],
    ),
    Row(
        "a surrogate pair escape is one character: the call runs",
        [d(tc(index=0, id="a", name="f", arguments='{"s": "\\ud83d\\ude00"}')), d({}, "tool_calls")],
        [("start", 0, "a", "f"), ("args", 0, '{"s": "\\ud83d\\ude00"}'), ("done", 0, "a", "f", {"s": "\U0001f600"})],
        calls=[("a", "f", '{"s": "\\ud83d\\ude00"}')], finish="tool_calls",
    ),
    Row(
        "a stream chunk carrying a whole message, not a delta (proxies): read, not an empty answer",
        [{"object": "chat.completion.chunk", "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "reasoning_content": "r", "content": "Checking.",
            "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": '{"k": 1}'}}]}}]}, DONE],
        [("r", "r"), ("c", "Checking."), ("start", 0, "a", "f"), ("args", 0, '{"k": 1}'), ("done", 0, "a", "f", {"k": 1})],
        content="Checking.", reasoning="r", calls=[("a", "f", '{"k": 1}')], finish="tool_calls",
    ),
    # -- issue 27: the server shapes reported since (a)-(e), and K3 text rules in chat mode ----------
    Row(
        "vllm #57689 (a): a response-only answer streamed entirely as reasoning, markers and all: the answer",
        [d({"reasoning": "<|open|>resp"}), d({"reasoning": "onse<|sep|>The answer"}),
         d({"reasoning": " is 4.<|close|>response<|sep|><|close|>mess"}), d({"reasoning": "age<|sep|>"}, "stop"), DONE],
        [("c", "The answer is 4.")],
        content="The answer is 4.", reasoning="",
    ),
    Row(
        "sglang #39583 (b): a tools section returned as content for a request with no tools: never run",
        [d({"reasoning_content": "use the calculator"}), d({"content": LEAK + "<|close|>message<|sep|>"}, "stop"), DONE],
        [("r", "use the calculator"), ("start", 0, "k3_0", "lookup"), ("incomplete", 0, "k3_0", "lookup")],
        reasoning="use the calculator", tools=(),
        failed=[("k3_0", "lookup", '{"q": "x"}', "the server returned this call as text, and the request declared no tools")],
    ),
    Row(
        "sglang #33192 (c): tool_choice required answered with the call as JSON content: the call",
        [d({"reasoning_content": "weather"}), d({"content": '{"name": "lookup", '}),
         d({"content": '"parameters": {"q": "Paris"}}'}, "stop"), DONE],
        [("r", "weather"), ("start", 0, "k3_0", "lookup"), ("args", 0, '{"q": "Paris"}'),
         ("done", 0, "k3_0", "lookup", {"q": "Paris"})],
        reasoning="weather", tool_choice="required", calls=[("k3_0", "lookup", '{"q": "Paris"}')], finish="tool_calls",
    ),
    Row(
        "sglang #33192 (c): the JSON call names a tool not declared: a failed call, never the answer",
        [d({"content": '{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}'}, "stop"), DONE],
        [("start", 0, "k3_0", "get_weather"), ("incomplete", 0, "k3_0", "get_weather")],
        tool_choice="required",
        failed=[("k3_0", "get_weather", '{"city": "Paris"}',
                 "the server returned this call as text, and no tool named 'get_weather' is declared")],
    ),
    Row(
        "sglang #32677 (d): the think open spelled as text ('<|sep' + '|>'): the reasoning leaked into the answer",
        [d({"content": "<|open|>think<|sep"}), d({"content": "|>I should greet.<|close|>think<|sep|>"}),
         d({"content": "<|open|>response<|sep|>Hello!<|close|>response<|sep|><|close|>message<|sep|>"}, "stop"), DONE],
        [("r", "I should greet."), ("c", "Hello!")],
        content="Hello!", reasoning="I should greet.",
    ),
    Row(
        "sglang #32677 (d): reasoning, then the think close, all as content: split",
        [d({"content": "deliberating"}), d({"content": "<|close|>think<|sep|>visible"}, "stop"), DONE],
        [("r", "deliberating"), ("c", "visible")],
        content="visible", reasoning="deliberating",
    ),
    Row(
        "(e) finish_reason length after reasoning only: truncated, no answer",
        [d({"reasoning_content": "Let me think about this carefully"}), d({}, "length"), DONE],
        [("r", "Let me think about this carefully")],
        reasoning="Let me think about this carefully", finish="length", truncated=True,
    ),
    Row(
        "a call outside any tools section left in content: kept as text, never run, named",
        [d({"content": 'Cleaning up.<|open|>call tool="lookup" index="1"<|sep|><|open|>argument key="q" '
                       'type="string"<|sep|>rm -rf build<|close|>argument<|sep|><|close|>call<|sep|>'}, "stop"), DONE],
        [("c", "Cleaning up."), ("c", '<|open|>call tool="lookup" index="1"<|sep|><|open|>argument key="q" '
                                     'type="string"<|sep|>rm -rf build<|close|>argument<|sep|><|close|>call<|sep|>')],
        content='Cleaning up.<|open|>call tool="lookup" index="1"<|sep|><|open|>argument key="q" type="string"<|sep|>'
                "rm -rf build<|close|>argument<|sep|><|close|>call<|sep|>",
        reasoning=None, thinking=False, misplaced=["lookup"],
    ),
    Row(
        "a leaked call's string value holding marker text: kept exactly",
        [d({"content": LEAK.replace(">x<", "><|open|>a<|sep|>b <|close|>c <|<") + "<|close|>message<|sep|>"}, "stop")],
        [("start", 0, "k3_0", "lookup"), ("args", 0, '{"q": "<|open|>a<|sep|>b <|close|>c <|"}'),
         ("done", 0, "k3_0", "lookup", {"q": "<|open|>a<|sep|>b <|close|>c <|"})],
        reasoning=None, thinking=False, calls=[("k3_0", "lookup", '{"q": "<|open|>a<|sep|>b <|close|>c <|"}')],
        finish="tool_calls",
    ),
    Row(
        "usage inside choices[0] (Kimi's shape): read",
        [d({"content": "Hi"}), {"object": "chat.completion.chunk", "choices": [
            {"index": 0, "delta": {}, "finish_reason": "stop",
             "usage": {"prompt_tokens": 11, "completion_tokens": 2, "total_tokens": 13}}]}, DONE],
        [("c", "Hi")],
        content="Hi", reasoning=None, thinking=False,
    ),
    Row(
        "a stream chunk with completions-style text: the text is the content",
        [{"object": "chat.completion.chunk", "choices": [{"index": 0, "text": "Paris", "finish_reason": None}]},
         d({}, "stop"), DONE],
        [("c", "Paris")],
        content="Paris", reasoning=None, thinking=False,
    ),
]  # fmt: skip


def show(event: Event) -> tuple[Any, ...]:
    if isinstance(event, ReasoningDelta):
        return ("r", event.delta)
    if isinstance(event, ContentDelta):
        return ("c", event.delta)
    if isinstance(event, ToolCallStarted):
        return ("start", event.index, event.id, event.name)
    if isinstance(event, ToolCallArgumentsDelta):
        return ("args", event.index, event.delta)
    if isinstance(event, ToolCallDone):
        return ("done", event.index, event.id, event.name, event.arguments)
    assert isinstance(event, ToolCallIncomplete)
    return ("incomplete", event.index, event.id, event.name)


def run(chunks: list[Any], *, thinking: bool, tools: tuple[str, ...] = ("lookup",),
        tool_choice: str | None = None) -> tuple[list[Event], ChatCompletion]:
    counter = itertools.count()
    chat = ChatStreamChecker(thinking=thinking, model="k3", tools=tools, tool_choice=tool_choice,
                             id_factory=lambda: f"k3_{next(counter)}")
    events: list[Event] = []
    done = False
    for chunk in chunks:
        if chunk == DONE:
            done = True
        elif chunk.get("object") == "chat.completion":
            events += chat.feed_response(chunk)
        else:
            events += chat.feed(chunk)
    events += chat.finish(done=done)
    return events, chat.completion()


def merge_text(events: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Adjacent text deltas of one channel joined (how they are split is not the contract)."""
    out: list[tuple[Any, ...]] = []
    for e in events:
        if out and e[0] in ("r", "c") and out[-1][0] == e[0]:
            out[-1] = (e[0], out[-1][1] + e[1])
        else:
            out.append(e)
    return out


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_transcript(row: Row) -> None:
    events, completion = run(row.chunks, thinking=row.thinking, tools=row.tools, tool_choice=row.tool_choice)
    assert [show(e) for e in events] == row.events
    msg = completion.message
    assert msg.content == row.content
    assert msg.reasoning_content == row.reasoning
    assert [(c.id, c.function.name, c.function.arguments) for c in msg.tool_calls or ()] == row.calls
    assert (completion.finish_reason, completion.truncated) == (row.finish, row.truncated)
    assert completion.dropped_tool_calls == row.dropped
    got_failed = [(f.id, f.name, f.arguments, f.reason) for f in completion.failed_tool_calls]
    assert [g[:3] for g in got_failed] == [f[:3] for f in row.failed]
    for got, want in zip(got_failed, row.failed, strict=True):
        assert got[3].startswith(want[3]), got[3]
    assert completion.misplaced_tool_calls == row.misplaced
    # the contract every row keeps: a call's argument deltas join to its final arguments JSON
    for done in (e for e in events if isinstance(e, ToolCallDone)):
        joined = "".join(e.delta for e in events if isinstance(e, ToolCallArgumentsDelta) and e.id == done.id)
        assert joined == done.arguments_json and json.loads(joined) == done.arguments
    # and text deltas join to the completion's text
    assert "".join(e.delta for e in events if isinstance(e, ContentDelta)) == msg.content
    assert "".join(e.delta for e in events if isinstance(e, ReasoningDelta)) == (msg.reasoning_content or "")


@pytest.mark.parametrize("row", [r for r in ROWS if len(r.chunks) > 1], ids=lambda r: r.name)
def test_transcript_rechunked_one_character_at_a_time(row: Row) -> None:
    """The same answer streamed a character per chunk gives the same text and calls."""
    fine: list[Any] = []
    for chunk in row.chunks:
        if (
            not isinstance(chunk, dict)
            or chunk.get("object") != "chat.completion.chunk"
            or not chunk["choices"]
            or "delta" not in chunk["choices"][0]
        ):
            fine.append(chunk)
            continue
        choice = chunk["choices"][0]
        delta = choice["delta"]
        for key in ("reasoning_content", "reasoning", "content"):
            if isinstance(delta.get(key), str) and len(delta[key]) > 1:
                fine += [d({key: ch}) for ch in delta[key]]
                delta = {k: v for k, v in delta.items() if k != key}
        fine.append(d(delta, choice["finish_reason"]))
    events, completion = run(fine, thinking=row.thinking, tools=row.tools, tool_choice=row.tool_choice)
    assert merge_text([show(e) for e in events]) == merge_text(row.events)
    assert (completion.message.content, completion.message.reasoning_content) == (row.content, row.reasoning)


@pytest.mark.parametrize(
    ("payload", "error", "status"),
    [
        # issue 13, input 4: an error sent in-band after the 200 headers
        ({"error": {"message": "engine queue is full, retry later", "type": "ServiceUnavailableError", "code": 503}},
         ServiceUnavailableError, 503),
        ({"object": "error", "message": "bad grammar", "type": "BadRequestError", "param": None, "code": 400},
         BadRequestError, 400),
        ({"error": {"message": "This model's maximum context length is 8192 tokens", "type": "invalid_request_error",
                    "code": "context_length_exceeded"}}, ContextLengthExceededError, 400),
        ({"error": {"message": "slow down", "type": "rate_limit_exceeded"}}, RateLimitError, 429),
        ({"error": {"message": "prompt rejected", "code": "context_length_exceeded"}}, ContextLengthExceededError, 400),
        ({"error": {"message": "x", "code": "429"}}, RateLimitError, 429),
        ({"error": {"message": "Overloaded", "type": "overloaded_error"}}, ServiceUnavailableError, 503),
        ({"error": "something broke"}, ServiceUnavailableError, 500),
        ({"error": {"message": "teapot", "code": 418}}, APIStatusError, 418),
        # FastAPI's error body ({"detail": ...}) in band: typed by its words, else a server failure
        ({"detail": "Not Found"}, NotFoundError, 404),
        ({"detail": [{"loc": ["body"], "msg": "queue full"}]}, ServiceUnavailableError, 500),
    ],
)  # fmt: skip
def test_in_band_error_objects_raise_by_code(payload: dict[str, Any], error: type[APIStatusError], status: int) -> None:
    chat = ChatStreamChecker(thinking=True)
    assert [show(e) for e in chat.feed(d({"reasoning_content": "a"}))] == [("r", "a")]
    with pytest.raises(error) as info:
        chat.feed(payload)
    assert type(info.value) is error and info.value.status_code == status
    assert info.value.body == payload


@pytest.mark.parametrize(
    "chunk",
    [
        ["not", "an", "object"],
        {"choices": {"index": 0}},
        d({"content": 42}),
        d({"tool_calls": {"index": 0}}),
        d({"tool_calls": [{"index": "0", "function": {"name": "f"}}]}),
        d(tc(index=0, id="a", name="f", arguments=7)),
    ],
)
def test_chunks_of_the_wrong_shape_raise_a_typed_error(chunk: Any) -> None:
    with pytest.raises(APIResponseValidationError):
        ChatStreamChecker(thinking=True).feed(chunk)


@pytest.mark.parametrize(
    ("name", "warnings"),
    [
        ("thinking off, the answer labelled reasoning: relabelled content (input 8)",
         ["kimik3: thinking is off but the server labelled the answer reasoning; relabelled as content"]),
        ("thinking on, cut, unclosed thinking labelled content: relabelled reasoning",
         ["kimik3: the server labelled unclosed thinking (a cut answer) content; now reasoning"]),
        ("two calls of one turn share an id: the second gets a unique one (input 7)",
         ["kimik3: the server sent tool-call id 'call00003' twice in one turn; renamed the second"]),
        ("a whole call block a server leaked into content is recovered",
         ["kimik3: K3 markup left in content read as K3 output: 1 call(s)"]),
        ("sglang #39583 (b): a tools section returned as content for a request with no tools: never run",
         ["kimik3: K3 markup left in content read as K3 output: 1 call(s)",
          "kimik3: a call to 'lookup' read from text the server left is not run: the server returned this call "
          "as text, and the request declared no tools"]),
        ("a connection closed mid-answer: no finish_reason, no [DONE] -> truncated (input 3)",
         ["kimik3: the stream ended with no finish_reason and no [DONE]: the answer is truncated"]),
        ("vllm: reasoning_content then content, usage chunk, [DONE]", []),
    ],
)  # fmt: skip
def test_what_kimik3_changes_it_says(name: str, warnings: list[str], caplog: pytest.LogCaptureFixture) -> None:
    row = next(r for r in ROWS if r.name == name)
    with caplog.at_level(logging.WARNING, logger="kimik3.engines.chat"):
        run(row.chunks, thinking=row.thinking, tools=row.tools, tool_choice=row.tool_choice)
    no_usage = "kimik3: the server reported no usable token usage (none at all); usage is marked unknown"
    assert [r.getMessage() for r in caplog.records] == warnings + ([no_usage] if USAGE not in row.chunks else [])


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet=st.characters(max_codepoint=0x7F)),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=5), JSON_VALUES, max_size=4), st.lists(st.integers(1, 40), max_size=6))
def test_arguments_with_raw_control_characters_any_chunking(arguments: dict[str, Any], cuts: list[int]) -> None:
    """A server that unescapes control characters in strings, chunked anywhere: the same arguments,
    and the deltas still join to the final arguments JSON."""
    text = json.dumps(arguments)
    raw = text.replace("\\n", "\n").replace("\\t", "\t") if "\\\\" not in text else text
    pieces, pos = [], 0
    for cut in cuts:
        pieces.append(raw[pos : pos + cut])
        pos += cut
    pieces.append(raw[pos:])
    chunks = [d(tc(index=0, id="a", name="f", arguments="")), *(d(tc(index=0, arguments=p)) for p in pieces)]
    events, completion = run([*chunks, d({}, "tool_calls")], thinking=False)
    [done] = [e for e in events if isinstance(e, ToolCallDone)]
    assert done.arguments == arguments
    assert "".join(e.delta for e in events if isinstance(e, ToolCallArgumentsDelta)) == done.arguments_json
    assert [c.function.arguments for c in completion.message.tool_calls or ()] == [done.arguments_json]


@pytest.mark.parametrize(
    "chunks",
    [
        [{"object": "chat.completion.chunk", "choices": [], "usage": {"prompt_tokens": 1}}],
        [{"choices": [{"index": 1, "delta": {"content": "another choice"}}]}],
    ],
)
def test_an_answer_without_a_choice_is_not_an_empty_answer(chunks: list[dict[str, Any]]) -> None:
    chat = ChatStreamChecker(thinking=True)
    for chunk in chunks:
        assert chat.feed(chunk) == []
    with pytest.raises(APIResponseValidationError, match="the answer had no choices"):
        chat.finish(done=True)



def test_openai_python_chunk_objects_are_read_like_their_dicts() -> None:
    from openai.types.chat import ChatCompletionChunk

    row = next(r for r in ROWS if r.name.startswith("the id after the first argument fragment"))
    chunks = [ChatCompletionChunk.model_validate({"created": 0, **c}) for c in row.chunks if c != DONE]
    chat = ChatStreamChecker(thinking=True, id_factory=lambda: "k3_0")
    events = [e for c in chunks for e in chat.feed(c)] + chat.finish(done=True)
    assert [show(e) for e in events] == row.events


def test_arguments_are_decoded_once_not_per_delta(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that repeats the name in every delta, without index: telling a continuation from a
    new call must not decode the arguments so far on each delta (quadratic: a 120 KB call took 8 s)."""
    import kimik3.engines._chat as chat_module

    decodes: list[int] = []
    real = chat_module.decode_arguments

    def counting(text: str) -> tuple[dict[str, Any] | None, str]:
        decodes.append(len(text))
        return real(text)

    monkeypatch.setattr(chat_module, "decode_arguments", counting)
    arguments = json.dumps({"items": [{"k": i, "s": "}{]["} for i in range(300)]})
    pieces = [arguments[i : i + 5] for i in range(0, len(arguments), 5)]
    chat = ChatStreamChecker(thinking=True, id_factory=lambda: "k3_0")
    events = []
    for piece in pieces:
        events += chat.feed(d({"tool_calls": [{"id": "a", "function": {"name": "f", "arguments": piece}}]}))
    events += chat.feed(d({}, "tool_calls")) + chat.finish(done=True)
    assert [(c.id, c.function.arguments) for c in chat.completion().message.tool_calls or ()] == [("a", arguments)]
    assert "".join(e.delta for e in events if isinstance(e, ToolCallArgumentsDelta)) == arguments
    assert decodes == [len(arguments)] * len(decodes) and len(decodes) <= 2  # only once the brackets balance
