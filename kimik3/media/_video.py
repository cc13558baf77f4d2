"""Video sampled the way K3's config says (docs/k3-format.md § Video).

Sampling is by timestamp, never by frame count or nominal rate: with ``start`` the first frame's
pts and ``end`` the last frame's pts plus its duration, the sample times are
``t_k = start + k / fps`` for ``k = 0, 1, ...`` while ``t_k < end``, and sample ``k`` is the last
decoded frame with ``pts <= t_k``. All time arithmetic is exact (``fractions.Fraction`` of
``pts * time_base``). Samples are grouped into chunks of ``temporal_merge_kernel_size`` (4); every
frame of a chunk is resized to the NaViT size of the chunk's first frame under the per-frame
budget ``min(round(in_patch_limit_video / len(chunk)), in_patch_limit_each_frame)``, and a chunk
costs the tokens of one frame at that size.

How the decoding is done (results are the same either way):

* Plan first: the container is demuxed without decoding (cheap) to list every packet's pts and
  duration, which gives ``start``, ``end`` and the frames the samples will pick. The decode pass
  then converts only those frames to RGB, tells the decoder to skip non-reference frames nobody
  picks (their pixels cannot influence any other frame) and stops right after the last picked
  frame. The decoded frames are checked against the plan (increasing pts, all from the packet
  list, every picked frame present); on any mismatch the video is decoded again without a plan.
  Picked frames are converted on one worker thread while the decoder keeps going; threading of
  the decoder itself is ``thread_type = "AUTO"`` (frame and slice threads).
* Without a usable plan (packets without pts, duplicate pts, a source that cannot be read twice
  is first read into memory) the frames are sampled in one forward pass with the rule above.

Rotation metadata (the display matrix) is applied to each sampled frame as the ffmpeg CLI
applies it: a 480x270 stream with rotation 90 gives 270x480 frames. Pixel aspect ratio is not
applied (frames keep their stored pixel grid), nor are rotations that are not multiples of 90.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction

from PIL import Image

from .._exceptions import MediaDecodeError, MediaError, VideoTooLongError
from ._config import K3_MEDIA_CONFIG, MediaConfig
from ._sizes import MEDIA_BEGIN, MEDIA_CONTENT, MEDIA_END, MEDIA_PAD, navit_size
from ._video_decode import DecodeStats, FrameSample, ReopenableSource, VideoSource, sample_frames, too_many_samples

__all__ = [
    "SampledVideo",
    "VideoChunk",
    "format_timestamp",
    "iter_video_chunks",
    "sample_video",
    "video_chunk_prompt",
]


def format_timestamp(seconds: Fraction | float, mode: str = "hh:mm:ss.fff") -> str:
    """``HH:MM:SS.mmm`` of a time in seconds, milliseconds truncated (docs/k3-format.md § Video).

    Args:
        seconds: a non-negative, finite time in seconds (exact when a ``Fraction``).
        mode: ``timestamp_mode`` of the config; only "hh:mm:ss.fff" is defined.

    Raises:
        MediaError: another ``mode``; a negative time (``-1`` would print as ``-1:59:59.000``),
            NaN or infinity.
    """
    if mode != "hh:mm:ss.fff":
        raise MediaError(f"unsupported timestamp_mode {mode!r} (only 'hh:mm:ss.fff')")
    try:
        exact = Fraction(seconds)
    except (ValueError, OverflowError, TypeError):
        raise MediaError(f"a timestamp must be a finite number of seconds, got {seconds!r}") from None
    if exact < 0:
        raise MediaError(f"a timestamp cannot be negative, got {seconds!r} s")
    ms = math.floor(exact * 1000)
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs, millis = divmod(rest, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}.{millis:03d}"


def video_chunk_prompt(timestamp: str, token_count: int, *, expand: bool = True) -> str:
    """K3's prompt text for one video chunk (docs/k3-format.md § Video).

    ``{timestamp}<|media_begin|>video<|media_content|>`` + pads + ``<|media_end|>``.

    Args:
        timestamp: ``HH:MM:SS.mmm`` of the chunk's first frame.
        token_count: tokens of the chunk (one frame at the chunk's size).
        expand: True (default) writes ``token_count`` pads, as the image prompt does; False
            writes the single ``<|media_pad|>`` placeholder that a serving processor expands.
    """
    pads = MEDIA_PAD * token_count if expand else MEDIA_PAD
    return f"{timestamp}{MEDIA_BEGIN}video{MEDIA_CONTENT}{pads}{MEDIA_END}"


@dataclass(frozen=True, eq=False)
class VideoChunk:
    """Up to ``temporal_merge_kernel_size`` consecutive samples that K3 encodes together.

    Attributes:
        frames: RGB PIL images, all of size ``size`` (a frame picked by several samples appears
            once per sample, as the same object).
        frame_indices: index of each picked frame in the stream's frame order (0-based, the
            order frames leave the decoder, i.e. presentation order).
        times: sample times ``t_k - start`` in seconds (``k / fps``).
        frame_times: presentation times of the picked frames, ``pts - start``, in seconds.
        timestamp: ``HH:MM:SS.mmm`` of the first sample time (milliseconds truncated).
        size: ``(width, height)`` of every frame in pixels, after rotation and resize.
        token_count: tokens of the chunk: one frame at ``size``, ``ceil(h/28) * ceil(w/28)``.
    """

    frames: tuple[Image.Image, ...]
    frame_indices: tuple[int, ...]
    times: tuple[float, ...]
    frame_times: tuple[float, ...]
    timestamp: str
    size: tuple[int, int]
    token_count: int

    @property
    def prompt(self) -> str:
        """K3 prompt text of the chunk (:func:`video_chunk_prompt`, pads expanded)."""
        return video_chunk_prompt(self.timestamp, self.token_count)


@dataclass(frozen=True, eq=False)
class SampledVideo:
    """A video sampled at ``fps`` and cut into chunks (docs/k3-format.md § Video).

    Attributes:
        chunks: the chunks in time order.
        fps: sampling rate in frames per second.
        start: pts of the first frame in seconds (stream time, not necessarily 0).
        duration: ``end - start`` in seconds, ``end`` = last frame's pts + its duration (when
            ``max_frames`` stopped a plan-free decode early: up to the last decoded frame).
        display_size: ``(width, height)`` of the first sampled frame after rotation, before
            the resize.
        rotation: counter-clockwise rotation of the display matrix in degrees (as PyAV's
            ``VideoFrame.rotation``), 0 when none.
        frames_decoded: frames the decoder produced (skipped and never-reached frames are not
            counted).
    """

    chunks: tuple[VideoChunk, ...]
    fps: float
    start: float
    duration: float
    display_size: tuple[int, int]
    rotation: int
    frames_decoded: int

    @property
    def frame_indices(self) -> list[int]:
        """Index of the frame picked by every sample, in sample order."""
        return [i for c in self.chunks for i in c.frame_indices]

    @property
    def times(self) -> list[float]:
        """Every sample time relative to ``start``, in seconds."""
        return [t for c in self.chunks for t in c.times]

    @property
    def frames(self) -> list[Image.Image]:
        """Every sampled (resized) frame, in sample order."""
        return [f for c in self.chunks for f in c.frames]

    @property
    def token_count(self) -> int:
        """Sum of the chunks' token counts."""
        return sum(c.token_count for c in self.chunks)

    @property
    def prompt(self) -> str:
        """The chunk prompts, concatenated."""
        return "".join(c.prompt for c in self.chunks)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _chunk(
    group: list[FrameSample], start_time: Fraction, step: Fraction, config: MediaConfig
) -> VideoChunk:
    first = group[0].image
    budget = config.in_patch_limit_each_frame
    if config.in_patch_limit_video is not None:
        budget = min(round(config.in_patch_limit_video / len(group)), budget)
    size = navit_size(first.width, first.height, config, patch_limit=budget)
    resized: dict[int, Image.Image] = {}
    frames = []
    for s in group:
        img = resized.get(id(s.image))
        if img is None:
            img = resized[id(s.image)] = (
                s.image if s.image.size == size else s.image.resize(size, Image.Resampling.BICUBIC)
            )
        frames.append(img)
    side = config.token_side
    return VideoChunk(
        frames=tuple(frames),
        frame_indices=tuple(s.index for s in group),
        times=tuple(float(s.k * step) for s in group),
        frame_times=tuple(float(s.pts_time - start_time) for s in group),
        timestamp=format_timestamp(group[0].k * step, config.timestamp_mode),
        size=size,
        token_count=_ceil_div(size[0], side) * _ceil_div(size[1], side),
    )


