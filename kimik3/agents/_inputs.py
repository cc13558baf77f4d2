"""An MCP server's questions that wait for a person, like a deferred approval (issue 43): a
tool call whose server answers ``input_required`` (MCP 2026-07-28) and has no input handler
stops there when the run has a session; the run stops with ``stop_reason="input_required"``; any
later process answers (``Agent.resume(session, answers=...)``, or ``kimik3 answer`` then
``kimik3 resume``) and the call is replayed once with the answers as its ``inputResponses``.

Two records of the approval journal (:mod:`._deferred` reads them with the others)::

    {"input_required": {"call_id": ..., "name": ..., "arguments": {...}, "server": ...,
                        "input_requests": {key: request}, "request_state": ...}}
    {"input_responses": {"call_id": ..., "input_responses": {key: response}, "sha256": ...}}

then, as for an approved call, ``tool_started`` before the replay runs and ``tool_finished`` when
it returns (a replay the server answers with new questions writes a new ``input_required``).

Every record is validated before it is acted on: an ``input_required`` record must name the
call's tool and the arguments it runs with (the call's, or a recorded :class:`Edit`'s), its
requests must be elicitations; an ``input_responses`` record must answer every key of exactly
those requests and carry the SHA-256 of the request it answers (:func:`input_digest`: the call's
id, tool, arguments, server, requests and ``requestState``), so an answer never binds to a
question or a call changed in the file after it was given (a :class:`~kimik3.SessionError`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any

from .._exceptions import JSONLimitError, MCPServerError, UserError
from .._json import check_json_limits
from ..tools import InputWait
from ..types import AssistantMessage, ToolCall
from ._run import _Run
from ._types import PendingInput

__all__ = ["answer_body", "asked_body", "check_content", "input_digest", "input_waiter", "read_answer", "read_asked",
           "responses_for"]

MAX_INPUT_ROUNDS = 10
"""A call's questions are answered this many rounds at most in a turn; a server that asks again
after them fails the call (the MCP SDK's ``DEFAULT_INPUT_REQUIRED_MAX_ROUNDS``)."""
MAX_QUESTIONS = 32
"""The most questions (``inputRequests`` keys) of one call that wait for a person; a server
asking more fails the call."""
MAX_QUESTIONS_BYTES = 1 << 20
"""The largest ``input_required`` a session keeps (its requests and ``requestState`` as UTF-8
JSON, bytes); a server asking more fails the call."""

ACTIONS = ("accept", "decline", "cancel")
"""An elicitation's answer (MCP ``ElicitResult.action``)."""


def _json(value: Any, what: str) -> Any:
    try:
        check_json_limits(value)
    except JSONLimitError as e:
        raise ValueError(f"{what} beyond the JSON limits: {e}") from None
    return value


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def input_digest(pending: PendingInput) -> str:
    """The SHA-256 (64 hex digits) of the questions an answer binds to: ``[call id, tool name,
    arguments, server, input requests, request state]`` as canonical JSON (sorted keys, ASCII)."""
    data = [pending.id, pending.name, pending.arguments, pending.server, pending.input_requests, pending.request_state]
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode("ascii")).hexdigest()


def asked_body(pending: PendingInput) -> dict[str, Any]:
    """The body of the ``input_required`` record of ``pending``."""
    return {"call_id": pending.id, "name": pending.name, "arguments": pending.arguments, "server": pending.server,
            "input_requests": pending.input_requests, "request_state": pending.request_state}


