"""What a model call costs: USD prices per 1M tokens, chosen by model id, and the arithmetic.

Prices of Moonshot's hosted API (USD per 1M tokens; as issues 31 and 33 of this project give
them, from Moonshot's announcements of K3 and of Kimi K3.1 Pro, 2026-10-23):

=============================  =====  ============  ======
model id                       input  cached input  output
=============================  =====  ============  ======
``kimi-k3``                    3.00   0.30          15.00
``kimi-k3.1-pro``              2.00   0.20          10.00
``kimi-k3.1-pro-highspeed``    2.00   0.20          10.00
=============================  =====  ============  ======

Only these exact ids (case-insensitive) are priced: a self-hosted engine (a model directory, a
``vllm serve`` of ``moonshotai/Kimi-K3``) costs what its hardware costs, not Moonshot's prices,
so it gets no price unless its user gives one (``Agent(pricing=Pricing(...))``).

A call's cost (:meth:`Pricing.cost`) counts its prompt tokens served from the provider's prefix
cache (``usage.prompt_tokens_details.cached_tokens``) at the cached-input price and the rest of
the prompt at the input price; completion tokens (reasoning included: K3 bills its thinking as
output) at the output price.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._checks import check_number
from .types import Usage

__all__ = ["PRICES", "Pricing", "format_usd", "pricing_for"]

PER_TOKENS = 1_000_000
"""Prices are per this many tokens."""


@dataclass(frozen=True)
class Pricing:
    """A model's prices in USD per 1M tokens.

    Attributes:
        input: prompt tokens not served from the prefix cache.
        cached_input: prompt tokens served from the prefix cache
            (``usage.prompt_tokens_details.cached_tokens``).
        output: completion tokens (reasoning included).

    Raises:
        UserError: a price that is not a finite number >= 0.
    """

    input: float
    cached_input: float
    output: float

    def __post_init__(self) -> None:
        for name in ("input", "cached_input", "output"):
            check_number(f"Pricing.{name}", getattr(self, name), minimum=0)

    def cost(self, usage: Usage) -> float:
        """The USD cost of ``usage`` (one call's, or a sum of calls').

        ``(uncached prompt * input + cached * cached_input + completion * output) / 1e6``, with
        ``uncached prompt = prompt_tokens - cached_tokens`` (never below 0: a server reporting
        more cached than prompt tokens is billed as all cached). Never negative, even for a
        hand-built :class:`Usage` with negative counts: each count is taken as at least 0 (the
        same clamp as ``kimik3.types.clamp_usage``, issue 41).
        """
        prompt = max(usage.prompt_tokens, 0)
        cached = max(min(usage.cached_tokens, prompt), 0)
        fresh = prompt - cached
        completion = max(usage.completion_tokens, 0)
        return max((fresh * self.input + cached * self.cached_input + completion * self.output) / PER_TOKENS, 0.0)


_K3 = Pricing(input=3.0, cached_input=0.30, output=15.0)
_K3_1_PRO = Pricing(input=2.0, cached_input=0.20, output=10.0)

PRICES: dict[str, Pricing] = {
    "kimi-k3": _K3,
    "kimi-k3.1-pro": _K3_1_PRO,
    "kimi-k3.1-pro-highspeed": _K3_1_PRO,
}
"""Moonshot's hosted prices by model id (lower case; see the module docstring)."""


def pricing_for(model: str | None) -> Pricing | None:
    """The hosted price of ``model`` (an id of :data:`PRICES`, case-insensitive), else None
    (self-hosted engines, other providers' ids, an unknown or empty id)."""
    if not model:
        return None
    return PRICES.get(model.strip().lower())


def format_usd(cost: float) -> str:
    """``$0.0492``: four decimals from a cent up, three significant digits below (``$0.000123``),
    so a cheap call never shows as ``$0.0000``."""
    if cost >= 0.01 or cost == 0:
        return f"${cost:.4f}"
    return f"${cost:.3g}" if cost >= 1e-4 else f"${cost:.2e}"
