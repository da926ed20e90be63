"""ShadowScorer: scores are gathered into batches off the caller's thread, a full queue drops at once (counted), a
failing score resolves to None (counted) and never raises into the caller."""
from __future__ import annotations

import threading
from collections import Counter

from omni.contract.types import ShadowScore
from omni.serve.shadow import ShadowScorer


def score_of(record) -> ShadowScore:
    return ShadowScore("cand", None, {"q": {"type": "noul", "noul": record}}, {"q": {"true": record}}, True)


class Recorder:
    def __init__(self, gate: threading.Event | None = None, fail: bool = False):
        self.batches: list[list] = []
        self.counts: Counter[str] = Counter()
        self.gate, self.fail = gate, fail
        self.entered = threading.Event()

    def score(self, records):
        self.entered.set()
        if self.gate is not None:
            self.gate.wait(10)
        if self.fail:
            raise RuntimeError("candidate head blew up")
        self.batches.append(list(records))
        return [score_of(r) for r in records]

    def count(self, kind: str) -> None:
        self.counts[kind] += 1


def test_records_are_scored_together_once_a_batch_is_full():
    recorder = Recorder()
    scorer = ShadowScorer(recorder.score, recorder.count, batch_records=4, gather_s=600.0)   # never by waiting
    futures = [scorer.submit(i / 10) for i in range(4)]
    assert [f.result(5).answers["q"]["noul"] for f in futures] == [0.0, 0.1, 0.2, 0.3]
    assert [len(b) for b in recorder.batches] == [4] and recorder.counts == {"same_forward": 4}
    scorer.stop()


def test_a_record_alone_is_scored_once_it_waited_the_gather_time():
    recorder = Recorder()
    scorer = ShadowScorer(recorder.score, recorder.count, batch_records=4, gather_s=0.01)
    assert scorer.submit(0.9).result(5).probabilities == {"q": {"true": 0.9}}
    assert [len(b) for b in recorder.batches] == [1] and recorder.counts == {"same_forward": 1}
    scorer.stop()


def test_a_full_queue_drops_at_once_and_counts_it():
    gate = threading.Event()
    recorder = Recorder(gate)
    scorer = ShadowScorer(recorder.score, recorder.count, batch_records=1, gather_s=0.0, max_pending=2)
    first = scorer.submit(0.1)                     # taken by the thread, which blocks on the gate
    assert recorder.entered.wait(5)
    queued = [scorer.submit(0.2), scorer.submit(0.3)]
    dropped = scorer.submit(0.4)
    assert dropped.done() and dropped.result() is None and recorder.counts["dropped"] == 1
    gate.set()
    assert first.result(5) is not None and all(f.result(5) is not None for f in queued)
    scorer.stop()


def test_a_failing_score_resolves_to_none_and_is_counted():
    recorder = Recorder(fail=True)
    scorer = ShadowScorer(recorder.score, recorder.count, batch_records=2, gather_s=0.01)
    futures = [scorer.submit(0.5), scorer.submit(0.6)]
    assert [f.result(5) for f in futures] == [None, None]
    assert recorder.counts == {"failed": 2}
    scorer.stop()
    assert scorer.submit(0.7).result(1) is None and recorder.counts["dropped"] == 1    # stopped: dropped
