"""``kimik3.verify()``: Moonshot's K3 endpoint contract, checked from the client.

kimik3 computes a K3 prompt's exact ids itself, so it can tell whether an endpoint renders and
counts what the checkpoint was trained on — something no other client can see. Each check is
one row of a :class:`VerifyReport` with its evidence. Rows that need a capable model (the
endpoint's own generations: tool calls, JSON output, reasoning) are marked; ``quick=True`` runs
only the wire-level rows (prompt counts, accepted and rejected requests, raw mode), which any
server serving K3's renderer passes whatever its weights.

Sources: Moonshot's Kimi Vendor Verifier (parameter constraints, walle schemas, the
``prompt_tokens`` rule and its documented example), docs/k3-format.md.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from typing import Any, Literal

import httpx
import jsonschema

from .._exceptions import KimiK3Error, UserError
from .._models import KIMI_CODE_HOSTS, MOONSHOT_HOSTS, host_of, model_info
from .._text import redact_secrets, redact_url, redact_urls
from ..formats.k3 import K3Tokenizer, default_tokenizer
from ..types import ChatRequest, ModelSettings
from ._probes import ANSWER_SCHEMA, CONVENTIONS, WEATHER, Convention, Probe, expected_counts, probes, tool, vocab_hint
from ._transport import DEFAULT_MAX_BODY_BYTES, Answer, Endpoint
from ._wire import Malformed

__all__ = ["CheckResult", "VerifyReport", "averify", "malformed_requests", "verify", "walle_schemas"]

Status = Literal["pass", "fail", "warn", "skip"]
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # what a header or a terminal line must not carry


@dataclass(frozen=True)
class CheckResult:
    """One row of the report.

    Attributes:
        check: what was checked, e.g. ``"prompt_tokens: tools"``.
        status: ``pass``; ``fail`` (the endpoint breaks the contract in a way that hurts kimik3's
            users); ``warn`` (it breaks the contract, kimik3 guards against it client-side);
            ``skip`` (not applicable to this endpoint, with the reason).
        evidence: the numbers or the server's answer behind the status.
        needs_model: the check reads the model's generations (a capable K3 model is needed);
            not run with ``quick``.
    """

    check: str
    status: Status
    evidence: str
    needs_model: bool = False


@dataclass
class VerifyReport:
    """All rows of one ``verify`` run.

    Attributes:
        base_url, model: the endpoint (its URL redacted: no ``user:pw@``, no secret-looking
            query value; :func:`kimik3._text.redact_url`).
        rows: one :class:`CheckResult` per check, in order.
        convention: the ``prompt_tokens`` convention the server follows (None: undetermined).
        quick: only wire-level rows were run.
        hint: what the failures likely mean, when verify can tell (e.g. another vocabulary).
    """

    base_url: str
    model: str
    rows: list[CheckResult] = field(default_factory=list)
    convention: Convention | None = None
    quick: bool = False
    hint: str | None = None

    @property
    def ok(self) -> bool:
        """No row failed (``warn`` and ``skip`` rows do not fail a run)."""
        return all(r.status != "fail" for r in self.rows)

    def __getitem__(self, check: str) -> CheckResult:
        for r in self.rows:
            if r.check == check:
                return r
        raise KeyError(check)

    def failures(self) -> list[CheckResult]:
        """The failed rows."""
        return [r for r in self.rows if r.status == "fail"]

    @property
    def model_line(self) -> str:
        """The model as the report names it: its id, and what kimik3 knows of it
        (:mod:`kimik3._models`): ``kimi-k3.1-pro (Kimi K3.1 Pro, 1,048,576-token window,
        Moonshot's API)``."""
        info = model_info(self.model, self.base_url)
        host = host_of(self.base_url)
        where = ("Moonshot's API" if host in MOONSHOT_HOSTS else "the Kimi Code API" if host in KIMI_CODE_HOSTS
                 else "")  # fmt: skip
        known = [info.name, f"{info.window:,}-token window"] if info is not None and info.window else []
        known += [where] if where else []
        return f"{self.model} ({', '.join(known)})" if known else self.model

    def __str__(self) -> str:
        width = max((len(r.check) for r in self.rows), default=5)
        lines = [f"kimik3 verify {self.base_url} (model {self.model_line}){' --quick' if self.quick else ''}",
                 f"{'check':<{width}}  status  evidence"]  # fmt: skip
        for r in self.rows:
            mark = r.status.upper() if r.status == "fail" else r.status
            lines.append(f"{r.check + (' *' if r.needs_model else ''):<{width + 2}}{mark:<8}{r.evidence}")
        fails = len(self.failures())
        lines.append("(* needs a capable model)")
        if self.hint:
            lines.append(f"hint: {self.hint}")
        lines.append("verify: " + ("OK" if self.ok else f"FAILED ({fails} row{'s' if fails != 1 else ''})"))
        return "\n".join(lines)


def walle_schemas() -> list[tuple[str, dict[str, Any]]]:
    """The 212 walle tool-parameter schemas shipped with kimik3: ``("Suite#line", schema)``."""
    root = resources.files("kimik3._verify").joinpath("walle_schemas")
    out: list[tuple[str, dict[str, Any]]] = []
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".jsonl"):
            lines = entry.read_text(encoding="utf-8").splitlines()
            out.extend((f"{entry.name[:-6]}#{i}", json.loads(line)) for i, line in enumerate(lines, 1) if line.strip())
    return out


