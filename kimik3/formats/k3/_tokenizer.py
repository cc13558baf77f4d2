"""K3's tokenizer (tiktoken BPE): text and segments to token ids.

Format: docs/k3-format.md § Tokens and § Segments. A K3 model directory holds
``tiktoken.model`` (lines ``<base64 token bytes> <rank>``) and ``tokenizer_config.json`` whose
``added_tokens_decoder`` names the special tokens. Special ids are ``num_base_tokens + k`` for
k in 0..255; unnamed ones are ``<|reserved_token_{id}|>`` (as the checkpoint's
``tokenization_kimi.py`` does). For the real K3 vocab, num_base_tokens = 163,584 and
``<|end_of_msg|>``, ``<|open|>``, ``<|close|>``, ``<|sep|>`` are 163586..163589 — but ids are
always read from the model directory, never hard-coded.

K3's real base vocabulary ships with kimik3 as package data (``kimik3/formats/k3/vocab/``: the
``tiktoken.model`` of Moonshot's Kimi Vendor Verifier, MIT, with K3's special names; provenance
in ``vocab/PROVENANCE.md``), so ``K3Tokenizer()`` gives exact K3 ids with no model directory.

Segments are tokenized one by one: control segments with special tokens allowed, text segments
with special tokens disallowed (a typed ``<|open|>`` stays plain BPE), so BPE merges never cross
a segment boundary.
"""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from ..._exceptions import KimiK3Error, TokenizerError, UserError
from ..._files import read_regular_bytes
from ...types import Message, ToolSpec
from ._encode import END_OF_MSG, Segment, ThinkingEffort, encode_segments

__all__ = [
    "K3_PAT_STR",
    "NUM_RESERVED_SPECIAL_TOKENS",
    "K3Tokenizer",
    "default_tokenizer",
    "estimate_tokens",
    "load_tiktoken_bpe",
    "special_token_ids",
]

