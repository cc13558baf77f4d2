"""NaViT sizes, token counts, prompt text and MediaConfig loading (spec k3-media.md § Config,
§ Image size)."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest

from kimik3 import MediaError
from kimik3.media import (
    K3_MEDIA_CONFIG,
    MediaConfig,
    TransparentBgConfig,
    format_timestamp,
    image_prompt,
    image_token_count,
    navit_fixed_point,
    navit_size,
    video_chunk_prompt,
)

# The spec's worked values (K3 defaults): (w, h) -> ((w', h'), tokens).
WORKED = [
    ((1, 1), (1, 1), 1),
    ((29, 29), (29, 29), 4),
    ((224, 224), (224, 224), 64),
    ((800, 600), (800, 600), 638),
    ((1920, 1080), (1920, 1080), 2691),
    ((2560, 1440), (2560, 1440), 4784),
    ((3840, 2160), (3840, 2160), 10764),
    ((4096, 4096), (3591, 3591), 16641),
    ((10000, 20), (7168, 14), 256),
]


@pytest.mark.parametrize(("src", "dst", "tokens"), WORKED)
def test_worked_values(src: tuple[int, int], dst: tuple[int, int], tokens: int) -> None:
    assert navit_size(*src) == dst
    assert image_token_count(*src) == tokens


def test_token_formula_is_padded_grid() -> None:
    # 800x600 is below every limit: ceil(600/28) * ceil(800/28) = 22 * 29.
    assert image_token_count(800, 600) == 22 * 29
    # 29x29 pads to 56x56: a 2x2 grid of 28-px tokens.
    assert image_token_count(29, 29) == 4


def test_resize_is_not_idempotent() -> None:
    # 4293x3219: floor(4293/14) * floor(3219/14) = 306 * 229 = 70074 patches > 65536, so
    # s1 = sqrt(65536 / 70074) = 0.967078..., 4293*s1 = 4151.67 -> 4151, 3219*s1 = 3113.02 -> 3113.
    assert navit_size(4293, 3219) == (4151, 3113)
    # 4151x3113 still has 296 * 222 = 65712 > 65536 patches: it shrinks again.
    assert navit_size(4151, 3113) == (4145, 3108)
    assert navit_fixed_point(4293, 3219) == (4139, 3103)
    assert navit_size(4139, 3103) == (4139, 3103)
    # Tokens: as planned from the original, and as charged for the size actually sent.
    assert image_token_count(4293, 3219) == 149 * 112  # ceil(3113/28) * ceil(4151/28)
    assert image_token_count(4151, 3113) == 16539
    assert image_token_count(4139, 3103) == 111 * 148


def test_never_upscales_and_clamps_sides() -> None:
    assert navit_size(100, 50) == (100, 50)
    assert navit_size(100000, 100000) == (3584, 3584)  # budget: 256 x 256 patches
    # scale = 7168 / 50000 = 0.14336; 50000 * 0.14336 = 7167.999.. in binary floating point and
    # the reference truncates (int()), so the long side is 7167, not 7168; 10 * 0.14336 -> 1.
    assert navit_size(50000, 10) == (7167, 1)


def test_patch_limit_override_and_k25_budget() -> None:
    k25 = MediaConfig(in_patch_limit=16384)
    # s1 = sqrt(16384 / (274 * 154)) = 0.62307..: 3840 -> 2392, 2160 -> 1345.
    assert navit_size(3840, 2160, k25) == (2392, 1345)
    assert image_token_count(3840, 2160, k25) == 49 * 86
    assert navit_size(3840, 2160, patch_limit=16384) == (2392, 1345)


def test_fixed_output_tokens() -> None:
    cfg = MediaConfig(fixed_output_tokens=77)
    assert image_token_count(1920, 1080, cfg) == 77
    assert navit_size(1920, 1080, cfg) == (1920, 1080)


@pytest.mark.parametrize("size", [(0, 10), (10, 0), (-1, 5)])
def test_bad_sizes(size: tuple[int, int]) -> None:
    with pytest.raises(MediaError):
        navit_size(*size)


def test_image_prompt() -> None:
    assert image_prompt(64, 48, 3) == (
        "<|media_begin|>image 64x48<|media_content|>"
        "<|media_pad|><|media_pad|><|media_pad|><|media_end|>"
    )


def test_video_chunk_prompt() -> None:
    assert video_chunk_prompt("00:00:01.500", 2) == (
        "00:00:01.500<|media_begin|>video<|media_content|><|media_pad|><|media_pad|><|media_end|>"
    )
    assert video_chunk_prompt("00:00:00.000", 180, expand=False) == (
        "00:00:00.000<|media_begin|>video<|media_content|><|media_pad|><|media_end|>"
    )


def test_format_timestamp_truncates_milliseconds() -> None:
    assert format_timestamp(0) == "00:00:00.000"
    assert format_timestamp(0.125) == "00:00:00.125"
    assert format_timestamp(0.9999) == "00:00:00.999"
    assert format_timestamp(3725.0409) == "01:02:05.040"
    # a negative or non-finite time is refused, never printed as "-1:59:59.000" (issue 27, item 7)
    for bad, why in ((-1, "cannot be negative, got -1 s"), (-0.0005, "cannot be negative"),
                     (Fraction(-1, 3), "cannot be negative"), (float("nan"), "must be a finite number of seconds"),
                     (float("inf"), "must be a finite number of seconds")):
        with pytest.raises(MediaError, match=why):
            format_timestamp(bad)
    assert format_timestamp(-0.0) == "00:00:00.000"  # minus zero is zero
    with pytest.raises(MediaError):
        format_timestamp(1.0, "seconds")


# -- config ----------------------------------------------------------------------------------


def test_k3_defaults() -> None:
    c = K3_MEDIA_CONFIG
    assert (c.patch_size, c.merge_kernel_size, c.in_patch_limit, c.patch_limit_on_one_side) == (
        14,
        2,
        65536,
        512,
    )
    assert (c.in_patch_limit_each_frame, c.in_patch_limit_video, c.sample_fps) == (16384, 655360, 8.0)
    assert (c.temporal_merge_kernel_size, c.timestamp_mode) == (4, "hh:mm:ss.fff")
    assert c.image_mean == c.image_std == (0.5, 0.5, 0.5)
    bg = c.transparent_bg_config
    assert bg is not None
    assert (bg.pattern, bg.chessboard_square_size, bg.chessboard_white_value, bg.chessboard_gray_value) == (
        "chessboard",
        8,
        255,
        180,
    )
    assert bg.chessboard_square_on_top_left is True
    assert bg.background_values() == (255, 180)
    assert c.transparent_bg_fill_stage == "after_resize"
    assert c.apply_exif_orientation is True
    assert c.token_side == 28


def test_from_pretrained_nested_and_unknown_keys(tmp_path: Path) -> None:
    (tmp_path / "preprocessor_config.json").write_text(
        json.dumps(
            {
                "processor_class": "KimiK3Processor",  # unknown: ignored
                "media_proc_cfg": {
                    "patch_size": 14,
                    "merge_kernel_size": [2, 2],
                    "in_patch_limit": 16384,
                    "sample_fps": 2.0,
                    "some_future_key": {"x": 1},
                    "transparent_bg_config": {"pattern": "chessboard", "chessboard_square_size": 4},
                },
            }
        )
    )
    cfg = MediaConfig.from_pretrained(tmp_path, apply_exif_orientation=False)
    assert cfg.in_patch_limit == 16384
    assert cfg.merge_kernel_size == 2
    assert cfg.sample_fps == 2.0
    assert cfg.apply_exif_orientation is False
    assert cfg.patch_limit_on_one_side == 512  # absent: K3 default
    # Absent sub-keys take the checkpoint dataclass's defaults (gray 200), not K3's values.
    assert cfg.transparent_bg_config == TransparentBgConfig(pattern="chessboard", chessboard_square_size=4)
    assert cfg.transparent_bg_config is not None
    assert cfg.transparent_bg_config.background_values() == (255, 200)
    assert image_token_count(3840, 2160, cfg) == 4214


def test_from_file_flat_and_null_background(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"in_patch_limit": 1024, "transparent_bg_config": None}))
    cfg = MediaConfig.from_file(path)
    assert cfg.in_patch_limit == 1024
    assert cfg.transparent_bg_config is None


def test_config_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        MediaConfig.from_pretrained(tmp_path)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(MediaError):
        MediaConfig.from_file(bad)
    with pytest.raises(MediaError):
        MediaConfig.from_dict({"merge_kernel_size": [2, 3]})
    with pytest.raises(MediaError):
        MediaConfig.from_dict({"patch_size": 0})
    with pytest.raises(MediaError):
        MediaConfig.from_dict({"transparent_bg_config": {"pattern": "plaid"}})


def test_flat_patterns() -> None:
    assert TransparentBgConfig(pattern="white").background_values() == (255, 255)
    assert TransparentBgConfig(pattern="black").background_values() == (0, 0)
    assert TransparentBgConfig(pattern="gray").background_values() == (128, 128)
    swapped = TransparentBgConfig(pattern="chessboard", chessboard_square_on_top_left=False)
    assert swapped.background_values() == (200, 255)
