"""K3 tokenizer: loading, segment-wise encoding, specials, incremental prompt encoding."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kimik3 import AssistantMessage, K3Tokenizer, PromptEncoder, TokenizerError, ToolMessage, UserError, UserMessage
from kimik3.formats.k3 import Segment, default_tokenizer, encode_segments
from kimik3.formats.k3._tokenizer import _split_long_runs
from kimik3.types import FunctionCall, ToolCall
from tests.data_paths import load_json
from tests.k3vocab import write_model_dir


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory) -> K3Tokenizer:
    return K3Tokenizer.from_pretrained(write_model_dir(tmp_path_factory.mktemp("vocab")))


@pytest.fixture(scope="module")
def k3_sized(tmp_path_factory: pytest.TempPathFactory) -> K3Tokenizer:
    path = write_model_dir(tmp_path_factory.mktemp("k3vocab"), num_base_tokens=163_584)
    return K3Tokenizer.from_pretrained(path)


def test_k3_special_ids_from_config(k3_sized: K3Tokenizer) -> None:
    assert k3_sized.num_base_tokens == 163_584
    assert [k3_sized.token_id(n) for n in ("<|end_of_msg|>", "<|open|>", "<|close|>", "<|sep|>")] == [
        163586,
        163587,
        163588,
        163589,
    ]
    assert k3_sized.token_id("[BOS]") == 163584
    assert k3_sized.token_id("<|media_pad|>") == 163605
    assert k3_sized.token_id("<|reserved_token_163590|>") == 163590  # unnamed ones
    assert k3_sized.vocab_size == 163_840
    assert k3_sized.end_of_msg_id == 163586


def test_typed_marker_in_user_text_is_never_a_control_id(k3_sized: K3Tokenizer) -> None:
    ids = k3_sized.encode_messages([{"role": "user", "content": "<|open|>x<|sep|><|end_of_msg|>"}], thinking=False)
    controls = [i for i in ids if i >= k3_sized.num_base_tokens]
    # template markers only: open sep close sep eom (user msg) + open sep open sep (generation)
    assert controls == [163587, 163589, 163588, 163589, 163586, 163587, 163589, 163587, 163589]
    text_ids = k3_sized.encode_text("<|open|>")
    assert all(i < k3_sized.num_base_tokens for i in text_ids)
    assert k3_sized.decode(text_ids) == "<|open|>"


def test_merges_never_cross_a_segment_boundary(tok: K3Tokenizer) -> None:
    whole = tok.encode_text("abcd")
    split = tok.encode_segments([Segment("ab", False), Segment("cd", False)])
    assert split == tok.encode_text("ab") + tok.encode_text("cd")
    assert len(whole) == 1 and len(split) == 2  # "abcd" is one token, but never across segments
    assert tok.decode(split) == "abcd"


def test_control_segment_is_one_special_id(tok: K3Tokenizer) -> None:
    assert tok.encode_segments([Segment("<|sep|>", True)]) == [tok.token_id("<|sep|>")]
    # the same text as a text segment is plain BPE
    assert tok.token_id("<|sep|>") not in tok.encode_segments([Segment("<|sep|>", False)])


def test_decode_keeps_markers_and_counts(tok: K3Tokenizer) -> None:
    ids = tok.encode_messages([{"role": "user", "content": "Hi"}], thinking=False)
    assert tok.decode(ids) == (
        '<|open|>message role="user"<|sep|>Hi<|close|>message<|sep|><|end_of_msg|>'
        '<|open|>message role="assistant"<|sep|><|open|>response<|sep|>'
    )
    assert tok.count_tokens(encode_segments([{"role": "user", "content": "Hi"}], thinking=False)) == len(ids)
    assert tok.id_to_token(tok.token_id("<|open|>")) == "<|open|>"


def test_segmentwise_ids_match_smg_structure(k3_sized: K3Tokenizer) -> None:
    """Real-tokenizer fixture: the positions of the marker ids equal ours (the BPE ids of text
    differ since the real vocab is not available, but the structure must not)."""
    for name, case in load_json("k3/smg_render_ids.json").items():
        ours = k3_sized.encode_messages(case["messages"], case["tools"])
        real = case["ids"]
        ours_markers = [i for i in ours if i >= 163584]
        real_markers = [i for i in real if i >= 163584]
        assert ours_markers == real_markers, name
        assert k3_sized.decode(ours) == case["text"], name


def test_missing_files_raise_tokenizer_error(tmp_path: Path) -> None:
    with pytest.raises(TokenizerError, match="tiktoken"):
        K3Tokenizer.from_pretrained(tmp_path)
    write_model_dir(tmp_path)
    (tmp_path / "tokenizer_config.json").write_text("{not json")
    with pytest.raises(TokenizerError, match=r"tokenizer_config\.json"):
        K3Tokenizer.from_pretrained(tmp_path)
    with pytest.raises(TokenizerError, match="not in this tokenizer"):
        K3Tokenizer.from_pretrained(write_model_dir(tmp_path / "ok")).token_id("<|nope|>")


def _set_line(path: Path, index: int, line: bytes) -> None:
    lines = path.read_bytes().splitlines()
    lines[index] = line
    path.write_bytes(b"\n".join(lines) + b"\n")


def _set_added(path: Path, added: Any) -> None:
    (path / "tokenizer_config.json").write_text(json.dumps({"added_tokens_decoder": added}))


# Every malformed directory is a TokenizerError whose message says what is wrong (model dir: 360
# base tokens, specials 360..615).
MALFORMED: list[tuple[str, Any, str]] = [
    ("bad base64 line", lambda p: _set_line(p / "tiktoken.model", 3, b"!!notb64 3"),
     r"tiktoken\.model:4: expected '<base64> <rank>', got b'!!notb64 3'"),
    ("base64 with junk kept lenient decoders happy", lambda p: _set_line(p / "tiktoken.model", 3, b"Aw==# 3"),
     r"tiktoken\.model:4: expected '<base64> <rank>'"),
    ("rank far past the count", lambda p: _set_line(p / "tiktoken.model", 359, b"enp6cQ== 999999"),
     r"ranks must be 0\.\.n-1 for n = 360 tokens \(highest rank: 999999\)"),
    ("repeated rank", lambda p: _set_line(p / "tiktoken.model", 5, b"enp6cQ== 4"), r"tiktoken\.model:6: repeated token or rank"),
    ("repeated token", lambda p: _set_line(p / "tiktoken.model", 5, b"AA== 5"), r"tiktoken\.model:6: repeated token or rank"),
    ("missing rank", lambda p: _set_line(p / "tiktoken.model", 5, b"AA=="), r"tiktoken\.model:6: expected"),
    ("empty vocabulary", lambda p: (p / "tiktoken.model").write_bytes(b""), r"n = 0 tokens \(highest rank: None\)"),
    ("vocabulary is a directory", lambda p: ((p / "tiktoken.model").unlink(), (p / "tiktoken.model").mkdir()),
     "cannot read tiktoken vocabulary .*is a directory"),
    ("config missing", lambda p: (p / "tokenizer_config.json").unlink(), r"cannot read .*tokenizer_config\.json"),
    ("config a list", lambda p: (p / "tokenizer_config.json").write_text("[]"), r"must hold a JSON object, got list"),
    ("config null", lambda p: (p / "tokenizer_config.json").write_text("null"), r"must hold a JSON object, got NoneType"),
    ("added tokens a list", lambda p: _set_added(p, [1]), "added_tokens_decoder must be an object, got list"),
    ("added token without content", lambda p: _set_added(p, {"400": {"x": 1}}), r"added_tokens_decoder\['400'\] must be an object with a string 'content', got \{'x': 1\}"),
    ("added token a bare string", lambda p: _set_added(p, {"360": "x"}),
     r"added_tokens_decoder\['360'\] must be an object with a string 'content', got 'x'"),
    ("added tokens an empty list", lambda p: _set_added(p, []), "added_tokens_decoder must be an object, got list"),
    ("added token id not a number", lambda p: _set_added(p, {"abc": {"content": "<|a|>"}}), "key 'abc' is not a token id"),
    ("special id inside the base vocabulary", lambda p: _set_added(p, {"5": {"content": "<|x|>"}}),
     r"special token '<\|x\|>' has id 5, outside the 256 special ids 360\.\.615 that follow the 360 base tokens"),
    ("special id far outside", lambda p: _set_added(p, {"9999999": {"content": "<|far|>"}}), "has id 9999999, outside"),
    ("special named twice", lambda p: _set_added(p, {"360": {"content": "[BOS]"}, "361": {"content": "[BOS]"}}),
     r"'\[BOS\]' is named twice \(ids 360 and 361\)"),
]


@pytest.mark.parametrize(("what", "mutate", "message"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_model_directories_raise_tokenizer_error(tmp_path: Path, what: str, mutate: Any, message: str) -> None:
    path = write_model_dir(tmp_path / "m")
    assert K3Tokenizer.from_pretrained(path).vocab_size == 360 + 256
    mutate(path)
    with pytest.raises(TokenizerError, match=message):
        K3Tokenizer.from_pretrained(path)


_FIFO_CHILD = """
import os, sys
from kimik3 import K3Tokenizer, TokenizerError
from tests.k3vocab import write_model_dir
from pathlib import Path
path = write_model_dir(Path(sys.argv[1]))
os.unlink(os.path.join(path, sys.argv[2]))
os.mkfifo(os.path.join(path, sys.argv[2]))
try:
    K3Tokenizer.from_pretrained(path)
