"""Smoke-test vLLM 0.32's OpenAI server on the converted SmolLM2 (CPU, eager).

Starts `python -m vllm.entrypoints.openai.api_server` on 127.0.0.1, waits for /health, then calls
/v1/completions with a token-id prompt plus the vLLM extras (skip_special_tokens,
spaces_between_special_tokens, stop_token_ids, return_token_ids), streaming and not, and
/v1/chat/completions; prints the responses and timings, then stops the server (SIGINT, then SIGKILL).

Usage: .venv/bin/python scripts/engine_smoke_server.py [MODEL_DIR] [--port N] [--k3-parsers]
  --k3-parsers adds `--tool-call-parser kimi_k3 --reasoning-parser kimi_k3 --enable-auto-tool-choice`
  (SmolLM2 does not speak K3: this only proves the flags are accepted and the parsers run).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout: float) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            raise SystemExit(f"server exited early with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return time.monotonic() - t0
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit("server not ready in time")


async def exercise(base: str, model: str, k3: bool) -> None:
    from openai import AsyncOpenAI
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    ids = tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}], add_generation_prompt=True, tokenize=True
    )
    ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    stop_id = tok.convert_tokens_to_ids("<|im_end|>")
    client = AsyncOpenAI(base_url=base + "/v1", api_key="EMPTY")

    models = await client.models.list()
    print("models:", [m.id for m in models.data])
    served = models.data[0].id

    extra = {
        "skip_special_tokens": False,
        "spaces_between_special_tokens": False,
        "stop_token_ids": [stop_id],
        "return_token_ids": True,
    }
    t = time.monotonic()
    r = await client.completions.create(model=served, prompt=ids, max_tokens=20, temperature=0, extra_body=extra)
    print(f"completions ({time.monotonic() - t:.2f}s):", r.model_dump_json(exclude_none=True))

    t = time.monotonic()
    stream = await client.completions.create(
        model=served, prompt=ids, max_tokens=20, temperature=0, stream=True,
        stream_options={"include_usage": True}, extra_body=extra,
    )
    async for chunk in stream:
        print("  chunk:", chunk.model_dump_json(exclude_none=True))
    print(f"completions stream: {time.monotonic() - t:.2f}s")

    # Raw HTTP, to see the exact field names the server writes.
    body = {"model": served, "prompt": ids, "max_tokens": 5, "temperature": 0, **extra}
    req = urllib.request.Request(
        base + "/v1/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        print("raw completions:", resp.read().decode())

    msgs = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!", "reasoning_content": "greet back"},
        {"role": "user", "content": "What is 2+2?"},
    ]
    t = time.monotonic()
    c = await client.chat.completions.create(model=served, messages=msgs, max_tokens=20, temperature=0)  # type: ignore[arg-type]
    print(f"chat ({time.monotonic() - t:.2f}s):", c.model_dump_json(exclude_none=True))

    stream2 = await client.chat.completions.create(
        model=served, messages=msgs, max_tokens=12, temperature=0, stream=True,  # type: ignore[arg-type]
        stream_options={"include_usage": True},
    )
    async for chunk in stream2:
        print("  chat chunk:", chunk.model_dump_json(exclude_none=True))

    if k3:
        tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
                  "properties": {"city": {"type": "string"}}}}}]
        c = await client.chat.completions.create(
            model=served, messages=msgs, max_tokens=12, temperature=0, tools=tools,  # type: ignore[arg-type]
            extra_body={"chat_template_kwargs": {"thinking": False}},
        )
        print("chat+k3 parsers, thinking off:", c.model_dump_json(exclude_none=True))
        c = await client.chat.completions.create(model=served, messages=msgs, max_tokens=12, temperature=0)  # type: ignore[arg-type]
        print("chat+k3 parsers, default (thinking on):", c.model_dump_json(exclude_none=True))
    await client.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default=os.path.join(os.environ.get("KIMIK3_CACHE", ".cache"),
                                                             "smollm2-135m-instruct"))
    ap.add_argument("--port", type=int, default=18431)
    ap.add_argument("--k3-parsers", action="store_true")
    a = ap.parse_args()
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE=os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"))
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", a.model, "--enforce-eager",
           "--host", "127.0.0.1", "--port", str(a.port), "--max-model-len", "2048"]
    if a.k3_parsers:
        cmd += ["--tool-call-parser", "kimi_k3", "--reasoning-parser", "kimi_k3", "--enable-auto-tool-choice"]
    print("$", " ".join(cmd), flush=True)
    t0 = time.monotonic()
    with open("/tmp/vllm_server_smoke.log", "wb") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        ready = wait_ready(f"http://127.0.0.1:{a.port}", proc, 300)
        print(f"ready after {ready:.1f}s (log /tmp/vllm_server_smoke.log)", flush=True)
        asyncio.run(exercise(f"http://127.0.0.1:{a.port}", a.model, a.k3_parsers))
    finally:
        t1 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        print(f"server stopped in {time.monotonic() - t1:.1f}s (rc {proc.returncode}); total {time.monotonic() - t0:.1f}s")


if __name__ == "__main__":
    main()
