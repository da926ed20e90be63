"""Video bytes -> uint8 patch rows of upright RGB frames at 2 fps, sized like the reference, plus the soundtrack,
in ONE demux pass.

* Open with PyAV (`metadata_errors="replace"`); the first video stream that is not attached cover art is the
  picture, the first audio stream (if any) the soundtrack; both are demuxed and decoded together.
* Limits before decoding: coded frame size (`max_video_frame_pixels`) and the duration the header claims
  (`max_video_seconds`). While decoding: no frame past `max_video_seconds + decode_slack_seconds` (from the
  first frame), at most `max_video_seconds * max_video_source_fps` decoded frames, no soundtrack longer than
  the video limit: a header that lies cannot make the decoder run away.
* Which frames are kept is the frame policy's `frame_rule` (`VideoFramePolicy`; the one policy is
  `REFERENCE_FRAMES`):
  - "reference" (the default: the frames the model was trained on) is the Clef reference's `load_video` loop: a
    decoded frame is kept iff `frame.time + 1e-6 >= kept / fps`, its time on the stream's clock (from 0, no start
    offset). So a frame is kept at most once, a frame without a timestamp never; a stream that starts at 1.5 s, or
    a gap over several ticks, is followed by a burst of consecutive frames until the count catches up; a 1 fps
    source keeps every frame. The soundtrack is as decoded, from its first sample (the reference decodes it apart).
  - "nearest": tick k is at k/fps from the stream's FIRST frame and takes the decoded frame nearest to it (ties:
    the later one), so VFR, late-starting and low-fps sources keep their true timing (a 1 fps source repeats
    frames); ticks stop at the last frame. The soundtrack is aligned to the first frame: audio before it is
    dropped, a late-starting track is padded with silence.
  Either way the count is made even by repeating the last frame (temporal patch 2).
* Rotation metadata (display matrix, exposed by PyAV as `frame.rotation`, or an old `rotate` tag) is applied:
  frames come out upright. Flips in a display matrix are ignored.
* Each kept frame goes through the reference's own chain (`preprocess.resize`): swscale's bilinear RGB conversion
  to <= 262,144 px with even sides (the Clef reference's `load_video`), then the checkpoint video processor's
  resize to multiples of 32 within [131,072, 786,432] px: torch's uint8 bicubic with antialias (transformers'
  torchvision backend). Upscales (a 256x256 clip becomes 384x384), downscales and odd aspect ratios give the
  reference's pixels bit for bit (tests/integration/preprocess/test_reference_pixels.py); token counts are the
  reference's (about 128-256 tokens per second of video).
* Frames are written straight into their patch rows (`preprocess.patches.PatchWriter`, uint8), one frame at a
  time: no list of frames, no stacked copy, no float copy (normalising happens on the model's device).
* Threads (`threads`, lent by the caller's budget): from 2, a helper thread (`preprocess.side_thread`) decodes the
  soundtrack while this one demuxes and decodes the picture; the kept frames are scaled on whichever of the two is
  free (the helper, or this one when more than a few wait and at the end), each into its own patch rows, each
  thread with its own scaler (from 3, FFmpeg gets the others as frame threads). 1 = everything on this thread.
  The output does not depend on it; an error on the helper is raised here. A frame kept for several ticks (the
  "nearest" rule) is scaled once.
* The soundtrack goes through `audio.MonoResampler` (16 kHz mono float32, channels averaged by us), then is left
  or aligned as the frame rule says.

Knows nothing of the model, HTTP or the filesystem (the size arithmetic is a policy with defaults; torch only as
the processor's resize kernel, in `preprocess.resize`).
"""
from __future__ import annotations

import threading
from functools import partial
from typing import cast

import av
import numpy as np

from preprocess.audio import HEARABLE_SAMPLES, SAMPLE_RATE_HZ, MonoResampler, open_container, stream_seconds
from preprocess.errors import CorruptMedia, MediaError, MediaTooLarge, UnsupportedMedia
from preprocess.item import MediaItem
from preprocess.media import MediaLimits
from preprocess.patches import PatchWriter
from preprocess.resize import FrameScaler
from preprocess.side_thread import SideThread
from preprocess.sniff import sniff_for_slot
from preprocess.video_frames import REFERENCE_FRAMES, DecodedVideo, VideoFramePolicy, frame_size
from preprocess.video_header import check_header, picture_streams

