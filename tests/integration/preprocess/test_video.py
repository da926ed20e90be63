"""Video decoding: formats, 2 fps by timestamp (the reference's rule by default; the "nearest" rule where a test
says so: test_frame_rule.py has both side by side), VFR, rotation, sizes, soundtrack, limits, one demux pass, and
the HF patch layout."""
from __future__ import annotations

import io
import math
from pathlib import Path

import av
import numpy as np
import pytest
import torch

import preprocess.video as video_module
from fixtures import media as fm
from preprocess.errors import MediaTooLarge, UnsupportedMedia
from preprocess.media import MediaLimits
from preprocess.processor import encode_videos, media_on_device, normalize_patches, patchify_frames
from preprocess.video import decode_video
from preprocess.video_frames import VideoFramePolicy, frame_size
from tests.media_items import media_item

pytestmark = pytest.mark.integration

ROTATED_FFMPEG_CLIP = Path(__file__).parents[3] / "fixtures" / "files" / "rotated270_ffmpeg.mp4"
NEAREST = VideoFramePolicy(frame_rule="nearest")   # the option: the frame nearest each tick, from the first frame


def frame_times(data: bytes) -> list[float]:
    with av.open(io.BytesIO(data)) as container:
        return [float(frame.time) for frame in container.decode(video=0)]


def reference_indices(times: list[float], fps: float = 2.0) -> list[int]:
    """The reference's rule (the default), over the decoded frames' times: keep a frame iff time + 1e-6 >= kept / fps
    on the stream's clock; an odd count repeats the last frame."""
    kept: list[int] = []
    for index, t in enumerate(times):
        if t + 1e-6 >= len(kept) / fps:
            kept.append(index)
    return kept + kept[-1:] * (len(kept) % 2)


def expected_indices(times: list[float], fps: float = 2.0) -> list[int]:
    """Independent statement of the sampling rule: tick k (k/fps after the first frame) takes the frame nearest
    to it (ties: the later frame); ticks run up to the last frame; an odd count repeats the last frame."""
    relative = [t - times[0] for t in times]
    ticks = math.floor(relative[-1] * fps + 1e-6) + 1
    chosen = [min(range(len(relative)), key=lambda i: (round(abs(relative[i] - k / fps), 6), -i)) for k in range(ticks)]
    return chosen + chosen[-1:] * (len(chosen) % 2)


def indices(video) -> list[int]:
    return [fm.read_frame_index(frame) for frame in video.frames]


def upright(frame: np.ndarray) -> bool:
    corners = fm.corner_colours(frame)
    near = lambda colour, target: all(abs(a - b) <= 30 for a, b in zip(colour, target, strict=True))
    return near(corners["top_left"], fm.RED) and near(corners["bottom_right"], fm.BLUE) and near(
        corners["top_right"], fm.GREY)


FORMATS = {
    "mp4_h264_aac": {},
    "webm_vp9_opus": {"container_format": "webm", "video_codec": "libvpx-vp9", "audio_codec": "libopus"},
    "webm_vp8_vorbis": {"container_format": "webm", "video_codec": "libvpx", "audio_codec": "vorbis"},
    "mov_h264_aac": {"container_format": "mov"},
    "mkv_h264_opus": {"container_format": "matroska", "audio_codec": "libopus"},
    "mp4_fragmented": {"options": {"movflags": "frag_keyframe+empty_moov"}},
    "webm_live_no_duration": {"container_format": "webm", "video_codec": "libvpx", "audio_codec": "libopus",
                                  "options": {"live": "1"}},
}


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_formats_decode_at_2_fps_with_soundtrack(name, bounded):
    data = fm.video_bytes(**FORMATS[name])
    video = bounded(decode_video, media_item("videos", data))
    assert video.frames.dtype == np.uint8 and video.frames.shape[1:] == (320, 448, 3)
    assert len(video.frames) % 2 == 0
    assert indices(video) == reference_indices(frame_times(data))          # the default: the reference's rule
    video = bounded(decode_video, media_item("videos", data), policy=NEAREST)
    assert indices(video) == expected_indices(frame_times(data))
    assert all(upright(frame) for frame in video.frames)
    assert abs(len(video.soundtrack) - 32000) < 800
    assert float(np.sqrt(np.mean(video.soundtrack[2000:-2000] ** 2))) == pytest.approx(0.4 / np.sqrt(2), rel=0.05)


def test_plain_25fps_clip_keeps_the_frames_at_each_half_second():
    video = decode_video(media_item("videos", fm.video_bytes()))
    assert indices(video) == [0, 13, 25, 38]  # 0.0 s, 0.52 (tie 0.48/0.52 -> later, as the reference), 1.0, 1.52


