"""Train the tiny model's BPE vocabulary and write it in K3's tokenizer layout.

Trains a byte-level BPE with HF ``tokenizers`` (its ``BpeTrainer``) on the text segments of the
training episodes, pre-tokenized with K3's split regex (``kimik3.formats.k3._tokenizer.K3_PAT_STR``), then
writes into the model directory:

- ``tiktoken.model``: K3's file format, one ``<base64 token bytes> <rank>`` line per token; ranks
  0..255 are the single bytes (in byte order), then one rank per merge in the trainer's merge order;
- ``tokenizer_config.json``: K3's special-token names at K3's offsets from ``num_base_tokens``
  (``specials.py``), the HF tokenizer class (``tokenization_kimi_k3.py``, via ``auto_map``) and
  bos / eos / unk / pad.

Oniguruma (HF's regex engine) and tiktoken's engine agree on K3's regex; for training the two
``[...&&[^\\p{Han}]]`` class intersections are nonetheless written as a negative lookahead, the
form whose meaning does not depend on an engine's set-operation syntax. The script verifies:

1. the HF pre-tokenizer split equals the ``regex`` module's split of ``K3_PAT_STR`` (V1 syntax,
   which has ``&&``) on the training text and on random Unicode text (code points assigned in this
   Python's Unicode version; engines built on other Unicode versions may differ on the rest);
2. ``kimik3.K3Tokenizer.from_pretrained(model_dir)`` (tiktoken) encodes every text segment of the
   corpus (train and held-out) and the random text to the same tokens as the HF tokenizer, and the
   tiktoken split agrees with the ``regex`` module split (same ids piece by piece).

Usage: python scripts/tiny_k3/build_tokenizer.py [--vocab-size 4096] [--data .cache/tiny_k3]
       [--out models/k3-tiny]
"""

from __future__ import annotations

import argparse
import base64
import json
import random
import sys
import time
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import regex
from specials import BOS, END_OF_MSG, NUM_RESERVED, PAD, SPECIALS, UNK
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

from kimik3.formats.k3 import encode_segments
from kimik3.formats.k3._tokenizer import K3_PAT_STR, K3Tokenizer

REPO = Path(__file__).resolve().parents[2]

