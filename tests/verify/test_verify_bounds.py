"""``kimik3 verify`` reads bounded bodies (issue 26, item 5): an endless or inflating answer is
cut at ``max_body_bytes`` (checked in a child process under an address-space limit), a 200 that
is not a completion is not "accepted", and a model id with CR/LF is refused."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import textwrap
import threading
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

import kimik3
from kimik3 import verify
from kimik3._verify import VerifyReport
from kimik3.cli import main

ROOT = str(Path(__file__).resolve().parents[2])
SCHEMAS = [("s#1", {"type": "object", "properties": {"a": {"type": "string"}}})]
PIECE = b'{"choices":[{"message":{"content":"' + b"a" * 65536


@functools.cache
def gzip_bomb() -> bytes:
    """About 0.5 MB of gzip that inflates to 512 MiB (compressed a MiB at a time)."""
    c = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: the gzip container
    block = b"a" * (1 << 20)
    return b"".join([c.compress(PIECE), *(c.compress(block) for _ in range(512)), c.flush()])


class _Endless(BaseHTTPRequestHandler):
    """Every answer is 200 and never ends (``/models`` too), or is a gzip bomb on ``/bomb/``."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def _endless(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        self.rfile.read(length)
        self.send_response(200)
        self.close_connection = True  # one answer per connection: the client abandons each one
        if self.path.startswith("/bomb/"):
            self.send_header("content-type", "application/json")
            self.send_header("content-encoding", "gzip")
            self.send_header("content-length", str(len(gzip_bomb())))
            self.send_header("connection", "close")
            self.end_headers()
            self.wfile.write(gzip_bomb())
            return
        self.send_header("content-type", "application/json")
        self.send_header("connection", "close")
        self.end_headers()
        try:
            while True:  # no newline ever: a line reader would hold it all
                self.wfile.write(PIECE)
        except OSError:  # the client hung up
            pass

    do_GET = do_POST = _endless