def test_stream_starting_at_1_5_s_gives_evenly_spaced_frames_with_the_nearest_rule():
    data = fm.video_bytes(start_seconds=1.5, audio_start_seconds=1.5)
    times = frame_times(data)
    assert times[0] == pytest.approx(1.5)
    reference_rule = []  # Clef reference: keep a frame iff time + 1e-6 >= kept / 2 (absolute time)
    for index, t in enumerate(times):
        if t + 1e-6 >= len(reference_rule) / 2.0:
            reference_rule.append(index)
    assert reference_rule[:4] == [0, 1, 2, 3]  # the burst this fixture provokes
    assert indices(decode_video(media_item("videos", data))) == reference_indices(times)   # the default: the burst
    video = decode_video(media_item("videos", data), policy=NEAREST)
    assert indices(video) == [0, 13, 25, 38]
    assert abs(len(video.soundtrack) - 32000) < 800


def test_soundtrack_is_aligned_to_the_first_frame_with_the_nearest_rule():
    late_audio = decode_video(media_item("videos", fm.video_bytes(audio_start_seconds=0.5)), policy=NEAREST).soundtrack
    assert np.abs(late_audio[:7500]).max() < 0.02  # 0.5 s of silence put in front
    assert float(np.sqrt(np.mean(late_audio[9000:30000] ** 2))) == pytest.approx(0.283, rel=0.05)
    early_audio = decode_video(media_item("videos", fm.video_bytes(start_seconds=1.0, audio_start_seconds=0.0)),
                               policy=NEAREST).soundtrack
    assert abs(len(early_audio) - 16000) < 800  # the second before the first frame is dropped


def test_variable_frame_rate():
    times = [0.0, 0.1, 0.15, 0.9, 1.0, 1.05, 1.1, 2.0, 2.7]
    data = fm.video_bytes(frame_times=times)
    assert indices(decode_video(media_item("videos", data))) == reference_indices(times) == [0, 3, 4, 7, 8, 8]
    video = decode_video(media_item("videos", data), policy=NEAREST)
    assert indices(video) == expected_indices(times) == [0, 2, 4, 6, 7, 8]


def test_low_frame_rate_repeats_frames_with_the_nearest_rule_and_not_with_the_reference_s():
    data = fm.video_bytes(seconds=4, fps=1, audio_codec=None)
    assert indices(decode_video(media_item("videos", data))) == [0, 1, 2, 3]   # the reference: each frame once
    video = decode_video(media_item("videos", data), policy=NEAREST)
    assert indices(video) == [0, 1, 1, 2, 2, 3, 3, 3]  # ticks 0, .5 (tie -> 1), 1, 1.5, 2, 2.5, 3 + pad


@pytest.mark.parametrize("degrees", [90, 180, 270])
def test_rotation_metadata_gives_upright_frames(degrees):
    data = fm.video_bytes(rotation_degrees=degrees)
    with av.open(io.BytesIO(data)) as container:
        stored = next(container.decode(video=0))
        assert (stored.width, stored.height) == ((96, 128) if degrees % 180 else (128, 96))
        assert not upright(stored.to_ndarray(format="rgb24"))
    video = decode_video(media_item("videos", data))
    assert video.rotation_degrees == degrees and (video.source_width, video.source_height) == (128, 96)
    assert video.frames.shape[1:] == (320, 448, 3)
    assert all(upright(frame) for frame in video.frames)
    assert indices(video) == [0, 13, 25, 38]


def test_rotation_written_by_the_ffmpeg_cli_gives_upright_frames():
    video = decode_video(media_item("videos", ROTATED_FFMPEG_CLIP.read_bytes()))
    assert video.rotation_degrees == 270 and video.frames.shape == (2, 320, 448, 3)
    assert all(upright(frame) for frame in video.frames) and indices(video) == [0, 5]
    assert video.soundtrack is not None


def test_reference_frame_size():
    assert frame_size(720, 1280) == (384, 672)  # 1280x720 -> <=262,144 px: 682x384 -> x32: 672x384
    assert frame_size(96, 128) == (320, 448)  # small frames are scaled up to >= 131,072 px
    assert frame_size(1920, 1080) == (672, 384)