_TIME_EPS_S = 1e-6
_AUDIO_PACKETS_PER_JOB = 32     # ~0.7 s of AAC: one hand-over to the helper thread per 32 packets


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
    """Keeps the decoded frames the policy's rule picks, scaled by the reference's chain, upright, written into their
    patch rows. `frame_rule` "reference": a frame iff `time + 1e-6 >= kept / fps` on the stream's clock (from 0);
    "nearest": for each tick k/fps from the first frame, the decoded frame nearest to it."""

    def __init__(self, item: MediaItem, limits: MediaLimits, policy: VideoFramePolicy,
                 stream: av.video.stream.VideoStream, expected_frames: int = 16):
        self.item, self.limits, self.policy, self.stream = item, limits, policy, stream
        self.max_seconds = limits.max_video_seconds + limits.decode_slack_seconds
        self.max_decoded = int(self.max_seconds * limits.max_video_source_fps) + 1
        self.max_kept = int(self.max_seconds * policy.fps) + 2
        self.expected_frames = min(expected_frames, self.max_kept)
        self.writer: PatchWriter | None = None     # made on the first frame, when the size is known
        self.helper: SideThread | None = None      # set: kept frames are scaled there or, when it is behind, here
        rate = stream.time_base
        self._time_base = (rate.numerator, rate.denominator) if rate else None   # the packets' and frames' unit
        self._scalers = threading.local()          # one FrameScaler per thread (its swscale context is not shared)
        self.kept = 0
        self.times_s: list[float] = []    # the time of each kept frame on the rule's clock
        self.origin_s: float | None = None   # the first frame's time on the stream's clock
        self.decoded = 0
        self.untimed = 0                  # frames without a timestamp (the reference rule skips them)
        self.rotation = 0
        self.size: tuple[int, int] | None = None  # upright target (h, w)
        self.source_size = (0, 0)  # upright source (h, w)
        self._prev: tuple[av.VideoFrame, float] | None = None
        self._pending: tuple[av.VideoFrame, list[int]] | None = None   # the last frame kept and its slots (again?)

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
        self.writer = PatchWriter(*self.size, self.policy.layout, self.expected_frames)

    def _time_s(self, frame: av.VideoFrame) -> float | None:
        """The frame's time on the stream's clock; without a timestamp: None for the reference rule (it skips such a
        frame), else the count of frames before it over the stream's rate."""
        # PyAV's stub types VideoFrame.time as float, but it is None for a frame without a timestamp.
        frame_time_s = cast("float | None", frame.time)
        if frame_time_s is not None:
            return float(frame_time_s)
        self.untimed += 1
        if self.policy.frame_rule == "reference":
            return None
        rate = self.stream.average_rate or self.stream.guessed_rate
        if not rate:
            raise CorruptMedia(self.item, "video frames carry no timestamps and the stream no frame rate")
        return (self.decoded - 1) / float(rate)

    def _scaler(self) -> FrameScaler:
        scaler: FrameScaler | None = getattr(self._scalers, "scaler", None)
        if scaler is None:
            assert self.size is not None, "set by _setup on the first frame, before any frame is kept"
            scaler = self._scalers.scaler = FrameScaler(self.source_size, self.rotation,
                                                        self.policy.max_decode_pixels, self.size)
        return scaler

    def _scale_into(self, frame: av.VideoFrame, slots: list[int]) -> None:
        """Scale `frame` once (on whichever thread runs this) and write it into each of its slots."""
        writer = self.writer
        assert writer is not None, "set by _setup on the first frame"
        pixels = self._scaler()(frame)
        for index in slots:
            writer.put(index, pixels)

    def flush(self) -> None:
        """Hand the last kept frame over to be scaled (now, or on the helper / whichever thread is free)."""
        if self._pending is None:
            return
        job, self._pending = partial(self._scale_into, *self._pending), None
        if self.helper is None:
            job()
        else:
            self.helper.submit(job, shared=True)

    def _too_many_kept(self) -> MediaTooLarge:
        late = (f" (the stream starts at {self.origin_s:.1f} s and the reference's frame rule counts from 0 s, so "
                f"every frame is kept until the count catches up)"
                if self.policy.frame_rule == "reference" and self.origin_s else "")
        return MediaTooLarge(self.item, f"more than {self.kept} frames at {self.policy.fps:g} fps, over "
                                        f"max_video_seconds={self.limits.max_video_seconds:g}{late}")

    def _keep(self, frame: av.VideoFrame, time_s: float) -> None:
        if self.kept >= self.max_kept:
            raise self._too_many_kept()
        writer = self.writer
        assert writer is not None, "set by _setup on the first frame"
        if self._pending is None or self._pending[0] is not frame:    # a frame kept for several ticks: scaled once
            self.flush()
        if writer.grows_next and self.helper is not None:
            self.helper.finish()        # no frame may be written while the buffer is reallocated
        index = writer.reserve()
        if self._pending is None:
            self._pending = (frame, [index])
        else:
            self._pending[1].append(index)
        self.kept += 1
        self.times_s.append(time_s)

    def too_many_decoded(self) -> MediaTooLarge:
        return MediaTooLarge(self.item, f"more than {self.max_decoded - 1} frames decoded, over max_video_seconds="
                                        f"{self.limits.max_video_seconds:g} x max_video_source_fps="
                                        f"{self.limits.max_video_source_fps:g}")

    def never_kept(self, pts: int | None) -> bool:
        """True when the frame of a packet with timestamp `pts` cannot be kept whatever is decoded before it: under
        the reference rule, a time (computed as `frame.time` is) before the next tick, which only moves on; the
        nearest rule cannot tell."""
        if self.policy.frame_rule != "reference" or pts is None or self._time_base is None:
            return False
        numerator, denominator = self._time_base
        return float(pts) * numerator / denominator + _TIME_EPS_S < self.kept / self.policy.fps

    def add(self, frame: av.VideoFrame) -> None:
        self.decoded += 1
        if self.decoded > self.max_decoded:
            raise self.too_many_decoded()
        if self.size is None:
            self._setup(frame)
        time_s = self._time_s(frame)
        if time_s is None:
            return      # the reference rule: a frame without a timestamp is never kept
        if self.origin_s is None:
            self.origin_s = time_s
        if time_s - self.origin_s > self.max_seconds:
            raise MediaTooLarge(self.item, f"frame at {time_s - self.origin_s:.1f} s, over max_video_seconds="
                                            f"{self.limits.max_video_seconds:g}")
        if self.policy.frame_rule == "reference":
            self._add_reference(frame, time_s)
        else:
            self._add_nearest(frame, time_s - self.origin_s)

    def _add_reference(self, frame: av.VideoFrame, time_s: float) -> None:
        """The reference's `load_video`: keep this frame iff `frame.time + 1e-6 >= kept / fps` (one frame at most per
        decoded frame; after a late start or a gap, every frame is kept until the count catches up)."""
        if time_s + _TIME_EPS_S >= self.kept / self.policy.fps:
            self._keep(frame, time_s)

    def _add_nearest(self, frame: av.VideoFrame, t: float) -> None:
        """Each tick up to `t` (from the first frame) takes the nearer of this frame and the one before it (ties:
        this one); a frame may fill several ticks. A timestamp that goes back is ignored."""
        if self._prev is not None and t < self._prev[1]:
            return  # out-of-order timestamp: ignore rather than go back in time
        while t + _TIME_EPS_S >= self.kept / self.policy.fps:
            tick = self.kept / self.policy.fps
            prev = self._prev
            if prev is not None and (tick - prev[1]) < (t - tick) - _TIME_EPS_S:
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

    def finish(self, align_to_s: float | None) -> np.ndarray | None:
        """The samples, from the track's first one (`align_to_s` None, as the reference) or from `align_to_s`."""
        samples = self.resampler.finish()
        if self.start_s is not None and align_to_s is not None:
            samples = _align(samples, self.start_s, align_to_s)
        return samples if len(samples) >= HEARABLE_SAMPLES else None   # shorter: a video without a soundtrack


