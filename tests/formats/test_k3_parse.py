"""K3 output parsing (spec §3): golden cases, streaming == non-streaming, events, recovery."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kimik3.formats.k3 as k3
from kimik3 import AssistantMessage, ParserStateError
from kimik3.formats.k3 import (
    ContentDelta,
    Event,
    ParsedOutput,
    ReasoningDelta,
    StreamParser,
    ToolCallArgumentsDelta,
    ToolCallDone,
    ToolCallIncomplete,
    ToolCallStarted,
    parse,
)
from kimik3.types import dump_message
from tests.data_paths import load_json
from tests.formats.k3_outputs import SLIPS, Sample, corpus, generate

MARKERS = ("<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>")
CASES = load_json("k3/parse_cases.json")["cases"] + load_json("k3/parse_cases_extra.json")["cases"]
CASE_IDS = [c["name"] for c in CASES]
CHUNK_SIZES = (1, 2, 3, 7, 64)
CORPUS = corpus(400)


def counter_ids() -> Callable[[], str]:
    n = itertools.count()
    return lambda: f"id{next(n)}"


def summary(out: ParsedOutput) -> dict[str, Any]:
    """The fixture's expectation shape (ids are not part of it)."""
    return {
        "reasoning_content": out.reasoning_content,
        "content": out.content,
        "tool_calls": [{"name": c.name, "arguments": c.arguments} for c in out.tool_calls],
        "truncated": out.truncated,
    }


def stream(
    chunks: Sequence[str], *, thinking: bool, finish_reason: str | None
) -> tuple[ParsedOutput, list[Event]]:
    parser = StreamParser(thinking, id_factory=counter_ids())
    events: list[Event] = []
    for chunk in chunks:
        events += parser.feed(chunk)
    events += parser.finish(finish_reason)
    return parser.result(), events


def chunked(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def check_events(out: ParsedOutput, events: list[Event]) -> None:
    """Events agree with the result: deltas concatenate to it, no marker byte leaks, every started
    call ends exactly once (done or incomplete), argument fragments build ``arguments_json``."""
    reasoning = "".join(e.delta for e in events if isinstance(e, ReasoningDelta))
    content = "".join(e.delta for e in events if isinstance(e, ContentDelta))
    assert reasoning == (out.reasoning_content or "")
    assert content == out.content
    for e in events:
        if isinstance(e, (ReasoningDelta, ContentDelta)):
            assert e.delta, "empty deltas are never emitted"
            assert not any(m in e.delta for m in MARKERS)
    started = {e.index: e for e in events if isinstance(e, ToolCallStarted)}
    ended: dict[int, ToolCallDone | ToolCallIncomplete] = {}
    fragments: dict[int, list[str]] = {i: [] for i in started}
    for e in events:
        if isinstance(e, ToolCallArgumentsDelta):
            assert e.index in started and e.index not in ended, "arguments only between start and end"
            assert e.id == started[e.index].id
            fragments[e.index].append(e.delta)
        elif isinstance(e, (ToolCallDone, ToolCallIncomplete)):
            assert e.index in started and e.index not in ended
            assert (e.id, e.name) == (started[e.index].id, started[e.index].name)
            ended[e.index] = e
    assert sorted(ended) == sorted(started)
    done = [e for e in ended.values() if isinstance(e, ToolCallDone)]
    assert [(d.index, d.id, d.name, d.arguments, d.arguments_json) for d in done] == [
        (c.index, c.id, c.name, c.arguments, c.arguments_json) for c in out.tool_calls
    ]
    assert [i.index for i in out.incomplete_tool_calls] == [
        e.index for e in ended.values() if isinstance(e, ToolCallIncomplete)
    ]
    for call in out.tool_calls:
        assert "".join(fragments[call.index]) == call.arguments_json
        assert json.loads(call.arguments_json) == call.arguments
    assert len({e.id for e in started.values()}) == len(started)


# -- goldens ---------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_parse_matches_golden(case: dict[str, Any]) -> None:
    out = parse(case["text"], thinking=case["thinking"], finish_reason=case.get("finish_reason"))
    assert summary(out) == case["expect"]
    for call in out.tool_calls:  # unique keys in every golden: the OpenAI text is json.dumps
        assert call.arguments_json == json.dumps(call.arguments, ensure_ascii=False)


@pytest.mark.parametrize("size", CHUNK_SIZES)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_stream_matches_parse(case: dict[str, Any], size: int) -> None:
    kw = {"thinking": case["thinking"], "finish_reason": case.get("finish_reason")}
    whole = parse(case["text"], id_factory=counter_ids(), **kw)
    out, events = stream(chunked(case["text"], size), **kw)
    assert out == whole  # ids included: same factory, same call order
    assert summary(out) == case["expect"]
    check_events(out, events)


@st.composite
def chunkings(draw: st.DrawFn, text: str) -> list[str]:
    cuts = draw(st.lists(st.integers(0, len(text)), max_size=40))
    bounds = [0, *sorted(cuts), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_stream_any_chunking_golden(case: dict[str, Any], data: st.DataObject) -> None:
    chunks = data.draw(chunkings(case["text"]))
    kw = {"thinking": case["thinking"], "finish_reason": case.get("finish_reason")}
    out, events = stream(chunks, **kw)
    assert out == parse(case["text"], id_factory=counter_ids(), **kw)
    check_events(out, events)


# -- generated outputs -------------------------------------------------------------------------


def _sample_id(s: Sample) -> str:
    return f"{s.name}[{','.join(s.slips) or 'clean'}]"


@pytest.mark.parametrize("sample", CORPUS, ids=_sample_id)
def test_generated_outputs_parse_as_intended(sample: Sample) -> None:
    out = parse(sample.text, thinking=sample.thinking, finish_reason=sample.finish_reason)
    assert summary(out) == sample.expect
    for size in CHUNK_SIZES:
        got, events = stream(
            chunked(sample.text, size), thinking=sample.thinking, finish_reason=sample.finish_reason
        )
        assert summary(got) == sample.expect
        check_events(got, events)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), data=st.data())
