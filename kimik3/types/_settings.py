"""``ModelSettings``: the one settings type of a model call, merged level by level.

Every sampling field is declared here and nowhere else; :class:`~kimik3.Client`,
:class:`~kimik3.Agent`, :class:`~kimik3.types.ChatRequest` and the ``kimik3`` command all take
this class. Levels merge as pydantic-ai's do (model < agent < run): a field a later level sets
wins, a field it leaves unset (None) keeps the earlier level's value, and K3's card defaults
(:mod:`kimik3._defaults`) fill what no level set::

    card defaults < Client(settings=) < Agent(settings=) < agent.run(..., settings=)
    card defaults < Client(settings=) < client.chat(..., settings=, temperature=...)

The card's defaults differ by use: one chat call samples with top_p 0.95
(:data:`SINGLE_STEP_SETTINGS`), agentic work with top_p 1.0 (:data:`AGENTIC_SETTINGS`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal

from .._checks import check_instance, check_int, check_number
from .._defaults import (
    AGENTIC_SAMPLING,
    DEFAULT_REASONING_EFFORT,
    REASONING_EFFORTS,
    SINGLE_STEP_SAMPLING,
    ReasoningEffort,
)
from .._exceptions import InvalidEffortError, UserError

__all__ = ["AGENTIC_SETTINGS", "PROMPT_CACHE_LIFETIMES", "SINGLE_STEP_SETTINGS", "ModelSettings", "PromptCacheLifetime"]

PromptCacheLifetime = Literal["5m", "1h"]
"""How long a provider keeps the prompt prefix a call writes to its cache (Moonshot's K3.1
``prompt_cache_options``, 2026-10-23: 5 minutes or 1 hour, billed at different write prices)."""

PROMPT_CACHE_LIFETIMES: tuple[PromptCacheLifetime, ...] = ("5m", "1h")


@dataclass(frozen=True)
class ModelSettings:
    """Settings of a model call; None (the default of every field) means "not set at this
    level" (see the module docstring for how levels merge).

    Attributes:
        reasoning_effort: low / high / max, or "none" (thinking off); card default max.
        temperature: sampling temperature (>= 0); card default 1.0.
        top_p: nucleus sampling, in (0, 1]; card default 0.95 for one call, 1.0 for agents.
        max_tokens: completion budget per model call (None: the engine's default, or what the
            prompt leaves of the context window).
        seed: sampling seed, where the engine supports one.
        prompt_cache_lifetime: how long the provider keeps this call's prompt in its cache,
            ``"5m"`` or ``"1h"`` (sent as Moonshot's ``prompt_cache_options`` on its hosted API;
            an engine with no such option refuses it: vLLM and SGLang keep their prefix cache
            as long as memory allows). None: the provider's default (5 minutes on Moonshot's).
        extra: engine-specific extras (vLLM ``SamplingParams`` fields / extra request body);
            merged key by key, a later level's key winning.

    Raises:
        InvalidEffortError: an effort outside low / high / max / none (also a UserError).
        UserError: a sampling value of the wrong type or out of range (``temperature`` < 0,
            ``top_p`` outside (0, 1], ``max_tokens`` < 1), ``extra`` not a dict, a
            ``prompt_cache_lifetime`` other than ``"5m"`` / ``"1h"``.
    """

    reasoning_effort: ReasoningEffort | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    prompt_cache_lifetime: PromptCacheLifetime | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.reasoning_effort is not None and self.reasoning_effort not in REASONING_EFFORTS:
            raise InvalidEffortError(
                f"ModelSettings.reasoning_effort must be low, high, max or none, got {self.reasoning_effort!r:.80}"
            )
        check_number("ModelSettings.temperature", self.temperature, minimum=0, optional=True)
        check_number("ModelSettings.top_p", self.top_p, above=0, maximum=1, optional=True)
        check_int("ModelSettings.max_tokens", self.max_tokens, minimum=1, optional=True)
        check_int("ModelSettings.seed", self.seed, minimum=-(2**63), optional=True)
        check_instance("ModelSettings.extra", self.extra, dict, "a dict", optional=False)
        if self.prompt_cache_lifetime is not None and self.prompt_cache_lifetime not in PROMPT_CACHE_LIFETIMES:
            raise UserError(f"ModelSettings.prompt_cache_lifetime must be '5m' or '1h', "
                            f"got {self.prompt_cache_lifetime!r:.80}")

    @classmethod
    def of(cls, **options: Any) -> ModelSettings:
        """``ModelSettings(**options)``, None values left unset, an unknown name a
        :class:`~kimik3.UserError` that lists the known ones (a typo is never ignored silently)."""
        known = [f.name for f in fields(cls)]
        unknown = [name for name in options if name not in known]
        if unknown:
            raise UserError(f"unexpected option(s) {', '.join(unknown)}; expected {', '.join(known)}")
        return cls(**{name: value for name, value in options.items() if value is not None})

    def merged(self, override: ModelSettings | None) -> ModelSettings:
        """These settings with ``override``'s on top: each field ``override`` sets wins, its
        ``extra`` keys are added (replacing the same keys). ``self`` when ``override`` is None."""
        if override is None:
            return self
        # the common cases without building (and checking) a new object: one side decides alone
        if not self.extra and all(getattr(override, n) is not None or getattr(self, n) is None for n in _SCALARS):
            return override
        if not override.extra and all(getattr(override, n) is None for n in _SCALARS):
            return self
        values: dict[str, Any] = {}
        for f in fields(self):
            mine, theirs = getattr(self, f.name), getattr(override, f.name)
            if f.name == "extra":
                values[f.name] = {**mine, **theirs}
            else:
                values[f.name] = mine if theirs is None else theirs
        return ModelSettings(**values)


_SCALARS = tuple(f.name for f in fields(ModelSettings) if f.name != "extra")

SINGLE_STEP_SETTINGS = ModelSettings(
    reasoning_effort=DEFAULT_REASONING_EFFORT,
    temperature=SINGLE_STEP_SAMPLING.temperature,
    top_p=SINGLE_STEP_SAMPLING.top_p,
)
"""K3's card defaults for one chat call (:class:`~kimik3.Client`, a bare ``ChatRequest``)."""

AGENTIC_SETTINGS = ModelSettings(
    reasoning_effort=DEFAULT_REASONING_EFFORT,
    temperature=AGENTIC_SAMPLING.temperature,
    top_p=AGENTIC_SAMPLING.top_p,
)
"""K3's card defaults for multi-step agent work (:class:`~kimik3.Agent`)."""
