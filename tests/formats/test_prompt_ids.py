"""Prompt ids handed to engines (ids_list) and the prompt head encoded once per tool set (issue 44)."""

from __future__ import annotations

import sys

import pytest

from kimik3 import PromptEncoder, TokenizerError, UserMessage
from kimik3.formats.k3 import K3Tokenizer, PromptIds, _codec, default_tokenizer, ids_list
from kimik3.types import ToolSpec

SPEC = ToolSpec.model_validate({"type": "function", "function": {
    "name": "read_file", "description": "Read a file.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}})


def test_ids_list_is_the_ids_in_order_and_a_list_passes_as_it_is() -> None:
    base = _codec._pack_ids([5, 6, 7, 8])
    ids = PromptIds(base, 3, [9, 10])
    assert ids_list(ids) == [5, 6, 7, 9, 10]
    assert ids_list(PromptIds(base, 4, [])) == [5, 6, 7, 8]
    plain = [1, 2]
    assert ids_list(plain) is plain
    assert ids_list((3, 4)) == [3, 4]
    out = ids_list(ids)
    out.append(99)  # the caller's list: the shared prefix is untouched
    assert list(PromptIds(base, 4, [])) == [5, 6, 7, 8] and ids_list(ids) == [5, 6, 7, 9, 10]


def test_the_cached_prefix_holds_three_bytes_an_id_and_reads_back_every_id() -> None:
    ids = [0, 1, 255, 256, 65535, 65536, 163_839, 2**24 - 1]
    packed = _codec._pack_ids(ids)
    assert bytes(packed[:12]) == bytes([0, 0, 0, 1, 0, 0, 255, 0, 0, 0, 1, 0]) or sys.byteorder == "big"
    assert len(packed) == 3 * len(ids)
    view = PromptIds(packed, len(ids), [7])
    assert view.tolist() == [*ids, 7] and list(view) == [*ids, 7]
    assert [view[i] for i in range(len(view))] == [*ids, 7] and view[-2] == 2**24 - 1 and view[2:4] == [255, 256]
    with pytest.raises(TokenizerError, match="16777216 does not fit in 3 bytes"):
        _codec._pack_ids([5, 2**24])


def test_an_encoders_cached_prefix_is_three_bytes_an_id_and_equals_a_full_encode() -> None:
    tok = default_tokenizer()
    enc = PromptEncoder(tok, [SPEC])
    msgs = [UserMessage(content="héllo <|open|> wörld " * 50)]
    ids = enc.encode(msgs, add_generation_prompt=False)
    assert ids == tok.encode_messages(msgs, [SPEC], add_generation_prompt=False)
    assert len(enc._ids) == 3 * len(ids)  # every id committed, 3 bytes each


def test_the_head_is_encoded_once_per_tool_set_and_each_encoder_owns_its_ids() -> None:
    tok = default_tokenizer()
    _codec._HEADERS.clear()
    calls: list[int] = []
    real = tok.encode_segments

    def counting(segments):  # type: ignore[no-untyped-def]
        calls.append(1)
        return real(segments)

    tok.encode_segments = counting  # type: ignore[method-assign]
    try:
        a = PromptEncoder(tok, [SPEC])
        heads = len(calls)
        b = PromptEncoder(tok, [SPEC])
        assert len(calls) == heads  # the second encoder's head came from the cache
        PromptEncoder(tok, [SPEC], thinking_effort="low")
        assert len(calls) == heads + 1  # another head: encoded
    finally:
        del tok.encode_segments
    msgs = [UserMessage(content="hi")]
    full = tok.encode_messages(msgs, [SPEC])
    assert a.encode(msgs) == full and b.encode(msgs) == full
    assert a.encode([*msgs, UserMessage(content="more")]) == tok.encode_messages([*msgs, UserMessage(content="more")], [SPEC])
    assert b.encode(msgs) == full  # a's growth did not reach b


def test_a_new_tokenizer_never_reuses_another_tokenizers_head(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from tests.k3vocab import write_model_dir

    tiny = K3Tokenizer.from_pretrained(write_model_dir(tmp_path))
    real = default_tokenizer()
    a, b = PromptEncoder(real, [SPEC]), PromptEncoder(tiny, [SPEC])
    msgs = [UserMessage(content="hi")]
    assert a.encode(msgs) == real.encode_messages(msgs, [SPEC])
    assert b.encode(msgs) == tiny.encode_messages(msgs, [SPEC])