def test_generated_outputs_any_chunking(seed: int, data: st.DataObject) -> None:
    sample = generate(seed)
    chunks = data.draw(chunkings(sample.text))
    out, events = stream(chunks, thinking=sample.thinking, finish_reason=sample.finish_reason)
    assert summary(out) == sample.expect
    assert out == parse(
        sample.text, thinking=sample.thinking, finish_reason=sample.finish_reason, id_factory=counter_ids()
    )
    check_events(out, events)


def test_corpus_covers_every_slip() -> None:
    seen = {slip for s in CORPUS for slip in s.slips}
    assert seen == set(SLIPS)
    assert sum(1 for s in CORPUS if not s.slips) > 50


# -- incremental behaviour ---------------------------------------------------------------------

HEADER = '<|close|>think<|sep|><|open|>tools<|sep|><|open|>call tool="write" index="1"<|sep|>'


def test_partial_marker_held_only_while_it_can_become_one() -> None:
    p = StreamParser(thinking=False)
    assert p.feed("Hello<") == [ContentDelta("Hello")]
    assert p.feed("|clo") == []
    assert p.feed("sed") == [ContentDelta("<|closed")]  # can no longer become a marker
    assert p.feed(" a<b") == [ContentDelta(" a<b")]
    assert p.feed(" <|end_of_msg") == [ContentDelta(" ")]
    assert p.feed("|") == []
    assert p.feed(">ignored") == []  # <|end_of_msg|> ends the message
    p.finish()
    assert p.result().content == "Hello<|closed a<b "
    assert not p.result().truncated


def test_reasoning_streams_before_the_think_close() -> None:
    p = StreamParser()
    assert p.feed("Let me") == [ReasoningDelta("Let me")]
    assert p.feed(" think<|close|>thi") == [ReasoningDelta(" think")]
    assert p.feed("nk<|sep|><|open|>response<|sep|>Hi") == [ContentDelta("Hi")]