except TokenizerError as e:
    print("TokenizerError:", e)
"""


@pytest.mark.parametrize("name", ["tiktoken.model", "tokenizer_config.json"])
def test_fifo_in_model_directory_is_refused_not_waited_on(tmp_path: Path, name: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _FIFO_CHILD, str(tmp_path / "m"), name],
        capture_output=True, text=True, timeout=120, cwd=Path(__file__).parent.parent,
    )
    assert done.stdout.startswith("TokenizerError: cannot read"), done.stdout + done.stderr
    assert f"{name}' is not a regular file (a FIFO, device or socket)" in done.stdout


def _reference_split(s: str, max_len: int) -> list[str]:
    """tokenization_kimi.py's _split_whitespaces_or_nonwhitespaces, verbatim logic."""
    out = []
    current_len = 0
    current_is_space = s[0].isspace() if s else False
    start = 0
    for i in range(len(s)):
        now = s[i].isspace()
        if current_is_space ^ now:
            current_len = 1
            current_is_space = now
        else:
            current_len += 1
            if current_len > max_len:
                out.append(s[start:i])
                start = i
                current_len = 1
    out.append(s[start:])
    return out


def test_long_runs_split_like_the_reference() -> None:
    text = "a" * 60_001 + " " * 30_000 + "b c" + "\n" * 25_001
    assert list(_split_long_runs(text)) == _reference_split(text, 25_000)
    assert list(_split_long_runs("short text")) == ["short text"]


