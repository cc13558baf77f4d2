"""Independent reference arithmetic for the media tests (not imported from kimik3)."""

from __future__ import annotations

import functools
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

from PIL import Image

DATA = Path(__file__).resolve().parents[1] / "data" / "media"


def f32(x: float) -> float:
    """Round a Python float to the nearest float32 (IEEE round-to-nearest-even)."""
    return float(struct.unpack("<f", struct.pack("<f", x))[0])


@functools.cache
def blend(c: int, alpha: int, board: int) -> int:
    """The reference's numpy float32 blend of one channel, truncated like ``astype(uint8)``.

    ``a = float32(alpha) / 255``; ``out = a*c + (1 - a)*board``, every operation in float32.
    """
    a = f32(alpha / 255.0)
    return int(f32(f32(a * c) + f32(f32(1.0 - a) * board)))


@functools.cache
def rounded_blend(c: int, alpha: int, board: int) -> int:
    """kimik3's blend of one channel: the exact ``(alpha*c + (255-alpha)*board) / 255``, rounded.

    Integer arithmetic, independent of Pillow: ``(alpha*c + (255-alpha)*board + 127) // 255``.
    Within +0/+1 of :func:`blend` (the reference's float32 truncation).
    """
    return (alpha * c + (255 - alpha) * board + 127) // 255


def board(x: int, y: int, square: int = 8, white: int = 255, gray: int = 180) -> int:
    """K3 chessboard value at (x, y): gray where (x//8 + y//8) is odd, white square top-left."""
    return gray if (x // square + y // square) % 2 else white


def png_header_only(width: int, height: int) -> bytes:
    """A PNG whose IHDR claims ``width x height`` (8-bit RGB) and that has no image data."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IEND", b"")


def reference_composite(
    rgba: Image.Image, square: int = 8, white: int = 255, gray: int = 180, fn: Callable[[int, int, int], int] = blend
) -> list[tuple[int, int, int]]:
    """Every pixel of ``rgba`` blended over the chessboard, row-major, by ``fn`` (:func:`blend`)."""
    w, h = rgba.size
    raw = rgba.tobytes()
    out = []
    for y in range(h):
        for x in range(w):
            r, g, b, a = raw[4 * (y * w + x) : 4 * (y * w + x) + 4]
            bd = board(x, y, square, white, gray)
            out.append((fn(r, a, bd), fn(g, a, bd), fn(b, a, bd)))
    return out


def rounded_composite(
    rgba: Image.Image, square: int = 8, white: int = 255, gray: int = 180
) -> list[tuple[int, int, int]]:
    """:func:`reference_composite` with :func:`rounded_blend`: what kimik3 returns."""
    return reference_composite(rgba, square, white, gray, rounded_blend)
