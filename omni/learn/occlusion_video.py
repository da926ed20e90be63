"""The video mask of the occlusion check (`omni explain --occlude`): a clip with the seconds [start_s, end_s) cut out,
its picture AND its soundtrack, so the clip becomes that much shorter and what follows moves up.

Times are on the streams' own clocks (the clock the evidence's moments and the reference frame rule use): a frame is
dropped iff its time t is in [start_s, end_s); a later frame is shown at t - (end_s - start_s). The picture is
re-encoded (H.264 by libx264 when PyAV's FFmpeg has it, else MPEG-4 Part 2) in an MP4 at the source's coded size,
with the source's rotation written back as a display matrix, so a reader turns it upright as it did the source; the
soundtrack (the first audio stream) is decoded, cut at the same times and re-encoded as AAC at its own rate and
channel layout. Re-encoding changes the pixels a little everywhere: whoever compares masks compares two clips that
went through it (the top region's and a random one's), never a mask against the untouched source alone.

Knows nothing of evidence, the engine, requests or HTTP: it takes a media item and a window.
"""
from __future__ import annotations

import io
from dataclasses import dataclass, field
from fractions import Fraction
from typing import cast

import av
import numpy as np

from preprocess.audio import open_container
from preprocess.errors import CorruptMedia, UnsupportedMedia
from preprocess.item import MediaItem

MS = Fraction(1, 1000)                 # the output picture's time base: frame times kept to the millisecond
ENCODERS = ("libx264", "mpeg4")        # the first one PyAV's FFmpeg can write is used
AAC_FRAME_SAMPLES = 1024


def picture_encoder() -> str:
    available = av.codecs_available
    return next((name for name in ENCODERS if name in available), ENCODERS[-1])


def rotation_of(frame: av.VideoFrame, stream: av.video.stream.VideoStream) -> int:
    """Counter-clockwise degrees (0/90/180/270) that make `frame` upright (its display matrix, else a `rotate` tag)."""
    degrees = getattr(frame, "rotation", 0) or 0
    if not degrees:
        try:
            degrees = -float(stream.metadata.get("rotate", 0))
        except ValueError:
            degrees = 0
    return round(degrees / 90.0) % 4 * 90


@dataclass
class Soundtrack:
    """The decoded soundtrack: planar float32 chunks, the rate and layout, the time of its first sample."""

    rate_hz: int
    layout: str
    resampler: av.AudioResampler
    chunks: list[np.ndarray] = field(default_factory=list)
    start_s: float | None = None

    def add(self, frame: av.AudioFrame) -> None:
        for out in self.resampler.resample(frame):
            if self.start_s is None:
                self.start_s = float(out.time) if out.time is not None else 0.0
            self.chunks.append(out.to_ndarray())

    def cut(self, start_s: float, end_s: float) -> np.ndarray:
        """(channels, n) float32 without the samples whose time is in [start_s, end_s)."""
        for out in self.resampler.resample(None):      # what the resampler still holds
            self.chunks.append(out.to_ndarray())
        samples = np.concatenate(self.chunks, axis=1) if self.chunks else np.zeros((1, 0), np.float32)
        origin = self.start_s or 0.0
        first = min(samples.shape[1], max(0, round((start_s - origin) * self.rate_hz)))
        stop = min(samples.shape[1], max(first, round((end_s - origin) * self.rate_hz)))
        return np.ascontiguousarray(np.concatenate([samples[:, :first], samples[:, stop:]], axis=1))


