"""Images the way K3 sees them (docs/k3-format.md § Image size and § Pixels).

Pipeline of :func:`prepare_image`, in order:

1. open (path, bytes, binary file, PIL image or ``data:`` URL) and read the header only;
   refuse decompression bombs with :class:`~kimik3.ImageTooLargeError` before any pixel is
   decoded; animated files give their first frame (Pillow opens on frame 0);
2. apply the EXIF orientation (kimik3's choice, switchable; no reference does it);
3. NaViT size from the oriented size (:func:`navit_size`);
4. mode fixes the reference lacks: 16-bit grayscale is scaled to 8 bits (``round(v / 257)``)
   instead of clipping to white; "PA" and premultiplied modes become RGBA first;
5. Pillow BICUBIC resize in the image's own mode, exactly like the reference (Pillow itself
   resizes RGBA/LA premultiplied and P/1 with NEAREST);
6. transparency (an alpha band, palette alpha or ``transparency`` in ``info``, so also an RGB
   or L image with a transparent colour key, which the reference's code skips for RGB): blend
   over the background *after* the resize with the reference's float32 arithmetic, truncated
   (``out = a*rgb + (1-a)*board``, ``a = alpha/255``), bit-exact via a precomputed table;
   otherwise plain RGB conversion (CMYK and friends without colour management, as Pillow
   converts them).

The server then pads to multiples of 28 with black, normalises and patchifies; the client does
not. The resize is not idempotent (docs/k3-format.md § Image size): a server that receives ``size`` may shrink
it by a few more pixels, so :attr:`PreparedImage.token_count` counts what the server will charge
for the image it receives, ``image_token_count(*size)``.
"""

from __future__ import annotations

import base64
import binascii
import functools
import io
import math
import os
import struct
import urllib.parse
import zlib
from array import array
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO, TypeAlias

from PIL import ExifTags, Image, ImageMath, UnidentifiedImageError

from .._exceptions import ImageTooLargeError, MediaDecodeError, MediaError
from ._config import K3_MEDIA_CONFIG, MediaConfig, TransparentBgConfig

__all__ = [
    "ImageSource",
    "MEDIA_BEGIN",
    "MEDIA_CONTENT",
    "MEDIA_END",
    "MEDIA_PAD",
    "PreparedImage",
    "decode_data_url",
    "image_prompt",
    "image_token_count",
    "navit_fixed_point",
    "navit_size",
    "prepare_image",
]

MEDIA_BEGIN = "<|media_begin|>"
MEDIA_CONTENT = "<|media_content|>"
MEDIA_PAD = "<|media_pad|>"
MEDIA_END = "<|media_end|>"

ImageSource: TypeAlias = "str | os.PathLike[str] | bytes | bytearray | memoryview | IO[bytes] | Image.Image"
"""What :func:`prepare_image` accepts: a path, a ``data:`` URL (str), encoded bytes, a binary file
object (read from its current position, not closed), or a PIL image (not modified)."""

# What Pillow raises on corrupt data while opening or decoding.
_DECODE_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    SyntaxError,
    ValueError,
    EOFError,
    IndexError,
    struct.error,
    zlib.error,
)

# EXIF Orientation -> the transpose that undoes it (same table as PIL.ImageOps.exif_transpose).
_ORIENTATION_FIX = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}

_OPEN_ERRORS: tuple[type[BaseException], ...] = (UnidentifiedImageError, *_DECODE_ERRORS)
_EXIF_ERRORS: tuple[type[BaseException], ...] = (*_DECODE_ERRORS, KeyError, TypeError)

_SIXTEEN_BIT_MODES = frozenset({"I;16", "I;16L", "I;16B", "I;16N", "I"})


# -- sizes (no pixels) -----------------------------------------------------------------------


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


def _target_size(width: int, height: int, config: MediaConfig) -> tuple[int, int]:
    if config.resize_to_fixed_point:
        return navit_fixed_point(width, height, config)
    return navit_size(width, height, config)