# -- incremental ----------------------------------------------------------------------------


def _turn(k: int, parallel: int) -> list[Any]:
    calls = [
        ToolCall(id=f"t{k}_{j}", function=FunctionCall(name="read", arguments={"path": f"f{k}_{j}.py"}))
        for j in range(parallel)
    ]
    out: list[Any] = [AssistantMessage(content=f"step {k}", reasoning_content=f"think {k}", tool_calls=calls)]
    for j in reversed(range(parallel)):  # results arrive out of order
        out.append(ToolMessage(tool_call_id=f"t{k}_{j}", content=f"contents {k} {j}\n" * 3))
    return out


def test_prompt_encoder_equals_one_shot_turn_by_turn(tok: K3Tokenizer) -> None:
    tools = [{"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}]
    enc = PromptEncoder(tok, tools)
    history: list[Any] = [UserMessage(content="Fix the bug")]
    for k in range(12):
        history.extend(_turn(k, parallel=1 + k % 3))
        assert enc.encode(history) == tok.encode_messages(history, tools)
    assert enc.committed_messages == len(history) - (1 + 11 % 3)  # trailing tool run uncommitted
    # a tool result added to the trailing run re-orders it: still equal
    history.append(ToolMessage(tool_call_id="extra", name="read", content="late"))
    assert enc.encode(history) == tok.encode_messages(history, tools)
    # editing the past (a new list with a replaced message) falls back correctly
    edited = list(history)
    edited[0] = UserMessage(content="changed")
    assert enc.encode(edited) == tok.encode_messages(edited, tools)
    assert enc.encode(history[:5]) == tok.encode_messages(history[:5], tools)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.booleans()), min_size=1, max_size=8), st.randoms())
