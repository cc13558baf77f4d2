"""A 1M-token session (issue 18, item 4): a scripted coding run on K3's REAL vocabulary (163,584
ranks) whose history grows to ~1,000,000 tokens without compaction.

Reports, each as a ratio against its baseline measured in the same run:

- kimik3's CPU per turn (ScriptedEngine parse, incremental K3 encoding of the new messages, the
  tool, the session line, the agent's bookkeeping) when the history holds ~10k, ~100k and ~1M
  tokens, against the 10k figure (goal: flat within 1.5x);
- the process's resident memory growth against the history's text size (message texts,
  reasoning, tool arguments, UTF-8; goal < 3x), measured LIVE at the last turn (the run, its
  prompt cache and the engine's last prompt ids all held), and again after the run ended; from
  after a 2-turn warm-up run (what a first run costs once per process, whatever its length:
  the modules it imports on first use, the sync tools' worker thread; printed on its own);
- the session file's size against the same text size;
- the resume time of that session (``load_session`` of the file, then the full prompt encoded
  once, as the next call needs it; goal < 2 s) against reading and JSON-decoding its lines, in
  CPU time (single-process work);
- the prompt ids handed to an engine (issue 44): ``ids_list`` (what ``VLLMEngine.generate`` and
  ``RemoteCompletionsEngine`` call: C-level copies of the shared prefix (3 bytes an id) into the
  list their APIs take) against ``list(ids)`` (the walk through ``PromptIds.__iter__``'s Python
  generator they made before), on the ~1M re-encoded ids, CPU, interleaved repeats; and the copy
  against the median CPU of a turn at ~1M tokens (its share of a turn).

The growth is a difference of two RSS figures, both printed: what the process had freed before
the run and kept resident (holes left by loading the vocabulary, the imports) is reused by the
run, so the growth moves by ~2 MB with incidental allocation order; ``--tracemalloc`` prints the
live Python allocations the run added instead (at its last turn, by line; CPU figures are then
~3x slower and not comparable).

Run: .venv/bin/python bench/long.py [--tokens 1000000] [--turn-tokens 1000] [--tracemalloc]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kimik3 import Agent, ContextPolicy, ScriptedEngine, tool  # noqa: E402
from kimik3.agents import TurnEndEvent, load_session  # noqa: E402
from kimik3.formats.k3 import PromptCache, default_tokenizer, ids_list, render_output  # noqa: E402
from kimik3.types import AssistantMessage, Message, message_text  # noqa: E402


def source_file(n: int, lines: int) -> str:
    """Deterministic, varied Python source (realistic BPE), ``lines`` lines."""
    return "".join(
        f"    def handler_{n}_{i}(self, request, limit={i % 97}):\n"
        f"        return self.render(request, 'page_{n}_{i}.html', rows=request.rows[:{i}])  # {n * 31 + i}\n"
        for i in range(lines // 2)
    )


def rss_bytes() -> int:
    """Resident memory now, after a full GC and glibc's malloc_trim (freed heap pages that
    malloc keeps for reuse are returned first, so what remains is what is live)."""
    import ctypes
    import gc

    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def history_text_bytes(messages: list[Message]) -> int:
    n = 0
    for m in messages:
        n += len(message_text(m.content).encode()) if m.content else 0
        if isinstance(m, AssistantMessage):
            n += len((m.reasoning_content or "").encode())
            n += sum(len(c.function.arguments.encode()) + len(c.function.name) for c in m.tool_calls or ())
    return n


async def main(target: int, turn_tokens: int, trace: bool = False) -> None:
    tok = default_tokenizer()  # K3's real vocabulary, shipped with kimik3
    lines = 2
    while len(tok.encode_text(source_file(0, lines))) < turn_tokens:
        lines *= 2
    lines = int(lines * turn_tokens / len(tok.encode_text(source_file(0, lines)))) // 2 * 2

    @tool
    def read_file(path: str) -> str:
        """Read a file.

        Args:
            path: the file.
        """
        return source_file(int(path.split("_")[1].split(".")[0]), lines)

    turns = 0
    state = {"prompt": 0}

    def reply(messages: list[Message]) -> str:
        nonlocal turns
        turns += 1
        if state["prompt"] >= target:
            return render_output({"reasoning_content": "Enough read.", "content": "Read everything."})
        return render_output({"reasoning_content": f"Next I read module {turns} and look for the bug.",
                              "tool_calls": [{"id": f"c{turns}", "function": {"name": "read_file",
                                              "arguments": {"path": f"src/mod_{turns}.py"}}}]})  # fmt: skip

    engine = ScriptedEngine(reply, tokenizer=tok, chunk_size=64)
    agent = Agent(instructions="You are a careful coding agent.", tools=[read_file], engine=engine,
                  max_turns=10**6, context=ContextPolicy(max_result_chars=10**9, context_window=10**9))  # fmt: skip
    points: list[tuple[int, float]] = []  # (prompt tokens of the turn, CPU seconds of the turn)
    with tempfile.TemporaryDirectory() as tmp:
        session = Path(tmp) / "long.jsonl"
        # What any run costs once per process, whatever its length (the modules a run imports on
        # first use, the sync tools' worker thread), is paid by a 2-turn warm-up run first: the
        # growth below is what the history costs.
        rss_cold = rss_bytes()
        warm_turns = iter(range(2))
        warm = Agent(instructions="Warm up.", tools=[read_file], engine=ScriptedEngine(
            lambda _m: reply([]) if next(warm_turns, None) is not None else render_output({"content": "done"}),
            tokenizer=tok, chunk_size=64))
        await warm.run("Warm up.", session=Path(tmp) / "warm.jsonl")
        turns = 0
        del warm
        rss0 = rss_bytes()
        if trace:
            import tracemalloc

            tracemalloc.start()
            snap0 = tracemalloc.take_snapshot()
        cpu = time.process_time()
        result = None
        rss_live = 0
        async for event in agent.run_stream("Find the bug in the handlers.", session=session):
            if isinstance(event, TurnEndEvent):
                now = time.process_time()
                points.append((event.usage.prompt_tokens, now - cpu))
                state["prompt"] = event.usage.prompt_tokens
                if state["prompt"] >= target:  # the last turn: the run is alive, its state all held
                    rss_live = rss_bytes()
                    if trace and tracemalloc.is_tracing():
                        grown = tracemalloc.take_snapshot().compare_to(snap0, "lineno")
                        tracemalloc.stop()
                cpu = time.process_time()  # the measurement above is not the next turn's work
            elif event.type == "final":
                result = event.result  # type: ignore[union-attr]
        assert result is not None
        rss1 = rss_bytes()
        text = history_text_bytes(result.messages)
        file_size = session.stat().st_size
        history_tokens = points[-1][0]
        del result, agent, engine
        # resume: the baseline reads and JSON-decodes the lines; kimik3 loads typed messages and
        # encodes the whole prompt once (what the next model call needs)
        t0 = time.process_time()
        raw = [json.loads(line) for line in session.read_text(encoding="utf-8").splitlines()]
        base_s = time.process_time() - t0
        t0 = time.process_time()
        history = load_session(session)
        load_s = time.process_time() - t0
        t0 = time.process_time()
        ids = PromptCache().encoder(tok, [read_file.spec], True, "max").encode(history)
        encode_s = time.process_time() - t0
    print(f"K3 real vocabulary ({tok.num_base_tokens} base tokens); {len(points)} turns of ~{turn_tokens} "
          f"tokens; history {history_tokens:,} tokens ({len(ids):,} re-encoded), {text / 1e6:.1f} MB of text", flush=True)

    def at(tokens: int) -> tuple[int, float]:
        near = sorted(points[1:], key=lambda p: abs(p[0] - tokens))[:5]  # the 5 turns nearest
        return int(statistics.median(p[0] for p in near)), statistics.median(p[1] for p in near)

    base_tokens, base_cpu = at(10_000)
    for mark in (10_000, 100_000, 1_000_000):
        tokens, secs = at(mark)
        print(f"CPU per turn at {tokens:>9,} tokens of history: {secs * 1e3:7.2f} ms  ratio to "
              f"{base_tokens:,} tokens {secs / base_cpu:.2f}x (goal <= 1.5x)", flush=True)
    print(f"RSS growth at the last turn, run alive: {(rss_live - rss0) / 1e6:.1f} MB = {(rss_live - rss0) / text:.2f}x "
          f"the history's text (goal < 3x); after the run ended: {(rss1 - rss0) / text:.2f}x; the once-per-process "
          f"cost of a first run (its imports and worker thread, the warm-up run): {(rss0 - rss_cold) / 1e6:.1f} MB", flush=True)
    print(f"RSS before the run {rss0 / 1e6:.1f} MB, at the last turn {rss_live / 1e6:.1f} MB, after the run "
          f"{rss1 / 1e6:.1f} MB", flush=True)
    if trace:
        print(f"live Python allocations the run added, at its last turn (tracemalloc): "
              f"{sum(g.size_diff for g in grown) / 1e6:.2f} MB = {sum(g.size_diff for g in grown) / text:.2f}x the text; "
              "largest lines:", flush=True)
        for g in grown[:8]:
            print(f"  {g.size_diff / 1e3:8.0f} kB  {g.count_diff:6d} blocks  {g.traceback[0]}", flush=True)
    print(f"session file {file_size / 1e6:.1f} MB = {file_size / text:.2f}x the history's text", flush=True)
    copy_s, walk_s = [], []
    for rep in range(9):  # interleaved, alternating order
        for fn, out in ((ids_list, copy_s), (list, walk_s))[:: 1 if rep % 2 else -1]:
            t0 = time.process_time()
            handed = fn(ids)
            out.append(time.process_time() - t0)
            assert len(handed) == len(ids)
            del handed
    walk = sorted(w / c for w, c in zip(walk_s, copy_s, strict=True))
    _, turn_cpu = at(1_000_000)
    print(f"prompt ids handed to an engine ({len(ids):,} ids, CPU, 9 repeats): ids_list "
          f"{statistics.median(copy_s) * 1e3:.1f} ms, list(ids) {statistics.median(walk_s) * 1e3:.1f} ms; "
          f"list(ids) / ids_list {walk[0]:.2f} / {statistics.median(walk):.2f} / {walk[-1]:.2f}x (min / median / max); "
          f"ids_list = {statistics.median(copy_s) / turn_cpu:.2f}x the CPU of a turn at 1M tokens", flush=True)
    print(f"resume (CPU): load_session {load_s:.2f} s + full prompt encode {encode_s:.2f} s = {load_s + encode_s:.2f} s "
          f"(goal < 2 s); ratio to reading + JSON-decoding the {len(raw):,} lines ({base_s:.2f} s): "
          f"{load_s / base_s:.2f}x load, {(load_s + encode_s) / base_s:.2f}x with the encode", flush=True)


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=1_000_000, help="history size to reach (tokens)")
    parser.add_argument("--turn-tokens", type=int, default=1000, help="tokens each tool result adds (small turns: the per-turn growth shows)")
    parser.add_argument("--tracemalloc", action="store_true", help="also print the live allocations the run added, by line")
    args = parser.parse_args()
    anyio.run(main, args.tokens, args.turn_tokens, args.tracemalloc)


if __name__ == "__main__":
    cli()
