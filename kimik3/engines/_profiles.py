"""Endpoint profiles: what :class:`~kimik3.engines.RemoteEngine` changes in a chat-completions
request for the server it talks to. Self-hosted engines take what Moonshot's K3 contract (the
Vendor Verifier's) allows; Moonshot's hosted API refuses some of it and fixes the rest. One
client, one request type, the profile decides the wire (the table: ``docs/endpoints.md``).

- ``"vllm"`` (self-hosted vLLM; the default for local and private hosts), ``"sglang"``
  (self-hosted SGLang: the same rules): the request as the contract writes it.
- ``"openai"`` (any other OpenAI-compatible host: a relay, a gateway; the default for public
  hosts that are not Moonshot's): as ``"vllm"``, and thinking off also as
  ``chat_template_kwargs.enable_thinking`` (relays toggle K3's thinking by that name,
  models.dev #4090).
- ``"moonshot"`` (Moonshot's API ``api.moonshot.ai`` / ``api.moonshot.cn`` and the Kimi Code API
  ``api.kimi.com``; chosen for those hosts): empty ``content`` omitted, empty messages left out,
  tool schemas rewritten (:mod:`kimik3.engines._schemas`), the fixed sampling fields not sent,
  images only inline, ``max_completion_tokens``, reasoning as ``reasoning_content``; a request
  the API cannot serve (thinking off, a named ``tool_choice``) refused before it is sent.
"""

from __future__ import annotations

import ipaddress
import logging
from dataclasses import dataclass
from typing import Any, Literal

from .._defaults import AGENTIC_SAMPLING, SINGLE_STEP_SAMPLING
from .._exceptions import MediaError, UserError
from .._models import KIMI_CODE_HOSTS, MOONSHOT_HOSTS, host_of
from ..types import ChatRequest, tool_choice_directive
from ._schemas import moonshot_parameters

__all__ = ["PROFILES", "EndpointProfile", "Profile", "ProfileRules", "detect_profile", "no_cache_lifetime"]

log = logging.getLogger("kimik3.engines.remote")

Profile = Literal["vllm", "sglang", "openai", "moonshot"]
"""The name of an endpoint profile (the module's docstring)."""

_FIXED_SAMPLING = ("temperature", "top_p", "n", "presence_penalty", "frequency_penalty")
"""Fields Moonshot's K3 quickstart says to omit: the API samples K3 at fixed values."""


@dataclass(frozen=True)
class ProfileRules:
    """What one profile changes (each field one row of ``docs/endpoints.md``'s table).

    Attributes:
        name: the profile.
        omit_empty_content: an assistant message with tool calls and empty content, and a
            dynamic-tools system message, go without ``content`` (else with ``""``, as the
            Vendor Verifier's self-hosted contract writes them).
        drop_empty_messages: an assistant message with neither content nor tool calls (a turn
            of reasoning only) and a system message with neither content nor tools are left out
            (Moonshot: "the message at position N with role 'assistant' must not be empty").
        moonshot_schemas: tool schemas rewritten as Moonshot's API takes them.
        fixed_sampling: temperature, top_p, n and the penalties are not sent (a value other than
            K3's card defaults is named in a warning, once).
        inline_images: images only as data URLs (or Moonshot's ``ms://`` file ids): an http(s)
            image URL is refused before the request.
        thinking_off: the ``chat_template_kwargs`` that turn thinking off (None: the API cannot,
            and ``reasoning_effort="none"`` is refused before the request).
        max_tokens_field: the name the completion budget goes under.
        reasoning_field: the default name(s) past reasoning goes under.
        named_tool_choice_in_extra: a named ``tool_choice`` smuggled in ``settings.extra`` is
            passed on (False: refused, with kimik3's advice).
        prompt_cache_options: ``ModelSettings.prompt_cache_lifetime`` is sent as
            ``prompt_cache_options: {"ttl": "5m" | "1h"}`` (Moonshot's K3.1 cache billing,
            2026-10-23; the two values and the 5-minute default when omitted as Moonshot's forum
            states them, https://forum.moonshot.ai/t/context-caching-upgrade-5-min-1-hour-ttl-options/613,
            read 2026-12-02; the ``ttl`` key name is unverified: no source seen spells the object's
            key, so it is written as OpenAI's ``prompt_cache_options`` writes it). False:
            the server keeps its prefix cache as it likes (vLLM, SGLang: as long as memory
            allows), and a lifetime is refused before the request.
    """

    name: Profile
    omit_empty_content: bool = False
    drop_empty_messages: bool = False
    moonshot_schemas: bool = False
    fixed_sampling: bool = False
    inline_images: bool = False
    thinking_off: dict[str, Any] | None = None
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    reasoning_field: Literal["both", "reasoning_content"] = "both"
    named_tool_choice_in_extra: bool = True
    prompt_cache_options: bool = False


