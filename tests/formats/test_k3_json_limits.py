"""One set of JSON limits for the K3 parser and encoder: what the parser accepts, the encoder
renders (and re-parses to the same call); beyond the limits, a reason instead of a crash."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kimik3 import JSONLimitError
from kimik3.formats.k3 import (
    JSON_MAX_DEPTH,
    JSON_MAX_INT_DIGITS,
    ToolCallDone,
    check_json_limits,
    parse,
    render,
    render_output,
    safe_loads,
)
from kimik3.types import AssistantMessage, UserMessage


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(
    "text",
    [nested(JSON_MAX_DEPTH), "9" * JSON_MAX_INT_DIGITS, "-" + "9" * JSON_MAX_INT_DIGITS, "1.7e308", "-1e-999",
     '{"a": "[[[[[[", "b": "\\"[[["}', '{"k": ' * 100 + "1" + "}" * 100],
)
def test_inside_the_limits_loads_and_dumps_back(text: str) -> None:
    value = safe_loads(text)
    assert json.loads(json.dumps(value)) == value == json.loads(text)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (nested(JSON_MAX_DEPTH + 1), "nested deeper than 128 arrays/objects"),
        (nested(100_000), "nested deeper than 128 arrays/objects"),  # never a RecursionError
        ('{"a": ' * 3000 + "1" + "}" * 3000, "nested deeper than 128 arrays/objects"),
        ("9" * (JSON_MAX_INT_DIGITS + 1), "an integer has more than 640 digits (99999999999999999999...)"),
        ("[" + "1" * 5000 + "]", "an integer has more than 640 digits (11111111111111111111...)"),
        ('{"x": 1e999}', "the number 1e999 is out of range (it would be inf)"),
        ("-1e999", "the number -1e999 is out of range (it would be -inf)"),
        ("NaN", "NaN is not a JSON number"),
        ('{"x": -Infinity}', "-Infinity is not a JSON number"),
    ],
)
def test_beyond_the_limits_is_a_json_limit_error_with_the_reason(text: str, reason: str) -> None:
    with pytest.raises(JSONLimitError) as e:
        safe_loads(text)
    assert str(e.value) == reason
    assert isinstance(e.value, ValueError)


def test_safe_loads_depth_does_not_depend_on_the_call_stack() -> None:
    def at_depth(n: int) -> Any:
        return safe_loads(nested(JSON_MAX_DEPTH)) if n == 0 else at_depth(n - 1)

    assert at_depth(sys.getrecursionlimit() - 300) == safe_loads(nested(JSON_MAX_DEPTH))


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ({"a": {1, 2}}, "a set value ({1, 2}) is not JSON data"),
        ({"a": b"x"}, "a bytes value (b'x') is not JSON data"),
        ({2: "a"}, "an object key is int 2, not a string"),
        ([float("nan")], "the number nan is not finite; JSON has no such number"),
        ({"a": -(10**JSON_MAX_INT_DIGITS)}, "an integer has more than 640 digits"),
        (json.loads(nested(JSON_MAX_DEPTH + 1)), "nested deeper than 128 arrays/objects"),
    ],
)
def test_check_json_limits_refuses_what_json_cannot_hold(value: Any, reason: str) -> None:
    with pytest.raises(JSONLimitError) as e:
        check_json_limits(value)
    assert str(e.value) == reason
    check_json_limits({"a": (1, 2.5, None, True, "s"), "b": [10 ** (JSON_MAX_INT_DIGITS - 1)]})


def one_call(arguments: str) -> str:
    return render_output({"content": "", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": arguments}}]})


@pytest.mark.parametrize(
    "arguments",
    [
        json.dumps({"a": json.loads(nested(JSON_MAX_DEPTH - 1)), "n": int("7" * JSON_MAX_INT_DIGITS)}),
        json.dumps({"a": 1.5e308, "b": -1e-300, "s": "[[" * 200}),
    ],
)
def test_what_the_parser_accepts_the_encoder_renders_as_arguments_and_reparses(arguments: str) -> None:
    text = one_call(arguments)
    assert '<|open|>argument key="a"' in text  # rendered as arguments, not as a raw block
    (call,) = parse(text).tool_calls
    assert call.error is None and call.arguments_json == arguments
    history = [UserMessage(content="x"), parse(text).to_message()]
    assert parse(one_call(call.arguments_json)).tool_calls[0].arguments == json.loads(arguments)
    render(history)


@pytest.mark.parametrize(
    ("raw", "error", "arguments_json"),
    [
        ("1e999", "argument 'a': the number 1e999 is out of range (it would be inf)", '{"a": "1e999"}'),
        (nested(JSON_MAX_DEPTH), "argument 'a': nested deeper than 128 arrays/objects",
         json.dumps({"a": nested(JSON_MAX_DEPTH)})),  # 128 deep inside the arguments object is 129
        ("1" * 5000, "argument 'a': an integer has more than 640 digits (11111111111111111111...)",
         json.dumps({"a": "1" * 5000})),
    ],
)
def test_a_value_beyond_the_limits_keeps_its_raw_text_and_the_call_carries_the_reason(
    raw: str, error: str, arguments_json: str
) -> None:
    text = (f'<|open|>tools<|sep|><|open|>call tool="f" index="1"<|sep|><|open|>argument key="a" type="number"<|sep|>'
            f"{raw}<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>")
    parsed = parse(text, thinking=False)
    (call,) = parsed.tool_calls
    assert (call.error, call.arguments_json) == (error, arguments_json)
    assert "Infinity" not in call.arguments_json and json.loads(call.arguments_json) == call.arguments
    assert [e.error for e in _events(text) if isinstance(e, ToolCallDone)] == [error]
    # the history that holds it renders, now and on every later turn
    prompt = render([UserMessage(content="x"), parsed.to_message(), UserMessage(content="y")])
    assert f'<|open|>argument key="a" type="string"<|sep|>{raw}<|close|>argument<|sep|>' in prompt


def _events(text: str) -> list[Any]:
    from kimik3.formats.k3 import StreamParser

    p = StreamParser(thinking=False)
    return [*p.feed(text), *p.finish()]


@pytest.mark.parametrize(
    "arguments",
    ['{"x": 1e999}', '{"x": ' + "1" * 5000 + "}", '{"x": ' + nested(972) + "}", '{"x": ' + nested(5000) + "}"],
)
def test_the_encoder_renders_arguments_json_beyond_the_limits_as_a_raw_block(arguments: str) -> None:
    msg = AssistantMessage(content="", tool_calls=[{"id": "c", "function": {"name": "f", "arguments": arguments}}])
    prompt = render([UserMessage(content="x"), msg])
    assert f'<|open|>json type="object"<|sep|>{arguments}<|close|>json<|sep|>' in prompt
    with pytest.raises(JSONLimitError):
        msg.tool_calls[0].function.parsed_arguments()  # type: ignore[index]


def _deep(depth: int, leaf: Any) -> Any:
    for _ in range(depth):
        leaf = [leaf]
    return leaf


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(10**700), max_value=10**700)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(
    value=st.dictionaries(st.text(min_size=1, max_size=4), json_values, max_size=3),
    depth=st.sampled_from([0, 1, JSON_MAX_DEPTH - 2, JSON_MAX_DEPTH - 1, JSON_MAX_DEPTH, 300, 1000]),
)
def test_any_arguments_text_renders_and_parses_into_a_call_the_encoder_renders_again(value: Any, depth: int) -> None:
    """Arguments text of any size or depth (Infinity and NaN included, as Python writes them):
    rendering never raises, and what the parser makes of it is inside the limits and a fixed
    point of render -> parse."""
    arguments = json.dumps({"v": _deep(depth, value)})
    text = one_call(arguments)
    (call,) = parse(text, thinking=False).tool_calls or (None,)
    if call is None:  # a json block that is not an object carries no call arguments: nothing to check
        return
    safe_loads(call.arguments_json)  # inside the limits, so the encoder renders it as arguments
    again = parse(one_call(call.arguments_json), thinking=False).tool_calls[0]
    assert (again.arguments_json, again.arguments) == (call.arguments_json, call.arguments)
    render([UserMessage(content="x"), parse(text, thinking=False).to_message()])
