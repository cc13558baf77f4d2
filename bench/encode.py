"""Benchmark K3 prompt encoding (issue: foundation, item 7).

(a) Encode a ~1,000,000-token agent history (many turns of reasoning, tool calls and tool
    results) to ids with kimik3 (typed messages -> segments -> segment-wise BPE), as a ratio to
    raw tiktoken encoding of the same rendered text in the same run. Goal <= 1.3x.
(b) The cost of encoding one more turn onto that history vs onto a 10,000-token history with
    kimik3.PromptEncoder (incremental). Goal <= 1.5x.

Vocabularies (both reported, each against raw tiktoken over the same vocabulary): K3's real
vocabulary shipped with kimik3 (163,584 base tokens, kimik3/formats/k3/vocab), and
models/k3-tiny (the project's K3-format tokenizer; when absent, a vocabulary built here from the
benchmark text's frequent words, K3 file format and split regex).
Times are CPU (``process_time``: single-process work); ratios are per pair run back to back,
printed as min / median / max.

Run: .venv/bin/python bench/encode.py [--tokens 1000000] [--vocab real|tiny|both]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kimik3 import AssistantMessage, K3Tokenizer, PromptEncoder, ToolMessage, UserMessage  # noqa: E402
from kimik3.formats.k3 import render  # noqa: E402
from kimik3.types import FunctionCall, ToolCall  # noqa: E402

WORDS = ["the", "a", "to", "of", "and", "in", "is", "it", "that", "for", "on", "with", "as", "this", "be", "are", "file", "test", "function", "value", "error", "return", "line", "code", "should", "we", "need", "check", "then", "run", "output", "import", "def", "class", "self", "path", "data", "fix", "bug", "failing", "assert", "expected", "result", "call", "read", "write", "edit", "update", "module", "package", "config"]
TOOLS = [
    {"type": "function", "function": {"name": n, "description": f"{n} tool", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}
    for n in ("bash", "read_file", "write_file", "edit_file", "grep", "glob")
]


def _sentence(rnd: random.Random, n: int) -> str:
    return " ".join(rnd.choice(WORDS) for _ in range(n)).capitalize() + "."


def _code(rnd: random.Random, lines: int) -> str:
    out = []
    for i in range(lines):
        name = rnd.choice(WORDS)
        out.append(f"{i + 1:6d}\t    {name}_{rnd.randint(0, 99)} = {rnd.choice(WORDS)}({rnd.randint(0, 9999)})  # {_sentence(rnd, 4)}")
    return "\n".join(out)


def make_turn(rnd: random.Random, k: int) -> list[Any]:
    """One agent turn: an assistant message (reasoning, text, 1-3 calls) and its tool results."""
    n_calls = rnd.randint(1, 3)
    calls = [
        ToolCall(
            id=f"call_{k}_{j}",
            function=FunctionCall(
                name=rnd.choice(["read_file", "bash", "grep"]),
                arguments={"path": f"src/{rnd.choice(WORDS)}_{k}.py", "limit": rnd.randint(10, 400)},
            ),
        )
        for j in range(n_calls)
    ]
    reasoning = " ".join(_sentence(rnd, rnd.randint(8, 20)) for _ in range(rnd.randint(5, 15)))
    turn: list[Any] = [AssistantMessage(content=_sentence(rnd, 6), reasoning_content=reasoning, tool_calls=calls)]
    for call in calls:
        turn.append(ToolMessage(tool_call_id=call.id, content=_code(rnd, rnd.randint(10, 60))))
    return turn


def history(tok: K3Tokenizer, target_tokens: int, seed: int = 0) -> list[Any]:
    rnd = random.Random(seed)
    msgs: list[Any] = [UserMessage(content="Fix the failing test in tests/test_core.py")]
    total = 0
    k = 0
    while total < target_tokens:
        turn = make_turn(rnd, k)
        total += len(tok.encode_messages(turn[:1], add_generation_prompt=False))
        total += sum(len(tok.encode_text(m.content)) + 12 for m in turn[1:])
        msgs.extend(turn)
        k += 1
    return msgs


def tokenizer() -> tuple[K3Tokenizer, str]:
    tiny = ROOT / "models" / "k3-tiny"
    if (tiny / "tiktoken.model").exists():
        return K3Tokenizer.from_pretrained(tiny), f"models/k3-tiny ({K3Tokenizer.from_pretrained(tiny).num_base_tokens} base tokens)"
    sys.path.insert(0, str(ROOT))
    from tests.k3vocab import write_model_dir

    rnd = random.Random(1)
    sample = " ".join(render(make_turn(rnd, k), add_generation_prompt=False) for k in range(50))
    words = [w for w, _ in Counter(sample.replace("\n", " \n ").split(" ")).most_common(3000)]
    words += [" " + w for w in words]
    path = write_model_dir(Path(tempfile.mkdtemp()) / "vocab", words)
    tok = K3Tokenizer.from_pretrained(path)
    return tok, f"word-level fallback vocabulary ({tok.num_base_tokens} base tokens)"


def cpu(fn: Any) -> float:
    """CPU seconds of one call (``process_time``: single-process work)."""
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def spread(ratios: list[float]) -> str:
    r = sorted(ratios)
    return f"{r[0]:.2f} / {statistics.median(r):.2f} / {r[-1]:.2f}x"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=1_000_000)
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--vocab", choices=["real", "tiny", "both"], default="both")
    args = parser.parse_args()
    if args.vocab in ("real", "both"):
        run(K3Tokenizer(), "K3's real vocabulary (packaged, 163,584 base tokens)", args)
    if args.vocab in ("tiny", "both"):
        run(*tokenizer(), args)


def run(tok: K3Tokenizer, vocab: str, args: argparse.Namespace) -> None:
    print(f"== vocabulary: {vocab}")
    big = history(tok, args.tokens)
    text = render(big, TOOLS)
    ids = tok.encode_messages(big, TOOLS)
    print(f"history: {len(big)} messages, {len(text):,} characters, {len(ids):,} tokens")

    # (a) full encode vs raw tiktoken over the same text
    raw = tok._enc  # the tiktoken.Encoding kimik3 wraps: the baseline
    t_raw, t_ours = [], []
    for rep in range(5):  # interleaved pairs, alternating which goes first
        pair = [(t_raw, lambda: raw.encode(text, allowed_special="all")), (t_ours, lambda: tok.encode_messages(big, TOOLS))]
        for out, fn in pair if rep % 2 == 0 else pair[::-1]:
            out.append(cpu(fn))
    print(f"(a) full encode (CPU): kimik3 {statistics.median(t_ours) * 1e3:8.1f} ms   raw tiktoken "
          f"{statistics.median(t_raw) * 1e3:8.1f} ms (medians)   ratio {spread([o / r for o, r in zip(t_ours, t_raw, strict=True)])} "
          "(min / median / max of 5 pairs; goal <= 1.3x)")

    # (b) one more turn onto a 1M-token vs a 10K-token history, incremental
    small = history(tok, args.small, seed=2)
    rnd = random.Random(3)
    extra = [make_turn(rnd, 10_000 + i) for i in range(20)]

    def per_turn(base: list[Any]) -> float:
        enc = PromptEncoder(tok, TOOLS)
        enc.encode(base)  # the history is already encoded (a long-running agent)
        samples = []
        view = list(base)
        for turn in extra:  # the agent appends one turn at a time
            view.extend(turn)
            t0 = time.process_time()
            enc.encode(view)
            samples.append(time.process_time() - t0)
        return statistics.median(samples)

    check = PromptEncoder(tok, TOOLS)
    check.encode(big)
    assert check.encode([*big, *extra[0]]) == tok.encode_messages([*big, *extra[0]], TOOLS)
    pairs = [(per_turn(small), per_turn(big)) for _ in range(3)]  # each: the median of 20 turns
    t_small = statistics.median(p[0] for p in pairs)
    t_big = statistics.median(p[1] for p in pairs)
    n_small = len(tok.encode_messages(small, TOOLS))
    print(f"(b) one more turn (CPU): onto {len(ids):,} tokens {t_big * 1e3:7.2f} ms   onto {n_small:,} tokens "
          f"{t_small * 1e3:7.2f} ms   ratio {spread([b / s for s, b in pairs])} (min / median / max of 3 pairs; goal <= 1.5x)")
    t_one_shot = cpu(lambda: tok.encode_messages([*big, *extra[0]], TOOLS))
    print(f"    (re-encoding everything instead would take {t_one_shot * 1e3:.0f} ms per turn)")


if __name__ == "__main__":
    main()
