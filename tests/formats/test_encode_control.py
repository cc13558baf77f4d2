"""``K3Tokenizer.encode_control`` cuts raw K3 text at its special tokens itself (issue 44: tiktoken
converted its 256-name set on every call) and gives exactly tiktoken's
``encode(text, allowed_special="all")`` ids: tags that are specials, text that only looks like
one (``<|open``, ``<|nope|>``, ``[BOS``), tags next to and inside near-misses, any text between."""

from __future__ import annotations

import random

from kimik3.formats.k3 import K3Tokenizer, default_tokenizer, render_output

NEAR = ["<|open", "<|open|", "|>", "<|", "<|nope|>", "<||>", "[BOS", "BOS]", "[bos]", "[]", "<|a<|", "[<", "<[",
        "<|[BOS]|>", "[<|sep|>]", "[[EOS]]", "<<|close|>>", "<|open|open|>"]
TEXT = ["hello", " world", "\n", "  ", "函数", "😀", "a|b", "x>y", "{\"k\": 1}", "[1, 2]", "<b>", "\t\t", "é"]


def reference(tok: K3Tokenizer, text: str) -> list[int]:
    return tok._enc.encode(text, allowed_special="all")


def test_raw_answers_and_tags_mixed_with_near_misses_give_tiktokens_ids() -> None:
    tok = default_tokenizer()
    specials = sorted(tok.special_tokens)
    answer = render_output({"reasoning_content": "plan", "content": "ok",
                            "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": {"a": "<|sep|>"}}}]})
    assert tok.encode_control(answer) == reference(tok, answer)
    rng = random.Random(44)
    for _ in range(2000):
        pieces = [rng.choice((specials, NEAR, TEXT)[rng.randrange(3)]) for _ in range(rng.randrange(1, 12))]
        text = "".join(pieces)
        assert tok.encode_control(text) == reference(tok, text), text


def test_golden_ids_of_tags_and_text() -> None:
    tok = default_tokenizer()
    open_, bos = tok.special_tokens["<|open|>"], tok.special_tokens["[BOS]"]
    assert tok.encode_control("<|open|>") == [open_]
    assert tok.encode_control("[BOS]<|open|>") == [bos, open_]
    assert tok.encode_control("hi<|open|>") == [*tok.encode_text("hi"), open_]
    assert tok.encode_control("<|nope|>") == tok.encode_text("<|nope|>")  # not a special: text


def test_a_vocabulary_with_other_special_shapes_takes_tiktokens_path() -> None:
    tok = K3Tokenizer(mergeable_ranks={bytes([i]): i for i in range(256)}, special_tokens={"<|open|>": 256, "BOS": 257})
    assert tok.encode_control("xBOSy<|open|>") == [ord("x"), 257, ord("y"), 256]