_LU = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]"
_LL = r"[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]"
HF_PAT = K3_PAT_STR.replace(_LU, r"(?:(?!\p{Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])").replace(
    _LL, r"(?:(?!\p{Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])"
)
assert K3_PAT_STR.count(_LU) == 2 and K3_PAT_STR.count(_LL) == 2 and "&&" not in HF_PAT


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character map (HF's ByteLevel alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs), strict=True))


BYTE_DECODER = {c: b for b, c in _bytes_to_unicode().items()}


def token_bytes(tok: str) -> bytes:
    return bytes(BYTE_DECODER[c] for c in tok)


def read_episodes(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        for line in f:
            yield json.loads(line)


def episode_text_segments(ep: dict[str, Any], tools: list[dict[str, Any]]) -> Iterator[str]:
    """The text (non-control) segments of an episode as the encoder renders it."""
    segs = encode_segments(
        ep["messages"], tools, thinking=ep["thinking"], thinking_effort=ep["effort"], add_generation_prompt=False
    )
    for s in segs:
        if not s.control:
            yield s.text


def hf_pre_tokenizer() -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(HF_PAT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )


def train(corpus: list[str], vocab_size: int) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = hf_pre_tokenizer()
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    return tok


def to_ranks(tok: Tokenizer) -> tuple[dict[bytes, int], list[tuple[str, str]]]:
    """tiktoken ranks (bytes 0..255 by value, then merge order) from the trained BPE."""
    data = json.loads(tok.to_str())
    vocab: dict[str, int] = data["model"]["vocab"]
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in data["model"]["merges"]]
    ranks: dict[bytes, int] = {bytes([b]): b for b in range(256)}
    for a, b in merges:
        t = token_bytes(a) + token_bytes(b)
        if t in ranks:
            raise SystemExit(f"merge {a!r}+{b!r} repeats token {t!r}")
        ranks[t] = len(ranks)
    got = {token_bytes(t) for t in vocab}
    if got != set(ranks):
        raise SystemExit(f"vocab/merges mismatch: {len(got ^ set(ranks))} tokens differ")
    return ranks, merges  # type: ignore[return-value]


def write_model_dir(out: Path, ranks: dict[bytes, int], max_len: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    lines = [f"{base64.b64encode(t).decode('ascii')} {r}" for t, r in sorted(ranks.items(), key=lambda kv: kv[1])]
    (out / "tiktoken.model").write_text("\n".join(lines) + "\n", encoding="ascii")
    base = len(ranks)
    decoder = {
        str(base + off): {
            "content": name,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": special,
        }
        for off, (name, special) in sorted(SPECIALS.items())
    }
    config = {
        "added_tokens_decoder": decoder,
        "additional_special_tokens": [
            name for _, (name, special) in sorted(SPECIALS.items()) if special and name not in (BOS, END_OF_MSG, UNK, PAD)
        ],
        "auto_map": {"AutoTokenizer": ["tokenization_kimi_k3.K3TikTokenTokenizer", None]},
        "bos_token": BOS,
        "clean_up_tokenization_spaces": False,
        "eos_token": END_OF_MSG,
        "extra_special_tokens": {},
        "model_max_length": max_len,
        "pad_token": PAD,
        "tokenizer_class": "K3TikTokenTokenizer",
        "unk_token": UNK,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


# -- verification -------------------------------------------------------------------------------

_POOLS = [
    range(0x20, 0x7F), range(0xA0, 0x250), range(0x300, 0x370), range(0x370, 0x400), range(0x400, 0x530),
    range(0x4E00, 0x4E80), range(0x3040, 0x3100), range(0xAC00, 0xAC40), range(0x660, 0x66A),
    range(0x2460, 0x2470), range(0x1F600, 0x1F620), range(0x3400, 0x3410), range(0x2E80, 0x2F00),
    range(0x3000, 0x3010), range(0xF900, 0xF910), range(0x20000, 0x20010), range(0x10000, 0x10100),
    range(0x900, 0x980), range(0x5D0, 0x5F0), range(0x620, 0x660),
]
_WS = "\r\n\t\x0b\x0c \u00a0\u2003\u3000\u0085\u2028\u2029\u1680\u200b\ufeff"


def random_texts(n: int, seed: int = 0) -> list[str]:
    """Random Unicode strings (assigned code points only) plus every assigned code point below
    U+30000 in runs, alone and between spaces / letters."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 60)):
            r = rng.random()
            if r < 0.25:
                parts.append(rng.choice(_WS))
            elif r < 0.35:
                parts.append(rng.choice(["'s", "'T", "'re", "'LL", "'d", "'M", "'ve", "123", "4567"]))
            else:
                parts.append(chr(rng.choice(rng.choice(_POOLS))))
        out.append("".join(parts))
    for start in range(0, 0x30000, 64):
        s = "".join(chr(c) for c in range(start, start + 64) if not 0xD800 <= c < 0xE000)
        out += [s, " ".join(s), "a".join(s)]
    return ["".join(c for c in t if unicodedata.category(c) != "Cn") for t in out]


def verify(out: Path, hf: Tokenizer, texts: list[str], label: str) -> dict[str, int]:
    k3 = K3Tokenizer.from_pretrained(out)
    # HF tokenizer with tiktoken's whole-piece shortcut (a piece that is a token is that token)
    data = json.loads(hf.to_str())
    data["model"]["ignore_merges"] = True
    hf2 = Tokenizer.from_str(json.dumps(data))
    id_to_bytes = {i: token_bytes(t) for t, i in hf2.get_vocab().items()}
    rx = regex.compile(K3_PAT_STR, regex.V1)
    split_pre = pre_tokenizers.Split(Regex(HF_PAT), behavior="isolated")
    stats = {"texts": 0, "split_mismatch": 0, "ids_mismatch": 0, "tiktoken_split_mismatch": 0}
    shown = 0
    core = k3._enc._core_bpe
    for t in texts:
        if not t:
            continue
        stats["texts"] += 1
        ref = rx.findall(t)
        if [p for p, _ in split_pre.pre_tokenize_str(t)] != ref:
            stats["split_mismatch"] += 1
        want = [k3._enc.encode_single_token(id_to_bytes[i]) for i in hf2.encode(t).ids]
        got = k3.encode_text(t)
        if got != want:
            stats["ids_mismatch"] += 1
            if shown < 3:
                shown += 1
                print(f"  [{label}] ids differ for {t[:80]!r}: tiktoken {got[:12]} hf {want[:12]}", flush=True)
        piecewise = [i for p in ref for i in core.encode_single_piece(p.encode("utf-8"))]
        if piecewise != got:
            stats["tiktoken_split_mismatch"] += 1
    print(f"  {label}: {stats}", flush=True)
    return stats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=REPO / ".cache" / "tiny_k3")
    ap.add_argument("--out", type=Path, default=REPO / "models" / "k3-tiny")
    ap.add_argument("--vocab-size", type=int, default=4096, help="base tokens (bytes + merges)")
    ap.add_argument("--max-len", type=int, default=4096)
    ap.add_argument("--random-texts", type=int, default=20000)
    args = ap.parse_args()

    t0 = time.time()
    meta = json.loads((args.data / "episodes_meta.json").read_text())
    tools = meta["tools"]
    corpus = [s for ep in read_episodes(args.data / "episodes_train.jsonl") for s in episode_text_segments(ep, tools)]
    held = [s for ep in read_episodes(args.data / "episodes_heldout.jsonl") for s in episode_text_segments(ep, tools)]
    print(f"corpus: {len(corpus)} text segments, {sum(map(len, corpus))} chars ({time.time() - t0:.0f}s)", flush=True)

    hf = train(corpus, args.vocab_size)
    ranks, merges = to_ranks(hf)
    print(f"trained: {len(ranks)} base tokens, {len(merges)} merges ({time.time() - t0:.0f}s)", flush=True)
    write_model_dir(args.out, ranks, args.max_len)
    hf.save(str(args.data / "hf_tokenizer.json"))  # the trainer's own file, for reference

    k3 = K3Tokenizer.from_pretrained(args.out)
    assert k3.num_base_tokens == len(ranks) and k3.vocab_size == len(ranks) + NUM_RESERVED
    uniq_train = sorted(set(corpus))
    uniq_held = sorted(set(held))
    print("verifying (split and ids; tiktoken vs HF tokenizers vs regex V1):", flush=True)
    results = {
        "train_segments": verify(args.out, hf, uniq_train, "train segments"),
        "heldout_segments": verify(args.out, hf, uniq_held, "held-out segments"),
        "random_unicode": verify(args.out, hf, random_texts(args.random_texts), "random unicode"),
    }
    n_tok = sum(len(k3.encode_text(s)) for s in corpus)
    summary = {
        "num_base_tokens": len(ranks),
        "vocab_size": k3.vocab_size,
        "corpus_segments": len(corpus),
        "corpus_chars": sum(map(len, corpus)),
        "corpus_tokens": n_tok,
        "verification": results,
    }
    (args.data / "tokenizer_report.json").write_text(json.dumps(summary, indent=2) + "\n")
    bad = sum(r["split_mismatch"] + r["ids_mismatch"] + r["tiktoken_split_mismatch"] for r in results.values())
    print(json.dumps(summary, indent=2), flush=True)
    print(f"{'OK' if not bad else 'MISMATCHES'} ({time.time() - t0:.0f}s)", flush=True)
    if bad:
        sys.exit(1)


if __name__ == "__main__":
    main()
