"""Chat mode, second round (issue 41, items 3-5): leaked K3 markup read as structure, required-call
fallbacks, arguments given twice, usage that does not add up. One row per shape: the issue's input
and variants; each row is checked as sent, one character per chunk, and split in two at every
position of every text field (streaming gives the non-streaming result for every chunking).
"""

from __future__ import annotations

import itertools
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from kimik3 import Client, K3Tokenizer
from kimik3._pricing import Pricing
from kimik3.engines._chat import ChatStreamChecker
from kimik3.formats.k3 import ContentDelta, ReasoningDelta, ToolCallArgumentsDelta, ToolCallDone
from kimik3.types import ChatCompletion, PromptTokensDetails, Usage
from tests.engines.test_remote_offline import FakeServer, sse
from tests.k3vocab import write_model_dir

TEXT = ("reasoning_content", "reasoning", "content")
MARKED = "holds K3 marker text"  # the start of the issue a field with unread markup gets
READ = "read as K3 structure, so its text changed"  # the issue a field whose markup was read gets
READ_ISSUES = [f"the {f} held K3 markup the server left unparsed; read as K3 structure, so its text changed (markers "
               "dropped, text moved between reasoning and answer, calls read)" for f in ("reasoning", "answer")]


def d(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


@dataclass
class Leak:
    name: str
    parts: list[tuple[str, str]]  # (field, text) in the order the server streamed them
    reasoning: str | None
    content: str
    finish: str = "stop"
    thinking: bool = True
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    marked: bool | str = False  # markup is left in the answer (or the field named): the completion says so
    tools: tuple[str, ...] = ("lookup",)


CALL = ('<|open|>tools<|sep|><|open|>call tool="lookup" index="1"<|sep|><|open|>argument key="q" type="string"<|sep|>'
        "x<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>")

LEAKS = [
    # -- SGLang #33530: a near-miss separator (the model spelled the marker from text tokens) --------
    Leak("sglang #33530: <|sep| without its >", [("reasoning_content", "2 + 2"),
         ("content", "<|open|>response<|sep|the answer is 4")], "2 + 2", "the answer is 4"),
    Leak("variant: the second | missing (<|sep>)", [("reasoning_content", "2 + 2"),
         ("content", "<|open|>response<|sep>the answer is 4")], "2 + 2", "the answer is 4"),
    Leak("variant: the first | missing (<sep|>)", [("reasoning_content", "2 + 2"),
         ("content", "<|open|>response<sep|>the answer is 4")], "2 + 2", "the answer is 4"),
    Leak("variant: a doubled | (<||sep|>, <|sep||>)", [("reasoning_content", "2 + 2"),
         ("content", "<|open||>response<||sep|>the answer is 4")], "2 + 2", "the answer is 4"),
    Leak("variant: spaces inside every marker, no exact marker at all", [("reasoning_content", "2 + 2"),
         ("content", "<| open |>response<| sep |>the answer is 4<| close |>response<| sep |>")], "2 + 2",
         "the answer is 4"),
    Leak("sglang #33530: a truncated sep then a real one, all as content: one sep, the reasoning split off",
         [("content", "Let me try that.\n<|close|>think<|sep|<|sep|>The answer is 4.")],
         "Let me try that.\n", "The answer is 4."),
    Leak("variant: near-miss markers around a leaked call: the call", [("reasoning_content", "look it up"),
         ("content", CALL.replace("<|open|>tools<|sep|>", "<|open|>tools<|sep|").replace(
             "<|close|>tools<|sep|>", "<| close |>tools<|sep>"))], "look it up", "", calls=[("lookup", {"q": "x"})]),
    # -- SGLang #33097: a length cut inside a marker sequence ----------------------------------------
    Leak("sglang #33097: reasoning cut after <|close|>", [("reasoning_content", "deep thought<|close|>")],
         "deep thought", "", finish="length"),
    Leak("sglang #33097: content cut after <|close|>response", [("reasoning_content", "r"),
         ("content", "the answer<|close|>response")], "r", "the answer", finish="length"),
    Leak("variant: cut inside the tag name", [("reasoning_content", "deep thought<|close|>thi")],
         "deep thought", "", finish="length"),
    Leak("variant: cut inside the sep after the tag name", [("reasoning_content", "r"),
         ("content", "the answer<|close|>response<|se")], "r", "the answer", finish="length"),
    Leak("variant: cut right after an open tag", [("reasoning_content", "r"), ("content", "<|open|>response")],
         "r", "", finish="length"),
    Leak("variant: a cut in a near-miss marker", [("reasoning_content", "deep thought<| close |>th")],
         "deep thought", "", finish="length"),
    # -- senpi #1092: a think close without its separator at the end of visible text -----------------
    # (a stray close or bare tag with nothing but blanks after it ends the field: read and dropped,
    # cut or not, with or without other structure; with text after it, it stays, flagged)
    Leak("senpi #1092: <|close|>think and a newline at the end of the answer", [("reasoning_content", "plan"),
         ("content", "it is done<|close|>think\n")], "plan", "it is done"),
    Leak("variant: the same at the end of a cut answer", [("reasoning_content", "plan"),
         ("content", "it is done<|close|>think\n")], "plan", "it is done", finish="length"),
    Leak("variant: at a stop with other structure in the field", [("reasoning_content", "plan"),
         ("content", "<|open|>response<|sep|>it is done<|close|>think\n")], "plan", "it is done"),
    Leak("variant: with its sep, at the end, other structure", [("reasoning_content", "plan"),
         ("content", "<|open|>response<|sep|>it is done<|close|>think<|sep|>\n")], "plan", "it is done"),
    Leak("variant: with its sep, alone, at a stop", [("reasoning_content", "plan"),
         ("content", "it is done<|close|>think<|sep|>\n")], "plan", "it is done"),
    Leak("variant: a response close at the end, at a stop", [("reasoning_content", "plan"),
         ("content", "it is done<|close|>response")], "plan", "it is done"),
    Leak("variant: a space inside and the message close after it", [("reasoning_content", "plan"),
         ("content", "it is done<| close|> think <|close|>message<|sep|>")], "plan", "it is done"),
    Leak("variant: the server sent no reasoning, cut", [("content", "it is done<|close|>think\n")], "it is done", "",
         finish="length"),
    Leak("variant: the close itself near-miss (<|close|think), cut", [("reasoning_content", "plan"),
         ("content", "it is done<|close|think\n")], "plan", "it is done", finish="length"),
    Leak("variant: the close itself near-miss (<|close|think), at a stop", [("reasoning_content", "plan"),
         ("content", "it is done<|close|think\n")], "plan", "it is done"),
    Leak("variant: a doubled | in the close, cut", [("reasoning_content", "plan"),
         ("content", "it is done<||close|>think")], "plan", "it is done", finish="length"),
    Leak("variant: the reasoning ends with a think close", [("reasoning_content", "it is done<|close|>think\n"),
         ("content", "ok")], "it is done", "ok"),
    # -- attack: prose that quotes a marker with text after it is never stripped ---------------------
    Leak("attack: prose quotes <|close|>response mid-sentence", [("reasoning_content", "2 + 2"),
         ("content", "To end, the model writes <|close|>response and stops.")], "2 + 2",
         "To end, the model writes <|close|>response and stops.", marked=True),
    Leak("attack: prose quotes <|close|>think then explains", [("reasoning_content", "2 + 2"),
         ("content", "The marker <|close|>think ends thinking.")], "2 + 2",
         "The marker <|close|>think ends thinking.", marked=True),
    # -- attack: markup quoted in Markdown code is text, with no issue ---------------------------------
    Leak("attack: a code fence quoting markup", [("reasoning_content", "2 + 2"), ("content",
         "Example:\n```\n<|open|>response<|sep|>hi<|close|>response<|sep|>\n```\nThat's the format.")], "2 + 2",
         "Example:\n```\n<|open|>response<|sep|>hi<|close|>response<|sep|>\n```\nThat's the format."),
    Leak("attack: a code span quoting a near-miss", [("reasoning_content", "2 + 2"),
         ("content", "Write `<|sep|` then the text")], "2 + 2", "Write `<|sep|` then the text"),
    Leak("variant: a ~~~ fence is the whole answer", [("reasoning_content", "2 + 2"),
         ("content", "~~~k3\n<|close|>think<|sep|>\n~~~")], "2 + 2", "~~~k3\n<|close|>think<|sep|>\n~~~"),
    Leak("variant: a double-backtick span in the reasoning", [("reasoning_content", "use ``<|open|>tools<|sep|>``"),
         ("content", "ok")], "use ``<|open|>tools<|sep|>``", "ok"),
    # -- attack: a channel opened inside the answer's text is prose quoting a tag: kept, flagged ------
    Leak("attack: prose quoting an open response tag", [("reasoning_content", "2 + 2"),
         ("content", "K3 uses <|open|>response<|sep|> to open the answer.")], "2 + 2",
         "K3 uses <|open|>response<|sep|> to open the answer.", marked=True),
    Leak("attack: prose quoting an open think tag moves no text", [("reasoning_content", "2 + 2"),
         ("content", "Use <|open|>think<|sep|> for reasoning.")], "2 + 2", "Use <|open|>think<|sep|> for reasoning.",
         marked=True),
    # -- well-formed markup that is not at the start of a channel is read, and the turn says so (READ) --
    Leak("variant: prose then a response close and more text: read, flagged as changed", [(
         "reasoning_content", "2 + 2"), ("content", "the answer is 4<|close|>response<|sep|>and more")], "2 + 2",
         "the answer is 4and more"),
    # -- attack: answer text the reasoning's markup held comes before the content the server sent after it
    Leak("attack: the answer begins in the reasoning, goes on in the content", [("reasoning_content",
         "plan<|close|>think<|sep|>The answer"), ("content", " is 4.")], "plan", "The answer is 4."),
    Leak("variant: the reasoning opens the response channel itself", [("reasoning_content",
         "plan<|close|>think<|sep|><|open|>response<|sep|>Hello "), ("content", "world")], "plan", "Hello world"),
    # -- attack: a marker cut to a prefix at a length finish is dropped (flagged) ----------------------
    Leak("attack: content cut inside <|close", [("reasoning_content", "r"), ("content", "answer<|close")], "r",
         "answer", finish="length"),
    Leak("attack: reasoning cut after <|", [("reasoning_content", "deep thought<|")], "deep thought", "",
         finish="length"),
    Leak("variant: a prefix at a stop stays text (no marker, no issue)", [("reasoning_content", "r"),
         ("content", "answer<|clo")], "r", "answer<|clo"),
    Leak("variant: cut inside a near-miss close at a length finish", [("reasoning_content", "plan"),
         ("content", "the answer<|close|response")], "plan", "the answer", finish="length"),
    Leak("variant: the first | missing in a cut close", [("reasoning_content", "deep thought<close|>")],
         "deep thought", "", finish="length"),
    Leak("sglang #32567: the think close's sep elided before the response", [(
        "reasoning", "Both returned.<|close|>think<|open|>response<|sep|>Here.<|close|>response<|sep|>"
                     "<|close|>message<|sep|>")], "Both returned.", "Here."),
    # -- text stays text (the rows of tests/engines/test_chat_transcripts.py keep theirs) -------------
    Leak("prose quoting markers stays text, flagged", [("content", "K3 uses <|open|> and <|close|> tokens.")],
         None, "K3 uses <|open|> and <|close|> tokens.", thinking=False, marked=True),
    Leak("prose quoting a near-miss stays text, flagged", [("content", "a near-miss like <|sep| is text")],
         None, "a near-miss like <|sep| is text", thinking=False, marked=True),
    Leak("a stray think close with the answer after it is no slip at the end: text", [("reasoning_content", "p"),
         ("content", "one<|close|>think<|sep|>two")], "p", "one<|close|>think<|sep|>two", marked=True),
    Leak("a quoted close at the end of prose without a cut stays text", [("content", "end a tag with <|close|>")],
         None, "end a tag with <|close|>", thinking=False, marked=True),
    Leak("words that only look like markers are never held", [("content", "<sep> and <|opener|> and a <|b")],
         None, "<sep> and <|opener|> and a <|b", thinking=False),
    # -- issue 41 verification round: other spellings of each shape -----------------------------------
    Leak("variant: a space before the sep's > (<|sep| >)", [("reasoning_content", "2 + 2"),
         ("content", "<|open|>response<|sep| >the answer is 4")], "2 + 2", "the answer is 4"),
    Leak("variant: a space after the < (< |sep|>), and around every pipe", [("reasoning_content", "2 + 2"),
         ("content", "< |open| >response< | sep | >the answer is 4")], "2 + 2", "the answer is 4"),
    Leak("variant: the near-miss sep in the reasoning field, no sep's >", [(
         "reasoning_content", "2 + 2<|close|>think<|sep|the answer is 4")], "2 + 2", "the answer is 4"),
    Leak("variant: cut inside a spaced near-miss (<| close)", [("reasoning_content", "r"),
         ("content", "the answer<| close")], "r", "the answer", finish="length"),
    Leak("variant: cut inside a doubled-| near-miss (<||clo)", [("reasoning_content", "r"),
         ("content", "the answer<||clo")], "r", "the answer", finish="length"),
    Leak("variant: cut after a close missing its first | (<close|)", [("reasoning_content", "deep thought<close|")],
         "deep thought", "", finish="length"),
    Leak("variant: a spaced near-miss prefix at a stop stays text (no marker, no issue)", [(
         "reasoning_content", "r"), ("content", "the answer<| close")], "r", "the answer<| close"),
    Leak("variant: a cut that starts no marker stays text, no issue (<|b)", [("reasoning_content", "r"),
         ("content", "the answer<|b")], "r", "the answer<|b", finish="length"),
    Leak("variant: a max_tokens cut after <|close|>response", [("reasoning_content", "r"),
         ("content", "the answer<|close|>response")], "r", "the answer", finish="max_tokens"),
    Leak("variant: cut after the think close's sep, before any answer", [(
         "reasoning_content", "deep thought<|close|>think<|sep")], "deep thought", "", finish="length"),
    Leak("variant: the bare think close with no newline, cut", [("reasoning_content", "plan"),
         ("content", "it is done<|close|>think")], "plan", "it is done", finish="length"),
    Leak("variant: the bare think close then CRLF, cut", [("reasoning_content", "plan"),
         ("content", "it is done<|close|>think\r\n")], "plan", "it is done", finish="length"),
    Leak("variant: a spaced near-miss think close (<| close |>think), cut", [("reasoning_content", "plan"),
         ("content", "it is done<| close |>think\n")], "plan", "it is done", finish="length"),
    Leak("variant: the bare think close in the reasoning field, cut", [("reasoning_content", "it is done<|close|>think\n")],
         "it is done", "", finish="length"),
    Leak("variant: an exact sep written twice is one", [("reasoning_content", "2 + 2"),
         ("content", "<|open|>response<|sep|><|sep|>the answer is 4")], "2 + 2", "the answer is 4"),
    Leak("variant: a stray sep alone in prose stays text", [("reasoning_content", "2 + 2"),
         ("content", "a <|sep|> ends a header")], "2 + 2", "a <|sep|> ends a header", marked=True),
    Leak("variant: non-ASCII text before a cut close", [("reasoning_content", "思考"),
         ("content", "答案是 4 ✓<|close|>respo")], "思考", "答案是 4 ✓", finish="length"),
    # -- a marker split across the reasoning/content boundary (x41's finding) ------------------------
    Leak("split: the think close in the reasoning, its sep starting the content", [("reasoning_content",
         "plan<|close|>think"), ("content", "<|sep|>the answer")], "plan", "the answer"),
    Leak("split: the sep alone, after blanks, starting the content", [("reasoning_content", "plan<|close|>think"),
         ("content", " <|sep|>the answer")], "plan", " the answer"),
    Leak("split: a near-miss sep starting the content", [("reasoning_content", "plan<|close|>think"),
         ("content", "<|sep|the answer")], "plan", "the answer"),
    # -- x41 decisions: look-alikes that are no K3 marker stay text, no issue (K3's vocabulary has no
    # such token: <\uff5c...\uff5c> with full-width bars is DeepSeek's markup, a zero-width space is how text
    # defuses a marker on purpose, K3's markers are lower case; prose about them is common) ----------
    Leak("x41: full-width bars (DeepSeek's markers) are text", [("reasoning_content", "r"),
         ("content", "<\uff5copen\uff5c>response<\uff5csep\uff5c>the answer is 4")], "r", "<\uff5copen\uff5c>response<\uff5csep\uff5c>the answer is 4"),
    Leak("x41: a zero-width space after the < is text", [("reasoning_content", "r"),
         ("content", "<\u200b|open|>response<\u200b|sep|>the answer is 4")], "r",
         "<\u200b|open|>response<\u200b|sep|>the answer is 4"),
    Leak("x41: upper-case markers are text, cut or not", [("reasoning_content", "r"),
         ("content", "the answer<|CLOSE|>response")], "r", "the answer<|CLOSE|>response", finish="length"),
    Leak("B07 in chat mode: text between two leaked calls drops the text, not the calls", [(
         "reasoning_content", "look it up"), ("content", CALL.replace("<|close|>call<|sep|>", "<|close|>call<|sep|>Now "
         "the second one:" + CALL.removeprefix("<|open|>tools<|sep|>").removesuffix("<|close|>tools<|sep|>"), 1))],
         "look it up", "", calls=[("lookup", {"q": "x"}), ("lookup", {"q": "x"})]),
]  # fmt: skip


def run(chunks: list[dict[str, Any]], *, thinking: bool, tools: tuple[str, ...] = ("lookup",),
        tool_choice: str | None = None) -> tuple[list[Any], ChatCompletion]:
    counter = itertools.count()
    chat = ChatStreamChecker(thinking=thinking, model="k3", tools=tools, tool_choice=tool_choice,
                             id_factory=lambda: f"k3_{next(counter)}")
    events: list[Any] = []
    for chunk in chunks:
        events += chat.feed(chunk)
    events += chat.finish(done=True)
    return events, chat.completion()


def response_of(parts: list[tuple[str, str]], finish: str) -> dict[str, Any]:
    """The same answer as one non-streaming ``chat.completion``."""
    message: dict[str, Any] = {"role": "assistant"}
    for k, v in parts:
        message[k] = message.get(k, "") + v
    return {"object": "chat.completion", "choices": [{"index": 0, "message": message, "finish_reason": finish}]}


def run_whole(body: dict[str, Any], *, thinking: bool, tools: tuple[str, ...] = ("lookup",),
              tool_choice: str | None = None) -> ChatCompletion:
    counter = itertools.count()
    chat = ChatStreamChecker(thinking=thinking, model="k3", tools=tools, tool_choice=tool_choice,
                             id_factory=lambda: f"k3_{next(counter)}")
    chat.feed_response(body)
    chat.finish()
    return chat.completion()


def chunkings(parts: list[tuple[str, str]], finish: str) -> list[list[dict[str, Any]]]:
    """The stream as sent, one character per chunk, and every text split in two at every position."""
    whole = [d({k: v}) for k, v in parts]
    out = [whole, [d({k: ch}) for k, v in parts for ch in v]]
    for i, (k, v) in enumerate(parts):
        for cut in range(1, len(v)):
            out.append([*whole[:i], d({k: v[:cut]}), d({k: v[cut:]}), *whole[i + 1:]])
    return [[*c, d({}, finish)] for c in out]


def check(events: list[Any], completion: ChatCompletion) -> None:
    """Deltas join to the completion (so no marker byte streamed that the completion lacks)."""
    msg = completion.message
    assert "".join(e.delta for e in events if isinstance(e, ContentDelta)) == msg.content
    assert "".join(e.delta for e in events if isinstance(e, ReasoningDelta)) == (msg.reasoning_content or "")
    for done in (e for e in events if isinstance(e, ToolCallDone)):
        joined = "".join(e.delta for e in events if isinstance(e, ToolCallArgumentsDelta) and e.id == done.id)
        assert joined == done.arguments_json and json.loads(joined) == done.arguments


@pytest.mark.parametrize("row", LEAKS, ids=[r.name for r in LEAKS])
def test_leaked_markup_at_every_chunking(row: Leak) -> None:
    for chunks in chunkings(row.parts, row.finish):
        events, completion = run(chunks, thinking=row.thinking, tools=row.tools)
        check(events, completion)
        msg = completion.message
        assert (msg.reasoning_content, msg.content) == (row.reasoning, row.content), chunks
        assert [(c.function.name, json.loads(c.function.arguments)) for c in msg.tool_calls or ()] == row.calls
        assert completion.truncated == (row.finish in ("length", "max_tokens"))
        sent = tuple("".join(v for k, v in row.parts if (k == "content") == is_content) for is_content in (False, True))
        changed = (msg.reasoning_content or "", msg.content) != sent or bool(row.calls)  # recovery changed a field
        read = [i for i in completion.issues if READ in i]
        assert bool(read) == changed and all(i in READ_ISSUES for i in read)
        assert [i for i in completion.issues if MARKED in i] == ([
            f"the {row.marked if isinstance(row.marked, str) else 'answer'} holds K3 marker text (<|open|>, <|close|>, "
            "<|sep|>, or one spelled a little wrong) that could not be read as K3 structure: kept as text"]
            if row.marked else [])
    # not streamed: one chat.completion gives the same message and issues as every chunking
    body = run_whole(response_of(row.parts, row.finish), thinking=row.thinking, tools=row.tools)
    assert (body.message, body.issues, body.truncated) == (msg, completion.issues, completion.truncated)


def test_markup_left_in_reasoning_is_named_as_reasoning() -> None:
    _, completion = run([d({"reasoning_content": "compare <|open|> with <|sep|"}), d({"content": "ok"}, "stop")],
                        thinking=True)
    assert completion.message.reasoning_content == "compare <|open|> with <|sep|"
    assert completion.issues == [
        "the reasoning holds K3 marker text (<|open|>, <|close|>, <|sep|>, or one spelled a little wrong) that "
        "could not be read as K3 structure: kept as text"]


# -- tool_choice="required": the fallbacks a server sends as content are calls (N29 kind) ---------

REQUIRED = [
    ("sglang's JSON-array fallback", '[{"name": "lookup", "parameters": {"q": "Paris"}}]', [("lookup", {"q": "Paris"})]),
    ("a JSON array of two calls", '[{"name": "lookup", "parameters": {"q": "a"}}, {"name": "lookup", "arguments": '
     '"{\\"q\\": \\"b\\"}"}]', [("lookup", {"q": "a"}), ("lookup", {"q": "b"})]),
    ("a fenced JSON object", '```json\n{"name": "lookup", "parameters": {"q": "Paris"}}\n```', [("lookup", {"q": "Paris"})]),
    ("a fenced JSON array, no language, blank around", '\n```\n[{"name": "lookup", "arguments": {"q": "x"}}]\n```\n',
     [("lookup", {"q": "x"})]),
    ("variant: a fenced array of two, JSON in capitals", '```JSON\n[{"name": "lookup", "parameters": {"q": "a"}},\n '
     '{"name": "lookup", "parameters": {"q": "b"}}]\n```', [("lookup", {"q": "a"}), ("lookup", {"q": "b"})]),
    ("variant: OpenAI's tool-call shape in the array", '[{"type": "function", "function": {"name": "lookup", '
     '"arguments": "{\\"q\\": \\"x\\"}"}}]', [("lookup", {"q": "x"})]),
    ("variant: the array with the response close the server left after it (a turn issue)",
     '[{"name": "lookup", "parameters": {"q": "Paris"}}]<|close|>response<|sep|>', [("lookup", {"q": "Paris"})]),
]  # fmt: skip


@pytest.mark.parametrize(("text", "calls"), [r[1:] for r in REQUIRED], ids=[r[0] for r in REQUIRED])
def test_required_fallbacks_are_calls_at_every_chunking(text: str, calls: list[tuple[str, dict[str, Any]]]) -> None:
    for chunks in chunkings([("reasoning_content", "use lookup"), ("content", text)], "stop"):
        events, completion = run(chunks, thinking=True, tool_choice="required")
        check(events, completion)
        got = [(c.function.name, json.loads(c.function.arguments)) for c in completion.message.tool_calls or ()]
        assert (got, completion.message.content, completion.finish_reason) == (calls, "", "tool_calls")
        assert completion.issues == ([READ_ISSUES[1]] if "<|" in text else [])
    body = run_whole(response_of([("reasoning_content", "use lookup"), ("content", text)], "stop"), thinking=True,
                     tool_choice="required")
    assert [(c.function.name, json.loads(c.function.arguments)) for c in body.message.tool_calls or ()] == calls


@pytest.mark.parametrize("text", [
    '[{"name": "lookup", "parameters": {"q": "a"}}, "and more"]',  # not every item a call: the answer
    '```python\n{"name": "lookup", "parameters": {}}\n```',  # a fence of another language
    'Here: ```json\n{"name": "lookup", "parameters": {}}\n```',  # text around the fence
    "[]",
])  # fmt: skip
def test_required_content_that_is_not_only_calls_stays_the_answer(text: str) -> None:
    _, completion = run([d({"content": text}), d({}, "stop")], thinking=False, tool_choice="required")
    assert (completion.message.content, completion.message.tool_calls) == (text, None)


REQUIRED_TWICE = [
    ("arguments as JSON text", '[{"name": "lookup", "arguments": "{\\"q\\": \\"a\\", \\"q\\": \\"b\\"}"}]', ["q"]),
    ("attack: parameters as an object", '{"name":"lookup","parameters":{"q":"a","q":"b"}}', ["q"]),
    ("attack: nested", '{"name":"lookup","parameters":{"q":{"x":1,"x":2}}}', ["x"]),
    ("attack: q and \\u0071 are one key", '{"name":"lookup","parameters":{"q":"a","\\u0071":"b"}}', ["q"]),
    ("variant: in an array, every call of the content fails", '[{"name":"lookup","parameters":{"q":"a"}},'
     '{"name":"lookup","parameters":{"q":"a","\\u0071":"b"}}]', ["q", "q"]),
    ("variant: in a fence", '```json\n{"name":"lookup","parameters":{"q":"a","q":"a"}}\n```', ["q"]),
]  # fmt: skip


@pytest.mark.parametrize(("text", "keys"), [r[1:] for r in REQUIRED_TWICE], ids=[r[0] for r in REQUIRED_TWICE])
def test_a_required_json_call_with_a_key_twice_is_a_failed_call_never_the_answer(text: str, keys: list[str]) -> None:
    for cut in range(len(text) + 1):
        pieces = [d({"content": p}) for p in (text[:cut], text[cut:]) if p]
        _, completion = run([*pieces, d({}, "stop")], thinking=False, tool_choice="required")
        assert completion.message.tool_calls is None and completion.message.content == ""
        assert [(f.name, f.reason) for f in completion.failed_tool_calls] == [("lookup", (
            f"it gives argument {k!r} more than once, so which value is meant cannot be told; give each argument once"))
            for k in keys]


# -- arguments given twice (dynamo #13654): a failed call the model reads, never last-wins --------

TWICE = [
    ('{"command": "ls", "command": "rm -rf build"}', "command"),
    ('{"path": "a", "n": 1, "path": "a"}', "path"),  # even the same value twice
    ('{"opts": {"x": 1, "x": 2}}', "x"),  # inside a nested object
    ('{"opts": {"a": [{"y": 1, "\\u0079": 2}]}}', "y"),  # in an object in a list in an object, escaped
    (json.dumps('{"command": "ls", "command": "rm"}'), "command"),  # arguments sent as JSON text in a string
]


@pytest.mark.parametrize(("arguments", "key"), TWICE)
def test_a_streamed_call_with_a_key_twice_fails_at_every_chunking(arguments: str, key: str) -> None:
    for cut in range(len(arguments) + 1):
        pieces = [p for p in (arguments[:cut], arguments[cut:]) if p]
        chunks = [d({"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "bash", "arguments": ""}}]}),
                  *(d({"tool_calls": [{"index": 0, "function": {"arguments": p}}]}) for p in pieces),
                  d({}, "tool_calls")]
        _, completion = run(chunks, thinking=False, tools=("bash",))
        assert completion.message.tool_calls is None
        (failed,) = completion.failed_tool_calls
        assert (failed.id, failed.name, failed.arguments) == ("c1", "bash", arguments)
        assert failed.reason == (f"it gives argument {key!r} more than once, so which value is meant cannot be told; "
                                 "give each argument once")


def test_one_key_at_two_depths_is_no_duplicate() -> None:
    chunks = [d({"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "bash", "arguments": (
        '{"command": "ls", "opts": {"command": 1}}')}}]}), d({}, "tool_calls")]
    _, completion = run(chunks, thinking=False, tools=("bash",))
    assert [c.function.arguments for c in completion.message.tool_calls or ()] == ['{"command": "ls", "opts": {"command": 1}}']
    assert completion.failed_tool_calls == []


