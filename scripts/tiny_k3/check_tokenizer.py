"""Check that the tiny model's HF tokenizer class gives kimik3's ids, through transformers and
through vLLM's ``kimi_k3`` tokenizer mode and renderer.

1. ``AutoTokenizer.from_pretrained(model, trust_remote_code=True)`` loads
   ``tokenization_kimi_k3.K3TikTokenTokenizer``; its ``apply_chat_template`` equals
   ``kimik3.K3Tokenizer.encode_messages`` on the held-out episodes (thinking on/off, every effort,
   tool_choice, response_format, with and without the generation prompt), and ``decode`` /
   ``encode`` agree with kimik3.
2. vLLM (when installed): ``vllm.tokenizers.get_tokenizer(model, tokenizer_mode="kimi_k3",
   trust_remote_code=True)`` loads the same class; ``KimiK3Renderer._apply_chat_template`` (the
   code path of ``--tokenizer-mode kimi_k3``), fed conversations the way vLLM's chat parsing hands
   them over (tool-call arguments as dicts, tool messages re-ordered and tagged by
   ``_normalize_k3_tool_messages``, ``reasoning`` instead of ``reasoning_content``), returns
   kimik3's ids; vLLM's K3 reasoning parser finds the think markers as token ids; vLLM's
   incremental detokenization of generated ids (slow-tokenizer path, markers kept, no spaces
   between special tokens) gives kimik3's text.

Usage: python scripts/tiny_k3/check_tokenizer.py [--model models/k3-tiny] [--data .cache/tiny_k3] [--n 200]
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import sys
from pathlib import Path
from typing import Any

from kimik3.formats.k3._tokenizer import K3Tokenizer

REPO = Path(__file__).resolve().parents[2]

SETTINGS: list[dict[str, Any]] = [
    {"thinking": True, "thinking_effort": "max"},
    {"thinking": True, "thinking_effort": "high"},
    {"thinking": True, "thinking_effort": "low"},
    {"thinking": True, "thinking_effort": None},
    {"thinking": False, "thinking_effort": None},
    {"thinking": True, "thinking_effort": "max", "tool_choice": "required"},
    {"thinking": True, "thinking_effort": "max", "response_format": {"type": "json_object"}},
]


def vllm_conversation(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as vLLM's chat parsing hands them to the renderer: tool-call arguments parsed to
    dicts (``_postprocess_messages``), reasoning under ``reasoning``."""
    out = []
    for m in copy.deepcopy(messages):
        if m["role"] == "assistant":
            for c in m.get("tool_calls") or []:
                c["function"]["arguments"] = json.loads(c["function"]["arguments"])
            if "reasoning_content" in m:
                m["reasoning"] = m.pop("reasoning_content")
        out.append(m)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=REPO / "models" / "k3-tiny")
    ap.add_argument("--data", type=Path, default=REPO / ".cache" / "tiny_k3")
    ap.add_argument("--n", type=int, default=200)
    args = ap.parse_args()
    from transformers import AutoTokenizer

    k3 = K3Tokenizer.from_pretrained(args.model)
    tools = json.loads((args.data / "episodes_meta.json").read_text())["tools"]
    with (args.data / "episodes_heldout.jsonl").open() as f:
        episodes = [json.loads(line)["messages"] for line in itertools.islice(f, args.n)]
    cases = []
    for i, msgs in enumerate(episodes):
        s = SETTINGS[i % len(SETTINGS)]
        cut = len(msgs) if i % 2 else next(j for j, m in enumerate(msgs) if m["role"] == "user") + 1
        cases.append((msgs[:cut], s, bool(i % 3)))
    failures = 0

    hf = AutoTokenizer.from_pretrained(args.model, trust_remote_code=True)
    print(f"transformers: {type(hf).__module__}.{type(hf).__name__}, {len(hf)} ids, eos {hf.eos_token}={hf.eos_token_id}")
    for msgs, s, gen in cases:
        want = k3.encode_messages(msgs, tools, add_generation_prompt=gen, **s)
        got = hf.apply_chat_template(msgs, tools=tools, add_generation_prompt=gen, **s)
        text = hf.apply_chat_template(msgs, tools=tools, add_generation_prompt=gen, tokenize=False, **s)
        if got != want or hf.decode(want) != k3.decode(want) or text != k3.decode(want):
            failures += 1
        for m in msgs:
            content = m.get("content")
            if isinstance(content, str) and content and (
                hf.encode(content, add_special_tokens=False) != k3.encode_text(content)
            ):
                failures += 1
    print(f"  apply_chat_template / decode / encode vs kimik3 on {len(cases)} conversations: {failures} mismatches")

    try:
        from vllm.reasoning.kimi_k3_reasoning_parser import KimiK3ReasoningParser
        from vllm.renderers.kimi_k3 import KimiK3Renderer, _normalize_k3_tool_messages
        from vllm.renderers.params import ChatParams
        from vllm.tokenizers import get_tokenizer
    except ImportError as e:
        print(f"vLLM: not checked ({e})")
        return 1 if failures else 0
    vt = get_tokenizer(str(args.model), tokenizer_mode="kimi_k3", trust_remote_code=True)
    print(f"vLLM kimi_k3 mode: {type(vt).__name__} (base {type(vt).__mro__[1].__name__})")
    renderer = object.__new__(KimiK3Renderer)  # only _apply_chat_template is exercised
    renderer.tokenizer = vt
    vfail = 0
    for msgs, s, gen in cases:
        want = k3.encode_messages(msgs, tools, add_generation_prompt=gen, **s)
        # what the OpenAI server puts in chat_template_kwargs (ChatCompletionRequest.build_chat_params)
        ctk: dict[str, Any] = {"tools": tools, "add_generation_prompt": gen, "continue_final_message": False,
                               "documents": None}
        if not s["thinking"]:
            ctk.update(reasoning_effort="none", enable_thinking=False)
        elif s["thinking_effort"] is None:
            ctk["thinking_effort"] = None  # only reachable in-process: the server drops null kwargs
        else:
            ctk.update(reasoning_effort=s["thinking_effort"], enable_thinking=True)
        params = ChatParams(
            chat_template_kwargs=ctk, tool_choice=s.get("tool_choice"), response_format=s.get("response_format")
        )
        conv = _normalize_k3_tool_messages(vllm_conversation(msgs))
        got = renderer._apply_chat_template(conv, params)
        if got != want:
            vfail += 1
    print(f"  KimiK3Renderer._apply_chat_template vs kimik3 on {len(cases)} conversations: {vfail} mismatches")
    parser = KimiK3ReasoningParser(vt)
    ids = k3.encode_messages(episodes[0][:2], tools)
    open_ids = parser._think_open_ids
    print(f"  reasoning parser think-open ids {open_ids}; prompt ends with them: {ids[-len(open_ids):] == open_ids}")
    if ids[-len(open_ids) :] != open_ids:
        vfail += 1
    # streaming detokenization as vLLM does it for a slow tokenizer (the parsers force
    # skip_special_tokens=False, spaces_between_special_tokens=False)
    from vllm.tokenizers.detokenizer_utils import convert_prompt_ids_to_tokens, detokenize_incrementally

    dfail = 0
    for msgs in episodes[:50]:
        full = k3.encode_messages(msgs, tools, add_generation_prompt=False)
        prompt = k3.encode_messages(msgs[:2], tools)
        out_ids = full[len(prompt) :]
        tokens, prefix, read = convert_prompt_ids_to_tokens(vt, prompt, skip_special_tokens=False)
        text = ""
        ids = list(prompt)
        for t in out_ids:
            ids.append(t)
            new, delta, prefix, read = detokenize_incrementally(
                vt, ids, tokens, prefix, read, skip_special_tokens=False, spaces_between_special_tokens=False
            )
            tokens.extend(new)
            text += delta
        if text != k3.decode(out_ids):
            dfail += 1
    print(f"  incremental detokenization (vLLM slow path) vs kimik3 decode on 50 outputs: {dfail} mismatches")
    failures += vfail + dfail
    print("OK" if not failures else f"FAILED ({failures})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