def test_tool_call_progress_is_incremental() -> None:
    p = StreamParser(id_factory=counter_ids())
    assert p.feed(HEADER[:-3]) == []
    assert p.feed(HEADER[-3:]) == [ToolCallStarted(0, "id0", "write")]
    assert p.feed('<|open|>argument key="text" type="string"<|sep|>') == [
        ToolCallArgumentsDelta(0, "id0", '{"text": "')
    ]
    # a long string argument streams while it arrives, JSON-escaped piece by piece
    assert p.feed('line "one"\n') == [ToolCallArgumentsDelta(0, "id0", 'line \\"one\\"\\n')]
    assert p.feed("tab\there<|clo") == [ToolCallArgumentsDelta(0, "id0", "tab\\there")]
    # the closer is confirmed by what follows it (the next value's open tag, or the call's close)
    assert p.feed("se|>argument<|sep|>") == []
    assert p.feed('<|open|>argument key="n" type="number"<|sep|>4') == [
        ToolCallArgumentsDelta(0, "id0", '"'), ToolCallArgumentsDelta(0, "id0", ', "n": ')
    ]
    assert p.feed("2<|close|>argument<|sep|>") == []
    args = {"text": 'line "one"\ntab\there', "n": 42}
    text = json.dumps(args, ensure_ascii=False)
    # the call's close right after a closer is confirmed by what may follow a call (here the tools close)
    assert p.feed("<|close|>call<|sep|>") == []
    assert p.feed("<|close|>tools<|sep|><|close|>message<|sep|>") == [
        ToolCallArgumentsDelta(0, "id0", "42"),
        ToolCallArgumentsDelta(0, "id0", "}"),
        ToolCallDone(0, "id0", "write", args, text),
    ]
    assert p.finish("stop") == []
    assert p.result().tool_calls[0].arguments_json == text


def test_cut_call_is_reported_never_returned() -> None:
    p = StreamParser(id_factory=counter_ids())
    p.feed(HEADER + '<|open|>argument key="path" type="string"<|sep|>a.txt<|close|>argument<|sep|>')
    p.feed('<|open|>argument key="text" type="string"<|sep|>partial')
    assert p.finish("length") == [ToolCallIncomplete(0, "id0", "write")]
    out = p.result()
    assert out.tool_calls == ()
    assert out.truncated and out.finish_reason == "length"
    assert [(c.name, c.arguments) for c in out.incomplete_tool_calls] == [("write", {"path": "a.txt"})]


def test_interrupted_call_is_dropped_and_the_next_kept() -> None:
    # interrupted before its first value: dropped (incomplete), the next call kept
    text = (
        HEADER + '<|open|>call tool="read" index="2"<|sep|><|close|>call<|sep|><|close|>tools<|sep|>'
        "<|close|>message<|sep|>"
    )
    out = parse(text, id_factory=counter_ids())
    assert [(c.index, c.id, c.name, c.arguments) for c in out.tool_calls] == [(1, "id1", "read", {})]
    assert [(c.index, c.name, c.arguments) for c in out.incomplete_tool_calls] == [(0, "write", {})]
    assert not out.truncated
    # after a value, another call's header is text of that value (only the call close may follow a
    # closer): the value runs to the next closer, and the call fails, never run
    text = (
        HEADER + '<|open|>argument key="a" type="number"<|sep|>1<|close|>argument<|sep|>'
        '<|open|>call tool="read" index="2"<|sep|><|close|>call<|sep|><|close|>tools<|sep|>'
        "<|close|>message<|sep|>"
    )
    out = parse(text, finish_reason="stop", id_factory=counter_ids())
    assert out.tool_calls == () and [(c.name, c.arguments) for c in out.incomplete_tool_calls] == [("write", {})]
    assert not out.truncated and out.content == ""


def test_finish_reason_stop_with_unclosed_message_is_not_truncated() -> None:
    text = "r<|close|>think<|sep|><|open|>response<|sep|>Answer"
    assert not parse(text, finish_reason="stop").truncated
    assert parse(text).truncated
    assert parse(text, finish_reason="length").truncated
    closed = text + "<|close|>message<|sep|>"
    assert not parse(closed, finish_reason="length").truncated  # nothing is missing


def test_duplicate_keys_keep_last_value_and_stream_both() -> None:
    text = (
        HEADER + '<|open|>argument key="a" type="number"<|sep|>1<|close|>argument<|sep|>'
        '<|open|>argument key="a" type="number"<|sep|>2<|close|>argument<|sep|><|close|>call<|sep|>'
    )
    (call,) = parse(text).tool_calls
    assert call.arguments == {"a": 2}
    assert call.arguments_json == '{"a": 1, "a": 2}'
    assert json.loads(call.arguments_json) == call.arguments


