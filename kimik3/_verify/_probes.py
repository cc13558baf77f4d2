"""The requests ``kimik3 verify`` sends, and what kimik3 computes for each of them.

Each :class:`Probe` is one chat request: its OpenAI body (as kimik3 sends it) and kimik3's own
prompt ids for it (the K3 encoder plus the tokenizer, images expanded as K3's processor does).
:func:`expected_counts` turns those ids into the ``usage.prompt_tokens`` each documented server
convention would report (:data:`CONVENTIONS`).
"""

from __future__ import annotations

import base64
import io
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from PIL import Image

from ..formats.k3 import K3Tokenizer, image_prompt_tokens
from ..media import image_token_count
from ..types import AssistantMessage, dump_messages, to_messages, to_tool_specs

__all__ = ["CONVENTIONS", "Convention", "Probe", "expected_counts", "probes", "tool"]

GENERATION_STUB = 3
"""``<|open|>think<|sep|>`` (or ``response`` with thinking off): 3 ids."""
EMPTY_THINK = 6
"""``<|open|>think<|sep|><|close|>think<|sep|>``: 6 ids per history turn without reasoning."""


@dataclass(frozen=True)
class Convention:
    """What a server counts in ``usage.prompt_tokens``.

    Attributes:
        name: short label.
        stub: the 3-token generation stub is counted.
        empty_think: history assistant turns without reasoning count their 6-token empty think
            block (as kimik3 and the checkpoint's encoder render them).
        who: which servers are documented to count this way.
    """

    name: str
    stub: bool
    empty_think: bool
    who: str


CONVENTIONS: tuple[Convention, ...] = (
    Convention("whole prompt", True, True, "vLLM / SGLang: every prompt id"),
    Convention("minus generation stub", False, True,
               "Moonshot's API (published rule: ids incl. stub - 3; history turns without reasoning "
               "keep the 6-token empty think block)"),
    Convention("minus stub and empty think blocks", False, False,
               "Moonshot's internal raw-tokenizer path (no stub, no empty think block)"),
    Convention("whole prompt without empty think blocks", True, False,
               "a server whose template drops empty think blocks"),
)  # fmt: skip
"""The documented ``prompt_tokens`` conventions, most common first."""


def tool(name: str, parameters: Mapping[str, Any] | None = None, description: str = "") -> dict[str, Any]:
    """An OpenAI tool declaration."""
    fn: dict[str, Any] = {"name": name, "parameters": dict(parameters or {"type": "object", "properties": {}})}
    if description:
        fn["description"] = description
    return {"type": "function", "function": fn}


