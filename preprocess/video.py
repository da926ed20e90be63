"""Video bytes -> upright RGB frames at 2 fps, sized for the model, plus the soundtrack, in ONE demux pass.

* Open with PyAV (`metadata_errors="replace"`); the first video stream that is not attached cover art is the
  picture, the first audio stream (if any) the soundtrack; both are demuxed and decoded together.
* Limits before decoding: coded frame size (`max_video_frame_pixels`) and the duration the header claims
  (`max_video_seconds`). While decoding: no frame past `max_video_seconds + decode_slack_seconds` (from the
  first frame), at most `max_video_seconds * max_video_source_fps` decoded frames, no soundtrack longer than
  the video limit: a header that lies cannot make the decoder run away.
* Frame times are measured from the stream's FIRST frame (the reference measures from t=0, so a stream starting
  at 1.5 s gave a burst of consecutive frames). Tick k is at k/fps; it takes the decoded frame nearest to it
  (ties: the later one, as the reference's `time >= k/fps` rule), so VFR and low-fps sources keep their true
  timing (a 1 fps source repeats frames rather than playing at double speed). Ticks stop at the last frame;
  the count is made even by repeating the last frame (temporal patch 2).
* Rotation metadata (display matrix, exposed by PyAV as `frame.rotation`, or an old `rotate` tag) is applied:
  frames come out upright. Flips in a display matrix are ignored.
* Each kept frame is scaled ONCE by swscale (`to_ndarray(width, height, "rgb24", BILINEAR)`) straight to the
  reference's final size: the Clef reference first scales to <= 262,144 px with even sides (PyAV's default,
  bilinear), then the checkpoint's video processor smart-resizes to multiples of 32 within [131,072, 786,432] px
  (bicubic). `frame_size` composes both, so token counts equal the reference's (about 128-256 tokens per second
  of video), with one resize instead of two. Bilinear was measured closest to the reference's two resizes on a
  720p clip (mean |diff| 0.0006 in normalised units, vs 0.0019 bicubic and 0.0028 area; benchmarks/RESULTS.md).
* The soundtrack goes through `audio.MonoResampler` (16 kHz mono float32, channels averaged by us) and is
  aligned to the first video frame: audio before it is dropped, a late-starting track is padded with silence.

Knows nothing of the model, torch, HTTP or the filesystem (the size arithmetic is a policy with defaults).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import cast

import av
import numpy as np

from preprocess.audio import HEARABLE_SAMPLES, SAMPLE_RATE_HZ, MonoResampler, open_container, stream_seconds
from preprocess.errors import CorruptMedia, MediaError, MediaTooLarge, UnsupportedMedia
from preprocess.item import MediaItem
from preprocess.media import MediaLimits
from preprocess.sniff import sniff_for_slot

_TIME_EPS_S = 1e-6


@dataclass(frozen=True)
class VideoFramePolicy:
    """Frame rate and frame size of the reference (Clef `load_video` + the processor's default video size)."""

    fps: float = 2.0
    max_decode_pixels: int = 256 * 32 * 32  # 262,144: the reference's cap before its processor
    min_pixels: int = 128 * 32 * 32  # 131,072: processor video size shortest_edge
    max_pixels: int = 768 * 32 * 32  # 786,432: processor video size longest_edge
    factor: int = 32  # patch_size * merge_size
    interpolation: str = "BILINEAR"  # swscale filter of the single resize (closest to the reference chain)


@dataclass(frozen=True)
class DecodedVideo:
    frames: np.ndarray  # (T, H, W, 3) uint8 RGB, upright, T even, H and W multiples of policy.factor
    soundtrack: np.ndarray | None  # (n,) float32 mono 16 kHz, aligned to the first frame; None if no audio
    fps: float = 2.0
    source_width: int = 0  # upright, before scaling
    source_height: int = 0
    rotation_degrees: int = 0  # counter-clockwise rotation that was applied
    container: str = ""
    frame_times_s: tuple[float, ...] = ()  # each frame's source time from the first frame (the padding repeats one)

    @property
    def duration_seconds(self) -> float:
        return len(self.frames) / self.fps


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """Qwen2-VL's size rule (same arithmetic as transformers' `smart_resize`, checked by a test)."""
    h_bar, w_bar = round(height / factor) * factor, round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar, w_bar = math.ceil(height * beta / factor) * factor, math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def frame_size(height: int, width: int, policy: VideoFramePolicy = VideoFramePolicy()) -> tuple[int, int]:
    """Final (height, width) of the reference chain for an upright source frame of `height` x `width`."""
    scale = min(1.0, math.sqrt(policy.max_decode_pixels / (width * height)))
    width1, height1 = max(2, round(width * scale / 2) * 2), max(2, round(height * scale / 2) * 2)
    return smart_resize(height1, width1, policy.factor, policy.min_pixels, policy.max_pixels)


def _rotation_degrees(frame: av.VideoFrame, stream: av.video.stream.VideoStream) -> int:
    """Counter-clockwise degrees (0/90/180/270) that make `frame` upright."""
    degrees = getattr(frame, "rotation", 0) or 0
    if not degrees:
        try:  # files from old muxers / old FFmpeg: a `rotate` tag, clockwise
            degrees = -float(stream.metadata.get("rotate", 0))
        except ValueError:
            degrees = 0
    return round(degrees / 90.0) % 4 * 90


class _FrameSampler:
    """Keeps, for each tick k/fps (from the first frame), the nearest decoded frame, scaled once, upright."""

    def __init__(self, item: MediaItem, limits: MediaLimits, policy: VideoFramePolicy,
                 stream: av.video.stream.VideoStream):
        self.item, self.limits, self.policy, self.stream = item, limits, policy, stream
        self.max_seconds = limits.max_video_seconds + limits.decode_slack_seconds
        self.max_decoded = int(self.max_seconds * limits.max_video_source_fps) + 1
        self.frames: list[np.ndarray] = []
        self.times_s: list[float] = []    # the source time of each kept frame, from the first frame
        self.origin_s: float | None = None
        self.decoded = 0
        self.rotation = 0
        self.size: tuple[int, int] | None = None  # upright target (h, w)
        self.source_size = (0, 0)  # upright source (h, w)
        self._prev: tuple[av.VideoFrame, float] | None = None
        self._cache: tuple[av.VideoFrame, np.ndarray] | None = None

    def _setup(self, frame: av.VideoFrame) -> None:
        if frame.width * frame.height > self.limits.max_video_frame_pixels:
            raise MediaTooLarge(self.item, f"{frame.width}x{frame.height} frames over max_video_frame_pixels="
                                            f"{self.limits.max_video_frame_pixels}")
        self.rotation = _rotation_degrees(frame, self.stream)
        height, width = (frame.width, frame.height) if self.rotation % 180 else (frame.height, frame.width)
        if max(height, width) / min(height, width) > self.limits.max_image_aspect_ratio:
            raise UnsupportedMedia(self.item, f"frame aspect ratio {width}x{height} over max_image_aspect_ratio="
                                               f"{self.limits.max_image_aspect_ratio:g}")
        self.source_size = (height, width)
        self.size = frame_size(height, width, self.policy)

    def _time_s(self, frame: av.VideoFrame) -> float:
        # PyAV's stub types VideoFrame.time as float, but it is None for a frame without a timestamp.
        frame_time_s = cast("float | None", frame.time)
        if frame_time_s is not None:
            return float(frame_time_s)
        rate = self.stream.average_rate or self.stream.guessed_rate
        if not rate:
            raise CorruptMedia(self.item, "video frames carry no timestamps and the stream no frame rate")
        return self.decoded / float(rate)

    def _pixels(self, frame: av.VideoFrame) -> np.ndarray:
        if self._cache is not None and self._cache[0] is frame:
            return self._cache[1]
        assert self.size is not None, "set by _setup on the first frame, before any frame is kept"
        height, width = self.size
        if self.rotation % 180:
            height, width = width, height
        array: np.ndarray = frame.to_ndarray(format="rgb24", width=width, height=height,
                                 interpolation=self.policy.interpolation)
        if self.rotation:
            array = np.ascontiguousarray(np.rot90(array, k=self.rotation // 90))
        self._cache = (frame, array)
        return array

    def _keep(self, frame: av.VideoFrame, time_s: float) -> None:
        if len(self.frames) >= int(self.max_seconds * self.policy.fps) + 2:
            raise MediaTooLarge(self.item, f"more than {len(self.frames)} frames at {self.policy.fps:g} fps, over "
                                            f"max_video_seconds={self.limits.max_video_seconds:g}")
        self.frames.append(self._pixels(frame))
        self.times_s.append(time_s)

    def add(self, frame: av.VideoFrame) -> None:
        self.decoded += 1
        if self.decoded > self.max_decoded:
            raise MediaTooLarge(self.item, f"more than {self.max_decoded - 1} frames decoded, over max_video_seconds="
                                            f"{self.limits.max_video_seconds:g} x max_video_source_fps="
                                            f"{self.limits.max_video_source_fps:g}")
        if self.size is None:
            self._setup(frame)
        time_s = self._time_s(frame)
        if self.origin_s is None:
            self.origin_s = time_s
        t = time_s - self.origin_s
        if t > self.max_seconds:
            raise MediaTooLarge(self.item, f"frame at {t:.1f} s, over max_video_seconds="
                                            f"{self.limits.max_video_seconds:g}")
        if self._prev is not None and t < self._prev[1]:
            return  # out-of-order timestamp: ignore rather than go back in time
        while t + _TIME_EPS_S >= len(self.frames) / self.policy.fps:
            tick = len(self.frames) / self.policy.fps
            prev = self._prev
            prev_closer = prev is not None and (tick - prev[1]) < (t - tick) - _TIME_EPS_S
            if prev is not None and prev_closer:
                self._keep(*prev)
            else:
                self._keep(frame, t)
        self._prev = (frame, t)


def _align(samples: np.ndarray, audio_start_s: float, video_start_s: float) -> np.ndarray:
    offset = round((audio_start_s - video_start_s) * SAMPLE_RATE_HZ)
    if offset > 0:
        return np.concatenate([np.zeros(offset, np.float32), samples])
    return samples[-offset:] if offset < 0 else samples


class _Soundtrack:
    """The soundtrack of a video: 16 kHz mono samples and the time its first frame starts at."""

    def __init__(self, item: MediaItem, limits: MediaLimits) -> None:
        max_seconds = limits.max_video_seconds + limits.decode_slack_seconds
        self.resampler = MonoResampler(item, max_seconds, "max_video_seconds", limits.max_video_seconds)
        self.start_s: float | None = None

    def add(self, frame: av.AudioFrame) -> None:
        if self.start_s is None and frame.time is not None:
            self.start_s = float(frame.time)
        self.resampler.add(frame)

    def finish(self, video_start_s: float) -> np.ndarray | None:
        samples = self.resampler.finish()
        if self.start_s is not None:
            samples = _align(samples, self.start_s, video_start_s)
        return samples if len(samples) >= HEARABLE_SAMPLES else None   # shorter: a video without a soundtrack


def _streams(container: av.container.InputContainer,
             item: MediaItem) -> tuple[av.video.stream.VideoStream, av.audio.stream.AudioStream | None]:
    pictures = [s for s in container.streams.video if not s.disposition & av.stream.Disposition.attached_pic]
    if not pictures:
        raise UnsupportedMedia(item, "no video stream (cover art alone is not a video)")
    return pictures[0], next(iter(container.streams.audio), None)


def _check_header(video: av.video.stream.VideoStream, container: av.container.InputContainer, item: MediaItem, limits: MediaLimits) -> None:
    width, height = video.codec_context.width, video.codec_context.height
    if width * height > limits.max_video_frame_pixels:
        raise MediaTooLarge(item, f"{width}x{height} frames over max_video_frame_pixels="
                                   f"{limits.max_video_frame_pixels}")
    claimed = stream_seconds(video, container)
    if claimed is not None and claimed > limits.max_video_seconds + limits.decode_slack_seconds:
        raise MediaTooLarge(item, f"header claims {claimed:.1f} s, over max_video_seconds="
                                   f"{limits.max_video_seconds:g}")


def _demux(container: av.container.InputContainer, video: av.video.stream.VideoStream,
           audio: av.audio.stream.AudioStream | None, sampler: _FrameSampler, soundtrack: _Soundtrack | None) -> int:
    """One pass over both streams; returns how many packets failed to decode (and were skipped)."""
    bad_packets = 0
    for packet in container.demux(*[s for s in (video, audio) if s is not None]):
        try:
            frames = packet.decode()
        except av.error.InvalidDataError:
            bad_packets += 1
            continue
        for frame in frames:
            if isinstance(frame, av.VideoFrame):        # a frame of `video`
                sampler.add(frame)
            elif isinstance(frame, av.AudioFrame) and soundtrack is not None:   # of `audio` (then a soundtrack)
                soundtrack.add(frame)
    return bad_packets


def decode_video(item: MediaItem, limits: MediaLimits = MediaLimits(),
                 policy: VideoFramePolicy = VideoFramePolicy()) -> DecodedVideo:
    """Video bytes -> frames at `policy.fps` + soundtrack, one demux pass; typed `MediaError` on bad input."""
    data = item.data
    container_name = sniff_for_slot(item).container
    with open_container(data, item) as container:
        video, audio = _streams(container, item)
        _check_header(video, container, item, limits)
        video.thread_type = "AUTO"
        sampler = _FrameSampler(item, limits, policy, video)
        soundtrack = _Soundtrack(item, limits) if audio is not None else None
        try:
            bad_packets = _demux(container, video, audio, sampler, soundtrack)
            samples = soundtrack.finish(sampler.origin_s or 0.0) if soundtrack is not None else None
        except MediaError:
            raise
        except (av.error.FFmpegError, ValueError, MemoryError) as exc:
            raise CorruptMedia(item, f"the {container_name} video cannot be decoded: the file is damaged or truncated",
                               raw=str(exc)) from None
    if not sampler.frames:
        raise CorruptMedia(item, f"no decodable video frames ({bad_packets} bad packets)")
    pad = len(sampler.frames) % 2             # the temporal patch takes frames in pairs: the last one repeats
    frames = sampler.frames + sampler.frames[-1:] * pad
    height, width = sampler.source_size
    return DecodedVideo(frames=np.stack(frames), soundtrack=samples, fps=policy.fps, source_width=width,
                        source_height=height, rotation_degrees=sampler.rotation, container=container_name,
                        frame_times_s=tuple(round(t, 6) for t in sampler.times_s + sampler.times_s[-1:] * pad))
