"""Issue 40, Deliver 3: a URL's credentials (``user:pw@``, a secret-looking query value) never leave
kimik3: not in an error line, ``kimik3 verify``'s output, a session or eval file, an exception's
``url``, nor a span. Each sink is driven with a real credential-bearing URL and the secret bytes
are looked for everywhere it writes."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import anyio
import pytest
from click.testing import CliRunner

from kimik3 import APIConnectionError, AuthenticationError, Client, EngineError
from kimik3._text import redact_secrets, redact_url, redact_urls, url_secrets
from kimik3.cli import main
from kimik3.engines import RemoteEngine
from kimik3.tools.mcp import MCPServerStreamableHTTP

PASSWORD, KEY, TOKEN = "pw-S3CRET-1", "key-S3CRET-2", "tok-S3CRET-3"
SECRETS = (PASSWORD, KEY, TOKEN)
_CLEAN = {k: None for k in ("KIMIK3_BASE_URL", "KIMIK3_API_KEY", "KIMIK3_MODEL", "KIMIK3_MODEL_PATH",
                            "OPENAI_BASE_URL", "OPENAI_API_KEY")}


def dead_url() -> str:
    """A credential-bearing base URL of a local port nobody listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://kimi:{PASSWORD}@127.0.0.1:{port}/v1?api-key={KEY}&access_token={TOKEN}"


def no_secret(*texts: str | bytes) -> None:
    for text in texts:
        data = text.encode() if isinstance(text, str) else text
        for secret in SECRETS:
            assert secret.encode() not in data, (secret, data[:400])


def files_under(folder: Path) -> list[bytes]:
    return [p.read_bytes() for p in folder.rglob("*") if p.is_file()]


@pytest.mark.parametrize(("url", "shown"), [
    ("https://u:pw@h:8000/v1?api-key=s3&model=k3", "https://***@h:8000/v1?api-key=***&model=k3"),
    ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
    ("http://h/v1?key=abc#access_token=zz&x=1", "http://h/v1?key=***#access_token=***&x=1"),
    ("http://h/?sig=1;X-Amz-Signature=2&Api_Key=q%20s&flag", "http://h/?sig=***;X-Amz-Signature=***&Api_Key=***&flag"),
    ("http://h/?password=a&client_secret=b&auth=c&token=d", "http://h/?password=***&client_secret=***&auth=***&token=***"),
    ("http://user@h/", "http://***@h/"),
    ("http://a:b@c@d/e", "http://***@d/e"),  # the last @ ends the userinfo
    ("http://u:p/w@host/v1", "http://***@host/v1"),  # an unquoted / hides the userinfo from urlsplit
    ("http://u:pw@[::1:99/x", "http://***@[::1:99/x"),  # not a valid URL: still redacted
    ("h:8000/v1", "h:8000/v1"),
    ("u:pw@h:8000/v1?x=1", "***@h:8000/v1?x=1"),  # no scheme
    ("http://h/v1?%6Bey=s1&api%2Dkey=s2&plain=1", "http://h/v1?%6Bey=***&api%2Dkey=***&plain=1"),  # encoded names
    # attacker variants (x40b): a password named pw, a bearer token, repeated and IPv6
    ("http://[::1]:8000/v1?pw=s1&bearer=s2&Bearer_Token=s3&upward=1", "http://[::1]:8000/v1?pw=***&bearer=***&"
     "Bearer_Token=***&upward=1"),
    ("http://u%40x:p%3Aw@[fe80::1]/v1?sig=a&sig=b&X-Amz-Signature=c", "http://***@[fe80::1]/v1?sig=***&sig=***&"
     "X-Amz-Signature=***"),
])
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


@pytest.mark.parametrize(("url", "secrets"), [
    ("http://kimi:pw-1234@h/v1?api-key=k%3D12&model=k3", ["kimi:pw-1234", "pw-1234", "a2ltaTpwdy0xMjM0", "k%3D12", "k=12"]),
    ("http://h/v1#access_token=tok-1&x=long-value", ["tok-1"]),
    ("u:pw12345@h:8000/v1?token=abcd", ["u:pw12345", "pw12345", "dTpwdzEyMzQ1", "abcd"]),
    ("http://user@h/?key=ab", ["user", "dXNlcjo="]),  # no password: whole, and its Basic value; values under 4 left out
    ("http://127.0.0.1:8000/v1", []),
])
def test_url_secrets(url: str, secrets: list[str]) -> None:
    assert sorted(url_secrets(url)) == sorted(secrets)
    assert redact_secrets(f"echo: {' and '.join(secrets)} kimik3", url) == f"echo: {' and '.join(['***'] * len(secrets))} kimik3"