class _Packets:
    """Decodes one stream's packets and feeds its frames on (the soundtrack's, on the helper thread); counts the
    packets that fail to decode (skipped, as the picture's)."""

    def __init__(self, soundtrack: _Soundtrack) -> None:
        self.soundtrack, self.bad = soundtrack, 0

    def __call__(self, packets: list[av.Packet]) -> None:
        for packet in packets:
            try:
                frames = cast("list[av.AudioFrame]", packet.decode())    # PyAV's stub types every packet's as video
            except av.error.InvalidDataError:
                self.bad += 1
                continue
            for frame in frames:
                self.soundtrack.add(frame)


# Decoders that drop a frame no other frame refers to, unseen, when `skip_frame` is "NONREF" (the B-frames of a
# High-profile stream, most of its frames); the setting is read for the packet sent next (with frame threads too:
# FFmpeg copies it to the thread that takes the packet), and the other frames come out the same.
SKIP_UNREFERENCED_CODECS = frozenset({"h264", "hevc"})


class _Pictures:
    """Decodes the picture's packets and feeds its frames to the sampler. An H.264/HEVC packet whose frame the
    sampler will never keep is sent with `skip_frame="NONREF"`: if no other frame refers to it, it is not decoded at
    all (a frame others refer to is decoded as ever, then dropped by the rule). Counts the packets that fail to
    decode (skipped) and bounds the packets as the sampler bounds the frames."""

    def __init__(self, video: av.video.stream.VideoStream, sampler: _FrameSampler) -> None:
        self.context, self.sampler = video.codec_context, sampler
        self.skips = self.context.name in SKIP_UNREFERENCED_CODECS
        self.skipping = False
        self.packets = self.bad = 0

    def __call__(self, packet: av.Packet) -> None:
        self.packets += 1
        if self.packets > self.sampler.max_decoded:
            raise self.sampler.too_many_decoded()
        if self.skips and self.sampler.never_kept(packet.pts) != self.skipping:
            self.skipping = not self.skipping
            self.context.skip_frame = "NONREF" if self.skipping else "DEFAULT"
        try:
            frames = packet.decode()
        except av.error.InvalidDataError:
            self.bad += 1
            return
        for frame in frames:
            if isinstance(frame, av.VideoFrame):        # a frame of `video`
                self.sampler.add(frame)


