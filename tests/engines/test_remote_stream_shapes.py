"""RemoteEngine end to end over a loopback socket (tests/engines/sse_server.py): every stream shape
of issue 13 through ``Client(RemoteEngine(base_url=...)).chat/stream``, chat and raw mode."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from kimik3 import (
    APIConnectionError,
    APIResponseValidationError,
    BadRequestError,
    Client,
    K3Tokenizer,
    NotFoundError,
    RateLimitError,
    RemoteEngine,
    ServiceUnavailableError,
)
from kimik3.engines import Engine, RemoteCompletionsEngine
from kimik3.engines._http import retry_after
from kimik3.formats.k3 import ContentDelta, ToolCallDone
from tests.engines.sse_server import Reply, SSEServer, sse
from tests.engines.test_chat_transcripts import ROWS, Row, d
from tests.k3vocab import write_model_dir

USER = [{"role": "user", "content": "x"}]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model_dir(tmp_path_factory.mktemp("k3") / "k3", num_base_tokens=163_584)


@functools.cache
def load_tokenizer(model_dir: Path) -> K3Tokenizer:
    return K3Tokenizer.from_pretrained(model_dir)


def engine(server: SSEServer, mode: str, model_dir: Path) -> Engine:
    if mode == "raw":
        # the fake server answers completions only: the context window is given (raw mode sends max_tokens)
        return RemoteCompletionsEngine(base_url=server.base_url, model="k3", tokenizer=load_tokenizer(model_dir),
                                       max_model_len=8192)
    return RemoteEngine(base_url=server.base_url, model="k3")


def reply_for(row: Row) -> Reply:
    if len(row.chunks) == 1 and row.chunks[0].get("object") == "chat.completion":
        return Reply(headers={"content-type": "application/json"}, parts=[json.dumps(row.chunks[0]).encode()])
    return Reply(parts=sse(row.chunks, done=False))


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
async def test_every_transcript_end_to_end(row: Row) -> None:
    tools = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in row.tools]
    async with SSEServer([reply_for(row)]) as server:
        client = Client(RemoteEngine(base_url=server.base_url, model="k3"), max_retries=0)
        async with client.stream(USER, reasoning_effort="high" if row.thinking else "none", tools=tools,
                                 tool_choice=row.tool_choice) as call:
            events = [e async for e in call]
    out = call.completion
    assert len(events) >= len(row.events)
    assert (out.message.content, out.message.reasoning_content) == (row.content, row.reasoning)
    ids = {c.id for c in out.message.tool_calls or ()} | {f.id for f in out.failed_tool_calls}
    assert len(ids) == len(out.message.tool_calls or ()) + len(out.failed_tool_calls)  # unique
    # kimik3's own ids are random here (k3_<n> in the table): compare names and arguments
    assert [(c.function.name, c.function.arguments) for c in out.message.tool_calls or ()] == [c[1:] for c in row.calls]
    for call, want in zip(out.message.tool_calls or (), row.calls, strict=True):
        assert call.id == want[0] if not want[0].startswith("k3_") else call.id.startswith("call_")
    assert (out.finish_reason, out.truncated, out.dropped_tool_calls) == (row.finish, row.truncated, row.dropped)
    assert [(f.name, f.arguments) for f in out.failed_tool_calls] == [f[1:3] for f in row.failed]
    assert out.misplaced_tool_calls == row.misplaced


async def test_tool_call_without_index_gives_one_call() -> None:
    """Issue 13, input 1, exactly as listed (it raised TypeError out of chat())."""
    chunks = [
        d({"tool_calls": [{"id": "call_a", "type": "function", "function": {"name": "lookup", "arguments": ""}}]}),
        d({"tool_calls": [{"function": {"arguments": '{"q": '}}]}),
        d({"tool_calls": [{"function": {"arguments": '"x"}'}}]}),
        d({}, "tool_calls"),
    ]
    async with SSEServer([Reply(parts=sse(chunks))]) as server:
        out = await Client(RemoteEngine(base_url=server.base_url, model="k3")).chat(USER)
    assert out.message.tool_calls is not None
    assert [(c.id, c.function.name, c.function.parsed_arguments()) for c in out.message.tool_calls] == [
        ("call_a", "lookup", {"q": "x"})
    ]


async def test_in_band_error_before_any_event_is_retried_then_succeeds() -> None:
    """Input 4: a 503 error object after the 200 headers is a retryable ServiceUnavailableError."""
    error = {"error": {"message": "engine queue is full, retry later", "type": "ServiceUnavailableError", "code": 503}}
    replies = [Reply(parts=sse([error])), Reply(parts=sse([d({"content": "ok"}, "stop")]))]
    async with SSEServer(replies) as server:
        out = await Client(RemoteEngine(base_url=server.base_url, model="k3"), max_retries=1).chat(
            USER, reasoning_effort="none"
        )
        assert len(server.requests) == 2
    assert out.message.content == "ok"


async def test_in_band_error_after_events_raises_without_retry() -> None:
    error = {"error": {"message": "engine queue is full, retry later", "type": "ServiceUnavailableError", "code": 503}}
    async with SSEServer([Reply(parts=sse([d({"reasoning_content": "a"}), error]))]) as server:
        client = Client(RemoteEngine(base_url=server.base_url, model="k3"), max_retries=2)
        seen: list[Any] = []
        with pytest.raises(ServiceUnavailableError) as info:
            async with client.stream(USER) as call:
                async for event in call:
                    seen.append(event)
        assert len(server.requests) == 1
    assert info.value.status_code == 503 and "engine queue is full" in str(info.value)
    assert [type(e).__name__ for e in seen] == ["ReasoningDelta"]


@pytest.mark.parametrize("mode", ["chat", "raw"])
@pytest.mark.parametrize(
    ("error_event", "status"),
    [
        (b'event: error\ndata: {"message": "upstream overloaded", "type": "overloaded_error"}\n\n', 503),
        (b"event: error\ndata: upstream overloaded\n\n", 500),  # the error in words, not JSON
    ],
)
async def test_sse_event_error_is_typed_and_retried(mode: str, error_event: bytes, status: int, model_dir: Path) -> None:
    async with SSEServer([Reply(parts=[error_event])]) as server:
        with pytest.raises(ServiceUnavailableError, match="upstream overloaded") as info:
            await Client(engine(server, mode, model_dir), max_retries=1).chat(USER)
        assert len(server.requests) == 2
    assert info.value.status_code == status


@pytest.mark.parametrize("mode", ["chat", "raw"])
@pytest.mark.parametrize(
    ("reply", "match"),
    [
        (Reply(parts=[b'data: {"choices": [\n\n']), "a server-sent event's data is not JSON"),
        (Reply(parts=[b"data: keep-alive\n\n"]), "a server-sent event's data is not JSON: 'keep-alive'"),
        (Reply(headers={"content-type": "text/html; charset=utf-8"}, parts=[b"<html><body>Gateway login</body></html>"]),
         r"an HTML page \(text/html; charset=utf-8\)"),
        (Reply(headers={"content-type": "text/plain"}, parts=[b"Internal error, sorry\n"]),
         "the answer has no server-sent events: 'Internal error, sorry'"),
    ],
)  # fmt: skip
async def test_bodies_that_are_not_the_protocol_raise_a_typed_error(
    mode: str, reply: Reply, match: str, model_dir: Path
) -> None:
    async with SSEServer([reply]) as server:
        with pytest.raises(APIResponseValidationError, match=match):
            await Client(engine(server, mode, model_dir), max_retries=2).chat(USER)
        assert len(server.requests) == 1  # not retried: the endpoint would answer the same
        assert server.requests[0]["path"] == ("/v1/completions" if mode == "raw" else "/v1/chat/completions")


PARIS = [d({"content": "Par"}), d({"content": "is"}, "stop")]


@pytest.mark.parametrize(
    "parts",
    [
        [b"\xef\xbb\xbf" + b"".join(p for p in sse(PARIS) if isinstance(p, bytes))],  # a BOM before the first event
        [b"event: ping\ndata: ping\n\n", *sse(PARIS)],  # a gateway's named keep-alive, data not JSON
        [b'event: ping\ndata: {"type": "ping"}\n\n', *sse(PARIS[:1], done=False), b"event: heartbeat\ndata: .\n\n",
         *sse(PARIS[1:])],
    ],
)  # fmt: skip
async def test_a_bom_and_named_keep_alive_events_lose_nothing(parts: list[bytes]) -> None:
    async with SSEServer([Reply(parts=parts)]) as server:
        out = await Client(RemoteEngine(base_url=server.base_url, model="k3"), max_retries=0).chat(USER)
    assert (out.message.content, out.finish_reason, out.truncated) == ("Paris", "stop", False)


async def test_a_json_body_with_fastapi_detail_is_a_typed_error_not_an_empty_answer() -> None:
    reply = Reply(headers={"content-type": "application/json"}, parts=[b'{"detail": "Not Found"}'])
    async with SSEServer([reply]) as server:
        with pytest.raises(NotFoundError, match="404: Not Found"):
            await Client(RemoteEngine(base_url=server.base_url, model="k3"), max_retries=2).chat(USER)
        assert len(server.requests) == 1


@pytest.mark.parametrize("mode", ["chat", "raw"])
async def test_an_empty_answer_is_a_retryable_connection_error(mode: str, model_dir: Path) -> None:
    async with SSEServer([Reply(parts=[b": just a comment\n\n"])]) as server:
        with pytest.raises(APIConnectionError, match="before sending any"):
            await Client(engine(server, mode, model_dir), max_retries=1).chat(USER)
        assert len(server.requests) == 2


async def test_a_broken_connection_mid_answer_is_a_truncated_completion() -> None:
    """Input 3 over a socket: the chunked body breaks off; what arrived is kept, marked cut."""
    parts = sse([d({"reasoning_content": "so"}), d({"content": "The capital of Fra"})], done=False)
    async with SSEServer([Reply(parts=parts, cut=True)]) as server:
        out = await Client(RemoteEngine(base_url=server.base_url, model="k3"), max_retries=2).chat(USER)
        assert len(server.requests) == 1
    assert out.message.content == "The capital of Fra" and out.truncated and out.finish_reason == "length"


async def test_a_broken_connection_before_anything_is_retried() -> None:
    replies = [Reply(parts=[b"data: {\"cho"], cut=True), Reply(parts=sse([d({"content": "ok"}, "stop")]))]
    async with SSEServer(replies) as server:
        out = await Client(RemoteEngine(base_url=server.base_url, model="k3"), max_retries=1).chat(
            USER, reasoning_effort="none"
        )
        assert len(server.requests) == 2
    assert out.message.content == "ok" and not out.truncated


async def test_raw_mode_in_band_error_and_cut(model_dir: Path) -> None:
    error = {"object": "error", "message": "bad stop ids", "type": "BadRequestError", "code": 400}
    async with SSEServer([Reply(parts=sse([error]))]) as server:
        with pytest.raises(BadRequestError, match="bad stop ids"):
            await Client(engine(server, "raw", model_dir)).chat(USER)
    text = {"id": "x", "object": "text_completion", "choices": [{"index": 0, "text": "hmm<|close|>think<|sep|>", "finish_reason": None}]}  # fmt: skip
    async with SSEServer([Reply(parts=sse([text], done=False), cut=True)]) as server:
        out = await Client(engine(server, "raw", model_dir)).chat(USER)
    assert out.message.reasoning_content == "hmm" and out.truncated


def test_retry_after_as_seconds_or_http_date() -> None:
    assert retry_after({"retry-after": "7"}) == 7.0
    assert retry_after({"retry-after-ms": "250"}) == 0.25
    date = "Wed, 21 Oct 2026 07:28:00 GMT"
    assert retry_after({"retry-after": date}, now=1792567680.0 - 30) == 30.0
    assert retry_after({"retry-after": date}, now=1792567680.0 + 5) == 0.0  # in the past
    # RFC 9110's obsolete date forms, which it reads as UTC: asctime, and RFC 850
    assert retry_after({"retry-after": "Wed Oct 21 07:28:00 2026"}, now=1792567680.0 - 30) == 30.0
    assert retry_after({"retry-after": "Wednesday, 21-Oct-26 07:28:00 GMT"}, now=1792567680.0 - 30) == 30.0
    assert retry_after({"retry-after": "soon"}) is None and retry_after({}) is None
    assert retry_after({"retry-after": "nan"}) is None and retry_after({"retry-after": "-3"}) is None


@pytest.mark.parametrize("header", ["90", "Wed, 21 Oct 2099 07:28:00 GMT"])
async def test_retry_after_above_the_cap_raises_at_once(header: str) -> None:
    body = json.dumps({"error": {"message": "slow down"}}).encode()
    reply = Reply(status=429, headers={"content-type": "application/json", "retry-after": header}, parts=[body])
    async with SSEServer([reply]) as server:
        with pytest.raises(RateLimitError) as info:
            await Client(RemoteEngine(base_url=server.base_url, model="k3"), max_retries=2).chat(USER)
        assert len(server.requests) == 1
    assert info.value.retry_after is not None and info.value.retry_after > 60
    if header == "90":
        assert info.value.retry_after == 90.0


async def test_retry_after_http_date_in_the_past_is_retried_at_once() -> None:
    body = json.dumps({"error": {"message": "slow down"}}).encode()
    busy = Reply(status=429, headers={"content-type": "application/json", "retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, parts=[body])  # fmt: skip
    async with SSEServer([busy, Reply(parts=sse([d({"content": "ok"}, "stop")]))]) as server:
        out = await Client(RemoteEngine(base_url=server.base_url, model="k3"), max_retries=1).chat(
            USER, reasoning_effort="none"
        )
        assert len(server.requests) == 2
    assert out.message.content == "ok"


async def test_past_tool_call_turn_always_sends_both_reasoning_keys() -> None:
    """Input 10: a past assistant tool-call turn without reasoning goes out with both keys, ''."""
    history = [
        {"role": "user", "content": "ls"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "a", "type": "function", "function": {"name": "exec", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "a", "content": "x.txt"},
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": "again"},
    ]
    async with SSEServer([Reply(parts=sse([d({"content": "ok"}, "stop")]))]) as server:
        await Client(RemoteEngine(base_url=server.base_url, model="k3")).chat(history, reasoning_effort="none")
    sent = server.requests[0]["body"]["messages"]
    assert (sent[1]["reasoning_content"], sent[1]["reasoning"]) == ("", "")
    assert "reasoning_content" not in sent[3] and "reasoning" not in sent[3]  # no tool calls: as given


async def test_failed_and_duplicate_calls_over_the_wire() -> None:
    """Inputs 6 and 7 through stream(): events and the completion agree."""
    chunks = [
        d({"tool_calls": [{"index": 0, "id": "call00003", "function": {"name": "exec", "arguments": '{"c": "ls"}'}}]}),
        d({"tool_calls": [{"index": 1, "id": "call00003", "function": {"name": "exec", "arguments": '{"c": pwd}'}}]}),
        d({}, "tool_calls"),
    ]
    async with SSEServer([Reply(parts=sse(chunks))]) as server:
        client = Client(RemoteEngine(base_url=server.base_url, model="k3"))
        async with client.stream(USER) as call:
            events = [e async for e in call]
    completion = call.completion
    [done] = [e for e in events if isinstance(e, ToolCallDone)]
    [failed] = completion.failed_tool_calls
    assert done.id == "call00003" and failed.id != "call00003" and failed.id.startswith("call_")
    assert failed.arguments == '{"c": pwd}' and failed.reason.startswith("arguments are not valid JSON")
    assert failed.to_tool_call().function.arguments == "{}"
    assert not [e for e in events if isinstance(e, ContentDelta)]


def run_child(code: str) -> str:
    """Run ``code`` in a child Python (a hang fails the test through the generous limit)."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip()


