"""What a model call costs: USD prices per 1M tokens, chosen by model id, and the arithmetic.

Prices of Moonshot's hosted API (USD per 1M tokens):

=============================  =====  ============  ===========  ===========  ======
model id                       input  cached input  cache write  cache write  output
                                                    (5 minutes)  (1 hour)
=============================  =====  ============  ===========  ===========  ======
``kimi-k3``                    3.00   0.30          (input)      (input)      15.00
``kimi-k3.1-pro``              2.00   0.20          2.00         4.00         10.00
``kimi-k3.1-pro-highspeed``    priced apart; no source gives its figures: none here
=============================  =====  ============  ===========  ===========  ======

Sources: ``kimi-k3``: Moonshot's K3 announcement as issue 31 of this project gives it (no cache
write is billed: written prompt tokens cost the input price). ``kimi-k3.1-pro``: Moonshot's K3.1
announcement (2026-10-23) as issues 33 and 43 give it: cache reads $0.20/M, cache *writes* billed
from then on, $2/M for a 5-minute lifetime and $4/M for 1 hour (``prompt_cache_options``,
:attr:`~kimik3.types.ModelSettings.prompt_cache_lifetime`). ``kimi-k3.1-pro-highspeed`` is "priced
apart" (issue 43, the same announcement). Searched on 2026-12-02: no page of Moonshot's states its
prices. A relay's page (https://docs.apiyi.com/api-capabilities/kimi-k3.1/overview, tested there
2026-10-25) lists $4 input, $20 output, $0.20 cache reads, $4 / $8 cache writes (5 minutes / 1
hour) and says they match the official ones, but its cache figures are "configured, not
verified" and a relay is not Moonshot: kimik3 prices Highspeed not at all rather than with
unconfirmed figures. Its user gives them (``Pricing(...)``, ``--price``), and a USD budget without
them is refused before any model call (:func:`missing_prices` says why). The same search found
Moonshot's forum post on K3.1's lifetimes
(https://forum.moonshot.ai/t/context-caching-upgrade-5-min-1-hour-ttl-options/613): ``5m`` and
``1h``, ``5m`` when ``prompt_cache_options`` is omitted, cache writes billed apart; it confirms the
Pro write prices' two lifetimes, not their figures (issue 43 gives those).

Only these exact ids (case-insensitive) are priced: a self-hosted engine (a model directory, a
``vllm serve`` of ``moonshotai/Kimi-K3``) costs what its hardware costs, not Moonshot's prices,
so it gets no price unless its user gives one (``Agent(pricing=Pricing(...))``).

A call's cost (:meth:`Pricing.cost`) splits its prompt tokens three ways: served from the
provider's prefix cache (``usage.prompt_tokens_details.cached_tokens``) at the cached-input price,
written to the cache (``cache_write_tokens``; of them ``cache_write_1h_tokens`` with a 1-hour
lifetime) at the cache-write price of their lifetime, the rest at the input price; completion
tokens (reasoning included: K3 bills its thinking as output) at the output price.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._checks import check_number
from .types import Usage

__all__ = ["PRICES", "UNPRICED", "Pricing", "format_usd", "missing_prices", "pricing_for"]

PER_TOKENS = 1_000_000
"""Prices are per this many tokens."""


@dataclass(frozen=True)
class Pricing:
    """A model's prices in USD per 1M tokens.

    Attributes:
        input: prompt tokens neither served from nor written to the prefix cache.
        cached_input: prompt tokens served from the prefix cache
            (``usage.prompt_tokens_details.cached_tokens``).
        output: completion tokens (reasoning included).
        cache_write: prompt tokens written to the cache with the 5-minute lifetime (the
            default); None: writes are not billed apart (they cost :attr:`input`).
        cache_write_1h: prompt tokens written with the 1-hour lifetime; None: as
            :attr:`cache_write`.

    Raises:
        UserError: a price that is not a finite number >= 0.
    """

    input: float
    cached_input: float
    output: float
    cache_write: float | None = None
    cache_write_1h: float | None = None

    def __post_init__(self) -> None:
        for name in ("input", "cached_input", "output"):
            check_number(f"Pricing.{name}", getattr(self, name), minimum=0)
        for name in ("cache_write", "cache_write_1h"):
            check_number(f"Pricing.{name}", getattr(self, name), minimum=0, optional=True)

    def cost(self, usage: Usage) -> float:
        """The USD cost of ``usage`` (one call's, or a sum of calls').

        ``(fresh * input + cached * cached_input + writes_5m * cache_write + writes_1h *
        cache_write_1h + completion * output) / 1e6``, the prompt split as ``prompt_tokens =
        fresh + cached + writes_5m + writes_1h``. Counts a server reports beyond the prompt are
        bounded by it (cached first, then writes): it is never billed for more prompt tokens
        than it has. Never negative, even for a hand-built :class:`Usage` with negative counts:
        each count is taken as at least 0 (the same clamp as ``kimik3.types.clamp_usage``, issue 41).
        """
        prompt = max(usage.prompt_tokens, 0)
        cached = max(min(usage.cached_tokens, prompt), 0)
        writes = max(min(usage.cache_write_tokens, prompt - cached), 0)
        long = max(min(usage.cache_write_1h_tokens, writes), 0)
        fresh = prompt - cached - writes
        completion = max(usage.completion_tokens, 0)
        short_price = self.input if self.cache_write is None else self.cache_write
        long_price = short_price if self.cache_write_1h is None else self.cache_write_1h
        return max((fresh * self.input + cached * self.cached_input + (writes - long) * short_price
                    + long * long_price + completion * self.output) / PER_TOKENS, 0.0)


_K3 = Pricing(input=3.0, cached_input=0.30, output=15.0)
_K3_1_PRO = Pricing(input=2.0, cached_input=0.20, output=10.0, cache_write=2.0, cache_write_1h=4.0)

PRICES: dict[str, Pricing] = {
    "kimi-k3": _K3,
    "kimi-k3.1-pro": _K3_1_PRO,
}
"""Moonshot's hosted prices by model id (lower case; see the module docstring)."""

