"""K3's real vocabulary (shipped as package data): every golden id-exact, Moonshot's documented
prompt_tokens rule, and the text-parts wire fix (issue 17)."""

from __future__ import annotations

import copy
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import tiktoken
import tiktoken.load

from kimik3 import InvalidRequestError, K3Tokenizer, UserMessage
from kimik3.formats.k3 import K3_PAT_STR, default_tokenizer, encode_segments
from tests.data_paths import load_json

SMG = load_json("k3/smg_render_ids.json")
EXTRA = {k: v for k, v in load_json("k3/extra_goldens.json").items() if not k.startswith("_")}
VOCAB = Path(str(resources.files("kimik3.formats.k3").joinpath("vocab")))


@pytest.fixture(scope="module")
def tok() -> K3Tokenizer:
    return default_tokenizer()


@pytest.fixture(scope="module")
def plain() -> tiktoken.Encoding:
    """An independent path: tiktoken's own loader, K3's pattern, K3's special names at 163584+k."""
    ranks = tiktoken.load.load_tiktoken_bpe(str(VOCAB / "tiktoken.model"))
    names = {0: "[BOS]", 1: "[EOS]", 2: "<|end_of_msg|>", 3: "<|open|>", 4: "<|close|>", 5: "<|sep|>",
             18: "<|media_begin|>", 19: "<|media_content|>", 20: "<|media_end|>", 21: "<|media_pad|>",
             22: "<|kimi_image_placeholder|>", 254: "[UNK]", 255: "[PAD]"}  # fmt: skip
    return tiktoken.Encoding("k3-plain", pat_str=K3_PAT_STR, mergeable_ranks=ranks,
                             special_tokens={n: 163_584 + k for k, n in names.items()})  # fmt: skip


def _plain_ids(enc: tiktoken.Encoding, kwargs: dict[str, Any]) -> list[int]:
    out: list[int] = []
    for text, control in encode_segments(**copy.deepcopy(kwargs)):
        out.extend(enc.encode(text, allowed_special="all") if control else enc.encode_ordinary(text))
    return out


def test_packaged_vocabulary_is_k3s(tok: K3Tokenizer) -> None:
    assert tok.num_base_tokens == 163_584 and tok.vocab_size == 163_840
    names = ("[BOS]", "<|end_of_msg|>", "<|open|>", "<|close|>", "<|sep|>", "<|media_pad|>", "[PAD]")
    assert [tok.token_id(n) for n in names] == [163584, 163586, 163587, 163588, 163589, 163605, 163839]
    assert tok.encode_text("Hello world") == [19180, 2695]
    assert tok.encode_text("你好") == [33845]
    assert K3Tokenizer().encode_text("<|open|>") == tok.encode_text("<|open|>") == [27, 91, 4454, 91, 29]  # as in smg injected_markers


@pytest.mark.parametrize("name", sorted(SMG))
def test_smg_cases_id_exact(tok: K3Tokenizer, name: str) -> None:
    case = SMG[name]
    assert tok.encode_messages(case["messages"], case["tools"]) == case["ids"]


@pytest.mark.parametrize("name", sorted(EXTRA))
def test_extra_goldens_ids_equal_an_independent_tokenization(
    tok: K3Tokenizer, plain: tiktoken.Encoding, name: str
) -> None:
    kwargs = EXTRA[name]["kwargs"]
    ids = tok.encode_messages(**copy.deepcopy(kwargs))
    assert ids == _plain_ids(plain, kwargs)
    assert tok.decode(ids) == EXTRA[name]["rendered"]


def test_independent_path_is_not_trivially_equal(plain: tiktoken.Encoding) -> None:
    # the independent path really differs from tokenizing the rendered string in one piece
    kwargs = {"messages": SMG["injected_markers"]["messages"]}
    assert _plain_ids(plain, kwargs) == SMG["injected_markers"]["ids"]
    rendered = plain.decode(SMG["injected_markers"]["ids"])
    assert plain.encode(rendered, allowed_special="all") != SMG["injected_markers"]["ids"]


def test_moonshot_documented_prompt_tokens_assistant_hello(tok: K3Tokenizer) -> None:
    """Kimi Vendor Verifier testdata/prompt_token_cases: [{"role": "assistant", "content": "你好"}]
    with reasoning_effort high has usage.prompt_tokens == 99 = ids incl. the generation stub - 3."""
    ids = tok.encode_messages([{"role": "assistant", "content": "你好"}], thinking_effort="high")
    assert len(ids) - 3 == 99
    assert ids[-3:] == [163587, tok.encode_text("think")[0], 163589]  # <|open|>think<|sep|>
    # the history turn without reasoning carries the 6-token empty think block
    empty_think = [163587, *tok.encode_text("think"), 163589, 163588, *tok.encode_text("think"), 163589]
    assert len(empty_think) == 6
    assert any(ids[i : i + 6] == empty_think for i in range(len(ids)))


# -- the text-parts wire fix -----------------------------------------------------------------

SPLIT = [{"type": "text", "text": "Hello "}, {"type": "text", "text": "world, what's up"}]


def test_text_parts_are_separate_segments_like_the_reference(tok: K3Tokenizer) -> None:
    ids = tok.encode_messages([{"role": "user", "content": SPLIT}], thinking=False)
    body = ids[ids.index(163589) + 1 : ids.index(163588)]
    assert body == [19180, 220, 23617, 11, 30245, 979]  # `Hello`,` `,`world`,`,`,` what's`,` up`
    assert [tok.id_to_token(i) for i in body[:3]] == ["Hello", " ", "world"]
    joined = tok.encode_messages([{"role": "user", "content": "Hello world, what's up"}], thinking=False)
    assert joined != ids and len(joined) == len(ids) - 1  # `Hello`,` world`: one token fewer


@pytest.mark.parametrize("role", ["user", "system", "tool", "assistant"])
def test_text_parts_split_in_every_role(role: str) -> None:
    msg: dict[str, Any] = {"role": role, "content": [{"type": "text", "text": "ab"}, {"type": "text", "text": "cd"}]}
    if role == "tool":
        msg["name"] = "t"
    texts = [s.text for s in encode_segments([msg]) if not s.control]
    assert texts[texts.index("ab") + 1] == "cd"
    assert "abcd" not in texts


def test_empty_text_parts_make_no_segment() -> None:
    content = [{"type": "text", "text": ""}, {"type": "text", "text": "x"}, {"type": "text", "text": ""}]
    segs = encode_segments([UserMessage(content=content)], thinking=False)
    assert [s.text for s in segs[:7]] == ["<|open|>", "message", " role", '="', "user", '"', "<|sep|>"]
    assert [s.text for s in segs[7:9]] == ["x", "<|close|>"]


@pytest.mark.parametrize(
    "content", ["Be brief.", [{"type": "text", "text": "Be brief."}], [{"type": "text", "text": " "}]]
)
def test_system_with_tools_and_content_is_a_typed_error(content: Any) -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    with pytest.raises(InvalidRequestError, match="system message without content"):
        encode_segments([{"role": "system", "content": content, "tools": tools}])
    # without content it is a dynamic tool declaration, and an empty list of parts counts as none
    for empty in (None, "", []):
        segs = encode_segments([{"role": "system", "content": empty, "tools": tools}], thinking=False)
        assert ' type="tool-declare"' in "".join(s.text for s in segs)
