"""Time to first token, measured at the model-call boundary: a :class:`~kimik3.Client` whose
calls note how long their first streamed event took (reasoning, text or a tool call starting).

The agent's own events cannot say it: between two turns come tools, compaction and dynamic
tool declarations. A client of its own per attempt (over the shared engine) keeps the timings
apart; retries are included, as a user waits through them too.
"""

from __future__ import annotations

import statistics
import time

from .._client import Client
from .._tracing import Span
from ..engines import CallSource, Engine, ModelCall
from ..formats.k3 import PromptCache
from ..types import ChatRequest

__all__ = ["TimedClient"]


class TimedClient(Client):
    """A :class:`~kimik3.Client` that records each model call's time to first event.

    Attributes:
        ttfts: seconds from the start of each call to its first event, in call order (a call
            that produced no event is not counted).
    """

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self.ttfts: list[float] = []

    def stream_request(
        self, request: ChatRequest, *, prompt_cache: PromptCache | None = None, trace_parent: Span | None = None
    ) -> ModelCall:
        """:meth:`Client.stream_request`, timed."""
        call = super().stream_request(request, prompt_cache=prompt_cache, trace_parent=trace_parent)
        return ModelCall(self._timed(call))

    async def _timed(self, call: ModelCall) -> CallSource:
        started = time.monotonic()
        first = True
        async with call:
            async for event in call:
                if first:
                    self.ttfts.append(time.monotonic() - started)
                    first = False
                yield event
            yield call.completion

    @property
    def ttft_p50(self) -> float | None:
        """The median of :attr:`ttfts` (None without a timed call)."""
        return statistics.median(self.ttfts) if self.ttfts else None
