"""Opening images: sources, ``data:`` URLs, decompression-bomb checks, EXIF orientation.

Steps 1-2 of :func:`~kimik3.media.prepare_image`'s pipeline (see :mod:`kimik3.media._image`):
open lazily (header only), refuse too many pixels with :class:`~kimik3.ImageTooLargeError`
before any pixel is decoded, read the EXIF orientation, decode with Pillow's errors turned into
:class:`~kimik3.MediaDecodeError`.
"""

from __future__ import annotations

import base64
import binascii
import io
import os
import struct
import urllib.parse
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, TypeAlias

from PIL import ExifTags, Image, UnidentifiedImageError

from .._exceptions import ImageTooLargeError, MediaDecodeError, MediaError
from .._files import NotRegularFileError, open_regular
from ._config import MediaConfig

__all__ = [
    "DECODE_ERRORS", "ORIENTATION_FIX", "ImageSource", "check_pixels", "decode_data_url", "exif_orientation",
    "load_pixels", "open_file", "opened",
]

ImageSource: TypeAlias = "str | os.PathLike[str] | bytes | bytearray | memoryview | IO[bytes] | Image.Image"
"""What :func:`prepare_image` accepts: a path, a ``data:`` URL (str), encoded bytes, a binary file
object (read from its current position, not closed), or a PIL image (not modified)."""

# What Pillow raises on corrupt data while opening or decoding.
DECODE_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    SyntaxError,
    ValueError,
    EOFError,
    IndexError,
    struct.error,
    zlib.error,
)

# EXIF Orientation -> the transpose that undoes it (same table as PIL.ImageOps.exif_transpose).
ORIENTATION_FIX = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}

_OPEN_ERRORS: tuple[type[BaseException], ...] = (UnidentifiedImageError, *DECODE_ERRORS)
_EXIF_ERRORS: tuple[type[BaseException], ...] = (*DECODE_ERRORS, KeyError, TypeError)


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


def open_file(path: str | os.PathLike[str]) -> IO[bytes]:
    """A media file opened for reading; a FIFO, device or directory is refused without blocking.

    Raises:
        MediaError: not a regular file.
        OSError: missing or unreadable.
    """
    try:
        return open_regular(path)
    except NotRegularFileError as e:
        raise MediaError(f"cannot read media from {e.strerror}: only regular files are read") from e


@contextmanager
def opened(source: ImageSource) -> Iterator[tuple[Image.Image, bool]]:
    """Open ``source`` lazily (header only). Yields ``(image, owned)``; closes what it opened."""
    if isinstance(source, Image.Image):
        yield source, False
        return
    close_fp = True
    fp: IO[bytes]
    if isinstance(source, str) and source.startswith("data:"):
        fp = io.BytesIO(decode_data_url(source)[1])
    elif isinstance(source, (str, os.PathLike)):
        fp = open_file(source)  # closed below; FileNotFoundError propagates
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


def check_pixels(size: tuple[int, int], config: MediaConfig) -> None:
    """Refuse an image of more pixels than ``config`` allows, before its pixels are decoded.

    Args:
        size: ``(width, height)`` in pixels, from the header.
        config: the media limits: the smaller of ``max_image_pixels`` and Pillow's decompression-bomb
            error limit (twice ``Image.MAX_IMAGE_PIXELS``) applies.

    Raises:
        ImageTooLargeError: ``width * height`` is over the limit (a decompression bomb).
    """
    limit = _pixel_limit(config)
    w, h = size
    if limit is not None and w * h > limit:
        raise ImageTooLargeError(
            f"image is {w}x{h} = {w * h:,} pixels, over the limit of {limit:,} (decompression bomb)"
        )


def exif_orientation(im: Image.Image) -> int:
    """The EXIF orientation tag of ``im`` (1-8, EXIF 2.32 section 4.6.5), 1 when absent or broken."""
    try:
        value = im.getexif().get(ExifTags.Base.Orientation, 1)
    except _EXIF_ERRORS:  # broken EXIF never fails the image
        return 1
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def load_pixels(im: Image.Image) -> None:
    """Decode ``im``'s pixels (``Image.load``), Pillow's errors as kimik3's.

    Raises:
        ImageTooLargeError: Pillow's decompression-bomb check refused it.
        MediaDecodeError: the data is truncated or not an image Pillow can decode (:data:`DECODE_ERRORS`).
    """
    try:
        im.load()
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as e:  # pragma: no cover - at open
        raise ImageTooLargeError(str(e)) from e
    except DECODE_ERRORS as e:
        raise MediaDecodeError(f"cannot decode image: {e}") from e

