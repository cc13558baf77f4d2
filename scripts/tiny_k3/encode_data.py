"""Tokenize the generated episodes for training (step 3 of 3; see models/k3-tiny/README.md).

Each episode is encoded exactly as kimik3 encodes a conversation (``kimik3.formats.k3`` segments,
tokenized segment by segment by ``kimik3.K3Tokenizer``), message by message so the loss mask can
be exact: the mask is 1 on what the model generates in an assistant turn, i.e. every token of an
assistant message after the generation prompt (``<|open|>message role="assistant"<|sep|>`` plus
``<|open|>think<|sep|>``, or ``<|open|>response<|sep|>`` with thinking off), through its
``<|end_of_msg|>``.

The prompt header (tool declarations + thinking-effort directive) is the same for every episode
with the same settings, so it is stored once per setting. Writes under ``--data``/device (the
folder to carry to the training machine):

- ``dataset.npz``: ``tokens`` (uint16, all episode bodies concatenated), ``mask`` (uint8, same
  length), ``offsets`` (int64, n+1), ``header`` (int16 per episode: index of its header),
  ``header_tokens`` / ``header_offsets`` (the headers);
- ``eval.json``: the held-out first-turn evaluation: per task the prompt ids (header, system, user
  and the generation prompt), the expected tool calls (name + arguments), and for tool-free
  tasks the text the answer must contain;
- ``dataset_meta.json``: vocabulary, special ids and sizes.

Usage: python scripts/tiny_k3/encode_data.py [--data .cache/tiny_k3] [--model models/k3-tiny]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from kimik3.formats.k3 import message_segments, normalize_messages, prompt_header_segments, prompt_trailer_segments
from kimik3.tokenizer import K3Tokenizer
from kimik3.types import AssistantMessage, to_tool_specs

REPO = Path(__file__).resolve().parents[2]


def encode_episode(
    tok: K3Tokenizer, ep: dict[str, Any], gen_prompt: dict[bool, list[int]]
) -> tuple[list[int], list[int]]:
    """(body ids, loss mask) of an episode, without the header."""
    ids: list[int] = []
    mask: list[int] = []
    thinking = ep["thinking"]
    prefix = gen_prompt[thinking]
    for item in normalize_messages(ep["messages"]):
        part = tok.encode_segments(message_segments(item, thinking=thinking))
        if isinstance(item.message, AssistantMessage):
            assert part[: len(prefix)] == prefix, "assistant message does not start with the generation prompt"
            m = [0] * len(prefix) + [1] * (len(part) - len(prefix))
        else:
            m = [0] * len(part)
        ids += part
        mask += m
    return ids, mask


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=REPO / ".cache" / "tiny_k3")
    ap.add_argument("--model", type=Path, default=REPO / "models" / "k3-tiny")
    ap.add_argument("--max-len", type=int, default=4096)
    args = ap.parse_args()
    t0 = time.time()
    dev = args.data / "device"  # what the training machine needs (carry this folder)
    dev.mkdir(parents=True, exist_ok=True)
    tok = K3Tokenizer.from_pretrained(args.model)
    meta = json.loads((args.data / "episodes_meta.json").read_text())
    tools = to_tool_specs(meta["tools"])
    gen_prompt = {th: tok.encode_segments(prompt_trailer_segments(thinking=th)) for th in (True, False)}
    headers: dict[tuple[bool, str | None], int] = {}
    header_ids: list[list[int]] = []

    def header_of(thinking: bool, effort: str | None) -> int:
        key = (thinking, effort if thinking else None)
        if key not in headers:
            headers[key] = len(header_ids)
            header_ids.append(tok.encode_segments(prompt_header_segments(tools, thinking=thinking, thinking_effort=effort)))
        return headers[key]

    tokens: list[np.ndarray] = []
    masks: list[np.ndarray] = []
    offsets = [0]
    hidx: list[int] = []
    lengths: list[int] = []
    n_target = 0
    with (args.data / "episodes_train.jsonl").open(encoding="utf-8") as f:
        for line in f:
            ep = json.loads(line)
            h = header_of(ep["thinking"], ep["effort"])
            ids, mask = encode_episode(tok, ep, gen_prompt)
            total = len(header_ids[h]) + len(ids)
            if total > args.max_len:
                continue
            tokens.append(np.asarray(ids, dtype=np.uint16))
            masks.append(np.asarray(mask, dtype=np.uint8))
            offsets.append(offsets[-1] + len(ids))
            hidx.append(h)
            lengths.append(total)
            n_target += sum(mask)
            if len(hidx) % 10000 == 0:
                print(f"  {len(hidx)} episodes ({time.time() - t0:.0f}s)", flush=True)
    assert tok.vocab_size < 65536
    header_offsets = np.cumsum([0] + [len(h) for h in header_ids]).astype(np.int64)
    np.savez_compressed(
        dev / "dataset.npz",
        tokens=np.concatenate(tokens),
        mask=np.concatenate(masks),
        offsets=np.asarray(offsets, dtype=np.int64),
        header=np.asarray(hidx, dtype=np.int16),
        header_tokens=np.asarray([i for h in header_ids for i in h], dtype=np.uint16),
        header_offsets=header_offsets,
    )

    # held-out first-turn evaluation
    evals = []
    with (args.data / "episodes_heldout.jsonl").open(encoding="utf-8") as f:
        for line in f:
            ep = json.loads(line)
            msgs = ep["messages"]
            first_user = next(i for i, m in enumerate(msgs) if m["role"] == "user")
            prompt = tok.encode_messages(
                msgs[: first_user + 1], tools, thinking=ep["thinking"], thinking_effort=ep["effort"]
            )
            answer = next(m for m in msgs[first_user + 1 :] if m["role"] == "assistant")
            evals.append(
                {
                    "kind": ep["kind"][0],
                    "prompt_ids": prompt,
                    "expected_calls": ep["first_calls"],
                    "answer_contains": [] if ep["first_calls"] else ep["goals"][0].get("answer_contains", []),
                    "expected_text": answer.get("content", ""),
                }
            )
    (dev / "eval.json").write_text(json.dumps(evals) + "\n")

    lens = np.asarray(lengths)
    specials = {name: tok.token_id(name) for name in ("<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>", "[PAD]", "[BOS]")}
    info = {
        "num_base_tokens": tok.num_base_tokens,
        "vocab_size": tok.vocab_size,
        "specials": specials,
        "episodes": len(hidx),
        "tokens_total": int(lens.sum()),
        "tokens_body": int(offsets[-1]),
        "tokens_target": int(n_target),
        "headers": {f"thinking={k[0]} effort={k[1]}": len(header_ids[v]) for k, v in headers.items()},
        "length": {p: int(np.percentile(lens, p)) for p in (0, 50, 90, 99, 100)},
        "eval_tasks": len(evals),
        "max_len": args.max_len,
    }
    (dev / "dataset_meta.json").write_text(json.dumps(info, indent=2) + "\n")
    print(json.dumps(info, indent=2))
    print(f"done ({time.time() - t0:.0f}s)")


if __name__ == "__main__":
    main()
