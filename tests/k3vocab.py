"""Build small K3-format tokenizer directories for tests (the real 163,840-entry vocab is not
available here). The file formats are K3's: ``tiktoken.model`` lines ``<base64 bytes> <rank>``,
``tokenizer_config.json`` with ``added_tokens_decoder``."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from pathlib import Path

# K3's special names and their offsets from num_base_tokens (docs/k3-format.md § Tokens).
K3_SPECIALS = {
    0: "[BOS]",
    1: "[EOS]",
    2: "<|end_of_msg|>",
    3: "<|open|>",
    4: "<|close|>",
    5: "<|sep|>",
    18: "<|media_begin|>",
    19: "<|media_content|>",
    20: "<|media_end|>",
    21: "<|media_pad|>",
    22: "<|kimi_image_placeholder|>",
    254: "[UNK]",
    255: "[PAD]",
}

DEFAULT_WORDS = [
    "message", " role", '="', "system", "user", "assistant", "tool", " type", " name", " index",
    "think", "response", "tools", "call", "argument", " key", "thinking", "-effort", "Hello",
    " world", "Hi", "open", "close", "sep", "<|", "|>", "ab", "bc", "abc", "cd", "bcd", "abcd",
]


def _prefix_closed(words: Iterable[str]) -> list[bytes]:
    """All single bytes, then every prefix of every word (so BPE can reach each word by merging
    left to right), shortest first."""
    out: list[bytes] = [bytes([b]) for b in range(256)]
    seen = set(out)
    extra: set[bytes] = set()
    for w in words:
        data = w.encode("utf-8")
        for i in range(2, len(data) + 1):
            extra.add(data[:i])
    for tok in sorted(extra, key=lambda b: (len(b), b)):
        if tok not in seen:
            seen.add(tok)
            out.append(tok)
    return out


def write_model_dir(
    path: Path,
    words: Iterable[str] = DEFAULT_WORDS,
    *,
    num_base_tokens: int | None = None,
    specials: dict[int, str] | None = None,
) -> Path:
    """Write ``tiktoken.model`` and ``tokenizer_config.json`` into ``path``.

    ``num_base_tokens`` pads the vocabulary with unreachable filler tokens (NUL-prefixed) up to
    that size, e.g. 163,584 to get K3's real special ids.
    """
    tokens = _prefix_closed(words)
    if num_base_tokens is not None:
        i = 0
        while len(tokens) < num_base_tokens:
            tokens.append(b"\x00\x00" + i.to_bytes(3, "big"))
            i += 1
    path.mkdir(parents=True, exist_ok=True)
    with open(path / "tiktoken.model", "wb") as f:
        for rank, tok in enumerate(tokens):
            f.write(base64.b64encode(tok) + b" " + str(rank).encode() + b"\n")
    base = len(tokens)
    names = K3_SPECIALS if specials is None else specials
    config = {
        "added_tokens_decoder": {
            str(base + k): {"content": name, "special": name not in ("<|open|>", "<|close|>", "<|sep|>")}
            for k, name in names.items()
        },
        "tokenizer_class": "TikTokenTokenizer",
    }
    (path / "tokenizer_config.json").write_text(json.dumps(config, indent=1))
    return path
