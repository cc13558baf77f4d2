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
- ``eval.json``: the held-out evaluation: per task the prompt (``header``: the index of its
  header in ``dataset.npz``; ``body_ids``: the conversation so far and the generation prompt),
  the expected tool calls (name + arguments), and for tool-free turns the text the answer must
  contain; ``group`` is ``synthetic`` / ``realistic`` / ``sample_workspace`` (see gen_data.py)
  and ``turn`` is ``first`` (the first assistant turn: tool names and arguments, i.e. copying
  paths, words and texts from the request) or ``next`` (for every shape with tools: the turn after
  the first tool results, i.e. the edit after the read, or the answer that copies the result);
- ``dataset_meta.json``: vocabulary, special ids and sizes.

Training reads ``episodes_train.jsonl`` and, when present, ``episodes_long.jsonl`` (the long
conversations); episodes longer than ``--max-len`` (the model's window) are left out.

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
from kimik3.formats.k3._tokenizer import K3Tokenizer
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
    ap.add_argument("--max-len", type=int, default=None, help="default: the model's max_position_embeddings")
    args = ap.parse_args()
    t0 = time.time()
    dev = args.data / "device"  # what the training machine needs (carry this folder)
    dev.mkdir(parents=True, exist_ok=True)
    tok = K3Tokenizer.from_pretrained(args.model)
    if args.max_len is None:
        args.max_len = json.loads((args.model / "config.json").read_text())["max_position_embeddings"]
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
    sources = [args.data / "episodes_train.jsonl", args.data / "episodes_long.jsonl"]
    dropped = 0

    def train_lines() -> Any:
        for path in sources:
            if path.exists():
                with path.open(encoding="utf-8") as f:
                    yield from f

    for line in train_lines():
        ep = json.loads(line)
        h = header_of(ep["thinking"], ep["effort"])
        ids, mask = encode_episode(tok, ep, gen_prompt)
        total = len(header_ids[h]) + len(ids)
        if total > args.max_len:
            dropped += 1
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

    # held-out evaluation: first assistant turns, and the turn after the first tool results
    evals = []
    with (args.data / "episodes_heldout.jsonl").open(encoding="utf-8") as f:
        for line in f:
            ep = json.loads(line)
            msgs = ep["messages"]
            kind = ep["kind"][0]
            first_user = next(i for i, m in enumerate(msgs) if m["role"] == "user")
            turns = [i for i, m in enumerate(msgs) if m["role"] == "assistant"]
            picks = [("first", turns[0])]
            if len(turns) > 1:
                picks.append(("next", turns[1]))
            for turn, at in picks:
                prompt = tok.encode_messages(msgs[:at], tools, thinking=ep["thinking"], thinking_effort=ep["effort"])
                if turn == "first":
                    assert msgs[first_user + 1 : at] == [], "the first turn follows the first user message"
                answer = msgs[at]
                calls = [
                    {"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])}
                    for c in answer.get("tool_calls") or []
                ]
                if turn == "first":
                    assert calls == ep["first_calls"], (calls, ep["first_calls"])
                # the prompt is what training saw before this turn (history encoded the same way)
                body, _ = encode_episode(tok, {**ep, "messages": msgs[:at]}, gen_prompt)
                h = header_of(ep["thinking"], ep["effort"])
                assert prompt == header_ids[h] + body + gen_prompt[ep["thinking"]], "prompt differs from training"
                evals.append(
                    {
                        "kind": kind,
                        "group": ep.get("group", "synthetic"),
                        "turn": turn,
                        "header": h,
                        "body_ids": prompt[len(header_ids[h]):],
                        "expected_calls": calls,
                        "answer_contains": [] if calls else ep["goals"][0].get("answer_contains", []),
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
        "dropped_over_max_len": dropped,
        "long_episodes": len(sources[1].read_text(encoding="utf-8").splitlines()) if sources[1].exists() else 0,
    }
    (dev / "dataset_meta.json").write_text(json.dumps(info, indent=2) + "\n")
    print(json.dumps(info, indent=2))
    print(f"done ({time.time() - t0:.0f}s)")


if __name__ == "__main__":
    main()