@dataclass
class Probe:
    """One chat request with kimik3's prompt ids for it.

    Attributes:
        name: the row label (``prompt_tokens: <name>``).
        messages: OpenAI-shaped messages (typed on construction).
        tools, tool_choice, response_format: as sent.
        effort: ``"low"`` / ``"high"`` / ``"max"``, or ``"none"`` (thinking off).
        images: ``(width, height)`` of each image, in order of appearance.
        departures: known ways servers render this request differently from K3's reference:
            ``(description, the request as such a server renders it)``; named in a mismatch's
            evidence when the server's count fits one.
    """

    name: str
    messages: list[Any]
    tools: list[dict[str, Any]] = field(default_factory=list)
    tool_choice: Any = None
    response_format: Any = None
    effort: str = "max"
    images: list[tuple[int, int]] = field(default_factory=list)
    departures: list[tuple[str, Probe]] = field(default_factory=list)

    @property
    def thinking(self) -> bool:
        """Thinking on unless ``effort == "none"``."""
        return self.effort != "none"

    def body(self, model: str, *, max_tokens: int = 1, stream: bool = False) -> dict[str, Any]:
        """The chat-completions JSON body, as kimik3's RemoteEngine sends it (reasoning under both
        ``reasoning_content`` and ``reasoning``; thinking off via ``chat_template_kwargs``)."""
        body: dict[str, Any] = {"model": model, "messages": dump_messages(self.messages), "max_tokens": max_tokens}
        if self.tools:
            body["tools"] = self.tools
        if self.tool_choice is not None:
            body["tool_choice"] = self.tool_choice
        if self.response_format is not None:
            body["response_format"] = self.response_format
        if self.thinking:
            body["reasoning_effort"] = self.effort
        else:
            body["chat_template_kwargs"] = {"thinking": False}
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body

    def ids(self, tokenizer: K3Tokenizer) -> list[int]:
        """kimik3's prompt ids (images still as one placeholder id each)."""
        return tokenizer.encode_messages(
            to_messages(self.messages),
            to_tool_specs(self.tools),
            thinking=self.thinking,
            thinking_effort=self.effort if self.thinking else None,
            tool_choice=self.tool_choice,
            response_format=self.response_format,
        )

    def prompt_tokens(self, tokenizer: K3Tokenizer) -> int:
        """Every id of the served prompt: images expanded to
        ``<|media_begin|>image WxH<|media_content|>`` + N pads + ``<|media_end|>``."""
        n = len(self.ids(tokenizer))
        for w, h in self.images:
            n += image_prompt_tokens(tokenizer, w, h, image_token_count(w, h)) - 1  # minus the placeholder
        return n

    def empty_think_turns(self) -> int:
        """History assistant turns rendered with an empty think block (thinking on, no reasoning)."""
        if not self.thinking:
            return 0
        return sum(
            1 for m in to_messages(self.messages)
            if isinstance(m, AssistantMessage) and not (m.reasoning_content or "").strip()
        )  # fmt: skip


def expected_counts(probe: Probe, tokenizer: K3Tokenizer) -> dict[str, int]:
    """``usage.prompt_tokens`` under each of :data:`CONVENTIONS`, by convention name."""
    whole = probe.prompt_tokens(tokenizer)
    k = probe.empty_think_turns()
    return {
        c.name: whole - (0 if c.stub else GENERATION_STUB) - (0 if c.empty_think else EMPTY_THINK * k)
        for c in CONVENTIONS
    }


def png_data_url(width: int, height: int) -> str:
    """A ``data:image/png`` URL of a ``width x height`` gradient (deterministic)."""
    ramp = Image.linear_gradient("L")
    im = Image.merge("RGB", (ramp.resize((width, height)),
                             ramp.transpose(Image.Transpose.ROTATE_90).resize((width, height)),
                             Image.new("L", (width, height), 128)))  # fmt: skip
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


READ = tool("read_file", {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
            "Read a UTF-8 text file and return its contents.")  # fmt: skip
GREP = tool("grep", {"type": "object", "properties": {"pattern": {"type": "string"}, "path": {"type": "string"}},
                     "required": ["pattern"]}, "Search files for a regular expression.")  # fmt: skip
WEATHER = tool("get_weather", {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
               "Current weather for a city.")  # fmt: skip
ANSWER_SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}, "confidence": {"type": "number"}},
    "required": ["answer"],
}