CHILD = """
import asyncio
from kimik3 import APITimeoutError, Client, RemoteEngine
from tests.engines.sse_server import Reply, SSEServer, sse
from tests.engines.test_chat_transcripts import d

async def main():
    parts = %s
    async with SSEServer([Reply(parts=parts)]) as server:
        engine = RemoteEngine(base_url=server.base_url, model="k3", timeout=%s, idle_timeout=%s)
        try:
            await Client(engine, max_retries=0).chat([{"role": "user", "content": "x"}])
        except APITimeoutError as e:
            print("APITimeoutError:", str(e).split(":")[0])
        else:
            print("no timeout")

asyncio.run(main())
"""


def test_timeout_is_a_total_deadline_against_a_trickling_server() -> None:
    """Input 12: keep-alives every 0.05 s for up to 100 s; timeout=1 ends the request."""
    trickle = 'sse([d({"reasoning_content": "a"})], done=False) + [0.05, b": keep-alive\\n\\n"] * 2000'
    assert run_child(CHILD % (trickle, 1.0, 30.0)) == "APITimeoutError: the request exceeded its total timeout"


def test_idle_timeout_against_a_server_that_goes_silent() -> None:
    silent = 'sse([d({"reasoning_content": "a"})], done=False) + [20.0, b": late\\n\\n"]'
    assert run_child(CHILD % (silent, 60.0, 0.5)) == "APITimeoutError: the endpoint stopped sending (idle timeout)"