# -- the result ------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class PreparedImage:
    """An image resized and composited the way K3 sees it.

    Attributes:
        image: the processed RGB PIL image, ``image.size == size`` (not padded).
        original_size: ``(width, height)`` of the source after EXIF orientation, in pixels.
        size: ``(width, height)`` sent to the server, in pixels.
        token_count: tokens the server charges for it, ``image_token_count(*size)``.
        orientation: the EXIF orientation that was applied (1 = none).
        source_mode: the Pillow mode of the decoded source (e.g. "RGBA", "P", "I;16").
    """

    image: Image.Image
    original_size: tuple[int, int]
    size: tuple[int, int]
    token_count: int
    orientation: int = 1
    source_mode: str = "RGB"
    _png: dict[int, bytes] = field(default_factory=dict, init=False, repr=False)

    @property
    def width(self) -> int:
        """Width sent, in pixels."""
        return self.size[0]

    @property
    def height(self) -> int:
        """Height sent, in pixels."""
        return self.size[1]

    @property
    def prompt(self) -> str:
        """K3 prompt text for this image (:func:`image_prompt` of ``size`` and ``token_count``)."""
        return image_prompt(self.size[0], self.size[1], self.token_count)

    def png_bytes(self, compress_level: int = 1) -> bytes:
        """The image as PNG (lossless, no metadata chunks); cached per ``compress_level``.

        Args:
            compress_level: zlib level 0-9. The default 1 is several times faster than Pillow's
                6 for photos, for files about 10-20 % larger.
        """
        cached = self._png.get(compress_level)
        if cached is None:
            buf = io.BytesIO()
            self.image.save(buf, "PNG", compress_level=compress_level, icc_profile=None)
            cached = self._png[compress_level] = buf.getvalue()
        return cached

    def data_url(self, compress_level: int = 1) -> str:
        """``data:image/png;base64,...`` of :meth:`png_bytes` (for ``image_url`` content parts)."""
        return "data:image/png;base64," + base64.b64encode(self.png_bytes(compress_level)).decode("ascii")


# -- opening ---------------------------------------------------------------------------------


def decode_data_url(url: str) -> tuple[str, bytes]:
    """Split a ``data:`` URL (RFC 2397) into its media type and payload bytes.

    Args:
        url: ``data:[<media type>][;base64],<data>``.

    Returns:
        ``(media_type, payload)``; the media type is "" when absent.

    Raises:
        MediaDecodeError: not a data URL, or bad base64.
    """
    if not url.startswith("data:"):
        raise MediaDecodeError("not a data: URL")
    header, sep, payload = url[5:].partition(",")
    if not sep:
        raise MediaDecodeError("malformed data: URL (no comma)")
    params = header.split(";")
    media_type = params[0]
    if "base64" in params[1:]:
        try:
            return media_type, base64.b64decode("".join(payload.split()), validate=True)
        except (binascii.Error, ValueError) as e:
            raise MediaDecodeError(f"bad base64 in data: URL: {e}") from e
    return media_type, urllib.parse.unquote_to_bytes(payload)


@contextmanager
def _opened(source: ImageSource) -> Iterator[tuple[Image.Image, bool]]:
    """Open ``source`` lazily (header only). Yields ``(image, owned)``; closes what it opened."""
    if isinstance(source, Image.Image):
        yield source, False
        return
    close_fp = True
    fp: IO[bytes]
    if isinstance(source, str) and source.startswith("data:"):
        fp = io.BytesIO(decode_data_url(source)[1])
    elif isinstance(source, (str, os.PathLike)):
        fp = open(source, "rb")  # noqa: SIM115 - closed below; FileNotFoundError propagates
    elif isinstance(source, (bytes, bytearray, memoryview)):
        fp = io.BytesIO(source)
    elif hasattr(source, "read"):
        fp, close_fp = source, False
    else:
        raise TypeError(f"cannot read an image from {type(source).__name__}")
    try:
        try:
            im = Image.open(fp)
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as e:
            # the warning is raised when warnings are errors (``-W error``): the same refusal
            raise ImageTooLargeError(str(e)) from e
        except _OPEN_ERRORS as e:
            raise MediaDecodeError(f"cannot identify image: {e}") from e
        # The image is not closed: after load() it no longer needs the file, and it may be
        # the very object handed back in the result.
        yield im, True
    finally:
        if close_fp:
            fp.close()


def _pixel_limit(config: MediaConfig) -> int | None:
    pillow = Image.MAX_IMAGE_PIXELS
    pillow_limit = None if pillow is None else 2 * int(pillow)
    if config.max_image_pixels is None:
        return pillow_limit
    if pillow_limit is None:
        return config.max_image_pixels
    return min(config.max_image_pixels, pillow_limit)


def _check_pixels(size: tuple[int, int], config: MediaConfig) -> None:
    limit = _pixel_limit(config)
    w, h = size
    if limit is not None and w * h > limit:
        raise ImageTooLargeError(
            f"image is {w}x{h} = {w * h:,} pixels, over the limit of {limit:,} (decompression bomb)"
        )


