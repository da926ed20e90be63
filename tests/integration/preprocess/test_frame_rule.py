"""Issue 31, item 5: video frames are kept as the Clef reference keeps them, by default; the "nearest" rule stays an
option of the one frame policy. Each clip is made with PyAV and checked against the reference's own loop, written
out below over a plain PyAV decode of the same bytes: on a 12.5 fps clip, VFR clips (jitter, a gap over several
ticks), streams that start late (the burst), soundtracks that start before or after the picture, and the token
counts that follow from the frames."""
from __future__ import annotations

import io
from fractions import Fraction

import av
import numpy as np
import pytest

import preprocess.video as video_module
from fixtures import media as fm
from preprocess.errors import MediaTooLarge
from preprocess.loader import load_processor_parts
from preprocess.media import MediaLimits
from preprocess.video import decode_video
from preprocess.video_frames import REFERENCE_FRAMES, VideoFramePolicy
from tests.media_items import media_item

pytestmark = pytest.mark.integration

NEAREST = VideoFramePolicy(frame_rule="nearest")


def reference_frames(data: bytes) -> tuple[list[int], list[float]]:
    """The reference's `load_video` loop, written out: decode the first video stream with PyAV (frame threads, as
    it asks), keep a frame iff it has a time and `frame.time + 1e-6 >= len(kept) / 2.0`, repeat the last frame when
    the count is odd. -> (the kept frames' pattern indices, read from their pixels, and their times)."""
    indices: list[int] = []
    times: list[float] = []
    with av.open(io.BytesIO(data)) as container:
        stream = next(s for s in container.streams if s.type == "video")
        stream.thread_type = "AUTO"
        for frame in container.decode(stream):
            if frame.time is None or frame.time + 1e-6 < len(indices) / 2.0:
                continue
            indices.append(fm.read_frame_index(frame.to_ndarray(format="rgb24")))
            times.append(frame.time)
    if len(indices) % 2:
        indices.append(indices[-1])
        times.append(times[-1])
    return indices, times


def reference_soundtrack_samples(data: bytes) -> int:
    """The reference's `_decode_audio`: the whole first audio stream through swresample to 16 kHz mono, from its
    first sample (nothing dropped or padded to meet the picture) -> how many samples."""
    with av.open(io.BytesIO(data)) as container:
        stream = next(s for s in container.streams if s.type == "audio")
        resampler = av.AudioResampler(format="flt", layout="mono", rate=16000)
        count = 0
        for frame in [*container.decode(stream), None]:
            count += sum(out.samples for out in resampler.resample(frame))
    return count


def indices(video) -> list[int]:
    return [fm.read_frame_index(frame) for frame in video.frames]


def decode(data: bytes, policy: VideoFramePolicy = REFERENCE_FRAMES, limits: MediaLimits = MediaLimits()):
    return decode_video(media_item("videos", data), limits, policy)


PHONE_TIMES = [max(0.0, round(i / 30 + 0.004 * ((i * 7) % 5 - 2), 3)) for i in range(75)]   # ~30 fps, jitter
PHONE_TIMES[40:46] = []                                                            # a dropped stretch (0.2 s)
CLIPS = {
    "12.5_fps": lambda: fm.video_bytes(fps=Fraction(25, 2)),
    "vfr_gap_over_ticks": lambda: fm.video_bytes(frame_times=[0.0, 0.1, 1.7, 1.75, 1.8, 1.85, 2.4, 2.9]),
    "vfr_phone_jitter": lambda: fm.video_bytes(frame_times=PHONE_TIMES),
    "starts_at_0_3_s": lambda: fm.video_bytes(start_seconds=0.3),
    "starts_at_1_5_s": lambda: fm.video_bytes(start_seconds=1.5),
    "audio_before_picture": lambda: fm.video_bytes(start_seconds=1.0, audio_start_seconds=0.0),
    "webm_starts_at_0_7_s": lambda: fm.video_bytes("webm", "libvpx-vp9", "libopus", start_seconds=0.7),
}


def high_profile_clip() -> bytes:
    """libx264's defaults (High profile) on a panning scene: B-frames, most of them referred to by no other frame
    (the scene carries no readable index: its frames are told apart by their times)."""
    return fm.video_bytes(seconds=3.0, width=320, height=180, x264_defaults=True, picture=fm.scene)


@pytest.mark.parametrize("name", sorted(CLIPS))
def test_the_default_keeps_the_reference_s_frames_and_soundtrack(name, bounded):
    data = CLIPS[name]()
    kept, times = reference_frames(data)
    for threads in (1, 2):
        video = bounded(decode_video, media_item("videos", data), threads=threads)
        assert indices(video) == kept
        assert video.frame_times_s == pytest.approx(times, abs=1e-6)     # on the stream's clock, from 0
        assert len(video.soundtrack) == reference_soundtrack_samples(data)


def test_12_5_fps_the_two_rules_differ_at_the_half_second():
    data = CLIPS["12.5_fps"]()
    assert reference_frames(data)[0] == indices(decode(data)) == [0, 7, 13, 19]    # 0.56 s: first at or after 0.5
    assert indices(decode(data, NEAREST)) == [0, 6, 13, 19]                        # 0.48 s: the nearer one


