"""``kimik3.verify`` against servers that answer malformed JSON or never answer, and bad options:
every malformed payload is a failed row naming the bad field; bad options are a UserError (a
one-line error and exit 1 from the CLI); a black-hole endpoint ends after one timeout."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

import kimik3
from kimik3 import verify
from kimik3._verify import CheckResult
from kimik3.cli import main

SCHEMAS = [("s#1", {"type": "object", "properties": {"a": {"type": "string"}}})]
Handler = Callable[[dict[str, Any]], httpx.Response]


def _transport(
    chat: Handler, stream: Handler | None = None, models: httpx.Response | None = None
) -> httpx.MockTransport:
    def handle(req: httpx.Request) -> httpx.Response:
        if req.url.path.endswith("/models"):
            return models if models is not None else httpx.Response(200, json={"data": [{"id": "m"}]})
        body = json.loads(req.content or b"{}")
        return stream(body) if body.get("stream") and stream is not None else chat(body)

    return httpx.MockTransport(handle)


def _chat(message: Any, usage: Any = None) -> Handler:
    usage = {"prompt_tokens": 10} if usage is None else usage
    return lambda body: httpx.Response(200, json={"choices": [{"message": message}], "usage": usage})


def _sse(*chunks: str) -> Handler:
    text = "".join(f"data: {c}\n\n" for c in chunks) + "data: [DONE]\n\n"
    return lambda body: httpx.Response(200, content=text.encode(), headers={"content-type": "text/event-stream"})


@pytest.mark.parametrize(
    ("message", "usage", "where"),
    [
        (
            {"content": "", "tool_calls": "abc"},
            None,
            "choices.0.message.tool_calls: Input should be a valid array (got 'abc')",
        ),
        ({"content": "", "tool_calls": ["x"]}, None, "choices.0.message.tool_calls.0: Input should be an object"),
        ([1], None, "choices.0.message: Input should be an object"),
        ({"content": 5}, None, "choices.0.message.content: Input should be a valid string (got 5)"),
        ({"content": "hi"}, {"prompt_tokens": True}, "usage.prompt_tokens: Input should be a valid integer (got True)"),
        ({"content": "hi"}, {"prompt_tokens": "12"}, "usage.prompt_tokens: Input should be a valid integer (got '12')"),
        ({"content": "hi"}, {"prompt_tokens": -3}, "usage.prompt_tokens: Input should be greater than or equal to 0"),
    ],
)
def test_malformed_chat_answer_is_a_failed_row_naming_the_field(message: Any, usage: Any, where: str) -> None:
    rep = verify("http://fake/v1", transport=_transport(_chat(message, usage)), schemas=SCHEMAS, images=False)
    row = rep["prompt_tokens: plain"]
    assert row.status == "fail" and row.evidence.startswith(f"HTTP 200, malformed answer: {where}")
    assert rep["prompt_tokens convention"].evidence == "no documented convention fits any of 0 counted requests"
    assert rep["tool_choice required"].evidence.startswith("HTTP 200, malformed answer: ")
    assert not rep.ok


def test_usage_inside_choices_is_read_like_the_vendor_verifier_reads_it() -> None:
    # Kimi's API puts usage inside choices[0]; the Vendor Verifier reads it there first (issue 27)
    inner = lambda body: httpx.Response(200, json={"choices": [{"message": {"content": "hi"},  # noqa: E731
                                                                "usage": {"prompt_tokens": 10}}]})
    stream = _sse('{"choices":[{"index":0,"delta":{"content":"hi"}}]}',
                  '{"choices":[{"index":0,"delta":{},"usage":{"prompt_tokens":10}}],"usage":{"prompt_tokens":99}}')
    rep = verify("http://fake/v1", transport=_transport(inner, stream), schemas=SCHEMAS, images=False)
    row = rep["prompt_tokens: plain"]
    assert "no usage.prompt_tokens" not in row.evidence and row.evidence.startswith("server 10, kimik3 ")
    top = verify("http://fake/v1", transport=_transport(_chat({"content": "hi"})), schemas=SCHEMAS, images=False)
    assert top["prompt_tokens: plain"].evidence.startswith("server 10, kimik3 ")


@pytest.mark.parametrize(
    ("chunk", "where"),
    [
        ("[1,2]", "body: Input should be an object (got [1, 2])"),
        ('{"choices":["x"]}', "choices.0: Input should be an object (got 'x')"),
        ('{"choices":[{"delta":{"content":5}}]}', "choices.0.delta.content: Input should be a valid string (got 5)"),
        ('{"choices":[{"delta":{"tool_calls":[{"index":null,"function":{"name":"a"}}]}}]}',
         "choices.0.delta.tool_calls.0.index: Input should be a valid integer (got None)"),
        ('{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":7}}]}}]}',
         "choices.0.delta.tool_calls.0.function.name: Input should be a valid string (got 7)"),
        ('{"choices":[{"delta":{"tool_calls":[{"index":-1}]}}]}',
         "choices.0.delta.tool_calls.0.index: Input should be greater than or equal to 0"),
        ("{not json", "body: Invalid JSON"),
    ],
)  # fmt: skip
def test_malformed_stream_chunk_is_a_failed_row(chunk: str, where: str) -> None:
    ok = _chat({"content": "", "tool_calls": [{"function": {"name": "walle_check", "arguments": '{"a": "x"}'}}]})
    rep = verify("http://fake/v1", transport=_transport(ok, _sse(chunk)), schemas=SCHEMAS, images=False)
    assert rep["tool arguments valid (walle, non-streamed)"].status == "pass"
    row = rep["tool arguments valid (walle, streamed)"]
    assert row.status == "fail"
    assert row.evidence.startswith(f"1/1 invalid; s#1: HTTP 200, stream chunk malformed answer: {where}")


def test_well_formed_stream_is_accumulated() -> None:
    ok = _chat({"content": ""})
    stream = _sse('{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"walle_check","arguments":"{\\"a\\""}}]}}]}',
                  '{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":": \\"x\\"}"}}]}}],"usage":null}')  # fmt: skip
    rep = verify("http://fake/v1", transport=_transport(ok, stream), schemas=SCHEMAS, images=False)
    assert rep["tool arguments valid (walle, streamed)"].evidence == "1/1 schemas: arguments valid"


@pytest.mark.parametrize(
    ("answer", "evidence"),
    [
        (httpx.Response(200, text="<html>hello</html>"), "GET http://fake/v1/models: Malformed: malformed answer: body: Invalid JSON"),
        (httpx.Response(200, json={"data": [{"id": {"a": 1}}]}), "GET http://fake/v1/models: Malformed: malformed answer: data.0.id: Input should be a valid string"),
        (httpx.Response(200, json={"data": []}), "GET http://fake/v1/models: Malformed: malformed answer: data: List should have at least 1 item"),
    ],
)  # fmt: skip
def test_malformed_models_answer_is_the_endpoint_row(answer: httpx.Response, evidence: str) -> None:
    rep = verify("http://fake/v1", transport=_transport(_chat({"content": "x"}), models=answer), quick=True)
    assert [r.check for r in rep.rows] == ["endpoint"] and rep.rows[0].evidence.startswith(evidence)


def test_html_chat_answer_is_a_failed_row() -> None:
    html: Handler = lambda body: httpx.Response(200, text="<html>hello</html>")  # noqa: E731
    rep = verify("http://fake/v1", transport=_transport(html), quick=True, images=False)
    assert rep["prompt_tokens: plain"].evidence.startswith("HTTP 200, malformed answer: body: Invalid JSON")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"concurrency": 0}, "verify: concurrency must be an int >= 1, got 0"),
        ({"concurrency": -1}, "verify: concurrency must be an int >= 1, got -1"),
        ({"concurrency": True}, "verify: concurrency must be an int >= 1, got True"),
        ({"max_tokens": -5}, "verify: max_tokens must be an int >= 1, got -5"),
        ({"timeout": "x"}, "verify: timeout must be a positive number of seconds, got 'x'"),
        ({"timeout": 0}, "verify: timeout must be a positive number of seconds, got 0"),
        ({"timeout": float("nan")}, "verify: timeout must be a positive number of seconds, got nan"),
        ({"colour": "red"}, "verify: unknown option(s) ['colour']"),
        ({"schemas": [("a", 5)]}, "verify: schemas must be a list of (name, JSON Schema dict) pairs, got [('a', 5)]"),
        ({"schemas": "x"}, "verify: schemas must be a list of (name, JSON Schema dict) pairs, got x"),
    ],
)
def test_bad_options_are_user_errors(options: dict[str, Any], message: str) -> None:
    with pytest.raises(kimik3.UserError) as e:
        verify("http://fake/v1", transport=_transport(_chat({"content": "x"})), quick=True, **options)
    assert str(e.value) == message


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://[::1", "verify: invalid base_url 'http://[::1': Invalid port: ':1'"),
        ("localhost:9/v1", "verify: base_url must be an http(s) URL with a host"),
        ("ftp://host/v1", "verify: base_url must be an http(s) URL with a host"),
    ],
)
def test_bad_base_url_is_a_user_error_and_a_one_line_cli_error(url: str, message: str) -> None:
    with pytest.raises(kimik3.UserError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        verify(url, quick=True)
    result = CliRunner().invoke(main, ["verify", "--base-url", url, "--quick", "--no-images"])
    assert (result.exit_code == 1 and result.exception is None) or isinstance(result.exception, SystemExit)
    assert result.exit_code == 1
    assert f"kimik3 verify: UserError: {message}" in result.output
    assert "Traceback" not in result.output


def test_cli_rejects_bad_numbers_at_click_level() -> None:
    for args in (["--concurrency", "0"], ["--timeout", "0"], ["--timeout", "-1"], ["--max-tokens", "0"]):
        result = CliRunner().invoke(main, ["verify", "--base-url", "http://127.0.0.1:9/v1", "--quick", *args])
        assert result.exit_code == 2 and "Invalid value for" in result.output, args


def test_progress_reports_each_row_as_decided() -> None:
    seen: list[CheckResult] = []
    rep = verify("http://fake/v1", transport=_transport(_chat({"content": "x"})), quick=True, images=False,
                 progress=seen.append)  # fmt: skip
    assert seen == rep.rows and len(seen) == 26


_BLACK_HOLE = """
import socket, sys
from kimik3 import verify
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(16)   # accepts, never answers
rep = verify(f"http://127.0.0.1:{s.getsockname()[1]}/v1", model="m", quick=True, images=False, timeout=0.5,
             progress=lambda r: print("ROW", r.check, r.status, r.evidence, flush=True))