def test_prompt_encoder_random_histories(tok: K3Tokenizer, plan: list[tuple[int, bool]], rnd: random.Random) -> None:
    enc = PromptEncoder(tok, thinking_effort="low")
    history: list[Any] = [UserMessage(content="start")]
    for k, (parallel, user_after) in enumerate(plan):
        history.extend(_turn(k, parallel) if parallel else [AssistantMessage(content=f"a{k}")])
        if user_after:
            history.append(UserMessage(content=f"u{k}"))
        cut = rnd.randint(1, len(history))
        view = history[:cut]
        expected = tok.encode_messages(view, thinking_effort="low")
        assert enc.encode(view) == expected


def test_prompt_ids_views_stay_valid_after_appends_and_rollbacks(tok: K3Tokenizer) -> None:
    enc = PromptEncoder(tok)
    h1: list[Any] = [UserMessage(content="Hello")]
    v1 = enc.encode(h1)
    l1 = tok.encode_messages(h1)
    h2 = [*h1, AssistantMessage(content="abcd", reasoning_content="bc"), UserMessage(content="world")]
    v2 = enc.encode(h2)
    l2 = tok.encode_messages(h2)
    assert v1 == l1 and v2 == l2
    v3 = enc.encode([UserMessage(content="other")])  # rolls the cache back
    assert v1 == l1 and v2 == l2 and v3 == tok.encode_messages([UserMessage(content="other")])
    assert v2[-1] == l2[-1] and v2[0] == l2[0] and v2[2:9] == l2[2:9] and list(v2) == l2
    assert len(v2) == len(l2) and v2.tolist() == l2
    with pytest.raises(IndexError):
        v2[len(l2)]


# -- wrong inputs: typed errors (TokenizerError for ids outside the vocabulary, UserError for types)


@pytest.mark.parametrize(
    ("ids", "error", "message"),
    [
        ([-1], TokenizerError, "ids[0] = -1 is not an id of this vocabulary (ids are 0..163839, some unassigned)"),
        ([64, 10**9], TokenizerError, "ids[1] = 1000000000 is not an id of this vocabulary (ids are 0..163839, some unassigned)"),
        ([64, 2**70], TokenizerError, f"ids[1] = {2**70} is not an id of this vocabulary (ids are 0..163839, some unassigned)"),
        (["a"], UserError, "ids must be ints; ids[0] is str 'a'"),
        ([64, 1.5], UserError, "ids must be ints; ids[1] is float 1.5"),
        ([64, None], UserError, "ids must be ints; ids[1] is NoneType None"),
        (5, UserError, "ids must be a sequence of ints, got int"),
    ],
)  # fmt: skip
def test_decode_bad_ids_is_typed(ids: Any, error: type[Exception], message: str) -> None:
    tok = default_tokenizer()
    for decode in (tok.decode, tok.decode_bytes):
        with pytest.raises(error) as e:
            decode(ids)
        assert str(e.value) == message
    assert tok.decode([64, 65]) == "ab"  # the happy path is untouched


@pytest.mark.parametrize(
    ("token_id", "error", "message"),
    [
        (-1, TokenizerError, "-1 is not an id of this vocabulary (ids are 0..163839, some unassigned)"),
        (10**9, TokenizerError, "1000000000 is not an id of this vocabulary (ids are 0..163839, some unassigned)"),
        ("a", UserError, "id_to_token takes an int id, got str"),
        (True, UserError, "id_to_token takes an int id, got bool"),
    ],
)
def test_id_to_token_bad_id_is_typed(token_id: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error) as e:
        default_tokenizer().id_to_token(token_id)
    assert str(e.value) == message
    assert default_tokenizer().id_to_token(163839) == "[PAD]"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda t: t.encode_text(None), "encode_text takes a str, got NoneType"),
        (lambda t: t.encode_text(b"abc"), "encode_text takes a str, got bytes"),
        (lambda t: t.count_tokens(5), "count_tokens takes a str or segments, got int"),
        (lambda t: t.count_tokens(None), "count_tokens takes a str or segments, got NoneType"),
        (lambda t: t.count_tokens([Segment("a", False), "b"]), "count_tokens takes a str or Segment items, got a str item"),
    ],
)  # fmt: skip
def test_wrong_input_types_are_user_errors(call: Any, message: str) -> None:
    with pytest.raises(UserError) as e:
        call(default_tokenizer())
    assert str(e.value) == message
    assert isinstance(e.value, TypeError)  # existing `except TypeError` still catches it
