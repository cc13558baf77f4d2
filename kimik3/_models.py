"""What kimik3 knows of K3 model ids: the model an id names and its context window where a host
documents one, and the hosts of Moonshot's own APIs.

=============================  ============================  ==========  =============================
model id                       host                          window      source
=============================  ============================  ==========  =============================
``kimi-k3``                    Moonshot's API                1,048,576   K3 quickstart (1M context)
``kimi-k3.1-pro*``             any                           1,048,576   K3.1 Pro release (2026-10-23)
``k3``                         Kimi Code API                 1,048,576   Kimi Code's model list (plan
                                                                         dependent: 262,144 below
                                                                         Allegretto)
``k3-256k``                    Kimi Code API                 262,144     Kimi Code's model list
``kimi-k3``, ``k3[1m]``,       Kimi Code API                 262,144     measured, CLIProxyAPI #4418:
``kimi-k3[1m]``                                                          only the bare ``k3`` gets 1M
=============================  ============================  ==========  =============================

Moonshot's API is ``api.moonshot.ai`` / ``api.moonshot.cn`` (``/v1``), the Kimi Code API
``api.kimi.com`` (``/coding/v1``). A self-hosted engine's window is its own (``max_model_len``):
no id names one there. What a server says wins over this table: ``/v1/models`` (``max_model_len``,
``context_length``) and, once a request overflowed, the limit its error states
(:class:`~kimik3.ContextLengthExceededError`; a ``k3`` account below Allegretto is told 262,144).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

__all__ = ["KIMI_CODE_HOSTS", "MOONSHOT_HOSTS", "ModelInfo", "host_of", "model_info"]

MOONSHOT_HOSTS = frozenset({"api.moonshot.ai", "api.moonshot.cn"})
"""Moonshot's API (the platform at platform.kimi.ai / platform.moonshot.cn)."""

KIMI_CODE_HOSTS = frozenset({"api.kimi.com"})
"""The Kimi Code API (``https://api.kimi.com/coding/v1``, a Kimi Code membership's key)."""

_1M = 1_048_576
_256K = 262_144


@dataclass(frozen=True)
class ModelInfo:
    """A K3 model id kimik3 recognises.

    Attributes:
        id: the id as given.
        name: the model it names (``"Kimi K3"``, ``"Kimi K3.1 Pro"``, ...).
        window: its context window in tokens on that host (None: the host's own, e.g. a
            self-hosted ``max_model_len``).
    """

    id: str
    name: str
    window: int | None


def host_of(base_url: str | None) -> str:
    """The lower-case host name of ``base_url`` ("" when there is none)."""
    if not base_url:
        return ""
    try:
        return (urlsplit(str(base_url)).hostname or "").lower()
    except ValueError:
        return ""


def _api(base_url: str | None) -> Literal["kimi-code", "other"]:
    return "kimi-code" if host_of(base_url) in KIMI_CODE_HOSTS else "other"


def model_info(model: str | None, base_url: str | None = None) -> ModelInfo | None:
    """What kimik3 knows of ``model`` served at ``base_url`` (see the module's table), or None
    for an id it does not recognise (a self-hosted ``moonshotai/Kimi-K3``, another model).

    Args:
        model: the model id (case-insensitive).
        base_url: the endpoint it is served at (the Kimi Code API names its windows differently).
    """
    key = (model or "").strip().lower()
    if not key:
        return None
    original = (model or "").strip()
    if key.startswith("kimi-k3.1-pro"):
        speed = " highspeed" if key.startswith("kimi-k3.1-pro-highspeed") else ""
        return ModelInfo(original, f"Kimi K3.1 Pro{speed}", _1M)
    if _api(base_url) == "kimi-code":
        if key == "k3":
            return ModelInfo(original, "Kimi K3", _1M)
        if key in ("k3-256k", "kimi-k3", "k3[1m]", "kimi-k3[1m]"):
            return ModelInfo(original, "Kimi K3", _256K)
        return None
    if key == "kimi-k3":
        return ModelInfo(original, "Kimi K3", _1M)
    return None
