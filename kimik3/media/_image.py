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
   over the background *after* the resize (``out = a*rgb + (1-a)*board``, ``a = alpha/255``),
   Pillow's integer blend rounded to nearest: within +0/+1 of the reference's truncated float32
   on partly transparent pixels, identical elsewhere (``_image_pixels._composite``);
   otherwise plain RGB conversion (CMYK and friends without colour management, as Pillow
   converts them).

The server then pads to multiples of 28 with black, normalises and patchifies; the client does
not. The resize is not idempotent (docs/k3-format.md § Image size): a server that receives ``size`` may shrink
it by a few more pixels, so :attr:`PreparedImage.token_count` counts what the server will charge
for the image it receives, ``image_token_count(*size)``.
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass, field

from PIL import Image

from .._exceptions import MediaDecodeError, MediaError
from ._config import K3_MEDIA_CONFIG, MediaConfig
from ._image_decode import (
    DECODE_ERRORS,
    ORIENTATION_FIX,
    ImageSource,
    check_pixels,
    exif_orientation,
    load_pixels,
    opened,
)
from ._image_pixels import to_rgb
from ._sizes import image_prompt, image_token_count, navit_fixed_point, navit_size

__all__ = ["PreparedImage", "prepare_image"]


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
    with opened(source) as (im, owned):
        check_pixels(im.size, cfg)
        source_mode = im.mode
        header_orientation = exif_orientation(im) if use_exif else 1
        draft = cfg.jpeg_draft and owned and im.format == "JPEG"
        orientation = apply = header_orientation  # JPEG (the draft path): read before decoding
        stored_w, stored_h = im.size
        if draft:
            target = _target_size(*((stored_h, stored_w) if apply >= 5 else (stored_w, stored_h)), cfg)
            _maybe_draft(im, target, apply >= 5)
        load_pixels(im)
        if use_exif and not draft:
            # After decoding: PNG's eXIf may follow the image data, and Pillow applies some
            # orientations itself while loading (TIFF under Pillow >= 12 opens already rotated
            # and drops the tag), so the tag left now is what remains to apply: exactly
            # ImageOps.exif_transpose's result, never a second rotation.
            apply = exif_orientation(im)
            orientation = apply if apply != 1 else header_orientation
        if draft:  # sizes of the source, not of the smaller image the draft decoded
            original = (stored_h, stored_w) if apply >= 5 else (stored_w, stored_h)
        else:  # sizes as decoded (already oriented by Pillow where it did so)
            original = (im.height, im.width) if apply >= 5 else im.size
        target = _target_size(*original, cfg)
        if apply != 1:
            im = im.transpose(ORIENTATION_FIX[apply])
        try:
            out = to_rgb(im, target, cfg)
        except DECODE_ERRORS as e:
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
