"""Memory of a long history (issue 44 point 2): messages given the same fields share one
``model_fields_set``; pydantic's semantics of that set are unchanged; the tokenizer's memo of
short segments stays bounded."""

from __future__ import annotations

import pickle

from kimik3.formats.k3 import _tokenizer as tokenizer_module
from kimik3.formats.k3 import default_tokenizer
from kimik3.types import AssistantMessage, ToolMessage, to_message


def test_messages_given_the_same_fields_share_one_fields_set() -> None:
    a = ToolMessage(role="tool", content="x", tool_call_id="c1")
    b = to_message({"role": "tool", "content": "y", "tool_call_id": "c2"})
    assert a.__pydantic_fields_set__ is b.__pydantic_fields_set__
    assert a.model_fields_set == {"role", "content", "tool_call_id"}
    calls = [AssistantMessage.model_validate({"role": "assistant", "tool_calls": [
        {"id": f"c{i}", "function": {"name": "f", "arguments": {"i": i}}}]}) for i in range(2)]  # fmt: skip
    assert calls[0].tool_calls[0].function.__pydantic_fields_set__ is calls[1].tool_calls[0].function.__pydantic_fields_set__  # type: ignore[index]


def test_assigning_a_field_or_copying_with_update_leaves_the_others_set_alone() -> None:
    a = ToolMessage(content="x", tool_call_id="c1")
    b = ToolMessage(content="y", tool_call_id="c2")
    a.name = "read_file"
    assert a.model_fields_set == {"content", "tool_call_id", "name"}
    assert b.model_fields_set == {"content", "tool_call_id"}
    assert a.model_dump(exclude_unset=True) == {"content": "x", "tool_call_id": "c1", "name": "read_file"}
    assert b.model_dump(exclude_unset=True) == {"content": "y", "tool_call_id": "c2"}
    c = b.model_copy(update={"name": "grep"})
    assert c.model_fields_set == {"content", "tool_call_id", "name"}
    assert b.model_fields_set == {"content", "tool_call_id"}
    assert ToolMessage(content="z", tool_call_id="c3").model_fields_set == {"content", "tool_call_id"}
    assert b.model_dump_json(exclude_unset=True) == '{"content":"y","tool_call_id":"c2"}'
    d = pickle.loads(pickle.dumps(b))
    d.name = "ls"
    assert (d.model_fields_set, b.model_fields_set) == ({"content", "tool_call_id", "name"}, {"content", "tool_call_id"})


def test_the_memo_of_short_segments_stays_bounded() -> None:
    tok = default_tokenizer()
    bound = tokenizer_module._MEMO_ENTRIES
    tok.encode_messages([{"role": "user", "content": "hi"}])
    for i in range(3 * bound):  # unique short texts, as each turn's call ids and paths are
        tok.encode_messages([{"role": "assistant", "content": f"module {i}"}])
        assert len(tok._small) <= bound
    expected = tok.encode_messages([{"role": "assistant", "content": "module 7"}])
    tok._small.clear()
    assert tok.encode_messages([{"role": "assistant", "content": "module 7"}]) == expected


def test_the_shared_fields_sets_stay_bounded_under_inputs_with_extra_keys() -> None:
    from kimik3.types import _messages

    many = [to_message({"role": "user", "content": "x", f"extra_{i}": i}) for i in range(2 * _messages._MAX_FIELDS_SETS)]
    assert len(_messages._FIELDS_SETS) == _messages._MAX_FIELDS_SETS
    assert many[-1].model_fields_set == {"role", "content", f"extra_{2 * _messages._MAX_FIELDS_SETS - 1}"}
    many[-1].name = "n"  # its own set: no other message changes
    assert many[-2].model_fields_set == {"role", "content", f"extra_{2 * _messages._MAX_FIELDS_SETS - 2}"}


def test_messages_without_extra_keys_share_one_empty_extra_and_an_extra_set_later_stays_its_own() -> None:
    a = ToolMessage(content="x", tool_call_id="c1")
    b = ToolMessage(content="y", tool_call_id="c2")
    assert a.model_extra is b.model_extra and a.model_extra == {}
    a.trace_id = "t1"  # an extra attribute (extra="allow")
    assert (a.model_extra, b.model_extra, ToolMessage(content="z").model_extra) == ({"trace_id": "t1"}, {}, {})
    assert a.model_dump(exclude_unset=True) == {"content": "x", "tool_call_id": "c1", "trace_id": "t1"}
    c = b.model_copy(update={"trace_id": "t2"})
    assert (c.model_extra, b.model_extra) == ({"trace_id": "t2"}, {})
    assert to_message({"role": "tool", "content": "w", "seq": 3}).model_extra == {"seq": 3}