# -- checks ----------------------------------------------------------------------------------


def _prompt_rows(
    answers: Sequence[tuple[Probe, Answer, dict[str, int]]], tok: K3Tokenizer
) -> tuple[list[CheckResult], Convention | None]:
    """One row per probe, plus the convention row (first)."""
    counted = [(p, a.prompt_tokens, exp) for p, a, exp in answers if a.prompt_tokens is not None]
    fits = {c.name: sum(1 for _, n, exp in counted if exp[c.name] == n) for c in CONVENTIONS}
    best = max(CONVENTIONS, key=lambda c: fits[c.name]) if counted else None
    if best is not None and fits[best.name] == 0:
        best = None
    rows: list[CheckResult] = []
    if best is None:
        rows.append(CheckResult("prompt_tokens convention", "fail",
                                f"no documented convention fits any of {len(counted)} counted requests"))  # fmt: skip
    else:
        decided = any(p.empty_think_turns() for p, _, _ in counted)
        note = "" if decided else " (empty think blocks: undetermined, no request had one)"
        # the convention is settled by most requests; the rows below carry each mismatch
        status: Status = "pass" if 2 * fits[best.name] > len(counted) else "fail"
        rows.append(CheckResult("prompt_tokens convention", status,
                                f"{best.name}: {best.who}; fits {fits[best.name]}/{len(counted)} "
                                f"requests{note}"))  # fmt: skip
    for probe, answer, exp in answers:
        check = f"prompt_tokens: {probe.name}"
        n = answer.prompt_tokens
        if not answer.ok:
            if probe.images and 400 <= answer.status < 500:
                rows.append(CheckResult(check, "skip", f"server refused image input ({answer.error})"))
            else:
                rows.append(CheckResult(check, "fail", answer.error))
        elif n is None:
            usage = json.dumps(answer.body.get("usage") if isinstance(answer.body, Mapping) else None)[:120]
            rows.append(CheckResult(check, "fail", f"no usage.prompt_tokens in the answer: {usage}"))
        elif best is not None and n == exp[best.name]:
            rows.append(CheckResult(check, "pass", f"server {n} = kimik3 {n}"))
        else:
            conv = best or CONVENTIONS[0]
            want = exp[conv.name]
            other = [name for name, v in exp.items() if v == n]
            known = [why for why, alt in probe.departures if expected_counts(alt, tok)[conv.name] == n]
            why = f": {known[0]}" if known else f"; fits '{other[0]}' instead" if other else ""
            rows.append(CheckResult(check, "fail", f"server {n}, kimik3 {want} (server {n - want:+d}){why}"))
    return rows, best


def _reasoning_replay_row(
    with_r: tuple[Probe, Answer, dict[str, int]], without_r: dict[str, int], conv: Convention | None
) -> CheckResult:
    check = "reasoning round-trip (replayed turn)"
    _, answer, exp = with_r
    n = answer.prompt_tokens
    if not answer.ok:
        return CheckResult(check, "fail", f"a tool-call turn replayed with its reasoning was refused: {answer.error}")
    if conv is None or n is None:
        return CheckResult(check, "skip", "prompt_tokens convention undetermined")
    kept = exp[conv.name] - without_r[conv.name]
    if n == exp[conv.name]:
        return CheckResult(check, "pass", f"accepted; the replayed reasoning is rendered ({kept} tokens of {n})")
    if n == without_r[conv.name]:
        return CheckResult(check, "fail", f"the server dropped the replayed reasoning ({kept} tokens fewer): it reads "
                                          "neither reasoning_content nor reasoning on input")  # fmt: skip
    return CheckResult(check, "fail", f"accepted, but counted {n} (with reasoning {exp[conv.name]}, without "
                                      f"{without_r[conv.name]})")  # fmt: skip