LEAKED_TWICE = [  # a tools section the server left in the content, with a key given twice in its call
    ("a string argument twice", CALL.replace("x<|close|>argument<|sep|>", 'x<|close|>argument<|sep|><|open|>argument '
     'key="q" type="string"<|sep|>y<|close|>argument<|sep|>'), "it gives argument 'q' more than once"),
    ("a key twice nested inside an object argument", CALL.replace('key="q" type="string"<|sep|>x', 'key="q" '
     'type="object"<|sep|>{"a": {"b": 1, "b": 2}}'), "argument 'q': it gives argument 'b' more than once"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "reason"), [r[1:] for r in LEAKED_TWICE], ids=[r[0] for r in LEAKED_TWICE])
def test_a_leaked_call_with_a_key_twice_is_a_failed_call_the_model_reads(text: str, reason: str) -> None:
    """Before: the parse was not regular (a failed call), so the whole section stayed in the answer as
    text and the model read no error."""
    parts = [("reasoning_content", "look it up"), ("content", text)]
    for chunks in [*chunkings(parts, "stop"), None]:
        completion = run(chunks, thinking=True)[1] if chunks else run_whole(response_of(parts, "stop"), thinking=True)
        assert (completion.message.content, completion.message.tool_calls) == ("", None)
        (failed,) = completion.failed_tool_calls
        assert failed.name == "lookup" and failed.reason == reason + (
            ", so which value is meant cannot be told; give each argument once")
        assert completion.issues == [READ_ISSUES[1]]