def test_frame_size_is_the_reference_two_step_chain():
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize as hf_smart_resize

    for height, width in np.random.default_rng(1).integers(16, 4000, (300, 2)).tolist():
        if max(height, width) / min(height, width) > 50:
            continue
        scale = min(1.0, (262144 / (height * width)) ** 0.5)  # Clef load_video
        w1, h1 = max(2, round(width * scale / 2) * 2), max(2, round(height * scale / 2) * 2)
        expected = hf_smart_resize(h1, w1, 32, 131072, 786432)  # the processor's default video size
        assert frame_size(height, width) == expected
        tokens_per_second = expected[0] * expected[1] // (32 * 32)
        assert 128 <= tokens_per_second <= 288  # ~128-256; rounding both sides to 32 can add a few


def test_720p_clip_is_252_tokens_per_second(image_processor):
    video = decode_video(media_item("videos", fm.video_bytes(seconds=1.0, width=1280, height=720, fps=10, audio_codec=None)))
    assert video.frames.shape == (2, 384, 672, 3)
    _tensors, grids = encode_videos([video], image_processor)
    assert grids == [(1, 24, 42)] and grids[0][1] * grids[0][2] // 4 == 252


def test_no_soundtrack_gives_none():
    assert decode_video(media_item("videos", fm.video_bytes(audio_codec=None))).soundtrack is None


def test_5_1_soundtrack_is_averaged():
    # FLAC in Matroska: lossless (an AAC encoder low-passes the LFE channel and would lose its tone)
    data = fm.video_bytes("matroska", audio_codec="flac", audio_channels=6)
    track = decode_video(media_item("videos", data)).soundtrack
    assert float(np.sqrt(np.mean(track[2000:-2000] ** 2))) == pytest.approx(
        np.mean(fm.CHANNEL_AMPLITUDES[:6]) / np.sqrt(2), rel=0.05)


def test_latin1_metadata_does_not_break_the_open():
    data = fm.with_latin1_title(fm.video_with_title())
    with pytest.raises(UnicodeDecodeError):
        av.open(io.BytesIO(data))  # what a strict open does with such a file
    assert len(decode_video(media_item("videos", data)).frames) == 4


