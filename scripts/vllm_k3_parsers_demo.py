"""Run vLLM 0.32's own Kimi K3 output parsers on K3 output texts: a differential-harness example.

For each case of tests/data/k3/parse_cases.json (else ../shared/fixtures/k3/, or a path given with
--cases) this runs, with a stand-in tokenizer (no model files needed):

  1. KimiK3ReasoningParser.extract_reasoning(text, request)            (non-streaming)
  2. KimiK3ReasoningParser.extract_reasoning_streaming(...) per token  (streaming)
  3. KimiK3ToolParser.extract_tool_calls(rest, request)                (non-streaming, on the
     reasoning parser's remainder, as the server does)
  4. KimiK3ToolParser.extract_tool_calls_streaming(...) per token      (streaming, on the remainder)
  5. The server's composed parser (ParserManager.get_parser("kimi_k3", "kimi_k3") -> KimiK3Parser):
     .parse(text, request, enable_auto_tools=True) and .parse_delta(...) per token,

and prints the results next to the fixture's expectation. "Per token" means the text is cut the way
the engine streams it: each marker string is one token, every other character one token (or
--group N tokens per delta).

Usage: .venv/bin/python scripts/vllm_k3_parsers_demo.py [CASE_NAME ...] [--all] [--group N] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CASE_FILES = [
    ROOT / "tests" / "data" / "k3" / "parse_cases.json",
    ROOT.parent / "shared" / "fixtures" / "k3" / "parse_cases.json",
]

# Marker strings -> ids as in the K3 tokenizer_config.json (see spec section 1).
MARKERS = {"<|end_of_msg|>": 163586, "<|open|>": 163587, "<|close|>": 163588, "<|sep|>": 163589}
NUM_BASE_TOKENS = 163584


class StandInK3Tokenizer:
    """The minimum vLLM's kimi_k3 parsers touch on a tokenizer.

    - KimiK3ToolParser: only needs the object to be truthy (`if not self.model_tokenizer: raise`);
      so do NOT give it a __len__ that can return 0. `.vocab` (cached get_vocab()) is never used by it.
    - KimiK3ReasoningParser: `encode(text, add_special_tokens=False) -> list[int]` for the three
      marker strings `<|open|>think<|sep|>`, `<|close|>think<|sep|>`, `<|open|>response<|sep|>`; it then
      searches those id sub-sequences in generated ids (is_reasoning_end*, extract_content_ids).
    - Everything else here (get_vocab, convert_tokens_to_ids, decode, ...) is for completeness.

    Each non-marker character gets its own id (its code point, folded below the special range),
    NOT one shared dummy id: with a single dummy id `<|close|>tools<|sep|>` encodes exactly like
    `<|close|>think<|sep|>` (both 5 letters) and the reasoning parser's token-id checks misfire.
    """

    def __init__(self) -> None:
        self._id_to_marker = {v: k for k, v in MARKERS.items()}

    def __bool__(self) -> bool:
        return True

    def char_id(self, ch: str) -> int:
        cp = ord(ch)
        return cp if cp < NUM_BASE_TOKENS else cp % NUM_BASE_TOKENS

    def tokenize(self, text: str) -> list[str]:
        """Split into marker strings and single characters (the engine's streaming granularity here)."""
        out: list[str] = []
        i = 0
        while i < len(text):
            for m in MARKERS:
                if text.startswith(m, i):
                    out.append(m)
                    i += len(m)
                    break
            else:
                out.append(text[i])
                i += 1
        return out

    def encode(self, text: str, add_special_tokens: bool = False, **_: Any) -> list[int]:
        return [MARKERS.get(t) or self.char_id(t) for t in self.tokenize(text)]

    def convert_tokens_to_ids(self, tokens: str | list[str]) -> int | list[int]:
        if isinstance(tokens, str):
            return MARKERS.get(tokens, self.char_id(tokens[0]) if tokens else 0)
        return [self.convert_tokens_to_ids(t) for t in tokens]  # type: ignore[misc]

    def get_vocab(self) -> dict[str, int]:
        return dict(MARKERS)

    def decode(self, ids: list[int], **_: Any) -> str:
        return "".join(self._id_to_marker.get(i, chr(i)) for i in ids)


def load_cases(path: str | None) -> list[dict[str, Any]]:
    candidates = [Path(path)] if path else CASE_FILES
    for p in candidates:
        if p.is_file():
            return list(json.loads(p.read_text(encoding="utf-8"))["cases"])
    raise SystemExit(f"no parse_cases.json at {[str(c) for c in candidates]}")


def make_request(with_tools: bool) -> Any:
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    tools = [
        {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}
    ]
    return ChatCompletionRequest(
        model="kimi-k3",
        messages=[{"role": "user", "content": "hi"}],
        tools=tools if with_tools else None,
    )


def chunks(tok: StandInK3Tokenizer, text: str, group: int) -> list[tuple[str, list[int]]]:
    toks = tok.tokenize(text)
    out = []
    for i in range(0, len(toks), group):
        piece = "".join(toks[i : i + group])
        out.append((piece, tok.encode(piece)))
    return out


def calls_of(tool_calls: Any) -> list[dict[str, Any]]:
    out = []
    for tc in tool_calls or []:
        fn = getattr(tc, "function", tc)
        name = fn.name if not isinstance(fn, dict) else fn.get("name")
        args = fn.arguments if not isinstance(fn, dict) else fn.get("arguments")
        out.append({"name": name, "arguments": json.loads(args) if args else None})
    return out


def run_case(case: dict[str, Any], group: int) -> dict[str, Any]:
    from vllm.parser.parser_manager import ParserManager
    from vllm.reasoning.kimi_k3_reasoning_parser import KimiK3ReasoningParser
    from vllm.tool_parsers.kimi_k3_tool_parser import KimiK3ToolParser

    tok = StandInK3Tokenizer()
    text = case["text"]
    ctk = {"thinking": bool(case["thinking"])}
    request = make_request(with_tools=True)
    res: dict[str, Any] = {"name": case["name"], "expect": case["expect"]}

    # 1. reasoning, non-streaming
    rp = KimiK3ReasoningParser(tok, chat_template_kwargs=ctk)
    reasoning, rest = rp.extract_reasoning(text, request)
    res["reasoning_parser"] = {"reasoning": reasoning, "rest": rest}

    # 2. reasoning, streaming (fresh parser per stream: parsers are stateful)
    rp = KimiK3ReasoningParser(tok, chat_template_kwargs=ctk)
    prev_text, prev_ids = "", []
    r_stream, c_stream = "", ""
    for delta_text, delta_ids in chunks(tok, text, group):
        cur_text, cur_ids = prev_text + delta_text, prev_ids + delta_ids
        dm = rp.extract_reasoning_streaming(prev_text, cur_text, delta_text, prev_ids, cur_ids, delta_ids)
        if dm is not None:
            r_stream += dm.reasoning or ""
            c_stream += dm.content or ""
        prev_text, prev_ids = cur_text, cur_ids
    res["reasoning_parser_streaming"] = {"reasoning": r_stream, "rest": c_stream}

    # 3. tool parser, non-streaming, on the remainder
    tp = KimiK3ToolParser(tok, tools=None)
    info = tp.extract_tool_calls(rest or "", request)
    res["tool_parser"] = {
        "tools_called": info.tools_called,
        "content": info.content,
        "tool_calls": calls_of(info.tool_calls),
    }

    # 4. tool parser, streaming, on the remainder
    tp = KimiK3ToolParser(tok, tools=None)
    prev_text, prev_ids = "", []
    content, calls = "", []
    for delta_text, delta_ids in chunks(tok, rest or "", group):
        cur_text, cur_ids = prev_text + delta_text, prev_ids + delta_ids
        dm = tp.extract_tool_calls_streaming(
            prev_text, cur_text, delta_text, prev_ids, cur_ids, delta_ids, request
        )
        if dm is not None:
            content += dm.content or ""
            calls += calls_of(dm.tool_calls)
        prev_text, prev_ids = cur_text, cur_ids
    res["tool_parser_streaming"] = {"content": content, "tool_calls": calls}

    # 5. the server's composed parser
    parser_cls = ParserManager.get_parser(
        tool_parser_name="kimi_k3", reasoning_parser_name="kimi_k3", enable_auto_tools=True, tokenizer=tok
    )
    assert parser_cls is not None
    parser = parser_cls(tok, request.tools, chat_template_kwargs=ctk)
    reasoning, content_, tool_calls = parser.parse(text, request, enable_auto_tools=True)
    res["server_parse"] = {
        "class": type(parser).__mro__[1].__name__,
        "reasoning": reasoning,
        "content": content_,
        "tool_calls": calls_of(tool_calls),
    }
    parser = parser_cls(tok, request.tools, chat_template_kwargs=ctk)
    pieces = chunks(tok, text, group)
    r, c, calls = "", "", []
    # The server passes the prompt ids on the first delta; a K3 thinking prompt ends with
    # <|open|>think<|sep|>, a non-thinking one with <|open|>response<|sep|>.
    prompt_ids = tok.encode("<|open|>think<|sep|>" if ctk["thinking"] else "<|open|>response<|sep|>")
    for i, (delta_text, delta_ids) in enumerate(pieces):
        dm = parser.parse_delta(
            delta_text, delta_ids, request, prompt_ids if i == 0 else None, finished=i == len(pieces) - 1
        )
        if dm is not None:
            r += dm.reasoning or ""
            c += dm.content or ""
            calls += calls_of(dm.tool_calls)
    res["server_parse_delta"] = {"reasoning": r, "content": c, "tool_calls": calls}
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("names", nargs="*")
    ap.add_argument("--all", action="store_true")
    ap.add_argument("--group", type=int, default=1, help="tokens per streamed delta")
    ap.add_argument("--cases")
    ap.add_argument("--json", action="store_true", help="print one JSON object per case")
    a = ap.parse_args()
    cases = load_cases(a.cases)
    if a.all:
        chosen = cases
    else:
        names = a.names or ["parallel_calls_with_content"]
        chosen = [c for c in cases if c["name"] in names]
        if len(chosen) != len(names):
            raise SystemExit(f"unknown case; have {[c['name'] for c in cases]}")
    for case in chosen:
        res = run_case(case, a.group)
        if a.json:
            print(json.dumps(res, ensure_ascii=False))
            continue
        print(f"== {res['name']}  (thinking={case['thinking']})")
        print(f"   text: {case['text']!r}")
        for k, v in res.items():
            if k != "name":
                print(f"   {k:27s} {json.dumps(v, ensure_ascii=False)}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
