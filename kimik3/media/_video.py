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

import bisect
import io
import math
import os
import struct
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from fractions import Fraction
from typing import IO, Any, TypeAlias

import av
from PIL import Image

from .._exceptions import MediaDecodeError, MediaError, NoVideoStreamError, VideoTooLongError
from ._config import K3_MEDIA_CONFIG, MediaConfig
from ._image import MEDIA_BEGIN, MEDIA_CONTENT, MEDIA_END, MEDIA_PAD, decode_data_url, navit_size

__all__ = [
    "SampledVideo",
    "VideoChunk",
    "VideoSource",
    "format_timestamp",
    "iter_video_chunks",
    "sample_video",
    "video_chunk_prompt",
]

VideoSource: TypeAlias = "str | os.PathLike[str] | bytes | bytearray | memoryview | IO[bytes]"
"""What :func:`sample_video` accepts: a path, a ``data:`` URL (str), encoded bytes or a binary
file object."""


def format_timestamp(seconds: Fraction | float, mode: str = "hh:mm:ss.fff") -> str:
    """``HH:MM:SS.mmm`` of a time in seconds, milliseconds truncated (docs/k3-format.md § Video).

    Args:
        seconds: a non-negative time in seconds (exact when a ``Fraction``).
        mode: ``timestamp_mode`` of the config; only "hh:mm:ss.fff" is defined.

    Raises:
        MediaError: another ``mode``.
    """
    if mode != "hh:mm:ss.fff":
        raise MediaError(f"unsupported timestamp_mode {mode!r} (only 'hh:mm:ss.fff')")
    ms = math.floor(Fraction(seconds) * 1000)
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


# -- decoding helpers ------------------------------------------------------------------------


_DISPLAYMATRIX = "DISPLAYMATRIX"


def _display_matrix(frame: Any) -> tuple[int, ...] | None:
    for sd in getattr(frame, "side_data", ()):
        kind = getattr(sd, "type", None)
        if getattr(kind, "name", None) == _DISPLAYMATRIX:
            raw = bytes(sd)
            if len(raw) >= 36:
                return struct.unpack("=9i", raw[:36])
    return None


def _orientation_ops(matrix: tuple[int, ...] | None) -> tuple[tuple[Image.Transpose, ...], int]:
    """Transposes that display a frame, and its CCW rotation in degrees.

    Mirrors the ffmpeg CLI's autorotate (``fftools``): theta = -round(av_display_rotation_get)
    modulo 360; 90 -> "clock" (or "cclock_flip" when ``m[3] > 0``), 180 -> hflip if ``m[0] < 0``
    and vflip if ``m[4] < 0``, 270 -> "cclock" (or "clock_flip" when ``m[3] < 0``), 0 -> vflip if
    ``m[4] < 0``. Other angles are left alone.
    """
    if matrix is None:
        return (), 0
    m = matrix
    sx = math.hypot(m[0], m[3])
    sy = math.hypot(m[1], m[4])
    if sx == 0 or sy == 0:
        return (), 0
    ccw = -math.degrees(math.atan2(m[1] / sy, m[0] / sx))
    theta = float(-round(ccw))
    theta -= 360 * math.floor(theta / 360 + 0.9 / 360)
    rotation = round(ccw)
    T = Image.Transpose
    if abs(theta - 90) < 1:
        return ((T.TRANSPOSE,) if m[3] > 0 else (T.ROTATE_270,)), rotation
    if abs(theta - 180) < 1:
        ops = []
        if m[0] < 0:
            ops.append(T.FLIP_LEFT_RIGHT)
        if m[4] < 0:
            ops.append(T.FLIP_TOP_BOTTOM)
        return tuple(ops), rotation
    if abs(theta - 270) < 1:
        return ((T.TRANSVERSE,) if m[3] < 0 else (T.ROTATE_90,)), rotation
    if abs(theta) > 1:
        return (), rotation
    return ((T.FLIP_TOP_BOTTOM,) if m[4] < 0 else ()), rotation