def read_asked(call: ToolCall, body: Mapping[str, Any], call_arguments: dict[str, Any],
               edited: dict[str, Any] | None) -> PendingInput:
    """The questions an ``input_required`` record holds, checked against ``call``.

    Args:
        call: the call of the assistant message the record names.
        body: the record's body.
        call_arguments: the call's parsed arguments.
        edited: the arguments of a recorded :class:`Edit` decision on it (None: none).

    Raises:
        ValueError: another tool; arguments that are neither the call's nor the edit's;
            requests that are not a non-empty object of elicitation requests; a request state
            that is not text; values beyond the JSON limits.
    """
    name = call.function.name
    if body.get("name") != name:
        raise ValueError(f"call {call.id!r} is to {name!r}, not {body.get('name')!r:.60}")
    arguments = body.get("arguments")
    if not isinstance(arguments, dict):
        raise ValueError("the arguments must be a JSON object")
    runs = _canonical(_json(arguments, "the arguments"))
    if runs not in (_canonical(call_arguments), _canonical(edited) if edited is not None else None):
        raise ValueError(f"the arguments {runs:.80} are not those call {call.id!r} runs with")
    server, requests, state = body.get("server"), body.get("input_requests"), body.get("request_state")
    if not isinstance(server, str):
        raise ValueError("the server must be named (text)")
    if not isinstance(requests, dict) or not requests:
        raise ValueError("input_requests must be a non-empty JSON object")
    for key, request in requests.items():
        params = request.get("params") if isinstance(request, dict) else None
        if (not isinstance(request, dict) or request.get("method") != "elicitation/create"
                or not isinstance(params, dict) or not isinstance(params.get("message"), str)):
            raise ValueError(f"input request {key!r:.60} is not an elicitation (method elicitation/create, "
                             "params with a message)")
    if state is not None and not isinstance(state, str):
        raise ValueError("request_state must be text or null")
    return PendingInput(call.id, name, arguments, server, _json(requests, "input_requests"), state)


def _check_responses(responses: Any, pending: PendingInput) -> dict[str, Any]:
    if not isinstance(responses, dict) or set(responses) != set(pending.input_requests):
        keys = sorted(responses) if isinstance(responses, dict) else responses
        raise ValueError(f"the answers must answer exactly the requests {sorted(pending.input_requests)}, "
                         f"got {keys!r:.120}")
    for key, response in responses.items():
        if not isinstance(response, dict) or response.get("action") not in ACTIONS:
            raise ValueError(f"the answer to {key!r:.60} must be an object whose action is one of {ACTIONS}")
        content = response.get("content")
        if content is not None and not isinstance(content, dict):
            raise ValueError(f"the answer to {key!r:.60} must have an object as its content")
    return _json(responses, "the answers")  # type: ignore[no-any-return]


def read_answer(body: Mapping[str, Any], pending: PendingInput) -> dict[str, Any]:
    """The ``inputResponses`` an ``input_responses`` record holds, checked against the questions
    it answers.

    Raises:
        ValueError: no ``sha256``, or one that is not :func:`input_digest` of ``pending`` (the
            call or its questions changed in the file after the answer); answers not exactly for
            the requests' keys, not elicitation answers, or an accepted one that does not fit
            its question's schema (:func:`check_content`).
    """
    digest = body.get("sha256")
    now = input_digest(pending)
    if digest != now:
        raise ValueError(f"the answers are to other questions than call {pending.id!r}'s ({pending.name}; sha256 "
                         f"{now[:16]}… now, {str(digest)[:16]:.16}… answered): the session was changed after the "
                         "answer; nothing runs")
    responses = _check_responses(body.get("input_responses"), pending)
    for key, response in responses.items():
        if response.get("action") == "accept":
            try:
                check_content(pending, key, response.get("content") or {})
            except UserError as e:
                raise ValueError(str(e)) from None
    return responses


def _values(spec: dict[str, Any]) -> list[Any] | None:
    """The values a field allows (``enum``, or ``oneOf`` / ``anyOf`` of ``const``s); None: any."""
    if isinstance(spec.get("enum"), list):
        return list(spec["enum"])
    options = spec.get("oneOf", spec.get("anyOf"))
    if isinstance(options, list):
        return [o.get("const") for o in options if isinstance(o, dict)]
    return None


