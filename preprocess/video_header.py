"""A video's picture stream and the limits its header can be checked against before anything is decoded: the
coded frame size (`max_video_frame_pixels`) and the duration the header claims (`max_video_seconds` plus
`decode_slack_seconds`). Typed `MediaError` on bad input.

    check_video_header(item, limits)     # a caller about to hand the bytes to another decoder (a vPDQ hasher)

Imports PyAV and nothing heavier (no torch, no resizing): a vPDQ worker process checks a video with it and starts
in a tenth of a second.
Knows nothing of decoding frames, sampling, the model, HTTP or the filesystem.
"""
from __future__ import annotations

import av

from preprocess.audio import open_container, stream_seconds
from preprocess.errors import MediaTooLarge, UnsupportedMedia
from preprocess.item import MediaItem
from preprocess.media import MediaLimits


def picture_streams(container: av.container.InputContainer,
                    item: MediaItem) -> tuple[av.video.stream.VideoStream, av.audio.stream.AudioStream | None]:
    """The picture (the first video stream that is not attached cover art) and the soundtrack (the first audio
    stream, if any)."""
    pictures = [s for s in container.streams.video if not s.disposition & av.stream.Disposition.attached_pic]
    if not pictures:
        raise UnsupportedMedia(item, "no video stream (cover art alone is not a video)")
    return pictures[0], next(iter(container.streams.audio), None)


def check_header(video: av.video.stream.VideoStream, container: av.container.InputContainer, item: MediaItem,
                 limits: MediaLimits) -> None:
    width, height = video.codec_context.width, video.codec_context.height
    if width * height > limits.max_video_frame_pixels:
        raise MediaTooLarge(item, f"{width}x{height} frames over max_video_frame_pixels="
                                   f"{limits.max_video_frame_pixels}")
    claimed = stream_seconds(video, container)
    if claimed is not None and claimed > limits.max_video_seconds + limits.decode_slack_seconds:
        raise MediaTooLarge(item, f"header claims {claimed:.1f} s, over max_video_seconds="
                                   f"{limits.max_video_seconds:g}")


def check_video_header(item: MediaItem, limits: MediaLimits = MediaLimits()) -> None:
    """The limits `decode_video` checks before decoding, without decoding."""
    with open_container(item.data, item) as container:
        video, _ = picture_streams(container, item)
        check_header(video, container, item, limits)
