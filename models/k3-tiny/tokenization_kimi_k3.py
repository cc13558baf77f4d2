"""HF tokenizer class of the tiny K3-speaking model (``models/k3-tiny``), for transformers and vLLM.

Loaded with ``trust_remote_code`` through ``auto_map`` in ``tokenizer_config.json`` (vLLM's
``--tokenizer-mode kimi_k3`` loads the model directory's HF tokenizer this way and calls its
``apply_chat_template`` with ``tokenize=True``). It plays the role of the K3 checkpoint's own
``tokenization_kimi.py``, but everything K3-specific is delegated to kimik3, which must be
installed:

- token ids: :class:`kimik3.K3Tokenizer` (tiktoken BPE from ``tiktoken.model``, K3's
  split regex, special ids ``num_base_tokens + k`` named by ``added_tokens_decoder``);
- chat encoding: :func:`kimik3.formats.k3.encode_segments`, tokenized segment by segment (control
  segments as special tokens, text segments as plain text), exactly as
  ``K3Tokenizer.encode_messages`` does.

Tokens are shown as GPT-2 byte-level strings (``Ġ`` for a space...), as in the checkpoint's
tokenizer; special tokens as their names. Decoding never inserts spaces between special tokens,
so K3's markers stay contiguous.

Licence: this project's own (Apache-2.0).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from shutil import copyfile
from typing import Any

from transformers import PreTrainedTokenizer
from transformers.tokenization_utils_base import AddedToken, BatchEncoding

from kimik3.formats.k3 import encode_segments
from kimik3.formats.k3._tokenizer import K3Tokenizer, load_tiktoken_bpe, special_token_ids

VOCAB_FILES_NAMES = {"vocab_file": "tiktoken.model"}


def _bytes_to_unicode() -> dict[int, str]:
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs), strict=True))


class K3TikTokenTokenizer(PreTrainedTokenizer):
    """K3's tiktoken tokenizer as a ``transformers`` slow tokenizer.

    Args:
        vocab_file: path of ``tiktoken.model``.
        bos_token, eos_token, unk_token, pad_token: names of those special tokens
            (``eos_token`` is ``<|end_of_msg|>``, K3's stop token).
        added_tokens_decoder: id -> special token (from ``tokenizer_config.json``); ids
            ``num_base_tokens .. num_base_tokens + 255`` without an entry are named
            ``<|reserved_token_{id}|>``.
    """

    vocab_files_names = VOCAB_FILES_NAMES
    model_input_names = ["input_ids", "attention_mask"]  # noqa: RUF012 - as in transformers

    def __init__(
        self,
        vocab_file: str,
        bos_token: str | AddedToken = "[BOS]",
        eos_token: str | AddedToken = "<|end_of_msg|>",
        unk_token: str | AddedToken = "[UNK]",
        pad_token: str | AddedToken = "[PAD]",
        additional_special_tokens: list[str] | None = None,
        added_tokens_decoder: dict[int, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self.vocab_file = vocab_file
        ranks = load_tiktoken_bpe(vocab_file)
        specials = special_token_ids(len(ranks), added_tokens_decoder or {})
        self.k3 = K3Tokenizer(ranks, specials, name=f"kimi-k3:{Path(vocab_file).parent.name}")
        byte_encoder = _bytes_to_unicode()
        self._byte_decoder = {c: b for b, c in byte_encoder.items()}
        self._decoder: dict[int, str] = {}
        for token, i in ranks.items():
            self._decoder[i] = "".join(byte_encoder[b] for b in token)
        for name, i in specials.items():
            self._decoder[i] = name
        self._encoder = {t: i for i, t in self._decoder.items()}
        self._special_names = frozenset(specials)
        super().__init__(
            bos_token=bos_token,
            eos_token=eos_token,
            unk_token=unk_token,
            pad_token=pad_token,
            additional_special_tokens=additional_special_tokens,
            added_tokens_decoder=added_tokens_decoder or {},
            **kwargs,
        )

    # -- vocabulary ------------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        return self.k3.vocab_size

    def get_vocab(self) -> dict[str, int]:
        return dict(self._encoder)

    def _tokenize(self, text: str, **kwargs: Any) -> list[str]:
        return [self._decoder[i] for i in self.k3.encode_text(text)]

    def _convert_token_to_id(self, token: str) -> int:
        return self._encoder.get(token, self._encoder[str(self.unk_token)])

    def _convert_id_to_token(self, index: int) -> str:
        return self._decoder.get(index, str(self.unk_token))

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        out = bytearray()
        for t in tokens:
            if t in self._special_names:
                out += t.encode("utf-8")
            else:
                out += bytes(self._byte_decoder[c] for c in t)
        return out.decode("utf-8", errors="replace")

    def _decode(
        self,
        token_ids: int | list[int],
        skip_special_tokens: bool = False,
        clean_up_tokenization_spaces: bool | None = None,
        **kwargs: Any,
    ) -> str:
        ids = [token_ids] if isinstance(token_ids, int) else list(token_ids)
        if skip_special_tokens:  # special: true only; <|open|> <|close|> <|sep|> stay (spec §1)
            drop = set(self.all_special_ids)
            ids = [i for i in ids if i not in drop]
        return self.k3.decode(ids)

    def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None) -> tuple[str]:
        if not os.path.isdir(save_directory):
            raise ValueError(f"vocabulary path ({save_directory}) should be a directory")
        out = os.path.join(save_directory, (filename_prefix + "-" if filename_prefix else "") + "tiktoken.model")
        if os.path.abspath(self.vocab_file) != os.path.abspath(out):
            copyfile(self.vocab_file, out)
        return (out,)

    # -- chat ------------------------------------------------------------------------------

    def apply_chat_template(  # type: ignore[override]
        self,
        conversation: Sequence[Mapping[str, Any]] | Sequence[Sequence[Mapping[str, Any]]],
        tools: Sequence[Any] | None = None,
        tokenize: bool = True,
        add_generation_prompt: bool = True,
        thinking: bool = True,
        thinking_effort: str | None = "max",
        tool_choice: Any = None,
        response_format: Any = None,
        return_dict: bool = False,
        continue_final_message: bool = False,
        **kwargs: Any,
    ) -> Any:
        """Encode a conversation with K3's chat encoding (kimik3's encoder).

        Args:
            conversation: OpenAI-shaped messages (or a list of conversations).
            tools: tool declarations (OpenAI dicts).
            tokenize: return ids (default) or the rendered text.
            add_generation_prompt: end with the open assistant message and its think (or
                response) tag.
            thinking: thinking channel on (default) or off.
            thinking_effort: ``"low"``, ``"high"``, ``"max"`` (default) or None.
            tool_choice: ``"auto"`` / None, ``"required"`` or ``"none"``.
            response_format: ``{"type": "json_object"}`` or a json_schema format.
            return_dict: return ``{"input_ids": ..., "attention_mask": ...}`` (tokenize only).
            continue_final_message: not supported (K3's encoding closes every message).
            **kwargs: other template variables (``chat_template``, ``documents``...) are ignored.

        Returns:
            Token ids, segment by segment (control segments as special tokens, text segments
            tokenized on their own), or the rendered string when ``tokenize=False``.

        Raises:
            ValueError: ``continue_final_message`` was asked for.
            kimik3.KimiK3Error: input K3's format cannot express (see
                ``kimik3.formats.k3.encode_segments``).
        """
        if continue_final_message:
            raise ValueError("K3's chat encoding cannot continue a final message")
        if conversation and not isinstance(conversation[0], Mapping) and not hasattr(conversation[0], "role"):
            results = [
                self.apply_chat_template(
                    c, tools, tokenize, add_generation_prompt, thinking, thinking_effort, tool_choice,
                    response_format, return_dict, False, **kwargs,
                )
                for c in conversation
            ]
            if tokenize and return_dict:
                return BatchEncoding({k: [r[k] for r in results] for k in ("input_ids", "attention_mask")})
            return results
        segments = encode_segments(
            conversation,  # type: ignore[arg-type]
            tools,
            thinking=thinking,
            thinking_effort=thinking_effort,
            tool_choice=tool_choice,
            response_format=response_format,
            add_generation_prompt=add_generation_prompt,
        )
        if not tokenize:
            return "".join(s.text for s in segments)
        ids = self.k3.encode_segments(segments)
        if return_dict:
            return BatchEncoding({"input_ids": ids, "attention_mask": [1] * len(ids)})
        return ids
