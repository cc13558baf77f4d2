"""Benchmark kimik3.media against Pillow and the ffmpeg CLI, measured in the same run.

    .venv/bin/python bench/media.py [--quick] [--keep DIR] [--skip-video]

Images (goal <= 1.2x; feathered RGBA <= 1.3x): ``prepare_image`` of a generated 4032x3024 JPEG
and of two generated 2560x1440 RGBA PNGs (a cut-out with a wide feathered edge, 37 % of its pixels partly transparent,
and a window screenshot with anti-aliased rounded corners), against Pillow's own
``Image.open(path).load()`` + ``resize(size, BICUBIC)`` to the same NaViT size of the same file
(at K3's budget none of these is resized, so that is a copy; the decode alone is printed too).
A 6000x4000 JPEG (which K3 does downscale) is timed too, for information.

Where the time goes for RGBA: the blend over the chessboard is one ``Image.paste`` of the
RGBA image, alpha as mask, onto a new board (Pillow's rounded integer blend, within +0/+1 of the
reference's float32 truncation; kimik3/media/_image_pixels.py states the tolerance). Until
then the exact float32 table (65,536 entries, ``alpha * 256 + c``) cost about one more decode on
the feathered cut-out (1.9-2.1x).

Video (goal <= 1.0x): ``iter_video_chunks`` of a generated 60 s 1080p 30 fps H.264 clip at 8 fps
(frames converted to RGB, rotated and chunked, then dropped, like ``-f null``) against
``ffmpeg -i clip -vf fps=8 -f null -`` decoding the same clip. Skipped, with a message, when
``ffmpeg`` is not on PATH (Debian: ``apt-get install -y ffmpeg``).

Image timings are min/median/max of interleaved runs (>= 3); the ratio is of the medians, with
the min and max of the per-run ratios. Image ratios are CPU time (this process;
both sides are single-threaded, so CPU time is what wall time would be on an idle machine, and it
is not skewed by other load); wall-clock ratios are printed too. The video ratio is wall clock
(both sides decode with threads); CPU time (ffmpeg's from ``RUSAGE_CHILDREN``) is printed too.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw, ImageFilter

from kimik3.media import MediaConfig, iter_video_chunks, navit_size, prepare_image


def _photo(size: tuple[int, int]) -> Image.Image:
    """Photo-like RGB content: smooth gradients, texture and a few hard edges."""
    w, h = size
    small = (max(1, w // 8), max(1, h // 8))
    r = Image.linear_gradient("L").resize(small)
    g = Image.radial_gradient("L").resize(small)
    b = Image.effect_noise(small, 40).filter(ImageFilter.GaussianBlur(2))
    img = Image.merge("RGB", (r, g, b)).resize(size, Image.Resampling.BICUBIC)
    texture = Image.effect_noise(size, 12).convert("RGB")
    img = Image.blend(img, texture, 0.15)
    draw = ImageDraw.Draw(img)
    for i in range(12):
        x, y = (i * 7919) % w, (i * 104729) % h
        draw.ellipse((x, y, x + w // 10, y + h // 10), fill=((i * 40) % 256, (i * 90) % 256, 128))
    return img


def make_images(folder: Path) -> dict[str, Path]:
    paths = {}
    jpeg = folder / "photo_4032x3024.jpg"
    _photo((4032, 3024)).save(jpeg, quality=90)
    paths["jpeg"] = jpeg
    big = folder / "photo_6000x4000.jpg"
    _photo((6000, 4000)).save(big, quality=90)
    paths["jpeg_big"] = big
    w, h = 2560, 1440
    # 1. A cut-out with a feathered edge: ~55 % opaque, ~8 % transparent, ~37 % partly
    #    transparent in a wide band (the costliest realistic case: most tiles need the table).
    mask = Image.new("L", (w, h), 0)
    ImageDraw.Draw(mask).rounded_rectangle((160, 120, w - 160, h - 120), radius=90, fill=255)
    alpha = mask.filter(ImageFilter.GaussianBlur(40))
    alpha.paste(255, (260, 220, w - 260, h - 220))
    rgba = _photo((w, h))
    rgba.putalpha(alpha)
    rgba.save(folder / "cutout_2560x1440.png")
    paths["png"] = folder / "cutout_2560x1440.png"
    # 2. A window screenshot: opaque, with anti-aliased rounded transparent corners (partial
    #    alpha only in the four corner tiles).
    big_mask = Image.new("L", (2 * w, 2 * h), 0)
    ImageDraw.Draw(big_mask).rounded_rectangle((0, 0, 2 * w - 1, 2 * h - 1), radius=40, fill=255)
    shot = _photo((w, h))
    shot.putalpha(big_mask.resize((w, h), Image.Resampling.LANCZOS))
    shot.save(folder / "screenshot_2560x1440.png")
    paths["png_corners"] = folder / "screenshot_2560x1440.png"
    return paths


def timed(fn: Callable[[], Any]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process and its finished children) of one call."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    c0, t0 = time.process_time(), time.perf_counter()
    fn()
    t1, c1 = time.perf_counter(), time.process_time()
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    children = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    return t1 - t0, (c1 - c0) + children


def interleaved(
    base: Callable[[], Any], mine: Callable[[], Any], runs: int
) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """(wall, cpu) of each run of the baseline and of kimik3, interleaved."""
    b: list[tuple[float, float]] = []
    m: list[tuple[float, float]] = []
    for _ in range(runs):  # interleave, so load changes hit both sides
        b.append(timed(base))
        m.append(timed(mine))
    return b, m


def compare(base: Callable[[], Any], mine: Callable[[], Any], runs: int) -> tuple[float, float, float, float]:
    """Interleaved runs; returns best (wall, cpu) of the baseline and of kimik3."""
    b, m = interleaved(base, mine, runs)
    return min(x[0] for x in b), min(x[1] for x in b), min(x[0] for x in m), min(x[1] for x in m)


def _mmm(values: list[float]) -> str:
    """``min/median/max`` in ms."""
    return "/".join(f"{v * 1e3:.1f}" for v in (min(values), statistics.median(values), max(values)))


def bench_image(label: str, path: Path, runs: int) -> float:
    with Image.open(path) as probe:
        size = navit_size(*probe.size)

    def pillow() -> None:
        with Image.open(path) as im:
            im.load()
            im.resize(size, Image.Resampling.BICUBIC)

    def decode_only() -> None:
        with Image.open(path) as im:
            im.load()

    def ours() -> None:
        prepare_image(path)

    ours()  # warm caches (the board strip), as a long-running client would have them
    b, m = interleaved(pillow, ours, max(3, runs))
    bc, mc = [x[1] for x in b], [x[1] for x in m]
    ratio = statistics.median(mc) / statistics.median(bc)
    per_run = [y / x for x, y in zip(bc, mc, strict=True)]
    wall = statistics.median(x[0] for x in m) / statistics.median(x[0] for x in b)
    dec = min(timed(decode_only)[1] for _ in range(max(2, runs // 2)))
    print(
        f"{label:<40} pillow {_mmm(bc)} ms cpu (decode alone {dec * 1e3:5.1f})   kimik3 {_mmm(mc)} ms cpu   "
        f"ratio {ratio:.2f}x cpu (runs {min(per_run):.2f}-{max(per_run):.2f}), {wall:.2f}x wall"
    )
    return ratio


def make_clip(path: Path, seconds: int = 60) -> None:
    """60 s of 1920x1080 at 30 fps, H.264 High (x264 veryfast: B-frames), via PyAV."""
    import av
    from av.video.frame import PictureType

    out = av.open(str(path), "w")
    stream: Any = out.add_stream("libx264", rate=30)
    stream.width, stream.height, stream.pix_fmt = 1920, 1080, "yuv420p"
    stream.options = {"preset": "veryfast", "crf": "23"}
    try:
        src = av.open(f"testsrc2=size=1920x1080:rate=30:duration={seconds}", format="lavfi")
        frames: Any = (f.reformat(format="yuv420p") for f in src.decode(video=0))
    except Exception:  # no lavfi in this FFmpeg build: a moving Pillow pattern instead
        base = _photo((1920, 1080))

        def gen() -> Any:
            for i in range(seconds * 30):
                shifted = base.transform(base.size, Image.Transform.AFFINE, (1, 0, -4 * i, 0, 1, 0))
                yield av.VideoFrame.from_image(shifted).reformat(format="yuv420p")

        frames = gen()
    for i, frame in enumerate(frames):
        frame.pts, frame.time_base = i, Fraction(1, 30)
        frame.pict_type = PictureType.NONE  # let x264 choose I/P/B
        for packet in stream.encode(frame):
            out.mux(packet)
    for packet in stream.encode():
        out.mux(packet)
    out.close()


UNCAPPED = MediaConfig(max_video_samples=None, max_video_tokens=None)
"""K3's sampling without the per-video caps: the 60 s clip's 480 samples cost more than the default
131,072-token cap (``VideoTooLongError``, which stopped this script and ``make bench`` here); the
bench times decoding and sampling, which the caps do not change."""


def bench_video(clip: Path, runs: int) -> float | None:
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        print("video: SKIPPED - ffmpeg not found on PATH (Debian: apt-get install -y ffmpeg)")
        return None
    cmd = [ffmpeg, "-nostdin", "-v", "error", "-i", str(clip), "-vf", "fps=8", "-f", "null", "-"]

    def ff() -> None:
        subprocess.run(cmd, check=True)

    counts: dict[str, int] = {}

    def ours() -> None:
        n = chunks = 0
        for chunk in iter_video_chunks(clip, fps=8.0, config=UNCAPPED):
            n += len(chunk.frames)
            chunks += 1
        counts.update(frames=n, chunks=chunks)

    bw, bc, mw, mc = compare(ff, ours, runs)
    print(
        f"{'video 60 s 1080p30 H.264 @ 8 fps':<40} ffmpeg {bw:6.2f} s wall {bc:6.2f} s cpu   "
        f"kimik3 {mw:6.2f} s wall {mc:6.2f} s cpu   ratio {mw / bw:.2f}x wall, {mc / bc:.2f}x cpu"
        f"   ({counts['frames']} frames, {counts['chunks']} chunks)"
    )
    return mw / bw


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer runs")
    ap.add_argument("--keep", type=Path, help="generate/reuse the inputs in this folder")
    ap.add_argument("--skip-video", action="store_true")
    args = ap.parse_args()
    runs = 3 if args.quick else 7
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        t = time.perf_counter()
        images = make_images(folder)
        print(f"(generated test images in {time.perf_counter() - t:.1f} s)")
        r_jpeg = bench_image("JPEG 4032x3024 (no resize at K3)", images["jpeg"], runs)
        r_png = bench_image("RGBA PNG 2560x1440, feathered cut-out", images["png"], runs)
        r_shot = bench_image("RGBA PNG 2560x1440, rounded corners", images["png_corners"], runs)
        bench_image("JPEG 6000x4000 -> 4398x2932 (info)", images["jpeg_big"], max(3, runs // 2))
        r_video = None
        if not args.skip_video:
            clip = folder / "clip_60s_1080p30.mp4"
            if not clip.exists():
                t = time.perf_counter()
                make_clip(clip)
                print(f"(generated the 60 s clip in {time.perf_counter() - t:.1f} s)")
            r_video = bench_video(clip, 2 if args.quick else 3)
    print()
    print(
        f"image ratios (cpu): JPEG {r_jpeg:.2f}x   RGBA PNG feathered {r_png:.2f}x   "
        f"RGBA PNG rounded corners {r_shot:.2f}x   (goal <= 1.2x; feathered <= 1.3x)"
    )
    if r_video is not None:
        print(f"video ratio (wall): {r_video:.2f}x   (goal <= 1.0x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
