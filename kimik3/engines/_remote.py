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

Raw mode (kimik3 encodes the prompt, the server only generates) is another engine over the same
endpoint: :class:`~kimik3.engines.RemoteCompletionsEngine`.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from .._exceptions import BadRequestError, UserError
from ..formats.k3._media import upload_url
from ..types import ChatRequest, ImagePart, Message, dump_message
from ._base import ChatEngine
from ._endpoint import OpenAIEndpoint
from ._http import Event

if TYPE_CHECKING:  # openai is imported by OpenAIEndpoint, at first use (start-up time)
    import openai

__all__ = ["ReasoningField", "RemoteEngine"]

log = logging.getLogger("kimik3.engines.remote")

ReasoningField = Literal["both", "reasoning", "reasoning_content"]
_REASONING_FIELDS = ("both", "reasoning", "reasoning_content")
_DUPLICATE_REASONING = "duplicate field `reasoning"  # serde's words in vllm-rs's 400 (either name first)


class RemoteEngine(ChatEngine):
    """A K3 chat engine over an OpenAI-compatible chat-completions endpoint.

    Args:
        base_url: the endpoint, e.g. ``"http://127.0.0.1:8000/v1"`` (default:
            ``$OPENAI_BASE_URL``).
        api_key: the key (default ``$OPENAI_API_KEY``, else ``"EMPTY"`` for servers without auth).
        model: the served model name (default: the first model ``/v1/models`` lists).
        timeout: seconds for a whole request, from sending it to the last byte of the answer
            (default 600): a total deadline, whatever the server trickles.
        idle_timeout: seconds the server may send nothing at all, headers or body, keep-alive
            comments included (default 300).
        connect_timeout: seconds for connecting (default 10).
        headers: extra HTTP headers.
        reasoning_field: the name(s) past assistant reasoning goes out under: ``"both"``
            (default: ``reasoning_content`` and ``reasoning``, read by every server kimik3 knows
            but vllm-rs, for which the engine sends ``"reasoning"`` once the server refused
            both), ``"reasoning"`` or ``"reasoning_content"``.
        client: a ready ``openai.AsyncOpenAI`` (then base_url, api_key, idle / connect timeouts
            and headers are ignored; ``timeout`` still bounds each request).
        endpoint: an :class:`~kimik3.engines.OpenAIEndpoint` to share with another engine (a
            :class:`~kimik3.engines.RemoteCompletionsEngine` over the same server); then the
            connection arguments above are ignored.

    Attributes:
        endpoint: the :class:`~kimik3.engines.OpenAIEndpoint` (client, served model, reader).

    Raises:
        UserError: an unknown ``reasoning_field``.
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
        reasoning_field: ReasoningField = "both",
        client: openai.AsyncOpenAI | None = None,
        endpoint: OpenAIEndpoint | None = None,
    ) -> None:
        if reasoning_field not in _REASONING_FIELDS:
            raise UserError(f"reasoning_field must be one of {', '.join(_REASONING_FIELDS)}; got {reasoning_field!r}")
        self.reasoning_field: ReasoningField = reasoning_field
        self.endpoint = endpoint or OpenAIEndpoint(
            base_url=base_url, api_key=api_key, model=model, timeout=timeout, idle_timeout=idle_timeout,
            connect_timeout=connect_timeout, headers=headers, client=client,
        )  # fmt: skip

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
                d["content"] = [_upload_part(p, self.allow_local_files) for p in d["content"]]
            out.append(d)
        return out

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
            kwargs["tools"] = [t.model_dump(mode="json", exclude_none=True) for t in request.tools]
        if request.tool_choice is not None:
            kwargs["tool_choice"] = request.tool_choice
        if request.response_format is not None:
            kwargs["response_format"] = request.response_format
        if request.thinking:
            kwargs["reasoning_effort"] = s.reasoning_effort
        else:  # self-hosted servers: thinking off via the chat template (docs/k3-format.md § Request parameters)
            extra_body["chat_template_kwargs"] = {"thinking": False}
        extra_body.update(s.extra)
        if extra_body:
            kwargs["extra_body"] = extra_body
        return kwargs

    async def chat_events(self, request: ChatRequest, model: str) -> AsyncGenerator[Event, None]:
        field = self.wire_reasoning_field
        while True:
            received = False
            try:
                async for event in self.endpoint.events(self.endpoint.client.chat.completions,
                                                        self.chat_body(request, model, field)):
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


def _upload_part(part: dict[str, Any], allow_local_files: bool) -> dict[str, Any]:
    """An image part as uploaded: prepared the way K3 sees images (see ``_media.upload_url``)."""
    if part.get("type") != "image_url":
        return part
    url = upload_url(part["image_url"]["url"], allow_local_files=allow_local_files)
    return {**part, "image_url": {**part["image_url"], "url": url}}
