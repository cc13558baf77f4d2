"""Benchmark kimik3's engine overhead against the raw APIs it wraps (issue: engines, item 4).

Same model (SmolLM2-135M-Instruct, converted by scripts/setup_engine.sh), same prompt ids, greedy,
a fixed number of generated tokens (ignore_eos), 1 and 32 concurrent requests (``--concurrency``;
issue 44's goal is the TTFT at 32):

- embedded: kimik3 ``Client(VLLMEngine)`` (K3 encoding + streaming + K3 parsing) vs vLLM's
  ``AsyncLLM.generate`` on the same ids;
- remote: kimik3 ``Client(RemoteCompletionsEngine(...))`` vs ``openai.AsyncOpenAI.completions`` on the
  same ids, against vLLM's OpenAI server.

Sampling is identical on both sides (greedy, top_p 1.0). Prints time-to-first-token and throughput ratios (kimik3 / baseline; goal <= 1.05x). The
prompt is kimik3's K3 encoding with a K3-format vocabulary whose ids exist in SmolLM2 (the model
does not speak K3; the bench measures the plumbing, not answers).

Each ratio is kimik3 / baseline of one pair run back to back (alternating which goes first),
printed as min / median / max over the repeats; wall time (the engine runs beside the caller).

Starts an engine: run it under ``flock /tmp/kimik3-engine.lock``.

Run: .venv/bin/python bench/engine.py [--tokens 32] [--reps 3] [--concurrency 1,32] [--only embedded]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kimik3 import Client, K3Tokenizer, VLLMEngine  # noqa: E402
from kimik3.engines import RemoteCompletionsEngine  # noqa: E402
from tests.k3vocab import write_model_dir  # noqa: E402

SMOLLM = ROOT / ".cache" / "smollm2-135m-instruct"
MESSAGES = [
    {"role": "system", "content": "You are a careful coding agent."},
    {"role": "user", "content": "Read the file src/app.py and tell me what the main function does."},
]


async def timed(stream: AsyncIterator[Any], is_token: Callable[[Any], bool], t0: float) -> tuple[float, float]:
    """(seconds to the first generated text, seconds to the end) of one stream, both from ``t0``:
    ``time.perf_counter()`` taken by the caller right before the call that made the stream (both
    clocks start at the call, never after a ``create()`` that already waited for the server)."""
    first = None
    async for item in stream:
        if first is None and is_token(item):
            first = time.perf_counter() - t0
    total = time.perf_counter() - t0
    return (first if first is not None else total), total


async def measure(
    run_one: Callable[[], Awaitable[tuple[float, float]]], concurrency: int, tokens: int
) -> tuple[float, float]:
    """(median TTFT seconds, generated tokens per second) for `concurrency` parallel requests."""
    t0 = time.perf_counter()
    results = await asyncio.gather(*(run_one() for _ in range(concurrency)))
    wall = time.perf_counter() - t0
    return statistics.median(r[0] for r in results), concurrency * tokens / wall


async def compare(label: str, ours: Callable[[], Awaitable[tuple[float, float]]],
                  base: Callable[[], Awaitable[tuple[float, float]]], tokens: int, reps: int,
                  concurrency: tuple[int, ...]) -> None:
    await ours()
    await base()  # warm up both paths
    for conc in concurrency:
        o_ttft, o_tps, b_ttft, b_tps = [], [], [], []
        for rep in range(reps * 3 if conc == 1 else reps):  # interleaved: this machine is noisy
            order = [(base, b_ttft, b_tps), (ours, o_ttft, o_tps)]
            for run_one, ttfts, rates in order if rep % 2 == 0 else order[::-1]:  # no order bias
                t, r = await measure(run_one, conc, tokens)
                ttfts.append(t)
                rates.append(r)
        ttft = [o / b for o, b in zip(o_ttft, b_ttft, strict=True)]  # per repeat: the pair ran back to back
        time_per_token = [b / o for o, b in zip(o_tps, b_tps, strict=True)]
        print(f"{label:9} x{conc:<3} TTFT kimik3 {statistics.median(o_ttft) * 1e3:8.1f} ms  baseline "
              f"{statistics.median(b_ttft) * 1e3:8.1f} ms  ratio {spread(ttft)} | throughput kimik3 "
              f"{statistics.median(o_tps):7.1f} tok/s  baseline {statistics.median(b_tps):7.1f} tok/s  "
              f"time ratio {spread(time_per_token)}  (min / median / max; goal <= 1.05x)", flush=True)


def spread(ratios: list[float]) -> str:
    return f"{min(ratios):.3f} / {statistics.median(ratios):.3f} / {max(ratios):.3f}x"


async def embedded(tok: K3Tokenizer, tokens: int, reps: int, concurrency: tuple[int, ...]) -> None:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.sampling_params import RequestOutputKind

    engine = VLLMEngine(SMOLLM, k3_tokenizer=tok, enforce_eager=True, max_model_len=2048, max_num_seqs=max(concurrency))
    await engine.start()
    client = Client(engine)
    ids = tok.encode_messages(MESSAGES)
    extra = {"ignore_eos": True}
    counter = iter(range(10**9))

    async def ours() -> tuple[float, float]:
        t0 = time.perf_counter()
        return await timed(client.stream(MESSAGES, max_tokens=tokens, temperature=0.0, top_p=1.0, extra=extra),
                           lambda e: True, t0)  # every event of a ModelCall is model output

    async def base() -> tuple[float, float]:
        params = SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True, skip_special_tokens=False,
                                spaces_between_special_tokens=False, stop_token_ids=[tok.end_of_msg_id],
                                output_kind=RequestOutputKind.DELTA)
        t0 = time.perf_counter()
        gen = engine.llm.generate(TokensPrompt(prompt_token_ids=list(ids)), params, request_id=f"b{next(counter)}")
        return await timed(gen, lambda out: bool(out.outputs[0].text), t0)

    try:
        await compare("embedded", ours, base, tokens, reps, concurrency)
    finally:
        await engine.aclose()


async def remote(tok: K3Tokenizer, tokens: int, reps: int, concurrency: tuple[int, ...]) -> None:
    import openai

    from tests.real.conftest import start_server, stop_server

    proc, url = start_server(SMOLLM, "--max-num-seqs", str(max(concurrency)), log_name="bench-engine-server")
    try:
        engine = RemoteCompletionsEngine(base_url=url + "/v1", model=str(SMOLLM), tokenizer=tok)
        client = Client(engine)
        raw = openai.AsyncOpenAI(base_url=url + "/v1", api_key="EMPTY", max_retries=0)
        ids = list(tok.encode_messages(MESSAGES))
        extra = {"ignore_eos": True}

        async def ours() -> tuple[float, float]:
            t0 = time.perf_counter()
            return await timed(client.stream(MESSAGES, max_tokens=tokens, temperature=0.0, top_p=1.0, extra=extra),
                               lambda e: True, t0)  # every event of a ModelCall is model output

        async def base() -> tuple[float, float]:
            t0 = time.perf_counter()  # before create(): it returns once the server answered
            stream = await raw.completions.create(
                model=str(SMOLLM), prompt=ids, max_tokens=tokens, temperature=0.0, stream=True,
                extra_body={"ignore_eos": True, "skip_special_tokens": False, "spaces_between_special_tokens": False,
                            "stop_token_ids": [tok.end_of_msg_id]},
            )
            return await timed(stream, lambda c: bool(c.choices and c.choices[0].text), t0)

        await compare("remote", ours, base, tokens, reps, concurrency)
        await client.aclose()
        await raw.close()
    finally:
        stop_server(proc)


def main() -> None:
    parser = argparse.ArgumentParser(description="kimik3 engine overhead vs the raw APIs")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--only", choices=["embedded", "remote"])
    parser.add_argument("--concurrency", default="1,32", help="concurrent requests, comma-separated")
    args = parser.parse_args()
    conc = tuple(int(c) for c in args.concurrency.split(","))
    if not (SMOLLM / "config.json").exists():
        raise SystemExit(f"no model at {SMOLLM}: run scripts/setup_test_model.sh (make test or make bench)")
    tok = K3Tokenizer.from_pretrained(write_model_dir(Path(tempfile.mkdtemp()) / "k3", num_base_tokens=48_800))
    if args.only in (None, "embedded"):
        asyncio.run(embedded(tok, args.tokens, args.reps, conc))
    if args.only in (None, "remote"):
        asyncio.run(remote(tok, args.tokens, args.reps, conc))


if __name__ == "__main__":
    main()
