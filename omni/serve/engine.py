"""DecisionEngine: warm up -> decide, around a model it is given (or loads from its config).

Usable in-process (CLI, tests, notebooks) and behind the HTTP edge; it implements `ServingEngine`
(omni/serve/surface.py). `decide` / `decide_batch` run synchronously; `submit` is the serving path (bounded
admission, media decoding in a bounded thread pool, then the micro-batcher feeding the one thread that owns the
model; long prefills a chunk per turn, `omni/serve/chunking.py`). The model is anything with the `DecisionModel`
surface (omni/model/surface.py): the real `omni.model.clef.ClefModel`, or a small fake in tests; the engine reads its
records only through `PreparedInputs`. Knows nothing of HTTP, the environment or model internals.
"""
from __future__ import annotations

import dataclasses
import datetime
import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Generic, cast

import torch

from omni.contract.answers import build_answers
from omni.contract.audit import AuditRecord, RuntimeAudit
from omni.contract.config import EngineConfig
from omni.contract.errors import (
    AdapterError,
    DeadlineExceeded,
    InferenceFailed,
    NotReady,
    OmniError,
    Overloaded,
    Withdrawn,
)
from omni.contract.types import Decision, DecisionRequest, Option, Question, ShadowScore, Usage
from omni.model.cache import CacheStats
from omni.model.surface import AdapterHost, DecisionModel, RecordT
from omni.serve.adapters import AdapterRegistry, scan_folder
from omni.serve.batcher import REQUEUE, BatcherStats, MicroBatcher, Requeue
from omni.serve.chunking import LongPrefills
from omni.serve.cpus import torch_threads_for, usable_cpus
from omni.serve.heap import HeapTrimmer
from omni.serve.selection import Held, Selector
from omni.serve.shadow import ShadowScorer
from omni.serve.surface import LongPrefillStats, ModelCard

log = logging.getLogger(__name__)

WARMUP_REQUEST = DecisionRequest(
    state="warm-up", questions=(Question("ready", "noul", (Option("true", None), Option("false", None))),))


