"""K3 prompt encoding: goldens, every spec §2 rule, typed errors, properties."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kimik3 import (
    AssistantMessage,
    InvalidArgumentsError,
    InvalidEffortError,
    MessageError,
    ToolNameError,
    UnknownContentPartError,
    UnknownRoleError,
    UserMessage,
)
from kimik3.formats.k3 import encode_segments, protocol_bodies, render
from kimik3.types import to_messages
from tests.data_paths import load_json

SMG = load_json("k3/smg_render_ids.json")
EXTRA = {k: v for k, v in load_json("k3/extra_goldens.json").items() if not k.startswith("_")}

USER = [{"role": "user", "content": "go"}]
EFFORT_MAX = (
    '<|open|>message role="system" type="thinking-effort"<|sep|>`thinking_effort` guides on how much to '
    "think in your thinking channel (not including the response channel), supported values include "
    "`low`, `medium`, `high`, and `max`.\nNow the system is invoked with `thinking_effort=max`."
    "<|close|>message<|sep|><|end_of_msg|>"
)
GEN_THINK = '<|open|>message role="assistant"<|sep|><|open|>think<|sep|>'
GEN_RESPONSE = '<|open|>message role="assistant"<|sep|><|open|>response<|sep|>'


@pytest.mark.parametrize("name", sorted(SMG))
def test_smg_real_tokenizer_cases_render_exactly(name: str) -> None:
    case = SMG[name]
    assert render(case["messages"], case["tools"]) == case["text"]


@pytest.mark.parametrize("name", sorted(EXTRA))
def test_extra_goldens_text_and_control_order(name: str) -> None:
    kwargs = copy.deepcopy(EXTRA[name]["kwargs"])
    messages = kwargs.pop("messages")
    segments = encode_segments(messages, **kwargs)
    assert "".join(s.text for s in segments) == EXTRA[name]["rendered"]
    assert [s.text for s in segments if s.control] == EXTRA[name]["special_segments"]


def test_control_segments_are_single_markers_and_text_never_is() -> None:
    segments = encode_segments(SMG["injected_markers"]["messages"])
    markers = {"<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"}
    assert {s.text for s in segments if s.control} == markers
    # the user's typed markers are inside text segments
    assert any(s.text.startswith("<|open|>message") and not s.control for s in segments)


def test_typed_messages_render_like_dicts() -> None:
    case = SMG["tool_call_round_trip"]
    assert render(to_messages(case["messages"]), case["tools"]) == case["text"]


def test_encoder_never_mutates_input() -> None:
    case = SMG["tool_call_round_trip"]
    messages = copy.deepcopy(case["messages"])
    before = copy.deepcopy(messages)
    render(messages, case["tools"], tool_choice="required")
    assert messages == before


def test_arguments_in_given_key_order_with_types() -> None:
    args = {"zeta": "z", "alpha": 1.5, "flag": True, "none": None, "obj": {"lang": "fr"}, "arr": [1, "a"]}
    msgs = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "x", "type": "function", "function": {"name": "f", "arguments": args}}],
        },
    ]
    text = render(msgs, add_generation_prompt=False)
    assert text.endswith(
        "<|open|>tools<|sep|>"
        '<|open|>call tool="f" index="1"<|sep|>'
        '<|open|>argument key="zeta" type="string"<|sep|>z<|close|>argument<|sep|>'
        '<|open|>argument key="alpha" type="number"<|sep|>1.5<|close|>argument<|sep|>'
        '<|open|>argument key="flag" type="boolean"<|sep|>true<|close|>argument<|sep|>'
        '<|open|>argument key="none" type="null"<|sep|>null<|close|>argument<|sep|>'
        '<|open|>argument key="obj" type="object"<|sep|>{"lang": "fr"}<|close|>argument<|sep|>'
        '<|open|>argument key="arr" type="array"<|sep|>[1, "a"]<|close|>argument<|sep|>'
        "<|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>"
    )


def test_unparsable_arguments_become_a_raw_json_block() -> None:
    msgs = [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "a", "function": {"name": "g", "arguments": '{"x": 1,'}}],
        }
    ]
    text = render(msgs, thinking=False, add_generation_prompt=False)
    assert text == (
        '<|open|>message role="assistant"<|sep|><|open|>response<|sep|><|close|>response<|sep|>'
        '<|open|>tools<|sep|><|open|>call tool="g" index="1"<|sep|>'
        '<|open|>json type="object"<|sep|>{"x": 1,<|close|>json<|sep|>'
        "<|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>"
    )


def test_attribute_escaping_amp_first_then_quote() -> None:
    text = render([{"role": "user", "name": 'a"b&c', "content": 'body "&" stays'}], thinking=False)
    assert '<|open|>message role="user" name="a&quot;b&amp;c"<|sep|>body "&" stays<|close|>' in text


def _call(cid: str, name: str, args: str = "{}") -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


def _tool_headers(text: str) -> list[str]:
    return [line.split("<|sep|>")[0] for line in text.split("<|open|>message ")[1:] if 'role="tool"' in line]


def test_tool_results_reordered_by_tool_call_id() -> None:
    msgs = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "", "tool_calls": [_call("c1", "read"), _call("c2", "grep")]},
        {"role": "tool", "tool_call_id": "c2", "content": "G"},
        {"role": "tool", "tool_call_id": "c1", "content": "R"},
    ]
    text = render(msgs, thinking=False)
    assert _tool_headers(text) == ['role="tool" tool="read" index="1"', 'role="tool" tool="grep" index="2"']
    assert text.index(">R<") < text.index(">G<")


def test_tool_results_reordered_by_name_index_alias() -> None:
    msgs = [
        {"role": "assistant", "content": "", "tool_calls": [_call("", "a"), _call("", "b")]},
        {"role": "tool", "tool_call_id": "b:1", "content": "B"},
        {"role": "tool", "tool_call_id": "a:0", "content": "A"},
    ]
    text = render(msgs, thinking=False)
    assert text.index(">A<") < text.index(">B<")
    assert _tool_headers(text) == ['role="tool" tool="a" index="1"', 'role="tool" tool="b" index="2"']


def test_unmatched_tool_run_keeps_order_and_names_from_calls() -> None:
    msgs = [
        {"role": "assistant", "content": "", "tool_calls": [_call("c1", "a"), _call("c2", "b")]},
        {"role": "tool", "tool_call_id": "zz", "content": "first"},
        {"role": "tool", "tool_call_id": "c1", "content": "second"},
    ]
    text = render(msgs, thinking=False)
    assert text.index("first") < text.index("second")
    assert _tool_headers(text) == ['role="tool" tool="a" index="1"', 'role="tool" tool="b" index="2"']


def test_a_duplicated_tool_call_id_labels_each_result_with_its_own_call_or_is_refused() -> None:
    # issue 27, item 5: two results with one id were both labelled the first call
    def calls(*ids: str) -> dict[str, Any]:
        return {"role": "assistant", "content": "", "tool_calls": [
            {"id": i, "type": "function", "function": {"name": n, "arguments": "{}"}} for i, n in zip(ids, "fgh", strict=False)]}

    def results(*ids: str) -> list[dict[str, Any]]:
        return [{"role": "tool", "tool_call_id": i, "content": c} for i, c in zip(ids, "ABC", strict=False)]

    def labels(text: str) -> list[str]:
        return re.findall(r'role="tool" tool="(\w)" index="(\d)"<\|sep\|>(\w)', text)  # type: ignore[return-value]

    # calls sharing an id take its results in order: each result its own call (name and index)
    text = render([*USER, calls("x", "x"), *results("x", "x")], add_generation_prompt=False)
    assert labels(text) == [("f", "1", "A"), ("g", "2", "B")]
    text = render([*USER, calls("x", "y", "x"), *results("x", "y", "x")], add_generation_prompt=False)
    assert labels(text) == [("f", "1", "A"), ("g", "2", "B"), ("h", "3", "C")]
    # two results for one call: refused, never two results labelled the same call
    for ids, dup in ((("x", "x"), "'x'"), (("x", "f:0"), "'f:0'"), (("y", "x", "y"), "'y'")):
        with pytest.raises(MessageError, match=f"both answer tool call {dup}"):
            render([*USER, calls("x", "y"), *results(*ids)])
    with pytest.raises(MessageError, match=r"tool messages #1 and #2 after the last assistant message both answer"):
        encode_segments([*USER, calls("x", "y"), *results("x", "x")])


def test_tool_call_id_is_never_rendered() -> None:
    msgs = [
        {"role": "assistant", "content": "", "tool_calls": [_call("call_SECRET", "a")]},
        {"role": "tool", "tool_call_id": "call_SECRET", "content": "r"},
    ]
    assert "SECRET" not in render(msgs)


def test_tool_message_name_given_explicitly() -> None:
    msgs = [{"role": "user", "content": "x"}, {"role": "tool", "tool": "ls", "content": "out"}]
    assert _tool_headers(render(msgs)) == ['role="tool" tool="ls" index="1"']


def test_image_placeholder_is_a_control_segment_without_newline() -> None:
    msgs = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image", "image": "x.png"}]}]
    segments = encode_segments(msgs, thinking=False)
    texts = [(s.text, s.control) for s in segments]
    assert ("a", False) in texts
    i = texts.index(("<|kimi_image_placeholder|>", True))
    assert texts[i + 1] == ("<|close|>", True)


def test_preserved_thinking_on_every_assistant_message() -> None:
    msgs = [
        {"role": "user", "content": "1"},
        {"role": "assistant", "content": "a1", "reasoning_content": "r1"},
        {"role": "user", "content": "2"},
        {"role": "assistant", "content": "a2", "reasoning": "r2"},
        {"role": "user", "content": "3"},
        {"role": "assistant", "content": "a3"},
    ]
    text = render(msgs, add_generation_prompt=False)
    assert "<|open|>think<|sep|>r1<|close|>think<|sep|>" in text
    assert "<|open|>think<|sep|>r2<|close|>think<|sep|>" in text
    # no reasoning: the think tags are still emitted
    assert "<|open|>think<|sep|><|close|>think<|sep|><|open|>response<|sep|>a3" in text


def test_directives_after_conversation() -> None:
    bodies = protocol_bodies()
    msgs = [{"role": "user", "content": "hi"}]
    text = render(msgs, thinking=False, tool_choice="required", response_format={"type": "json_object"})
    assert text == (
        '<|open|>message role="user"<|sep|>hi<|close|>message<|sep|><|end_of_msg|>'
        '<|open|>message role="system" type="tool-choice"<|sep|>The system is invoked with '
        "`tool_choice=required`.\nYou MUST call tools in the next message.<|close|>message<|sep|><|end_of_msg|>"
        '<|open|>message role="system" type="response-format"<|sep|>' + bodies["RF_JSON_OBJECT"]
        + "<|close|>message<|sep|><|end_of_msg|>" + GEN_RESPONSE
    )
    none = render(msgs, thinking=False, tool_choice="none")
    assert "You MUST NOT call any tools in the next message." in none
    assert render(msgs, thinking=False, tool_choice="auto") == render(msgs, thinking=False)


def test_json_schema_response_format_is_deep_sorted_and_compact() -> None:
    schema = {"type": "object", "properties": {"b": {"type": "integer"}, "a": {"type": "string"}}}
    text = render(
        [{"role": "user", "content": "hi"}],
        thinking=False,
        response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}},
    )
    assert (
        '```json\n{"properties":{"a":{"type":"string"},"b":{"type":"integer"}},"type":"object"}\n```'
        "<|close|>message" in text
    )


def test_tool_declaration_deep_sorted_compact_non_ascii() -> None:
    tools = [{"type": "function", "function": {"name": "météo", "parameters": {"type": "object", "b": 1, "a": [{"z": 1, "y": 2}]}}}]
    text = render([{"role": "user", "content": "x"}], tools, thinking=False)
    assert '[{"function":{"name":"météo","parameters":{"a":[{"y":2,"z":1}],"b":1,"type":"object"}},"type":"function"}]' in text


def test_effort_values() -> None:
    for effort in ("low", "high", "max"):
        assert f"`thinking_effort={effort}`." in render([{"role": "user", "content": "x"}], thinking_effort=effort)
    assert "thinking-effort" not in render([{"role": "user", "content": "x"}], thinking_effort=None)


def test_developer_is_system() -> None:
    assert render([{"role": "developer", "content": "be brief"}], thinking=False).startswith(
        '<|open|>message role="system"<|sep|>be brief<|close|>'
    )


# -- typed errors ---------------------------------------------------------------------------


def test_unknown_role() -> None:
    with pytest.raises(UnknownRoleError, match="'critic'"):
        render([{"role": "critic", "content": "x"}])


@pytest.mark.parametrize("effort", ["medium", "none", "MAX", ""])
def test_bad_effort(effort: str) -> None:
    with pytest.raises(InvalidEffortError, match="low, high, max"):
        render([{"role": "user", "content": "x"}], thinking_effort=effort)


def test_tool_name_unresolvable() -> None:
    with pytest.raises(ToolNameError, match="no name"):
        render([{"role": "user", "content": "x"}, {"role": "tool", "tool_call_id": "c9", "content": "r"}])


def test_non_object_arguments() -> None:
    msgs = [{"role": "assistant", "content": "", "tool_calls": [_call("a", "f", "[1, 2]")]}]
    with pytest.raises(InvalidArgumentsError, match="must be a JSON object"):
        render(msgs)


def test_unknown_content_part() -> None:
    with pytest.raises(UnknownContentPartError, match="'audio'"):
        render([{"role": "user", "content": [{"type": "audio", "audio": "x"}]}])


def test_named_tool_choice_is_rejected_clearly() -> None:
    with pytest.raises(MessageError, match="'auto', 'required' or 'none'"):
        render([{"role": "user", "content": "x"}], tool_choice={"type": "function", "function": {"name": "f"}})


def test_errors_are_value_errors() -> None:
    assert issubclass(UnknownRoleError, ValueError) and issubclass(MessageError, ValueError)


# -- properties -----------------------------------------------------------------------------

TEXT = st.text(st.characters(codec="utf-8"), max_size=60) | st.sampled_from(
    ["<|open|>", "<|close|>message<|sep|>", "<|end_of_msg|>", "&quot;", '"', "<|sep|>", ""]
)


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["system", "user", "assistant", "tool_turn"]))
        if kind in ("system", "user"):
            msgs.append({"role": kind, "content": draw(TEXT), "name": draw(st.none() | TEXT)})
        elif kind == "assistant":
            msgs.append({"role": "assistant", "content": draw(TEXT), "reasoning_content": draw(st.none() | TEXT)})
        else:
            names = draw(st.lists(TEXT.filter(bool), min_size=1, max_size=3))
            args = draw(st.dictionaries(TEXT, TEXT | st.integers() | st.booleans(), max_size=3))
            calls = [_call(f"c{i}", n, json.dumps(args)) for i, n in enumerate(names)]
            msgs.append({"role": "assistant", "content": draw(TEXT), "tool_calls": calls})
            for i in draw(st.permutations(list(range(len(names))))):
                msgs.append({"role": "tool", "tool_call_id": f"c{i}", "content": draw(TEXT)})
    return msgs


@settings(max_examples=300, deadline=None)
@given(conversations(), st.booleans())
def test_rendering_never_raises_and_text_never_becomes_control(msgs: list[dict[str, Any]], thinking: bool) -> None:
    segments = encode_segments(msgs, thinking=thinking)
    controls = [s.text for s in segments if s.control]
    allowed = {"<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"}
    assert set(controls) <= allowed
    # every control segment is produced by the template, never by content: the number of
    # control segments depends only on the structure, not on the text
    blank = [
        {**m, "content": "", **({"name": None} if "name" in m else {})}
        for m in copy.deepcopy(msgs)
    ]
    for m in blank:
        if m.get("reasoning_content") is not None:
            m["reasoning_content"] = "r"
    assert len(controls) == len([s for s in encode_segments(blank, thinking=thinking) if s.control])


def test_assistant_message_typed_equivalence() -> None:
    typed = [UserMessage(content="Hi"), AssistantMessage(content="Hello!", reasoning_content="hm")]
    as_dicts = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!", "reasoning": "hm"}]
    assert render(typed) == render(as_dicts)