async def _raw_rows(
    ep: Endpoint, model: str, tok: K3Tokenizer, chat: Sequence[tuple[Probe, Answer, dict[str, int]]]
) -> list[CheckResult]:
    rows = []
    for probe, answer, exp in chat:
        check = f"raw mode agreement: {probe.name}"
        ids = probe.ids(tok)
        raw = await ep.post("/completions", {"model": model, "prompt": ids, "max_tokens": 1})
        n = raw.prompt_tokens
        chat_n = answer.prompt_tokens
        if raw.status in (404, 405):
            rows.append(CheckResult(check, "skip", f"no /v1/completions ({raw.error}): raw mode unavailable here"))
        elif n is None:
            rows.append(CheckResult(check, "fail", f"/v1/completions with kimik3's {len(ids)} ids: {raw.error}"))
        elif n != len(ids):
            rows.append(CheckResult(check, "fail", f"/v1/completions counted {n} of kimik3's {len(ids)} ids"))
        elif chat_n is None or chat_n not in {exp[c.name] for c in CONVENTIONS}:
            rows.append(CheckResult(check, "fail", f"raw {n} = kimik3 ids, but chat mode counted {chat_n}"))
        else:
            conv = next(c for c in CONVENTIONS if exp[c.name] == chat_n)
            same = "the same prompt" if conv.stub and conv.empty_think else f"the same prompt ({conv.name})"
            rows.append(CheckResult(check, "pass", f"raw {n} ids, chat {chat_n}: {same}"))
    return rows


def malformed_requests() -> list[tuple[str, dict[str, Any]]]:
    """Requests Moonshot's contract says a K3 endpoint must reject: ``(row, body without model)``."""
    hi = [{"role": "user", "content": "hi"}]
    read = tool("read_file", {"type": "object", "properties": {"path": {"type": "string"}}})
    call = {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a"}'}}
    return [
        ("rejects: tools on a user message", {"messages": [{"role": "user", "content": "hi", "tools": [read]}]}),
        ("rejects: duplicate tool names", {"messages": hi, "tools": [read, read]}),
        ("rejects: tool message without tool_call_id",
         {"messages": [*hi, {"role": "assistant", "content": "", "tool_calls": [call]},
                       {"role": "tool", "content": "text"}], "tools": [read]}),
        ("rejects: system message with tools and content",
         {"messages": [{"role": "system", "content": "Be brief.", "tools": [read]}, *hi]}),
        ("rejects: reasoning_effort medium", {"messages": hi, "reasoning_effort": "medium"}),
    ]  # fmt: skip


def _client_side(body: Mapping[str, Any]) -> str:
    """What kimik3 itself does with the request (it must refuse it before any network call)."""
    try:
        ChatRequest(messages=body["messages"], tools=body.get("tools") or [],
                    settings=ModelSettings(reasoning_effort=body.get("reasoning_effort", "max")))  # fmt: skip
    except KimiK3Error as e:
        return f"kimik3 refuses it client-side ({type(e).__name__})"
    return "kimik3 would send it (a kimik3 bug)"


async def _reject_rows(ep: Endpoint, model: str) -> list[CheckResult]:
    cases = malformed_requests()
    answers = await asyncio.gather(
        *(ep.post("/chat/completions", {"model": model, "max_tokens": 1, **b}) for _, b in cases)
    )
    rows = []
    for (check, body), a in zip(cases, answers, strict=True):
        mine = _client_side(body)
        if a.status == 400 or a.status == 422:
            rows.append(CheckResult(check, "pass", f"{a.error}; {mine}"))
        elif a.ok:
            rows.append(CheckResult(check, "warn", f"accepted (HTTP 200), K3's contract says 400; {mine}"))
        else:
            rows.append(CheckResult(check, "fail", f"{a.error} (a 400 was due); {mine}"))
    return rows


def _validate(text: str, schema: Mapping[str, Any], what: str = "arguments") -> str | None:
    """None when ``text`` is JSON valid against ``schema``, else why not."""
    try:
        args = json.loads(text or "{}")
    except ValueError as e:
        return f"{what} not JSON ({e})"
    try:
        validator = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)(schema)
        error = next(iter(validator.iter_errors(args)), None)
    except (jsonschema.exceptions.SchemaError, jsonschema.exceptions.RefResolutionError, TypeError) as e:
        return f"schema not usable by jsonschema ({type(e).__name__})"
    return None if error is None else f"{error.message[:100]}"


