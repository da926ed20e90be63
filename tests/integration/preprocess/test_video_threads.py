"""Threads change nothing but the time: every clip kind decodes to the same patches, frame times and soundtrack with 1,
2 or 3 threads; bad clips give the same typed error in the same words; a failure on a video's helper thread reaches
the caller; a corrupt video decoded beside good requests, concurrently, fails alone (issue 24)."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import preprocess.resize as resize_module
from fixtures import media as fm
from fixtures.make_corrupt import CORRUPT_DIR, EXPECTED
from preprocess import errors
from preprocess.decode import decode_item
from preprocess.item import MediaItem
from preprocess.loader import load_processor_parts
from preprocess.media import MediaLimits
from preprocess.video import decode_video
from tests.media_items import media_item

pytestmark = pytest.mark.integration

FILES = Path(__file__).resolve().parents[3] / "fixtures" / "files"
CLIPS = {
    "mp4_h264_aac": lambda: fm.video_bytes(seconds=2.0),
    "webm_vp9_opus": lambda: fm.video_bytes("webm", "libvpx-vp9", "libopus", seconds=2.0),
    "mp4_fragmented": lambda: fm.video_bytes(options={"movflags": "frag_keyframe+empty_moov"}),
    # no duration in the header: the patch buffer starts at 16 frames and grows while frames are being scaled
    "mp4_fragmented_12_s": lambda: fm.video_bytes(seconds=12.0, width=64, height=48, fps=5,
                                                  options={"movflags": "frag_keyframe+empty_moov"}),
    "variable_frame_rate": lambda: fm.video_bytes(frame_times=[0.0, 0.1, 0.15, 0.6, 0.7, 1.3, 1.35, 2.1]),
    "starts_at_1_5_s": lambda: fm.video_bytes(start_seconds=1.5, seconds=2.0),
    "rotated_90": lambda: fm.video_bytes(rotation_degrees=90),
    "rotated_270_ffmpeg_cli": lambda: (FILES / "rotated270_ffmpeg.mp4").read_bytes(),
    "upscale_256": lambda: fm.video_bytes(seconds=1.0, width=256, height=256, fps=10),
    "downscale_720p": lambda: fm.video_bytes(seconds=1.0, width=1280, height=720, fps=10),
    "silent": lambda: fm.video_bytes(audio_codec=None),
    # B-frames: with 1 or 2 threads those never kept are not decoded; with 3, FFmpeg's frame threads decode them all
    "high_profile_b_frames": lambda: fm.video_bytes(seconds=3.0, width=320, height=180, x264_defaults=True,
                                                    picture=fm.scene),
}


def same_video(a, b) -> None:
    assert a.grid == b.grid and np.array_equal(a.patches, b.patches)
    assert a.frame_times_s == b.frame_times_s and a.rotation_degrees == b.rotation_degrees
    assert (a.soundtrack is None) == (b.soundtrack is None)
    if a.soundtrack is not None:
        assert np.array_equal(a.soundtrack, b.soundtrack)


@pytest.mark.parametrize("name", sorted(CLIPS))
def test_threads_change_nothing_but_the_time(name, bounded):
    data = CLIPS[name]()
    alone = decode_video(media_item("videos", data), threads=1)
    for threads in (2, 3):
        same_video(bounded(decode_video, media_item("videos", data), threads=threads), alone)


@pytest.mark.parametrize("name", sorted(n for n, (slot, _) in EXPECTED.items() if slot == "videos"))
def test_bad_clips_give_the_same_error_in_the_same_words(name, bounded):
    data = (CORRUPT_DIR / name).read_bytes()
    said = []
    for threads in (1, 2, 3):
        with pytest.raises(errors.MediaError) as info:
            bounded(decode_item, media_item("videos", data, 1), MediaLimits(), threads=threads, seconds=10)
        said.append((type(info.value).__name__, info.value.message))
    assert said[0][0] == EXPECTED[name][1] and said == [said[0]] * 3


def test_a_soundtrack_over_the_limit_is_refused_from_the_helper_thread(bounded):
    data = fm.video_bytes(seconds=3.0, width=64, height=48)
    limits = MediaLimits(max_video_seconds=1.0, decode_slack_seconds=0.5)
    words = []
    for threads in (1, 2):
        with pytest.raises(errors.MediaTooLarge) as info:
            bounded(decode_video, media_item("videos", data), limits, threads=threads)
        words.append(info.value.message)
    assert "max_video_seconds=1" in words[1]


def test_a_bug_on_the_helper_thread_reaches_the_caller_and_stops_nothing_else(monkeypatch, bounded):
    calls = {"n": 0}
    original = resize_module.processor_resize

    def failing_once(rgb, size):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("boom")
        return original(rgb, size)

    monkeypatch.setattr(resize_module, "processor_resize", failing_once)
    data = fm.video_bytes(seconds=2.0, width=256, height=256)
    with pytest.raises(RuntimeError, match="boom"):
        bounded(decode_video, media_item("videos", data), threads=2)
    assert decode_video(media_item("videos", data), threads=2).grid == (2, 24, 24)   # the next one is fine


@pytest.fixture(scope="module")
def encoder(tiny_dir):
    from omni.model.media import MediaEncoder

    return MediaEncoder(load_processor_parts(tiny_dir), MediaLimits(), decode_threads=2)


def test_a_corrupt_video_beside_good_requests_fails_alone(encoder, bounded):
    good_video = fm.video_bytes(seconds=2.0, width=256, height=256)
    photos = [fm.image_bytes("PNG", "RGB", 96 + 8 * i, 64) for i in range(4)]
    corrupt = (CORRUPT_DIR / "truncated.mp4").read_bytes()
    requests = {"video": [MediaItem("videos", 0, good_video)],
                "photos": [MediaItem("images", i, photo) for i, photo in enumerate(photos)],
                "corrupt_beside_good": [MediaItem("images", 0, photos[0]), MediaItem("videos", 0, good_video),
                                        MediaItem("videos", 1, corrupt)],
                "video_and_audio": [MediaItem("audio", 0, fm.wav_bytes(1.0)), MediaItem("videos", 0, good_video)]}
    alone = {name: encoder.encode(items) for name, items in requests.items() if name != "corrupt_beside_good"}

    def run(name):
        try:
            return name, encoder.encode(requests[name])
        except errors.MediaError as error:
            return name, error

    with ThreadPoolExecutor(6) as pool:
        results = bounded(lambda: list(pool.map(run, list(requests) * 3)), seconds=60)
    for name, result in results:
        if name == "corrupt_beside_good":
            assert isinstance(result, errors.CorruptMedia) and result.label == "videos[1]"
        else:
            assert result.encoded.ids == alone[name].encoded.ids
            for key, tensor in alone[name].encoded.tensors.items():
                assert result.encoded.tensors[key].equal(tensor), (name, key)
    assert encoder.threads.busy == 0       # every lent thread came back


def test_photos_of_one_request_decode_side_by_side(encoder, monkeypatch):
    import threading

    import preprocess.image as image_module

    seen = set()
    original = image_module.decode_image
    side_by_side = threading.Barrier(2, timeout=30)    # two decodes must be under way at once to pass it

    def noting(item, limits):
        seen.add(threading.current_thread().name)
        if encoder.threads.total > 1:
            side_by_side.wait()   # a serial decode never finds a partner: BrokenBarrierError fails the test
        return original(item, limits)

    monkeypatch.setattr("preprocess.decode.decode_image", noting)
    items = [MediaItem("images", i, fm.image_bytes("PNG", "RGB", 64, 64 + i)) for i in range(4)]
    out = encoder.encode(items)
    assert out.encoded.tokens_by_modality["image"] > 0
    if encoder.threads.total > 1:     # a machine with one core has nothing to lend
        assert len(seen) == 2
