"""K3 media-preprocessing configuration (docs/k3-format.md § Media tokens; keys as in the
model's ``preprocessor_config.json``).

:class:`MediaConfig` carries the numbers of a model's ``preprocessor_config.json`` (Kimi nests them
under ``media_proc_cfg``; a flat file is read too) with the K3 values built in, plus a few
client-side options of kimik3's own (EXIF orientation, the decompression-bomb limit, the JPEG draft
fast path, the resize fixed point). It is an immutable pydantic model: derive variants with
``cfg.model_copy(update={...})``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from .._exceptions import MediaError

__all__ = ["K3_MEDIA_CONFIG", "MediaConfig", "TransparentBgConfig"]

BgPattern = Literal["white", "black", "gray", "chessboard"]


class TransparentBgConfig(BaseModel):
    """What transparent pixels are blended over (``transparent_bg_config``).

    Field names and the defaults of *absent* fields are those of the checkpoint's own
    ``TransparentBgConfig`` dataclass (``media_utils.py``: pattern "black", square 16, gray 200),
    so a file that names only some fields means what it means to the model's processor. The K3
    values (chessboard, 8 px, white 255, gray 180, white square top-left) are what
    :data:`K3_MEDIA_CONFIG` uses.

    Attributes:
        pattern: "chessboard", or a flat "white" (255), "black" (0) or "gray" (128) background.
        chessboard_square_size: side of one square in pixels of the *resized* image.
        chessboard_square_on_top_left: True = the square at (0, 0) is white; the gray squares are
            those where ``(x // size + y // size)`` is odd.
        chessboard_white_value: value of the white squares (all three channels).
        chessboard_gray_value: value of the gray squares.
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    pattern: BgPattern = "black"
    chessboard_square_size: int = 16
    chessboard_square_on_top_left: bool = True
    chessboard_white_value: int = 255
    chessboard_gray_value: int = 200

    @field_validator("chessboard_square_size")
    @classmethod
    def _positive_square(cls, v: int) -> int:
        if v < 1:
            raise ValueError("chessboard_square_size must be >= 1")
        return v

    @field_validator("chessboard_white_value", "chessboard_gray_value")
    @classmethod
    def _byte(cls, v: int) -> int:
        if not 0 <= v <= 255:
            raise ValueError("chessboard values must be in 0..255")
        return v

    def background_values(self) -> tuple[int, int]:
        """The two background values ``(even_square, odd_square)``; equal for flat patterns.

        "Even" squares are those where ``(x // size + y // size)`` is even (the one at (0, 0)).
        """
        if self.pattern == "chessboard":
            white, gray = self.chessboard_white_value, self.chessboard_gray_value
            return (white, gray) if self.chessboard_square_on_top_left else (gray, white)
        flat = {"white": 255, "black": 0, "gray": 128}[self.pattern]
        return flat, flat


K3_TRANSPARENT_BG = TransparentBgConfig(
    pattern="chessboard",
    chessboard_square_size=8,
    chessboard_square_on_top_left=True,
    chessboard_white_value=255,
    chessboard_gray_value=180,
)


class MediaConfig(BaseModel):
    """K3 preprocessing numbers plus kimik3's client-side options (all immutable).

    Model keys (docs/k3-format.md § Media tokens; read from ``preprocessor_config.json``; a key the file lacks keeps
    its K3 default, a key kimik3 does not know is ignored):

    Attributes:
        patch_size: ViT patch side in pixels (14).
        merge_kernel_size: patches merged per side into one token (2); ``[2, 2]`` is accepted.
        in_patch_limit: patch budget of one image (65536; K2.5 used 16384).
        patch_limit_on_one_side: most patches along one side (512, i.e. 7168 px).
        fixed_output_tokens: when set, every image costs exactly this many tokens (the size
            arithmetic is unchanged).
        image_mean, image_std: per-channel normalisation (0.5); kept for completeness, the
            client sends pixels and never normalises.
        in_patch_limit_each_frame: patch budget of one video frame (16384).
        in_patch_limit_video: patch budget shared by the frames of one chunk (655360); ``None``
            leaves only ``in_patch_limit_each_frame``.
        sample_fps: video sampling rate in frames per second (8.0).
        temporal_merge_kernel_size: sampled frames per video chunk (4).
        timestamp_mode: format of chunk timestamps; only "hh:mm:ss.fff" is defined.
        transparent_bg_config: background for transparent pixels; ``None`` = plain RGB
            conversion (the pre-K3 behaviour).
        transparent_bg_fill_stage: "after_resize" (K3) or "before_resize".

    kimik3 options (not model keys):

    Attributes:
        apply_exif_orientation: rotate/flip by the EXIF Orientation tag before anything else
            (default True). No reference applies it, so phone photos otherwise reach the model
            sideways (docs/k3-format.md § Pixels); set False to reproduce the reference pixels exactly.
        max_image_pixels: refuse images with more pixels than this (read from the header,
            before decoding) with :class:`~kimik3.ImageTooLargeError`. ``None`` = Pillow's own
            limit, ``2 * PIL.Image.MAX_IMAGE_PIXELS`` = 178,956,970 by default (no limit when
            Pillow's is disabled). Pillow's limit applies in any case.
        jpeg_draft: let libjpeg decode at 1/2, 1/4 or 1/8 scale when the resize shrinks by at
            least that much (much faster for large photos). Off by default: the pixels then
            differ slightly from a full decode + BICUBIC (sizes and token counts do not).
        resize_to_fixed_point: resize to the fixed point of the NaViT size function instead of
            its first value, so a server that resizes again leaves the image alone (docs/k3-format.md § Image
            size: the resize is not idempotent). Off by default (the reference single pass).
        max_video_samples: most samples one video may give (default 2,048: 256 s at 8 fps);
            more is a :class:`~kimik3.VideoTooLongError` (checked from the packet timestamps
            before decoding when possible; ``max_frames`` keeps fewer). ``None``: no cap.
        max_video_tokens: most tokens one video's chunks may cost (default 131,072, the context
            of a vendor-validated K3 launch: K3's context is the real limit); more is a
            :class:`~kimik3.VideoTooLongError`. ``None``: no cap.
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    patch_size: int = 14
    merge_kernel_size: int = 2
    in_patch_limit: int = 65536
    patch_limit_on_one_side: int = 512
    fixed_output_tokens: int | None = None
    image_mean: tuple[float, float, float] = (0.5, 0.5, 0.5)
    image_std: tuple[float, float, float] = (0.5, 0.5, 0.5)
    in_patch_limit_each_frame: int = 16384
    in_patch_limit_video: int | None = 655360
    sample_fps: float = 8.0
    temporal_merge_kernel_size: int = 4
    timestamp_mode: str = "hh:mm:ss.fff"
    transparent_bg_config: TransparentBgConfig | None = K3_TRANSPARENT_BG
    transparent_bg_fill_stage: Literal["before_resize", "after_resize"] = "after_resize"

    apply_exif_orientation: bool = True
    max_image_pixels: int | None = None
    jpeg_draft: bool = False
    resize_to_fixed_point: bool = False
    max_video_samples: int | None = 2048
    max_video_tokens: int | None = 131_072

    @field_validator("merge_kernel_size", mode="before")
    @classmethod
    def _square_kernel(cls, v: Any) -> Any:
        if isinstance(v, (list, tuple)):
            if len(v) != 2 or v[0] != v[1]:
                raise ValueError(f"merge_kernel_size must be square, got {v!r}")
            return v[0]
        return v

    @field_validator(
        "patch_size",
        "merge_kernel_size",
        "in_patch_limit",
        "patch_limit_on_one_side",
        "in_patch_limit_each_frame",
        "temporal_merge_kernel_size",
    )
    @classmethod
    def _positive(cls, v: int) -> int:
        if v < 1:
            raise ValueError("must be >= 1")
        return v

    @field_validator("sample_fps")
    @classmethod
    def _positive_fps(cls, v: float) -> float:
        if not v > 0:
            raise ValueError("sample_fps must be > 0")
        return v

    @property
    def token_side(self) -> int:
        """Pixels per token along one side: ``patch_size * merge_kernel_size`` (28)."""
        return self.patch_size * self.merge_kernel_size

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], **overrides: Any) -> MediaConfig:
        """Build from a parsed ``preprocessor_config.json``.

        Keys nested under ``media_proc_cfg`` (how Kimi checkpoints ship them) take precedence
        over top-level ones; unknown keys are ignored; absent keys keep their K3 defaults.

        Args:
            data: the JSON object.
            **overrides: field values applied last (e.g. ``apply_exif_orientation=False``).

        Raises:
            MediaError: a value of the wrong type or out of range.
        """
        merged: dict[str, Any] = {k: v for k, v in data.items() if k != "media_proc_cfg"}
        nested = data.get("media_proc_cfg")
        if isinstance(nested, Mapping):
            merged.update(nested)
        merged.update(overrides)
        try:
            return cls.model_validate(merged)
        except ValidationError as e:
            raise MediaError(f"invalid media preprocessing config: {e}") from e

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], **overrides: Any) -> MediaConfig:
        """Load a ``preprocessor_config.json`` file (see :meth:`from_dict`).

        Raises:
            FileNotFoundError: no such file.
            MediaError: not a JSON object, or invalid values.
        """
        text = Path(path).read_text(encoding="utf-8")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise MediaError(f"{path}: not valid JSON: {e}") from e
        if not isinstance(data, dict):
            raise MediaError(f"{path}: expected a JSON object")
        return cls.from_dict(data, **overrides)

    @classmethod
    def from_pretrained(cls, model_dir: str | os.PathLike[str], **overrides: Any) -> MediaConfig:
        """Load ``<model_dir>/preprocessor_config.json`` (see :meth:`from_dict`).

        Raises:
            FileNotFoundError: the directory has no ``preprocessor_config.json``.
            MediaError: invalid content.
        """
        path = Path(model_dir) / "preprocessor_config.json"
        if not path.is_file():
            raise FileNotFoundError(f"no preprocessor_config.json in {model_dir}")
        return cls.from_file(path, **overrides)


K3_MEDIA_CONFIG = MediaConfig()
"""The K3 defaults (docs/k3-format.md § Media tokens)."""
