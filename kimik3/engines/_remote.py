"""RemoteEngine: K3 behind an OpenAI-compatible chat-completions endpoint (self-hosted vLLM /
SGLang, or a hosted API): the server renders K3's prompt and parses its output.

kimik3 sends every past assistant message with ``reasoning_content`` AND ``reasoning`` (vLLM's
Python frontend reads only the latter, SGLang and hosted APIs the former; ``""`` for a tool-call
turn without reasoning) and its tool_calls as received; the server's answer goes through
:class:`~kimik3.engines._chat.ChatStreamChecker` (:class:`~kimik3.engines.ChatEngine`). vLLM's
Rust frontend (``vllm-rs``, which vLLM's K3 recipe turns on with ``VLLM_USE_RUST_FRONTEND=1``)
takes the two names as aliases and refuses a message carrying both ("duplicate field
`reasoning`"): on that 400 the engine learns it of the endpoint
(:attr:`~kimik3.engines.OpenAIEndpoint.refuses_both_reasoning_fields`), says so in a warning,
sends the request again with ``reasoning`` alone, and does so from then on; its configuration
(``reasoning_field``) is never rewritten.

What the request looks like on the wire is the endpoint's profile's (:mod:`kimik3.engines._profiles`,
``docs/endpoints.md``): the request as Moonshot's K3 contract writes it for self-hosted servers,
reshaped for Moonshot's hosted API (chosen by its host name).

Raw mode (kimik3 encodes the prompt, the server only generates) is another engine over the same
endpoint: :class:`~kimik3.engines.RemoteCompletionsEngine`.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import anyio

from .._exceptions import APIConnectionError, BadRequestError, UserError
from ..formats.k3 import upload_url
from ..types import ChatRequest, ImagePart, Message, dump_message
from ._base import ChatEngine
from ._endpoint import OpenAIEndpoint
from ._http import Event
from ._profiles import EndpointProfile, Profile, detect_profile
from ._routing import DEFAULT_ROUTING_HEADERS

if TYPE_CHECKING:  # openai is imported by OpenAIEndpoint, at first use (start-up time)
    import openai

__all__ = ["ReasoningField", "RemoteEngine"]

log = logging.getLogger("kimik3.engines.remote")

ReasoningField = Literal["both", "reasoning", "reasoning_content"]
_REASONING_FIELDS = ("both", "reasoning", "reasoning_content")
MODELS_TIMEOUT = 10.0
"""Seconds :meth:`RemoteEngine.context_window` waits for ``/v1/models`` before it goes on without
(a hung server is then met by the first request, under its own timeout)."""
_DUPLICATE_REASONING = "duplicate field `reasoning"  # serde's words in vllm-rs's 400 (either name first)


class RemoteEngine(ChatEngine):
    """A K3 chat engine over an OpenAI-compatible chat-completions endpoint.

    Args:
        base_url: the endpoint, e.g. ``"http://127.0.0.1:8000/v1"`` (default:
            ``$OPENAI_BASE_URL``).
        api_key: the key (default ``$MOONSHOT_API_KEY`` for Moonshot's API, else
            ``$OPENAI_API_KEY``, else ``"EMPTY"`` for servers without auth).
        model: the served model name (default: the first model ``/v1/models`` lists).
        timeout: seconds for a whole request, from sending it to the last byte of the answer
            (default 600): a total deadline, whatever the server trickles.
        idle_timeout: seconds the server may send nothing at all, headers or body, keep-alive
            comments included (default 300).
        connect_timeout: seconds for connecting (default 10).
        headers: extra HTTP headers.
        reasoning_field: the name(s) past assistant reasoning goes out under: ``"both"``
            (``reasoning_content`` and ``reasoning``, read by every server kimik3 knows but
            vllm-rs, for which the engine sends ``"reasoning"`` once the server refused both),
            ``"reasoning"`` or ``"reasoning_content"``; default: the profile's (``"both"``;
            ``"reasoning_content"`` for Moonshot's API).
        client: a ready ``openai.AsyncOpenAI`` (then base_url, api_key, idle / connect timeouts
            and headers are ignored; ``timeout`` still bounds each request).
        endpoint: an :class:`~kimik3.engines.OpenAIEndpoint` to share with another engine (a
            :class:`~kimik3.engines.RemoteCompletionsEngine` over the same server); then the
            connection arguments above are ignored.
        profile: what the request looks like on the wire (``docs/endpoints.md``): ``"moonshot"``
            (Moonshot's API, the Kimi Code API), ``"vllm"``, ``"sglang"`` or ``"openai"`` (a
            third-party host); default: chosen by the endpoint's host
            (:func:`~kimik3.engines._profiles.detect_profile`).
        routing_headers: the headers that carry a request's routing key (``request.routing``,
            which an :class:`~kimik3.Agent` sets for its conversation) to a router in front of
            several replicas: default ``("x-session-id", "x-smg-routing-key",
            "x-dynamo-session-id")``, and ``X-Dynamo-Parent-Session-ID`` on a sub-agent's
            requests (docs/scale-out.md); None sends no routing header.
        routing_user: also send the key as the body's OpenAI ``user`` field (default True; a
            server that refuses the field is sent requests without it once it said so).

    Attributes:
        endpoint: the :class:`~kimik3.engines.OpenAIEndpoint` (client, served model, reader).
        profile: the profile's name.

    Raises:
        UserError: an unknown ``reasoning_field`` or ``profile``; ``routing_headers`` that are not
            header names.
    """

    def __init__(
        self,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        model: str | None = None,
        timeout: float = 600.0,
        idle_timeout: float = 300.0,
        connect_timeout: float = 10.0,
        headers: Mapping[str, str] | None = None,
        reasoning_field: ReasoningField | None = None,
        client: openai.AsyncOpenAI | None = None,
        endpoint: OpenAIEndpoint | None = None,
        profile: Profile | None = None,
        routing_headers: Sequence[str] | None = DEFAULT_ROUTING_HEADERS,
        routing_user: bool = True,
    ) -> None:
        if reasoning_field is not None and reasoning_field not in _REASONING_FIELDS:
            raise UserError(f"reasoning_field must be one of {', '.join(_REASONING_FIELDS)}; got {reasoning_field!r}")
        self.endpoint = endpoint or OpenAIEndpoint(
            base_url=base_url, api_key=api_key, model=model, timeout=timeout, idle_timeout=idle_timeout,
            connect_timeout=connect_timeout, headers=headers, client=client, routing_headers=routing_headers,
            routing_user=routing_user,
        )  # fmt: skip
        self._wire = EndpointProfile(profile or detect_profile(str(self.endpoint.client.base_url)))
        self.reasoning_field: ReasoningField = reasoning_field or self._wire.rules.reasoning_field
        self._window_said = False  # the warning that /v1/models states no window was given

    @property
    def profile(self) -> Profile:
        return self._wire.name

    @property
    def model(self) -> str:  # type: ignore[override]
        return self.endpoint.model

    @property
    def wire_reasoning_field(self) -> ReasoningField:
        """The name(s) the next request sends past reasoning under: :attr:`reasoning_field`, or
        ``"reasoning"`` where it is ``"both"`` and the endpoint refused both."""
        if self.reasoning_field == "both" and self.endpoint.refuses_both_reasoning_fields:
            return "reasoning"
        return self.reasoning_field

    async def model_name(self) -> str:
        return await self.endpoint.model_name()

    async def context_window(self) -> int | None:
        """The served window in tokens (:meth:`OpenAIEndpoint.window`: a limit a server stated,
        else the ``max_model_len`` / ``context_length`` of the model's ``/v1/models`` entry, asked
        once whether or not the model was given, else :mod:`kimik3._models`' figure for the id);
        None when nothing says. Where ``/v1/models`` fails (404, 501, an HTML page) or states no
        window for the model, a warning says so once and what the window is taken as; where it
        cannot be reached, or does not answer within :data:`MODELS_TIMEOUT` seconds, the window is
        what else is known (logged at INFO: the first request says the same, typed).

        Raises:
            APIConnectionError: the endpoint cannot be reached and the model was not given.
        """
        model = await self.model_name()
        try:
            with anyio.fail_after(MODELS_TIMEOUT):
                window = await self.endpoint.window(model)
        except (APIConnectionError, TimeoutError) as e:
            window = self.endpoint.known_window(model)
            log.info("kimik3: GET /models did not answer (%s); the context window is %s",
                     str(e) or f"nothing in {MODELS_TIMEOUT:g} s", _taken_as(window))
            return window
        if not self._window_said and self.endpoint.listed_window(model) is None:
            self._window_said = True
            why = (f"GET /models failed ({self.endpoint.models_unavailable})" if self.endpoint.models_unavailable
                   else f"/models states no window for {model!r}")
            log.warning("kimik3: %s; the context window is %s", why, _taken_as(window))
        return window

    async def aclose(self) -> None:
        await self.endpoint.aclose()

    def chat_messages(self, messages: Sequence[Message], field: ReasoningField) -> list[dict[str, Any]]:
        """The messages as sent: OpenAI dicts, reasoning under ``field``, images prepared the way
        K3 sees them (``_media.upload_url``)."""
        out = []
        for msg in messages:
            d = dump_message(msg)  # reasoning under both names ("" for a tool-call turn without)
            if field != "both" and "reasoning" in d:
                d.pop("reasoning_content" if field == "reasoning" else "reasoning")
            if isinstance(msg.content, list) and any(isinstance(p, ImagePart) for p in msg.content):
                d["content"] = [self._upload_part(p) for p in d["content"]]
            out.append(d)
        return self._wire.messages(out)

    def _upload_part(self, part: dict[str, Any]) -> dict[str, Any]:
        """An image part as uploaded: prepared the way K3 sees images (see ``_media.upload_url``),
        unless the profile sends it as it is."""
        if part.get("type") != "image_url":
            return part
        url = part["image_url"]["url"]
        url = self._wire.image_url(url) or upload_url(url, allow_local_files=self.allow_local_files)
        return {**part, "image_url": {**part["image_url"], "url": url}}

    def chat_body(self, request: ChatRequest, model: str, field: ReasoningField | None = None) -> dict[str, Any]:
        """The chat-completions request for ``request`` (``openai``'s keyword arguments; reasoning
        under ``field``, default :attr:`wire_reasoning_field`)."""
        s = request.settings
        kwargs: dict[str, Any] = {
            "model": model,
            "messages": self.chat_messages(request.messages, field or self.wire_reasoning_field),
            "temperature": s.temperature,
            "top_p": s.top_p,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        extra_body: dict[str, Any] = {}
        if s.max_tokens is not None:
            kwargs["max_tokens"] = s.max_tokens
        if s.seed is not None:
            kwargs["seed"] = s.seed
        if request.tools:
            kwargs["tools"] = self._wire.tools([t.model_dump(mode="json", exclude_none=True) for t in request.tools])
        if request.tool_choice is not None:
            kwargs["tool_choice"] = request.tool_choice
        if request.response_format is not None:
            kwargs["response_format"] = request.response_format
        if request.thinking:
            kwargs["reasoning_effort"] = s.reasoning_effort
        else:  # thinking off via the chat template: its keyword is the profile's (docs/endpoints.md)
            extra_body["chat_template_kwargs"] = dict(self._wire.rules.thinking_off or {})
        extra_body.update(self._wire.cache_options(s.prompt_cache_lifetime))
        extra_body.update(s.extra)
        if extra_body:
            kwargs["extra_body"] = extra_body
        return self._wire.body(kwargs)

    async def chat_events(self, request: ChatRequest, model: str) -> AsyncGenerator[Event, None]:
        self._wire.check(request)  # what the profile's API cannot serve: refused before anything is sent
        field = self.wire_reasoning_field
        while True:
            received = False
            try:
                async for event in self.endpoint.events(self.endpoint.client.chat.completions,
                                                        self.chat_body(request, model, field), request.routing):
                    received = True
                    yield event
                return
            except BadRequestError as e:
                if received or field != "both" or _DUPLICATE_REASONING not in str(e):
                    raise
                log.warning("kimik3: the endpoint refuses reasoning under both field names (vLLM's Rust "
                            "frontend); sending it as 'reasoning' only from now on: %s", e)
                self.endpoint.refuses_both_reasoning_fields = True  # learned of the server, not configured
                field = "reasoning"


def _taken_as(window: int | None) -> str:
    """How a log line names the window taken when ``/v1/models`` did not state it."""
    return f"taken as {window:,} tokens" if window else "unknown until a request is refused as too long"