_SELF_HOSTED_OFF = {"thinking": False}  # K3's chat template (docs/k3-format.md § Request parameters)

PROFILES: dict[Profile, ProfileRules] = {
    "vllm": ProfileRules("vllm", thinking_off=_SELF_HOSTED_OFF),
    "sglang": ProfileRules("sglang", thinking_off=_SELF_HOSTED_OFF),
    "openai": ProfileRules("openai", thinking_off={"thinking": False, "enable_thinking": False}),
    "moonshot": ProfileRules(
        "moonshot", omit_empty_content=True, drop_empty_messages=True, moonshot_schemas=True, fixed_sampling=True,
        inline_images=True, thinking_off=None, max_tokens_field="max_completion_tokens",
        reasoning_field="reasoning_content", named_tool_choice_in_extra=False, prompt_cache_options=True,
    ),
}  # fmt: skip
"""Every profile's rules, by name."""


def detect_profile(base_url: str | None) -> Profile:
    """The profile for an endpoint: ``"moonshot"`` for Moonshot's hosts (:mod:`kimik3._models`),
    ``"vllm"`` for a loopback, private or single-label host (a machine of one's own), else
    ``"openai"`` (a third-party host)."""
    host = host_of(base_url)
    if host in MOONSHOT_HOSTS or host in KIMI_CODE_HOSTS:
        return "moonshot"
    if not host or "." not in host or host.endswith((".local", ".internal", ".lan", ".localhost")):
        return "vllm"
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return "openai"
    return "vllm" if address.is_private or address.is_loopback or address.is_link_local else "openai"


def no_cache_lifetime(where: str, lifetime: str) -> str:
    """The refusal of ``prompt_cache_lifetime=lifetime`` by an engine with no such option."""
    return (f"ModelSettings.prompt_cache_lifetime={lifetime!r} cannot be sent to {where}: only Moonshot's "
            "hosted API (the 'moonshot' profile) takes a prompt cache lifetime; a self-hosted engine keeps "
            "its prefix cache as long as its memory allows. Leave prompt_cache_lifetime unset there")


def _empty(content: Any) -> bool:
    """No visible content: None, blank text, or only blank text parts (kimi-cli's test)."""
    if content is None:
        return True
    if isinstance(content, str):
        return not content.strip()
    if isinstance(content, list):
        return all(isinstance(p, dict) and p.get("type") == "text" and not str(p.get("text") or "").strip()
                   for p in content)
    return False