def _field_problem(spec: dict[str, Any], value: Any) -> str | None:
    """Why ``value`` does not fit a field of an elicitation's ``requestedSchema`` (MCP's
    primitive schemas: string with ``minLength`` / ``maxLength`` / ``enum`` / ``oneOf``;
    number / integer with ``minimum`` / ``maximum``; boolean; an array of enum values with
    ``minItems`` / ``maxItems``); None when it fits."""
    kind = spec.get("type")
    checks = {"string": lambda v: isinstance(v, str), "boolean": lambda v: isinstance(v, bool),
              "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
              "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
              "array": lambda v: isinstance(v, list)}
    if kind not in checks:
        return f"its schema's type {kind!r:.40} is none an MCP question may ask (string, number, integer, boolean, " \
               "array of choices): decline it"
    if not checks[kind](value):
        return f"takes {'an' if kind in ('integer', 'array') else 'a'} {kind}, got {json.dumps(value)[:60]}"
    allowed = _values(_object(spec.get("items")) if kind == "array" else spec)
    for item in value if kind == "array" else [value]:
        if allowed is not None and item not in allowed:
            return f"takes one of {json.dumps(allowed)[:120]}, got {json.dumps(item)[:60]}"
    size = len(value) if kind in ("string", "array") else None
    low, high = ((spec.get("minLength"), spec.get("maxLength")) if kind == "string" else
                 (spec.get("minItems"), spec.get("maxItems")) if kind == "array" else
                 (spec.get("minimum"), spec.get("maximum")) if kind in ("integer", "number") else (None, None))
    measured = size if size is not None else value
    if isinstance(low, (int, float)) and not isinstance(measured, bool) and measured < low:
        return f"takes at least {low}{' characters' if kind == 'string' else ' items' if kind == 'array' else ''}, " \
               f"got {json.dumps(value)[:60]}"
    if isinstance(high, (int, float)) and not isinstance(measured, bool) and measured > high:
        return f"takes at most {high}{' characters' if kind == 'string' else ' items' if kind == 'array' else ''}, " \
               f"got {json.dumps(value)[:60]}"
    return None


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def check_content(pending: PendingInput, key: str, content: dict[str, Any]) -> None:
    """Refuse an accepted answer that does not fit its question: in form mode, every required
    field given, no field the ``requestedSchema`` lacks, each value of the field's type, within
    its range and among its choices (MCP 2025-06-18+ elicitation schemas); in URL mode, ``{}``
    (the answer itself went to the server's page).

    Raises:
        UserError: the first field that does not fit, named, with what it takes.
    """
    params = _object(_object(pending.input_requests.get(key)).get("params"))
    where = f"question {key!r:.60} of call {pending.id!r}"
    if isinstance(params.get("url"), str):
        if content:
            raise UserError(f"{where} is answered at its URL: record it done with {{}} (or decline)")
        return
    schema = _object(params.get("requestedSchema"))
    fields = _object(schema.get("properties"))
    required = schema.get("required")
    missing = [n for n in required if isinstance(n, str) and n not in content] if isinstance(required, list) else []
    if missing:
        raise UserError(f"{where} needs the field(s) {', '.join(map(repr, missing))[:200]}")
    for name, value in content.items():
        if name not in fields:
            raise UserError(f"{where} has no field {name!r:.60}; its fields: {', '.join(map(repr, fields))[:200]}")
        problem = _field_problem(_object(fields[name]), value)
        if problem is not None:
            raise UserError(f"the field {name!r:.60} of {where} {problem}")