class _Quiet(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hangs up mid-answer is the point here


@contextmanager
def endless_server() -> Iterator[str]:
    httpd = _Quiet(("127.0.0.1", 0), _Endless)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


CHILD = textwrap.dedent("""
    import json, resource, sys
    sys.path.insert(0, ROOT)
    import kimik3
    from kimik3 import verify
    from kimik3.formats.k3 import default_tokenizer
    default_tokenizer()  # loaded before the limit: the vocabulary is not what is measured
    size = int(next(l for l in open("/proc/self/status") if l.startswith("VmSize:")).split()[1]) * 1024
    limit = size + 1024 ** 3  # 1 GiB more address space than the loaded interpreter has
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    rep = verify(URL, images=False, timeout=20, concurrency=4, schemas=SCHEMAS, **OPTIONS)
    print(json.dumps([[r.check, r.status, r.evidence] for r in rep.rows]))
""")


def run_child(url: str, **options: Any) -> list[list[str]]:
    code = CHILD.replace("ROOT", repr(ROOT)).replace("URL", repr(url)).replace("SCHEMAS", repr(SCHEMAS))
    code = code.replace("OPTIONS", repr(options))
    # generous: the bounded reads take seconds; the unbounded ones took minutes and 19 GB
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": ROOT})
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows: list[list[str]] = json.loads(proc.stdout)
    return rows


OVER = "HTTP 200, the answer body is over the 4,194,304-byte limit (max_body_bytes); not read further"


def test_an_endless_models_answer_is_cut_at_the_cap() -> None:
    with endless_server() as url:
        rows = run_child(url + "/v1", quick=True)
    assert rows == [["endpoint", "fail", f"GET {url}/v1/models: Malformed: malformed answer: body over the "
                                         "4,194,304-byte limit"]]


def test_endless_answers_are_cut_at_the_cap_and_fail_their_rows() -> None:
    with endless_server() as url:
        rows = run_child(url + "/v1", model="m")
    assert len(rows) == 33
    assert all(status == "fail" for _, status, _ in rows), rows
    assert sum(evidence.startswith(OVER) or f": {OVER}" in evidence for _, _, evidence in rows) == 32  # all but the convention row
    by_check = {check: (status, evidence) for check, status, evidence in rows}
    assert by_check["prompt_tokens: plain"] == ("fail", OVER)
    assert by_check["rejects: duplicate tool names"] == ("fail", f"{OVER} (a 400 was due); kimik3 refuses it "
                                                                 "client-side (InvalidRequestError)")
    assert by_check["tool arguments valid (walle, streamed)"] == ("fail", f"1/1 invalid; s#1: {OVER}")
    assert by_check["tool arguments valid (walle, non-streamed)"] == ("fail", f"1/1 invalid; s#1: {OVER}")
    assert by_check["reasoning field"] == ("fail", OVER)


def test_a_gzip_bomb_is_cut_at_the_cap_as_inflated() -> None:
    with endless_server() as url:
        rows = run_child(url + "/bomb/v1", model="m", quick=True)
    assert {(s, e) for c, s, e in rows if c.startswith("prompt_tokens: ") and c != "prompt_tokens convention"} == {
        ("fail", OVER)}


def _transport(chat: Callable[[dict[str, Any]], httpx.Response]) -> httpx.MockTransport:
    def handle(req: httpx.Request) -> httpx.Response:
        if req.url.path.endswith("/models"):
            return httpx.Response(200, json={"data": [{"id": "m"}]})
        return chat(json.loads(req.content or b"{}"))

    return httpx.MockTransport(handle)


@pytest.mark.parametrize(("body", "why"), [
    ({}, "no choices): {}"),
    ({"object": "error", "message": "no"}, 'no choices): {"object": "error", "message": "no"}'),
    ({"choices": []}, 'no choices): {"choices": []}'),
    ({"choices": [{"index": 0}]}, 'choices.0 has neither a message nor a text): {"choices": [{"index": 0}]}'),
    ({"choices": [{"text": None}]}, 'choices.0 has neither a message nor a text): {"choices": [{"text": null}]}'),
])  # fmt: skip
def test_a_200_that_is_not_a_completion_is_not_accepted(body: dict[str, Any], why: str) -> None:
    rep = verify("http://fake/v1", transport=_transport(lambda b: httpx.Response(200, json=body)), quick=True,
                 images=False)  # fmt: skip
    rejects = [r for r in rep.rows if r.check.startswith("rejects: ")]
    assert len(rejects) == 5 and all(r.status == "fail" for r in rejects)
    assert all(r.evidence.startswith(f"HTTP 200, not a completion ({why} (a 400 was due); ") for r in rejects)
    assert "accepted" not in str(rep)
    assert rep["prompt_tokens: plain"].evidence == f"HTTP 200, not a completion ({why}"
    assert rep["reasoning round-trip (replayed turn)"].status == "fail"


def test_a_stream_without_a_choice_is_not_a_completion() -> None:
    empty = "data: {}\n\ndata: [DONE]\n\n"

    def chat(body: dict[str, Any]) -> httpx.Response:
        if body.get("stream"):
            return httpx.Response(200, content=empty.encode(), headers={"content-type": "text/event-stream"})
        call = {"index": 0, "function": {"name": "walle_check", "arguments": '{"a": "x"}'}}
        return httpx.Response(200, json={"choices": [{"message": {"content": "", "tool_calls": [call]}}],
                                         "usage": {"prompt_tokens": 3}})

    rep = verify("http://fake/v1", transport=_transport(chat), schemas=SCHEMAS, images=False)
    assert rep["tool arguments valid (walle, non-streamed)"].evidence == "1/1 schemas: arguments valid"
    assert rep["tool arguments valid (walle, streamed)"].evidence == (
        "1/1 invalid; s#1: HTTP 200, not a completion (no stream chunk carried a choice)")


def test_a_bigger_cap_reads_a_bigger_answer() -> None:
    big = {"choices": [{"message": {"content": "x" * (5 * 1024 * 1024)}}], "usage": {"prompt_tokens": 3}}
    transport = _transport(lambda b: httpx.Response(200, json=big))
    small = verify("http://fake/v1", transport=transport, quick=True, images=False)
    assert small["prompt_tokens: plain"].evidence == OVER
    large = verify("http://fake/v1", transport=transport, quick=True, images=False, max_body_bytes=8 * 1024 * 1024)
    assert large["prompt_tokens: plain"].evidence.startswith("server 3, kimik3 ")


@pytest.mark.parametrize("model", ["m\r\nX-Injected: 1", "m\n", "\x1b]52;c;aGk=\x07", ""])
def test_a_model_id_with_cr_lf_is_refused(model: str) -> None:
    with pytest.raises(kimik3.UserError) as e:
        verify("http://fake/v1", model=model, transport=_transport(lambda b: httpx.Response(400)), quick=True)
    assert str(e.value) == (f"verify: model must be a non-empty string without control characters (CR, LF, ...), "
                            f"got {model!r}")
    result = CliRunner().invoke(main, ["verify", "--base-url", "http://127.0.0.1:9/v1", "--model", model, "--quick"])
    assert result.exit_code == 1
    assert result.output.splitlines()[-1].startswith("kimik3 verify: UserError: verify: model must be a non-empty ")


def test_a_listed_model_id_with_cr_lf_is_the_endpoint_row() -> None:
    def handle(req: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"data": [{"id": "m\r\nX-Injected: 1"}]})

    rep = verify("http://fake/v1", transport=httpx.MockTransport(handle), quick=True)
    assert [(r.check, r.status) for r in rep.rows] == [("endpoint", "fail")]
    assert rep.rows[0].evidence.startswith("GET http://fake/v1/models: Malformed: malformed answer: data.0.id: "
                                           "String should match pattern")
    assert rep.model == "?"