def _to_image(frame: Any) -> Image.Image:
    """One decoded frame -> RGB PIL image (the same pixels as ``VideoFrame.to_image()``)."""
    rgb = frame.reformat(format="rgb24")
    plane = rgb.planes[0]
    if plane.line_size <= 0:  # bottom-up layout: let PyAV handle it
        image: Image.Image = rgb.to_image()
        return image
    return Image.frombytes("RGB", (rgb.width, rgb.height), memoryview(plane), "raw", "RGB", plane.line_size, 1)


def _display_image(frame: Any) -> tuple[Image.Image, int]:
    ops, rotation = _orientation_ops(_display_matrix(frame))
    image = _to_image(frame)
    for op in ops:
        image = image.transpose(op)
    return image, rotation


class _Source:
    """Re-openable access to a video source (the plan pass and the decode pass each open it)."""

    def __init__(self, source: VideoSource) -> None:
        self._path: str | None = None
        self._data: bytes | None = None
        self._fp: IO[bytes] | None = None
        self._pos = 0
        if isinstance(source, str) and source.startswith("data:"):
            self._data = decode_data_url(source)[1]
        elif isinstance(source, (str, os.PathLike)):
            path = os.fspath(source)
            if not os.path.isfile(path):
                raise FileNotFoundError(path)
            self._path = path
        elif isinstance(source, (bytes, bytearray, memoryview)):
            self._data = bytes(source)
        elif hasattr(source, "read"):
            seekable = getattr(source, "seekable", None)
            if callable(seekable) and seekable():
                self._fp = source
                self._pos = source.tell()
            else:
                self._data = source.read()
        else:
            raise TypeError(f"cannot read a video from {type(source).__name__}")

    def open(self) -> Any:
        target: Any
        if self._path is not None:
            target = self._path
        elif self._data is not None:
            target = io.BytesIO(self._data)
        else:
            assert self._fp is not None
            self._fp.seek(self._pos)
            target = self._fp
        try:
            return av.open(target, mode="r")
        except av.FFmpegError as e:
            raise MediaDecodeError(f"cannot open video: {e}") from e


def _video_stream(container: Any) -> Any:
    streams = container.streams.video
    if not streams:
        raise NoVideoStreamError("the container has no video stream")
    return streams[0]


@dataclass
class _Sample:
    k: int  # sample number: t_k = start + k / fps
    index: int  # index of the picked frame in frame order
    pts_time: Fraction  # the picked frame's pts in seconds
    image: Image.Image  # RGB, rotation applied, not resized
    rotation: int


@dataclass
class _Stats:
    frames_decoded: int = 0
    start: Fraction = Fraction(0)
    end: Fraction = Fraction(0)


@dataclass
class _Plan:
    time_base: Fraction
    order: list[int]  # every packet pts, sorted: presentation order
    picks: list[int]  # per sample k: position in ``order`` of the picked frame
    start: Fraction
    end: Fraction


def _sample_count(start: Fraction, end: Fraction, step: Fraction, limit: int | None) -> int:
    """Number of k >= 0 with start + k*step < end (capped by ``limit``)."""
    if end <= start:
        return 0
    n = math.ceil((end - start) / step)  # smallest n with start + n*step >= end
    return n if limit is None else min(n, limit)


def _too_many_samples(count: str, cap: int, step: Fraction, seconds: Fraction) -> VideoTooLongError:
    return VideoTooLongError(
        f"the video gives {count} samples ({float(seconds):,.3f} s of timestamps at {float(1 / step):g} fps), over "
        f"the cap of {cap:,} samples per video (MediaConfig.max_video_samples); sample fewer (max_frames, a lower "
        "fps) or raise the cap"
    )