async def _model_rows(
    ep: Endpoint, model: str, max_tokens: int, schemas: Sequence[tuple[str, dict[str, Any]]],
    step: Callable[[str], None] = lambda text: None,
) -> list[CheckResult]:
    hello = [{"role": "user", "content": "Hello! Say hi back in one word."}]
    weather = [{"role": "user", "content": "What is the weather in Paris? Call get_weather."}]
    read = tool("read_file", {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]})

    def body(p: Probe) -> dict[str, Any]:
        return p.body(model, max_tokens=max_tokens)

    async def run(check: str, p: Probe, judge: Callable[[Answer], tuple[Status, str]]) -> CheckResult:
        a = await ep.post("/chat/completions", body(p))
        if not a.ok:
            return CheckResult(check, "fail", a.error, True)
        status, evidence = judge(a)
        return CheckResult(check, status, evidence, True)

    def calls_of(a: Answer) -> list[str]:
        return [str(c.function.name) for c in a.message.tool_calls or ()]

    def reasoning(a: Answer) -> tuple[Status, str]:
        for name in ("reasoning_content", "reasoning"):
            text = getattr(a.message, name)
            if text:
                return "pass", f"reasoning under '{name}' ({len(text)} chars); kimik3 reads both names"
        fields = sorted(k for k, v in a.message.model_dump(exclude_none=True).items() if v)
        return "fail", f"no reasoning under reasoning_content or reasoning; message fields: {fields}"

    def required(a: Answer) -> tuple[Status, str]:
        names = calls_of(a)
        content = str(a.message.content)[:80]
        return ("pass", f"called {names}") if names else ("fail", f"no tool call; content {content!r}")

    def none(a: Answer) -> tuple[Status, str]:
        names = calls_of(a)
        return ("fail", f"called {names} despite tool_choice none") if names else ("pass", "no tool call")

    def dynamic(a: Answer) -> tuple[Status, str]:
        names = calls_of(a)
        ok = names and all(n == "get_weather" for n in names)
        return ("pass", f"called {names}") if ok else ("fail", f"expected a get_weather call, got {names or 'none'}")

    def json_out(a: Answer) -> tuple[Status, str]:
        text = a.message.content or ""
        why = _validate(text if text.strip() else "null", ANSWER_SCHEMA, "content")
        return ("pass", f"valid JSON: {text[:60]}") if why is None else ("fail", f"{why}; content {text[:60]!r}")

    rf = {"type": "json_schema", "json_schema": {"name": "answer", "schema": ANSWER_SCHEMA}}
    step("model checks: 5 generations")
    rows = list(await asyncio.gather(
        run("reasoning field", Probe("r", hello), reasoning),
        run("tool_choice required", Probe("r", hello, tools=[read], tool_choice="required"), required),
        run("tool_choice none", Probe("n", [{"role": "user", "content": "Read notes.txt."}], tools=[read],
                                      tool_choice="none"), none),
        run("response_format json_schema", Probe("j", hello, response_format=rf), json_out),
        run("dynamic tools in a system message are callable",
            Probe("d", [{"role": "system", "tools": [WEATHER]}, *weather]), dynamic),
    ))  # fmt: skip
    msgs = [{"role": "user", "content": "Call the tool once, with arguments valid for its parameters schema."}]
    for streamed in (False, True):
        check = f"tool arguments valid (walle, {'streamed' if streamed else 'non-streamed'})"
        done, every = 0, max(1, len(schemas) // 20)  # about 20 progress lines per pass
        step(f"{check}: {len(schemas)} generations")

        async def one(name: str, schema: dict[str, Any], streamed: bool = streamed, check: str = check,
                      every: int = every) -> str | None:
            nonlocal done
            b = Probe(name, msgs, tools=[tool("walle_check", schema)], tool_choice="required").body(
                model, max_tokens=max_tokens, stream=streamed)  # fmt: skip
            a = await (ep.stream if streamed else ep.post)("/chat/completions", b)
            done += 1
            if done % every == 0 or done == len(schemas):
                step(f"{check}: {done}/{len(schemas)}")
            if not a.ok:
                return a.error
            calls = a.message.tool_calls or []
            if not calls:
                return "no tool call"
            return _validate(calls[0].function.arguments or "", schema)

        results = await asyncio.gather(*(one(n, s) for n, s in schemas))
        bad = [(n, why) for (n, _), why in zip(schemas, results, strict=True) if why is not None]
        if not bad:
            rows.append(CheckResult(check, "pass", f"{len(schemas)}/{len(schemas)} schemas: arguments valid", True))
        else:
            first = "; ".join(f"{n}: {why}" for n, why in bad[:2])
            rows.append(CheckResult(check, "fail", f"{len(bad)}/{len(schemas)} invalid; {first}", True))
    return rows


def _options(base_url: Any, concurrency: Any, timeout: Any, max_tokens: Any, schemas: Any, model: Any = None,
             api_key: Any = None, max_body_bytes: Any = DEFAULT_MAX_BODY_BYTES) -> httpx.URL:  # fmt: skip
    """The checked base URL; :class:`UserError` for a bad option value."""
    for name, text in (("model", model), ("api_key", api_key)):
        if text is not None and (not isinstance(text, str) or not text or _CONTROL.search(text)):
            raise UserError(f"verify: {name} must be a non-empty string without control characters (CR, LF, ...), "
                            f"got {text!r:.80}")  # fmt: skip
    if schemas is not None and (
        isinstance(schemas, (str, bytes, Mapping))
        or not isinstance(schemas, Sequence)
        or not all(isinstance(s, (tuple, list)) and len(s) == 2 and isinstance(s[1], Mapping) for s in schemas)
    ):
        raise UserError(f"verify: schemas must be a list of (name, JSON Schema dict) pairs, got {str(schemas)[:80]}")
    for name, value, low in (("concurrency", concurrency, 1), ("max_tokens", max_tokens, 1),
                             ("max_body_bytes", max_body_bytes, 1024)):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise UserError(f"verify: {name} must be an int >= {low}, got {value!r}")
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not 0 < timeout < float("inf"):
        raise UserError(f"verify: timeout must be a positive number of seconds, got {timeout!r}")
    if not isinstance(base_url, str):
        raise UserError(f"verify: base_url must be a string, got {type(base_url).__name__}")
    try:
        url = httpx.URL(base_url.rstrip("/"))
    except httpx.InvalidURL as e:
        raise UserError(f"verify: invalid base_url {redact_url(base_url)!r}: {redact_urls(str(e))}") from None
    if url.scheme not in ("http", "https") or not url.host:
        raise UserError(f"verify: base_url must be an http(s) URL with a host, e.g. http://127.0.0.1:8000/v1; "
                        f"got {redact_url(base_url)!r}")  # fmt: skip
    return url


async def averify(
    base_url: str,
    *,
    model: str | None = None,
    api_key: str | None = None,
    quick: bool = False,
    tokenizer: K3Tokenizer | str | os.PathLike[str] | None = None,
    images: bool = True,
    max_tokens: int = 1024,
    concurrency: int = 8,
    timeout: float = 60.0,
    schemas: Sequence[tuple[str, dict[str, Any]]] | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    transport: httpx.AsyncBaseTransport | None = None,
    progress: Callable[[CheckResult], None] | None = None,
    on_step: Callable[[str], None] | None = None,
) -> VerifyReport:
    """Check a K3 endpoint against Moonshot's contract; see :func:`verify` (same arguments)."""
    step = on_step or (lambda text: None)
    url = _options(base_url, concurrency, timeout, max_tokens, schemas, model, api_key, max_body_bytes)
    tokenizer = K3Tokenizer.from_pretrained(tokenizer) if isinstance(tokenizer, (str, os.PathLike)) else tokenizer
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    shown = redact_url(base_url)  # what the report, its rows and their errors name: no credentials
    report = VerifyReport(shown, model or "?", quick=quick)

    def add(rows: Sequence[CheckResult]) -> None:
        for row in rows:
            row = replace(row, evidence=redact_secrets(row.evidence, base_url, (api_key,) if api_key else ()))
            report.rows.append(row)
            if progress is not None:
                progress(row)

    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=timeout, transport=transport) as client:
        ep = Endpoint(client, concurrency, timeout, max_body_bytes)
        root: str | None = None  # vLLM's /models: the served model's path
        if model is None:
            try:
                card = (await ep.get_models()).data[0]
                model, root = card.id, card.root
            except TimeoutError:
                add([CheckResult("endpoint", "fail", f"GET {shown}/models: {ep.late().error}")])
                return report
            except (httpx.HTTPError, Malformed) as e:
                add([CheckResult("endpoint", "fail", f"GET {shown}/models: {type(e).__name__}: {e}")])
                return report
        report.model = model
        tok = tokenizer if tokenizer is not None else default_tokenizer()
        ps = probes(images=images)
        step(f"prompt_tokens and wire checks: {len(ps)} requests")
        # one request first: an endpoint that does not answer at all ends the run with one row
        first = await ep.post("/chat/completions", ps[0].body(model))
        if first.status == 0:
            add([CheckResult("endpoint", "fail", f"POST {shown}/chat/completions: {first.error}")])
            return report
        rest = await asyncio.gather(*(ep.post("/chat/completions", p.body(model)) for p in ps[1:]))
        chat = [(p, a, expected_counts(p, tok)) for p, a in zip(ps, [first, *rest], strict=True)]
        rows, report.convention = _prompt_rows(chat, tok)
        add(rows)
        if tokenizer is None:  # K3's vocabulary: a served model with another one miscounts every request
            counted = [r.status for r in rows if r.check.startswith("prompt_tokens: ") and r.status != "skip"]
            report.hint = vocab_hint(counted.count("fail"), len(counted), root)
        by_name = {p.name: (p, a, exp) for p, a, exp in chat}
        without = by_name["history without reasoning"]
        with_r = by_name["tool history with reasoning"]
        # the same history with the reasoning stripped, counted with the replayed turn's tools
        stripped = replace(with_r[0], messages=without[0].messages)
        add([_reasoning_replay_row(with_r, expected_counts(stripped, tok), report.convention)])
        step("rejected requests")
        add(await _reject_rows(ep, model))
        step("raw mode (/v1/completions)")
        add(await _raw_rows(ep, model, tok, [by_name["plain"], with_r]))
        if not quick:
            cases = walle_schemas() if schemas is None else schemas
            add(await _model_rows(ep, model, max_tokens, cases, step))
        return report


