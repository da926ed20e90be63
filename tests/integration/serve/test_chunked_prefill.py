"""Long prefixes are prefilled a chunk at a time: answers equal the one-forward answers (1e-5), other requests are
served between the chunks, and a request whose deadline passes stops at its next chunk and frees the model."""
from __future__ import annotations

import time

import pytest

from fixtures.media import image_bytes, video_bytes, wav_bytes
from omni.contract.config import EngineConfig
from omni.contract.errors import DeadlineExceeded, Overloaded
from omni.contract.request import parse_request
from omni.serve.engine import DecisionEngine
from tests.integration.serve.test_caches import QUESTIONS, assert_close, data_url

LONG_STATE = " ".join(f"line {i}: the fan rattles at {i % 97} rpm and the label is scratched." for i in range(150))
VERY_LONG_STATE = LONG_STATE * 8          # seconds of chunks on this CPU: the deadline passes between two of them


@pytest.fixture(scope="module")
def media():
    return {"images": [data_url("image/png", image_bytes("PNG", "RGB", 96, 64))],
            "audio": [data_url("audio/wav", wav_bytes(1.0, 16000, 1))],
            "videos": [data_url("video/mp4", video_bytes(seconds=2.0, width=64, height=64))]}


def engine(tiny_dir, **config) -> DecisionEngine:
    return DecisionEngine(EngineConfig(model_path=str(tiny_dir), probability_decimals=8, **config)).load()


@pytest.mark.parametrize("prefix_cache_mb", [0, 64])
def test_chunked_answers_equal_one_forward(tiny_dir, media, prefix_cache_mb):
    whole = engine(tiny_dir, prefill_chunk_tokens=0, prefix_cache_mb=0, media_cache_mb=0)
    chunked = engine(tiny_dir, prefill_chunk_tokens=256, prefix_cache_mb=prefix_cache_mb)
    bodies = [{"state": LONG_STATE, "questions": QUESTIONS},
              {"state": LONG_STATE, "questions": QUESTIONS, **media},                 # media all in the first chunk
              {"state": LONG_STATE, "questions": QUESTIONS, "x_isolation": "isolated"}]
    for body in bodies:
        want = whole.decide(parse_request(body, whole.config))
        record = chunked.model.prepare(parse_request(body, chunked.config))
        assert record.prefix_len > 4 * 256
        cached = record.prefix_key in chunked.model.prefixes        # the third body shares the first one's prefix
        assert chunked.model.needs_chunks(record) != cached
        got = chunked.decide(parse_request(body, chunked.config))
        assert (got.timings_ms.get("prefill_chunks", 0) > 0) != cached
        assert_close(got.answers, want.answers)


def test_other_requests_are_served_between_the_chunks_of_a_long_one(tiny_dir):
    on = DecisionEngine(EngineConfig(model_path=str(tiny_dir), prefill_chunk_tokens=128, max_wait_ms=0)).start()
    try:
        long = on.submit(parse_request({"state": LONG_STATE, "questions": QUESTIONS}, on.config))
        deadline = time.monotonic() + 60
        while on.batcher.stats().requeued == 0 and time.monotonic() < deadline:
            time.sleep(0.005)                                   # the long request has had its first chunk
        short = on.submit(parse_request({"state": "Short ticket.", "questions": QUESTIONS}, on.config))
        short.result(60)
        assert not long.done()                                  # the short one did not wait for the long one
        assert set(long.result(120).answers) == set(QUESTIONS)
    finally:
        on.stop()


def test_a_long_request_past_its_deadline_stops_at_its_next_chunk(tiny_dir):
    on = DecisionEngine(EngineConfig(model_path=str(tiny_dir), prefill_chunk_tokens=128, max_wait_ms=0)).start()
    try:
        long = on.submit(parse_request({"state": VERY_LONG_STATE, "questions": QUESTIONS}, on.config), deadline_s=0.3)
        with pytest.raises(DeadlineExceeded):
            long.result(60)
        stats = on.batcher.stats()
        assert stats.requeued >= 1 and stats.expired >= 1
        after = on.submit(parse_request({"state": "next", "questions": QUESTIONS}, on.config))
        assert set(after.result(60).answers) == set(QUESTIONS)  # the model is free again
    finally:
        on.stop()


def test_a_long_request_that_cannot_finish_behind_the_long_work_ahead_is_refused_at_once(tiny_dir):
    on = DecisionEngine(EngineConfig(model_path=str(tiny_dir), prefill_chunk_tokens=128, max_wait_ms=0)).start()
    try:
        first = on.submit(parse_request({"state": LONG_STATE * 4, "questions": QUESTIONS}, on.config), deadline_s=600)
        deadline = time.monotonic() + 60
        while on.batcher.stats().requeued < 3 and time.monotonic() < deadline:
            time.sleep(0.005)                                   # a few chunks ran: the rate is measured
        body = {"state": LONG_STATE, "questions": QUESTIONS}
        own_s = on._longs.backlog.seconds_per_token() * on.model.prepare(parse_request(body, on.config)).prefix_len
        behind = on.submit(parse_request({**body, "state": LONG_STATE + " (2)"}, on.config), deadline_s=600)
        while on.long_prefills()["in_flight"] < 2 and time.monotonic() < deadline:
            time.sleep(0.005)                                   # admitted behind the first: it has the time
        assert not first.done()
        queued_before = on.batcher.stats().submitted
        hopeless = on.submit(parse_request({**body, "state": LONG_STATE + " (3)"}, on.config), deadline_s=own_s)
        with pytest.raises(Overloaded) as refused:              # its own time fits, the work ahead does not
            hopeless.result(60)
        assert on.batcher.stats().submitted == queued_before    # refused before the queue: no chunk of it ran
        assert refused.value.retry_after_s >= 1.0 and on.long_prefills()["refused"] == 1
        assert set(first.result(300).answers) == set(QUESTIONS) and set(behind.result(300).answers) == set(QUESTIONS)
        assert on.long_prefills()["in_flight"] == 0             # answered requests leave the backlog
    finally:
        on.stop()
