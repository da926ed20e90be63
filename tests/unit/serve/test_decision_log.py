"""omni.serve.decision_log(_files): the decision log — records read back equal what was appended, media kept once by
hash (or as hashes only), rotation by size, retention, torn and corrupt lines, a directory that cannot be created or
written, a full disk (an injected capped writer always; a real tiny tmpfs when this process may mount one), a full
queue, concurrent threads and two processes sharing one directory. No model, no timing assertions."""
from __future__ import annotations

import errno
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from omni.contract.config import EngineConfig
from omni.contract.render import render_request
from omni.contract.request_line import parse_request_line
from omni.contract.types import DecisionRequest, Option, Question
from omni.serve.decision_log import DecisionLog
from omni.serve.decision_log_files import (
    LOG_FORMAT,
    DecisionLogError,
    DecisionLogReadError,
    read_media,
    read_records,
    segment_paths,
)
from preprocess.item import MediaItem
from tests.unit.fake_model import media

ROOT = Path(__file__).resolve().parents[3]
WAIT_S = 30.0       # a bound that turns a hang into a failure, never a claim about speed
DAY_S = 86400.0
QUESTION = Question("fault", "choice", (Option("none", "no fault"), Option("rattle", "a rattle")))


def request(state: str = "Fan rattles.", *items: tuple[str, bytes]) -> DecisionRequest:
    slots: dict[str, int] = {}
    media_items = []
    for slot, data in items:
        media_items.append(MediaItem(slot, slots.get(slot, 0), data))
        slots[slot] = slots.get(slot, 0) + 1
    return DecisionRequest(state=state, questions=(QUESTION,), media=tuple(media_items), request_id=f"id-{state}")


def response(state: str) -> dict:
    return {"model": "tiny", "answers": {"fault": {"type": "choice", "probabilities": {"none": 0.25, "rattle": 0.75}}},
            "usage": {"input_tokens": len(state), "output_tokens": 0}}


def audit(state: str) -> dict:
    return {"format": "omni-audit/1", "model": {"id": "tiny", "sha256": "ab" * 32}, "request_id": f"id-{state}",
            "decided_at": "2026-12-02T05:00:00.123456Z", "media": []}


def append(log: DecisionLog, req: DecisionRequest) -> bool:
    return log.append(req, response(req.state), audit(req.state), request_id=req.request_id,
                      decided_at="2026-12-02T05:00:00.123456Z")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def states(path: Path) -> list[str]:
    return [record.request["state"] for record in read_records(path)]


class CappedWriter:
    """os.write with a byte budget, like a filesystem that fills: the write that crosses it is short (what fits),
    every later one raises ENOSPC. `blocked` holds every write until it is set (a writer stuck on a slow disk)."""

    def __init__(self) -> None:
        self.budget_bytes: int | None = None
        self.open = threading.Event()
        self.open.set()

    def __call__(self, fd: int, data: bytes) -> int:
        assert self.open.wait(WAIT_S)
        if self.budget_bytes is not None:
            if self.budget_bytes <= 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            data = data[:self.budget_bytes]
            self.budget_bytes -= len(data)
        return os.write(fd, data)


# ------------------------------------------------------------------------------------------------ round trip
def test_records_read_back_equal_what_was_appended_and_their_media_replay(tmp_path):
    image, sound, clip = media("image", b"red" * 10), media("audio", b"hum" * 10), media("video", b"clip" * 10)
    requests = [request("text only"), request("one image", ("images", image)),
                request("image, audio and video", ("images", image), ("audio", sound), ("videos", clip))]
    with DecisionLog(tmp_path / "log") as log:
        assert all(append(log, req) for req in requests)
    records = list(read_records(tmp_path / "log"))
    containers = {image: "png", sound: "wav", clip: "mp4"}
    for req, record in zip(requests, records, strict=True):
        entries = [f"media/{sha(m.data)}.{containers[m.data]}" for m in req.media]
        assert record.record == {"format": LOG_FORMAT, "request_id": req.request_id,
                                 "decided_at": "2026-12-02T05:00:00.123456Z",
                                 "request": render_request(req, entries),
                                 "response": response(req.state), "audit": audit(req.state)}
        assert record.root == tmp_path / "log"
        replayed = parse_request_line(json.dumps(record.request), record.root, EngineConfig())
        assert replayed.state == req.state and [m.data for m in replayed.media] == [m.data for m in req.media]
    assert read_media(tmp_path / "log", sha(clip)) == clip
    assert [r.record for r in read_records(segment_paths(tmp_path / "log")[0])] == [r.record for r in records]
    stats = log.stats()
    assert (stats.appended, stats.written, stats.dropped, stats.media_files, stats.queue_depth) == (3, 3, 0, 3, 0)
    assert stats.bytes_written == sum(p.stat().st_size for p in segment_paths(tmp_path / "log"))