def test_redact_urls_in_text_keeps_the_punctuation_around_them() -> None:
    assert redact_urls(f"cannot reach {dead_url()}: refused (see https://x.y/?a=1).") .startswith(
        "cannot reach http://***@127.0.0.1:")
    assert redact_urls("at 'http://u:pw@h/?token=t1', then http://h/?sig=s2.") == \
        "at 'http://***@h/?token=***', then http://h/?sig=***."


async def test_a_connection_error_names_the_endpoint_without_its_credentials() -> None:
    url = dead_url()
    engine = RemoteEngine(base_url=url, model="k3")
    with pytest.raises(APIConnectionError) as info:
        await Client(engine, max_retries=0).chat([{"role": "user", "content": "hi"}])
    await engine.aclose()
    assert info.value.url is not None and info.value.url.startswith("http://***@127.0.0.1:")
    assert "api-key=***&access_token=***" in info.value.url
    no_secret(str(info.value), info.value.url, repr(info.value.args))


def test_kimik3_run_against_a_credentialed_dead_endpoint(tmp_path: Path) -> None:
    home = tmp_path / "home"
    result = CliRunner().invoke(main, ["run", "ping", "-w", str(tmp_path), "--base-url", dead_url(), "--model", "k3",
                                       "--plain"], env={**_CLEAN, "KIMIK3_HOME": str(home)})
    assert result.exit_code == 1
    assert result.stderr.startswith("error: APIConnectionError: cannot reach the endpoint http://***@127.0.0.1:")
    no_secret(result.stdout, result.stderr, *files_under(home))


def test_kimik3_verify_prints_the_endpoint_redacted() -> None:
    url = dead_url()
    result = CliRunner().invoke(main, ["verify", "--base-url", url, "--quick", "--timeout", "5"], env=_CLEAN)
    assert result.exit_code == 1
    head = result.stdout.splitlines()[0]
    assert head.startswith("kimik3 verify http://***@127.0.0.1:") and "?api-key=***&access_token=***" in head
    assert "endpoint" in result.stdout and "FAIL" in result.stdout
    no_secret(result.stdout, result.stderr)
    bad = CliRunner().invoke(main, ["verify", "--base-url", f"ftp://u:{PASSWORD}@h/?token={TOKEN}"], env=_CLEAN)
    assert bad.exit_code == 1 and "UserError" in bad.stderr
    no_secret(bad.stdout, bad.stderr)


def test_eval_against_a_credentialed_dead_endpoint_writes_no_secret(tmp_path: Path) -> None:
    suite = tmp_path / "suite" / "t"
    suite.mkdir(parents=True)
    (suite / "task.toml").write_text('instruction = "x"\ncheck = "true"\n')
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["eval", str(suite.parent), "--out", str(out), "--base-url", dead_url(),
                                       "--model", "k3", "--plain", "--sandbox", "none"], env=_CLEAN)
    assert result.exit_code == 1 and "APIConnectionError: cannot reach the endpoint http://***@" in result.output
    no_secret(result.stdout, result.stderr, *files_under(out))


def test_an_mcp_server_is_named_by_its_redacted_url() -> None:
    server = MCPServerStreamableHTTP(f"https://u:{PASSWORD}@mcp.example/mcp?token={TOKEN}")
    assert server.name == "https://***@mcp.example/mcp?token=***"


def test_an_exception_with_a_raw_url_is_redacted_on_its_span() -> None:
    pytest.importorskip("opentelemetry.sdk", reason="opentelemetry-sdk is not installed")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from kimik3 import _tracing

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    span = _tracing.Span(tracer.start_span("chat k3"))
    try:
        raise EngineError(f"the server said: 502 from {dead_url()}")
    except EngineError as e:
        span.end(e)
    (done,) = exporter.get_finished_spans()
    shown = [str(done.status.description), *(str(v) for ev in done.events for v in (ev.attributes or {}).values())]
    assert any("http://***@127.0.0.1:" in text for text in shown)
    no_secret(*shown, *(str(v) for v in (done.attributes or {}).values()))


async def test_a_model_call_span_to_a_credentialed_endpoint_carries_host_and_port_only() -> None:
    pytest.importorskip("opentelemetry.sdk", reason="opentelemetry-sdk is not installed")
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):  # the global one (tests/test_tracing.py may have set it)
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    url = dead_url()
    engine = RemoteEngine(base_url=url, model="k3")
    with pytest.raises(APIConnectionError):
        await Client(engine, max_retries=0).chat([{"role": "user", "content": "hi"}])
    await engine.aclose()
    exporter.shutdown()
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "chat k3"]
    attributes = dict(span.attributes or {})
    assert attributes["server.address"] == "127.0.0.1" and attributes["server.port"] == urlsplit(url).port
    assert attributes["error.type"] == "APIConnectionError"
    shown = [str(v) for v in attributes.values()] + [str(span.status.description)]
    shown += [str(v) for ev in span.events for v in (ev.attributes or {}).values()]
    no_secret(*shown)


