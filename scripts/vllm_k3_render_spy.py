"""Record exactly what vLLM 0.32's Kimi K3 renderer hands to the tokenizer's apply_chat_template.

Builds a throw-away model directory from the converted SmolLM2 whose tokenizer is a remote-code
`SpyTokenizer` (tokenizer_config.json `auto_map`, like the K3 checkpoint's `tokenization_kimi.py`)
that appends each call's `conversation`, `tools` and kwargs to a JSONL file and then renders with
SmolLM2's own template. Starts the OpenAI server with `--tokenizer-mode kimi_k3 --trust-remote-code`
plus the kimi_k3 parsers, sends a few chat requests (tools + tool history, reasoning_content on an
assistant message, reasoning_effort, thinking off, tool_choice, response_format, multi-part text)
and prints the recorded calls.

Usage: .venv/bin/python scripts/vllm_k3_render_spy.py [MODEL_DIR] [--port N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

SPY_MODULE = '''
import json, os
from transformers import TokenizersBackend

class SpyTokenizer(TokenizersBackend):
    def apply_chat_template(self, conversation, tools=None, **kwargs):
        rec = {"conversation": conversation, "tools": tools, "kwargs": dict(kwargs)}
        with open(os.environ["SPY_LOG"], "a") as f:
            f.write(json.dumps(rec, default=repr) + "\\n")
        for k in ("thinking", "thinking_effort", "tool_choice", "response_format"):
            kwargs.pop(k, None)
        return super().apply_chat_template(conversation, tools=tools, **kwargs)
'''

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]

REQUESTS = {
    "tools_history_reasoning_content": {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather in Paris and Tokyo?"},
            {
                "role": "assistant",
                "content": "",
                "reasoning_content": "two cities",
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
                    {"id": "c2", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Tokyo"}'}},
                ],
            },
            {"role": "tool", "tool_call_id": "c2", "content": "rain"},
            {"role": "tool", "tool_call_id": "c1", "content": "sun"},
        ],
        "tools": TOOLS,
    },
    "reasoning_field_and_effort_low": {
        "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello!", "reasoning": "greet"},
            {"role": "user", "content": [{"type": "text", "text": "part one"}, {"type": "text", "text": "part two"}]},
        ],
        "reasoning_effort": "low",
    },
    "thinking_off_tool_choice_required": {
        "messages": [{"role": "user", "content": "Weather in Oslo?"}],
        "tools": TOOLS,
        "tool_choice": "required",
        "chat_template_kwargs": {"thinking": False},
    },
    "reasoning_effort_none_json_schema": {
        "messages": [{"role": "user", "content": "Give JSON"}],
        "reasoning_effort": "none",
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "x", "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}},
        },
    },
    "reasoning_effort_medium_rejected": {
        "messages": [{"role": "user", "content": "Hi"}],
        "reasoning_effort": "medium",
    },
}


def post(base: str, path: str, body: dict) -> tuple[int, str]:
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default=os.path.join(os.environ.get("KIMIK3_CACHE", ".cache"),
                                                             "smollm2-135m-instruct"))
    ap.add_argument("--port", type=int, default=18432)
    a = ap.parse_args()
    src = Path(a.model).resolve()
    work = Path(tempfile.mkdtemp(prefix="k3spy-"))
    for name in ("config.json", "tokenizer.json", "chat_template.jinja", "generation_config.json"):
        shutil.copy(src / name, work / name)
    (work / "model.safetensors").symlink_to(src / "model.safetensors")
    (work / "tokenization_spy.py").write_text(SPY_MODULE)
    cfg = json.loads((src / "tokenizer_config.json").read_text())
    cfg["auto_map"] = {"AutoTokenizer": ["tokenization_spy.SpyTokenizer", None]}
    cfg["tokenizer_class"] = "SpyTokenizer"
    (work / "tokenizer_config.json").write_text(json.dumps(cfg))
    log = work / "calls.jsonl"
    env = dict(os.environ, SPY_LOG=str(log), VLLM_CPU_KVCACHE_SPACE=os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"))
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(work),
           "--served-model-name", "k3spy", "--enforce-eager", "--host", "127.0.0.1", "--port", str(a.port),
           "--max-model-len", "2048", "--tokenizer-mode", "kimi_k3", "--trust-remote-code",
           "--tool-call-parser", "kimi_k3", "--reasoning-parser", "kimi_k3", "--enable-auto-tool-choice"]
    print("$", " ".join(cmd), flush=True)
    base = f"http://127.0.0.1:{a.port}"
    with open(work / "server.log", "wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        t0 = time.monotonic()
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"server exited {proc.returncode}; see {work / 'server.log'}")
            try:
                with urllib.request.urlopen(base + "/health", timeout=2):
                    break
            except OSError:
                time.sleep(0.5)
            if time.monotonic() - t0 > 300:
                raise SystemExit("not ready")
        print(f"ready after {time.monotonic() - t0:.1f}s", flush=True)
        for name, body in REQUESTS.items():
            before = log.read_text().count("\n") if log.exists() else 0
            status, text = post(base, "/v1/chat/completions", {"model": "k3spy", "max_tokens": 8, **body})
            lines = log.read_text().splitlines()[before:] if log.exists() else []
            print(f"\n== {name}: HTTP {status}")
            if status != 200:
                print("   error:", text[:300])
            for line in lines:
                print("   apply_chat_template call:", line)
            if status == 200:
                print("   response message:", json.dumps(json.loads(text)["choices"][0]["message"]))
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