# -- usage that does not add up: clamped once, said once, an issue of the turn --------------------

USAGE = [
    ("sglang #32761: cached above prompt", {"prompt_tokens": 120, "completion_tokens": 5, "total_tokens": 125,
     "prompt_tokens_details": {"cached_tokens": 900}}, (120, 5, 125, 120, None),
     ["usage.prompt_tokens_details.cached_tokens was 900, more than prompt_tokens 120: counted as 120"]),
    ("vercel/ai #19311: reasoning above completion", {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15,
     "completion_tokens_details": {"reasoning_tokens": 9}}, (10, 5, 15, 0, 5),
     ["usage.completion_tokens_details.reasoning_tokens was 9, more than completion_tokens 5: counted as 5"]),
    ("negative counts", {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": -3,
     "prompt_tokens_details": {"cached_tokens": -7}, "completion_tokens_details": {"reasoning_tokens": -1}},
     (10, 5, 15, 0, 0), ["usage.total_tokens was -3: counted as 0",
                         "usage.prompt_tokens_details.cached_tokens was -7: counted as 0",
                         "usage.completion_tokens_details.reasoning_tokens was -1: counted as 0"]),
    ("consistent counts: nothing said", {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15,
     "prompt_tokens_details": {"cached_tokens": 10}, "completion_tokens_details": {"reasoning_tokens": 5}},
     (10, 5, 15, 10, 5), []),
]  # fmt: skip