class ClipWriter:
    """The output MP4: the picture stream made on the first kept frame (its size and rotation known then), the
    soundtrack's stream beside it; frames encoded as they come, the soundtrack at the end."""

    def __init__(self, soundtrack: Soundtrack | None):
        self.buffer = io.BytesIO()
        self.container = av.open(self.buffer, "w", format="mp4")
        self.soundtrack = soundtrack
        self.picture: av.video.stream.VideoStream | None = None
        self.audio: av.audio.stream.AudioStream | None = None
        self.frames = 0

    def _open(self, frame: av.VideoFrame, rotation: int) -> av.video.stream.VideoStream:
        encoder = picture_encoder()
        picture = cast("av.video.stream.VideoStream", self.container.add_stream(encoder, rate=25))
        picture.width, picture.height, picture.pix_fmt = frame.width, frame.height, "yuv420p"
        picture.time_base = picture.codec_context.time_base = MS
        if encoder == "libx264":
            picture.codec_context.options = {"preset": "ultrafast", "crf": "18"}
        if rotation:
            picture.set_display_rotation(rotation)
        if self.soundtrack is not None:
            self.audio = self.container.add_stream("aac", rate=self.soundtrack.rate_hz,
                                                   layout=self.soundtrack.layout)
        return picture

    def add(self, frame: av.VideoFrame, time_s: float, rotation: int) -> None:
        if self.picture is None:
            self.picture = self._open(frame, rotation)
        out = frame.reformat(format="yuv420p") if frame.format.name != "yuv420p" else frame
        out.pts, out.time_base = round(time_s * 1000), MS
        self.container.mux(self.picture.encode(out))
        self.frames += 1

    def finish(self, samples: np.ndarray | None, start_s: float) -> bytes:
        if self.picture is not None:
            self.container.mux(self.picture.encode(None))
        if self.audio is not None and self.soundtrack is not None and samples is not None:
            first = round(start_s * self.soundtrack.rate_hz)
            for offset in range(0, samples.shape[1], AAC_FRAME_SAMPLES):
                chunk = av.AudioFrame.from_ndarray(samples[:, offset:offset + AAC_FRAME_SAMPLES], format="fltp",
                                                   layout=self.soundtrack.layout)
                chunk.sample_rate, chunk.pts = self.soundtrack.rate_hz, first + offset
                chunk.time_base = Fraction(1, self.soundtrack.rate_hz)
                self.container.mux(self.audio.encode(chunk))
            self.container.mux(self.audio.encode(None))
        self.container.close()
        return self.buffer.getvalue()


def _soundtrack(stream: av.audio.stream.AudioStream | None) -> Soundtrack | None:
    if stream is None:
        return None
    rate_hz = stream.codec_context.sample_rate or 48_000
    layout = stream.codec_context.layout.name if stream.codec_context.layout.nb_channels <= 2 else "stereo"
    return Soundtrack(rate_hz, layout, av.AudioResampler(format="fltp", layout=layout, rate=rate_hz))


def mask_video(item: MediaItem, start_s: float, end_s: float) -> bytes:
    """MP4 of the clip without the seconds [start_s, end_s): picture and soundtrack cut, later times moved up."""
    cut_s = max(0.0, end_s - start_s)
    with open_container(item.data, item) as source:
        picture = next((s for s in source.streams.video if not s.disposition & av.stream.Disposition.attached_pic),
                       None)
        if picture is None:
            raise UnsupportedMedia(item, "the file has no video stream to mask")
        sound = next(iter(source.streams.audio), None)
        soundtrack = _soundtrack(sound)
        writer = ClipWriter(soundtrack)
        rate = float(picture.average_rate or picture.guessed_rate or 25)
        rotation, decoded = 0, 0
        try:
            for packet in source.demux([s for s in (picture, sound) if s is not None]):
                for frame in packet.decode():
                    if isinstance(frame, av.AudioFrame):
                        if soundtrack is not None:
                            soundtrack.add(frame)
                        continue
                    if not isinstance(frame, av.VideoFrame):
                        continue
                    time_s = float(frame.time) if frame.time is not None else decoded / rate
                    rotation = rotation_of(frame, picture) if decoded == 0 else rotation
                    decoded += 1
                    if start_s <= time_s < end_s:
                        continue
                    writer.add(frame, time_s - cut_s if time_s >= end_s else time_s, rotation)
        except (av.error.FFmpegError, ValueError) as exc:
            raise CorruptMedia(item, "the video cannot be decoded to mask it", raw=str(exc)) from None
        if writer.frames == 0:
            raise UnsupportedMedia(item, f"masking [{start_s:g}, {end_s:g}) s would leave no frame of the video")
        samples = soundtrack.cut(start_s, end_s) if soundtrack is not None else None
        return writer.finish(samples, soundtrack.start_s or 0.0 if soundtrack is not None else 0.0)
