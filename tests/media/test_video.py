"""sample_video: timestamp sampling, rotation, chunks, sizes, errors (spec k3-media.md § Video).

Expected frame indices are derived from the rule t_k = start + k/8, "last frame with pts <= t_k",
and the streams' measured pts (tests/data/media/PROVENANCE.md)."""

from __future__ import annotations

import io
import math
import wave
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import pytest
from av.video.frame import PictureType
from PIL import Image

from kimik3 import MediaDecodeError, MediaError, NoVideoStreamError
from kimik3.media import MediaConfig, SampledVideo, iter_video_chunks, sample_video
from kimik3.media._video import _iter_chunks  # the plan-free pass, for equivalence
from kimik3.media._video_decode import DecodeStats

from ._helpers import DATA

ROTATED = DATA / "nasa_13013_rotated.mp4"
NON_ZERO = DATA / "test_non_zero_start.mp4"


def _level(i: int) -> tuple[int, int]:
    """Gray levels encoding frame number i in the left and right halves of the frame."""
    return 10 + 12 * (i // 20), 10 + 12 * (i % 20)


def _read_level(img: Image.Image) -> int:
    w, h = img.size
    left = img.getpixel((w // 4, h // 2))[0]  # type: ignore[index]
    right = img.getpixel((3 * w // 4, h // 2))[0]  # type: ignore[index]
    return round((left - 10) / 12) * 20 + round((right - 10) / 12)


def make_clip(path: Path, frames: int, fps: int, size: tuple[int, int] = (64, 48)) -> Path:
    """H.264 (with B-frames) clip whose frame i shows its own number as two gray levels."""
    out = av.open(str(path), "w")
    stream: Any = out.add_stream("libx264", rate=fps)
    stream.width, stream.height = size
    stream.pix_fmt = "yuv420p"
    stream.options = {"preset": "veryfast", "crf": "12", "bframes": "3"}
    w, h = size
    for i in range(frames):
        img = Image.new("RGB", size, (_level(i)[0],) * 3)
        img.paste((_level(i)[1],) * 3, (w // 2, 0, w, h))
        frame = av.VideoFrame.from_image(img)
        frame.pict_type = PictureType.NONE
        for packet in stream.encode(frame):
            out.mux(packet)
    for packet in stream.encode():
        out.mux(packet)
    out.close()
    return path


@pytest.fixture(scope="module")
def ten_seconds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_clip(tmp_path_factory.mktemp("video") / "ten.mp4", 300, 30)


# -- the fixture clips -----------------------------------------------------------------------


def test_rotated_clip() -> None:
    v = sample_video(ROTATED)
    assert isinstance(v, SampledVideo)
    # 17 frames, pts step 1001/30000 s from 0: end = 17 * 1001/30000 = 0.5672 s, so samples at
    # 0, .125, .25, .375, .5; frame = floor(t / 0.03337): 0, 3, 7, 11, 14.
    assert v.frame_indices == [0, 3, 7, 11, 14]
    assert v.times == [0.0, 0.125, 0.25, 0.375, 0.5]
    assert v.display_size == (270, 480)  # 480x270 stored, rotation 90
    assert v.rotation == 90
    assert v.start == 0.0
    assert v.duration == pytest.approx(17 * 1001 / 30000)
    assert [len(c.frames) for c in v.chunks] == [4, 1]
    assert [c.timestamp for c in v.chunks] == ["00:00:00.000", "00:00:00.500"]
    assert all(f.size == (270, 480) and f.mode == "RGB" for f in v.frames)
    # 270x480 fits the 16384-patch frame budget: ceil(270/28) * ceil(480/28) = 10 * 18 per chunk.
    assert [c.size for c in v.chunks] == [(270, 480), (270, 480)]
    assert [c.token_count for c in v.chunks] == [180, 180]
    assert v.token_count == 360
    assert v.chunks[0].frame_times == pytest.approx((0.0, 3003 / 30000, 7007 / 30000, 11011 / 30000))
    assert v.chunks[0].prompt == (
        "00:00:00.000<|media_begin|>video<|media_content|>" + "<|media_pad|>" * 180 + "<|media_end|>"
    )
    assert v.prompt == v.chunks[0].prompt + v.chunks[1].prompt


def test_rotation_direction() -> None:
    # PyAV reports the display matrix as 90 degrees counter-clockwise; the displayed frame is the
    # stored frame turned 90 degrees counter-clockwise (what the ffmpeg CLI shows).
    with av.open(str(ROTATED)) as container:
        stored = next(container.decode(video=0))
        assert stored.rotation == 90
        upright = stored.to_image().transpose(Image.Transpose.ROTATE_90)
    assert sample_video(ROTATED).frames[0].tobytes() == upright.tobytes()


def test_non_zero_start_clip() -> None:
    v = sample_video(NON_ZERO)
    # 12 frames every 1/30 s from 8.3330078125 s; end = start + 0.4 s: samples at +0, +.125,
    # +.25, +.375 pick frames floor(30 t) = 0, 3, 7, 11; times are relative to start.
    assert v.frame_indices == [0, 3, 7, 11]
    assert v.times == [0.0, 0.125, 0.25, 0.375]
    assert v.start == 8.3330078125
    assert v.duration == pytest.approx(0.4)
    assert v.display_size == (200, 112) and v.rotation == 0
    assert len(v.chunks) == 1 and v.chunks[0].timestamp == "00:00:00.000"
    assert v.chunks[0].token_count == 4 * 8  # ceil(112/28) * ceil(200/28)
    assert v.chunks[0].frame_times == pytest.approx((0.0, 0.1, 7 / 30, 11 / 30))


# -- generated clips -------------------------------------------------------------------------


def test_ten_seconds_at_30fps(ten_seconds: Path) -> None:
    v = sample_video(ten_seconds)
    # 300 frames, 1/30 s apart: end = 10.0 s -> k = 0..79, frame floor(k * 30 / 8).
    assert len(v.frames) == 80
    assert len(v.chunks) == 20
    assert all(len(c.frames) == 4 for c in v.chunks)
    assert v.frame_indices == [math.floor(k * 30 / 8) for k in range(80)]
    assert v.frame_indices[:6] == [0, 3, 7, 11, 15, 18]
    assert v.times == [k / 8 for k in range(80)]
    assert [c.timestamp for c in v.chunks][:3] == ["00:00:00.000", "00:00:00.500", "00:00:01.000"]
    assert v.chunks[-1].timestamp == "00:00:09.500"
    assert v.duration == pytest.approx(10.0)
    # The pixels are the picked frames: each frame shows its own number.
    assert [_read_level(f) for f in v.frames] == v.frame_indices
    # Decoding stopped after frame 296 (the last pick) and skipped unpicked non-reference frames.
    assert v.frames_decoded <= 297
    assert v.token_count == 20 * 6  # 64x48: ceil(48/28) * ceil(64/28) = 2 * 3 per chunk


def test_planned_and_plain_passes_agree(ten_seconds: Path) -> None:
    planned = list(iter_video_chunks(ten_seconds))
    plain_stats = DecodeStats()
    plain = list(_iter_chunks(ten_seconds, None, None, None, plain_stats, [], use_plan=False))
    assert plain_stats.frames_decoded == 300
    assert [c.frame_indices for c in planned] == [c.frame_indices for c in plain]
    assert [f.tobytes() for c in planned for f in c.frames] == [f.tobytes() for c in plain for f in c.frames]
    assert [c.timestamp for c in planned] == [c.timestamp for c in plain]


def test_max_frames_stops_early(ten_seconds: Path) -> None:
    v = sample_video(ten_seconds, max_frames=5)
    assert v.frame_indices == [0, 3, 7, 11, 15]
    assert [len(c.frames) for c in v.chunks] == [4, 1]
    assert v.frames_decoded <= 16
    stats = DecodeStats()
    plain = list(_iter_chunks(ten_seconds, None, None, 5, stats, [], use_plan=False))
    assert [i for c in plain for i in c.frame_indices] == [0, 3, 7, 11, 15]
    assert stats.frames_decoded == 17  # stops at the first frame past the 5th sample


def test_variable_frame_rate_mkv(tmp_path: Path) -> None:
    # Frames at 0, 0.1, 0.5, 0.55 and 1.0 s (each packet lasting 0.1 s): end = 1.1 s, samples at
    # k/8 for k = 0..8 pick 0, 1, 1, 1, 2, 3, 3, 3, 4.
    path = tmp_path / "vfr.mkv"
    out = av.open(str(path), "w")
    stream: Any = out.add_stream("libx264", rate=10)
    stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
    stream.codec_context.time_base = Fraction(1, 1000)
    for i, pts in enumerate([0, 100, 500, 550, 1000]):
        frame = av.VideoFrame.from_image(Image.new("RGB", (64, 48), (_level(i)[0],) * 3))
        frame.pts, frame.time_base = pts, Fraction(1, 1000)
        for packet in stream.encode(frame):
            out.mux(packet)
    for packet in stream.encode():
        out.mux(packet)
    out.close()
    with av.open(str(path)) as container:
        assert container.streams.video[0].frames == 0  # Matroska: no frame count to trust
    v = sample_video(path)
    assert v.frame_indices == [0, 1, 1, 1, 2, 3, 3, 3, 4]
    assert v.duration == pytest.approx(1.1)
    frames = v.frames
    assert frames[1] is frames[2] is frames[3]  # one frame, converted once


def test_fps_argument_and_config_rate() -> None:
    assert sample_video(ROTATED, fps=2).frame_indices == [0, 14]  # t = 0, 0.5
    four = MediaConfig(sample_fps=4.0)
    assert sample_video(ROTATED, config=four).frame_indices == [0, 7, 14]  # t = 0, .25, .5
    assert sample_video(ROTATED, fps=8, config=four).frame_indices == [0, 3, 7, 11, 14]


def test_per_chunk_budget() -> None:
    cfg = MediaConfig(in_patch_limit_video=800)
    v = sample_video(ROTATED, config=cfg)
    # 4-frame chunk: budget round(800 / 4) = 200 patches; 270x480 has 19 * 34 = 646, so
    # s1 = sqrt(200 / 646) = 0.5564: 270 -> 150, 480 -> 267; 6 * 10 tokens.
    # 1-frame chunk: budget min(800, 16384) = 800 >= 646: no resize; 180 tokens.
    assert [c.size for c in v.chunks] == [(150, 267), (270, 480)]
    assert [c.token_count for c in v.chunks] == [60, 180]
    assert all(f.size == (150, 267) for f in v.chunks[0].frames)


def test_sources_agree(tmp_path: Path) -> None:
    raw = NON_ZERO.read_bytes()

    class NoSeek(io.RawIOBase):
        def __init__(self, data: bytes) -> None:
            self._inner = io.BytesIO(data)

        def readable(self) -> bool:
            return True

        def seekable(self) -> bool:
            return False

        def readinto(self, b: Any) -> int:
            return self._inner.readinto(b)

    results = [
        sample_video(NON_ZERO),
        sample_video(str(NON_ZERO)),
        sample_video(raw),
        sample_video(io.BytesIO(raw)),
        sample_video(NoSeek(raw)),  # type: ignore[arg-type]
    ]
    first = [f.tobytes() for f in results[0].frames]
    for r in results:
        assert r.frame_indices == [0, 3, 7, 11]
        assert [f.tobytes() for f in r.frames] == first


# -- errors ----------------------------------------------------------------------------------


def test_audio_only_file_has_no_video_stream(tmp_path: Path) -> None:
    path = tmp_path / "tone.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(b"\x00\x10" * 8000)
    with pytest.raises(NoVideoStreamError):
        sample_video(path)


def test_audio_only_m4a_from_pyav(tmp_path: Path) -> None:
    path = tmp_path / "tone.m4a"
    out = av.open(str(path), "w")
    stream: Any = out.add_stream("aac", rate=16000)
    frame = av.AudioFrame(format="fltp", layout="mono", samples=1024)
    frame.sample_rate = 16000
    for plane in frame.planes:
        plane.update(bytes(plane.buffer_size))
    for i in range(10):
        frame.pts = i * 1024
        for packet in stream.encode(frame):
            out.mux(packet)
    for packet in stream.encode():
        out.mux(packet)
    out.close()
    with pytest.raises(NoVideoStreamError):
        sample_video(path)


def test_corrupt_files() -> None:
    with pytest.raises(MediaDecodeError):
        sample_video(b"\x00\x00\x00\x18ftypmp42" + bytes(range(256)) * 20)
    raw = ROTATED.read_bytes()
    with pytest.raises(MediaDecodeError):
        sample_video(raw[: len(raw) // 2])


def test_argument_errors(tmp_path: Path) -> None:
    with pytest.raises(MediaError):
        sample_video(ROTATED, fps=0)
    with pytest.raises(MediaError):
        sample_video(ROTATED, max_frames=0)
    with pytest.raises(MediaError):
        sample_video(ROTATED, config=MediaConfig(timestamp_mode="seconds"))
    with pytest.raises(FileNotFoundError):
        sample_video(tmp_path / "missing.mp4")
    with pytest.raises(TypeError):
        sample_video(3.5)  # type: ignore[arg-type]


def test_plan_mismatch_falls_back_to_a_plain_decode(
    ten_seconds: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import kimik3.media._video_decode as video

    real = video._make_plan

    def wrong_plan(*args: Any) -> Any:
        plan = real(*args)
        plan.order[3] += 1  # frame 3 (picked by sample 1) now has a pts the decoder never shows
        return plan

    monkeypatch.setattr(video, "_make_plan", wrong_plan)
    v = sample_video(ten_seconds, max_frames=12)
    assert v.frame_indices == [0, 3, 7, 11, 15, 18, 22, 26, 30, 33, 37, 41]
    assert [_read_level(f) for f in v.frames] == v.frame_indices


def test_abandoning_the_iterator(ten_seconds: Path) -> None:
    chunks = iter_video_chunks(ten_seconds)
    first = next(chunks)
    assert first.frame_indices == (0, 3, 7, 11)
    chunks.close()  # stops decoding; the worker thread and the container are released