@pytest.mark.parametrize(("usage", "counts", "issues"), [u[1:] for u in USAGE], ids=[u[0] for u in USAGE])
def test_usage_is_clamped_logged_once_and_an_issue(usage: dict[str, Any], counts: tuple[int | None, ...], issues: list[str],
                                                   caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="kimik3"):
        _, completion = run([d({"content": "hi"}), d({}, "stop"), {"object": "chat.completion.chunk", "choices": [],
                                                                    "usage": usage}], thinking=False)
    u = completion.usage
    assert (u.prompt_tokens, u.completion_tokens, u.total_tokens, u.cached_tokens, u.reasoning_tokens) == counts
    assert completion.issues == issues
    said = [r.getMessage() for r in caplog.records if "did not add up" in r.getMessage()]
    assert said == ([f"kimik3: the server's usage did not add up: {'; '.join(issues)}"] if issues else [])


def usage_shapes(counts: dict[str, Any], cached: int) -> list[tuple[str, Any]]:
    """``cached_tokens`` in both shapes (OpenAI's ``prompt_tokens_details``, Moonshot's top-level
    ``usage.cached_tokens``), each where servers put the usage (a last chunk's ``usage``, Kimi's
    ``choices[0].usage``) and in a non-streaming body."""
    out: list[tuple[str, Any]] = []
    for shape, usage in (("details", {**counts, "prompt_tokens_details": {"cached_tokens": cached}}),
                         ("top level", {**counts, "cached_tokens": cached})):
        out.append((f"{shape}, a last chunk", [d({"content": "hi"}, "stop"),
                                               {"object": "chat.completion.chunk", "choices": [], "usage": usage}]))
        out.append((f"{shape}, choices[0].usage", [{"object": "chat.completion.chunk", "choices": [
            {"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop", "usage": usage}]}]))
        out.append((f"{shape}, not streamed", {"object": "chat.completion", "usage": usage, "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]}))
    return out


@pytest.mark.parametrize(("cached", "want", "issues"), [
    (900, 120, ["usage.prompt_tokens_details.cached_tokens was 900, more than prompt_tokens 120: counted as 120"]),
    (-7, 0, ["usage.prompt_tokens_details.cached_tokens was -7: counted as 0"]),
    (120, 120, []),
])  # fmt: skip
def test_cached_tokens_are_clamped_in_both_usage_shapes_wherever_they_come(
        cached: int, want: int, issues: list[str], caplog: pytest.LogCaptureFixture) -> None:
    counts = {"prompt_tokens": 120, "completion_tokens": 5, "total_tokens": 125}
    for name, sent in usage_shapes(counts, cached):
        caplog.clear()
        chat = ChatStreamChecker(thinking=False)
        with caplog.at_level(logging.WARNING, logger="kimik3"):
            if isinstance(sent, dict):
                chat.feed_response(sent)
            else:
                for chunk in sent:
                    chat.feed(chunk)
            chat.finish(done=True)
            first, again = chat.completion(), chat.completion()
        assert (first.usage.cached_tokens, first.usage.prompt_tokens, first.issues) == (want, 120, issues), name
        assert again.issues == issues and again.usage.cached_tokens == want
        said = [r.getMessage() for r in caplog.records if "did not add up" in r.getMessage()]
        assert said == ([f"kimik3: the server's usage did not add up: {issues[0]}"] if issues else []), name
        assert Pricing(input=3.0, cached_input=0.30, output=15.0).cost(first.usage) == pytest.approx(
            ((120 - want) * 3.0 + want * 0.30 + 5 * 15.0) / 1e6)


def test_cache_reads_and_writes_together_are_at_most_the_prompt() -> None:
    usage = {"prompt_tokens": 100, "completion_tokens": 5, "total_tokens": 105,
             "prompt_tokens_details": {"cached_tokens": 80, "cache_write_tokens": 80}}
    _, completion = run([d({"content": "hi"}, "stop"), {"object": "chat.completion.chunk", "choices": [],
                                                        "usage": usage}], thinking=False)
    u = completion.usage
    assert (u.cached_tokens, u.cache_write_tokens) == (80, 20)
    assert completion.issues == ["usage.prompt_tokens_details.cache_write_tokens was 80, more than prompt_tokens "
                                 "less cached_tokens 20: counted as 20"]


def test_a_negative_prompt_count_is_clamped_and_the_usage_unknown() -> None:
    _, completion = run([d({"content": "hi"}), d({}, "stop"), {"object": "chat.completion.chunk", "choices": [],
                        "usage": {"prompt_tokens": -5, "completion_tokens": 2, "total_tokens": 2}}], thinking=False)
    assert (completion.usage.prompt_tokens, completion.usage.unknown) == (0, True)  # the agent counts itself
    assert completion.issues == ["usage.prompt_tokens was -5: counted as 0"]


# -- issue 40, N08 in chat mode: a tools section left in the text after the answer's calls ----------

RM = CALL.replace('"lookup"', '"bash"').replace('key="q"', 'key="command"').replace(">x<", ">rm -rf build<")


def test_a_leaked_tools_section_after_the_servers_calls_is_a_second_one_never_run() -> None:
    head = [d({"reasoning_content": "plan"}),
            d({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]})]
    for chunks in chunkings([("content", RM)], "tool_calls"):
        events, completion = run([*head, *chunks], thinking=True, tools=("bash",))
        check(events, completion)
        assert [c.function.arguments for c in completion.message.tool_calls or ()] == ['{"command": "ls"}']
        assert completion.misplaced_tool_calls == ["bash"]
        assert completion.message.content == RM.removeprefix("<|open|>tools<|sep|>").removesuffix(
            "<|close|>tools<|sep|>")


LS = RM.replace(">rm -rf build<", ">ls<")
PWD = RM.replace(">rm -rf build<", ">pwd<")
SECTION_ROWS = [
    # (name, parts, the calls that run, misplaced, content): issue 41 attack round, N08 and the think channel
    ("attack: a tools section in the reasoning, the real one in the content: the content's runs",
     [("reasoning_content", "plan" + RM), ("content", LS)], ['{"command": "ls"}'], ["bash"], ""),
    ("variant: a tools section in the reasoning and a plain answer: it never runs",
     [("reasoning_content", "plan" + RM), ("content", "done")], [], ["bash"], "done"),
    ("attack: no reasoning sent: a section before the think close never runs, the one after does",
     [("content", "plan" + RM + "<|close|>think<|sep|>" + LS)], ['{"command": "ls"}'], ["bash"], ""),
    ("attack: three sections: the first runs, the others are misplaced",
     [("reasoning_content", "r"), ("content", LS + RM + PWD)], ['{"command": "ls"}'], ["bash", "bash"],
     RM.removeprefix("<|open|>tools<|sep|>").removesuffix("<|close|>tools<|sep|>")
     + PWD.removeprefix("<|open|>tools<|sep|>").removesuffix("<|close|>tools<|sep|>")),
    ("attack: text after a second section", [("reasoning_content", "r"), ("content", LS + RM + "done")],
     ['{"command": "ls"}'], ["bash"], RM.removeprefix("<|open|>tools<|sep|>").removesuffix("<|close|>tools<|sep|>")
     + "done"),
]  # fmt: skip


@pytest.mark.parametrize("row", SECTION_ROWS, ids=[r[0] for r in SECTION_ROWS])
def test_only_the_tools_section_after_the_think_channel_runs(row: tuple[Any, ...]) -> None:
    _, parts, calls, misplaced, content = row
    for chunks in chunkings(parts, "stop"):
        events, completion = run(chunks, thinking=True, tools=("lookup", "bash"))
        check(events, completion)
        assert [c.function.arguments for c in completion.message.tool_calls or ()] == calls
        assert (completion.misplaced_tool_calls, completion.message.content) == (misplaced, content)
        assert any(READ in i for i in completion.issues)


# -- usage in raw mode: the same clamp, where the codec builds the completion ---------------------


@pytest.mark.parametrize(("cached", "want", "issues"), [
    (900, 99, ["usage.prompt_tokens_details.cached_tokens was 900, more than prompt_tokens 99: counted as 99"]),
    (-4, 0, ["usage.prompt_tokens_details.cached_tokens was -4: counted as 0"]),
    (64, 64, []),
])  # fmt: skip
@pytest.mark.parametrize("top_level", [False, True], ids=["prompt_tokens_details", "usage.cached_tokens"])
async def test_raw_mode_clamps_usage_the_same_way_and_cost_stays_positive(
        tmp_path: Path, cached: int, want: int, issues: list[str], top_level: bool) -> None:
    text = "<|open|>response<|sep|>Hello<|close|>response<|sep|><|close|>message<|sep|>"
    usage: dict[str, Any] = {"prompt_tokens": 99, "completion_tokens": 20, "total_tokens": 119}
    usage.update({"cached_tokens": cached} if top_level else {"prompt_tokens_details": {"cached_tokens": cached}})

    def respond(request: httpx.Request) -> httpx.Response:
        return sse([{"object": "text_completion", "choices": [{"index": 0, "text": text, "finish_reason": "stop"}]},
                    {"object": "text_completion", "choices": [], "usage": usage}])

    tok = K3Tokenizer.from_pretrained(write_model_dir(tmp_path / "k3", num_base_tokens=163_584))
    engine = FakeServer(respond).engine(mode="raw", tokenizer=tok, max_model_len=4096)
    out = await Client(engine).chat([{"role": "user", "content": "Hi"}], reasoning_effort="none")
    assert (out.usage.prompt_tokens, out.usage.cached_tokens, out.issues) == (99, want, issues)
    price = Pricing(input=3.0, cached_input=0.30, output=15.0)
    assert price.cost(out.usage) == ((99 - want) * 3.0 + want * 0.30 + 20 * 15.0) / 1e6 > 0


def test_the_completion_says_the_same_when_asked_twice() -> None:
    chat = ChatStreamChecker(thinking=False)
    chat.feed(d({"content": "quote <|open|>"}, "stop"))
    chat.feed({"object": "chat.completion.chunk", "choices": [],
               "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7,
                         "prompt_tokens_details": {"cached_tokens": 6}}})
    chat.finish(done=True)
    first, second = chat.completion(), chat.completion()
    assert first.issues == second.issues == [
        "the answer holds K3 marker text (<|open|>, <|close|>, <|sep|>, or one spelled a little wrong) that could "
        "not be read as K3 structure: kept as text",
        "usage.prompt_tokens_details.cached_tokens was 6, more than prompt_tokens 5: counted as 5"]


async def test_raw_mode_says_when_it_counted_a_negative_count_itself(tmp_path: Path) -> None:
    text = "<|open|>response<|sep|>Hello<|close|>response<|sep|><|close|>message<|sep|>"

    def respond(request: httpx.Request) -> httpx.Response:
        return sse([{"object": "text_completion", "choices": [{"index": 0, "text": text, "finish_reason": "stop"}]},
                    {"object": "text_completion", "choices": [],
                     "usage": {"prompt_tokens": -99, "completion_tokens": 6, "total_tokens": -93}}])

    tok = K3Tokenizer.from_pretrained(write_model_dir(tmp_path / "k3", num_base_tokens=163_584))
    engine = FakeServer(respond).engine(mode="raw", tokenizer=tok, max_model_len=4096)
    out = await Client(engine).chat([{"role": "user", "content": "Hi"}], reasoning_effort="none")
    assert out.usage.prompt_tokens > 0 and out.usage.completion_tokens == 6
    assert out.issues == [f"usage.prompt_tokens was -99: kimik3 counted {out.usage.prompt_tokens} itself"]


@pytest.mark.parametrize(("counts", "want"), [
    ({"prompt_tokens": -1_000_000, "completion_tokens": 0}, 0.0),  # a hand-built Usage, never clamped by a server
    ({"prompt_tokens": 1_000_000, "completion_tokens": -1_000_000, "cached": -5}, 3.0),  # only the prompt
    ({"prompt_tokens": 10, "completion_tokens": 0, "cached": 900}, 10 * 0.30 / 1e6),  # all cached
])  # fmt: skip
def test_cost_is_never_negative_even_for_a_hand_built_usage(counts: dict[str, int], want: float) -> None:
    cached = counts.pop("cached", None)
    usage = Usage(**counts, prompt_tokens_details=None if cached is None else PromptTokensDetails(cached_tokens=cached))
    assert usage.cached_tokens == (cached or 0)
    assert Pricing(input=3.0, cached_input=0.30, output=15.0).cost(usage) == pytest.approx(want)