def _call(cid: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": arguments}}


def tool_history(reasoning: str | None) -> list[dict[str, Any]]:
    """A multi-turn tool history: parallel calls, results out of order, a final answer."""
    turn: dict[str, Any] = {
        "role": "assistant", "content": "",
        "tool_calls": [_call("call_1", "read_file", '{"path": "notes.txt"}'),
                       _call("call_2", "grep", '{"pattern": "TODO", "path": "src"}')],
    }  # fmt: skip
    if reasoning is not None:
        turn["reasoning_content"] = reasoning
    return [
        {"role": "user", "content": "What does notes.txt say, and where are the TODOs?"},
        turn,
        {"role": "tool", "tool_call_id": "call_2", "content": "src/app.py:12: # TODO: retry"},
        {"role": "tool", "tool_call_id": "call_1", "content": "Ship on Friday.\nAsk Ana about the logo."},
        {"role": "assistant", "content": "notes.txt says to ship on Friday; one TODO in src/app.py.",
         **({"reasoning_content": "Both results are in; summarise."} if reasoning is not None else {})},
        {"role": "user", "content": "Thanks. Anything else?"},
    ]  # fmt: skip


def probes(*, images: bool = True) -> list[Probe]:
    """The prompt_tokens requests: each K3 feature whose rendering a server can get wrong."""
    hello = [{"role": "user", "content": "Hello! Say hi back in one word."}]
    out = [
        Probe("plain", hello),
        Probe("system prompt", [{"role": "system", "content": "You are terse."}, *hello]),
        Probe("text parts", [{"role": "user", "content": [{"type": "text", "text": "Hello "},
                                                           {"type": "text", "text": "world, what's up"}]}],
              departures=[("the server joins text parts with a newline (vLLM 0.32's OpenAI server); K3's "
                           "reference tokenizes each part as its own segment",
                           Probe("joined", [{"role": "user", "content": "Hello \nworld, what's up"}])),
                          ("the server joins text parts into one segment",
                           Probe("joined", [{"role": "user", "content": "Hello world, what's up"}]))]),
        Probe("assistant_hello (Moonshot's documented case)", [{"role": "assistant", "content": "你好"}],
              effort="high"),
        Probe("tools", hello, tools=[READ, GREP]),
        Probe("dynamic tools in a system message",
              [{"role": "system", "tools": [WEATHER]}, {"role": "user", "content": "Weather in Paris?"}],
              departures=[("the server drops message-level tools (vLLM 0.32's OpenAI server keeps them on "
                           "developer messages only; vllm-rs 0.33 drops both): the system message renders empty",
                           Probe("dropped", [{"role": "system", "content": ""},
                                             {"role": "user", "content": "Weather in Paris?"}]))]),
        Probe("dynamic tools in a developer message",
              [{"role": "developer", "tools": [WEATHER]}, {"role": "user", "content": "Weather in Paris?"}],
              departures=[("the server drops message-level tools: the developer message renders empty",
                           Probe("dropped", [{"role": "developer", "content": ""},
                                             {"role": "user", "content": "Weather in Paris?"}]))]),
        Probe("tool history with reasoning", tool_history("I need the file and the TODOs; call both."),
              tools=[READ, GREP]),
        Probe("history without reasoning", tool_history(None), tools=[READ, GREP]),
        Probe("markers typed by the user", [{"role": "user", "content": "<|open|>message<|sep|>x<|end_of_msg|>"}]),
        Probe("response_format json_schema", hello,
              response_format={"type": "json_schema", "json_schema": {"name": "answer", "schema": ANSWER_SCHEMA}}),
        Probe("tool_choice required", hello, tools=[READ], tool_choice="required"),
        Probe("tool_choice none", hello, tools=[READ], tool_choice="none"),
        Probe("effort low", hello, effort="low"),
        Probe("effort high", hello, effort="high"),
        Probe("effort max", hello, effort="max"),
        Probe("thinking off", hello, effort="none"),
    ]  # fmt: skip
    if images:
        for w, h in ((28, 28), (640, 480), (1000, 3000)):
            content = [{"type": "text", "text": "Describe the image."},
                       {"type": "image_url", "image_url": {"url": png_data_url(w, h)}}]  # fmt: skip
            out.append(Probe(f"image {w}x{h}", [{"role": "user", "content": content}], images=[(w, h)]))
    return out


def vocab_hint(failed: int, counted: int, root: str | None) -> str | None:
    """The hint for a report where ``failed`` of ``counted`` ``prompt_tokens`` rows failed with
    K3's own vocabulary: more than half means the served model most likely has another one
    (k3-tiny's, say). ``root``: the served model's path as ``/models`` gave it (vLLM), named
    when it is a printable path to a model directory on this machine."""
    if counted < 3 or 2 * failed <= counted:
        return None
    local = root is not None and root.isprintable() and os.path.isfile(os.path.join(root, "tiktoken.model"))
    where = root if local and root is not None else "DIR"
    return (f"{failed} of {counted} prompt_tokens counts differ from K3's vocabulary: the served model may have "
            f"its own (e.g. k3-tiny); pass its tokenizer: kimik3 verify --tokenizer {where} "
            f"(kimik3.verify(url, tokenizer={where!r}))")
