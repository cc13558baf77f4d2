"""Tool-call values are read exactly as the model wrote them (issue 27, item 1).

Moonshot's encoder writes a string value raw, so marker text can occur inside a value; only the
exact closer ``<|close|>argument<|sep|>`` ends one. :func:`render_output` then :func:`parse` is the
identity on every value that does not hold that closer, for every chunking, through ``parse()``,
``StreamParser``, raw mode (a completions server) and ``ScriptedEngine``. A value that holds the
closer is a failed call (``error``), read up to the last closer, never run.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import anyio
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kimik3 import Client, K3Tokenizer, ScriptedEngine
from kimik3.formats.k3 import ParsedOutput, StreamParser, ToolCallArgumentsDelta, ToolCallDone, parse, render_output
from tests.engines.test_remote_offline import FakeServer, sse
from tests.k3vocab import write_model_dir

CLOSER = "<|close|>argument<|sep|>"
HEAD = 'r<|close|>think<|sep|><|open|>tools<|sep|><|open|>call tool="w" index="1"<|sep|>'
ARG = '<|open|>argument key="v" type="string"<|sep|>'
TAIL = "<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>"

# The issue's inputs, as main parsed them before issue 27 (every one ran with error=None) and now.
ISSUE_INPUTS = [
    # (value, what kimik3 made of it before)
    ("<|close|>arg <| x <|sep", ""),  # SGLang string_contains_marker_prefixes
    ('print("雪")\\path\n\r\t\b\f\x00\x1f<|close|>argumenX &quot;', 'print("雪")\\path\n\r\t\b\f\x00\x1f'),  # SGLang
    ("a<|open|>b", "a"),
    ("x<|sep|>y", "xy"),
    ("tail <|close|>", "tail "),
    ('a <|open|>argument key="z" type="string"<|sep|>zz', "a "),  # and the call ran with an extra z="zz"
]


@pytest.mark.parametrize(("value", "before"), ISSUE_INPUTS, ids=[repr(v[0])[:40] for v in ISSUE_INPUTS])
def test_the_issues_marker_laden_values_are_kept_exactly(value: str, before: str) -> None:
    text = HEAD + ARG + value + TAIL
    for size in (1, 2, 3, 7, 23, len(text)):
        out, _ = stream([text[i : i + size] for i in range(0, len(text), size)])
        ((call_args, error),) = [(c.arguments, c.error) for c in out.tool_calls]
        assert (call_args, error) == ({"v": value}, None), size
    assert value != before


# -- the identity, as a property -------------------------------------------------------------

PIECES = st.sampled_from([
    "<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>", "<|", "|>", "<", "<|sep", "<|clo", "<|close|>argumen",
    "<|close|>argument", "<|close|>argument<|sep", "<|close|>call<|sep|>", "<|close|>tools<|sep|>",
    "<|close|>message<|sep|>", '<|open|>argument key="z" type="string"<|sep|>', '<|open|>call tool="x"<|sep|>',
    "<|close|>json<|sep|>", "<|open|>response<|sep|>", "argument", "call", "雪", "😀", "\\", '"', "\n", "\t", " ",
    "a", "&quot;", "&amp;", "\x00",
])  # fmt: skip
VALUES = st.lists(PIECES | st.text(st.characters(blacklist_categories=("Cs",)), max_size=3), max_size=12).map(
    "".join
).filter(lambda v: CLOSER not in v)
KEYS = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="<|"), min_size=1, max_size=6)
ARGUMENTS = st.dictionaries(KEYS, VALUES | st.lists(VALUES, max_size=2) | st.dictionaries(KEYS, VALUES, max_size=2),
                            max_size=3)


def stream(chunks: list[str], *, thinking: bool = True) -> tuple[ParsedOutput, list[Any]]:
    n = itertools.count()
    parser = StreamParser(thinking, id_factory=lambda: f"id{next(n)}")
    events = [e for c in chunks for e in parser.feed(c)] + parser.finish("stop")
    return parser.result(), events


@st.composite
def chunkings(draw: st.DrawFn, text: str) -> list[str]:
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=30)))
    return [text[a:b] for a, b in itertools.pairwise([0, *cuts, len(text)])]


def rendered(calls: list[dict[str, Any]], thinking: bool) -> str:
    return render_output({"reasoning_content": "plan", "content": "ok", "tool_calls": [
        {"id": f"c{i}", "function": {"name": f"t{i}", "arguments": a}} for i, a in enumerate(calls)]}, thinking=thinking)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(calls=st.lists(ARGUMENTS, min_size=1, max_size=3), thinking=st.booleans(), data=st.data())
def test_render_then_parse_is_the_identity_on_every_value_without_its_closer(
    calls: list[dict[str, Any]], thinking: bool, data: st.DataObject
) -> None:
    text = rendered(calls, thinking)
    whole = parse(text, thinking=thinking, finish_reason="stop")
    assert [c.arguments for c in whole.tool_calls] == calls
    assert [c.arguments_json for c in whole.tool_calls] == [json.dumps(a, ensure_ascii=False) for a in calls]
    assert all(c.error is None for c in whole.tool_calls) and not whole.incomplete_tool_calls
    assert (whole.content, whole.misplaced_tool_calls) == ("ok", ())
    out, events = stream(data.draw(chunkings(text)), thinking=thinking)
    assert [(c.name, c.arguments, c.arguments_json) for c in out.tool_calls] == [
        (c.name, c.arguments, c.arguments_json) for c in whole.tool_calls]
    for done in (e for e in events if isinstance(e, ToolCallDone)):  # streamed the same at every chunking
        assert "".join(e.delta for e in events if isinstance(e, ToolCallArgumentsDelta) and e.index == done.index) \
            == done.arguments_json


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(calls=st.lists(ARGUMENTS, min_size=1, max_size=2), size=st.integers(1, 9))
def test_scripted_engine_gives_every_value_back(calls: list[dict[str, Any]], size: int) -> None:
    text = rendered(calls, True)

    async def main() -> Any:
        return await Client(ScriptedEngine([text], chunk_size=size)).chat([{"role": "user", "content": "x"}])

    out = anyio.run(main)
    assert [json.loads(c.function.arguments) for c in out.message.tool_calls or ()] == calls


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory) -> K3Tokenizer:
    return K3Tokenizer.from_pretrained(write_model_dir(tmp_path_factory.mktemp("k3"), num_base_tokens=163_584))


def raw_engine(server: FakeServer, tok: K3Tokenizer) -> Any:
    """Raw mode: K3 text from a completions endpoint, parsed by kimik3 (the one place this suite
    builds a raw-mode engine)."""
    return server.engine(mode="raw", tokenizer=tok, max_model_len=100_000)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(calls=st.lists(ARGUMENTS, min_size=1, max_size=2), data=st.data())
def test_raw_mode_gives_every_value_back(tok: K3Tokenizer, calls: list[dict[str, Any]], data: st.DataObject) -> None:
    text = rendered(calls, True)
    chunks = data.draw(chunkings(text))

    def respond(request: httpx.Request) -> httpx.Response:
        last = len(chunks) - 1
        return sse([{"object": "text_completion", "choices": [
            {"index": 0, "text": c, "finish_reason": "stop" if i == last else None}]} for i, c in enumerate(chunks)])

    async def main() -> Any:
        return await Client(raw_engine(FakeServer(respond), tok)).chat([{"role": "user", "content": "x"}], max_tokens=99)

    out = anyio.run(main)
    assert [json.loads(c.function.arguments) for c in out.message.tool_calls or ()] == calls


# -- the one ambiguous text: the closer itself inside a value ----------------------------------


@settings(max_examples=200, deadline=None)
@given(before=VALUES, after=VALUES.filter(lambda v: v.strip() != "" and not v.lstrip().startswith("<|")),
       data=st.data())
def test_a_value_holding_the_closer_is_a_failed_call_at_every_chunking(before: str, after: str,
                                                                      data: st.DataObject) -> None:
    value = before + CLOSER + after  # text after the closer: it cannot have ended the value
    text = HEAD + ARG + value + TAIL
    out, _ = stream(data.draw(chunkings(text)))
    (call,) = out.tool_calls
    assert call.arguments == {"v": value} and call.error is not None
    assert call.error.startswith("argument 'v' holds the text <|close|>argument<|sep|>")
    assert out == parse(text, finish_reason="stop", id_factory=lambda: "id0")


def test_lone_surrogates_in_any_argument_are_a_failed_call_not_an_encoding_error() -> None:
    # issue 27, item 4: raw mode = chat mode (a JSON escape "\ud800" decodes to a lone surrogate)
    for arg, error in (
        ('<|open|>argument key="x" type="object"<|sep|>{"x": "\\ud800"}',
         "argument 'x': a string holds a lone UTF-16 surrogate ('\\ud800'), which is not text"),
        ('<|open|>argument key="x" type="array"<|sep|>["a", {"\\udfff": 1}]',
         "argument 'x': a string holds a lone UTF-16 surrogate ('\\udfff'), which is not text"),
        ('<|open|>argument key="x" type="string"<|sep|>a\ud800b',
         "argument 'x': it holds a lone UTF-16 surrogate ('\\ud800'), which is not text"),
        ('<|open|>json type="object"<|sep|>{"x": "\\ud800"}',
         "its json arguments block: a string holds a lone UTF-16 surrogate ('\\ud800'), which is not text"),
    ):
        text = HEAD + arg + ("<|close|>json<|sep|>" + TAIL[len(CLOSER):] if "json" in arg else TAIL)
        (call,) = parse(text).tool_calls
        assert call.error == error, arg
        call.arguments_json.encode("utf-8")  # what a session file and a token count write: no error
    ok = parse(HEAD + '<|open|>argument key="x" type="object"<|sep|>{"x": "\\ud83d\\ude00"}' + TAIL).tool_calls[0]
    assert (ok.arguments, ok.error) == ({"x": {"x": "😀"}}, None)  # a surrogate pair is one character

