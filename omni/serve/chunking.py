"""Long prefills in the serving path: admitted only if they can finish in time, then a chunk per model turn and
REQUEUE until their prefix is complete.

A record whose prefix the model prefills in chunks (`DecisionModel.needs_chunks`) is admitted by `admit` against
the backlog of long prefills already under way (`omni.serve.admission.PrefillBacklog`: refused at once with a 429 when
it cannot finish before its deadline). In each model turn the engine asks `turn(record)`: a record with chunks left
gets one (`prefill_step`) and answers True — "more to do" — so the engine hands `REQUEUE` to the micro-batcher,
which puts it back in its queue (oldest first, alternating with fresh batches: `omni.serve.batcher`) while other
requests are answered in between. Once its prefix is done it runs with the next batch like a record whose prefix was
cached. Knows nothing of torch, HTTP or how a model prefills a chunk.
"""
from __future__ import annotations

import time

from omni.model.surface import DecisionModel, RecordT
from omni.serve.admission import PrefillBacklog
from omni.serve.surface import LongPrefillStats


class LongPrefills:
    def __init__(self) -> None:
        self.backlog = PrefillBacklog()      # long prefills admitted and not yet ended

    def admit(self, model: DecisionModel[RecordT], record: RecordT, deadline: float) -> int | None:
        """Admit the record if it is long and the long work ahead of it and its own can finish before `deadline`
        (time.monotonic()), else Overloaded. Returns its backlog key, None when it is not long."""
        tokens = model.prefill_tokens_left(record)
        if not tokens:
            return None
        self.backlog.admit(id(record), tokens, deadline - time.monotonic())
        return id(record)

    def turn(self, model: DecisionModel[RecordT], record: RecordT, timings_ms: dict[str, float]) -> bool:
        """The record's share of one model turn: one chunk of its long prefill, if it needs one. True while it has
        more to do (the engine requeues it). The chunk's time is added to `timings_ms["prefill_chunks"]`."""
        if not model.needs_chunks(record):
            return False
        started = time.perf_counter()
        left = model.prefill_tokens_left(record)
        done = model.prefill_step(record)
        timings_ms["prefill_chunks"] = timings_ms.get("prefill_chunks", 0.0) + (time.perf_counter() - started) * 1e3
        now_left = model.prefill_tokens_left(record)
        self.backlog.chunk_done(id(record), now_left, left - now_left)
        return not done

    def finish(self, key: int | None) -> None:
        """The admitted record ended (answered, failed or dropped)."""
        self.backlog.finish(key)

    def stats(self) -> LongPrefillStats:
        return {"in_flight": len(self.backlog), "refused": self.backlog.refused}