def test_media_are_stored_once_per_content(tmp_path):
    image = media("image", b"same" * 20)
    with DecisionLog(tmp_path) as log:
        for n in range(3):
            append(log, request(f"r{n}", ("images", image), ("images", image)))
    assert sorted(os.listdir(tmp_path / "media")) == [f"{sha(image)}.png"]
    assert {entry for r in read_records(tmp_path) for entry in r.request["images"]} == {f"media/{sha(image)}.png"}
    assert log.stats().media_files == 1 and log.stats().media_bytes_written == len(image)


def test_hash_only_stores_no_media_and_records_the_hashes(tmp_path):
    image = media("image", b"private" * 5)
    with DecisionLog(tmp_path, media="hash-only") as log:
        append(log, request("hashed", ("images", image)))
    assert os.listdir(tmp_path / "media") == []
    [record] = read_records(tmp_path)
    assert record.request["images"] == [{"sha256": sha(image), "type": "png", "bytes": len(image)}]
    with pytest.raises(DecisionLogReadError, match="kept as a hash only"):
        read_media(tmp_path, sha(image))


# ------------------------------------------------------------------------------------------------ segments
def test_segments_rotate_by_size_and_their_names_sort_in_write_order(tmp_path):
    with DecisionLog(tmp_path, segment_bytes=2000) as log:
        for n in range(30):
            append(log, request(f"record {n:02d} " + "x" * 300))
        append(log, request("bigger than a segment " + "y" * 3000))
        append(log, request("after the big one"))
    segments = segment_paths(tmp_path)
    sizes = [p.stat().st_size for p in segments]
    assert len(segments) >= 10 and log.stats().segments == len(segments)
    assert max(sizes) > 2000 and sorted(sizes)[-2] <= 2000      # only the one big record stands alone
    assert states(tmp_path) == [f"record {n:02d} " + "x" * 300 for n in range(30)] + \
        ["bigger than a segment " + "y" * 3000, "after the big one"]


def test_a_segment_deleted_under_the_writer_is_replaced_not_written_into_the_void(tmp_path):
    with DecisionLog(tmp_path) as log:
        append(log, request("first"))
        assert log.flush(WAIT_S)
        segment_paths(tmp_path)[0].unlink()          # another process's retention took it
        append(log, request("second"))
    assert states(tmp_path) == ["second"] and log.stats().written == 2


# ------------------------------------------------------------------------------------------------ retention
def age(path: Path, seconds_ago: float, now_s: float) -> None:
    os.utime(path, (now_s - seconds_ago, now_s - seconds_ago))


def test_retention_prunes_old_segments_and_the_media_only_they_named(tmp_path):
    now_s = time.time()
    then_s = now_s - 40 * DAY_S
    old, shared, spanning, recent = (media("image", tag * 10) for tag in (b"old", b"shared", b"spans", b"new"))
    with DecisionLog(tmp_path, clock=lambda: then_s) as log:        # a segment opened and last written 40 days ago
        append(log, request("old", ("images", old), ("images", shared)))
    [old_segment] = segment_paths(tmp_path)
    for path in [old_segment, *(tmp_path / "media").iterdir()]:
        age(path, 40 * DAY_S, now_s)
    with DecisionLog(tmp_path, clock=lambda: then_s) as log:        # opened 40 days ago, still written today
        append(log, request("spanning", ("images", spanning)))
    age(tmp_path / "media" / f"{sha(spanning)}.png", 40 * DAY_S, now_s)
    with DecisionLog(tmp_path, clock=lambda: now_s) as log:         # today, naming the shared image again
        append(log, request("recent", ("images", shared), ("images", recent)))

    log = DecisionLog(tmp_path, retain_days=30, clock=lambda: now_s).open()
    stats = log.close()
    assert (stats.pruned_segments, stats.pruned_media) == (1, 1)
    assert not old_segment.exists() and states(tmp_path) == ["spanning", "recent"]
    assert sorted(os.listdir(tmp_path / "media")) == sorted(f"{sha(m)}.png" for m in (shared, spanning, recent))