class EndpointProfile:
    """A profile's rules applied to one engine's requests; its warnings are said once.

    Args:
        name: the profile (:data:`Profile`).

    Raises:
        UserError: an unknown profile name.
    """

    def __init__(self, name: Profile) -> None:
        if name not in PROFILES:
            raise UserError(f"profile must be one of {', '.join(PROFILES)}; got {name!r}")
        self.rules = PROFILES[name]
        self._said: set[str] = set()

    @property
    def name(self) -> Profile:
        return self.rules.name

    def _warn_once(self, key: str, text: str) -> None:
        if key not in self._said:
            self._said.add(key)
            log.warning("kimik3: %s", text)

    def check(self, request: ChatRequest) -> None:
        """Refuse, before anything is sent, a request this profile's API cannot serve.

        Raises:
            UserError: ``reasoning_effort="none"`` where the API always thinks (Moonshot's: K3
                reasons at low / high / max, platform.kimi.ai "Reasoning Effort").
            MessageError: a named ``tool_choice`` in ``settings.extra`` (K3 has no directive for
                it: declare only that tool and use ``"required"``).
            UserError: a ``prompt_cache_lifetime`` where the API has no such option.
        """
        lifetime = request.settings.prompt_cache_lifetime
        if lifetime is not None and not self.rules.prompt_cache_options:
            raise UserError(no_cache_lifetime(f"a {self.name!r}-profile endpoint", lifetime))
        if not request.thinking and self.rules.thinking_off is None:
            raise UserError(
                "Moonshot's API always runs K3 with thinking on (reasoning_effort low, high or max); "
                "reasoning_effort='none' cannot be sent there: use 'low', or a self-hosted endpoint"
            )
        if not self.rules.named_tool_choice_in_extra and "tool_choice" in request.settings.extra:
            tool_choice_directive(request.settings.extra["tool_choice"])

    def messages(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The dumped messages as this profile sends them (dicts replaced, never mutated)."""
        rules = self.rules
        if not (rules.omit_empty_content or rules.drop_empty_messages or rules.moonshot_schemas):
            return messages
        out = []
        for m in messages:
            role = m.get("role")
            has_tools = bool(m.get("tool_calls") if role == "assistant" else m.get("tools"))
            if role in ("assistant", "system") and _empty(m.get("content")):
                if not has_tools and rules.drop_empty_messages:
                    continue  # nothing in it for the model; the API refuses it
                if has_tools and rules.omit_empty_content and "content" in m:
                    m = {k: v for k, v in m.items() if k != "content"}
            if role == "system" and m.get("tools") and rules.moonshot_schemas:
                m = {**m, "tools": self.tools(m["tools"])}
            out.append(m)
        return out

    def tools(self, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Tool declarations as this profile sends them (schemas rewritten for Moonshot's API).

        Raises:
            InvalidRequestError: a schema Moonshot's API cannot take, naming the tool.
        """
        if not self.rules.moonshot_schemas:
            return tools
        out = []
        for t in tools:
            function = t.get("function") or {}
            parameters = function.get("parameters")
            if isinstance(parameters, dict):
                name = str(function.get("name", "?"))
                t = {**t, "function": {**function, "parameters": moonshot_parameters(name, parameters)}}
            out.append(t)
        return out

    def image_url(self, url: str) -> str | None:
        """``url`` unchanged when this profile sends it as it is (None: kimik3 prepares it).

        Raises:
            MediaError: an http(s) image URL where the API takes only inline images.
        """
        if not self.rules.inline_images:
            return None
        if url.startswith("ms://"):
            return url  # a file uploaded to Moonshot's files API
        if url.startswith(("http://", "https://")):
            raise MediaError(
                f"Moonshot's API takes images as base64 data URLs or ms:// file ids, not http(s) URLs "
                f"({url[:60]!r}): download the image and send its bytes as a data: URL"
            )
        return None

    def cache_options(self, lifetime: str | None) -> dict[str, Any]:
        """The request body's ``prompt_cache_options`` for ``lifetime`` (empty: none to send)."""
        if lifetime is None or not self.rules.prompt_cache_options:
            return {}
        return {"prompt_cache_options": {"ttl": lifetime}}

    def body(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """The request's keyword arguments as this profile sends them (a new dict)."""
        rules = self.rules
        kwargs = dict(kwargs)
        if rules.fixed_sampling:
            extra = dict(kwargs.get("extra_body") or {})
            dropped = {k: kwargs.pop(k) for k in _FIXED_SAMPLING if k in kwargs}
            dropped.update({k: extra.pop(k) for k in _FIXED_SAMPLING if k in extra})
            if "extra_body" in kwargs:
                kwargs["extra_body"] = extra
                if not extra:
                    del kwargs["extra_body"]
            card = {"temperature": {SINGLE_STEP_SAMPLING.temperature, AGENTIC_SAMPLING.temperature},
                    "top_p": {SINGLE_STEP_SAMPLING.top_p, AGENTIC_SAMPLING.top_p}}  # fmt: skip
            asked = {k: v for k, v in dropped.items() if v is not None and v not in card.get(k, ())}
            if asked:
                named = ", ".join(f"{k}={v!r}" for k, v in sorted(asked.items()))
                self._warn_once("sampling:" + ",".join(sorted(asked)),
                                f"Moonshot's API samples K3 at fixed values; {named} is not sent")
        if rules.max_tokens_field != "max_tokens" and "max_tokens" in kwargs:
            kwargs[rules.max_tokens_field] = kwargs.pop("max_tokens")
        return kwargs
