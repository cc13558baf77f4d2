"""prepare_image: resize, chessboard compositing, modes, EXIF, sources, errors (spec k3-media.md
§ Image size, § Pixels). Expected pixels come from the spec's rule, evaluated independently in
tests/media/_helpers.py, and from hand-derived constants."""

from __future__ import annotations

import base64
import io
import warnings
from pathlib import Path

import pytest
from PIL import Image, ImageChops, ImageStat

from kimik3 import ImageTooLargeError, MediaDecodeError, MediaError
from kimik3.media import (
    MediaConfig,
    PreparedImage,
    TransparentBgConfig,
    decode_data_url,
    image_token_count,
    prepare_image,
)

from ._helpers import DATA, blend, board, png_header_only, rounded_blend, rounded_composite


def _rgba(size: tuple[int, int], color: tuple[int, int, int, int]) -> Image.Image:
    return Image.new("RGBA", size, color)


def _mean_abs_diff(a: Image.Image, b: Image.Image) -> float:
    return sum(ImageStat.Stat(ImageChops.difference(a, b)).mean) / 3


# -- the float32 blend -----------------------------------------------------------------------


def test_reference_arithmetic_constants() -> None:
    # alpha 128: a = float32(128/255) = 0.50196081..; (1-a)*255 = 126.99999237 in float32, so a
    # channel with value 0 over white truncates to 126 although the exact value is 127.
    assert blend(0, 128, 255) == 126
    assert blend(255, 128, 255) == 255  # 128.0 + 126.99999237 = 255.0 in float32
    assert blend(255, 128, 180) == 217  # 128 + 89.647057 = 217.647
    assert blend(0, 128, 180) == 89
    assert blend(0, 127, 255) == 127  # 0.50196075 * 255 = 127.99999237 -> 127 (exact: 128)
    assert blend(77, 255, 180) == 77 and blend(77, 0, 180) == 180


def test_fully_transparent_is_the_chessboard() -> None:
    p = prepare_image(_rgba((16, 16), (0, 0, 0, 0)))
    px = p.image
    assert px.getpixel((0, 0)) == (255, 255, 255)
    assert px.getpixel((8, 0)) == (180, 180, 180)
    assert px.getpixel((0, 8)) == (180, 180, 180)
    assert px.getpixel((8, 8)) == (255, 255, 255)
    assert px.getpixel((7, 7)) == (255, 255, 255)
    assert px.getpixel((15, 0)) == (180, 180, 180)
    assert (p.size, p.token_count, p.image.mode) == ((16, 16), 1, "RGB")


def test_half_transparent_red_rounded_blend() -> None:
    p = prepare_image(_rgba((16, 16), (255, 0, 0, 128)))
    # White squares: exact (255, 127, 127) (the reference's float32 truncation: 255, 126, 126);
    # gray squares: exact (218.1, 89.6, 89.6) rounded (the reference: 217, 89, 89).
    assert p.image.getpixel((0, 0)) == (255, 127, 127)
    assert p.image.getpixel((8, 8)) == (255, 127, 127)
    assert p.image.getpixel((8, 0)) == (218, 90, 90)
    assert p.image.getpixel((0, 15)) == (218, 90, 90)
    for y in range(16):
        for x in range(16):
            b = board(x, y)
            want = (rounded_blend(255, 128, b), rounded_blend(0, 128, b), rounded_blend(0, 128, b))
            assert p.image.getpixel((x, y)) == want