class DecisionEngine(Generic[RecordT]):
    def __init__(self, config: EngineConfig | None = None, model: DecisionModel[RecordT] | None = None):
        """`model` None: `load()` loads the checkpoint `config` names (`ClefModel.from_config`)."""
        self.config = config or EngineConfig()
        self.model = model
        self._warm = False
        self._ready = False
        self._lock = threading.Lock()
        self._in_flight = 0
        self._decode_pool: ThreadPoolExecutor | None = None
        self._batcher: MicroBatcher[RecordT, Decision] | None = None
        self._heap = HeapTrimmer()
        self._longs = LongPrefills()       # long prefills admitted and not yet ended
        self._model_lock = threading.Lock()   # held by each model turn, and while adapters' weights go in or out
        self._adapters: AdapterRegistry | None = None
        self.selector = Selector(None, self.config.served_name, self.config.model_aliases)
        self._shadows = ShadowScorer(self._shadow_scores, self.selector.count,
                                     batch_records=self.config.max_batch_records,
                                     max_pending=8 * self.config.max_batch_records)

    # ----------------------------------------------------------------------------------------------- lifecycle
    def load(self) -> DecisionEngine[RecordT]:
        """Load the model unless one was given, then warm up (blocking). Idempotent."""
        if self._warm:
            return self
        cfg = self.config
        set_torch_threads(cfg.torch_threads, cfg.decode_threads)
        model = self._model()
        self._run([model.prepare(WARMUP_REQUEST)])
        self._load_adapters(model)
        self._warm = True
        return self

    def _load_adapters(self, model: DecisionModel[RecordT]) -> None:
        """The configured adapters, loaded (an AdapterError naming the adapter stops the start), and shadow pairs."""
        cfg = self.config
        if not isinstance(model, AdapterHost):
            if cfg.adapters or cfg.adapters_dir or cfg.shadows:
                raise AdapterError(cfg.served_name, "this model cannot load adapters")
            return
        registry = AdapterRegistry(model, self._model_lock, base_names=self.selector.base_names,
                                   max_resident=cfg.max_adapters, scan_dir=cfg.adapters_dir)
        found = scan_folder(registry.scan_dir) if registry.scan_dir is not None else {}
        for name, path in [*found.items(), *cfg.adapters]:
            registry.register(name, str(path))
        for live, candidate in cfg.shadows:
            registry.set_shadow(live, candidate)
        self._adapters = registry
        self.selector = Selector(registry, cfg.served_name, cfg.model_aliases)
        self._shadows.count = self.selector.count

    def _model(self) -> DecisionModel[RecordT]:
        """The model, loaded from the config first when none was given."""
        if self.model is None:
            from omni.model.clef import ClefModel  # lazily: the engine itself never needs transformers

            # no model given: the engine's records are ClefModel's (RecordT is then its default, PreparedInputs)
            self.model = cast("DecisionModel[RecordT]", ClefModel.from_config(self.config))
        return self.model

    def start(self) -> DecisionEngine[RecordT]:
        """Load, then start the decode pool and the micro-batcher's model thread (the serving path)."""
        self.load()
        if self._batcher is None:
            cfg = self.config
            self._decode_pool = ThreadPoolExecutor(cfg.decode_threads, thread_name_prefix="omni-decode")
            self._batcher = MicroBatcher(self._run, _tokens,
                                         max_batch_records=cfg.max_batch_records,
                                         max_batch_tokens=cfg.max_batch_tokens, max_wait_ms=cfg.max_wait_ms,
                                         max_queue=cfg.max_queue, name="omni-model", wait_only_while_expecting=True)
            self._batcher.start()
        self._ready = True       # only now can `submit` take work
        return self

    def stop(self, drain: bool = True, timeout_s: float | None = None) -> None:
        self._ready = False
        if self._decode_pool is not None:
            self._decode_pool.shutdown(wait=drain, cancel_futures=not drain)
        if self._batcher is not None:
            self._batcher.stop(drain=drain, timeout_s=timeout_s)
        self._decode_pool = self._batcher = None

    @property
    def loaded(self) -> bool:
        """True once the model is loaded and warmed up."""
        return self._warm

    @property
    def ready(self) -> bool:
        """True once `start()` finished: loaded, warmed up and the serving path running."""
        return self._ready

    @property
    def batcher(self) -> MicroBatcher[RecordT, Decision] | None:
        """The micro-batcher while serving (tests and benchmarks watch it); None otherwise."""
        return self._batcher

    def batcher_stats(self) -> BatcherStats | None:
        return self._batcher.stats() if self._batcher is not None else None

    def cache_stats(self) -> dict[str, CacheStats]:
        """The model's caches' counters by name (media, prefix); empty before the model is in."""
        return self.model.cache_stats() if self.model is not None else {}

    def long_prefills(self) -> LongPrefillStats:
        """Long prefills admitted and not yet ended, and how many were refused for want of time (for metrics)."""
        return self._longs.stats()

    @property
    def info(self) -> ModelCard:
        """What /v1/models shows: name, description, release date, context, limits. NotReady until a model is in."""
        if self.model is None:
            raise NotReady("the model is still loading")
        cfg = self.config
        source = self.model.source
        description = ("Embedded tiny demo checkpoint (synthetic inspection task only; elsewhere its answers are "
                       "random) — serve real weights with --model."
                       if source.tiny_default else f"Clef-omni decision model from {cfg.model_path}")
        media = cfg.media
        return {"name": cfg.served_name, "description": description, "release_date": source.release_date,
                "context_tokens": cfg.max_context_tokens, "tiny_default": source.tiny_default,
                "limits": {"inputs": {"questions": cfg.max_questions, "choice_options": cfg.max_choice_options,
                                      "score_levels": cfg.max_score_levels, "images": media.max_images,
                                      "image_bytes": media.max_image_bytes, "image_pixels": media.max_image_pixels,
                                      "audio": media.max_audio_clips, "audio_bytes": media.max_audio_bytes,
                                      "audio_seconds": media.max_audio_seconds, "videos": media.max_videos,
                                      "video_bytes": media.max_video_bytes, "video_seconds": media.max_video_seconds}}}

    def model_names(self) -> list[str]:
        """Every name a request's `model` may give: the base's, then the served adapters'."""
        return self.selector.model_names()

    @property
    def adapters(self) -> AdapterRegistry | None:
        """The adapter registry, once the model is in (None when it cannot load adapters)."""
        return self._adapters

    def shadow_stats(self) -> dict[str, int]:
        return self.selector.stats()

    # ------------------------------------------------------------------------------------------------ deciding
    def _run(self, records: list[RecordT]) -> list[Decision | Requeue]:
        """Model thread: one turn for the batch, then answers. A record whose long prefix is prefilled in chunks gets
        one chunk per turn and REQUEUE until its prefix is complete (other requests run in between). Errors here are
        ours, not the caller's."""
        started = time.perf_counter()
        model = self._model()
        try:
            with self._model_lock:
                pending = [self._longs.turn(model, record, record.timings_ms) for record in records]
                ready = [record for record, more in zip(records, pending, strict=True) if not more]
                probabilities = iter(model.probabilities(ready) if ready else [])
        except OmniError:
            raise
        except Exception as exc:  # a bug or a device fault: fail this batch only, without internals on the wire
            log.exception("forward pass failed for a batch of %d", len(records))
            raise InferenceFailed("the model failed on this batch") from exc
        forward_ms = (time.perf_counter() - started) * 1e3
        self._heap.after_batch(sum(stats.evictions for stats in model.cache_stats().values()),
                               sum(record.num_tokens for record in records))
        return [REQUEUE if more else self._decision(record, next(probabilities), forward_ms, len(ready))
                for record, more in zip(records, pending, strict=True)]

    def _decision(self, record: RecordT, per_question: list[torch.Tensor], forward_ms: float,
                  batch_size: int) -> Decision:
        answers = self._answers(record.request, per_question)
        request, mode = record.request, self.config.audit
        audit = self._audit(record, batch_size, per_question) if request.audit or mode != "request" else None
        candidate = record.selection.shadow
        shadow = self._shadows.submit(record) if candidate is not None else None
        return Decision(model=self.selector.answered_as(record.selection), answers=answers,
                        usage=Usage(record.num_tokens, 0), shadow=shadow,
                        truncated_state_tokens=record.truncated_state_tokens,
                        truncated_state_chars=record.truncated_state_chars,
                        tokens_by_modality=dict(record.tokens_by_modality),
                        timings_ms={**record.timings_ms, "forward": forward_ms}, batch_size=batch_size,
                        cache=dict(record.cache), audit=audit, audit_shown=request.audit or mode == "always",
                        evidence=self._model().explain(record, per_question) if request.evidence is not None else None)

    def _shadow_scores(self, records: Sequence[RecordT]) -> list[ShadowScore | None]:
        """Head-only shadow candidates' scores of `records` (on the shadow thread, after the live answers)."""
        model = self._model()
        scored = model.score_shadows(records) if isinstance(model, AdapterHost) else [None] * len(records)
        out: list[ShadowScore | None] = []
        for record, probabilities in zip(records, scored, strict=True):
            candidate, request = record.selection.shadow, record.request
            out.append(None if probabilities is None or candidate is None else ShadowScore(
                candidate.name, candidate.sha256, self._answers(request, probabilities),
                unrounded(request.questions, probabilities), same_forward=True))
        return out

    def _answers(self, request: DecisionRequest, per_question: list[torch.Tensor]) -> dict[str, Any]:
        return build_answers(request.questions, [p.tolist() for p in per_question], confidence=self.config.confidence,
                             decimals=self.config.probability_decimals)

    def _audit(self, record: RecordT, batch_size: int, per_question: list[torch.Tensor]) -> AuditRecord:
        """The decision's audit record: the model's evidence plus the served name, the forward it ran in (its batch
        size, whether its prefix came in chunks), the cache outcomes, the request id, the time (UTC) and the
        unrounded probabilities (question -> option, request order) that `omni replay` compares."""
        evidence = self._model().evidence(record)
        software = evidence.software
        runtime = RuntimeAudit(
            omni_decide=software["omni_decide"] or "unknown", git_commit=software["git_commit"],
            torch=software["torch"] or "", transformers=software["transformers"] or "", pyav=software["pyav"] or "",
            ffmpeg=software["ffmpeg"] or "", device=evidence.device, backbone_dtype=evidence.backbone_dtype,
            head_dtype=evidence.head_dtype, batch_size=batch_size, chunked="prefill_chunks" in record.timings_ms,
            cache=dict(record.cache), quantization=evidence.quantization)
        decided_at = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="microseconds")
        return AuditRecord(model=dataclasses.replace(evidence.model,
                                                     id=self.selector.answered_as(record.selection)),
                           calibration=evidence.calibration, prompt=evidence.prompt, media=evidence.media,
                           runtime=runtime, request_id=record.request.request_id,
                           decided_at=decided_at.replace("+00:00", "Z"),
                           probabilities=unrounded(record.request.questions, per_question))

    def decide(self, request: DecisionRequest) -> Decision:
        """Synchronous, in-process: one request, one forward."""
        return self.decide_batch([request])[0]

    def decide_batch(self, requests: Sequence[DecisionRequest]) -> list[Decision]:
        """Synchronous: N requests in ONE forward (long ones after their chunks); equal to N `decide` calls (within
        float tolerance). Each request's `model` selects its adapter (checked first: UnknownModel names every one)."""
        self.load()
        model = self._model()
        for request in requests:
            self.selector.check(request)
        held: list[Held] = []
        try:
            for request in requests:
                held.append(self.selector.select(request))
            records = [model.prepare(r, None, h.selection) for r, h in zip(requests, held, strict=True)]
            results: list[Decision | Requeue] = [REQUEUE] * len(records)
            while any(result is REQUEUE for result in results):
                waiting = [i for i, result in enumerate(results) if result is REQUEUE]
                for i, result in zip(waiting, self._run([records[i] for i in waiting]), strict=True):
                    results[i] = result
        finally:
            for h in held:
                h.release()
        return [result for result in results if isinstance(result, Decision)]

    def submit(self, request: DecisionRequest, deadline_s: float | None = None,
               gate: Future[bool] | None = None) -> Future[Decision]:
        """Serving path. Raises Overloaded/NotReady at once; the future ends with a Decision or a typed error. `gate`:
        the request's media are decoded at once, and it waits after that, before the forward pass, until the gate
        ends — True: on to the model; anything else: dropped, the future ending with `Withdrawn`."""
        if not self._ready or self._batcher is None:
            raise NotReady("the model is not loaded yet" if self._batcher is None else "the engine is stopping")
        self.selector.check(request)            # an unknown model: at once, naming the models served
        with self._lock:
            if self._in_flight >= self.config.max_queue:
                raise Overloaded(f"{self._in_flight} requests in flight (max_queue {self.config.max_queue})",
                                 retry_after_s=1.0)
            self._in_flight += 1
        deadline = time.monotonic() + (deadline_s if deadline_s is not None else self.config.request_timeout_s)
        submitted = time.perf_counter()
        outcome: Future[Decision] = Future()
        outcome.add_done_callback(self._release)
        if self._prepare_inline(request):     # a thread hop would cost more than the prompt encoding it moves
            self._decode_then_queue(request, deadline, submitted, outcome, False, gate)
            return outcome
        batcher, pool = self._batcher, self._decode_pool
        assert pool is not None                # started together with the batcher
        batcher.expect()                       # a partial batch may wait for it while it is decoded
        try:
            pool.submit(self._decode_then_queue, request, deadline, submitted, outcome, True, gate)
        except RuntimeError as exc:            # pool shut down between the ready check and here
            batcher.unexpect()
            outcome.set_exception(NotReady("the engine is stopping"))
            log.debug("decode pool refused work: %s", exc)
        return outcome

    def _prepare_inline(self, request: DecisionRequest) -> bool:
        """Media-free requests with at most `inline_prepare_max_chars` of text are prepared on the caller's thread."""
        limit = self.config.inline_prepare_max_chars
        if limit <= 0 or request.media or not self.selector.is_base(request.model):   # an adapter may need loading
            return False
        budget = limit - text_chars(request.state, limit + 1)
        for question in request.questions:
            if budget < 0:
                break
            budget -= len(question.id) + text_chars(question.instructions, budget + 1)
            budget -= sum(len(o.id) + text_chars(o.description, budget + 1) for o in question.options)
        return budget >= 0

    def _release(self, _future: Future[Decision]) -> None:
        with self._lock:
            self._in_flight -= 1

    def _decode_then_queue(self, request: DecisionRequest, deadline: float, submitted: float,
                           outcome: Future[Decision], expected: bool, gate: Future[bool] | None = None) -> None:
        """Prepare, then queue for the model (once `gate`, if any, lets it: see `submit`). `expected`: the batcher was
        told this request is on its way."""
        batcher, model = self._batcher, self._model()
        assert batcher is not None                       # submit checked it
        announced = expected                             # an announcement this request must still settle
        held = Held(None)
        try:
            if not outcome.set_running_or_notify_cancel():   # the caller gave up before we started: skip the work
                return
            if gate is not None and gate.done() and not _opened(gate):
                raise Withdrawn("withdrawn before its media were decoded")
            held = self.selector.select(request)         # the adapter version it keeps to its end
            record = model.prepare(request, None, held.selection)
            if time.monotonic() > deadline:
                raise DeadlineExceeded("the request outlived its deadline while its media were decoded")
            spent_ms = record.timings_ms["decode"] + record.timings_ms["encode"]   # waiting for a pool thread
            record.timings_ms["decode_wait"] = max(0.0, (time.perf_counter() - submitted) * 1e3 - spent_ms)
            if gate is not None and not gate.done():     # decoded: wait for the gate without holding this thread
                if announced:                            # a partial batch must not wait for it meanwhile
                    batcher.unexpect()
                    announced = False
                gate.add_done_callback(lambda done: self._through_gate(done, request, record, held, deadline,
                                                                       outcome))
                return
            if gate is not None and not _opened(gate):
                raise Withdrawn("withdrawn before the forward pass")
            announced = False                            # _queue settles it, whatever happens there
            self._queue(request, record, held, deadline, outcome, expected)
        except BaseException as exc:  # noqa: BLE001 (every request ends: its own error, never a hang)
            held.release()
            outcome.set_exception(exc)
        finally:
            if announced:
                batcher.unexpect()

    def _through_gate(self, gate: Future[bool], request: DecisionRequest, record: Any, held: Held, deadline: float,
                      outcome: Future[Decision]) -> None:
        """A decoded request whose gate ended (on the thread that ended it): queued, or dropped."""
        try:
            if not _opened(gate):
                raise Withdrawn("withdrawn before the forward pass")
            if time.monotonic() > deadline:
                raise DeadlineExceeded("the request outlived its deadline while it waited for the hash banks")
            self._queue(request, record, held, deadline, outcome, False)
        except BaseException as exc:  # noqa: BLE001 (every request ends: its own error, never a hang)
            held.release()
            outcome.set_exception(exc)

    def _queue(self, request: DecisionRequest, record: Any, held: Held, deadline: float, outcome: Future[Decision],
               expected: bool) -> None:
        """A prepared record to the micro-batcher; its decision (or error) to `outcome` when it is computed."""
        batcher, model = self._batcher, self._model()
        if batcher is None:
            raise NotReady("the engine is stopping")
        try:
            long = self._longs.admit(model, record, deadline)
        except BaseException:
            if expected:                                 # its announcement is settled here, then
                batcher.unexpect()
            raise
        try:
            queued = batcher.submit(record, deadline, expected=expected)
        except BaseException:
            self._longs.finish(long)
            raise
        queued_at = time.perf_counter()

        def transfer(done: Future[Decision]) -> None:
            self._longs.finish(long)
            held.release()
            error = done.exception()
            if error is not None:
                outcome.set_exception(error)
                return
            decision = done.result()
            decision.timings_ms["queue"] = max(0.0, (time.perf_counter() - queued_at) * 1e3
                                               - decision.timings_ms.get("forward", 0.0))
            if held.own_forward is not None:
                decision = dataclasses.replace(decision, shadow=self._shadow_forward(request, held.own_forward))
            outcome.set_result(decision)

        queued.add_done_callback(transfer)

    def _shadow_forward(self, request: DecisionRequest, candidate: str) -> Future[ShadowScore | None]:
        """Score `request` with `candidate` by a forward of its own, after the live answer, while the server has room
        (fewer requests in flight than one batch holds); else dropped (counted)."""
        with self._lock:
            room = self._in_flight < self.config.max_batch_records
        return self.selector.own_forward(self.submit, request, candidate, room)