def test_json_block_inside_call() -> None:
    # The encoder's fallback for arguments given as unparsable text; an object adds its keys.
    text = HEADER + '<|open|>json type="object"<|sep|>{"x": [1, 2]}<|close|>json<|sep|><|close|>call<|sep|>'
    (call,) = parse(text).tool_calls
    assert (call.arguments, call.arguments_json) == ({"x": [1, 2]}, '{"x": [1, 2]}')
    assert call.error is None
    # Not an object: a failed call with the reason, never a call run without its arguments.
    cases = [
        ("{not json", "its json arguments block is not JSON"),
        ('"{\\"x\\": 1}"', "its json arguments block is a JSON string, not an object"),  # double-encoded
        ("[1, 2]", "its json arguments block is a JSON array, not an object"),
        ("null", "its json arguments block is a JSON null, not an object"),
    ]
    for raw, error in cases:
        bad = HEADER + f'<|open|>json type="object"<|sep|>{raw}<|close|>json<|sep|><|close|>call<|sep|>'
        (call,) = parse(bad).tool_calls
        assert (call.arguments, call.arguments_json, call.error) == ({}, "{}", error)
    # after a typed argument: the argument is kept, the call still fails
    mixed = HEADER + '<|open|>argument key="a" type="number"<|sep|>1<|close|>argument<|sep|>'
    mixed += '<|open|>json type="object"<|sep|>[1, 2]<|close|>json<|sep|><|close|>call<|sep|>'
    (call,) = parse(mixed).tool_calls
    assert (call.arguments, call.error) == ({"a": 1}, "its json arguments block is a JSON array, not an object")


def test_a_value_holding_its_own_closer_is_a_failed_call_read_up_to_the_last_closer() -> None:
    # The one text a text parser cannot tell from structure: the closer spelled inside a value. What
    # follows it (text, not the next value or the call close) shows it was text: the value runs on to
    # the last closer (what the model most likely wrote) and the call fails, never run.
    tail = "<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>"
    arg = '<|open|>argument key="doc" type="string"<|sep|>'
    for value in ("ends with <|close|>argument<|sep|> here", "ends with <|close|>argument<|sep|>",
                  "a <|close|>argument<|sep|>\n<|close|>argument<|sep|> b",
                  "x<|close|>argument<|sep|><|close|>call<|sep|> and more",  # the call's close spelled too
                  "x<|close|>argument<|sep|> <|close|>call<|sep|><|open|>argument key=\"k\" type=\"string\"<|sep|>"):
        out = parse(HEADER + arg + value + tail)
        (call,) = out.tool_calls
        assert call.arguments == {"doc": value} and call.arguments_json == json.dumps({"doc": value}), value
        assert call.error == (
            "argument 'doc' holds the text <|close|>argument<|sep|>, which is what ends a value, so where "
            "the value ends cannot be told. Write that text another way (for example split or escaped) "
            "and call again"
        )
    # a json block holding its own closer: the same
    text = HEADER + '<|open|>json<|sep|>{"doc": "<|close|>json<|sep|>"}<|close|>json<|sep|>' + tail[24:]
    (call,) = parse(text).tool_calls
    assert call.arguments == {"doc": "<|close|>json<|sep|>"}
    assert call.error is not None and call.error.startswith("its json arguments block holds the text <|close|>json")
    # blank text between values is layout, not damage
    ok = HEADER + arg + "fine<|close|>argument<|sep|>\n  " + tail[24:]
    (call,) = parse(ok).tool_calls
    assert (call.arguments, call.error) == ({"doc": "fine"}, None)


# -- result shape ------------------------------------------------------------------------------


def test_ids_are_unique_opaque_and_factory_driven() -> None:
    case = next(c for c in CASES if c["name"] == "parallel_calls_with_content")
    ids = [c.id for _ in range(20) for c in parse(case["text"]).tool_calls]
    assert len(set(ids)) == len(ids) == 40
    assert all(re.fullmatch(r"call_[0-9a-f]{24}", i) for i in ids)
    assert [c.id for c in parse(case["text"], id_factory=counter_ids()).tool_calls] == ["id0", "id1"]


