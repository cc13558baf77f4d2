"""The token usage a server reports, read into kimik3's :class:`~kimik3.types.Usage`: the counts
(bounded: :func:`~._counts.usage_count`), the prompt cache's reads and writes, and the reasoning
tokens, under the names each server uses for them. Where a chunk carries its usage
(``choices[0].usage`` first, then the top-level ``usage``) is the reader's
(:mod:`._chat`, :mod:`._completions`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..types import CompletionTokensDetails, PromptTokensDetails, Usage
from ._counts import usage_count

__all__ = ["completion_details", "prompt_details", "read_usage"]


def read_usage(usage: Mapping[str, Any], cache_lifetime: str | None = None) -> Usage:
    """A server's ``usage`` object as a :class:`~kimik3.types.Usage`: a count it does not send
    is 0, the details as :func:`prompt_details` and :func:`completion_details` read them.

    Raises:
        APIResponseValidationError: a count beyond ``2**53`` (:func:`~._counts.usage_count`).
    """
    return Usage(
        prompt_tokens=usage_count(usage, "prompt_tokens") or 0,
        completion_tokens=usage_count(usage, "completion_tokens") or 0,
        total_tokens=usage_count(usage, "total_tokens") or 0,
        prompt_tokens_details=prompt_details(usage, cache_lifetime),
        completion_tokens_details=completion_details(usage),
    )


def prompt_details(usage: Mapping[str, Any], cache_lifetime: str | None = None) -> PromptTokensDetails | None:
    """``usage.prompt_tokens_details`` (OpenAI shape) when the server sent ``cached_tokens`` or a
    count of cache writes, else None (unknown). Counts are read with
    :func:`~._counts.usage_count` (which raises for one beyond ``2**53``).

    Cache reads: ``prompt_tokens_details.cached_tokens`` (OpenAI), else the top-level
    ``usage.cached_tokens`` that Moonshot's chat completions send (platform.kimi.ai/docs/api/chat,
    as github.com/earendil-works/pi issue 8075 quotes it, 2026-08-13).

    Cache writes are read where servers put them: ``prompt_tokens_details.cache_write_tokens``
    (the OpenAI-shaped extension: OpenRouter, Azure's ``input_tokens_details.cache_write_tokens``),
    else ``cache_creation_input_tokens`` with its ``cache_creation.ephemeral_1h_input_tokens``
    split (Anthropic's Messages API names, which Moonshot's Anthropic-compatible endpoint mirrors).
    Moonshot's chat-completions wording for K3.1's billed writes is in no source kimik3 has, so
    every one of these is read. With ``cache_lifetime="1h"`` (the request's
    ``prompt_cache_lifetime``) and no split from the server, all writes are 1-hour ones.
    """
    details = usage.get("prompt_tokens_details")
    details = details if isinstance(details, Mapping) else {}
    cached = usage_count(details, "cached_tokens", "usage.prompt_tokens_details")
    if cached is None:  # Moonshot's own chat completions put it at the top: usage.cached_tokens
        cached = usage_count(usage, "cached_tokens")
    writes = usage_count(details, "cache_write_tokens", "usage.prompt_tokens_details")
    if writes is None:
        writes = usage_count(usage, "cache_creation_input_tokens")
    split = usage.get("cache_creation")
    long = None
    if isinstance(split, Mapping):
        long = usage_count(split, "ephemeral_1h_input_tokens", "usage.cache_creation")
    if long is None and writes is not None and cache_lifetime == "1h":
        long = writes
    if writes is not None and long is not None:
        long = min(long, writes)
    if cached is None and writes is None:
        return None
    return PromptTokensDetails(cached_tokens=cached or 0, cache_write_tokens=writes, cache_write_1h_tokens=long)


def completion_details(usage: Mapping[str, Any]) -> CompletionTokensDetails | None:
    """``usage.completion_tokens_details`` when the server sent ``reasoning_tokens`` (bounded as
    every count), else None."""
    details = usage.get("completion_tokens_details")
    if not isinstance(details, Mapping):
        return None
    reasoning = usage_count(details, "reasoning_tokens", "usage.completion_tokens_details")
    return CompletionTokensDetails(reasoning_tokens=reasoning) if reasoning is not None else None
