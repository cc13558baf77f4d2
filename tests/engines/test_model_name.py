"""``Engine.model_name()``: every engine says its model, an endpoint's asked of /v1/models once
when none was given (what ``kimik3 eval --base-url`` records in eval.json)."""

from __future__ import annotations

from pathlib import Path

import httpx

from kimik3 import K3Tokenizer, ScriptedEngine
from kimik3.engines import RemoteCompletionsEngine, RemoteEngine
from tests.k3vocab import write_model_dir

from .test_remote_offline import FakeServer

MODELS = {"object": "list", "data": [{"id": "k3-tiny", "object": "model"}, {"id": "other", "object": "model"}]}


async def test_model_name_is_the_endpoints_first_listed_model_when_none_is_given(tmp_path: Path) -> None:
    server = FakeServer(lambda r: httpx.Response(200, json=MODELS))
    client = server.engine().endpoint.client
    chat = RemoteEngine(client=client)
    assert chat.model == ""
    assert await chat.model_name() == "k3-tiny" and chat.model == "k3-tiny"
    tok = K3Tokenizer.from_pretrained(write_model_dir(tmp_path / "k3", num_base_tokens=163_584))
    raw = RemoteCompletionsEngine(tokenizer=tok, client=client)
    both = raw.with_chat_for_images()  # the same endpoint
    assert await both.model_name() == "k3-tiny" and raw.model == "k3-tiny" and both.model == "k3-tiny"
    assert [r["path"] for r in server.requests] == ["/v1/models", "/v1/models"]  # once per endpoint
    named = RemoteEngine(model="given", client=client)
    assert await named.model_name() == "given" and len(server.requests) == 2  # not asked
    assert await ScriptedEngine(["x"], model="m").model_name() == "m"
