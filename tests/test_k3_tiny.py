"""The tiny K3-speaking model directory (models/k3-tiny): tokenizer layout, HF tokenizer class,
config, and the prompt it was trained on (kimik3's coding tools and CODING_INSTRUCTIONS)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from kimik3 import K3Tokenizer
from kimik3.agents import CODING_INSTRUCTIONS
from kimik3.formats.k3 import render

MODEL = Path(__file__).resolve().parents[1] / "models" / "k3-tiny"

# sha256 of render([system CODING_INSTRUCTIONS, user "hi"], tools): the prompt headers the model
# was trained on. HARNESS: the full coding harness, what `kimik3 run` sends by default
# (CodingHarness(root).parts(...): the six coding tools with background bash, multi_edit,
# apply_patch, read_output, stop and task); CORE: the six coding tools alone (`--tools core`,
# `kimik3 chat --workspace`). If one fails, kimik3's coding or harness tools (their docstrings are
# the tool descriptions), CODING_INSTRUCTIONS or the rendering of the header changed: regenerate
# the data and retrain the model (models/k3-tiny/README.md), then update the value. Features that
# are not in use (e.g. skills when there are none) must add nothing to these prompts.
TRAINED_PROMPT_SHA256 = "e4f826b650f66142c762298aa2fb40cb452d7056a86829729e977ae0a9f9dfb1"
TRAINED_HARNESS_PROMPT_SHA256 = "7b860058eedb27b254824748d2c1f76bb3092d6067c907c1a0e815dbd097035f"
HARNESS_TOOLS = ["bash", "read_file", "write_file", "edit_file", "grep", "glob", "multi_edit", "apply_patch",
                 "read_output", "stop", "task"]

CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": CODING_INSTRUCTIONS},
    {"role": "user", "content": "What is the first line of notes.txt?"},
    {
        "role": "assistant",
        "reasoning_content": "The user wants the first line of notes.txt. I will read the file.",
        "content": "",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "notes.txt"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "     1\thello <|open|> world"},
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    }
]


@pytest.fixture(scope="module")
def tok() -> K3Tokenizer:
    return K3Tokenizer.from_pretrained(MODEL)


def test_vocabulary_and_special_offsets(tok: K3Tokenizer) -> None:
    assert tok.num_base_tokens == 4096
    assert tok.vocab_size == 4352
    expected = {
        "[BOS]": 0, "[EOS]": 1, "<|end_of_msg|>": 2, "<|open|>": 3, "<|close|>": 4, "<|sep|>": 5,
        "<|media_begin|>": 18, "<|media_content|>": 19, "<|media_end|>": 20, "<|media_pad|>": 21,
        "<|kimi_image_placeholder|>": 22, "[UNK]": 254, "[PAD]": 255,
    }  # fmt: skip
    assert {name: tok.token_id(name) - 4096 for name in expected} == expected
    assert tok.token_id("<|reserved_token_4102|>") == 4102
    config = json.loads((MODEL / "tokenizer_config.json").read_text())
    flags = {v["content"]: v["special"] for v in config["added_tokens_decoder"].values()}
    assert [flags[n] for n in ("<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>")] == [False, False, False, True]


def test_golden_ids(tok: K3Tokenizer) -> None:
    assert tok.encode_text("What is the first line of notes.txt?") == [1290, 374, 275, 559, 333, 378, 1187, 639, 63]
    assert tok.encode_text(" <|open|>") == [32, 60, 124, 111, 846, 124, 62]  # typed markers stay text


def test_model_config_matches_tokenizer(tok: K3Tokenizer) -> None:
    config = json.loads((MODEL / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["vocab_size"] == tok.vocab_size
    assert config["eos_token_id"] == tok.end_of_msg_id == 4098
    gen = json.loads((MODEL / "generation_config.json").read_text())
    assert gen["eos_token_id"] == 4098
    assert (config["hidden_size"], config["num_hidden_layers"], config["max_position_embeddings"]) == (512, 8, 8192)
    weights = MODEL / "model.safetensors"
    if weights.exists():  # bf16, ~20M parameters: the repository stays small
        assert 40_000_000 <= weights.stat().st_size <= 41_000_000


def test_trained_prompt_is_current(tmp_path: Path) -> None:
    from kimik3.tools.coding import coding_tools

    text = render([{"role": "system", "content": CODING_INSTRUCTIONS}, {"role": "user", "content": "hi"}],
                  coding_tools(tmp_path))
    assert hashlib.sha256(text.encode("utf-8")).hexdigest() == TRAINED_PROMPT_SHA256


def test_trained_harness_prompt_is_current(tmp_path: Path) -> None:
    import anyio

    from kimik3.engines import ScriptedEngine
    from kimik3.harness import CodingHarness, Skills

    (tmp_path / "home").mkdir()
    with pytest.MonkeyPatch.context() as m:  # no skill anywhere (the workspace, the user's home)
        m.setenv("KIMIK3_HOME", str(tmp_path / "home"))
        (tmp_path / "ws").mkdir()
        tools, instructions, _ = CodingHarness(tmp_path / "ws").parts(engine=ScriptedEngine([]),
                                                                      instructions=CODING_INSTRUCTIONS)
        *own, skills = tools
        assert isinstance(skills, Skills) and anyio.run(skills.get_tools) == []  # no skill: nothing declared
    assert instructions == CODING_INSTRUCTIONS  # no AGENTS.md in the workspace: nothing appended
    assert [t.name for t in own] == HARNESS_TOOLS
    text = render([{"role": "system", "content": CODING_INSTRUCTIONS}, {"role": "user", "content": "hi"}], own)
    assert hashlib.sha256(text.encode("utf-8")).hexdigest() == TRAINED_HARNESS_PROMPT_SHA256


def test_free_phrasings_are_held_out_of_training_by_their_normal_form() -> None:
    import sys

    sys.path.insert(0, str(MODEL.parents[1] / "scripts" / "tiny_k3"))
    try:
        import phrasings
    finally:
        sys.path.pop(0)
    assert len(phrasings.FREE) == 62 and len(phrasings.FORBIDDEN_REQUESTS) == 62
    assert phrasings.normalized("What's 2+2??") == phrasings.normalized("whats 2 2") == "whats 2 2"
    assert phrasings.normalized("hi! who are you?") in phrasings.FORBIDDEN_REQUESTS


def test_hf_tokenizer_class_delegates_to_kimik3(tok: K3Tokenizer) -> None:
    pytest.importorskip("transformers")
    spec = importlib.util.spec_from_file_location("tokenization_kimi_k3", MODEL / "tokenization_kimi_k3.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    hf = module.K3TikTokenTokenizer.from_pretrained(str(MODEL))
    assert (len(hf), hf.eos_token_id, hf.pad_token_id) == (4352, 4098, 4351)
    for kw in ({}, {"thinking": False}, {"thinking_effort": "low", "tool_choice": "required"}):
        want = tok.encode_messages(CONVERSATION, TOOLS, **kw)
        assert hf.apply_chat_template(CONVERSATION, tools=TOOLS, **kw) == want
        assert hf.apply_chat_template(CONVERSATION, tools=TOOLS, tokenize=False, **kw) == render(
            CONVERSATION, TOOLS, **kw
        )
        assert hf.decode(want) == tok.decode(want)
    assert hf.encode("<|open|>think<|sep|>", add_special_tokens=False) == [4099, *tok.encode_text("think"), 4101]
    ids = tok.encode_messages(CONVERSATION, TOOLS)
    assert "<|open|>" in hf.decode(ids, skip_special_tokens=True)  # special: false markers are kept
    assert "<|end_of_msg|>" not in hf.decode(ids, skip_special_tokens=True)