def _exif_orientation(im: Image.Image) -> int:
    try:
        value = im.getexif().get(ExifTags.Base.Orientation, 1)
    except _EXIF_ERRORS:  # broken EXIF never fails the image
        return 1
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def _load(im: Image.Image) -> None:
    try:
        im.load()
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as e:  # pragma: no cover - at open
        raise ImageTooLargeError(str(e)) from e
    except _DECODE_ERRORS as e:
        raise MediaDecodeError(f"cannot decode image: {e}") from e


# -- pixels ----------------------------------------------------------------------------------


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
    """Mode fixes, resize, transparency and RGB conversion (steps 4-6 of the module doc)."""
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


def _maybe_draft(im: Image.Image, target: tuple[int, int], swapped: bool) -> None:
    """JPEG DCT-domain downscale by 2, 4 or 8 when the target is at least that much smaller."""
    want = (target[1], target[0]) if swapped else target
    if im.width // want[0] >= 2 and im.height // want[1] >= 2:
        im.draft(im.mode, want)


def prepare_image(
    source: ImageSource,
    config: MediaConfig | None = None,
    *,
    apply_exif_orientation: bool | None = None,
) -> PreparedImage:
    """Decode, orient, resize and composite an image for K3 (docs/k3-format.md § Image size, § Pixels).

    Args:
        source: a path (str / PathLike), a ``data:`` URL, encoded bytes, a binary file object
            (read from its position, left open) or a PIL image (not modified; its current frame).
        config: K3 defaults when ``None``; see :class:`MediaConfig`.
        apply_exif_orientation: overrides ``config.apply_exif_orientation`` (default True):
            rotate/flip by the EXIF Orientation tag before sizing.

    Returns:
        A :class:`PreparedImage`: RGB pixels at ``size = navit_size(*original_size)`` (or its
        fixed point, see ``MediaConfig.resize_to_fixed_point``), ``token_count =
        image_token_count(*size)``.

    Raises:
        ImageTooLargeError: more pixels than ``config.max_image_pixels`` / Pillow's
            decompression-bomb limit (178,956,970 by default), read from the header before any
            pixel is decoded.
        MediaDecodeError: unreadable, truncated or corrupt data, a bad data URL, or a mode that
            cannot become RGB.
        FileNotFoundError: a path that does not exist (other ``OSError`` of opening the path
            propagate too).
        TypeError: an unsupported source type.
    """
    cfg = config or K3_MEDIA_CONFIG
    use_exif = cfg.apply_exif_orientation if apply_exif_orientation is None else apply_exif_orientation
    with _opened(source) as (im, owned):
        _check_pixels(im.size, cfg)
        source_mode = im.mode
        header_orientation = _exif_orientation(im) if use_exif else 1
        draft = cfg.jpeg_draft and owned and im.format == "JPEG"
        orientation = apply = header_orientation  # JPEG (the draft path): read before decoding
        stored_w, stored_h = im.size
        if draft:
            target = _target_size(*((stored_h, stored_w) if apply >= 5 else (stored_w, stored_h)), cfg)
            _maybe_draft(im, target, apply >= 5)
        _load(im)
        if use_exif and not draft:
            # After decoding: PNG's eXIf may follow the image data, and Pillow applies some
            # orientations itself while loading (TIFF under Pillow >= 12 opens already rotated
            # and drops the tag), so the tag left now is what remains to apply: exactly
            # ImageOps.exif_transpose's result, never a second rotation.
            apply = _exif_orientation(im)
            orientation = apply if apply != 1 else header_orientation
        if draft:  # sizes of the source, not of the smaller image the draft decoded
            original = (stored_h, stored_w) if apply >= 5 else (stored_w, stored_h)
        else:  # sizes as decoded (already oriented by Pillow where it did so)
            original = (im.height, im.width) if apply >= 5 else im.size
        target = _target_size(*original, cfg)
        if apply != 1:
            im = im.transpose(_ORIENTATION_FIX[apply])
        try:
            out = _to_rgb(im, target, cfg)
        except _DECODE_ERRORS as e:
            if isinstance(e, MediaError):
                raise
            raise MediaDecodeError(f"cannot process image: {e}") from e
        if out is source:
            out = out.copy()  # never hand back the caller's own object
        out.info = {}
    return PreparedImage(
        image=out,
        original_size=original,
        size=out.size,
        token_count=image_token_count(out.width, out.height, cfg),
        orientation=orientation,
        source_mode=source_mode,
    )
