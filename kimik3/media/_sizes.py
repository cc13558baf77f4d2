"""Image sizes, token counts and the media prompt markers (docs/k3-format.md § Image size, § Pixels).

Pure arithmetic, no pixels: :func:`navit_size` (the resize target), :func:`navit_fixed_point`,
:func:`image_token_count` and :func:`image_prompt`. Used by :func:`~kimik3.media.prepare_image`
(:mod:`kimik3.media._image`) and by video chunking (:mod:`kimik3.media._video`).
"""

from __future__ import annotations

import math

from .._exceptions import MediaError
from ._config import K3_MEDIA_CONFIG, MediaConfig

__all__ = [
    "MEDIA_BEGIN",
    "MEDIA_CONTENT",
    "MEDIA_END",
    "MEDIA_PAD",
    "image_prompt",
    "image_token_count",
    "navit_fixed_point",
    "navit_size",
]

MEDIA_BEGIN = "<|media_begin|>"
MEDIA_CONTENT = "<|media_content|>"
MEDIA_PAD = "<|media_pad|>"
MEDIA_END = "<|media_end|>"


def navit_size(
    width: int, height: int, config: MediaConfig | None = None, *, patch_limit: int | None = None
) -> tuple[int, int]:
    """The NaViT resize target of a ``width x height`` image (docs/k3-format.md § Image size).

    Same float arithmetic as the checkpoint's ``navit_resize_image``: ``scale = min(1, s1, s2,
    s3)`` with ``s1 = sqrt(L / (max(1, w // 14) * max(1, h // 14)))`` and ``s2 = 7168 / w``,
    ``s3 = 7168 / h``; each side truncated, at least 1, at most 7168. Never upscales.

    Not idempotent: ``navit_size(*navit_size(w, h))`` can be a few pixels smaller (see
    :func:`navit_fixed_point`).

    Args:
        width, height: source size in pixels (after EXIF orientation).
        config: patch size, budget and side limit (K3 defaults when ``None``).
        patch_limit: patch budget ``L`` overriding ``config.in_patch_limit`` (video frames use
            their per-frame budget).

    Returns:
        ``(width, height)`` in pixels, before the black padding to multiples of 28.

    Raises:
        MediaError: a side smaller than 1.
    """
    cfg = config or K3_MEDIA_CONFIG
    if width < 1 or height < 1:
        raise MediaError(f"image size must be positive, got {width}x{height}")
    ps = cfg.patch_size
    limit = cfg.in_patch_limit if patch_limit is None else patch_limit
    side = cfg.patch_limit_on_one_side * ps
    s1 = math.sqrt(limit / (max(1.0, width // ps) * max(1.0, height // ps)))
    scale = min(1.0, s1, side / width, side / height)
    new_w = min(max(1, int(width * scale)), side)
    new_h = min(max(1, int(height * scale)), side)
    return new_w, new_h


def navit_fixed_point(width: int, height: int, config: MediaConfig | None = None) -> tuple[int, int]:
    """Iterate :func:`navit_size` until it no longer changes the size (docs/k3-format.md § Image size).

    An image of this size is left alone by a server that applies the NaViT resize again.

    Returns:
        ``(width, height)`` with ``navit_size(width, height) == (width, height)``.
    """
    size = navit_size(width, height, config)
    for _ in range(64):  # converges in a few steps: each non-final step shrinks a side
        nxt = navit_size(*size, config)
        if nxt == size:
            return size
        size = nxt
    return size  # pragma: no cover - not reached for positive sizes


def _grid_tokens(width: int, height: int, config: MediaConfig) -> int:
    """Tokens of an image already at its NaViT size: ``ceil(h/28) * ceil(w/28)`` (step 6)."""
    if config.fixed_output_tokens is not None:
        return config.fixed_output_tokens
    f = config.token_side
    return -(-width // f) * -(-height // f)


def image_token_count(width: int, height: int, config: MediaConfig | None = None) -> int:
    """Tokens K3 spends on an image the server receives at ``width x height`` (docs/k3-format.md § Image size).

    ``N = ceil(h'/28) * ceil(w'/28)`` with ``(w', h') = navit_size(width, height)``, or
    ``config.fixed_output_tokens`` when set. Worked values (K3): 1x1 -> 1, 224x224 -> 64,
    1920x1080 -> 2691, 4096x4096 -> 16641; the maximum is 16,830.

    Args:
        width, height: size in pixels of the image as sent.
        config: K3 defaults when ``None``.

    Raises:
        MediaError: a side smaller than 1.
    """
    cfg = config or K3_MEDIA_CONFIG
    return _grid_tokens(*navit_size(width, height, cfg), cfg)


def image_prompt(width: int, height: int, token_count: int) -> str:
    """K3's prompt text for one image (docs/k3-format.md § Pixels).

    ``<|media_begin|>image {W}x{H}<|media_content|>`` + ``token_count`` x ``<|media_pad|>`` +
    ``<|media_end|>``, where ``W x H`` is the size of the image the server receives.
    """
    return f"{MEDIA_BEGIN}image {width}x{height}{MEDIA_CONTENT}{MEDIA_PAD * token_count}{MEDIA_END}"