def verify(base_url: str, **options: Any) -> VerifyReport:
    """Run :func:`averify` to the end (blocking; for scripts and the ``kimik3 verify`` command).

    Args:
        base_url: the OpenAI base URL, e.g. ``"http://127.0.0.1:8000/v1"`` (http or https).
        **options: ``model`` (default: the first of ``/models``), ``api_key``, ``quick``
            (wire-level rows only), ``tokenizer`` (a :class:`~kimik3.K3Tokenizer` or a model
            directory; default: K3's vocabulary shipped with kimik3; give the served model's when
            it has another, e.g. ``tokenizer="models/k3-tiny"``), ``images`` (send
            the image probes, default True), ``max_tokens`` (per generation, int >= 1, default
            1024), ``concurrency`` (requests in flight, int >= 1, default 8), ``timeout`` (total
            seconds per request, connect to last byte, > 0, default 60), ``max_body_bytes``
            (the largest answer body read, a stream's chunks together; int >= 1024, default
            4 MiB; a larger one is a failed row), ``schemas``
            (``[(name, schema)]``; default the 212 walle schemas), ``progress`` (called with
            each :class:`CheckResult` as it is decided), ``on_step`` (called with one line of
            text as each stage starts, and about 20 times in each pass of the walle schemas:
            ``"tool arguments valid (walle, streamed): 40/212"``), ``transport`` (an
            ``httpx.AsyncBaseTransport``, for tests).

    Returns:
        The :class:`VerifyReport`; ``report.ok`` is False when a row failed (``report.hint``
        says what most of them likely mean, e.g. another vocabulary). Transport failures,
        timeouts, oversized bodies, malformed server JSON and a 200 whose body is not a
        completion become failed rows with the evidence, never exceptions; an endpoint that
        does not answer its first request ends the run with one failed ``endpoint`` row (so does
        a ``/models`` list whose id holds control characters). The report, its rows and its
        errors name ``base_url`` redacted (:func:`kimik3._text.redact_url`).

    Raises:
        UserError: an unknown option, or a bad option value (``concurrency`` or ``max_tokens``
            below 1, a non-positive ``timeout``, ``max_body_bytes`` below 1024, a ``model`` or
            ``api_key`` with a control character such as CR or LF, a ``base_url`` that is not
            an http(s) URL).
        TokenizerError: ``tokenizer`` names a directory without a K3 tokenizer.
    """
    unknown = sorted(set(options) - set(inspect.signature(averify).parameters))
    if unknown:
        raise UserError(f"verify: unknown option(s) {unknown}")
    return asyncio.run(averify(base_url, **options))