async def test_events_split_anywhere_with_any_line_ending() -> None:
    """CRLF split between reads, a bare CR, a UTF-8 character split between reads."""
    first = json.dumps(d({"content": "hé"}), ensure_ascii=False).encode()
    cut = first.index("é".encode()) + 1
    second = json.dumps(d({"content": "!"}, "stop")).encode()
    parts: list[bytes | float] = [b"data: " + first[:cut], first[cut:] + b"\r", b"\n\r\n", b"data: " + second + b"\r\r",
                                  b"data: [DONE]\r\n\r\n"]  # fmt: skip
    async with SSEServer([Reply(parts=parts)]) as server:
        out = await Client(RemoteEngine(base_url=server.base_url, model="k3")).chat(USER, reasoning_effort="none")
    assert out.message.content == "hé!" and out.finish_reason == "stop" and not out.truncated


class _Body:
    """A streaming response whose body arrives in the given network chunks."""

    def __init__(self, parts: list[bytes]) -> None:
        self.parts = parts

    def iter_bytes(self) -> Any:
        async def chunks() -> Any:
            for part in self.parts:
                yield part

        return chunks()


async def _body_lines(parts: list[bytes]) -> list[str]:
    import anyio

    from kimik3.engines._http import _lines

    return [line async for line in _lines(_Body(parts), anyio.current_time() + 600)]