def test_to_message_and_finish_reason() -> None:
    case = next(c for c in CASES if c["name"] == "single_call_typed")
    out = parse(case["text"], id_factory=counter_ids())
    msg = out.to_message()
    assert isinstance(msg, AssistantMessage)
    assert out.finish_reason == "tool_calls"
    assert dump_message(msg) == {
        "role": "assistant",
        "content": "",
        "reasoning_content": "need weather",
        "reasoning": "need weather",
        "tool_calls": [
            {
                "id": "id0",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris", "days": 3}'},
            }
        ],
    }
    assert msg.tool_calls is not None and msg.tool_calls[0].function.parsed_arguments() == {
        "city": "Paris",
        "days": 3,
    }
    plain = parse(CASES[0]["text"])
    assert plain.finish_reason == "stop"
    assert plain.to_message().tool_calls is None
    off = parse("Hi<|close|>message<|sep|>", thinking=False).to_message()
    assert (off.content, off.reasoning_content) == ("Hi", None)
    assert parse("thinking", finish_reason="length").finish_reason == "length"
    truncated_calls = next(c for c in CASES if c["name"] == "truncated_inside_third_call")
    assert parse(truncated_calls["text"], finish_reason="length").finish_reason == "tool_calls"


def test_feed_after_finish_raises_and_finish_is_idempotent() -> None:
    p = StreamParser()
    p.feed("x")
    assert p.finish() == []
    assert p.finish() == []
    with pytest.raises(ParserStateError):
        p.feed("more")
    q = StreamParser()
    q.feed("abc")
    assert q.result().reasoning_content == "abc"  # result() finishes implicitly
    with pytest.raises(ParserStateError):
        q.feed("d")


def test_event_type_literals() -> None:
    assert [cls("x").type for cls in (ReasoningDelta, ContentDelta)] == ["reasoning_delta", "content_delta"]
    assert ToolCallStarted(0, "i", "n").type == "tool_call_started"
    assert ToolCallArgumentsDelta(0, "i", "{").type == "tool_call_arguments_delta"
    assert ToolCallDone(0, "i", "n", {}, "{}").type == "tool_call_done"
    assert ToolCallIncomplete(0, "i", "n").type == "tool_call_incomplete"


def test_exports() -> None:
    names = {
        "ContentDelta", "Event", "IncompleteToolCall", "ParsedOutput", "ParsedToolCall", "ReasoningDelta",
        "StreamParser", "ToolCallArgumentsDelta", "ToolCallDone", "ToolCallIncomplete", "ToolCallStarted",
        "new_tool_call_id", "parse",
    }  # fmt: skip
    assert names <= set(k3.__all__)
    assert all(hasattr(k3, n) for n in k3.__all__)


# -- round trip with the encoder ---------------------------------------------------------------

# Any text without marker spellings (those are the documented ambiguity) and without lone
# surrogates (not encodable text).
PLAIN = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30).filter(
    lambda s: not any(m in s for m in MARKERS)
)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | PLAIN,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(PLAIN, inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(
    thinking=st.booleans(),
    reasoning=PLAIN,
    content=PLAIN,
    calls=st.lists(st.tuples(PLAIN, st.dictionaries(PLAIN, JSON_VALUES, max_size=4)), max_size=3),
    size=st.integers(1, 9),
)
def test_parse_inverts_render_output(
    thinking: bool, reasoning: str, content: str, calls: list[tuple[str, dict[str, Any]]], size: int
) -> None:
    message = {
        "role": "assistant",
        "content": content,
        "reasoning_content": reasoning,
        "tool_calls": [{"id": f"c{i}", "function": {"name": n, "arguments": a}} for i, (n, a) in enumerate(calls)],
    }
    text = k3.render_output(message, thinking=thinking)
    out = parse(text, thinking=thinking, finish_reason="stop")
    assert out.reasoning_content == ((reasoning.strip() and reasoning) or "" if thinking else None)
    assert out.content == content
    assert [(c.name, c.arguments) for c in out.tool_calls] == calls
    assert [c.arguments_json for c in out.tool_calls] == [json.dumps(a, ensure_ascii=False) for _, a in calls]
    assert not out.truncated and not out.incomplete_tool_calls
    streamed, events = stream(chunked(text, size), thinking=thinking, finish_reason="stop")
    assert summary(streamed) == summary(out)
    check_events(streamed, events)
