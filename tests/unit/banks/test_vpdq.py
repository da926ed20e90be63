"""Videos in hash banks by vPDQ (Meta's `vpdq` package): the hash is vpdq's own (and each frame's is the PDQ hash of
that frame, in ThreatExchange's hex order, as photos are hashed); a bank's lookup agrees with vPDQ's brute-force
comparison; a re-encoded, shrunk copy and a banked clip inside a longer video match, another video does not; bad
vpdq entries are named; the worker-process hasher returns a bad video's media error and survives a hang.
Without the `vpdq` package these tests skip, unless `OMNI_REQUIRE_VPDQ=1` (CI sets it), where that is a failure."""
from __future__ import annotations

import os
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from fixtures import media as fm
from omni.banks.entries import BankEntry, BankError, BankFile, read_bank
from omni.banks.index import Bank
from omni.banks.matching import BankSet
from preprocess.errors import MediaError
from preprocess.hashes import pdq_of_pixels, vpdq_available, vpdq_of_video
from preprocess.item import MediaItem
from preprocess.media import MediaLimits

if not vpdq_available():
    if os.environ.get("OMNI_REQUIRE_VPDQ"):
        pytest.fail("OMNI_REQUIRE_VPDQ=1 but the vpdq package is not installed (bash scripts/bootstrap.sh --tests)",
                    pytrace=False)
    pytest.skip("the vpdq package is not installed (bash scripts/bootstrap.sh --tests builds it)",
                allow_module_level=True)

ADDED = "2026-12-04T10:00:00+00:00"


