"""Video cost follows the timestamps, so it is capped: samples and tokens per video, stated in
the error; data: URLs are a video source."""

from __future__ import annotations

import base64
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import pytest
from PIL import Image

from kimik3 import MediaError, VideoTooLongError
from kimik3.media import MediaConfig, iter_video_chunks, sample_video
from kimik3.media._video import _iter_chunks
from kimik3.media._video_decode import DecodeStats

from .test_video import _level, _read_level, make_clip

NO_CAPS = MediaConfig(max_video_samples=None, max_video_tokens=None)


def a_day_apart(path: Path) -> Path:
    """Two frames, the second 86,400 s after the first (each packet lasting 0.1 s)."""
    out = av.open(str(path), "w")
    stream: Any = out.add_stream("libx264", rate=10)
    stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
    stream.codec_context.time_base = Fraction(1, 1000)
    for i, pts in enumerate([0, 86_400_000]):
        frame = av.VideoFrame.from_image(Image.new("RGB", (64, 48), (_level(i)[0],) * 3))
        frame.pts, frame.time_base = pts, Fraction(1, 1000)
        for packet in stream.encode(frame):
            out.mux(packet)
    for packet in stream.encode():
        out.mux(packet)
    out.close()
    return path


DAY_MESSAGE = (
    "the video gives 691,201 samples (86,400.100 s of timestamps at 8 fps), over the cap of 2,048 samples per "
    "video (MediaConfig.max_video_samples); sample fewer (max_frames, a lower fps) or raise the cap"
)


def test_two_frames_a_day_apart_are_refused_from_the_timestamps(tmp_path: Path) -> None:
    path = a_day_apart(tmp_path / "day.mkv")
    with pytest.raises(VideoTooLongError) as e:
        sample_video(path)
    assert str(e.value) == DAY_MESSAGE
    assert isinstance(e.value, MediaError)
    # explicit choices still work: a few samples, or the cap lifted with max_frames
    assert sample_video(path, max_frames=3).frame_indices == [0, 0, 0]
    assert sample_video(path, max_frames=3, config=NO_CAPS).frame_indices == [0, 0, 0]
    assert sample_video(path, fps=1 / 3600, max_frames=30).frame_indices == [0] * 24 + [1]


def test_the_plan_free_pass_stops_at_the_cap_too(tmp_path: Path) -> None:
    path = a_day_apart(tmp_path / "day.mkv")
    with pytest.raises(VideoTooLongError) as e:
        list(_iter_chunks(path, None, None, None, DecodeStats(), [], use_plan=False))
    assert str(e.value) == (
        "the video gives more than 2,048 samples (256.000 s of timestamps at 8 fps), over the cap of 2,048 samples "
        "per video (MediaConfig.max_video_samples); sample fewer (max_frames, a lower fps) or raise the cap"
    )


def test_sample_cap_is_configurable_and_exact(tmp_path: Path) -> None:
    clip = make_clip(tmp_path / "ten.mp4", 300, 30)  # 10 s at 8 fps: 80 samples
    assert len(sample_video(clip, config=MediaConfig(max_video_samples=80)).frame_indices) == 80
    with pytest.raises(VideoTooLongError, match=r"^the video gives 80 samples \(10\.000 s of timestamps at 8 fps\), "
                                                r"over the cap of 79 samples per video"):
        sample_video(clip, config=MediaConfig(max_video_samples=79))


def test_token_cap_names_the_chunk_that_crosses_it(tmp_path: Path) -> None:
    clip = make_clip(tmp_path / "ten.mp4", 300, 30)  # 20 chunks of 6 tokens (64x48: 3 x 2)
    assert sample_video(clip).token_count == 120
    assert sample_video(clip, config=MediaConfig(max_video_tokens=120)).token_count == 120
    chunks = iter_video_chunks(clip, config=MediaConfig(max_video_tokens=100))
    got = []
    with pytest.raises(VideoTooLongError) as e:
        for chunk in chunks:
            got.append(chunk.timestamp)
    assert str(e.value) == (
        "the video needs more than 100 tokens (its chunks up to 00:00:08.000 cost 102), over the cap of 100 tokens "
        "per video (MediaConfig.max_video_tokens; K3's context is the real limit); sample fewer (max_frames, a lower "
        "fps) or raise the cap"
    )
    assert len(got) == 16  # 16 chunks = 96 tokens were within the cap


def test_a_data_url_is_a_video_source(tmp_path: Path) -> None:
    clip = make_clip(tmp_path / "two.mp4", 60, 30)
    url = "data:video/mp4;base64," + base64.b64encode(clip.read_bytes()).decode("ascii")
    by_url, by_path = sample_video(url), sample_video(clip)
    assert by_url.frame_indices == by_path.frame_indices == [0, 3, 7, 11, 15, 18, 22, 26, 30, 33, 37, 41, 45, 48, 52, 56]
    assert [_read_level(f) for f in by_url.frames] == by_url.frame_indices
    with pytest.raises(MediaError, match="bad base64"):
        sample_video("data:video/mp4;base64,@@@")