def _iter_chunks(
    source: VideoSource,
    fps: float | None,
    config: MediaConfig | None,
    max_frames: int | None,
    stats: DecodeStats,
    first: list[FrameSample],
    use_plan: bool = True,
) -> Iterator[VideoChunk]:
    cfg = config or K3_MEDIA_CONFIG
    rate = cfg.sample_fps if fps is None else fps
    if not rate > 0 or not math.isfinite(rate):
        raise MediaError(f"fps must be a positive number, got {rate!r}")
    if max_frames is not None and max_frames < 1:
        raise MediaError(f"max_frames must be >= 1, got {max_frames}")
    format_timestamp(0, cfg.timestamp_mode)  # reject an unknown mode before decoding
    step = 1 / Fraction(rate)
    src = ReopenableSource(source)
    group: list[FrameSample] = []
    size = cfg.temporal_merge_kernel_size
    cap, token_cap = cfg.max_video_samples, cfg.max_video_tokens
    tokens = 0

    def checked(chunk: VideoChunk) -> VideoChunk:
        nonlocal tokens
        tokens += chunk.token_count
        if token_cap is not None and tokens > token_cap:
            raise VideoTooLongError(
                f"the video needs more than {token_cap:,} tokens (its chunks up to {chunk.timestamp} cost {tokens:,}), "
                f"over the cap of {token_cap:,} tokens per video (MediaConfig.max_video_tokens; K3's context is the "
                "real limit); sample fewer (max_frames, a lower fps) or raise the cap"
            )
        return chunk

    for sample in sample_frames(src, step, max_frames, stats, use_plan=use_plan, cap=cap):
        if cap is not None and sample.k >= cap:  # a plan-free decode: counted as it goes
            raise too_many_samples(f"more than {cap:,}", cap, step, sample.k * step)
        if not first:
            first.append(sample)
        group.append(sample)
        if len(group) == size:
            yield checked(_chunk(group, stats.start, step, cfg))
            group = []
    if group:
        yield checked(_chunk(group, stats.start, step, cfg))
    if not first:
        raise MediaDecodeError("the video stream has no decodable frames")