@pytest.mark.parametrize(("value", "ok"), [(1023, False), (0, False), (True, False), (1024, True)])
def test_max_body_bytes_is_checked(value: Any, ok: bool) -> None:
    transport = _transport(lambda b: httpx.Response(400))
    if ok:
        assert verify("http://fake/v1", transport=transport, quick=True, images=False, max_body_bytes=value).rows
        return
    with pytest.raises(kimik3.UserError) as e:
        verify("http://fake/v1", transport=transport, quick=True, max_body_bytes=value)
    assert str(e.value) == f"verify: max_body_bytes must be an int >= 1024, got {value!r}"


def test_the_cli_passes_max_body_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def fake(base_url: str, **options: Any) -> VerifyReport:
        seen.update(options)
        return VerifyReport(base_url, "m")

    monkeypatch.setattr(kimik3._verify, "verify", fake)
    result = CliRunner().invoke(main, ["verify", "--base-url", "http://x/v1", "--quick", "--max-body-bytes", "9999"])
    assert result.exit_code == 0, result.output
    assert seen["max_body_bytes"] == 9999
    result = CliRunner().invoke(main, ["verify", "--base-url", "http://x/v1", "--max-body-bytes", "10"])
    assert result.exit_code == 2 and "Invalid value for '--max-body-bytes'" in result.output


def test_a_body_nested_past_any_parser_limit_is_a_failed_row() -> None:
    deep = "[" * 200_000 + "]" * 200_000  # 400 KB: under the size cap, past json's and pydantic's depth
    rep = verify("http://fake/v1", transport=_transport(lambda b: httpx.Response(200, text=deep)), quick=True,
                 images=False)  # fmt: skip
    assert rep["prompt_tokens: plain"].status == "fail"
    assert rep["prompt_tokens: plain"].evidence.startswith("HTTP 200, malformed answer: body: ")
