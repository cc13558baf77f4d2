"""Counts a server sends are bounded where they are read (kimik3/engines/_counts.py): a usage
count beyond 2**53 (``10**400`` made ``Pricing.cost`` raise a bare OverflowError) is an
APIResponseValidationError in chat and raw mode, for a Client and an Agent with a USD budget;
a 5,000-digit number in an overflow error's text (a bare ValueError, Python's limit on int
conversion) is not stated and is cut in the message; a /v1/models window beyond the bound is
not used; an error object's ``code`` or a ``Retry-After`` of 5,000 digits reads as nothing."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from kimik3 import (
    Agent,
    APIResponseValidationError,
    Budgets,
    Client,
    ContextLengthExceededError,
    K3Tokenizer,
    RequestTooLargeError,
    UserError,
)
from kimik3._pricing import Pricing
from kimik3.engines._counts import MAX_COUNT, cut_numbers, shown_int, stated_count
from kimik3.engines._http import error_from_payload, retry_after, status_error
from kimik3.engines._overflow import parse_token_limit
from tests.engines.test_overflow_wording import TOKEN_WORDINGS
from tests.engines.test_remote_offline import FakeServer, chat_chunk, sse
from tests.k3vocab import write_model_dir

HELLO = [{"role": "user", "content": "Hi"}]
HUGE = "9" * 5000
RAW_TEXT = "<|open|>response<|sep|>Hello<|close|>response<|sep|><|close|>message<|sep|>"


def _usage(field: str, value: int) -> dict[str, Any]:
    usage: dict[str, Any] = {"prompt_tokens": 120, "completion_tokens": 3, "total_tokens": 123,
                             "prompt_tokens_details": {"cached_tokens": 96}}
    if field == "cached_tokens":
        usage["prompt_tokens_details"] = {"cached_tokens": value}
    else:
        usage[field] = value
    return usage


def _chat_server(usage: dict[str, Any]) -> FakeServer:
    return FakeServer(lambda r: sse([
        chat_chunk({"role": "assistant", "content": "ok"}, finish="stop"),
        {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "k3", "choices": [], "usage": usage},
    ]))  # fmt: skip


FIELDS = ["prompt_tokens", "completion_tokens", "total_tokens", "cached_tokens"]


@pytest.mark.parametrize("value", [10**400, MAX_COUNT + 1], ids=["10**400", "2**53+1"])
@pytest.mark.parametrize("field", FIELDS)
async def test_a_usage_count_beyond_any_request_is_typed_in_chat_mode(field: str, value: int) -> None:
    where = "usage.prompt_tokens_details" if field == "cached_tokens" else "usage"
    shown = "100000000000... (401 digits)" if value == 10**400 else "9007199254740993"
    with pytest.raises(APIResponseValidationError) as e:
        await Client(_chat_server(_usage(field, value)).engine(), max_retries=0).chat(HELLO)
    assert str(e.value) == (f"the server's {where}.{field} is {shown}, more tokens than any request can have "
                            "(at most 2**53): its token counts cannot be trusted for cost or budgets")


async def test_a_usage_count_at_the_bound_is_read() -> None:
    out = await Client(_chat_server(_usage("prompt_tokens", MAX_COUNT)).engine()).chat(HELLO)
    assert (out.usage.prompt_tokens, out.usage.completion_tokens, out.usage.cached_tokens) == (MAX_COUNT, 3, 96)
    assert Pricing(input=3.0, cached_input=0.3, output=15.0).cost(out.usage) == pytest.approx(27021597764.222694)


async def test_a_whole_float_count_is_its_int_and_another_kind_is_logged_once(
        caplog: pytest.LogCaptureFixture) -> None:
    """``96.0`` (a JSON writer's way to send 96) is 96; ``"96"``, ``96.5`` are no count: read as not
    stated and logged once per field, never a silent 0 (x41's finding)."""
    from kimik3.engines import _counts

    usage = _usage("cached_tokens", 0)
    usage["prompt_tokens_details"] = {"cached_tokens": 96.0}
    usage["prompt_tokens"] = 120.0
    out = await Client(_chat_server(usage).engine()).chat(HELLO)
    assert (out.usage.prompt_tokens, out.usage.cached_tokens) == (120, 96)
    _counts._ODD.clear()
    for odd in ("96", 96.5):
        usage["prompt_tokens_details"] = {"cached_tokens": odd}
        with caplog.at_level(logging.WARNING, logger="kimik3.engines"):
            out = await Client(_chat_server(usage).engine()).chat(HELLO)
        assert out.usage.cached_tokens == 0
    odd_lines = [r.getMessage() for r in caplog.records if "not a token count" in r.getMessage()]
    assert odd_lines == ["kimik3: the server's usage.prompt_tokens_details.cached_tokens is '96', not a token "
                         "count: read as not stated"]


@pytest.mark.parametrize("field", FIELDS)
def test_an_agent_with_a_usd_budget_ends_in_the_typed_error_not_an_overflow(field: str) -> None:
    agent = Agent(engine=_chat_server(_usage(field, 10**400)).engine(), budgets=Budgets(usd=0.5),
                  pricing=Pricing(input=3.0, cached_input=0.3, output=15.0))
    with pytest.raises(APIResponseValidationError, match=rf"\.{field} is 100000000000\.\.\. \(401 digits\)"):
        anyio.run(agent.run, "hello")


@pytest.mark.parametrize("field", ["prompt_tokens", "completion_tokens", "cached_tokens"])
async def test_a_usage_count_beyond_any_request_is_typed_in_raw_mode(tmp_path: Path, field: str) -> None:
    def respond(request: httpx.Request) -> httpx.Response:
        return sse([
            {"id": "x", "object": "text_completion", "created": 0, "model": "k3",
             "choices": [{"index": 0, "text": RAW_TEXT, "finish_reason": "stop"}]},
            {"id": "x", "object": "text_completion", "created": 0, "model": "k3", "choices": [],
             "usage": _usage(field, 10**400)},
        ])  # fmt: skip

    tok = K3Tokenizer.from_pretrained(write_model_dir(tmp_path / "k3", num_base_tokens=163_584))
    engine = FakeServer(respond).engine(mode="raw", tokenizer=tok, max_model_len=4096)
    with pytest.raises(APIResponseValidationError, match=rf"\.{field} is 100000000000\.\.\. \(401 digits\)"):
        await Client(engine, max_retries=0).chat(HELLO, reasoning_effort="none")


def _long_runs(text: str) -> list[str]:
    return re.findall(r"\d{21,}", text)


@pytest.mark.parametrize(("words", "which"), [(w, which) for w, _, asked in TOKEN_WORDINGS
                                               for which in ("limit", "requested") if which == "limit" or asked])
def test_a_5000_digit_number_in_an_overflow_wording_is_not_stated(words: str, which: str) -> None:
    limit, requested = parse_token_limit(words)
    number = str(limit if which == "limit" else requested)
    huge = words.replace(f"{int(number):,}" if f"{int(number):,}" in words else number, HUGE, 1)
    error = status_error(400, huge, body={"error": {"message": huge}})
    assert isinstance(error, ContextLengthExceededError)
    stated = (error.limit, error.requested)
    assert stated == ((None, requested) if which == "limit" else (limit, None))
    assert _long_runs(str(error)) == [] and "99999999... (5000 digits)" in str(error)


@pytest.mark.parametrize(("words", "size", "limit"), [
    (f"total message size {HUGE} exceeds limit 10", None, 10),
    (f"total message size 10 exceeds limit {HUGE}", 10, None),
    ("total message size 9007199254740993 exceeds limit 10", None, 10),  # 2**53 + 1
    ("total message size 9,007,199,254,740,992 exceeds limit 10", MAX_COUNT, 10),
])
def test_a_size_beyond_the_bound_is_not_stated(words: str, size: int | None, limit: int | None) -> None:
    error = status_error(400, words)
    assert isinstance(error, RequestTooLargeError)
    assert (error.size, error.limit) == (size, limit)
    assert _long_runs(str(error)) == []


async def test_over_a_socket_the_huge_overflow_is_typed() -> None:
    message = f"This model's maximum context length is {HUGE} tokens. However, you requested 5000 tokens"
    server = FakeServer(lambda r: httpx.Response(400, json={"error": {"message": message, "code": 400}}))
    with pytest.raises(ContextLengthExceededError) as e:
        await Client(server.engine(), max_retries=0).chat(HELLO)
    assert (e.value.limit, e.value.requested) == (None, 5000)
    assert _long_runs(str(e.value)) == []


async def test_a_models_window_beyond_the_bound_is_not_used(tmp_path: Path,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    card = {"id": "k3", "object": "model", "created": 0, "owned_by": "x", "max_model_len": 10**400}
    server = FakeServer(lambda r: httpx.Response(200, json={"object": "list", "data": [card]}))
    tok = K3Tokenizer.from_pretrained(write_model_dir(tmp_path / "k3", num_base_tokens=163_584))
    with caplog.at_level(logging.WARNING, logger="kimik3.engines.remote"), \
            pytest.raises(UserError, match="reports no max_model_len"):
        await Client(server.engine(mode="raw", tokenizer=tok)).chat(HELLO)
    assert [r.getMessage() for r in caplog.records] == [
        "kimik3: /models gives 'k3' a window of 100000000000... (401 digits) tokens, beyond any real one; not used"]


@pytest.mark.parametrize(("code", "status"), [(HUGE, 500), ("\uff14\uff12\uff19", 500), (" 429 ", 429), ("4290", 500)])
def test_an_error_objects_code_of_any_digits_maps_to_a_status(code: str, status: int) -> None:
    error = error_from_payload({"error": {"message": "no", "code": code}})
    assert error.status_code == status


def test_a_retry_after_of_5000_digits_is_unreadable_not_an_error() -> None:
    assert retry_after(httpx.Headers({"retry-after": HUGE})) is None
    assert retry_after(httpx.Headers({"retry-after-ms": HUGE})) is None
    assert retry_after(httpx.Headers({"retry-after": "1" + "0" * 400})) is None  # 1e400 is not finite
    assert retry_after(httpx.Headers({"retry-after": "7"})) == 7.0


def test_the_helpers() -> None:
    assert stated_count("262,144") == 262144 and stated_count(HUGE) is None and stated_count("٣") is None
    assert stated_count(str(MAX_COUNT)) == MAX_COUNT and stated_count(str(MAX_COUNT + 1)) is None
    assert shown_int(10**4000) == "an integer of about 4001 digits"
    assert shown_int(123) == "123"
    assert cut_numbers(f"a {HUGE} b 262,144") == "a 99999999... (5000 digits) b 262,144"
