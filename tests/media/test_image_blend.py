"""The blend's documented tolerance against the reference output (kimik3.media._image_pixels._composite).

``tests/data/media/composited/*.png`` are the outputs of ``prepare_image`` before the blend became
Pillow's rounded integer one, when it was the reference's float32 truncation bit for bit
(PROVENANCE.md there). Today's output must be within the tolerance stated in ``_composite``:
identical where alpha is 0 or 255, else the same or one more per channel, about half of the
partly transparent channels one more.
"""

from __future__ import annotations

import hashlib

import pytest
from PIL import Image, ImageChops, ImageDraw, ImageFilter

from kimik3.media import prepare_image

from ._helpers import DATA, blend, board, reference_composite

GOLDEN = DATA / "composited"

# fixture -> (sha256 of the reference output's RGB bytes, pixels with 0 < alpha < 255)
CASES = {
    "rgba.png": ("eb4e260883d1f9eaf3226f003f55032dbcef7a197f0680a8fb6be2ef4deeec9f", 921_574),
    "grayscale_alpha.png": ("4ebb7fd642621bc98276500520a69411e2599afb0a92bfcf152db0080b74448a", 921_574),
    "transparent.gif": ("2e6d11778c9a9db8cc87d146d1ea74569a673b0777cba9761e624397b8e27778", 0),
}


def _check_tolerance(new: Image.Image, ref: Image.Image, alpha: Image.Image) -> float:
    """Assert the tolerance; return the fraction of partly transparent channels one higher."""
    assert new.size == ref.size == alpha.size and new.mode == ref.mode == "RGB"
    assert ImageChops.subtract(ref, new).getextrema() == ((0, 0),) * 3  # never lower
    up = ImageChops.subtract(new, ref)
    assert all(not any(band.histogram()[2:]) for band in up.split())  # at most one higher
    edge = alpha.point([255] + [0] * 254 + [255])  # alpha 0 or 255: identical
    for band in up.split():
        assert ImageChops.multiply(band.point([0] + [255] * 255), edge).getbbox() is None
    partial = sum(alpha.histogram()[1:255])
    ones = sum(band.histogram()[1] for band in up.split())
    return ones / (3 * partial) if partial else 0.0


@pytest.mark.parametrize("name", sorted(CASES))
def test_real_fixtures_within_tolerance_of_the_reference(name: str) -> None:
    digest, partial = CASES[name]
    ref = Image.open(GOLDEN / (name.rsplit(".", 1)[0] + ".png")).convert("RGB")
    assert hashlib.sha256(ref.tobytes()).hexdigest() == digest
    with Image.open(DATA / name) as src:
        alpha = src.convert("RGBA").getchannel("A")
        rgba = src.convert("RGBA")
    assert sum(alpha.histogram()[1:255]) == partial
    # The golden is the reference blend (spot checks of the float32 truncation).
    for x, y in [(0, 0), (1, 0), (640, 360), (1279, 719), (8, 3), (37, 700)]:
        if x < ref.width and y < ref.height:
            r, g, b, a = rgba.getpixel((x, y))  # type: ignore[misc]
            bd = board(x, y)
            assert ref.getpixel((x, y)) == (blend(r, a, bd), blend(g, a, bd), blend(b, a, bd))
    new = prepare_image(DATA / name).image
    share = _check_tolerance(new, ref, alpha)
    if partial:
        assert 0.45 < share < 0.55  # measured: 0.4931 (rgba.png), 0.4929 (grayscale_alpha.png)
        diff = ImageChops.subtract(new, ref)
        mean = sum(sum(i * n for i, n in enumerate(band.histogram())) for band in diff.split()) / (3 * new.width * new.height)
        assert 0.45 < mean < 0.55  # nearly every pixel of these two is partly transparent
    else:
        assert new.tobytes() == ref.tobytes()  # binary alpha: byte-exact


def test_feathered_cutout_within_tolerance() -> None:
    # bench/media.py's feathered cut-out, small: opaque middle, transparent border, a wide
    # blurred band of partial alpha; the reference computed pixel by pixel.
    w, h = 320, 180
    mask = Image.new("L", (w, h), 0)
    ImageDraw.Draw(mask).rounded_rectangle((20, 15, w - 20, h - 15), radius=12, fill=255)
    alpha = mask.filter(ImageFilter.GaussianBlur(6))
    alpha.paste(255, (40, 35, w - 40, h - 35))
    rgba = Image.merge("RGB", [Image.effect_noise((w, h), 60 + 20 * k) for k in range(3)])
    rgba.putalpha(alpha)
    hist = alpha.histogram()
    assert hist[0] > 0 and hist[255] > 0 and sum(hist[1:255]) > 0.2 * w * h
    ref = Image.new("RGB", (w, h))
    ref.putdata(reference_composite(rgba))
    share = _check_tolerance(prepare_image(rgba).image, ref, alpha)
    assert 0.4 < share < 0.6