print("ROWS", len(rep.rows))
"""


def test_black_hole_endpoint_ends_after_one_timeout_with_one_row() -> None:
    # a hang is tested in a child process with a generous limit (never a wall-clock assert)
    out = subprocess.run([sys.executable, "-c", _BLACK_HOLE], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.splitlines() == [
        "ROW endpoint fail POST http://127.0.0.1:{}/v1/chat/completions: no complete answer within 0.5 s (timeout)".format(
            out.stdout.split("127.0.0.1:")[1].split("/")[0]),
        "ROWS 1",
    ]  # fmt: skip


def test_cli_black_hole_prints_the_endpoint_row_and_exits_1() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        port = s.getsockname()[1]
        out = subprocess.run([sys.executable, "-m", "kimik3", "verify", "--base-url", f"http://127.0.0.1:{port}/v1",
                              "--model", "m", "--quick", "--no-images", "--timeout", "0.5"],
                             capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 1, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == f"kimik3 verify http://127.0.0.1:{port}/v1 --quick (timeout 0.5 s per request)"
    assert lines[1].split() == ["endpoint", "FAIL", "POST", f"http://127.0.0.1:{port}/v1/chat/completions:", "no",
                                "complete", "answer", "within", "0.5", "s", "(timeout)"]  # fmt: skip
    assert lines[-1] == "verify: FAILED (1 row)"