def _opened(gate: Future[bool]) -> bool:
    """Whether an ended gate lets its request on: True, not cancelled, not failed."""
    return not gate.cancelled() and gate.exception() is None and gate.result() is True


def set_torch_threads(asked: int, decode_threads: int) -> int:
    """Set torch's intra-op threads (process-wide) and log how many: `asked`, or for 0 sized from the CPUs this
    process may use less the media decoders' (omni/serve/cpus.py). torch's own default, every core, is the worst
    setting beside any other busy process: oversubscribed threads spin and wait for each other."""
    if asked > 0:
        threads, why = asked, "as asked"
    else:
        budget = usable_cpus()
        threads = torch_threads_for(budget.usable, decode_threads)
        why = f"sized: {budget.describe()} less {decode_threads} decode threads; --torch-threads N to choose"
    torch.set_num_threads(threads)
    log.info("torch threads: %d (%s)", threads, why)
    return threads


def unrounded(questions: Sequence[Question], per_question: list[torch.Tensor]) -> dict[str, dict[str, float]]:
    """Question id -> option id -> probability as the model gave it (head order mapped to request order)."""
    probabilities = {}
    for question, values in zip(questions, per_question, strict=True):
        by_id = dict(zip((o.id for o in question.prompt_options), values.tolist(), strict=True))
        probabilities[question.id] = {o.id: float(by_id[o.id]) for o in question.options}
    return probabilities


def _tokens(record: RecordT) -> int:
    """What a record weighs in a batch: its tokens."""
    return record.num_tokens


def text_chars(value: Any, limit: int) -> int:
    """Characters of text in a JSON-like value (strings, keys, scalars); stops counting once past `limit`."""
    if value is None:
        return 0
    if isinstance(value, str):
        return len(value)
    items: Sequence[Any]
    if isinstance(value, dict):
        items = [*value.keys(), *value.values()]
    elif isinstance(value, (list, tuple)):
        items = value
    else:
        return len(repr(value))     # numbers and booleans (the JSON loader refuses huge integers)
    total = 0
    for item in items:
        total += text_chars(item, limit - total)
        if total > limit:
            break
    return total