def test_every_alpha_and_channel_value() -> None:
    # 256 x 256 image: x = channel value, y = alpha; the whole blend table, both board values.
    # kimik3 rounds the exact blend; the tolerance against the reference's float32 truncation:
    # equal at alpha 0 and 255, else the reference's value or one more.
    data = bytearray()
    for alpha in range(256):
        for c in range(256):
            data += bytes((c, 255 - c, c // 2, alpha))
    im = Image.frombytes("RGBA", (256, 256), bytes(data))
    out = prepare_image(im).image
    assert out.size == (256, 256)
    for y in range(256):
        for x in range(256):
            b = board(x, y)
            got = out.getpixel((x, y))
            assert got == (rounded_blend(x, y, b), rounded_blend(255 - x, y, b), rounded_blend(x // 2, y, b))
            ref = (blend(x, y, b), blend(255 - x, y, b), blend(x // 2, y, b))
            diffs = {g - r for g, r in zip(got, ref, strict=True)}  # type: ignore[arg-type]
            assert diffs == {0} if y in (0, 255) else diffs <= {0, 1}


def test_opaque_rgba_equals_rgb() -> None:
    rgb = Image.effect_noise((40, 30), 60).convert("RGB")
    rgba = rgb.copy()
    rgba.putalpha(255)
    assert prepare_image(rgba).image.tobytes() == prepare_image(rgb).image.tobytes() == rgb.tobytes()


def test_binary_alpha_path() -> None:
    im = _rgba((24, 16), (10, 20, 30, 255))
    for x in range(12, 24):
        for y in range(16):
            im.putpixel((x, y), (99, 99, 99, 0))
    out = prepare_image(im).image
    assert out.getpixel((0, 0)) == (10, 20, 30)
    assert out.getpixel((11, 15)) == (10, 20, 30)
    assert out.getpixel((12, 0)) == (180, 180, 180)  # 1 + 0 odd
    assert out.getpixel((16, 0)) == (255, 255, 255)  # 2 + 0 even
    assert out.getpixel((16, 8)) == (180, 180, 180)  # 2 + 1 odd


def _pixels(im: Image.Image) -> list[tuple[int, int, int]]:
    raw = im.tobytes()
    return [tuple(raw[i : i + 3]) for i in range(0, len(raw), 3)]  # type: ignore[misc]


def test_localized_partial_alpha() -> None:
    # Opaque noise with a transparent hole and a soft blob in one corner.
    im = Image.merge("RGB", [Image.effect_noise((300, 200), 80 + 10 * k) for k in range(3)])
    alpha = Image.new("L", (300, 200), 255)
    alpha.paste(0, (100, 60, 180, 140))
    blob = Image.radial_gradient("L").resize((70, 50))
    alpha.paste(blob, (225, 140))
    im.putalpha(alpha)
    assert _pixels(prepare_image(im).image) == rounded_composite(im)


def test_mostly_transparent_with_a_soft_corner() -> None:
    # Mostly alpha 0, an opaque block, and partial alpha only around one corner.
    im = Image.merge("RGB", [Image.effect_noise((300, 200), 70 + 15 * k) for k in range(3)])
    alpha = Image.new("L", (300, 200), 0)
    alpha.paste(255, (20, 20, 120, 90))
    alpha.paste(Image.radial_gradient("L").resize((60, 40)), (235, 155))
    im.putalpha(alpha)
    assert _pixels(prepare_image(im).image) == rounded_composite(im)


def test_partial_alpha_everywhere() -> None:
    # 160x520 with a horizontal alpha ramp; also a square of 5 px and a gray of 200 (the board
    # is laid in strips of two squares, the last one cut at the bottom: 520 = 52 * 10).
    im = Image.merge("RGB", [Image.effect_noise((160, 520), 60 + 20 * k) for k in range(3)])
    im.putalpha(Image.linear_gradient("L").rotate(90).resize((160, 520)))
    assert _pixels(prepare_image(im).image) == rounded_composite(im)
    odd = MediaConfig(
        transparent_bg_config=TransparentBgConfig(pattern="chessboard", chessboard_square_size=5)
    )
    assert _pixels(prepare_image(im, odd).image) == rounded_composite(im, square=5, gray=200)
    cut = MediaConfig(transparent_bg_config=TransparentBgConfig(pattern="chessboard", chessboard_square_size=7))
    assert _pixels(prepare_image(im, cut).image) == rounded_composite(im, square=7, gray=200)  # 520 % 14 = 2


def test_resize_is_pillow_bicubic_of_the_decoded_file(tmp_path: Path) -> None:
    small = MediaConfig(in_patch_limit=256)
    # 800x600: 57 * 42 = 2394 patches > 256, s1 = sqrt(256 / 2394) = 0.32700: 261x196.
    path = tmp_path / "photo.jpg"
    Image.merge("RGB", [Image.effect_noise((800, 600), 50 + 20 * k) for k in range(3)]).save(path, quality=90)
    p = prepare_image(path, small)
    assert p.size == (261, 196)
    with Image.open(path) as im:
        assert p.image.tobytes() == im.resize((261, 196), Image.Resampling.BICUBIC).tobytes()
    # RGBA: Pillow's premultiplied BICUBIC resize first, then the blend at the new size.
    rgba = Image.merge("RGBA", [Image.effect_noise((800, 600), 40 + 30 * k) for k in range(4)])
    rgba.save(tmp_path / "noise.png")
    q = prepare_image(tmp_path / "noise.png", small)
    assert q.size == (261, 196)
    assert _pixels(q.image) == rounded_composite(rgba.resize((261, 196), Image.Resampling.BICUBIC))


def test_chessboard_is_laid_after_the_resize() -> None:
    # 10000x20 fully transparent -> 7168x14; the squares are 8 px of the resized image.
    p = prepare_image(_rgba((10000, 20), (0, 0, 0, 0)))
    assert p.size == (7168, 14)
    assert p.token_count == 256
    row = [p.image.getpixel((x, 0))[0] for x in range(32)]
    assert row == [255] * 8 + [180] * 8 + [255] * 8 + [180] * 8
    assert p.image.getpixel((0, 8)) == (180, 180, 180)
    assert p.image.getpixel((8, 13)) == (255, 255, 255)


def test_before_resize_stage_and_no_background() -> None:
    before = MediaConfig(transparent_bg_fill_stage="before_resize")
    p = prepare_image(_rgba((10000, 20), (0, 0, 0, 0)), before)
    # Composited at 10000 px then shrunk by 0.7168: squares are about 5.7 px wide, blurred.
    assert p.size == (7168, 14)
    assert [p.image.getpixel((x, 0))[0] for x in range(32)] != [255] * 8 + [180] * 8 + [255] * 8 + [180] * 8
    plain = prepare_image(_rgba((4, 4), (200, 100, 50, 0)), MediaConfig(transparent_bg_config=None))
    assert plain.image.getpixel((0, 0)) == (200, 100, 50)  # alpha dropped, as before K3


def test_flat_white_pattern() -> None:
    cfg = MediaConfig(transparent_bg_config=TransparentBgConfig(pattern="white"))
    p = prepare_image(_rgba((16, 16), (255, 0, 0, 128)), cfg)
    assert p.image.getpixel((0, 0)) == p.image.getpixel((8, 0)) == (255, 127, 127)


# -- fixture files ---------------------------------------------------------------------------


def test_rgba_png() -> None:
    src = Image.open(DATA / "rgba.png")
    src.load()
    p = prepare_image(DATA / "rgba.png")
    # 1280x720: 91 * 51 patches < 65536 and both sides < 7168, so no resize;
    # tokens = ceil(720/28) * ceil(1280/28) = 26 * 46.
    assert (p.original_size, p.size, p.token_count, p.source_mode) == ((1280, 720), (1280, 720), 1196, "RGBA")
    # (0,0) = (0,0,0,127) on a white square: exact 128 (the reference's float32: 127).
    assert src.getpixel((0, 0)) == (0, 0, 0, 127)
    assert p.image.getpixel((0, 0)) == (128, 128, 128)
    # Alpha-0 pixels show the board: (0,717): 0 + 89 odd -> 180; (8,719): 1 + 89 even -> 255.
    assert src.getpixel((0, 717))[3] == 0 and src.getpixel((8, 719))[3] == 0
    assert p.image.getpixel((0, 717)) == (180, 180, 180)
    assert p.image.getpixel((5, 718)) == (180, 180, 180)
    assert p.image.getpixel((8, 719)) == (255, 255, 255)
    assert p.image.getpixel((10, 719)) == (255, 255, 255)
    for y in range(0, 720, 23):
        for x in range(0, 1280, 37):
            r, g, b, a = src.getpixel((x, y))  # type: ignore[misc]
            bd = board(x, y)
            assert p.image.getpixel((x, y)) == (rounded_blend(r, a, bd), rounded_blend(g, a, bd), rounded_blend(b, a, bd))


def test_grayscale_alpha_png() -> None:
    src = Image.open(DATA / "grayscale_alpha.png")
    src.load()
    p = prepare_image(DATA / "grayscale_alpha.png")
    assert (p.size, p.token_count, p.source_mode) == ((1280, 720), 1196, "LA")
    assert src.getpixel((0, 0)) == (0, 127)
    assert p.image.getpixel((0, 0)) == (128, 128, 128)
    assert p.image.getpixel((0, 717)) == (180, 180, 180)
    assert p.image.getpixel((8, 719)) == (255, 255, 255)
    for y in range(0, 720, 29):
        for x in range(0, 1280, 41):
            v, a = src.getpixel((x, y))  # type: ignore[misc]
            expected = rounded_blend(v, a, board(x, y))
            assert p.image.getpixel((x, y)) == (expected, expected, expected)


def test_transparent_gif() -> None:
    src = Image.open(DATA / "transparent.gif")
    src.load()
    assert src.mode == "P" and src.info["transparency"] == 1
    p = prepare_image(DATA / "transparent.gif")
    # 64x48: no resize; ceil(48/28) * ceil(64/28) = 2 * 3 tokens.
    assert (p.size, p.token_count, p.source_mode) == ((64, 48), 6, "P")
    # Palette: 0 = green (opaque), 1 = blue (the transparent index), 2 = white (opaque).
    assert p.image.getpixel((0, 0)) == (255, 255, 255)  # transparent, 0 + 0 even
    assert p.image.getpixel((8, 0)) == (180, 180, 180)  # transparent, 1 + 0 odd
    assert p.image.getpixel((8, 8)) == (0, 255, 0)  # green square x 8..31, y 8..39
    assert p.image.getpixel((31, 39)) == (0, 255, 0)
    assert p.image.getpixel((32, 8)) == (180, 180, 180)  # transparent, 4 + 1 odd
    assert p.image.getpixel((40, 20)) == (255, 255, 255)  # white bar x 40..55, y 20..27
    assert p.image.getpixel((48, 28)) == (180, 180, 180)  # transparent, 6 + 3 odd
    assert p.image.getpixel((63, 47)) == (255, 255, 255)  # transparent, 7 + 5 even
    colours = {0: (0, 255, 0), 2: (255, 255, 255)}
    counts = {0: 0, 1: 0, 2: 0}
    for y in range(48):
        for x in range(64):
            index = src.getpixel((x, y))
            assert isinstance(index, int)
            counts[index] += 1
            want = colours.get(index) or (board(x, y),) * 3
            assert p.image.getpixel((x, y)) == want
    assert counts == {0: 768, 1: 2176, 2: 128}  # 2,176 transparent, as measured upstream


@pytest.mark.parametrize(
    ("name", "stored", "oriented", "orientation"),
    [
        ("Landscape_1.jpg", (1800, 1200), (1800, 1200), 1),
        ("Landscape_6.jpg", (1200, 1800), (1800, 1200), 6),
        ("Portrait_8.jpg", (1800, 1200), (1200, 1800), 8),
    ],
)
def test_exif_orientation(
    name: str, stored: tuple[int, int], oriented: tuple[int, int], orientation: int
) -> None:
    on = prepare_image(DATA / name)
    off = prepare_image(DATA / name, apply_exif_orientation=False)
    off_cfg = prepare_image(DATA / name, MediaConfig(apply_exif_orientation=False))
    assert (on.size, on.original_size, on.orientation) == (oriented, oriented, orientation)
    assert (off.size, off.orientation) == (stored, 1)
    assert off_cfg.size == stored
    # 1800x1200 either way round: 128 * 85 patches, no resize; ceil(1200/28) * ceil(1800/28).
    assert on.token_count == off.token_count == 43 * 65
    # Orientation is a lossless transpose of the stored pixels.
    fix = {1: None, 6: Image.Transpose.ROTATE_270, 8: Image.Transpose.ROTATE_90}[orientation]
    expected = off.image if fix is None else off.image.transpose(fix)
    assert on.image.tobytes() == expected.tobytes()


def test_exif_rotated_photo_matches_upright_one() -> None:
    # Landscape_1 and Landscape_6 are the same photo; only with EXIF applied do they agree.
    upright = prepare_image(DATA / "Landscape_1.jpg").image
    six = prepare_image(DATA / "Landscape_6.jpg").image
    assert _mean_abs_diff(upright, six) < 8
    sideways = prepare_image(DATA / "Landscape_6.jpg", apply_exif_orientation=False).image
    assert _mean_abs_diff(upright, sideways.transpose(Image.Transpose.ROTATE_270)) < 8
    assert _mean_abs_diff(upright, six.transpose(Image.Transpose.ROTATE_180)) > 20


def test_jpeg_draft_same_size_close_pixels() -> None:
    small = MediaConfig(in_patch_limit=1024)
    exact = prepare_image(DATA / "Landscape_6.jpg", small)
    fast = prepare_image(DATA / "Landscape_6.jpg", small.model_copy(update={"jpeg_draft": True}))
    # s1 = sqrt(1024 / (128 * 85)) = 0.3067: 1800x1200 -> 552x368 (>= 2x, so libjpeg decodes at 1/2).
    assert exact.size == fast.size == (552, 368)
    assert exact.token_count == fast.token_count == 14 * 20
    assert 0 < _mean_abs_diff(exact.image, fast.image) < 2


# -- modes -----------------------------------------------------------------------------------


def test_sixteen_bit_grayscale_is_scaled_not_clipped(tmp_path: Path) -> None:
    im = Image.new("I;16", (4, 1))
    for x, v in enumerate((0, 25700, 65535, 32896)):
        im.putpixel((x, 0), v)
    path = tmp_path / "g16.png"
    im.save(path)
    p = prepare_image(path)
    assert p.source_mode in ("I;16", "I")
    # round(v / 257): 0, 100, 255, 128 (Pillow's own convert would clip 25700 to 255).
    assert [p.image.getpixel((x, 0)) for x in range(4)] == [(0, 0, 0), (100,) * 3, (255,) * 3, (128,) * 3]
    wide = Image.new("I", (2, 1))
    wide.putpixel((0, 0), 384)  # 1.49 -> 1
    wide.putpixel((1, 0), 70000)  # clipped
    assert [prepare_image(wide).image.getpixel((x, 0)) for x in range(2)] == [(1, 1, 1), (255, 255, 255)]


def test_sixteen_bit_with_transparency_key(tmp_path: Path) -> None:
    im = Image.new("I;16", (16, 1), 1000)
    im.putpixel((8, 0), 5)
    im.info["transparency"] = 5
    path = tmp_path / "g16t.png"
    im.save(path, transparency=5)
    p = prepare_image(path)
    assert p.image.getpixel((0, 0)) == (4, 4, 4)  # round(1000 / 257) = 4, opaque
    assert p.image.getpixel((8, 0)) == (180, 180, 180)  # transparent on a gray square


def test_cmyk_converts(tmp_path: Path) -> None:
    im = Image.new("CMYK", (8, 8), (0, 255, 255, 0))
    path = tmp_path / "red.tif"
    im.save(path)
    p = prepare_image(path)
    assert p.source_mode == "CMYK"
    assert p.image.getpixel((3, 3)) == (255, 0, 0)


def test_animated_gif_keeps_first_frame() -> None:
    frames = [Image.new("RGB", (10, 10), c) for c in ((255, 0, 0), (0, 0, 255), (0, 255, 0))]
    buf = io.BytesIO()
    frames[0].save(buf, "GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)
    p = prepare_image(buf.getvalue())
    assert p.image.getpixel((5, 5)) == (255, 0, 0)


def test_palette_without_transparency_and_bilevel() -> None:
    pal = Image.new("P", (5, 5), 3)
    pal.putpalette([0, 0, 0, 10, 10, 10, 20, 20, 20, 30, 60, 90])
    assert prepare_image(pal).image.getpixel((2, 2)) == (30, 60, 90)
    one = Image.new("1", (5, 5), 1)
    assert prepare_image(one).image.getpixel((0, 0)) == (255, 255, 255)


def test_la_png_roundtrip(tmp_path: Path) -> None:
    la = Image.new("LA", (16, 16), (200, 0))
    path = tmp_path / "la.png"
    la.save(path)
    out = prepare_image(path).image
    assert out.getpixel((0, 0)) == (255, 255, 255) and out.getpixel((8, 0)) == (180, 180, 180)


# -- sources and result API ------------------------------------------------------------------


def test_sources_agree() -> None:
    path = DATA / "transparent.gif"
    raw = path.read_bytes()
    url = "data:image/gif;base64," + base64.b64encode(raw).decode()
    pil = Image.open(path)
    results = [
        prepare_image(str(path)),
        prepare_image(path),
        prepare_image(raw),
        prepare_image(bytearray(raw)),
        prepare_image(io.BytesIO(raw)),
        prepare_image(url),
        prepare_image(pil),
    ]
    first = results[0].image.tobytes()
    assert all(r.image.tobytes() == first for r in results)
    assert pil.mode == "P"  # the caller's image is not modified
    with path.open("rb") as fp:
        prepare_image(fp)
        assert not fp.closed  # a caller's file object stays open


def test_caller_image_not_returned() -> None:
    rgb = Image.new("RGB", (30, 20), (1, 2, 3))
    p = prepare_image(rgb)
    assert p.image is not rgb
    assert p.image.tobytes() == rgb.tobytes()


def test_png_bytes_and_data_url() -> None:
    p = prepare_image(DATA / "transparent.gif")
    png = p.png_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert p.png_bytes() is png  # cached
    again = Image.open(io.BytesIO(png))
    assert again.mode == "RGB" and again.size == (64, 48)
    assert again.tobytes() == p.image.tobytes()
    url = p.data_url()
    assert url.startswith("data:image/png;base64,")
    media_type, payload = decode_data_url(url)
    assert (media_type, payload) == ("image/png", png)
    assert Image.open(io.BytesIO(p.png_bytes(9))).tobytes() == p.image.tobytes()


def test_png_of_an_unresized_jpeg() -> None:
    p = prepare_image(DATA / "Landscape_1.jpg")  # RGB, no resize, no rotation: decoded as is
    again = Image.open(io.BytesIO(p.png_bytes()))
    assert again.size == (1800, 1200)
    assert again.tobytes() == p.image.tobytes()
    with Image.open(DATA / "Landscape_1.jpg") as im:
        assert p.image.tobytes() == im.convert("RGB").tobytes()


def test_prompt_and_fields() -> None:
    p = prepare_image(DATA / "transparent.gif")
    assert isinstance(p, PreparedImage)
    assert (p.width, p.height) == (64, 48)
    assert p.prompt == "<|media_begin|>image 64x48<|media_content|>" + "<|media_pad|>" * 6 + "<|media_end|>"


def test_token_count_is_for_the_size_sent() -> None:
    im = Image.new("RGB", (4293, 3219), (9, 9, 9))
    p = prepare_image(im)
    assert p.size == (4151, 3113)
    assert p.token_count == image_token_count(4151, 3113) == 16539  # not 16688: server resizes again
    fixed = prepare_image(im, MediaConfig(resize_to_fixed_point=True))
    assert fixed.size == (4139, 3103)
    assert fixed.token_count == 111 * 148


def test_data_url_percent_encoded() -> None:
    assert decode_data_url("data:,a%20b") == ("", b"a b")
    with pytest.raises(MediaDecodeError):
        decode_data_url("data:image/png;base64,@@@")
    with pytest.raises(MediaDecodeError):
        decode_data_url("data:image/png;base64")


# -- errors ----------------------------------------------------------------------------------


def test_decompression_bomb_header_raises_before_decoding() -> None:
    # The file has no image data: decoding would fail with MediaDecodeError, so getting
    # ImageTooLargeError shows the size was refused from the header alone.
    bomb = png_header_only(20000, 10000)  # 200,000,000 > 178,956,970
    with pytest.raises(ImageTooLargeError):
        prepare_image(bomb)
    with pytest.raises(MediaDecodeError):
        prepare_image(png_header_only(100, 100))


def test_configured_pixel_limit() -> None:
    with pytest.raises(ImageTooLargeError):
        prepare_image(png_header_only(100, 100), MediaConfig(max_image_pixels=9_999))
    with pytest.raises(ImageTooLargeError):
        prepare_image(Image.new("RGB", (100, 100)), MediaConfig(max_image_pixels=9_999))
    assert prepare_image(Image.new("RGB", (100, 100)), MediaConfig(max_image_pixels=10_000)).size == (100, 100)


def test_just_over_pillow_limit() -> None:
    # 13,380 x 13,375 = 178,957,500 pixels: 530 over Pillow's hard limit.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ImageTooLargeError):
            prepare_image(png_header_only(13380, 13375))


def test_corrupt_data() -> None:
    with pytest.raises(MediaDecodeError):
        prepare_image(b"definitely not an image")
    raw = (DATA / "rgba.png").read_bytes()
    with pytest.raises(MediaDecodeError):
        prepare_image(raw[: len(raw) // 2])
    assert issubclass(MediaDecodeError, MediaError)


def test_missing_path_and_bad_type(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        prepare_image(tmp_path / "nope.png")
    with pytest.raises(TypeError):
        prepare_image(12345)  # type: ignore[arg-type]


# -- EXIF orientation: exactly ImageOps.exif_transpose, once, for every format ----------------


def _marked(size: tuple[int, int] = (40, 20)) -> Image.Image:
    """Red image with a blue left quarter and a green top-left pixel block: any rotation or
    flip moves the marks somewhere else."""
    im = Image.new("RGB", size, (255, 0, 0))
    im.paste((0, 0, 255), (0, 0, size[0] // 4, size[1]))
    im.paste((0, 255, 0), (0, 0, 4, 4))
    return im


@pytest.mark.parametrize("fmt", ["TIFF", "JPEG", "PNG", "WEBP"])
@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientation_is_exif_transpose_for_every_format(fmt: str, orientation: int) -> None:
    from PIL import ImageOps

    exif = Image.Exif()
    exif[0x0112] = orientation
    buf = io.BytesIO()
    _marked().save(buf, fmt, exif=exif.tobytes(), **({"quality": 100} if fmt in ("JPEG", "WEBP") else {}))
    data = buf.getvalue()
    expected = ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB")
    p = prepare_image(data)
    swapped = orientation >= 5
    assert p.original_size == ((20, 40) if swapped else (40, 20)) == expected.size
    assert p.orientation == orientation
    assert p.image.tobytes() == expected.tobytes()  # rotated once (Pillow 13 orients TIFF on open)


def test_decompression_bomb_warning_as_error_is_image_too_large() -> None:
    bomb = png_header_only(10_000, 9_000)  # 90,000,000 pixels: over 89,478,485, under twice that
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # as under python -W error
        with pytest.raises(ImageTooLargeError, match="90000000 pixels"):
            prepare_image(bomb)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(MediaDecodeError):  # allowed through (a warning), then no pixel data
            prepare_image(bomb)
    assert [w.category for w in caught] == [Image.DecompressionBombWarning]
