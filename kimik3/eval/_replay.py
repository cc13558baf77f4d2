"""``kimik3 eval replay``: the model requests recorded in sessions, sent again to an endpoint, each
answer's structure scored against the recorded answer's: the Vendor Verifier's tool-call
evaluation (MoonshotAI/K2-Vendor-Verifier, ``tool_calls_eval.py`` and its README's metrics)
applied to a user's own traffic.

A session holds every request it made: each model turn's prompt is the history recorded before
its assistant message (compactions applied), with the tools of the run's ``run_start`` record and
its settings (reasoning effort, sampling, max_tokens); a turn that follows the agent's budget
notice was a tool-free summary turn (``tool_choice: "none"``). Sessions written before kimik3
recorded ``run_start`` lack the tool declarations: their turns are listed as skipped, not sent
with guessed tools.

Scores, per request (``ReplayRow``) and summed (:func:`replay_summary`), the recorded answer
standing where the Vendor Verifier has Moonshot's official API:

- trigger similarity: TP both finished with ``tool_calls``, FP only the replay, FN only the
  recording, TN neither; ``tool_call_precision``, ``tool_call_recall``, ``tool_call_f1``;
- ``schema_accuracy``: of the replayed answers that finished with ``tool_calls``, those whose
  every call names a declared tool with arguments valid against its schema
  (:func:`~kimik3.eval._validity.call_problem`; calls a server sent undecodable count invalid);
- ``tool_names_match``: of the TPs, those calling the same tools (as a multiset);
- ``finish_reason_match``: answers that finished as the recorded one did.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import anyio

from .._client import Client
from .._exceptions import KimiK3Error, SessionError
from ..agents import SUMMARY_INSTRUCTIONS, ModelSettings, read_session_records
from ..types import (
    AssistantMessage,
    ChatCompletion,
    ChatRequest,
    Message,
    SystemMessage,
    ToolSpec,
    to_message,
    to_tool_specs,
)
from ._validity import call_problem, declared_schemas

__all__ = ["RecordedRequest", "ReplayRow", "recorded_requests", "replay", "replay_summary"]

_SETTINGS = ("reasoning_effort", "temperature", "top_p", "max_tokens", "seed")


@dataclass(frozen=True)
class RecordedRequest:
    """One model request found in a session.

    Attributes:
        session: the session file.
        index: the recorded answer's message number (as ``kimik3 show`` numbers them).
        request: the request to send again (None: it cannot be rebuilt, see ``skipped``).
        answer: the recorded answer.
        finish_reason: the recorded finish reason (inferred from the answer in sessions that
            did not record it: ``tool_calls`` when it has calls, else ``stop``).
        skipped: why the request cannot be sent again (None: it can).
    """

    session: str
    index: int
    request: ChatRequest | None
    answer: AssistantMessage
    finish_reason: str
    skipped: str | None = None


def _settings(path: Path, line: int, data: Any) -> ModelSettings:
    if not isinstance(data, dict):
        return ModelSettings()
    known = {k: data[k] for k in _SETTINGS if k in data}
    extra = data.get("extra")
    try:
        return ModelSettings(**known, extra=dict(extra) if isinstance(extra, dict) else {})
    except KimiK3Error as e:
        raise SessionError(f"{path}:{line}: the run_start record's settings are not valid: {e}") from None


def _tools(path: Path, line: int, data: Any) -> list[ToolSpec]:
    if not isinstance(data, list):
        raise SessionError(f"{path}:{line}: the run_start record's tools must be a list")
    try:
        return to_tool_specs(data)
    except KimiK3Error as e:
        raise SessionError(f"{path}:{line}: the run_start record's tools are not tool declarations: {e}") from None


def recorded_requests(path: str | os.PathLike[str]) -> list[RecordedRequest]:
    """The model requests of a session file, in order (see the module docstring).

    Raises:
        SessionError: an unreadable session, or a ``run_start`` record whose tools or settings
            are not valid (the line is named).
    """
    p = Path(path)
    history: list[Message] = []
    tools: list[ToolSpec] | None = None
    settings = ModelSettings()
    found: list[RecordedRequest] = []
    for r in read_session_records(p):
        if r.run_start is not None:
            tools = _tools(p, r.line, r.run_start.get("tools"))
            settings = _settings(p, r.line, r.run_start.get("settings"))
        elif r.compaction is not None:
            history = read_compaction(p, r.line, r.compaction)
        elif r.message is not None:
            if isinstance(r.message, AssistantMessage) and r.usage is not None and r.index is not None:
                finish = r.finish_reason or ("tool_calls" if r.message.tool_calls else "stop")
                if tools is None:
                    found.append(RecordedRequest(str(p), r.index, None, r.message, finish,
                                                 "the session records no tool declarations (written before "
                                                 "kimik3 recorded run_start)"))
                else:
                    summary = bool(history) and isinstance(history[-1], SystemMessage) and \
                        history[-1].content == SUMMARY_INSTRUCTIONS
                    request = ChatRequest(messages=list(history), tools=list(tools), settings=settings,
                                          tool_choice="none" if summary else None)
                    found.append(RecordedRequest(str(p), r.index, request, r.message, finish))
            history.append(r.message)
    return found


def read_compaction(path: Path, line: int, body: dict[str, Any]) -> list[Message]:
    """The history a compaction record holds (validated as :func:`~kimik3.agents.load_session` does)."""
    try:
        return [to_message(m) for m in body["messages"]]
    except (KimiK3Error, KeyError, TypeError, ValueError) as e:
        raise SessionError(f"{path}:{line}: not a valid compaction record: {e}") from None


@dataclass
class ReplayRow:
    """The score of one replayed request (see the module docstring).

    Attributes:
        session, index: where the request was recorded.
        recorded_finish, replayed_finish: the finish reasons (replayed: None on error or skip).
        recorded_tools, replayed_tools: the names of the calls, in order.
        arguments_valid: every replayed call is valid against the declared schemas (None: no
            call, an error or a skip).
        problems: why replayed calls are not valid.
        error: ``Type: message`` when the endpoint failed the request.
        skipped: why the request was not sent.
    """

    session: str
    index: int
    recorded_finish: str
    recorded_tools: list[str]
    replayed_finish: str | None = None
    replayed_tools: list[str] = field(default_factory=list)
    arguments_valid: bool | None = None
    problems: list[str] = field(default_factory=list)
    error: str | None = None
    skipped: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The row as a JSON object."""
        return asdict(self)