def test_the_writer_prunes_on_rotation(tmp_path):
    clock_s = [time.time()]
    with DecisionLog(tmp_path, segment_bytes=500, retain_days=1, prune_interval_s=1e9,      # rotation alone prunes
                     clock=lambda: clock_s[0]) as log:
        for n in range(3):
            append(log, request(f"day one {n} " + "x" * 400, ("images", media("image", b"%d" % n))))
        assert log.flush(WAIT_S)
        for path in [*segment_paths(tmp_path), *(tmp_path / "media").iterdir()]:
            age(path, 2 * DAY_S, clock_s[0])        # aged first, then the clock moves (the writer reads it)
        clock_s[0] += 2 * DAY_S
        append(log, request("day three " + "x" * 400))         # rotates: the day-one segments are past retention
    assert states(tmp_path) == ["day three " + "x" * 400]
    assert (log.stats().pruned_segments, log.stats().pruned_media) == (3, 3)
    assert os.listdir(tmp_path / "media") == []


# ------------------------------------------------------------------------------------------------ reading
def write_log(tmp_path: Path, count: int = 3) -> Path:
    with DecisionLog(tmp_path) as log:
        for n in range(count):
            append(log, request(f"r{n}"))
    return segment_paths(tmp_path)[0]


def test_a_torn_last_line_is_skipped(tmp_path):
    segment = write_log(tmp_path)
    last = segment.read_bytes().splitlines(keepends=True)[-1]
    with open(segment, "ab") as handle:
        handle.write(last[:len(last) // 2])                # the writer died mid-line
    assert states(tmp_path) == ["r0", "r1", "r2"]
    only_torn = segment.with_name("decisions-20990101T000000Z-000009-00000000.jsonl")
    only_torn.write_bytes(last[:12])                         # died in its first line, even before "format" ended
    assert states(tmp_path) == ["r0", "r1", "r2"] and list(read_records(only_torn)) == []


@pytest.mark.parametrize("bad", [b"{not json at all}\n", b'{"format": "omni-decision/1", "request_id": "x"\n',
                                 b'{"format": "omni-decision/1", "request_id": null}\n', b"\xff\xfe\x00binary\n"])
def test_a_corrupt_line_in_the_middle_is_an_error_naming_file_and_line(tmp_path, bad):
    segment = write_log(tmp_path)
    lines = segment.read_bytes().splitlines(keepends=True)
    segment.write_bytes(lines[0] + bad + b"".join(lines[1:]))
    with pytest.raises(DecisionLogReadError) as caught:
        list(read_records(tmp_path))
    assert caught.value.line == 2 and str(segment) in str(caught.value) and "line 2" in str(caught.value)


@pytest.mark.parametrize("content", [
    b'{"state": "a dataset line", "questions": {"q": {"type": "noul"}}, "labels": {"q": true}}\n',
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR binary with no newline",
    b'[1, 2, 3]'])
def test_a_file_that_is_not_a_log_is_an_error_naming_it(tmp_path, content):
    foreign = tmp_path / "foreign.jsonl"
    foreign.write_bytes(content)
    with pytest.raises(DecisionLogReadError, match="line 1: not a decision-log record") as caught:
        list(read_records(foreign))
    assert str(foreign) in str(caught.value)


def test_a_folder_that_is_not_a_log_or_a_missing_path_is_an_error(tmp_path):
    with pytest.raises(DecisionLogReadError, match="not a decision log directory"):
        read_records(tmp_path)
    with pytest.raises(DecisionLogReadError, match="does not exist"):
        read_records(tmp_path / "nowhere.jsonl")


# ------------------------------------------------------------------------------------------------ opening
def test_a_directory_that_cannot_be_created_is_refused_at_open(tmp_path):
    (tmp_path / "a-file").write_text("not a folder")
    for directory in (tmp_path / "a-file", tmp_path / "a-file" / "log"):
        with pytest.raises(DecisionLogError, match="cannot be created") as caught:
            DecisionLog(directory).open()
        assert str(directory) in str(caught.value) and isinstance(caught.value, DecisionLogError)


def test_an_unwritable_directory_is_refused_at_open(tmp_path, tiny_filesystem):
    if os.geteuid() == 0:           # root writes through file modes: a read-only filesystem stands in
        directory = tiny_filesystem("ro,size=64k")
    else:
        directory = tmp_path / "locked"
        directory.mkdir()
        directory.chmod(0o555)
    with pytest.raises(DecisionLogError, match=r"is not writable \(") as caught:
        DecisionLog(directory).open()
    assert str(directory) in str(caught.value)
    with pytest.raises(DecisionLogError, match=r"cannot be created \(") as caught:
        DecisionLog(directory / "log").open()
    assert str(directory / "log") in str(caught.value)


@pytest.mark.parametrize(("code", "words"), [(errno.EACCES, "is not writable"), (errno.ENOSPC, "is full")])
def test_a_failed_probe_write_is_refused_at_open_with_its_cause(tmp_path, code, words):
    def failing(fd: int, data: bytes) -> int:
        raise OSError(code, os.strerror(code))
    with pytest.raises(DecisionLogError, match=words) as caught:
        DecisionLog(tmp_path / "log", write=failing).open()
    assert str(tmp_path / "log") in str(caught.value)
    assert not [p for p in (tmp_path / "log").rglob("*") if p.is_file()]       # the probe file is gone


def fill(fd: int) -> None:
    """Write zeros to `fd` until its filesystem refuses (OSError)."""
    while True:
        os.write(fd, b"\0" * 4096)


def test_a_full_filesystem_is_refused_at_open(tiny_filesystem):
    directory = tiny_filesystem()
    fd = os.open(directory / "filler", os.O_WRONLY | os.O_CREAT)
    with pytest.raises(OSError, match="No space"):
        fill(fd)
    os.close(fd)
    with pytest.raises(DecisionLogError, match="is full"):
        DecisionLog(directory / "log").open()


# ------------------------------------------------------------------------------------------------ failures
def test_a_full_disk_counts_write_errors_marks_unhealthy_and_never_raises(tmp_path):
    writer = CappedWriter()
    log = DecisionLog(tmp_path, write=writer).open()
    writer.budget_bytes = 3000                  # about two records with their media, then the disk is full
    results = [append(log, request(f"r{n}", ("images", media("image", b"%03d" % n * 100)))) for n in range(10)]
    assert all(results) and log.flush(WAIT_S)
    stats = log.stats()
    assert stats.write_errors >= 1 and stats.written >= 1
    assert stats.written + stats.dropped == 10 and stats.dropped == stats.write_errors
    assert not log.healthy and "is full" in (stats.last_error or "") and str(tmp_path) in (stats.last_error or "")
    writer.budget_bytes = None                  # space freed: the next write succeeds and the log is healthy again
    append(log, request("after", ("images", media("image", b"after"))))
    assert log.flush(WAIT_S) and log.healthy
    stats = log.close()
    assert stats.written + stats.dropped == stats.appended == 11
    assert len(states(tmp_path)) == stats.written and states(tmp_path)[-1] == "after"   # no torn or mixed lines


def test_a_real_full_filesystem_counts_write_errors(tiny_filesystem):
    directory = tiny_filesystem()
    log = DecisionLog(directory / "log").open()
    for n in range(12):                         # 12 x 8 KiB of distinct media on a 64 KiB filesystem
        assert append(log, request(f"r{n}", ("images", media("image", os.urandom(8192)))))
    assert log.flush(WAIT_S)
    assert not log.healthy and "is full" in (log.stats().last_error or "")
    stats = log.close()
    assert stats.write_errors >= 1 and stats.written + stats.dropped == 12
    assert len(list(read_records(directory / "log"))) == stats.written


def test_a_record_that_cannot_be_rendered_is_counted_not_lost_silently(tmp_path):
    with DecisionLog(tmp_path) as log:
        log.append(request("odd"), {"not json": {1, 2}}, audit("odd"), request_id=None, decided_at="now")
        append(log, request("fine"))
        assert log.flush(WAIT_S)
        assert log.stats().write_errors == 1 and "TypeError" in (log.stats().last_error or "")
    assert states(tmp_path) == ["fine"]


def test_a_full_queue_drops_and_counts_without_blocking_the_caller(tmp_path):
    writer = CappedWriter()
    log = DecisionLog(tmp_path, queue_records=2, write=writer).open()
    writer.open.clear()                         # the disk stalls: the writer thread blocks in its first write
    results: list[bool] = []
    caller = threading.Thread(target=lambda: results.extend(append(log, request(f"r{n}")) for n in range(5)))
    caller.start()
    caller.join(WAIT_S)
    assert not caller.is_alive(), "append blocked on a stalled writer"
    assert results == [True, True, False, False, False]
    assert (log.stats().dropped, log.stats().queue_depth) == (3, 2)
    writer.open.set()
    stats = log.close()
    assert (stats.appended, stats.written, stats.dropped) == (5, 2, 3) and states(tmp_path) == ["r0", "r1"]


def test_the_queue_is_bounded_in_media_bytes_too(tmp_path):
    writer = CappedWriter()
    log = DecisionLog(tmp_path, queue_bytes=1000, write=writer).open()
    writer.open.clear()
    big = ("images", media("image", b"b" * 700))
    assert [append(log, request("big", big)), append(log, request("big again", big)), append(log, request("text"))] \
        == [True, False, True]
    assert append(log, request("alone", ("images", media("image", b"c" * 5000)))) is False
    writer.open.set()
    assert log.close().written == 2


def test_close_without_drain_counts_what_was_queued_as_dropped(tmp_path):
    writer = CappedWriter()
    log = DecisionLog(tmp_path, write=writer).open()
    writer.open.clear()
    for n in range(3):
        append(log, request(f"r{n}"))
    closer = threading.Thread(target=log.close, kwargs={"drain": False})
    closer.start()
    writer.open.set()
    closer.join(WAIT_S)
    stats = log.stats()
    assert stats.written + stats.dropped == 3 and stats.dropped >= 2 and stats.queue_depth == 0
    assert append(log, request("late")) is False and log.stats().dropped == stats.dropped + 1
    assert not log.healthy


# ------------------------------------------------------------------------------------------------ concurrency
def test_eight_threads_appending_at_once_land_every_record_whole(tmp_path):
    images = [media("image", b"%d" % n * 50) for n in range(4)]
    with DecisionLog(tmp_path, segment_bytes=50_000, queue_records=4096) as log:
        def work(thread: int) -> None:
            for n in range(200):
                append(log, request(f"t{thread}-{n}", ("images", images[(thread + n) % 4])))
        threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WAIT_S)
    lines = [line for p in segment_paths(tmp_path) for line in p.read_bytes().split(b"\n") if line]
    assert len(lines) == 1600 and all(json.loads(line)["format"] == LOG_FORMAT for line in lines)
    assert sorted(states(tmp_path)) == sorted(f"t{t}-{n}" for t in range(8) for n in range(200))
    assert len(segment_paths(tmp_path)) > 1 and len(os.listdir(tmp_path / "media")) == 4
    assert log.stats().written == 1600 and log.stats().dropped == 0


CHILD = """
import sys, time
from pathlib import Path
from omni.contract.types import DecisionRequest, Option, Question
from omni.serve.decision_log import DecisionLog
from preprocess.item import MediaItem
directory, name = Path(sys.argv[1]), sys.argv[2]
question = Question("fault", "choice", (Option("none"), Option("rattle")))
image = MediaItem("images", 0, b"\\x89PNG\\r\\n\\x1a\\n" + b"shared" * 10)
with DecisionLog(directory, segment_bytes=20_000) as log:
    while not (directory / "go").exists():
        time.sleep(0.01)
    for n in range(300):
        log.append(DecisionRequest(f"{name}-{n}", (question,), media=(image,)), {"answers": {}}, {"n": n},
                   request_id=None, decided_at="2026-12-02T05:00:00Z")
print(log.stats().written)
"""


def test_two_processes_sharing_a_directory_write_segments_of_their_own(tmp_path):
    children = [subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path), name], cwd=ROOT,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for name in ("a", "b")]
    (tmp_path / "go").touch()
    outputs = [child.communicate(timeout=120) for child in children]
    assert [child.returncode for child in children] == [0, 0], outputs
    assert [out.strip() for out, _ in outputs] == ["300", "300"]
    tags = {path.stem.rsplit("-", 1)[1] for path in segment_paths(tmp_path)}
    assert len(tags) == 2
    found = states(tmp_path)
    assert sorted(found) == sorted(f"{name}-{n}" for name in ("a", "b") for n in range(300))
    for name in ("a", "b"):                     # each process's records in its own order
        assert [s for s in found if s.startswith(f"{name}-")] == [f"{name}-{n}" for n in range(300)]
