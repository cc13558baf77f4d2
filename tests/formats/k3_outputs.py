"""A small deterministic generator of raw K3 outputs with their intended parse (test helper).

Each :class:`Sample` is built from parts (reasoning, content, 0-3 calls with typed arguments) and
optional model slips of spec §3; ``expect`` is what the model *meant*, derived from the parts and
the spec's recovery rules, never from a parser. Used by the property tests of
``test_k3_parse.py`` and the differential test against vLLM (``test_k3_parse_vllm.py``).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

OPEN, CLOSE, SEP, EOM = "<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"

# Slips (spec §3 "Known model misbehaviours") and kimik3 decisions a sample may carry.
SLIPS = (
    "no_think_close",  # <|close|>think<|sep|> omitted
    "skip_think",  # no reasoning, the output opens response/tools at once
    "no_response_close",  # <|close|>response<|sep|> omitted
    "no_response",  # no response channel at all before the tools (calls only)
    "no_tools_close",  # <|close|>tools<|sep|> omitted
    "cut_reasoning",  # max_tokens inside the reasoning
    "cut_content",  # max_tokens inside the response text
    "cut_in_call",  # max_tokens inside the last call's string argument
    "partial_marker_end",  # output ends with a partial marker (it is text)
    "text_after_close",  # a hallucinated next turn after the message close
    "end_of_msg",  # <|end_of_msg|> kept in the text
)


@dataclass
class Sample:
    """One generated output and its intended parse."""

    name: str
    text: str
    thinking: bool
    finish_reason: str | None
    slips: tuple[str, ...]
    expect: dict[str, Any] = field(default_factory=dict)


_WORDS = (
    "the", "user", "wants", "a", "plan", "Paris", "東京", "naïve", "x<y", "a&b", "'quoted'", '"dq"',
    "back\\slash", "tab\there", "emoji🙂", "line\nbreak", "json{", "[1,", "50%", "<b>", "|pipe|",
)  # fmt: skip
_TOOLS = ("get_weather", "read_file", "write_file", "bash", "search", "f")
_KEYS = ("path", "city", "command", "q", "n", "flag", "opts", "items", "note", "a\"b", "x&y")


def _text(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(lo, hi)))


def _cut(rng: random.Random, text: str) -> str:
    # A prefix of text, never ending in "<": a trailing "<" cannot be told from a partial marker.
    cut = text[: rng.randint(0, len(text))]
    return cut[:-1] if cut.endswith("<") else cut


def _value(rng: random.Random) -> tuple[str, Any]:
    kind = rng.choice(("string", "string", "number", "boolean", "null", "object", "array"))
    if kind == "string":
        return kind, _text(rng, 1, 12)
    if kind == "number":
        return kind, rng.choice((0, 7, -3, 2.5, 10**12, 1e-3))
    if kind == "boolean":
        return kind, rng.random() < 0.5
    if kind == "null":
        return kind, None
    if kind == "object":
        return kind, {"k": _text(rng, 1, 2), "n": rng.randint(0, 9), "nested": {"ok": True}}
    return kind, [_text(rng, 1, 2), rng.randint(0, 9), None]


def _attr(value: str) -> str:
    return value.replace("&", "&amp;").replace('"', "&quot;")


def _open(tag: str, **attrs: str) -> str:
    return OPEN + tag + "".join(f' {k}="{_attr(v)}"' for k, v in attrs.items()) + SEP


def _close(tag: str) -> str:
    return CLOSE + tag + SEP


def generate(seed: int) -> Sample:
    """The sample for ``seed`` (deterministic)."""
    rng = random.Random(seed)
    thinking = rng.random() < 0.8
    reasoning = _text(rng, 1, 20) if thinking else None
    content = _text(rng, 1, 15) if rng.random() < 0.7 else ""
    calls: list[tuple[str, dict[str, Any], list[tuple[str, str]]]] = []
    for _ in range(rng.choice((0, 0, 1, 1, 2, 3))):
        args: dict[str, Any] = {}
        typed: list[tuple[str, str]] = []
        for key in rng.sample(_KEYS, rng.randint(0, 3)):
            kind, value = _value(rng)
            args[key] = value
            typed.append((key, kind))
        calls.append((rng.choice(_TOOLS), args, typed))

    slips: set[str] = set()
    if thinking and rng.random() < 0.15:
        slips.add("skip_think")
        reasoning = ""
    elif thinking and rng.random() < 0.15:
        slips.add("no_think_close")
    if rng.random() < 0.1:
        slips.add("no_response_close")
    if calls and not content and rng.random() < 0.2:
        slips.add("no_response")
    if calls and rng.random() < 0.15:
        slips.add("no_tools_close")
    cut = rng.random()
    if cut < 0.06 and thinking and reasoning:
        slips = {"cut_reasoning"} | (slips & {"no_think_close"})
    elif cut < 0.12 and content:
        slips.add("cut_content")
    elif cut < 0.2 and calls and any(kind == "string" for kind in (k for _, k in calls[-1][2])):
        slips.add("cut_in_call")
    elif cut < 0.26:
        slips.add("partial_marker_end")
    elif cut < 0.32:
        slips.add("text_after_close")
    elif cut < 0.38:
        slips.add("end_of_msg")
    if "skip_think" in slips and "no_response" in slips and not calls:
        slips.discard("no_response")

    out: list[str] = []
    exp_reasoning = reasoning
    exp_content = content
    exp_calls = [(name, args) for name, args, _ in calls]
    truncated = False
    finish_reason: str | None = "stop"

    if thinking:
        assert reasoning is not None
        if "cut_reasoning" in slips:
            text = _cut(rng, reasoning)
            return Sample(
                f"s{seed}", text, thinking, "length", tuple(sorted(slips)),
                _expect(text, "", [], True),
            )  # fmt: skip
        out.append(reasoning)
        if "skip_think" not in slips and "no_think_close" not in slips:
            out.append(_close("think"))
    if "no_response" not in slips:
        if thinking:
            out.append(_open("response"))
        if "cut_content" in slips:
            cut_content = _cut(rng, content)
            out.append(cut_content)
            return Sample(
                f"s{seed}", "".join(out), thinking, "length", tuple(sorted(slips)),
                _expect(exp_reasoning, cut_content, [], True),
            )  # fmt: skip
        out.append(content)
        if "no_response_close" not in slips:
            out.append(_close("response"))
    if calls:
        out.append(_open("tools"))
        for i, (name, args, typed) in enumerate(calls, 1):
            out.append(_open("call", tool=name, index=str(i)))
            last = i == len(calls)
            for key, kind in typed:
                value = args[key]
                raw = value if kind == "string" else json.dumps(value, ensure_ascii=False)
                out.append(_open("argument", key=key, type=kind))
                if last and "cut_in_call" in slips and kind == "string":
                    out.append(_cut(rng, raw))
                    exp_calls = exp_calls[:-1]
                    return Sample(
                        f"s{seed}", "".join(out), thinking, "length", tuple(sorted(slips)),
                        _expect(exp_reasoning, exp_content, exp_calls, True),
                    )  # fmt: skip
                out.append(raw)
                out.append(_close("argument"))
            out.append(_close("call"))
        if "no_tools_close" not in slips:
            out.append(_close("tools"))
    if "partial_marker_end" in slips:
        # The message close is cut: the output ends with a partial marker, which is text (markers
        # are single tokens): content, unless it is inside an unclosed tools section (dropped).
        marker = rng.choice((OPEN, CLOSE, SEP, EOM))
        partial = marker[: rng.randint(1, len(marker) - 1)]
        out.append(partial)
        if not (calls and "no_tools_close" in slips):
            exp_content += partial
        truncated = True
        finish_reason = "length"
    else:
        out.append(_close("message"))
        if "end_of_msg" in slips:
            out.append(EOM)
        if "text_after_close" in slips:
            out.append(EOM + _open("message", role="user") + "and now?" + _close("message"))
    return Sample(
        f"s{seed}", "".join(out), thinking, finish_reason, tuple(sorted(slips)),
        _expect(exp_reasoning, exp_content, exp_calls, truncated),
    )  # fmt: skip


def _expect(
    reasoning: str | None, content: str, calls: list[tuple[str, dict[str, Any]]], truncated: bool
) -> dict[str, Any]:
    return {
        "reasoning_content": reasoning,
        "content": content,
        "tool_calls": [{"name": n, "arguments": a} for n, a in calls],
        "truncated": truncated,
    }


def corpus(n: int = 300, first_seed: int = 0) -> list[Sample]:
    """``n`` samples for consecutive seeds."""
    return [generate(s) for s in range(first_seed, first_seed + n)]
