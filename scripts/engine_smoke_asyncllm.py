"""Smoke-test vLLM 0.32's in-process AsyncLLM on the converted SmolLM2 (CPU, eager).

Exercises: start-up from AsyncEngineArgs, a TokensPrompt with DELTA streaming, stop_token_ids,
two concurrent requests, abort(request_id) mid-stream, generator close (implicit abort), shutdown().
Prints every field a kimik3 engine adapter reads, and timings.

Usage: VLLM_CPU_KVCACHE_SPACE=1 .venv/bin/python scripts/engine_smoke_asyncllm.py [MODEL_DIR]
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

MODEL = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.environ.get("KIMIK3_CACHE", ".cache"), "smollm2-135m-instruct"
)


def show(tag: str, out: object) -> None:
    o = out.outputs[0]  # type: ignore[attr-defined]
    print(
        f"  [{tag}] request_id={out.request_id!r} finished={out.finished} "  # type: ignore[attr-defined]
        f"n_prompt={len(out.prompt_token_ids or [])} text={o.text!r} token_ids={list(o.token_ids)} "  # type: ignore[attr-defined]
        f"finish_reason={o.finish_reason!r} stop_reason={o.stop_reason!r}",
        flush=True,
    )


async def main() -> None:
    from transformers import AutoTokenizer
    from vllm import AsyncEngineArgs, SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.sampling_params import RequestOutputKind
    from vllm.v1.engine.async_llm import AsyncLLM

    hf_tok = AutoTokenizer.from_pretrained(MODEL)
    ids = hf_tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}], add_generation_prompt=True, tokenize=True
    )
    ids = list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)
    stop_id = hf_tok.convert_tokens_to_ids("<|im_end|>")
    print(f"prompt: {len(ids)} ids, stop id {stop_id}")

    t0 = time.monotonic()
    args = AsyncEngineArgs(model=MODEL, enforce_eager=True, max_model_len=2048, disable_log_stats=True)
    engine = AsyncLLM.from_engine_args(args)
    print(f"start-up: {time.monotonic() - t0:.1f}s; tokenizer={type(engine.get_tokenizer()).__name__}", flush=True)

    def params(max_tokens: int) -> SamplingParams:
        return SamplingParams(
            max_tokens=max_tokens,
            temperature=0.0,
            skip_special_tokens=False,
            spaces_between_special_tokens=False,
            stop_token_ids=[stop_id],
            output_kind=RequestOutputKind.DELTA,
        )

    # 1. Streaming DELTA with a stop id.
    t1 = time.monotonic()
    n = 0
    first = None
    async for out in engine.generate(TokensPrompt(prompt_token_ids=ids), params(40), request_id="r1"):
        if first is None:
            first = time.monotonic() - t1
        n += len(out.outputs[0].token_ids)
        show("r1", out)
    dt = time.monotonic() - t1
    print(f"r1: {n} tokens in {dt:.2f}s (first delta after {first:.2f}s)", flush=True)

    # 2. Without a stop id match: hits max_tokens -> finish_reason 'length'.
    async for out in engine.generate(TokensPrompt(prompt_token_ids=ids), params(5), request_id="r2"):
        show("r2", out)

    # 3. Concurrent requests.
    async def collect(rid: str) -> str:
        text = ""
        async for out in engine.generate(TokensPrompt(prompt_token_ids=ids), params(12), request_id=rid):
            text += out.outputs[0].text
        return text

    print("concurrent:", await asyncio.gather(collect("c1"), collect("c2")), flush=True)

    # 4. abort(request_id) with the EXTERNAL id while streaming.
    seen = 0
    async for out in engine.generate(TokensPrompt(prompt_token_ids=ids), params(200), request_id="r3"):
        show("r3", out)
        seen += 1
        if seen == 3:
            await engine.abort("r3")
    print(f"r3 generator ended after abort; unfinished={engine.get_num_unfinished_requests()}", flush=True)

    # 5. Closing the async generator early (what cancelling a consumer does) aborts internally.
    gen = engine.generate(TokensPrompt(prompt_token_ids=ids), params(200), request_id="r4")
    async for out in gen:
        show("r4", out)
        break
    await gen.aclose()
    await asyncio.sleep(0.2)
    print(f"r4 closed; unfinished={engine.get_num_unfinished_requests()}", flush=True)

    # 6. Cancelling the consuming task.
    async def consume() -> None:
        async for _ in engine.generate(TokensPrompt(prompt_token_ids=ids), params(200), request_id="r5"):
            pass

    task = asyncio.create_task(consume())
    await asyncio.sleep(1.0)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.2)
    print(f"r5 cancelled; unfinished={engine.get_num_unfinished_requests()}", flush=True)

    # 7. Request id reuse after finishing is fine (ids are randomised internally).
    async for out in engine.generate(TokensPrompt(prompt_token_ids=ids), params(3), request_id="r1"):
        show("r1-again", out)

    # 8. A non-EOS stop id: the stop token is in token_ids, not in text; stop_reason is the id.
    p = params(40)
    p.stop_token_ids = [30]  # "." in SmolLM2
    async for out in engine.generate(TokensPrompt(prompt_token_ids=ids), p, request_id="r6"):
        if out.finished:
            show("r6-final", out)
            print(f"  num_cached_tokens={out.num_cached_tokens} metrics={type(out.metrics).__name__}")

    # 9. The non-deprecated input path: render the TokensPrompt first (no warning).
    from vllm.renderers.inputs.preprocess import parse_model_prompt

    renderer = engine.renderer
    (engine_input,) = await renderer.render_cmpl_async(
        [parse_model_prompt(engine.model_config, TokensPrompt(prompt_token_ids=ids))],
        renderer.default_cmpl_tok_params,
    )
    print(f"engine_input keys={sorted(engine_input)} type={engine_input.get('type')!r}")
    async for out in engine.generate(engine_input, params(3), request_id="r7"):
        show("r7", out)

    # 10. Errors: prompt longer than max_model_len, token id out of vocab.
    for rid, bad in (("e1", list(ids) * 60), ("e2", [*ids, 10**6])):
        try:
            async for _ in engine.generate(TokensPrompt(prompt_token_ids=bad), params(3), request_id=rid):
                pass
        except Exception as e:
            print(f"{rid}: {type(e).__module__}.{type(e).__name__}: {str(e)[:160]}")

    t2 = time.monotonic()
    engine.shutdown()
    print(f"shutdown: {time.monotonic() - t2:.2f}s; errored={engine.errored}", flush=True)
    try:
        async for _ in engine.generate(TokensPrompt(prompt_token_ids=ids), params(3), request_id="dead"):
            pass
    except Exception as e:
        print(f"after shutdown: {type(e).__module__}.{type(e).__name__}: {e}")
    # vLLM keeps the engine alive until interpreter teardown, when AsyncLLM.__del__ calls shutdown()
    # again and prints "Exception ignored ... TypeError: 'NoneType' object is not callable".
    # Shadowing the bound method after the real shutdown silences that.
    engine.shutdown = lambda *a, **k: None  # type: ignore[method-assign]


if __name__ == "__main__":
    asyncio.run(main())
    print("done", flush=True)