UNPRICED: dict[str, str] = {
    "kimi-k3.1-pro-highspeed": "is priced apart from kimi-k3.1-pro (Moonshot, 2026-10-23) and its prices are "
                               "unknown to kimik3 (no Moonshot page states them)",
}
"""Hosted model ids known to have prices of their own that kimik3 does not know, and why."""


def pricing_for(model: str | None) -> Pricing | None:
    """The hosted price of ``model`` (an id of :data:`PRICES`, case-insensitive), else None
    (self-hosted engines, other providers' ids, an unknown or empty id, an id of :data:`UNPRICED`)."""
    if not model:
        return None
    return PRICES.get(model.strip().lower())


def missing_prices(model: str | None) -> str:
    """Why ``model`` has no price (for the refusal of a USD budget without prices):
    ``model 'kimi-k3.1-pro-highspeed' is priced apart ...`` or ``model 'x' has none in kimik3's
    table (its hosted ids: kimi-k3, kimi-k3.1-pro)``."""
    key = (model or "").strip().lower()
    if key in UNPRICED:
        return f"model {model!r} {UNPRICED[key]}"
    if not key:
        return "the engine names no model, so kimik3 cannot look up its prices"
    return f"model {model!r} has none in kimik3's table (its hosted ids: {', '.join(PRICES)})"


def format_usd(cost: float) -> str:
    """``$0.0492``: four decimals from a cent up, three significant digits below (``$0.000123``),
    so a cheap call never shows as ``$0.0000``."""
    if cost >= 0.01 or cost == 0:
        return f"${cost:.4f}"
    return f"${cost:.3g}" if cost >= 1e-4 else f"${cost:.2e}"