def blobs(height: int, width: int, index: int, seed: int = 3) -> np.ndarray:
    """Frame `index` of a camera-like scene: soft coloured shapes drifting across the picture (what PDQ is made
    for; a fine synthetic texture is not what phones film, and PDQ hashes it poorly)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    y, x = y / height, x / width
    picture = np.full((height, width, 3), 40.0, np.float32)
    for _ in range(12):
        cy, cx, radius = rng.random(), rng.random(), 0.05 + 0.15 * rng.random()
        vy, vx = (rng.random() - 0.5) * 0.01, (rng.random() - 0.5) * 0.01
        colour = rng.integers(0, 256, 3)
        picture += np.exp(-((y - cy - vy * index) ** 2 + (x - cx - vx * index) ** 2) / radius ** 2)[..., None] * colour
    return np.clip(picture, 0, 255).astype(np.uint8)


def clip(seconds: float, offset: int = 0, seed: int = 3) -> bytes:
    """A phone-like clip (libx264's defaults: High profile, B-frames), 320x240 at 25 fps, from frame `offset`."""
    return fm.video_bytes(seconds=seconds, width=320, height=240, fps=25, x264_defaults=True, audio_codec=None,
                          picture=lambda h, w, i: blobs(h, w, i + offset, seed))


def reencoded(data: bytes, width: int, height: int, crf: int = 30) -> bytes:
    """The clip decoded and written again, each frame resized, at a lower quality: a re-upload."""
    import io

    out = io.BytesIO()
    with av.open(io.BytesIO(data)) as source, av.open(out, "w", format="mp4") as target:
        stream = target.add_stream("libx264", rate=25)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.codec_context.options = {"crf": str(crf)}
        for index, frame in enumerate(source.decode(video=0)):
            resized = frame.reformat(width=width, height=height, format="yuv420p")
            resized.pts, resized.time_base = index, Fraction(1, 25)
            for packet in stream.encode(resized):
                target.mux(packet)
        for packet in stream.encode():
            target.mux(packet)
    return out.getvalue()


def other_clip(seconds: float) -> bytes:
    return clip(seconds, seed=9)


def features(data: bytes) -> list[tuple[int, str]]:
    return [(f.quality, f.hex) for f in vpdq_of_video(MediaItem("videos", 0, data))]


def entry_of(data: bytes, action: str = "act", line: int = 2) -> BankEntry:
    value = ";".join(f.line() for f in vpdq_of_video(MediaItem("videos", 0, data)))
    return BankEntry("vpdq", value, f"video{line}", action, "test", ADDED, line)


def bank_of(*entries: BankEntry, threshold: int = 31) -> Bank:
    return Bank(BankFile("videos", Path("videos.csv"), "v1", entries), pdq_threshold=threshold)


def test_the_hash_is_vpdqs_and_each_frame_is_the_pdq_of_that_frame(tmp_path):
    import vpdq

    data = clip(3.0)
    path = tmp_path / "clip.mp4"
    path.write_bytes(data)
    ours = vpdq_of_video(MediaItem("videos", 0, data))
    theirs = vpdq.computeHash(str(path), seconds_per_hash=1.0)
    assert [(f.frame, f.quality, f.hex) for f in ours] == [(t.frame_number, t.quality, t.hex) for t in theirs]
    assert [f.frame for f in ours] == [0, 25, 50] and [f.seconds for f in ours] == [0.0, 1.0, 2.0]
    with av.open(str(path)) as container:
        frames = [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]
    for feature in ours:             # a photo's PDQ and a video frame's agree, bit order included
        assert pdq_of_pixels(frames[feature.frame]).hex == feature.hex


def vpdq_brute(query: list[tuple[int, str]], banked: list[tuple[int, str]], threshold: int) -> tuple[float, float]:
    """vPDQ's README comparison, written out: unique hashes, quality >= 50, each side's share within the threshold."""
    def kept(frames):
        first: dict[str, int] = {}
        for quality, digits in frames:
            first.setdefault(digits, quality)
        return [int(d, 16) for d, q in first.items() if q >= 50]

    q, c = kept(query), kept(banked)
    def near(a: int, b: int) -> bool:
        return (a ^ b).bit_count() <= threshold

    return (100.0 * sum(any(near(x, y) for y in q) for x in c) / len(c),
            100.0 * sum(any(near(x, y) for y in c) for x in q) / len(q))


def test_the_index_answers_as_vpdqs_brute_force_comparison():
    rng = np.random.default_rng(7)

    def flipped(digits: str, bits: int) -> str:
        value = int(digits, 16)
        for bit in rng.choice(256, bits, replace=False):
            value ^= 1 << int(bit)
        return f"{value:064x}"

    videos = []
    for _ in range(30):
        frames = [(int(rng.choice([20, 60, 100])), rng.bytes(32).hex()) for _ in range(int(rng.integers(1, 12)))]
        frames.append(frames[0])                                  # a repeated frame counts once
        videos.append(frames)
    entries = []
    for line, frames in enumerate(videos, start=2):
        if all(q < 50 for q, _ in frames):
            frames[0] = (100, frames[0][1])
        entries.append(BankEntry("vpdq", ";".join(f"{i},{q},{d},{i}.000" for i, (q, d) in enumerate(frames)),
                                 f"v{line}", "flag", "t", ADDED, line))
    bank = bank_of(*entries)
    for trial in range(60):
        source = [(q, d) for q, d in videos[int(rng.integers(0, len(videos)))] if rng.random() < 0.85]
        query = [(q, flipped(d, int(rng.integers(0, 45)))) for q, d in source] + \
                [(100, rng.bytes(32).hex()) for _ in range(int(rng.integers(0, 4)))]
        if not any(q >= 50 for q, _ in query):
            continue
        found = {m.entry.line: m for m in bank.match_video(query)}
        for entry in entries:
            banked = [(q, d) for _, q, d, _ in (tuple(p.split(",")) for p in entry.hash.split(";"))]
            banked = [(int(q), d) for q, d in banked]
            banked_pct, query_pct = vpdq_brute(query, banked, 31)
            if banked_pct >= 80.0:
                assert entry.line in found, (trial, entry.line)
                assert found[entry.line].banked_percent == round(banked_pct, 1)
                assert found[entry.line].query_percent == round(query_pct, 1)
            else:
                assert entry.line not in found, (trial, entry.line)


def test_a_reencoded_copy_and_a_clip_inside_a_longer_video_match_and_another_video_does_not():
    banked = clip(4.0)
    bank = bank_of(entry_of(banked))
    smaller = reencoded(banked, 240, 180)     # re-encoded at 3/4 of the size, a lower quality: 12-24 bits a frame
    # (at half the size 18-30 bits: at the edge of the threshold, and libx264's output varies run to run)
    [match] = bank.match_video(features(smaller))
    assert match.banked_percent >= 80.0 and 0 <= match.distance <= 31
    longer = fm.video_bytes(seconds=8.0, width=320, height=240, fps=25, x264_defaults=True, audio_codec=None,
                            picture=lambda h, w, i: blobs(h, w, i - 50) if 50 <= i < 150 else blobs(h, w, i, seed=11))
    [inside] = bank.match_video(features(longer))       # the banked 4 s in the middle of 8: padding is no escape
    assert inside.banked_percent >= 80.0 and inside.query_percent < 80.0
    assert bank.match_video(features(other_clip(4.0))) == []


def test_a_request_video_is_matched_through_the_bank_set_and_a_bad_one_is_a_counted_miss():
    banked = clip(3.0)
    banks = BankSet([bank_of(entry_of(banked, action="act"))],
                    lambda item, limits, cancelled=None: vpdq_of_video(item, limits))
    verdict = banks.consult([MediaItem("videos", 0, reencoded(banked, 240, 180))])
    assert verdict.decides and verdict.shown.hash_type == "vpdq"
    wire = verdict.shown.to_wire()
    assert wire["medium"] == "videos[0]" and wire["banked_match_percent"] >= 80.0 and "query_match_percent" in wire
    broken = MediaItem("videos", 0, banked[: len(banked) // 3])
    failed = banks.consult([broken])
    assert failed.hash_failures == ("videos[0]",) and failed.shown is None
    with pytest.raises(ValueError, match="video_features"):
        BankSet([bank_of(entry_of(banked))])


def test_bad_vpdq_entries_are_named_and_one_video_banked_twice_is_refused(tmp_path):
    good = entry_of(clip(2.0)).hash
    header = "hash_type,hash,label,action,source,added\n"
    cases = {"0,100,abc,0.0": "frame 1: a frame's PDQ hash is 64 hex digits",
             f"0,100,{'a' * 64}": "frame 1: '0,100,aaaa",
             f"0,101,{'a' * 64},0.0": "quality 0..100",
             f"0,100,{'a' * 64},-1": "not a time >= 0",
             f"0,10,{'a' * 64},0.0;1,40,{'b' * 64},1.0": "no frame of this vpdq hash has quality >= 50"}
    for value, message in cases.items():
        path = tmp_path / "bad.csv"
        path.write_text(header + f'vpdq,"{value}",x,act,t,{ADDED}\n')
        with pytest.raises(BankError, match="bad.csv: line 2: hash: ") as raised:
            read_bank(path)
        assert message in str(raised.value), (value, str(raised.value))
    twice = tmp_path / "twice.csv"          # the same hash written another way (upper case, spaces) is the same hash
    twice.write_text(header + f'vpdq,"{good}",a,act,t,{ADDED}\n' +
                     f'vpdq,"{good.upper().replace(";", " ; ")}",b,act,t,{ADDED}\n')
    with pytest.raises(BankError, match="twice.csv: line 3: hash: vpdq .* is already on line 2"):
        read_bank(twice)


def test_the_worker_hasher_returns_a_bad_videos_error_and_survives_a_hang_and_a_dead_worker():
    from omni.banks.video_hasher import VideoHasher, VideoHashFailed

    hasher = VideoHasher(workers=1, timeout_s=60.0)
    try:
        data = clip(2.0)
        assert [f.hex for f in hasher.features(MediaItem("videos", 0, data))] == [h for _, h in features(data)]
        with pytest.raises(MediaError, match=r"videos\[0\]"):
            hasher.features(MediaItem("videos", 0, b"\x00\x00\x00\x18ftypmp42 not a video at all"))
        hasher.timeout_s = 1e-4                  # no answer in time: the pool is ended, and started again after
        with pytest.raises(VideoHashFailed, match="no vPDQ hash within"):
            hasher.features(MediaItem("videos", 0, data))
        assert hasher.restarts == 1 and hasher.stats()["stopped_timeout"] == 1
        hasher.timeout_s = 60.0
        assert len(hasher.features(MediaItem("videos", 0, data))) == 2
        [idle] = hasher._idle                    # a worker that died while idle is replaced, not used
        idle.kill()
        idle.wait()
        assert len(hasher.features(MediaItem("videos", 0, data))) == 2 and hasher.restarts == 2
        assert hasher.stats()["stopped_died"] == 1
    finally:
        hasher.close()


def test_the_hasher_bounds_a_callers_whole_wait_lets_an_unwanted_one_go_leaves_no_files_and_stays_closed():
    import threading

    from omni.banks.video_hasher import VideoHasher, VideoHashFailed

    hasher = VideoHasher(workers=1, timeout_s=60.0)
    data = MediaItem("videos", 0, clip(1.0))
    try:
        assert len(hasher.features(data)) == 1
        [directory] = hasher._all.values()             # the worker's own temporary directory
        hasher.timeout_s = 1e-4                        # killed mid-hash: its directory goes with it
        with pytest.raises(VideoHashFailed):
            hasher.features(data)
        assert not Path(directory).exists()
        hasher.timeout_s = 0.5
        hasher._turns.acquire()                        # every worker busy (a hostile video hashing, say)
        try:
            with pytest.raises(VideoHashFailed, match="no vPDQ worker was free within 0.5 s"):
                hasher.features(data)                  # the wait for a turn counts in the timeout
            hasher.timeout_s = 600.0
            cancelled, outcome = threading.Event(), []

            def unwanted():
                try:
                    hasher.features(data, MediaLimits(), cancelled)
                except VideoHashFailed as exc:
                    outcome.append(str(exc))

            waiting = threading.Thread(target=unwanted)
            waiting.start()
            cancelled.set()                            # the request was answered without it
            waiting.join(timeout=30)
            assert not waiting.is_alive() and outcome == ["the hash is no longer wanted"]
        finally:
            hasher._turns.release()
        assert len(hasher.features(data)) == 1
        directories = list(hasher._all.values())
    finally:
        hasher.close()
    assert directories and not any(Path(d).exists() for d in directories)
    with pytest.raises(VideoHashFailed, match="closed"):
        hasher.features(data)                          # closed stays closed: no worker starts again
    assert hasher._all == {}


def test_an_unwanted_hash_is_let_finish_within_its_grace_and_stopped_after_it_with_a_replacement_started():
    import threading

    from omni.banks.video_hasher import VideoHasher, VideoHashFailed

    data = MediaItem("videos", 0, clip(2.0))
    hasher = VideoHasher(workers=1, timeout_s=60.0, cancel_grace_s=60.0)
    try:
        expected = [h for _, h in features(data.data)]
        assert [f.hex for f in hasher.features(data)] == expected
        [first] = hasher._idle
        cancelled = threading.Event()
        cancelled.set()                        # nobody wants it, but it ends within the grace: worker kept
        assert [f.hex for f in hasher.features(data, MediaLimits(), cancelled)] == expected
        assert hasher._idle == [first] and hasher.restarts == hasher.abandoned == 0
        directory = hasher._all[first]
        hasher.cancel_grace_s = 0.0            # not finished within the grace: stopped
        with pytest.raises(VideoHashFailed, match="no longer wanted"):
            hasher.features(data, MediaLimits(), cancelled)
        assert hasher.restarts == hasher.abandoned == 1 and first.poll() is not None
        assert hasher.stats() == {"workers": 1, "stopped_timeout": 0, "stopped_died": 0, "stopped_unwanted": 1,
                                  "stopped_interrupted": 0}
        assert not Path(directory).exists()
        [replacement] = hasher._idle           # started at once, for the next video
        assert replacement is not first and replacement.poll() is None
        assert [f.hex for f in hasher.features(data)] == expected and hasher._idle == [replacement]
        assert hasher.restarts == 1            # a hash nobody cancelled is not watched: no change
    finally:
        hasher.close()
    assert hasher._all == {}


def test_the_vpdq_worker_imports_no_torch():
    """A worker (re)starts in a fraction of a second: it checks a video's header and hashes it without torch."""
    import subprocess
    import sys

    probe = ("import sys\n"
             "from omni.banks.vpdq_worker import answer\n"
             "from preprocess.item import MediaItem\n"
             "from preprocess.media import MediaLimits\n"
             "print(type(answer((MediaItem('videos', 0, b'not a video'), MediaLimits()))).__name__)\n"
             "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.split("\n")[:2] == ["CorruptMedia", "[]"], done.stdout[:300]