def score(recorded: RecordedRequest, completion: ChatCompletion) -> ReplayRow:
    """The row of one answer against its recording."""
    assert recorded.request is not None
    schemas = declared_schemas(recorded.request.tools, recorded.request.messages)
    calls = list(completion.message.tool_calls or ())
    problems = [f"{c.function.name}: {why}" for c in calls if (why := call_problem(c, schemas)) is not None]
    problems += [f"{f.name}: a server sent its arguments undecodable" for f in completion.failed_tool_calls]
    names = [c.function.name for c in calls] + [f.name for f in completion.failed_tool_calls]
    finish = completion.finish_reason
    if finish != "tool_calls" and completion.failed_tool_calls:
        finish = "tool_calls"
    return ReplayRow(session=recorded.session, index=recorded.index, recorded_finish=recorded.finish_reason,
                     recorded_tools=[c.function.name for c in recorded.answer.tool_calls or ()],
                     replayed_finish=finish, replayed_tools=names, arguments_valid=not problems if names else None,
                     problems=problems)


async def replay(requests: Sequence[RecordedRequest], client: Client, *, concurrency: int = 4,
                 temperature: float | None = None, max_tokens: int | None = None,
                 on_row: Callable[[ReplayRow], None] | None = None) -> list[ReplayRow]:
    """Send each request again through ``client`` and score the answers (in ``requests``' order).

    Args:
        requests: from :func:`recorded_requests`.
        client: the endpoint's client (its retries apply).
        concurrency: requests in flight.
        temperature, max_tokens: override the recorded values (as the Vendor Verifier's flags).
        on_row: called with each row as it is decided.

    Returns:
        One row per request; a request the endpoint failed is a row with ``error`` (a kimik3
        error, after the client's retries); one that cannot be rebuilt, a row with ``skipped``.
    """
    rows: list[ReplayRow | None] = [None] * len(requests)
    limiter = anyio.CapacityLimiter(max(1, concurrency))

    async def one(i: int, rec: RecordedRequest) -> None:
        base = ReplayRow(session=rec.session, index=rec.index, recorded_finish=rec.finish_reason,
                         recorded_tools=[c.function.name for c in rec.answer.tool_calls or ()])
        if rec.request is None:
            base.skipped = rec.skipped
            row = base
        else:
            request = rec.request
            if temperature is not None or max_tokens is not None:
                override = ModelSettings(temperature=temperature, max_tokens=max_tokens)
                request = replace(request, settings=request.settings.merged(override))
            try:
                async with limiter:
                    completion = await client.complete(request)
                row = score(rec, completion)
            except KimiK3Error as e:
                base.error = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
                row = base
        rows[i] = row
        if on_row is not None:
            on_row(row)

    async with anyio.create_task_group() as group:
        for i, rec in enumerate(requests):
            group.start_soon(one, i, rec)
    return [r for r in rows if r is not None]


def replay_summary(rows: Sequence[ReplayRow]) -> dict[str, Any]:
    """The Vendor Verifier's numbers over ``rows`` (see the module docstring); rates are None
    when their denominator is 0."""
    sent = [r for r in rows if r.skipped is None and r.error is None]
    tp = sum(r.recorded_finish == "tool_calls" and r.replayed_finish == "tool_calls" for r in sent)
    fp = sum(r.recorded_finish != "tool_calls" and r.replayed_finish == "tool_calls" for r in sent)
    fn = sum(r.recorded_finish == "tool_calls" and r.replayed_finish != "tool_calls" for r in sent)
    tn = len(sent) - tp - fp - fn
    precision = tp / (tp + fp) if tp + fp else None
    recall = tp / (tp + fn) if tp + fn else None
    f1 = 2 * precision * recall / (precision + recall) if precision and recall else (
        0.0 if precision is not None and recall is not None else None)
    with_calls = [r for r in sent if r.replayed_finish == "tool_calls"]
    valid = sum(bool(r.arguments_valid) for r in with_calls)
    both = [r for r in sent if r.recorded_finish == "tool_calls" and r.replayed_finish == "tool_calls"]
    same_names = sum(Counter(r.recorded_tools) == Counter(r.replayed_tools) for r in both)
    return {
        "requests": len(rows),
        "replayed": len(sent),
        "errors": sum(r.error is not None for r in rows),
        "skipped": sum(r.skipped is not None for r in rows),
        "tp": tp, "fp": fp, "fn": fn, "tn": tn,
        "tool_call_precision": precision,
        "tool_call_recall": recall,
        "tool_call_f1": f1,
        "count_finish_reason_tool_calls": len(with_calls),
        "count_successful_tool_call": valid,
        "schema_accuracy": valid / len(with_calls) if with_calls else None,
        "tool_names_match": same_names / len(both) if both else None,
        "finish_reason_match": sum(r.recorded_finish == r.replayed_finish for r in sent) / len(sent) if sent else None,
        "finish_reasons": dict(sorted(Counter(str(r.replayed_finish) for r in sent).items())),
    }
