"""K3's special tokens as data: name, offset from ``num_base_tokens``, HF ``special`` flag.

The one place where the tiny model's special-token layout is written down; the tokenizer files in
``models/k3-tiny`` are generated from it (``build_tokenizer.py``) and every reader (kimik3's
``K3Tokenizer``, the HF tokenizer class, vLLM) takes names and ids from ``tokenizer_config.json``.

Offsets follow the real K3 tokenizer (k3-wire-format.md §1: 163584 + k). ``<|kimi_image_placeholder|>``
at +22 is this project's choice: the spec does not give its id.
"""

from __future__ import annotations

NUM_RESERVED = 256

# offset -> (content, special flag). open/close/sep are special: false, as in the real checkpoint.
SPECIALS: dict[int, tuple[str, bool]] = {
    0: ("[BOS]", True),
    1: ("[EOS]", True),
    2: ("<|end_of_msg|>", True),
    3: ("<|open|>", False),
    4: ("<|close|>", False),
    5: ("<|sep|>", False),
    18: ("<|media_begin|>", True),
    19: ("<|media_content|>", True),
    20: ("<|media_end|>", True),
    21: ("<|media_pad|>", True),
    22: ("<|kimi_image_placeholder|>", True),
    254: ("[UNK]", True),
    255: ("[PAD]", True),
}

BOS, EOS, END_OF_MSG, UNK, PAD = "[BOS]", "[EOS]", "<|end_of_msg|>", "[UNK]", "[PAD]"


def special_ids(num_base_tokens: int) -> dict[str, int]:
    """Name -> id of the named specials for a base vocabulary of ``num_base_tokens``."""
    return {name: num_base_tokens + off for off, (name, _) in SPECIALS.items()}
