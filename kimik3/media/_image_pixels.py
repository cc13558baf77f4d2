"""Pixels: mode fixes, the BICUBIC resize and transparency over K3's chessboard (docs/k3-format.md § Pixels).

Steps 4-6 of :func:`~kimik3.media.prepare_image`'s pipeline (see :mod:`kimik3.media._image`);
:func:`_to_rgb` is the entry point. The blend is the reference's float32 arithmetic, truncated,
made bit-exact by a precomputed table (:func:`_blend_table`) and applied on the cheapest path
the alpha channel allows (:func:`_composite`).
"""

from __future__ import annotations

import functools
from array import array

from PIL import Image, ImageMath

from .._exceptions import MediaDecodeError
from ._config import MediaConfig, TransparentBgConfig

__all__: list[str] = []

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


@functools.lru_cache(maxsize=8)
def _blend_table(board: int) -> list[int]:
    """``T[alpha * 256 + c] = uint8(float32(a*c + (1-a)*board))``, ``a = float32(alpha) / 255``.

    Exactly the reference's numpy float32 arithmetic (``media_utils.fill_transparent_bg_with``),
    evaluated once per background value: every operand is a float32 and each step is computed in
    double and rounded to float32 by ``array("f")``, which equals the float32 operation for
    + - * / (double has more than 2*24+2 bits). ``int`` truncates like ``astype(uint8)``.
    """
    a = array("f", [alpha / 255.0 for alpha in range(256)])
    one_minus_a = array("f", [1.0 - x for x in a])
    bg_term = array("f", [x * board for x in one_minus_a])
    prod = array("f", [x * c for x in a for c in range(256)])
    sums = array("f", [p + bg_term[i >> 8] for i, p in enumerate(prod)])
    return [int(s) for s in sums]  # shared: never modified


