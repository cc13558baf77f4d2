"""Three coordinate spaces of UI automation and the exact rounding between them.

- **model** pixels: the screenshot as the model sees it, after :func:`kimik3.media.prepare_image`'s
  NaViT resize (``model_size``, never larger than the screen);
- **screen** pixels: the screenshot as captured (``screen_size``), i.e. device pixels: a browser
  page rendered at ``device_scale_factor=2`` has twice as many screen pixels per side as CSS
  pixels;
- **input** units: what the backend's mouse takes: CSS pixels for a browser page, screen pixels
  for an X11 display (``device_scale`` screen pixels per input unit).

A pixel ``(x, y)`` is the unit square whose top-left corner is ``(x, y)``; its centre is
``(x + 0.5, y + 0.5)``. Mapping a pixel to a space of another resolution gives the pixel of that
space under its centre (``floor((x + 0.5) * scale)``), clamped into the image, so the mapping is
monotonic, exact for integer scales, and ``to_model(*to_screen(x, y)) == (x, y)`` for every model
pixel (the model image is never larger than the screen).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...media import K3_MEDIA_CONFIG, MediaConfig, image_token_count, navit_fixed_point, navit_size

__all__ = ["CoordinateSpace", "media_config_for_tokens", "model_size_for"]


def model_size_for(width: int, height: int, config: MediaConfig | None = None) -> tuple[int, int]:
    """Size of the image the model receives for a ``width x height`` screenshot.

    The same size :func:`kimik3.media.prepare_image` resizes to: :func:`~kimik3.media.navit_size`,
    or its fixed point when ``config.resize_to_fixed_point`` is set.

    Args:
        width, height: screenshot size in screen pixels.
        config: K3 defaults when ``None``.

    Returns:
        ``(width, height)`` in model pixels.

    Raises:
        MediaError: a side smaller than 1.
    """
    cfg = config or K3_MEDIA_CONFIG
    if cfg.resize_to_fixed_point:
        return navit_fixed_point(width, height, cfg)
    return navit_size(width, height, cfg)


def media_config_for_tokens(width: int, height: int, max_tokens: int, config: MediaConfig | None = None) -> MediaConfig:
    """A media config whose resize makes a ``width x height`` screenshot cost at most ``max_tokens``.

    The largest ``in_patch_limit`` (at most ``config``'s) for which the resized image costs at
    most ``max_tokens`` where it is charged, by a server with ``config``:
    ``image_token_count(*model_size_for(width, height, cfg), config) <= max_tokens`` (a binary
    search: the token count grows with the patch budget). E.g. a 2880x1800 HiDPI screenshot costs 6,695
    tokens at K3's defaults and 1,500 or fewer with ``max_tokens=1500``. A screenshot that already
    fits keeps ``config`` unchanged (never upscaled).

    Args:
        width, height: screenshot size in screen pixels.
        max_tokens: the budget (>= 1).
        config: the base config (K3 defaults when ``None``).

    Returns:
        ``config`` with ``in_patch_limit`` lowered as needed.

    Raises:
        ValueError: ``max_tokens < 1``.
        MediaError: a side smaller than 1.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    cfg = config or K3_MEDIA_CONFIG

    def tokens(limit: int) -> int:  # what a server with ``cfg`` charges for the resized image
        return image_token_count(*model_size_for(width, height, cfg.model_copy(update={"in_patch_limit": limit})), cfg)

    if tokens(cfg.in_patch_limit) <= max_tokens:
        return cfg
    low, high = 1, cfg.in_patch_limit  # tokens(low) is 1 (one patch), tokens(high) > max_tokens
    while high - low > 1:
        mid = (low + high) // 2
        if tokens(mid) <= max_tokens:
            low = mid
        else:
            high = mid
    return cfg.model_copy(update={"in_patch_limit": low})


def _map(value: float, src: int, dst: int) -> int:
    """The pixel of a ``dst``-wide axis under the centre of pixel ``value`` of a ``src``-wide one."""
    return min(dst - 1, max(0, math.floor((math.floor(value) + 0.5) * dst / src)))


@dataclass(frozen=True)
class CoordinateSpace:
    """Maps model pixels to screen pixels and input units and back (see the module docstring).

    Attributes:
        screen_size: ``(width, height)`` of the captured screenshot in screen (device) pixels.
        model_size: ``(width, height)`` of the image the model sees, in model pixels.
        device_scale: screen pixels per input unit (a browser's ``devicePixelRatio``; 1.0 on X11).
        offset: screen pixel of the model image's top-left corner: ``(0, 0)`` for a screenshot,
            the region's corner for a zoomed image (``screen_size`` is then the region's size).

    Example (a 1024x768 CSS viewport at device scale 2, shown to the model at 1280x960)::

        space = CoordinateSpace(screen_size=(2048, 1536), model_size=(1280, 960), device_scale=2.0)
        space.to_screen(640, 480)   # (1024, 768) screen pixels
        space.to_input(640, 480)    # (512.0, 384.0) CSS pixels
        space.to_model(1024, 768)   # (640, 480)

    Raises:
        ValueError: a size side smaller than 1, or ``device_scale <= 0``.
    """

    screen_size: tuple[int, int]
    model_size: tuple[int, int]
    device_scale: float = 1.0
    offset: tuple[int, int] = (0, 0)

    def __post_init__(self) -> None:
        if min(*self.screen_size, *self.model_size) < 1:
            raise ValueError(f"sizes must be positive, got screen {self.screen_size} and model {self.model_size}")
        if not self.device_scale > 0:
            raise ValueError(f"device_scale must be > 0, got {self.device_scale}")

    @classmethod
    def for_screen(
        cls, screen_size: tuple[int, int], device_scale: float = 1.0, config: MediaConfig | None = None
    ) -> CoordinateSpace:
        """The space of a screenshot of ``screen_size`` once :func:`~kimik3.media.prepare_image`
        resizes it with ``config`` (:func:`model_size_for`).

        Raises:
            MediaError: a side smaller than 1.
        """
        return cls(screen_size=screen_size, model_size=model_size_for(*screen_size, config), device_scale=device_scale)

    @property
    def input_size(self) -> tuple[float, float]:
        """``(width, height)`` of the screen in input units (CSS pixels for a browser)."""
        return self.screen_size[0] / self.device_scale, self.screen_size[1] / self.device_scale

    def contains(self, x: float, y: float) -> bool:
        """Whether model pixel ``(x, y)`` lies inside the model image."""
        return 0 <= x < self.model_size[0] and 0 <= y < self.model_size[1]

    def to_screen(self, x: float, y: float) -> tuple[int, int]:
        """Screen pixel under the centre of model pixel ``(x, y)`` (``floor`` of both;
        ``offset_x + floor((x + 0.5) * screen_w / model_w)``, clamped to the region)."""
        (sw, sh), (mw, mh), (ox, oy) = self.screen_size, self.model_size, self.offset
        return ox + _map(x, mw, sw), oy + _map(y, mh, sh)

    def to_model(self, x: float, y: float) -> tuple[int, int]:
        """Model pixel under the centre of screen pixel ``(x, y)`` (``floor((x + 0.5) * model_w /
        screen_w)``, clamped to the model image)."""
        (sw, sh), (mw, mh), (ox, oy) = self.screen_size, self.model_size, self.offset
        return _map(x - ox, sw, mw), _map(y - oy, sh, mh)

    def screen_to_input(self, x: int, y: int) -> tuple[float, float]:
        """Input position of screen pixel ``(x, y)``: its top-left corner, ``x / device_scale``
        (an integer for X11; a fractional CSS pixel lands inside the same device pixel)."""
        return x / self.device_scale, y / self.device_scale

    def input_to_screen(self, x: float, y: float) -> tuple[int, int]:
        """Screen pixel containing input position ``(x, y)``: ``floor(x * device_scale)``, clamped
        into the region this space covers."""
        (sw, sh), (ox, oy) = self.screen_size, self.offset
        return (
            min(ox + sw - 1, max(ox, math.floor(x * self.device_scale))),
            min(oy + sh - 1, max(oy, math.floor(y * self.device_scale))),
        )

    def to_input(self, x: float, y: float) -> tuple[float, float]:
        """Input position for model pixel ``(x, y)``: :meth:`screen_to_input` of :meth:`to_screen`."""
        return self.screen_to_input(*self.to_screen(x, y))

    def input_to_model(self, x: float, y: float) -> tuple[int, int]:
        """Model pixel of input position ``(x, y)``: :meth:`to_model` of :meth:`input_to_screen`."""
        return self.to_model(*self.input_to_screen(x, y))
