"""Pixels: mode fixes, the BICUBIC resize and transparency over K3's chessboard (docs/k3-format.md § Pixels).

Steps 4-6 of :func:`~kimik3.media.prepare_image`'s pipeline (see :mod:`kimik3.media._image`);
:func:`to_rgb` is the entry point. The blend over the chessboard is
Pillow's rounded integer blend, within one level of the reference's truncated float32 one
(:func:`_composite` states the tolerance).
"""

from __future__ import annotations

import functools

from PIL import Image, ImageMath

from .._exceptions import MediaDecodeError
from ._config import MediaConfig, TransparentBgConfig

__all__ = ["to_rgb"]

_SIXTEEN_BIT_MODES = frozenset({"I;16", "I;16L", "I;16B", "I;16N", "I"})


def _convert(im: Image.Image, mode: str) -> Image.Image:
    try:
        return im.convert(mode)
    except (ValueError, OSError) as e:
        raise MediaDecodeError(f"cannot convert image mode {im.mode} to {mode}: {e}") from e


def _as_rgba(im: Image.Image) -> Image.Image:
    return im if im.mode == "RGBA" else _convert(im, "RGBA")


def _from_sixteen_bit(im: Image.Image) -> Image.Image:
    """16-bit grayscale ("I;16*", "I") -> "L" with ``round(v / 257)`` (clipped to 0..255).

    A ``transparency`` value becomes an alpha band ("LA"). Pillow's own conversion clips every
    value above 255 to white (docs/k3-format.md § Pixels).
    """
    wide = im if im.mode == "I" else _convert(im, "I")
    gray = wide.point(lambda v: v / 257 + 0.5).convert("L")  # int() truncates: round half up
    key = im.info.get("transparency")
    if isinstance(key, int):
        alpha = ImageMath.lambda_eval(lambda a: a["convert"]((a["x"] != key) * 255, "L"), x=wide)
        return Image.merge("LA", (gray, alpha))
    return gray


def _resize(im: Image.Image, size: tuple[int, int]) -> Image.Image:
    if im.size == size:
        return im
    try:
        return im.resize(size, Image.Resampling.BICUBIC)
    except (ValueError, OSError) as e:
        raise MediaDecodeError(f"cannot resize image mode {im.mode}: {e}") from e


@functools.lru_cache(maxsize=4)
def _board_strip(width: int, square: int, even: int, odd: int) -> Image.Image:
    """One period (``2 * square`` rows) of the chessboard, ``width`` wide, RGB. Shared: do not modify."""
    reps = width // (2 * square) + 2
    e, o = bytes([even]) * square, bytes([odd]) * square
    band = ((e + o) * reps)[:width] * square + ((o + e) * reps)[:width] * square
    gray = Image.frombytes("L", (width, 2 * square), band)
    return Image.merge("RGB", (gray, gray, gray))


def _board(width: int, height: int, bg: TransparentBgConfig) -> Image.Image:
    """The background as a new RGB image: flat, or the chessboard anchored at (0, 0)."""
    even, odd = bg.background_values()
    if even == odd:
        return Image.new("RGB", (width, height), (even, even, even))
    square = bg.chessboard_square_size
    strip = _board_strip(width, square, even, odd)
    out = Image.new("RGB", (width, height))
    for y in range(0, height, 2 * square):  # paste clips the last strip at the bottom edge
        out.paste(strip, (0, y))
    return out


def _composite(rgba: Image.Image, bg: TransparentBgConfig) -> Image.Image:
    """Blend an RGBA image over the background (docs/k3-format.md § Pixels), returning RGB.

    Pillow's integer blend (``Image.paste`` with the alpha band as mask), one pass in C:
    ``out = (a*c + (255 - a)*board + 127) // 255`` per channel, ``a`` = alpha 0..255, i.e. the
    exact blend rounded to nearest. The reference (``media_utils.fill_transparent_bg_with``)
    computes ``a/255*c + (1 - a/255)*board`` in float32 and truncates. Tolerance, tested on the
    full table and on real images (tests/media/test_image_blend.py): opaque (alpha 255) and
    fully transparent (alpha 0) pixels are identical; a partly transparent pixel's channel is
    the reference's value or one more, never less, never more (max abs diff 1; about half of
    the partly transparent channels differ). The reference's exact float32 table costs a
    65,536-entry lookup per channel, about one more image decode; this costs about a fifth of
    one (bench/media.py).
    """
    alpha = rgba.getchannel("A")
    if alpha.getextrema()[0] == 255:  # fully opaque: the RGB conversion, exactly
        return rgba.convert("RGB")
    out = _board(rgba.width, rgba.height, bg)
    out.paste(rgba, None, alpha)  # RGBA source into RGB is Pillow's own blend; no conversion
    return out


def to_rgb(im: Image.Image, target: tuple[int, int], config: MediaConfig) -> Image.Image:
    """Mode fixes, resize, transparency and RGB conversion (steps 4-6 of :mod:`kimik3.media._image`)."""
    if im.mode in _SIXTEEN_BIT_MODES:
        im = _from_sixteen_bit(im)
    elif im.mode in ("PA", "RGBa"):
        # PA: Pillow would interpolate palette indices; RGBa: un-premultiply.
        im = _convert(im, "RGBA")
    elif im.mode == "La":
        im = _convert(im, "LA")
    bg = config.transparent_bg_config
    if bg is None or not im.has_transparency_data:
        im = _resize(im, target)
        return im if im.mode == "RGB" else _convert(im, "RGB")
    if config.transparent_bg_fill_stage == "before_resize":
        return _resize(_composite(_as_rgba(im), bg), target)
    return _composite(_as_rgba(_resize(im, target)), bg)
