"""A connection error names the endpoint it tried (its base URL, in the message and ``url``), and
the CLI's error line adds what to try when that endpoint is a local server nobody answers."""

from __future__ import annotations

import socket

import httpx
import openai
import pytest

from kimik3 import APIConnectionError, APITimeoutError, Client
from kimik3.cli.progress import one_line
from kimik3.engines import RemoteEngine
from kimik3.engines._endpoint import map_openai_error
from kimik3.engines._http import transport_error

HINT = " (is the server running? `kimik3 serve MODEL_DIR` starts one)"
MOONSHOT_HINT = (" (nothing answered at api.moonshot.ai: check this machine's network, the host name, a proxy "
                 "(HTTPS_PROXY / HTTP_PROXY) or a firewall; Moonshot's API is api.moonshot.ai, api.moonshot.cn from "
                 "mainland China; the endpoint is --base-url / KIMIK3_BASE_URL)")


def free_port() -> int:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("model", ["k3", None])  # None: /v1/models is asked first
async def test_a_dead_local_endpoint_is_named_in_the_error(model: str | None) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    engine = RemoteEngine(base_url=url + "/", model=model)
    with pytest.raises(APIConnectionError) as info:
        await Client(engine, max_retries=0).chat([{"role": "user", "content": "hi"}])
    await engine.aclose()
    assert type(info.value) is APIConnectionError and info.value.url == url
    assert str(info.value) == f"cannot reach the endpoint {url}: Connection error."
    assert one_line(info.value) == f"APIConnectionError: cannot reach the endpoint {url}: Connection error.{HINT}"


def test_the_hint_is_for_local_servers_only() -> None:
    request = httpx.Request("POST", "https://api.moonshot.ai/v1/chat/completions")
    remote = map_openai_error(openai.APIConnectionError(request=request))  # no base URL given: the request's
    assert isinstance(remote, APIConnectionError) and remote.url == "https://api.moonshot.ai/v1/chat/completions"
    assert one_line(remote) == ("APIConnectionError: cannot reach the endpoint "
                                 "https://api.moonshot.ai/v1/chat/completions: Connection error." + MOONSHOT_HINT)
    timeout = map_openai_error(openai.APITimeoutError(request=request), "http://localhost:8000/v1")
    assert isinstance(timeout, APITimeoutError) and timeout.url == "http://localhost:8000/v1"
    assert one_line(timeout) == "APITimeoutError: the request to http://localhost:8000/v1 timed out: Request timed out."
    for local in ("http://localhost:8000/v1", "http://[::1]:8000/v1", "http://127.0.0.2:9/v1"):
        assert one_line(APIConnectionError("x", url=local)) == f"APIConnectionError: x{HINT}"
    broken = transport_error(httpx.RemoteProtocolError("peer closed"), "http://127.0.0.1:8000/v1")
    assert isinstance(broken, APIConnectionError) and broken.url == "http://127.0.0.1:8000/v1"
    assert str(broken) == "the connection to http://127.0.0.1:8000/v1 failed: RemoteProtocolError('peer closed')"
    assert one_line(APIConnectionError("y")) == "APIConnectionError: y"  # no URL known: no hint


def test_an_unreachable_hosted_api_names_its_host_what_to_check_and_the_systems_reason() -> None:
    # issue 43: an unreachable hosted API said only "Connection error."
    request = httpx.Request("POST", "https://relay.example.com/v1/chat/completions")
    try:
        try:
            raise OSError(-3, "Temporary failure in name resolution")
        except OSError as os_error:
            raise openai.APIConnectionError(request=request) from httpx.ConnectError(str(os_error))
    except openai.APIConnectionError as e:
        try:
            raise map_openai_error(e, "https://relay.example.com/v1") from e
        except APIConnectionError as mapped:
            line = one_line(mapped)
    assert line == (
        "APIConnectionError: cannot reach the endpoint https://relay.example.com/v1: Connection error. (nothing "
        "answered at relay.example.com; the system said: [Errno -3] Temporary failure in name resolution: check "
        "this machine's network, the host name, a proxy (HTTPS_PROXY / HTTP_PROXY) or a firewall; the endpoint is "
        "--base-url / KIMIK3_BASE_URL)")