@pytest.mark.parametrize("raw", [b"\xef\xbb\xbfdata: a\r\n\r\ndata: \xc3\xa9\rdata: b\r\r\n: c\n", b"x\r", b"\r\n\r\n", b""])
async def test_body_lines_are_the_same_however_the_network_cuts_them(raw: bytes) -> None:
    want = raw.decode().removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n").split("\n")
    want = want[:-1] if want[-1] == "" else want
    for cut in range(len(raw) + 1):
        for cut2 in range(cut, len(raw) + 1):
            assert await _body_lines([raw[:cut], raw[cut:cut2], raw[cut2:]]) == want


async def test_a_huge_line_in_many_network_chunks_is_scanned_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 2 MB event in 4 KB reads: line breaks are searched in each byte about once (re-scanning
    the unfinished line on every read made a 16 MB event take 14 s)."""
    import re

    import kimik3.engines._http as http

    scanned: list[int] = []

    class Counting:
        def split(self, text: str) -> list[str]:
            scanned.append(len(text))
            return re.split(r"\r\n|\r|\n", text)

    monkeypatch.setattr(http, "_NEWLINE", Counting())
    raw = b"data: " + b"x" * 2_000_000 + b"\n\ndata: [DONE]\n\n"
    lines = await _body_lines([raw[i : i + 4096] for i in range(0, len(raw), 4096)])
    assert [len(line) for line in lines] == [2_000_006, 0, 12, 0]
    assert sum(scanned) <= 2 * len(raw)
