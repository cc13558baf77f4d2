"""The tokenizer's memo of short segments stays bounded over a long history (issue 44 point 2:
memory of a 1M-token run) and encodes the same ids after it is emptied."""

from __future__ import annotations

from kimik3.formats.k3 import _tokenizer as tokenizer_module
from kimik3.formats.k3 import default_tokenizer


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