def responses_for(pending: PendingInput, answers: Any) -> dict[str, Any]:
    """The ``inputResponses`` of a person's ``answers`` to ``pending``'s questions.

    Args:
        pending: the questions.
        answers: ``{key: content}`` for every key of ``pending.input_requests``: a dict of the
            values the question's ``requestedSchema`` asks for (``{}`` in URL mode, once done),
            or None to decline.

    Raises:
        UserError: keys not exactly the questions' (the questions' keys are named), a content
            that is neither a JSON object within the limits nor None, or one that does not fit
            its question's schema (:func:`check_content`).
    """
    if not isinstance(answers, Mapping):
        raise UserError(f"the answers to call {pending.id!r} must be a mapping {{request key: content or None}}, "
                        f"got {type(answers).__name__}")
    out: dict[str, Any] = {}
    for key in answers:
        if key not in pending.input_requests:
            raise UserError(f"call {pending.id!r} has no question {key!r:.80}; its questions: "
                            f"{', '.join(map(repr, pending.input_requests))}")
    for key in pending.input_requests:
        if key not in answers:
            raise UserError(f"question {key!r} of call {pending.id!r} is not answered: answer every question of "
                            "the call (None declines one)")
        content = answers[key]
        if content is not None and not isinstance(content, dict):
            raise UserError(f"the answer to question {key!r} of call {pending.id!r} must be a dict of values or None "
                            f"(decline), got {type(content).__name__}")
        if content is not None:
            check_content(pending, key, content)
        out[key] = {"action": "decline"} if content is None else {"action": "accept", "content": content}
    try:
        return _check_responses(out, pending)
    except ValueError as e:
        raise UserError(f"call {pending.id!r}: {e}") from None


def answer_body(pending: PendingInput, responses: dict[str, Any]) -> dict[str, Any]:
    """The body of the ``input_responses`` record answering ``pending``."""
    return {"call_id": pending.id, "input_responses": responses, "sha256": input_digest(pending)}


def input_waiter(run: _Run, call: ToolCall, arguments: dict[str, Any]) -> Callable[[InputWait], None] | None:
    """The ``ToolContext.defer_input`` of ``call`` in ``run``: keeps the questions in the session
    (an ``input_required`` record) and in ``run.waiting``; None when the run has no session, or
    when another call of the turn has ``call``'s id (an answer could not tell them apart).

    The function it returns raises :class:`~kimik3.MCPServerError` (the call fails, the model
    reads why) for questions over :data:`MAX_QUESTIONS_BYTES`, more than :data:`MAX_QUESTIONS`
    of them, or ones asked again after
    :data:`MAX_INPUT_ROUNDS` answered rounds of the call in this turn."""
    session = run.session
    turn = next((m for m in reversed(run.messages) if isinstance(m, AssistantMessage)), None)
    calls = (turn.tool_calls or []) if turn is not None else []
    if session is None or sum(c.id == call.id for c in calls) > 1:
        return None

    def defer(wait: InputWait) -> None:
        pending = PendingInput(call.id, call.function.name, arguments, wait.server,
                               _json(wait.input_requests, "the server's input requests"), wait.request_state)
        size = len(json.dumps([pending.input_requests, pending.request_state], ensure_ascii=False).encode())
        if size > MAX_QUESTIONS_BYTES:
            raise MCPServerError(f"the MCP server {wait.server!r} asked questions of {size} bytes (with its "
                                 f"requestState); a session keeps at most {MAX_QUESTIONS_BYTES}: the call fails")
        if len(pending.input_requests) > MAX_QUESTIONS:
            raise MCPServerError(f"the MCP server {wait.server!r} asked {len(pending.input_requests)} questions in "
                                 f"one call; at most {MAX_QUESTIONS} wait for a person: the call fails")
        rounds = 1 + sum(r.kind == "input_required" and r.body.get("call_id") == call.id for r in session.journal)
        if rounds > MAX_INPUT_ROUNDS:
            raise MCPServerError(f"the MCP server {wait.server!r} asked call {call.id!r} questions again after "
                                 f"{MAX_INPUT_ROUNDS} answered rounds (the MCP SDK's bound): the call fails")
        session.record("input_required", asked_body(pending))
        run.waiting[call.id] = pending

    return defer