def _make_plan(source: _Source, step: Fraction, max_frames: int | None, cap: int | None = None) -> _Plan | None:
    """Demux (no decoding) and work out which frame every sample picks; None if unsure."""
    container = source.open()
    try:
        stream = _video_stream(container)
        if stream.time_base is None:
            return None
        time_base = Fraction(stream.time_base)
        durations: dict[int, int] = {}
        for packet in container.demux(stream):
            if packet.size == 0 or packet.is_discard:
                continue
            if packet.pts is None or packet.pts in durations:
                return None
            durations[packet.pts] = packet.duration or 0
    except av.FFmpegError:
        return None  # the plain pass reports it
    finally:
        container.close()
    if not durations:
        return None
    order = sorted(durations)
    last = order[-1]
    last_duration = durations[last] or (last - order[-2] if len(order) > 1 else 0)
    if last_duration <= 0:
        return None
    times = [p * time_base for p in order]
    start, end = times[0], (last + last_duration) * time_base
    n = _sample_count(start, end, step, max_frames)
    if cap is not None and n > cap:  # from the timestamps alone, before any decoding
        raise _too_many_samples(f"{n:,}", cap, step, end - start)
    picks = [bisect.bisect_right(times, start + k * step) - 1 for k in range(n)]
    return _Plan(time_base=time_base, order=order, picks=picks, start=start, end=end)


class _PlanMismatch(Exception):
    """The decoder did not produce the frames the packet list promised."""


_IN_FLIGHT = 6  # picked frames converted ahead on the worker thread (bounds memory)


def _decode_planned(source: _Source, plan: _Plan, stats: _Stats) -> Iterator[_Sample]:
    """Decode following ``plan``: convert only picked frames, skip unpicked non-reference
    frames, stop after the last pick. Raises _PlanMismatch as soon as the frames disagree.

    Picked frames are converted to RGB on one worker thread (the conversion releases the GIL),
    so the decoder keeps receiving packets meanwhile; samples are still yielded in order.
    """
    order, picks = plan.order, plan.picks
    position = {p: i for i, p in enumerate(order)}
    needed = {order[j] for j in picks}
    stats.start, stats.end = plan.start, plan.end
    k_next = 0  # next sample whose frame is still to come
    k_out = 0  # next sample to yield
    previous = -1  # position of the previous decoded frame
    queue: deque[tuple[int, Future[tuple[Image.Image, int]]]] = deque()

    def ready(force: bool) -> Iterator[_Sample]:
        nonlocal k_out
        while queue and (force or len(queue) > _IN_FLIGHT or queue[0][1].done()):
            pos, future = queue.popleft()
            image, rotation = future.result()
            pts_time = order[pos] * plan.time_base
            while k_out < len(picks) and picks[k_out] == pos:
                yield _Sample(k_out, pos, pts_time, image, rotation)
                k_out += 1

    container = source.open()
    try:
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="kimik3-video") as pool:
            stream = _video_stream(container)
            stream.thread_type = "AUTO"
            ctx = stream.codec_context
            for packet in container.demux(stream):
                if packet.pts is not None:
                    ctx.skip_frame = "DEFAULT" if packet.pts in needed else "NONREF"
                for frame in packet.decode():
                    stats.frames_decoded += 1
                    pos = position.get(frame.pts) if frame.pts is not None else None
                    if pos is None or pos <= previous or pos > picks[k_next]:
                        raise _PlanMismatch  # unknown pts, out of order, or a pick missing
                    previous = pos
                    if pos == picks[k_next]:
                        queue.append((pos, pool.submit(_display_image, frame)))
                        while k_next < len(picks) and picks[k_next] == pos:
                            k_next += 1
                        if k_next == len(picks):
                            yield from ready(force=True)
                            return  # decoding stops after the last sample
                    yield from ready(force=False)
    except av.FFmpegError as e:
        raise MediaDecodeError(f"cannot decode video: {e}") from e
    finally:
        container.close()
    raise _PlanMismatch  # the stream ended before the last picked frame


