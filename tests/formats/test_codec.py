"""The K3 codec's shared rules: the open trailing tool run, and docs references that resolve."""

from __future__ import annotations

import re
from pathlib import Path

from kimik3 import AssistantMessage, K3Tokenizer, PromptEncoder, ToolMessage, UserMessage
from kimik3.formats.k3 import encode_segments, open_tool_run
from kimik3.types import FunctionCall, ToolCall
from tests.k3vocab import write_model_dir

ROOT = Path(__file__).resolve().parents[2]


def test_open_tool_run_is_the_trailing_tool_messages() -> None:
    calls = [ToolCall(id=i, function=FunctionCall(name="f", arguments="{}")) for i in ("a", "b")]
    u = UserMessage(content="go")
    a = AssistantMessage(content="", tool_calls=calls)
    ta, tb = ToolMessage(content="A", tool_call_id="a"), ToolMessage(content="B", tool_call_id="b")
    assert open_tool_run([u, a, tb, ta]) == 2
    assert open_tool_run([u, a, tb, ta, UserMessage(content="next")]) == 5
    assert open_tool_run([]) == 0 and open_tool_run([tb]) == 0


def test_incremental_and_full_encoders_agree_when_a_late_result_reorders_the_run(tmp_path: Path) -> None:
    tok = K3Tokenizer.from_pretrained(write_model_dir(tmp_path))
    calls = [ToolCall(id=i, function=FunctionCall(name="f", arguments="{}")) for i in ("a", "b")]
    u = UserMessage(content="go")
    a = AssistantMessage(content="", tool_calls=calls)
    tb, ta = ToolMessage(content="B", tool_call_id="b"), ToolMessage(content="A", tool_call_id="a")
    enc = PromptEncoder(tok)
    enc.encode([u, a, tb])  # b's result arrives first ...
    ids = enc.encode([u, a, tb, ta])  # ... then a's: the run is re-ordered to a, b
    assert ids == tok.encode_segments(encode_segments([u, a, tb, ta]))
    text = "".join(s.text for s in encode_segments([u, a, tb, ta]))
    assert text.index('tool="f" index="1"<|sep|>A') < text.index('tool="f" index="2"<|sep|>B')


def test_every_docs_reference_in_the_code_names_a_section() -> None:
    doc = (ROOT / "docs" / "k3-format.md").read_text(encoding="utf-8")
    headings = {h.strip() for h in re.findall(r"^#{2,3} (.+)$", doc, flags=re.M)}
    found = 0
    for path in (ROOT / "kimik3").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert "spec §" not in text, path
        for ref in re.findall(r"docs/k3-format\.md((?:,? (?:and )?§ [A-Z][a-z]+(?: (?!and\b)[a-z]+)?)+)", text):
            for name in re.findall(r"§ ([A-Z][a-z]+(?: (?!and\b)[a-z]+)?)", ref):
                found += 1
                assert any(h == name or h.startswith(name) for h in headings), (path, name)
    assert found >= 30


def test_prompt_cache_keeps_the_tools_key_of_the_same_declarations_and_makes_it_anew_for_others() -> None:
    """Issue 44: the tools' JSON key is not dumped again for the last request's declaration
    objects; another list of other objects (a changed description) gets its own encoder, whose
    ids are a fresh encoder's."""
    from kimik3.formats.k3 import PromptCache, default_tokenizer
    from kimik3.types import ToolSpec

    tok = default_tokenizer()

    def spec(description: str) -> ToolSpec:
        return ToolSpec.model_validate({"type": "function", "function": {
            "name": "f", "description": description, "parameters": {"type": "object", "properties": {}}}})

    first, cache = [spec("one")], PromptCache()
    enc = cache.encoder(tok, first, True, "max")
    assert cache.encoder(tok, list(first), True, "max") is enc  # a new list of the same objects
    changed = [spec("two")]
    other = cache.encoder(tok, changed, True, "max")
    assert other is not enc
    messages = [UserMessage(content="go")]
    assert list(other.encode(messages)) == list(PromptEncoder(tok, changed).encode(messages))
    assert list(other.encode(messages)) != list(enc.encode(messages))
    assert cache.encoder(tok, first, True, "max") is enc  # back to the first: its encoder again
