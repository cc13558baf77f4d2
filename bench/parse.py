"""Stream-parse long K3 outputs: kimik3's StreamParser against vLLM 0.32's kimi_k3 parsers.

Inputs: outputs of 40 KB, 80 KB and 1 MB (1/4 reasoning, then one call whose string argument holds
the rest: the shape of a coding agent writing a file), streamed in 1-char and 16-char deltas.
Deltas are cut the way the engine streams tokens: each marker is one token, every other character
one token, ``n`` tokens per delta; kimik3 additionally gets raw 1-char deltas that split markers.

kimik3 must be linear (1 MB / 80 KB time ratio about 12.5) and at least 10x faster than vLLM at
80 KB. vLLM's streaming path re-scans the accumulated text on every delta (quadratic), so it is
only fed the 40 KB and 80 KB inputs. Run: ``.venv/bin/python bench/parse.py [--no-vllm]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kimik3.formats.k3 import StreamParser  # noqa: E402
from tests.formats.vllm_k3 import (  # noqa: E402
    StandInTokenizer,
    make_parser,
    make_request,
    prompt_tail_ids,
    token_deltas,
    vllm_missing,
)

SIZES = {"40 KB": 40_000, "80 KB": 80_000, "1 MB": 1_000_000}
VLLM_SIZES = ("40 KB", "80 KB")
GROUPS = (1, 16)
_LINE = "def f(x):\n    return x * 2  # 東京 naïve <tag> & \"q\"\n"


def make_output(size: int) -> tuple[str, str]:
    """A K3 output of exactly ``size`` characters and its string argument."""
    head = "<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|>"
    head += '<|open|>call tool="write_file" index="1"<|sep|>'
    head += '<|open|>argument key="text" type="string"<|sep|>'
    tail = "<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>"
    reasoning_len = size // 4
    arg_len = size - reasoning_len - len(head) - len(tail)
    reasoning = ("I should write the file. " * (reasoning_len // 25 + 1))[:reasoning_len]
    arg = (_LINE * (arg_len // len(_LINE) + 1))[:arg_len]
    text = reasoning + head + arg + tail
    assert len(text) == size
    return text, arg


def best_of(fn: Callable[[], None], repeat: int) -> float:
    # CPU time of this process: other work on a shared machine does not inflate it.
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


def run_kimik3(deltas: list[str], expected_arg: str) -> None:
    parser = StreamParser(thinking=True)
    feed = parser.feed
    for d in deltas:
        feed(d)
    parser.finish("stop")
    (call,) = parser.result().tool_calls
    assert call.arguments["text"] == expected_arg


def run_vllm(deltas: list[tuple[str, list[int]]], tok: StandInTokenizer, expected_arg: str) -> None:
    request = make_request()
    parser = make_parser(tok, request, thinking=True)
    prompt = prompt_tail_ids(tok, thinking=True)
    last = len(deltas) - 1
    arguments = []
    for i, (text, ids) in enumerate(deltas):
        dm = parser.parse_delta(text, ids, request, prompt if i == 0 else None, finished=i == last)
        if dm is not None and dm.tool_calls:
            arguments += [tc.function.arguments or "" for tc in dm.tool_calls if tc.function]
    assert json.loads("".join(arguments)) == {"text": expected_arg}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-vllm", action="store_true", help="time kimik3 only")
    ap.add_argument("--repeat", type=int, default=3, help="kimik3 runs per input (best is kept)")
    args = ap.parse_args()
    missing = "skipped (--no-vllm)" if args.no_vllm else vllm_missing()
    tok = StandInTokenizer()

    print(f"K3 stream parsing: CPU seconds per whole output (kimik3 best of {args.repeat}, vLLM one run)")
    print(f"{'input':>7} {'delta':>14} {'kimik3 s':>10} {'vLLM s':>9} {'vLLM/kimik3':>12}")
    times: dict[tuple[str, str], float] = {}
    for label, size in SIZES.items():
        text, arg = make_output(size)
        runs: list[tuple[str, list[str], list[tuple[str, list[int]]] | None]] = [
            ("1 char (raw)", list(text), None)
        ]
        for group in GROUPS:
            tdeltas = token_deltas(tok, text, group)
            runs.append((f"{group} token{'s' if group > 1 else ''}", [d for d, _ in tdeltas], tdeltas))
        for name, deltas, tdeltas in runs:
            k = best_of(lambda deltas=deltas, arg=arg: run_kimik3(deltas, arg), args.repeat)
            times[(label, name)] = k
            v_cell, ratio_cell = "", ""
            if tdeltas is not None and label in VLLM_SIZES and missing is None:
                v = best_of(lambda tdeltas=tdeltas, arg=arg: run_vllm(tdeltas, tok, arg), 1)
                v_cell, ratio_cell = f"{v:9.3f}", f"{v / k:11.1f}x"
            print(f"{label:>7} {name:>14} {k:10.4f} {v_cell:>9} {ratio_cell:>12}", flush=True)
    if missing is not None:
        print(f"vLLM: {missing}")
    print()
    for name in ("1 char (raw)", "1 token", "16 tokens"):
        r = times[("1 MB", name)] / times[("80 KB", name)]
        print(f"kimik3 linearity, {name}: time(1 MB) / time(80 KB) = {r:.1f} (size ratio 12.5)")


if __name__ == "__main__":
    main()