class _Echo(BaseHTTPRequestHandler):
    """A server that echoes the request back in its errors: a 401 naming the path and query as
    received, or (``/stream`` in the base URL) an error object in a 200 stream quoting the key."""

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        if "/ok" in self.path:  # an answer, its model named by the URL it was asked at
            chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": f"k3 at {self.path}",
                     "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hello!"},
                                  "finish_reason": "stop"}]}
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.end_headers()
            self.wfile.write(f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode())
            return
        if "/stream" in self.path:
            event = {"error": {"message": f"key {KEY} revoked for {PASSWORD}", "code": 401}}
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.end_headers()
            self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
            return
        body = json.dumps({"error": {"message": f"bad credentials for {self.path} "
                                                f"({self.headers.get('authorization')})"}}).encode()
        self.send_response(401)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def echo_server() -> Iterator[str]:
    """The base of an :class:`_Echo` server: ``http://127.0.0.1:PORT``."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("where", ["/v1", "/stream/v1"])
def test_a_server_echoing_the_request_in_its_error_shows_no_credential(
        tmp_path: Path, echo_server: str, where: str) -> None:
    # variant: the server's own error text holds the key (a path and query as received, the
    # key alone), not a URL that redact_urls would find
    url = echo_server.replace("http://", f"http://kimi:{PASSWORD}@") + f"{where}?api-key={KEY}#access_token={TOKEN}"
    home = tmp_path / "home"
    result = CliRunner().invoke(main, ["run", "ping", "-w", str(tmp_path), "--base-url", url, "--model", "k3",
                                       "--plain", "--sandbox", "none"], env={**_CLEAN, "KIMIK3_HOME": str(home)})
    assert result.exit_code == 1
    assert result.stderr.startswith("error: AuthenticationError: ") and "***" in result.stderr, result.stderr
    no_secret(result.stdout, result.stderr, *files_under(home))
    engine = RemoteEngine(base_url=url, model="k3")
    with pytest.raises(AuthenticationError) as info:
        await_chat(engine)
    cause = info.value.__cause__
    no_secret(str(info.value), repr(info.value.body), str(cause), repr(getattr(cause, "body", None)))


def await_chat(engine: RemoteEngine) -> None:
    async def chat() -> None:
        try:
            await Client(engine, max_retries=0).chat([{"role": "user", "content": "hi"}])
        finally:
            await engine.aclose()

    anyio.run(chat)


def test_a_run_on_a_credentialed_endpoint_records_and_shows_no_credential(tmp_path: Path, echo_server: str) -> None:
    # variant of the success path: the session's header, `kimik3 show` and `kimik3 verify`-free
    # output of a run that worked; the server names the model by the URL it was asked at
    url = echo_server.replace("http://", f"http://kimi:{PASSWORD}@") + f"/ok/v1?access_token={KEY}#token={TOKEN}"
    home, session = tmp_path / "home", tmp_path / "s.jsonl"
    env = {**_CLEAN, "KIMIK3_HOME": str(home)}
    result = CliRunner().invoke(main, ["run", "ping", "-w", str(tmp_path), "--base-url", url, "--model", "k3",
                                       "--plain", "--sandbox", "none", "--session", str(session)], env=env)
    assert result.exit_code == 0, result.output
    assert "[turn 1] answer: Hello!" in result.stdout
    header = json.loads(session.read_text().splitlines()[0])
    assert header["engine"][:2] == ["--base-url", redact_url(url)] and redact_url(url).startswith("http://***@")
    shown = CliRunner().invoke(main, ["show", str(session)], env=env)
    assert shown.exit_code == 0 and "Hello!" in shown.output
    no_secret(result.stdout, result.stderr, shown.output, *files_under(home), session.read_bytes())


def test_eval_on_a_credentialed_endpoint_records_no_credential(tmp_path: Path, echo_server: str) -> None:
    # variant: eval records the model the server says it served (here named by the URL asked)
    url = echo_server.replace("http://", f"http://kimi:{PASSWORD}@") + f"/ok/v1?access_token={KEY}#token={TOKEN}"
    suite = tmp_path / "suite" / "t"
    suite.mkdir(parents=True)
    (suite / "task.toml").write_text('instruction = "x"\ncheck = "true"\n')
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["eval", str(suite.parent), "--out", str(out), "--base-url", url,
                                       "--model", "k3", "--plain", "--sandbox", "none"], env=_CLEAN)
    assert result.exit_code == 0, result.output
    no_secret(result.stdout, result.stderr, *files_under(out))


def test_a_server_echoing_the_basic_authorization_of_a_percent_encoded_userinfo_shows_no_credential(
        tmp_path: Path, echo_server: str) -> None:
    # attacker variant (x40b): httpx sends a base URL's userinfo as `Authorization: Basic
    # base64(user:password)`, percent-decoded; a server echoing that header (or the decoded
    # password) showed the credential, encoded, in the error line and the exception
    import base64

    user, password = "ki%40mi", "pw%3AS3CRET-1"
    basic = base64.b64encode(b"ki@mi:pw:S3CRET-1").decode()
    url = echo_server.replace("http://", f"http://{user}:{password}@") + "/v1"
    home = tmp_path / "home"
    result = CliRunner().invoke(main, ["run", "ping", "-w", str(tmp_path), "--base-url", url, "--model", "k3",
                                       "--plain", "--sandbox", "none"], env={**_CLEAN, "KIMIK3_HOME": str(home)})
    assert result.exit_code == 1
    assert result.stderr == "error: AuthenticationError: 401: Error code: 401 - bad credentials for " \
                            "/v1/chat/completions (Basic ***)\n", result.stderr
    engine = RemoteEngine(base_url=url, model="k3")
    with pytest.raises(AuthenticationError) as info:
        await_chat(engine)
    shown = [str(info.value), repr(info.value.body), str(info.value.__cause__), result.stdout, *files_under(home)]
    for text in shown:
        data = text.encode() if isinstance(text, str) else text
        assert basic.encode() not in data and b"S3CRET" not in data, data[:400]
    assert redact_secrets("the password pw:S3CRET-1 of ki@mi", url) == "the password *** of ki@mi"


def test_a_server_echoing_the_bearer_api_key_shows_no_credential(tmp_path: Path, echo_server: str) -> None:
    # attacker variant (x40b): the API key (KIMIK3_API_KEY, not in the URL) echoed back in the
    # server's 401 (its Authorization header) reached the error line; a placeholder key stays
    home = tmp_path / "home"
    args = ["run", "ping", "-w", str(tmp_path), "--base-url", f"{echo_server}/v1", "--model", "k3", "--plain",
            "--sandbox", "none"]
    result = CliRunner().invoke(main, args, env={**_CLEAN, "KIMIK3_HOME": str(home), "KIMIK3_API_KEY": KEY})
    assert result.exit_code == 1
    assert result.stderr.endswith("error: AuthenticationError: 401: Error code: 401 - bad credentials for "
                                  "/v1/chat/completions (Bearer ***)\n"), result.stderr
    no_secret(result.stdout, result.stderr, *files_under(home))
    engine = RemoteEngine(base_url=f"{echo_server}/stream/v1", api_key=KEY, model="k3")
    with pytest.raises(AuthenticationError) as info:
        await_chat(engine)
    assert str(info.value) == "401: key *** revoked for pw-S3CRET-1"
    no_secret(repr(info.value.body).replace(PASSWORD, ""), str(info.value.__cause__))
    placeholder = CliRunner().invoke(main, args, env={**_CLEAN, "KIMIK3_HOME": str(home)})
    assert placeholder.stderr.endswith("(Bearer EMPTY)\n"), placeholder.stderr


def test_kimik3_verify_shows_no_credential_a_server_echoes(echo_server: str) -> None:
    # attacker variant (x40b): verify's rows quote the server's answer; a server echoing the
    # request (the base URL's query in the path, the Basic and Bearer headers) put the key, the
    # Basic value of the userinfo and the API key in `kimik3 verify`'s rows
    url = echo_server.replace("http://", f"http://kimi:{PASSWORD}@") + f"/v1?api-key={KEY}"
    result = CliRunner().invoke(main, ["verify", "--base-url", url, "--model", "k3", "--quick", "--api-key", TOKEN],
                                env=_CLEAN)
    assert result.exit_code == 1, result.output
    assert "HTTP 401: bad credentials for /v1?api-key=***/completions (Basic ***)" in result.output, result.output
    no_secret(result.output)
    assert "a2ltaTpwdy1TM0NSRVQtMQ" not in result.output
    bearer = CliRunner().invoke(main, ["verify", "--base-url", f"{echo_server}/v1", "--model", "k3", "--quick",
                                       "--api-key", TOKEN], env=_CLEAN)
    assert "HTTP 401: bad credentials for /v1/completions (Bearer ***)" in bearer.output, bearer.output
    no_secret(bearer.output)
