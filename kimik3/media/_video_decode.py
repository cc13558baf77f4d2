"""Decoding video with PyAV and sampling it by timestamp (docs/k3-format.md § Video).

The plan pass (demux only), the planned decode pass, the plan-free forward pass and the
rotation metadata, as described in :mod:`kimik3.media._video`'s docstring. Yields
:class:`FrameSample` objects (RGB, rotated, not resized) in sample order; chunking, resizing and the
token cap live in :mod:`kimik3.media._video`.
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

from .._exceptions import MediaDecodeError, NoVideoStreamError, VideoTooLongError
from ._image_decode import decode_data_url, open_file

__all__ = ["DecodeStats", "FrameSample", "ReopenableSource", "VideoSource", "sample_frames", "too_many_samples"]

VideoSource: TypeAlias = "str | os.PathLike[str] | bytes | bytearray | memoryview | IO[bytes]"
"""What :func:`sample_video` accepts: a path, a ``data:`` URL (str), encoded bytes or a binary
file object."""


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


class ReopenableSource:
    """Re-openable access to a video source (the plan pass and the decode pass each open it)."""

    def __init__(self, source: VideoSource) -> None:
        self._path: str | None = None
        self._data: bytes | None = None
        self._fp: IO[bytes] | None = None
        self._pos = 0
        if isinstance(source, str) and source.startswith("data:"):
            self._data = decode_data_url(source)[1]
        elif isinstance(source, (str, os.PathLike)):
            open_file(source).close()  # refuses a FIFO or device before av.open could block on it
            self._path = os.fspath(source)
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
            open_file(self._path).close()  # checked again: the path may have been swapped since
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
class FrameSample:
    """One sampled frame: the sample number, the frame it picked and the frame's image."""

    k: int  # sample number: t_k = start + k / fps
    index: int  # index of the picked frame in frame order
    pts_time: Fraction  # the picked frame's pts in seconds
    image: Image.Image  # RGB, rotation applied, not resized
    rotation: int


@dataclass
class DecodeStats:
    """What one sampling pass decoded: frames decoded, and the span of timestamps seen (seconds)."""

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


def too_many_samples(count: str, cap: int, step: Fraction, seconds: Fraction) -> VideoTooLongError:
    """The error for a video that gives more samples than ``cap`` (``MediaConfig.max_video_samples``).

    Args:
        count: the number of samples, as it is said (``"12,345"`` or ``"over 1,000"``).
        cap: the most samples per video.
        step: seconds between samples (``1 / fps``).
        seconds: the span of timestamps the samples cover.
    """
    return VideoTooLongError(
        f"the video gives {count} samples ({float(seconds):,.3f} s of timestamps at {float(1 / step):g} fps), over "
        f"the cap of {cap:,} samples per video (MediaConfig.max_video_samples); sample fewer (max_frames, a lower "
        "fps) or raise the cap"
    )


def _make_plan(
    source: ReopenableSource, step: Fraction, max_frames: int | None, cap: int | None = None
) -> _Plan | None:
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
        raise too_many_samples(f"{n:,}", cap, step, end - start)
    picks = [bisect.bisect_right(times, start + k * step) - 1 for k in range(n)]
    return _Plan(time_base=time_base, order=order, picks=picks, start=start, end=end)


class _PlanMismatch(Exception):
    """The decoder did not produce the frames the packet list promised."""


_IN_FLIGHT = 6  # picked frames converted ahead on the worker thread (bounds memory)


def _decode_planned(source: ReopenableSource, plan: _Plan, stats: DecodeStats) -> Iterator[FrameSample]:
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

    def ready(force: bool) -> Iterator[FrameSample]:
        nonlocal k_out
        while queue and (force or len(queue) > _IN_FLIGHT or queue[0][1].done()):
            pos, future = queue.popleft()
            image, rotation = future.result()
            pts_time = order[pos] * plan.time_base
            while k_out < len(picks) and picks[k_out] == pos:
                yield FrameSample(k_out, pos, pts_time, image, rotation)
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
    source: ReopenableSource, step: Fraction, max_frames: int | None, stats: DecodeStats
) -> Iterator[FrameSample]:
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

        def emit_until(limit_time: Fraction) -> Iterator[FrameSample]:
            nonlocal k, pending_image
            assert start is not None
            while (max_frames is None or k < max_frames) and start + k * step < limit_time:
                if pending_image is None:
                    pending_image = _display_image(pending)
                yield FrameSample(k, pending_index, pending_time, pending_image[0], pending_image[1])
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


def sample_frames(
    source: ReopenableSource,
    step: Fraction,
    max_frames: int | None,
    stats: DecodeStats,
    *,
    use_plan: bool = True,
    cap: int | None = None,
) -> Iterator[FrameSample]:
    """The samples of ``source`` in order: sample ``k`` is the last decoded frame with
    ``pts <= start + k * step`` (seconds; the rule of :mod:`kimik3.media._video`).

    Demuxes first to plan which frame each sample picks (``use_plan``) and decodes only those; falls
    back to decoding every frame when the plan does not hold. ``stats`` is updated as it goes.

    Raises:
        NoVideoStreamError: the container has no video stream.
        VideoTooLongError: the plan counts more than ``cap`` samples (the caller checks the plan-free pass).
        MediaDecodeError: the video cannot be demuxed or decoded.
    """
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