def _demux(container: av.container.InputContainer, video: av.video.stream.VideoStream,
           audio: av.audio.stream.AudioStream | None, pictures: _Pictures, soundtrack: _Soundtrack | None,
           helper: SideThread | None = None) -> int:
    """One pass over both streams; returns how many packets failed to decode (and were skipped). With a helper, the
    soundtrack is decoded there (and the sampler scales its frames there), concurrently with the picture here."""
    audio_packets = _Packets(soundtrack) if soundtrack is not None else None
    waiting: list[av.Packet] = []       # soundtrack packets for the helper, handed over a few at a time
    for packet in container.demux(*[s for s in (video, audio) if s is not None]):
        if packet.stream.type != "audio":
            pictures(packet)
        elif audio_packets is not None and helper is None:
            audio_packets([packet])
        elif audio_packets is not None and helper is not None:
            waiting.append(packet)
            if len(waiting) >= _AUDIO_PACKETS_PER_JOB:
                helper.submit(partial(audio_packets, waiting))
                waiting = []
    pictures.sampler.flush()
    if helper is not None:
        if waiting and audio_packets is not None:
            helper.submit(partial(audio_packets, waiting))
        helper.finish()
    return pictures.bad + (audio_packets.bad if audio_packets is not None else 0)


def _set_threads(video: av.video.stream.VideoStream, threads: int) -> None:
    """FFmpeg threads for the picture: with 2 lent threads the second is the helper's (soundtrack, scaling) and the
    picture decodes on this one; from 3 on, FFmpeg gets `threads - 1` (frame threading where the codec has it).
    Frame threading costs more than it gives on cheap frames (measured: 2 frame threads took 1.7x the CPU time of
    one on the benchmark's 720p H.264 clip). Set before the first packet opens the decoder; the frames are the
    same whatever the count."""
    context = video.codec_context
    context.thread_count = max(1, threads - 1)
    context.thread_type = "AUTO" if threads > 2 else "NONE"


def _expected_frames(video: av.video.stream.VideoStream, container: av.container.InputContainer,
                     policy: VideoFramePolicy) -> int:
    """Frames at `policy.fps` the header's duration promises (a first guess for the patch buffer; 16 if none)."""
    claimed = stream_seconds(video, container)
    return int(claimed * policy.fps) + 2 if claimed is not None and claimed >= 0 else 16


def decode_video(item: MediaItem, limits: MediaLimits = MediaLimits(),
                 policy: VideoFramePolicy = REFERENCE_FRAMES, threads: int = 1) -> DecodedVideo:
    """Video bytes -> patch rows of frames at `policy.fps` + soundtrack, one demux pass; typed `MediaError` on bad
    input. `threads`: FFmpeg frame threads for the picture (the caller's to lend; 1 = this thread only)."""
    data = item.data
    container_name = sniff_for_slot(item).container
    with open_container(data, item) as container:
        video, audio = picture_streams(container, item)
        check_header(video, container, item, limits)
        _set_threads(video, threads)
        sampler = _FrameSampler(item, limits, policy, video, _expected_frames(video, container, policy))
        soundtrack = _Soundtrack(item, limits) if audio is not None else None
        sampler.helper = helper = SideThread() if threads > 1 else None
        try:
            bad_packets = _demux(container, video, audio, _Pictures(video, sampler), soundtrack, helper)
            align_to_s = (sampler.origin_s or 0.0) if policy.frame_rule == "nearest" else None
            samples = soundtrack.finish(align_to_s) if soundtrack is not None else None
        except MediaError:
            raise
        except (av.error.FFmpegError, ValueError, MemoryError) as exc:
            raise CorruptMedia(item, f"the {container_name} video cannot be decoded: the file is damaged or truncated",
                               raw=str(exc)) from None
        finally:
            if helper is not None:
                helper.close()
    if sampler.writer is None or not sampler.kept:
        untimed = f", {sampler.untimed} without a timestamp" if sampler.untimed else ""
        raise CorruptMedia(item, f"no decodable video frames ({bad_packets} bad packets{untimed})")
    pad = sampler.kept % policy.layout.temporal_patch_size   # frames go in pairs: the last one repeats
    patches, grid = sampler.writer.finish()
    height, width = sampler.source_size
    return DecodedVideo(patches=patches, grid=grid, soundtrack=samples, policy=policy, source_width=width,
                        source_height=height, rotation_degrees=sampler.rotation, container=container_name,
                        frame_times_s=tuple(round(t, 6) for t in sampler.times_s + sampler.times_s[-1:] * pad))