K3_PAT_STR = "|".join(
    [
        r"""[\p{Han}]+""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
"""K3's pre-tokenizer split regex (the checkpoint's ``tokenization_kimi.py`` ``pat_str``). It uses
``&&[^\\p{Han}]`` class intersection, which tiktoken's regex engine supports and Python ``re``
does not."""

NUM_RESERVED_SPECIAL_TOKENS = 256
"""Special ids occupy ``num_base_tokens .. num_base_tokens + 255``."""

# tokenization_kimi.py encodes at most 400,000 characters per tiktoken call and splits runs of
# more than 25,000 consecutive whitespace or non-whitespace characters (tiktoken's BPE is
# quadratic on such runs). Reproduced so long inputs get the reference's ids.
_MAX_ENCODE_CHARS = 400_000
_MAX_RUN_CHARS = 25_000
_LONG_RUN = re.compile(rf"\s{{{_MAX_RUN_CHARS + 1},}}|\S{{{_MAX_RUN_CHARS + 1},}}")

_TAG = re.compile(r"<\|[^|<>\[\]]+\|>|\[[^|<>\[\]]+\]")
"""A special token's shape in K3's vocabulary (``<|open|>``, ``<|end_of_msg|>``, ``[BOS]``): no
name holds ``| < > [ ]``, so no tag can start inside another."""
_TAG_SPLIT = re.compile(f"({_TAG.pattern})")  # re.split keeps the tags between the texts

_SMALL_SEGMENT = 48  # text segments up to this many characters are memoised (tags, attributes)
_MEMO_ENTRIES = 256
_CONTROL_PIECE = 160  # raw K3 text between tags up to this many characters is memoised (encode_control)
"""The memo of short segments is emptied when it holds more than this many: the format's own
text (attributes, role and tool names) repeats every turn and comes back at once, while each
turn's unique short texts (call ids, paths, one-line reasoning) would otherwise make it grow
with the history (about 0.6 MB at 1M tokens; issue 44 point 2, ``bench/long.py``)."""


def estimate_tokens(text: str) -> int:
    """A tokenizer-free estimate of K3 tokens: ceil(UTF-8 bytes / 4).

    Used where no model directory is at hand (remote endpoints without a tokenizer, the scripted
    engine). K3's BPE averages about 4 bytes per token on English prose and code and fewer on
    CJK text, so this errs towards counting more tokens for CJK (safe for budgets). A lone
    surrogate counts as 3 bytes (it is never an error: a server can send one in JSON).
    """
    return (len(text.encode("utf-8", "surrogatepass")) + 3) // 4


def load_tiktoken_bpe(path: str | os.PathLike[str]) -> dict[bytes, int]:
    """Read a ``tiktoken.model`` file: one ``<base64 token bytes> <rank>`` pair per line.

    Raises:
        TokenizerError: the file is missing or empty, a line is malformed (not strict base64, not
            an integer rank), a token or rank repeats, or the ranks are not exactly
            ``0 .. n-1`` (tiktoken would report ``max rank + 1`` as the vocabulary size).
    """
    try:
        data = read_regular_bytes(path)  # a FIFO or device is refused, not waited on
    except OSError as e:
        raise TokenizerError(f"cannot read tiktoken vocabulary {path}: {e}") from e
    ranks: dict[bytes, int] = {}
    seen: set[int] = set()
    for lineno, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            token, rank_text = line.split()
            token_bytes, rank = base64.b64decode(token, validate=True), int(rank_text)
        except ValueError as e:  # binascii.Error is a ValueError
            raise TokenizerError(f"{path}:{lineno}: expected '<base64> <rank>', got {line[:60]!r}") from e
        if token_bytes in ranks or rank in seen or rank < 0:
            raise TokenizerError(f"{path}:{lineno}: repeated token or rank, or a negative rank: {line[:60]!r}")
        ranks[token_bytes] = rank
        seen.add(rank)
    if not ranks or max(seen) != len(ranks) - 1:
        top = max(seen) if seen else None
        raise TokenizerError(f"{path}: ranks must be 0..n-1 for n = {len(ranks)} tokens (highest rank: {top})")
    return ranks


def special_token_ids(num_base_tokens: int, added_tokens_decoder: Mapping[Any, Any]) -> dict[str, int]:
    """K3's special tokens: ids ``num_base_tokens + k`` for k in 0..255, named from
    ``added_tokens_decoder`` (id -> ``{"content": name}`` or an object with ``.content``)
    and ``<|reserved_token_{id}|>`` where unnamed (as the checkpoint's ``tokenization_kimi.py``).

    Raises:
        TokenizerError: not a mapping, an entry that is not ``{"content": name}`` (a bare string
            too), an id that is not an integer or lies outside
            ``num_base_tokens .. num_base_tokens + 255``, a name given twice.
    """
    if not isinstance(added_tokens_decoder, Mapping):
        raise TokenizerError(f"added_tokens_decoder must be an object, got {type(added_tokens_decoder).__name__}")
    named: dict[str, int] = {}
    reserved = range(num_base_tokens, num_base_tokens + NUM_RESERVED_SPECIAL_TOKENS)
    for token_id, entry in added_tokens_decoder.items():
        content = entry.get("content") if isinstance(entry, Mapping) else getattr(entry, "content", None)
        if not isinstance(content, str):
            raise TokenizerError(
                f"added_tokens_decoder[{token_id!r}] must be an object with a string 'content', got {entry!r:.80}"
            )
        try:
            number = int(token_id)
        except (TypeError, ValueError):
            raise TokenizerError(f"added_tokens_decoder key {token_id!r} is not a token id") from None
        if number not in reserved:
            raise TokenizerError(
                f"special token {content!r} has id {number}, outside the {NUM_RESERVED_SPECIAL_TOKENS} special ids "
                f"{reserved.start}..{reserved.stop - 1} that follow the {num_base_tokens} base tokens"
            )
        if content in named:
            raise TokenizerError(f"special token {content!r} is named twice (ids {named[content]} and {number})")
        named[content] = number
    taken = set(named.values())
    specials = {f"<|reserved_token_{i}|>": i for i in reserved if i not in taken}
    specials.update(named)
    return specials


def _split_long_runs(text: str) -> Iterator[str]:
    """The reference's chunking: pieces of <= 400,000 chars, runs cut after 25,000 chars."""
    for start in range(0, len(text), _MAX_ENCODE_CHARS):
        chunk = text[start : start + _MAX_ENCODE_CHARS]
        if len(chunk) <= _MAX_RUN_CHARS or not _LONG_RUN.search(chunk):
            yield chunk
            continue
        # Slow path, only for pathological runs: the reference's per-character loop.
        run_len = 0
        run_is_space = chunk[0].isspace()
        slice_start = 0
        for i, ch in enumerate(chunk):
            is_space = ch.isspace()
            if run_is_space ^ is_space:
                run_len = 1
                run_is_space = is_space
            else:
                run_len += 1
                if run_len > _MAX_RUN_CHARS:
                    yield chunk[slice_start:i]
                    slice_start = i
                    run_len = 1
        yield chunk[slice_start:]


@cache
def _packaged_vocab() -> tuple[dict[bytes, int], dict[str, int]]:
    """K3's real vocabulary and special names, from the package data (read once)."""
    root = resources.files("kimik3.formats.k3").joinpath("vocab")
    with resources.as_file(root.joinpath("tiktoken.model")) as path:
        ranks = load_tiktoken_bpe(path)
    config = json.loads(root.joinpath("tokenizer_config.json").read_text(encoding="utf-8"))
    return ranks, special_token_ids(len(ranks), config["added_tokens_decoder"])


class K3Tokenizer:
    """K3's BPE tokenizer over tiktoken, with segment-wise prompt encoding.

    Args:
        mergeable_ranks: token bytes -> rank (the base vocabulary, ``num_base_tokens`` entries).
            None (with ``special_tokens`` None): K3's real vocabulary shipped with kimik3
            (163,584 ranks plus K3's special names, 163,840 ids; about 0.5 s to load once).
        special_tokens: special token name -> id, e.g. ``{"<|end_of_msg|>": 163586, ...}``; ids
            outside the reserved block are accepted as given.
        pat_str: the pre-tokenizer split regex (default :data:`K3_PAT_STR`).
        name: a label for the tiktoken encoding.

    Use :meth:`from_pretrained` to load a model directory (it overrides the packaged vocabulary),
    and :func:`default_tokenizer` for a shared instance of the packaged one.

    Raises:
        TokenizerError: only one of ``mergeable_ranks`` / ``special_tokens`` given, or an
            inconsistent vocabulary.
    """

    def __init__(
        self,
        mergeable_ranks: dict[bytes, int] | None = None,
        special_tokens: Mapping[str, int] | None = None,
        *,
        pat_str: str = K3_PAT_STR,
        name: str = "kimi-k3",
    ) -> None:
        if mergeable_ranks is None and special_tokens is None:
            mergeable_ranks, special_tokens = _packaged_vocab()
        elif mergeable_ranks is None or special_tokens is None:
            raise TokenizerError("give both mergeable_ranks and special_tokens, or neither (K3's packaged vocabulary)")
        self.num_base_tokens = len(mergeable_ranks)
        self.special_tokens: dict[str, int] = dict(special_tokens)
        import tiktoken  # at first use, with the vocabulary (start-up time)

        try:
            self._enc = tiktoken.Encoding(
                name=name,
                pat_str=pat_str,
                mergeable_ranks=mergeable_ranks,
                special_tokens=self.special_tokens,
            )
        except ValueError as e:
            raise TokenizerError(f"inconsistent K3 vocabulary: {e}") from e
        self._id_to_special = {v: k for k, v in self.special_tokens.items()}
        self._small: dict[str, list[int]] = {}
        # encode_control's fast path: every special is one `<|name|>` or `[NAME]` tag (_TAG)
        self._tagged = all(_TAG.fullmatch(t) for t in self.special_tokens)

    @classmethod
    def from_pretrained(cls, model_dir: str | os.PathLike[str]) -> K3Tokenizer:
        """Load ``tiktoken.model`` and ``tokenizer_config.json`` from a K3 model directory.

        Special ids are ``num_base_tokens + k`` (k in 0..255), named from ``added_tokens_decoder``
        (``{"163586": {"content": "<|end_of_msg|>", ...}}``); unnamed ones get
        ``<|reserved_token_{id}|>``.

        Raises:
            TokenizerError: a missing file, a malformed ``tiktoken.model`` (see
                :func:`load_tiktoken_bpe`), a config that is not a JSON object, or special
                tokens that clash with the vocabulary.
        """
        root = Path(model_dir)
        ranks = load_tiktoken_bpe(root / "tiktoken.model")
        config_path = root / "tokenizer_config.json"
        try:
            config = json.loads(read_regular_bytes(config_path).decode("utf-8"))
        except (OSError, ValueError) as e:
            raise TokenizerError(f"cannot read {config_path}: {e}") from e
        if not isinstance(config, dict):
            raise TokenizerError(f"{config_path} must hold a JSON object, got {type(config).__name__}")
        specials = special_token_ids(len(ranks), config.get("added_tokens_decoder", {}))
        return cls(ranks, specials, name=f"kimi-k3:{root.name}")

    # -- ids -----------------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        """Number of ids (base tokens + special tokens), e.g. 163,840 for K3."""
        return int(self._enc.n_vocab)

    def token_id(self, name: str) -> int:
        """The id of a special token by name (e.g. ``"<|end_of_msg|>"``).

        Raises:
            TokenizerError: no such special token in this vocabulary.
        """
        try:
            return self.special_tokens[name]
        except KeyError:
            raise TokenizerError(f"special token {name!r} is not in this tokenizer's vocabulary") from None

    @property
    def end_of_msg_id(self) -> int:
        """The id of ``<|end_of_msg|>``, K3's generation stop token."""
        return self.token_id(END_OF_MSG)

    # -- encoding ------------------------------------------------------------------------

    def encode_text(self, text: str) -> list[int]:
        """Tokenize ``text`` as plain text: special-token names in it are ordinary characters.

        Raises:
            UserError: ``text`` is not a ``str``.
        """
        if not isinstance(text, str):
            raise UserError(f"encode_text takes a str, got {type(text).__name__}")
        if len(text) <= _MAX_RUN_CHARS:
            return self._enc.encode_ordinary(text)
        out: list[int] = []
        for piece in _split_long_runs(text):
            out.extend(self._enc.encode_ordinary(piece))
        return out

    def encode_control(self, text: str) -> list[int]:
        """Tokenize a control segment or raw K3 text (special tokens allowed: each is its one id,
        the text between them is encoded as ordinary text), as tiktoken's
        ``encode(text, allowed_special="all")``.

        The text is cut at its tags that are special tokens (``<|name|>``, ``[BOS]``), found by one pattern
        (issue 44: tiktoken converts its 256-name set on every call, half the cost of an answer's
        ids), and the short texts between them (tag names, attributes) are memoised as the
        encoder's segments are; a vocabulary whose specials are not all of that shape takes
        tiktoken's path."""
        specials = self.special_tokens
        token = specials.get(text)
        if token is not None:
            return [token]
        if not self._tagged:
            return self._enc.encode(text, allowed_special="all")
        parts = _TAG_SPLIT.split(text)  # text, tag, text, ..., text: cut in C, no match objects
        out: list[int] = []
        piece = parts[0]  # the text before the next special (a tag that is none is text)
        for tag, after in zip(parts[1::2], parts[2::2], strict=True):
            token = specials.get(tag)
            if token is None:
                piece += tag + after
                continue
            if piece:
                out.extend(self._ordinary(piece, _CONTROL_PIECE))
            out.append(token)
            piece = after
        if piece:
            out.extend(self._ordinary(piece, _CONTROL_PIECE))
        return out

    def _ordinary(self, text: str, memo_up_to: int = _SMALL_SEGMENT) -> list[int]:
        """``encode_ordinary(text)``, memoised for texts up to ``memo_up_to`` characters (a tag's
        name or attributes, a role, a tool name: they repeat every turn; in raw K3 text, a
        scripted answer's reasoning: issue 44). The list is the memo's own: extend, never mutate."""
        if len(text) > memo_up_to:
            return self._enc.encode_ordinary(text)
        small = self._small
        ids = small.get(text)
        if ids is None:
            if len(small) >= _MEMO_ENTRIES:
                small.clear()
            ids = small[text] = self._enc.encode_ordinary(text)
        return ids

    def encode_segment(self, segment: Segment) -> list[int]:
        """Tokenize one segment on its own."""
        if segment.control:
            return self.encode_control(segment.text)
        text = segment.text
        return self._ordinary(text) if len(text) <= _SMALL_SEGMENT else self.encode_text(text)

    def encode_segments(self, segments: Iterable[Segment]) -> list[int]:
        """Tokenize segments, each on its own, and concatenate the ids.

        Raises:
            ValueError: a control segment that is not a special token of this vocabulary and
                contains text tiktoken refuses.
        """
        out: list[int] = []
        extend = out.extend
        specials = self.special_tokens
        small = self._small
        for text, control in segments:  # encode_segment, inlined: this is the hot loop
            if control:
                token = specials.get(text)
                if token is not None:
                    out.append(token)
                else:
                    extend(self.encode_control(text))
            elif len(text) <= _SMALL_SEGMENT:
                ids = small.get(text)
                extend(ids if ids is not None else self._ordinary(text))
            else:
                extend(self.encode_text(text))
        return out

    def encode_messages(
        self,
        messages: Iterable[Message | Mapping[str, Any]],
        tools: Iterable[ToolSpec | Mapping[str, Any] | Any] | None = None,
        *,
        thinking: bool = True,
        thinking_effort: ThinkingEffort | str | None = "max",
        tool_choice: Any = None,
        response_format: Any = None,
        add_generation_prompt: bool = True,
    ) -> list[int]:
        """Encode a conversation to K3 prompt ids (one-shot; see :class:`PromptEncoder` for the
        incremental form). Parameters and errors as :func:`kimik3.formats.k3.encode_segments`."""
        return self.encode_segments(
            encode_segments(
                messages,
                tools,
                thinking=thinking,
                thinking_effort=thinking_effort,
                tool_choice=tool_choice,
                response_format=response_format,
                add_generation_prompt=add_generation_prompt,
            )
        )

    def count_tokens(self, text_or_segments: str | Iterable[Segment]) -> int:
        """Number of tokens of plain text, or of a list of segments.

        Raises:
            UserError: neither a ``str`` nor an iterable of :class:`Segment`.
        """
        if isinstance(text_or_segments, str):
            return len(self.encode_text(text_or_segments))
        if not isinstance(text_or_segments, Iterable):
            raise UserError(f"count_tokens takes a str or segments, got {type(text_or_segments).__name__}")
        n = 0
        for s in text_or_segments:
            if not isinstance(s, Segment):
                raise UserError(f"count_tokens takes a str or Segment items, got a {type(s).__name__} item")
            n += len(self.encode_segment(s))
        return n

    # -- decoding ------------------------------------------------------------------------

    def decode(self, ids: Sequence[int]) -> str:
        """Decode ids to text, keeping every marker (``<|open|>`` etc.) as its string; invalid
        UTF-8 becomes U+FFFD.

        Raises:
            UserError: ``ids`` is not a sequence of ints.
            TokenizerError: an id outside this vocabulary (negative, too large, or unassigned).
        """
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    def decode_bytes(self, ids: Sequence[int]) -> bytes:
        """Decode ids to raw bytes (markers included). Errors as :meth:`decode`."""
        try:
            return self._enc.decode_bytes(list(ids))
        except (KeyError, OverflowError, TypeError, ValueError) as e:
            raise self._bad_ids(ids) from e

    def id_to_token(self, token_id: int) -> str:
        """The string of one id (a special token's name, or the decoded bytes of a base token).

        Raises:
            UserError: ``token_id`` is not an int.
            TokenizerError: an id outside this vocabulary.
        """
        if not isinstance(token_id, int) or isinstance(token_id, bool):
            raise UserError(f"id_to_token takes an int id, got {type(token_id).__name__}")
        special = self._id_to_special.get(token_id)
        if special is not None:
            return special
        try:
            return self._enc.decode_single_token_bytes(token_id).decode("utf-8", errors="replace")
        except (KeyError, OverflowError) as e:
            raise TokenizerError(f"{token_id} is not an id of this vocabulary (ids are 0..{self.vocab_size - 1}, "
                                 "some unassigned)") from e  # fmt: skip

    def _bad_ids(self, ids: Any) -> KimiK3Error:
        """The typed error for ids tiktoken refused (the first bad one named)."""
        if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
            return UserError(f"ids must be a sequence of ints, got {type(ids).__name__}")
        for i, token_id in enumerate(ids):
            if not isinstance(token_id, int) or isinstance(token_id, bool):
                return UserError(f"ids must be ints; ids[{i}] is {type(token_id).__name__} {token_id!r}")
            if not 0 <= token_id < self.vocab_size or token_id not in self._id_to_special:
                try:
                    self._enc.decode_single_token_bytes(token_id)
                except (KeyError, OverflowError):
                    return TokenizerError(f"ids[{i}] = {token_id} is not an id of this vocabulary "
                                          f"(ids are 0..{self.vocab_size - 1}, some unassigned)")  # fmt: skip
        return TokenizerError("tiktoken refused these ids")


@cache
def default_tokenizer() -> K3Tokenizer:
    """A shared :class:`K3Tokenizer` over K3's real vocabulary shipped with kimik3 (loaded on first
    call): exact token counts, budgets and compaction against any K3 endpoint without the
    checkpoint's files."""
    return K3Tokenizer()
