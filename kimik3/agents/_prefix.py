"""How much of each prompt extends the one before: the measure of a cache-stable history.

vLLM's prefix cache (and a server's) serves the part of a prompt that repeats an earlier
prompt's tokens from the start; an agent whose history only grows keeps that part near 100%.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["PrefixStats", "prefix_stats"]

GENERATION_PROMPT = '<|open|>message role="assistant"<|sep|><|open|>think<|sep|>'
"""The generation prompt that ends a K3 prompt with thinking on (docs/k3-format.md § Prompt)."""
_GENERATION_PROMPTS = (GENERATION_PROMPT, '<|open|>message role="assistant"<|sep|><|open|>response<|sep|>')


@dataclass(frozen=True)
class PrefixStats:
    """Prefix reuse over a sequence of prompts (text or token ids).

    Attributes:
        prompts: how many prompts.
        extends: how many prompts (after the first) start with the whole previous prompt, less
            its generation prompt (the assistant header the next prompt renders again).
        shared: summed length of each prompt's common prefix with the previous one (characters
            or tokens): what a prefix cache can serve.
        total: summed length of all prompts.
    """

    prompts: int
    extends: int
    shared: int
    total: int

    @property
    def extend_rate(self) -> float:
        """``extends / (prompts - 1)`` (1.0 for fewer than two prompts)."""
        return self.extends / (self.prompts - 1) if self.prompts > 1 else 1.0

    @property
    def shared_rate(self) -> float:
        """``shared / total``: the share of prompt text a prefix cache could serve."""
        return self.shared / self.total if self.total else 0.0


def _without_generation_prompt(prompt: str) -> str:
    for g in _GENERATION_PROMPTS:
        if prompt.endswith(g):
            return prompt[: -len(g)]
    return prompt


def _common_prefix(a: str | Sequence[int], b: str | Sequence[int]) -> int:
    """Length of the common prefix (binary search over C-speed slice comparisons)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if list(a[:mid]) == list(b[:mid]) if not isinstance(a, str) else a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def prefix_stats(prompts: Sequence[str] | Sequence[Sequence[int]]) -> PrefixStats:
    """:class:`PrefixStats` of consecutive prompts, e.g. ``[c.prompt for c in
    ScriptedEngine.calls]`` (text; the generation prompt is recognised) or lists of prompt ids.
    """
    extends = shared = total = 0
    previous: str | Sequence[int] | None = None
    for p in prompts:
        total += len(p)
        if previous is not None:
            if isinstance(p, str) and isinstance(previous, str):
                extends += p.startswith(_without_generation_prompt(previous))
            else:
                extends += list(p[: len(previous)]) == list(previous)
            shared += _common_prefix(previous, p)
        previous = p
    return PrefixStats(len(prompts), extends, shared, total)