def iter_video_chunks(
    source: VideoSource,
    fps: float | None = None,
    config: MediaConfig | None = None,
    *,
    max_frames: int | None = None,
) -> Iterator[VideoChunk]:
    """Like :func:`sample_video`, but yields each chunk as soon as it is complete.

    Memory stays bounded by one chunk (plus the plan), whatever the video's length.

    Raises:
        The errors of :func:`sample_video`, when the iteration reaches them.
    """
    yield from _iter_chunks(source, fps, config, max_frames, DecodeStats(), [])


def sample_video(
    source: VideoSource,
    fps: float | None = None,
    config: MediaConfig | None = None,
    *,
    max_frames: int | None = None,
) -> SampledVideo:
    """Decode a video and sample it the way K3's config says (docs/k3-format.md § Video).

    Args:
        source: a path (str / PathLike), encoded bytes or a binary file object (read from its
            position; read into memory first when it cannot seek).
        fps: samples per second; ``config.sample_fps`` (8.0) when ``None``.
        config: K3 defaults when ``None``; uses ``temporal_merge_kernel_size``,
            ``in_patch_limit_video``, ``in_patch_limit_each_frame``, ``timestamp_mode`` and the
            NaViT numbers.
        max_frames: keep only the first ``max_frames`` samples (decoding stops there).

    Returns:
        A :class:`SampledVideo`. Example: a 10 s, 30 fps clip at 8 fps gives 80 samples (frames
        0, 3, 7, 11, 15, ...) in 20 chunks.

    Raises:
        NoVideoStreamError: the container has no video stream.
        MediaDecodeError: a corrupt or unsupported file, or no decodable frame.
        MediaError: ``fps`` or ``max_frames`` not positive, an unknown ``timestamp_mode``.
        FileNotFoundError: a path that does not exist.
        TypeError: an unsupported source type.

    Memory: every sampled frame is kept (a 1080p RGB frame is about 8 MB in Pillow); use
    :func:`iter_video_chunks` or ``max_frames`` for long videos.
    """
    stats = DecodeStats()
    first: list[FrameSample] = []
    chunks = tuple(_iter_chunks(source, fps, config, max_frames, stats, first))
    cfg = config or K3_MEDIA_CONFIG
    return SampledVideo(
        chunks=chunks,
        fps=float(cfg.sample_fps if fps is None else fps),
        start=float(stats.start),
        duration=float(stats.end - stats.start),
        display_size=first[0].image.size,
        rotation=first[0].rotation,
        frames_decoded=stats.frames_decoded,
    )