def test_one_demux_pass_for_frames_and_soundtrack(monkeypatch):
    demux_calls = []

    class Counting:
        def __init__(self, container):
            self._container = container

        def __getattr__(self, name):
            return getattr(self._container, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return self._container.__exit__(*exc)

        def demux(self, *streams):
            demux_calls.append(sorted(s.type for s in streams))
            return self._container.demux(*streams)

    original = video_module.open_container
    monkeypatch.setattr(video_module, "open_container", lambda data, label: Counting(original(data, label)))
    video = decode_video(media_item("videos", fm.video_bytes()))
    assert demux_calls == [["audio", "video"]] and video.soundtrack is not None


# ---------------------------------------------------------------- limits and wrong content
def test_header_duration_over_the_limit_is_refused_before_decoding(monkeypatch):
    monkeypatch.setattr(video_module._FrameSampler, "add", lambda self, frame: pytest.fail("decoded a frame"))
    with pytest.raises(MediaTooLarge) as info:
        decode_video(media_item("videos", fm.video_bytes(seconds=3.0, audio_codec=None), 1), MediaLimits(max_video_seconds=1.0))
    assert info.value.label == "videos[1]" and "max_video_seconds=1" in str(info.value)
    assert "header claims 3.0 s" in str(info.value)


def test_a_lying_header_cannot_make_the_decoder_run_away(monkeypatch, bounded):
    monkeypatch.setattr(video_module, "stream_seconds", lambda stream, container: 0.2)
    added = []
    original_add = video_module._FrameSampler.add
    monkeypatch.setattr(video_module._FrameSampler, "add", lambda self, f: (added.append(1), original_add(self, f)))
    with pytest.raises(MediaTooLarge) as info:
        bounded(decode_video, media_item("videos", fm.video_bytes(seconds=6.0, audio_codec=None), 1),
                MediaLimits(max_video_seconds=1.0, decode_slack_seconds=0.5))
    assert info.value.label == "videos[1]" and "max_video_seconds=1" in str(info.value)
    assert len(added) <= 1.5 * 25 + 2  # stopped at the bound, not after the real 150 frames


def test_decoded_frame_count_is_bounded(monkeypatch):
    monkeypatch.setattr(video_module, "stream_seconds", lambda stream, container: None)
    limits = MediaLimits(max_video_seconds=2.0, decode_slack_seconds=0.5, max_video_source_fps=4.0)
    with pytest.raises(MediaTooLarge) as info:
        decode_video(media_item("videos", fm.video_bytes(seconds=1.0, audio_codec=None)), limits)
    assert "max_video_source_fps=4" in str(info.value) and "more than 10 frames decoded" in str(info.value)


def test_frame_pixels_over_the_limit():
    with pytest.raises(MediaTooLarge) as info:
        decode_video(media_item("videos", fm.video_bytes(seconds=0.5)), MediaLimits(max_video_frame_pixels=10_000))
    assert "128x96" in str(info.value) and "max_video_frame_pixels=10000" in str(info.value)


def test_soundtrack_longer_than_the_limit(monkeypatch):
    monkeypatch.setattr(video_module, "stream_seconds", lambda stream, container: None)
    data = fm.video_bytes(frame_times=[0.0, 0.5, 1.0, 4.0])  # the tone lasts as long as the frames span
    limits = MediaLimits(max_video_seconds=3.0, decode_slack_seconds=0.5)
    with pytest.raises(MediaTooLarge) as info:
        decode_video(media_item("videos", data), limits)
    assert "max_video_seconds=3" in str(info.value)


def test_mp3_cover_art_is_not_a_video():
    with pytest.raises(UnsupportedMedia) as info:
        decode_video(media_item("videos", fm.mp3_bytes(0.5, cover_art=True), 1))
    assert info.value.label == "videos[1]" and "mp3" in str(info.value)


def test_audio_only_mp4_is_not_a_video():
    with pytest.raises(UnsupportedMedia) as info:
        decode_video(media_item("videos", fm.audio_bytes("mp4", "aac", 0.5)))
    assert "no video stream" in str(info.value)


# ---------------------------------------------------------------- patches
def loop_patchify(frames: np.ndarray, ps: int = 16, tp: int = 2, m: int = 2) -> np.ndarray:
    """HF layout written out element by element: rows (t, block row, block col, row in block, col in block),
    columns (channel, frame in temporal patch, y, x)."""
    t_count, height, width, _channels = frames.shape
    rows = []
    for t in range(t_count // tp):
        for by in range(height // (ps * m)):
            for bx in range(width // (ps * m)):
                for my in range(m):
                    for mx in range(m):
                        y0, x0 = (by * m + my) * ps, (bx * m + mx) * ps
                        patch = frames[t * tp:(t + 1) * tp, y0:y0 + ps, x0:x0 + ps, :]  # tp, ps, ps, C
                        rows.append(patch.transpose(3, 0, 1, 2).reshape(-1))
    return np.stack(rows)


def test_patchify_matches_an_element_wise_rearrangement():
    frames = np.random.default_rng(0).integers(0, 256, (4, 64, 96, 3), dtype=np.uint8)
    patches, grid = patchify_frames(frames)
    assert grid == (2, 4, 6) and patches.shape == (2 * 4 * 6, 3 * 2 * 16 * 16)
    assert np.array_equal(patches, loop_patchify(frames))


def test_patchify_matches_transformers_for_a_still_frame(image_processor):
    frame = np.random.default_rng(1).integers(0, 256, (64, 96, 3), dtype=np.uint8)
    ours = normalize_patches(patchify_frames(np.stack([frame, frame]))[0], image_processor)
    chw = (frame.transpose(2, 0, 1).astype(np.float32) / 255 - 0.5) / 0.5
    hf, grid_h, grid_w = image_processor.patchify(chw, patch_size=16, merge_size=2, temporal_patch_size=2)
    assert (grid_h, grid_w) == (4, 6)
    assert np.abs(ours.numpy() - hf).max() < 1e-6


def test_odd_frame_count_is_padded_with_the_last_frame():
    frames = np.random.default_rng(2).integers(0, 256, (3, 32, 32, 3), dtype=np.uint8)
    patches, grid = patchify_frames(frames)
    assert grid == (2, 2, 2)
    assert np.array_equal(patches, loop_patchify(np.concatenate([frames, frames[-1:]])))


def test_encode_videos_tensors(image_processor):
    video = decode_video(media_item("videos", fm.video_bytes()))
    tensors, grids = encode_videos([video, video], image_processor)
    assert grids == [(2, 20, 28)] * 2
    assert tensors["pixel_values_videos"].shape == (2 * 2 * 20 * 28, 1536)
    assert tensors["pixel_values_videos"].dtype == torch.uint8      # normalised on the model's device, 4x smaller
    on_device = media_on_device(tensors, "cpu", torch.float32)["pixel_values_videos"]
    assert on_device.min().item() >= -1.0 and on_device.max().item() <= 1.0
    assert torch.equal(on_device, normalize_patches(tensors["pixel_values_videos"], image_processor))
    assert torch.equal(on_device, (tensors["pixel_values_videos"].float() - 127.5) / 127.5)   # the reference's fused map
    assert tensors["video_grid_thw"].tolist() == [[2, 20, 28]] * 2
    assert tensors["video_second_per_grid"].tolist() == [1.0, 1.0]