def test_a_gap_over_several_ticks_is_followed_by_a_burst_and_no_frame_is_kept_twice():
    data = CLIPS["vfr_gap_over_ticks"]()
    assert indices(decode(data)) == [0, 2, 3, 4, 6, 7]        # 0, then 1.7, 1.75, 1.8 catch up with ticks .5-1.5
    assert indices(decode(data, NEAREST)) == [0, 1, 2, 2, 5, 6]   # 0.1 for 0.5 s, 1.7 for 1 s and 1.5 s, ...


def test_a_late_start_bursts_by_default_and_is_evenly_spaced_with_the_nearest_rule():
    data = CLIPS["starts_at_1_5_s"]()
    video = decode(data)
    assert indices(video) == [0, 1, 2, 3, 13, 25, 38, 38]     # ticks 0, .5, 1, 1.5 all met by the first frames
    assert video.frame_times_s[:4] == pytest.approx([1.5, 1.54, 1.58, 1.62])
    nearest = decode(data, NEAREST)
    assert indices(nearest) == [0, 13, 25, 38] and nearest.frame_times_s == pytest.approx([0.0, 0.52, 1.0, 1.52])


def test_the_soundtrack_is_as_decoded_by_default_and_aligned_to_the_first_frame_with_the_nearest_rule():
    early = CLIPS["audio_before_picture"]()                   # audio from 0 s, picture from 1 s, 2 s of each
    assert len(decode(early).soundtrack) == reference_soundtrack_samples(early) == pytest.approx(32000, abs=800)
    assert len(decode(early, NEAREST).soundtrack) == pytest.approx(16000, abs=800)    # the second before: dropped
    late = fm.video_bytes(audio_start_seconds=0.5)             # audio from 0.5 s: not padded by default
    assert len(decode(late).soundtrack) == reference_soundtrack_samples(late)
    padded = decode(late, NEAREST).soundtrack
    assert len(padded) - len(decode(late).soundtrack) == pytest.approx(8000, abs=400)
    assert np.abs(padded[:7500]).max() < 0.02


def test_token_counts_and_media_ids_follow_the_frames(tiny_dir):
    from omni.model.media import MediaEncoder

    parts = load_processor_parts(tiny_dir)
    data = CLIPS["starts_at_1_5_s"]()
    reference = MediaEncoder(parts, MediaLimits()).encode([media_item("videos", data)])
    nearest = MediaEncoder(parts, MediaLimits(), policy=NEAREST).encode([media_item("videos", data)])
    frames = len(reference_frames(data)[0])
    grid = reference.encoded.tensors["video_grid_thw"].tolist()[0]
    assert grid[0] == frames // 2 == 4 and reference.audit[0].used["frames"] == frames
    assert reference.encoded.tokens_by_modality["video"] == grid[0] * grid[1] * grid[2] // 4
    assert nearest.encoded.tensors["video_grid_thw"].tolist()[0][0] == 2
    assert reference.encoded.tokens_by_modality["video"] == 2 * nearest.encoded.tokens_by_modality["video"]
    assert len(reference.encoded.ids) > len(nearest.encoded.ids)


def test_a_late_start_over_the_frame_limit_is_refused_in_words_that_say_why():
    data = fm.video_bytes(start_seconds=3.0, seconds=2.0, audio_codec=None)
    limits = MediaLimits(max_video_seconds=2.0, decode_slack_seconds=0.5)
    with pytest.raises(MediaTooLarge) as info:
        decode(data, limits=limits)                            # the reference's rule keeps 10 frames: 5 s of ticks
    assert "max_video_seconds=2" in str(info.value) and "starts at 3.0 s" in str(info.value)
    assert len(decode(data, NEAREST, limits).frames) == 4      # 2 s from the first frame


def test_the_policy_names_its_rules():
    assert REFERENCE_FRAMES.frame_rule == "reference" and REFERENCE_FRAMES.fps == 2.0
    with pytest.raises(ValueError, match="frame_rule must be one of reference, nearest"):
        VideoFramePolicy(frame_rule="closest")  # type: ignore[arg-type]


def test_a_high_profile_clip_keeps_the_reference_s_frames_without_decoding_the_b_frames_it_never_keeps(monkeypatch):
    data = high_profile_clip()
    with av.open(io.BytesIO(data)) as container:
        types = [av.video.frame.PictureType(frame.pict_type) for frame in container.decode(video=0)]
    assert types.count(av.video.frame.PictureType.B) > len(types) // 2      # what the clip is for
    decoded: list[int] = []
    add = video_module._FrameSampler.add
    monkeypatch.setattr(video_module._FrameSampler, "add", lambda self, frame: (decoded.append(1), add(self, frame)))
    for threads in (1, 2):
        decoded.clear()
        video = decode_video(media_item("videos", data), threads=threads)
        assert video.frame_times_s == pytest.approx(reference_frames(data)[1], abs=1e-6)
        assert len(decoded) < len(types) * 2 // 3                # the B-frames between ticks were never decoded
    monkeypatch.setattr(video_module, "SKIP_UNREFERENCED_CODECS", frozenset())
    decoded.clear()
    every_frame = decode_video(media_item("videos", data), threads=2)
    assert len(decoded) == len(types)
    assert np.array_equal(every_frame.patches, video.patches) and every_frame.frame_times_s == video.frame_times_s
