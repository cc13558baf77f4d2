"""The loop breaker: the same tool call, or the same short cycle of calls, made again and again
with the same results (issue 41: K3 repeats one ``Read`` ~90 times in a row, kimi-code #3214;
harness reminders alone do not break it, kimi-cli #2637).

A call is its tool name and its canonical arguments (JSON with sorted keys, so key order and
spacing do not matter); a *step* is a call with a digest of its result. The run's steps, in call
order across turns, are searched for a repeated block at their end: one call (period 1) or a
cycle of up to ``Budgets.loop_cycle`` calls, repeated with the same calls AND the same results.
``rounds`` is how many times the block was made in a row. The breaker escalates
(:class:`~kimik3.agents.Budgets`' thresholds):

- ``rounds >= loop_warn``: the call runs and its result carries :data:`~._prompts.LOOP_NOTE`
  (what was repeated, that its result is already in the context);
- a call that would make ``rounds >= loop_block``: not run, an error result says why
  (:func:`~kimik3.tools._failures.loop_blocked`); its step takes the result the loop gave each
  time, so going on keeps counting;
- a call that would make ``rounds >= loop_stop``: not run, and the run ends after the turn with
  ``stop_reason="loop_detected"``, once the model was shown a blocked call in an earlier turn
  (a note, with ``loop_block=None``); before that it is blocked, so identical calls made
  together in one turn never end a run the model was not warned in.

A stage ``Budgets`` sets to None is never reached (all three None: no loop breaker).

Results are compared without their volatile text (:func:`steady`: the bash trailer's run time, a
sub-agent's token counts, date-times and clock times), so ``bash pytest`` ten times with ten run
times is a loop, and so is the same ``task`` whose sub-agent answers the same each time.
A call with other arguments (paging a file with another offset) or the same call with another
result (polling output that changes, a background job's age) is another step: it breaks the repetition, never trips it.
The cost is O(``loop_stop * loop_cycle``) comparisons of short strings a call (bench/harness.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias

from ..tools import ToolResult, failures
from ..tools.failures import FailureText
from ..types import TextPart, ToolCall
from ._prompts import LOOP_NOTE, LOOP_THEN
from ._types import Budgets

__all__ = ["Loop", "LoopBreaker", "call_key", "noted"]

_UNKNOWN = ""  # the digest of a step whose result is not known yet (never equal to a real one)
_SHOWN = 160  # characters of a call shown to the model / in an issue
_OFF = 1 << 62  # the threshold of a stage Budgets switched off (None): never reached


_CANONICAL = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":"))
"""One encoder for every key (``json.dumps`` with options builds one a call: issue 44)."""


def call_key(call: ToolCall) -> str:
    """``name {canonical arguments}``: the arguments as JSON with sorted keys and no spaces (their
    text as sent when it is not JSON; none, or only spaces, is ``{}`` as the tool reads it)."""
    text = call.function.arguments if call.function.arguments.strip() else "{}"
    with contextlib.suppress(ValueError, RecursionError):
        text = _CANONICAL.encode(json.loads(text))
    return f"{call.function.name} {text}"


# Text in a result that changes from one identical call to the next without saying anything new:
# the bash tool's run time in its trailer ("[exit code: 0, 0.01 s]", tools/coding/_bash.py), a
# sub-agent's token counts (harness/_tasks.py), a test runner's run time and clock readings
# (ISO-8601 date-times, HH:MM:SS[.fff]). A background job's age ("[bg1: running for 5 s]")
# is NOT volatile: polling a silent job must stay a different step each poll.
_CLOCK = re.compile(r":\d\d:")  # in every clock reading (H:MM:SS), rarely in code with colons: searched fast
_VOLATILE: tuple[tuple[Callable[[str], bool], re.Pattern[str], str], ...] = (
    (lambda text: "[exit code: " in text, re.compile(r"\[exit code: (-?\d+), \d+(?:\.\d+)? s\]"),
     r"[exit code: \1]"),
    # the harness's task tool: a sub-agent's token counts differ from run to run, its answer is what it gave
    (lambda text: "[sub-agent: " in text,
     re.compile(r"\[sub-agent: (\d+) turns, \d+ prompt \+ \d+ completion tokens\]"), r"[sub-agent: \1 turns]"),
    (lambda text: "-" in text and ":" in text,
     re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?"), "<date-time>"),
    (lambda text: ":" in text and _CLOCK.search(text) is not None,
     re.compile(r"(?<![\d:])\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?(?![\d:])"), "<time>"),
    # a test runner's own run time: pytest's "1 passed in 0.03s", unittest's "Ran 1 test in 0.001s"
    (lambda text: " in " in text, re.compile(r"(?<= in )\d+\.\d+s\b"), "<seconds>"),
)
"""Each: a quick test every text with a match passes (a text that fails it is not searched: issue
44), the pattern, its replacement."""


def steady(text: str) -> str:
    """``text`` with its volatile parts (``_VOLATILE``) replaced by fixed placeholders, so two
    results that differ only in a run time or a clock reading digest the same (issue 41: a bash
    loop whose trailer's seconds change each time still is a loop)."""
    for maybe, pattern, replacement in _VOLATILE:
        if maybe(text):
            text = pattern.sub(replacement, text)
    return text


def _digest(result: ToolResult) -> str:
    """A digest of what the call gave (its text with volatile parts made :func:`steady`, images,
    error flag)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(b"E" if result.is_error else b"R")
    content = result.content
    if isinstance(content, str):  # text: itself, not its JSON (issue 44: the regexes read less)
        h.update(b"T" + steady(content).encode("utf-8", "surrogatepass"))
    else:
        h.update(steady(result.model_dump_json(include={"content"})).encode("utf-8", "surrogatepass"))
    return h.hexdigest()


@dataclass(frozen=True)
class Loop:
    """A repeated block of calls at the end of the run's steps.

    Attributes:
        calls: the block's calls (``name {arguments}``), in order; one for an identical call.
        rounds: times the block was made in a row with the same results.
    """

    calls: tuple[str, ...]
    rounds: int

    def __str__(self) -> str:
        shown = [c if len(c) <= _SHOWN else c[:_SHOWN] + "..." for c in self.calls]
        what = shown[0] if len(shown) == 1 else "the cycle " + " -> ".join(shown)
        return f"{what} ({self.rounds} times in a row, with the same results)"


Verdict = Literal["run", "block", "stop"]
Step: TypeAlias = "tuple[int, Verdict, Loop | None]"
"""A call's step index, whether it runs, and the loop it extends (:meth:`LoopBreaker.check`)."""


class LoopBreaker:
    """The steps of one run and the loop they end with (the module docstring).

    Args:
        budgets: the run's :class:`Budgets` (``loop_warn``, ``loop_block``, ``loop_stop``, ``loop_cycle``).
    """

    def __init__(self, budgets: Budgets) -> None:
        self.warn, self.block, self.stop = (_OFF if n is None else n
                                            for n in (budgets.loop_warn, budgets.loop_block, budgets.loop_stop))
        self.cycle = budgets.loop_cycle
        longest = max((n for n in (budgets.loop_warn, budgets.loop_block, budgets.loop_stop) if n is not None),
                      default=0)
        self._keep = 2 * longest * self.cycle + 2  # steps older than the longest loop it counts are forgotten
        self.warned = False  # the model was shown a blocked call (a note, when none are blocked): a stop needs it
        self.steps: list[tuple[str, str]] = []  # (call key, result digest), oldest first
        self.blocked = 0  # calls not run (RunResult.issues says which)

    def _loop(self, end: int) -> Loop | None:
        """The shortest block repeated at the end of ``steps[:end]`` (two rounds at least)."""
        steps = self.steps
        for p in range(1, self.cycle + 1):
            n = 0
            while end - n - 1 - p >= 0 and steps[end - n - 1] == steps[end - n - 1 - p] \
                    and steps[end - n - 1][1] != _UNKNOWN:
                n += 1
            rounds = (n + p) // p
            if rounds >= 2:
                return Loop(tuple(k for k, _ in steps[end - p:end]), rounds)
        return None

    def check(self, call: ToolCall, key: str | None = None) -> Step:
        """Before ``call`` runs: its step's index (for :meth:`settle`), whether it runs, and the
        loop it would extend (None: none). A call that extends a loop past ``loop_block`` is
        recorded with the result the loop gave each time. ``key``: its :func:`call_key` when
        already made (None: made here)."""
        if key is None:
            key = call_key(call)
        index = len(self.steps)
        predicted = _UNKNOWN
        for p in range(1, self.cycle + 1):
            if index >= p and self.steps[index - p][0] == key and self.steps[index - p][1] != _UNKNOWN:
                predicted = self.steps[index - p][1]
                break
        self.steps.append((key, predicted))
        loop = self._loop(index + 1) if predicted != _UNKNOWN else None
        verdict: Verdict = "run"
        if loop is not None and loop.rounds >= self.stop:
            verdict = "stop"
        elif loop is not None and loop.rounds >= self.block:
            verdict = "block"
        if verdict == "run":
            self.steps[index] = (key, _UNKNOWN)  # its real result decides
        else:
            self.blocked += 1
        return index, verdict, loop

    def settle(self, index: int, result: ToolResult) -> Loop | None:
        """Record the result of the call :meth:`check` gave ``index``; the loop its step ends,
        when it has reached ``loop_warn`` (the model is told), else None."""
        key, _ = self.steps[index]
        self.steps[index] = (key, _digest(result))
        loop = self._loop(index + 1)
        return loop if loop is not None and loop.rounds >= self.warn else None

    def screen(self, calls: Sequence[ToolCall], text: FailureText
               ) -> tuple[list[Step], list[ToolResult | None], Loop | None]:
        """:meth:`check` each call of a turn, in call order: their steps, the error result of each
        call that is not run (None for those that run), and the loop that ends the run (None:
        none does). Calls made together are checked in the order their calls were first made in
        the run (new ones last, in call order), so the same batch sent in another order each turn
        repeats the same steps."""
        keys = [call_key(call) for call in calls]
        order: Sequence[int] = range(len(calls))
        if len(calls) > 1:  # one call has one order (issue 44: no index of the run's steps a turn)
            first: dict[str, int] = {}
            for i, (key, _) in enumerate(self.steps):
                first.setdefault(key, i)
            order = sorted(order, key=lambda i: first.get(keys[i], len(self.steps) + i))
        checked: dict[int, Step] = {}
        for i in order:
            checked[i] = self.check(calls[i], keys[i])
        steps = [checked[i] for i in range(len(calls))]
        if not self.warned:  # the model never saw a block: a block first (identical calls in one turn)
            steps = [(i, "block", loop) if verdict == "stop" else (i, verdict, loop) for i, verdict, loop in steps]
        results: list[ToolResult | None] = [None] * len(calls)
        stop = None
        for i, (_, verdict, loop) in enumerate(steps):
            if verdict != "run":
                self.warned = True
                results[i] = ToolResult.from_failure(failures.loop_blocked(str(loop), ends_run=verdict == "stop"), text)
                stop = loop if verdict == "stop" else stop
        return steps, results, stop

    def answered(self, step: Step, result: ToolResult) -> ToolResult:
        """``result`` of a call :meth:`screen` let run, recorded (:meth:`settle`), with
        :data:`~._prompts.LOOP_NOTE` first once its loop reached ``loop_warn``; the error result
        of a call that was not run, as it is."""
        index, verdict, _ = step
        if verdict != "run":
            return result
        loop = self.settle(index, result)
        if loop is None:
            return result
        if self.block == _OFF:
            self.warned = True  # no blocks: the note is the warning a stop needs
        # a call run past loop_block (its cycle's other calls in the same turn had no result yet
        # when it was screened) is not told that this count stops calls: the next one does
        return noted(result, loop, max(self.block, loop.rounds + 1) if self.block < _OFF else None)

    def trim(self) -> None:
        """Forget steps older than any loop the breaker counts (between turns)."""
        if len(self.steps) > 2 * self._keep:
            del self.steps[: len(self.steps) - self._keep]


def noted(result: ToolResult, loop: Loop, block: int | None = None) -> ToolResult:
    """``result`` with :data:`~._prompts.LOOP_NOTE` first (what the model repeated; from which
    repetition, ``block``, its calls are not run: None says nothing of it)."""
    note = LOOP_NOTE.format(loop=loop, then=LOOP_THEN.format(n=block) if block is not None else "")
    content = note + result.content if isinstance(result.content, str) else [TextPart(text=note), *result.content]
    return ToolResult(content=content, is_error=result.is_error)