@functools.lru_cache(maxsize=4)
def _odd_square_mask(width: int, height: int, square: int) -> Image.Image:
    """Mode "1" mask, set where ``(x // square + y // square)`` is odd. Shared: do not modify."""
    reps = width // (2 * square) + 2
    row_even = ((b"\x00" * square + b"\xff" * square) * reps)[:width]
    row_odd = ((b"\xff" * square + b"\x00" * square) * reps)[:width]
    band = row_even * square + row_odd * square
    data = (band * (height // (2 * square) + 1))[: width * height]
    return Image.frombytes("1", (width, height), data, "raw", "1;8")


_CLEAR_LUT = [255] + [0] * 255  # alpha == 0
_STRIP_ROWS = 256  # rows composited per pass: keeps the intermediates small and cache-warm


def _lut16(index: Image.Image, table: list[int]) -> Image.Image:
    """Map an "I" image with values 0..65535 through a 65536-entry table to "L".

    Calls the core directly: ``Image.point`` would first rebuild the table in Python
    (``round`` on 65,536 entries) on every call. Falls back to the public method.
    """
    try:
        return index._new(index.im.point(table, "L"))
    except (AttributeError, TypeError):  # pragma: no cover - a Pillow without these internals
        return index.point(table, "L")


@functools.lru_cache(maxsize=2)
def _board_rgb(width: int, height: int, square: int, even: int, odd: int) -> Image.Image:
    """The background itself as an RGB image (chessboard or flat). Shared: do not modify."""
    if even == odd:
        return Image.new("RGB", (width, height), (even, even, even))
    reps = width // (2 * square) + 2
    e, o = bytes([even]) * square, bytes([odd]) * square
    band = ((e + o) * reps)[:width] * square + ((o + e) * reps)[:width] * square
    gray = Image.frombytes("L", (width, height), (band * (height // (2 * square) + 1))[: width * height])
    return Image.merge("RGB", (gray, gray, gray))


def _composite_binary(rgba: Image.Image, alpha: Image.Image, bg: TransparentBgConfig) -> Image.Image:
    """Alpha only 0 or 255: opaque pixels keep their colour, transparent ones show the board."""
    out = rgba.convert("RGB")
    even, odd = bg.background_values()
    board = _board_rgb(out.width, out.height, bg.chessboard_square_size, even, odd)
    out.paste(board, None, alpha.point(_CLEAR_LUT, "1"))
    return out


@functools.lru_cache(maxsize=4)
def _stacked_odd_mask(width: int, height: int, square: int) -> Image.Image:
    """:func:`_odd_square_mask` of ``width x height`` repeated three times vertically. Shared."""
    if height % (2 * square) == 0:
        return _odd_square_mask(width, 3 * height, square)
    one = _odd_square_mask(width, height, square)
    mask = Image.new("1", (width, 3 * height))
    for k in range(3):
        mask.paste(one, (0, k * height))
    return mask


def _composite_lut(
    rgba: Image.Image, alpha: Image.Image, t_even: list[int], t_odd: list[int] | None, square: int
) -> Image.Image:
    """Any alpha: every channel through the blend table, index ``alpha * 256 + c``.

    The three channels are stacked vertically in one "I" image (``width x 3*height``) built
    from interleaved ``c, alpha`` bytes read as little-endian 16 bit, so each table is applied
    once; the odd squares take the second table through a mode "1" mask.
    """
    w, h = rgba.size
    n = w * h
    a = alpha.tobytes()
    pairs = bytearray(6 * n)
    for k in range(3):
        base = 2 * k * n
        pairs[base : base + 2 * n : 2] = rgba.getchannel(k).tobytes()
        pairs[base + 1 : base + 2 * n : 2] = a
    index = Image.frombuffer("I;16", (w, 3 * h), pairs, "raw", "I;16", 0, 1).convert("I")
    planes = _lut16(index, t_even)
    if t_odd is not None:
        planes.paste(_lut16(index, t_odd), None, _stacked_odd_mask(w, h, square))
    return Image.merge("RGB", [planes.crop((0, k * h, w, (k + 1) * h)) for k in range(3)])


_PARTIAL_LUT = [0] + [255] * 254 + [0]  # 0 < alpha < 255
_NONZERO_LUT = [0] + [255] * 255
_NOT_OPAQUE_LUT = [255] * 255 + [0]  # alpha < 255
_TILE = 64  # side of the tiles the partial-alpha search works in (two 8x reductions)
_GATHER_MAX_FRACTION = 0.6  # flagged tiles covering more of the image than this: no gathering
_GATHER_WIDTH = 4096  # row length of the gathered index image


def _flagged_rects(alpha: Image.Image, lut: list[int]) -> list[tuple[int, int, int, int]]:
    """Boxes covering every pixel whose alpha ``lut`` maps to non-zero: runs of 64x64 tiles."""
    w, h = alpha.size
    # Averaging 8x8 boxes twice keeps any non-zero pixel non-zero (>= 255/64 rounds to >= 4).
    flags = alpha.point(lut).reduce(8).point(_NONZERO_LUT).reduce(8)
    fw, fh = flags.size
    data = flags.tobytes()
    rects = []
    for ty in range(fh):
        row = data[ty * fw : (ty + 1) * fw]
        tx = 0
        while tx < fw:
            if not row[tx]:
                tx += 1
                continue
            first = tx
            while tx < fw and row[tx]:
                tx += 1
            rects.append((first * _TILE, ty * _TILE, min(w, tx * _TILE), min(h, (ty + 1) * _TILE)))
    return rects


def _partial_rects(alpha: Image.Image) -> list[tuple[int, int, int, int]]:
    """Boxes covering every pixel with ``0 < alpha < 255``."""
    return _flagged_rects(alpha, _PARTIAL_LUT)


def _area(rects: list[tuple[int, int, int, int]]) -> int:
    return sum((x1 - x0) * (y1 - y0) for x0, y0, x1, y1 in rects)


def _composite_gather(
    out: Image.Image,
    rgba: Image.Image,
    rects: list[tuple[int, int, int, int]],
    tables: tuple[list[int], list[int] | None],
    odd_mask: Image.Image | None,
) -> Image.Image:
    """Put the table's result for the boxes ``rects`` of ``rgba`` into ``out`` (RGB, modified).

    The boxes' ``c, alpha`` pairs (three channels each) and odd-square flags are gathered into
    one index image, so each table is applied once, and the results are pasted back.
    """
    sizes = [(x1 - x0) * (y1 - y0) for x0, y0, x1, y1 in rects]
    total = 3 * sum(sizes)
    rows = -(-total // _GATHER_WIDTH)
    pairs = bytearray(2 * rows * _GATHER_WIDTH)
    flags = bytearray(rows * _GATHER_WIDTH) if odd_mask is not None else None
    offset = 0
    for box, n in zip(rects, sizes, strict=True):
        tile = rgba.crop(box)
        a = tile.getchannel(3).tobytes()
        odd = odd_mask.crop(box).tobytes("raw", "L") if odd_mask is not None else b""
        for k in range(3):
            base = 2 * (offset + k * n)
            pairs[base : base + 2 * n : 2] = tile.getchannel(k).tobytes()
            pairs[base + 1 : base + 2 * n : 2] = a
            if flags is not None:
                flags[offset + k * n : offset + (k + 1) * n] = odd
        offset += 3 * n
    shape = (_GATHER_WIDTH, rows)
    index = Image.frombuffer("I;16", shape, pairs, "raw", "I;16", 0, 1).convert("I")
    t_even, t_odd = tables
    result = _lut16(index, t_even)
    if t_odd is not None and flags is not None:
        result.paste(_lut16(index, t_odd), None, Image.frombytes("1", shape, bytes(flags), "raw", "1;8"))
    data = result.tobytes()
    offset = 0
    for (x0, y0, x1, y1), n in zip(rects, sizes, strict=True):
        rgb = bytearray(3 * n)
        for k in range(3):
            rgb[k::3] = data[offset + k * n : offset + (k + 1) * n]
        out.paste(Image.frombytes("RGB", (x1 - x0, y1 - y0), bytes(rgb)), (x0, y0))
        offset += 3 * n
    return out


def _composite(rgba: Image.Image, bg: TransparentBgConfig) -> Image.Image:
    """Blend an RGBA image over the background (docs/k3-format.md § Pixels), returning RGB.

    Exact float32-truncation semantics on every path (:func:`_blend_table` gives ``c`` for
    alpha 255 and the board value for alpha 0, so copying or filling those pixels is the same
    blend). The cheapest path is chosen from the alpha histogram and 64x64 tile flags:

    * fully opaque: the RGB conversion;
    * alpha only 0 or 255: the RGB conversion with the board pasted where alpha is 0;
    * non-opaque tiles cover at most 60 % of the image: RGB conversion, and the table for those
      tiles (gathered into one pass);
    * partly transparent tiles cover at most 60 %: the binary result, and the table for those;
    * otherwise the table for the whole image, in strips of 256 rows.
    """
    w, h = rgba.size
    alpha = rgba.getchannel("A")
    hist = alpha.histogram()
    if hist[255] == w * h:
        return rgba.convert("RGB")
    even, odd = bg.background_values()
    square = bg.chessboard_square_size
    checker = even != odd
    if hist[0] + hist[255] == w * h:
        return _composite_binary(rgba, alpha, bg)
    t_even = _blend_table(even)
    t_odd = _blend_table(odd) if checker else None
    odd_mask = _odd_square_mask(w, h, square) if checker else None
    limit = _GATHER_MAX_FRACTION * w * h
    rects = _flagged_rects(alpha, _NOT_OPAQUE_LUT)  # mostly opaque: copy, table the rest
    if _area(rects) <= limit:
        return _composite_gather(rgba.convert("RGB"), rgba, rects, (t_even, t_odd), odd_mask)
    rects = _partial_rects(alpha)  # copy or fill, table the partly transparent tiles
    if _area(rects) <= limit:
        return _composite_gather(_composite_binary(rgba, alpha, bg), rgba, rects, (t_even, t_odd), odd_mask)
    period = 2 * square  # strips start on a board row boundary
    rows = max(1, _STRIP_ROWS // period) * period
    if rows >= h:
        return _composite_lut(rgba, alpha, t_even, t_odd, square)
    out = Image.new("RGB", (w, h))
    for y0 in range(0, h, rows):
        y1 = min(h, y0 + rows)
        out.paste(_composite_lut(rgba.crop((0, y0, w, y1)), alpha.crop((0, y0, w, y1)), t_even, t_odd, square), (0, y0))
    return out


def _to_rgb(im: Image.Image, target: tuple[int, int], config: MediaConfig) -> Image.Image:
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