def _decode_plain(
    source: _Source, step: Fraction, max_frames: int | None, stats: _Stats
) -> Iterator[_Sample]:
    """One forward pass with the spec's rule: sample k = last decoded frame with pts <= t_k."""
    container = source.open()
    try:
        stream = _video_stream(container)
        stream.thread_type = "AUTO"
        time_base = Fraction(stream.time_base) if stream.time_base is not None else Fraction(1, 90000)
        rate = stream.average_rate
        k = 0
        start: Fraction | None = None
        pending: Any = None  # the last decoded frame, not yet superseded
        pending_index = -1
        pending_time = Fraction(0)
        pending_image: tuple[Image.Image, int] | None = None
        last_step: Fraction | None = None

        def emit_until(limit_time: Fraction) -> Iterator[_Sample]:
            nonlocal k, pending_image
            assert start is not None
            while (max_frames is None or k < max_frames) and start + k * step < limit_time:
                if pending_image is None:
                    pending_image = _display_image(pending)
                yield _Sample(k, pending_index, pending_time, pending_image[0], pending_image[1])
                k += 1

        index = -1
        for frame in container.decode(stream):
            index += 1
            stats.frames_decoded += 1
            if frame.pts is not None:
                t = frame.pts * time_base
            elif pending is not None:
                t = pending_time + (last_step or step)
            else:
                t = Fraction(0)
            if start is None:
                start = stats.start = t
            if pending is not None:
                if t <= pending_time:  # timestamps went back: the later decoded frame wins
                    pending, pending_index, pending_image = frame, index, None
                    continue
                yield from emit_until(t)
                last_step = t - pending_time
            if max_frames is not None and k >= max_frames:
                pending = None
                break  # decoding stops after the last sample
            pending, pending_index, pending_time, pending_image = frame, index, t, None
        if pending is not None:
            duration = Fraction(pending.duration or 0) * time_base
            if duration <= 0:  # unknown: the last pts step, else the nominal rate, else 1/fps
                duration = last_step or (1 / Fraction(rate) if rate else step)
            stats.end = pending_time + duration
            yield from emit_until(stats.end)
        else:  # stopped early at max_frames (or nothing decoded)
            stats.end = pending_time
    except av.FFmpegError as e:
        raise MediaDecodeError(f"cannot decode video: {e}") from e
    finally:
        container.close()


def _samples(
    source: _Source,
    step: Fraction,
    max_frames: int | None,
    stats: _Stats,
    *,
    use_plan: bool = True,
    cap: int | None = None,
) -> Iterator[_Sample]:
    plan = _make_plan(source, step, max_frames, cap) if use_plan else None
    done: list[tuple[int, Fraction]] = []
    if plan is not None and plan.picks:
        try:
            for sample in _decode_planned(source, plan, stats):
                done.append((sample.index, sample.pts_time))
                yield sample
            return
        except _PlanMismatch:
            stats.frames_decoded = 0
    for sample in _decode_plain(source, step, max_frames, stats):
        if sample.k < len(done):  # already yielded by the planned pass
            if done[sample.k] != (sample.index, sample.pts_time):
                raise MediaDecodeError("inconsistent frame timestamps between two decodes")
            continue
        yield sample


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _chunk(
    group: list[_Sample], start_time: Fraction, step: Fraction, config: MediaConfig
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
    stats: _Stats,
    first: list[_Sample],
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
    src = _Source(source)
    group: list[_Sample] = []
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

    for sample in _samples(src, step, max_frames, stats, use_plan=use_plan, cap=cap):
        if cap is not None and sample.k >= cap:  # a plan-free decode: counted as it goes
            raise _too_many_samples(f"more than {cap:,}", cap, step, sample.k * step)
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
    yield from _iter_chunks(source, fps, config, max_frames, _Stats(), [])


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
    stats = _Stats()
    first: list[_Sample] = []
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
