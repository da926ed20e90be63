"""Prometheus metrics of one app instance (own registry, so several apps can live in one process, e.g. tests).

Requests by route and status, HTTP latency, per-stage latency (parse at the edge; decode / queue / forward from the
engine's `Decision.timings_ms`), batch sizes, input tokens by modality, requests in flight; under a policy, outcomes
per question and policy version and the confidence per question (questions the policy names each have their own
label; the ones `[default]` rules share `_default`, so a caller's question ids never grow the label set); the
adapters served (resident, in flight, loads and evictions) and shadow scores by what became of them.
Knows nothing of FastAPI routes or the model beyond the Decision fields it reads.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from omni.contract.policy import Policy
from omni.contract.types import Decision, Outcome
from omni.model.cache import CacheStats
from omni.serve.batcher import BatcherStats
from omni.serve.decision_log import DecisionLog, DecisionLogStats
from omni.serve.surface import LongPrefillStats, ServingEngine

if TYPE_CHECKING:
    from omni.banks.matching import Verdict  # the [banks] extra: imported only where banks are given

LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
BATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64)
CONFIDENCE_BUCKETS = (0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.97, 0.99, 0.995, 1.0)
DEFAULT_RULED = "_default"          # the label of questions a policy's [default] table rules
OVERALL = "_overall"
STAGES = ("decode", "queue", "forward")
S = TypeVar("S")            # what a scrape-time collector reads
ADAPTER_GAUGES = {"served": "adapters served (names a request may give)", "resident": "adapters whose weights are "
                  "in memory", "resident_lora": "resident adapters with LoRA weights", "resident_bytes": "bytes the "
                  "resident adapters hold", "in_flight": "requests holding an adapter now",
                  "max_resident": "the bound on resident adapters (--max-adapters)"}
ADAPTER_EVENTS = ("loads", "reloads", "unloads", "evictions", "load_failures")
SHADOW_EVENTS = ("same_forward", "own_forward", "dropped", "failed")
WEBHOOK_COUNTERS = ("delivered", "retried", "failed_attempts", "dropped", "dead_lettered", "dead_letter_errors")


class WebhookStats(Protocol):
    """What /metrics reads of the webhook sender."""

    def stats(self) -> dict[str, int]: ...


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("omni_requests", "HTTP requests by route and status", ["route", "status"], registry=r)
        self.request_seconds = Histogram("omni_request_duration_seconds", "HTTP request latency", ["route"],
                                         buckets=LATENCY_BUCKETS_S, registry=r)
        self.stage_seconds = Histogram("omni_stage_duration_seconds",
                                       "decision latency by stage (parse, decode, queue, forward)", ["stage"],
                                       buckets=LATENCY_BUCKETS_S, registry=r)
        self.batch_size = Histogram("omni_batch_size", "size of the model batch each decision ran in",
                                    buckets=BATCH_BUCKETS, registry=r)
        self.tokens = Counter("omni_input_tokens", "input tokens by modality", ["modality"], registry=r)
        self.inflight = Gauge("omni_requests_in_flight", "decision requests being handled", registry=r)
        self.model_info = Gauge("omni_model_info", "the served model", ["name", "tiny_default"], registry=r)
        self.outcomes = Counter("omni_outcomes", "decision outcomes under the policy, per question (_overall: the "
                                "decision's) and policy version", ["policy_version", "question", "outcome"],
                                registry=r)
        self.confidence = Histogram("omni_outcome_confidence", "confidence of the answers to the policy's questions",
                                    ["question"], buckets=CONFIDENCE_BUCKETS, registry=r)
        self.policy_info = Gauge("omni_policy_info", "the policy in force", ["version", "sha256"], registry=r)
        self.policy_reloads = Counter("omni_policy_reloads", "policy reloads by result", ["result"], registry=r)
        self.bank_lookups = Counter("omni_bank_lookups", "requests whose media were looked up in the hash banks",
                                    registry=r)
        self.bank_matches = Counter("omni_bank_matches", "requests a bank entry matched, by the bank shown, its "
                                    "action and whether it answered without the model", ["bank", "action", "decided"],
                                    registry=r)
        self.bank_hash_failures = Counter("omni_bank_hash_failures", "media whose perceptual hash could not be "
                                          "computed (the model answered as always)", ["slot"], registry=r)
        self.bank_entries = Gauge("omni_bank_entries", "entries of each bank in force", ["bank", "version"],
                                  registry=r)
        self.bank_reloads = Counter("omni_bank_reloads", "bank reloads by result", ["result"], registry=r)
        self.qa_sampled = Counter("omni_qa_sampled", "automatic answers drawn for QA review, per question",
                                  ["question"], registry=r)
        self._qa = _QaCollector()
        r.register(self._qa)
        self._batcher = _BatcherCollector()
        r.register(self._batcher)
        self._caches = _CacheCollector()
        r.register(self._caches)
        self._longs = _LongPrefillCollector()
        r.register(self._longs)
        self._decision_log = _DecisionLogCollector()
        r.register(self._decision_log)
        self._webhooks = _WebhookCollector()
        r.register(self._webhooks)
        self._video_hasher = _VideoHasherCollector()
        r.register(self._video_hasher)
        self._adapters = _AdapterCollector()
        r.register(self._adapters)
        self._shadows = _ShadowCollector()
        r.register(self._shadows)
        for stage in ("parse",) + STAGES:  # so every stage is visible before the first request
            self.stage_seconds.labels(stage)

    def observe_request(self, route: str, status: int, seconds: float) -> None:
        self.requests.labels(route, str(status)).inc()
        self.request_seconds.labels(route).observe(seconds)

    def observe_parse(self, seconds: float) -> None:
        self.stage_seconds.labels("parse").observe(seconds)

    def observe_decision(self, decision: Decision) -> None:
        for stage, ms in decision.timings_ms.items():
            self.stage_seconds.labels(stage.removesuffix("_ms")).observe(max(0.0, ms) / 1000.0)
        self.batch_size.observe(decision.batch_size)
        for modality, n in decision.tokens_by_modality.items():
            self.tokens.labels(modality).inc(max(0, n))

    def observe_outcome(self, outcome: Outcome, policy: Policy) -> None:
        self.outcomes.labels(outcome.policy_version, OVERALL, outcome.overall).inc()
        for qid, question in outcome.questions.items():
            label = qid if qid in policy.questions else DEFAULT_RULED
            self.outcomes.labels(outcome.policy_version, label, question.outcome).inc()
            self.confidence.labels(label).observe(question.confidence)

    def set_policy(self, policy: Policy | None, reloaded: bool | None = None) -> None:
        """The policy in force (`reloaded`: True/False counts a reload that worked or failed)."""
        if reloaded is not None:
            self.policy_reloads.labels("ok" if reloaded else "error").inc()
        if policy is not None:
            self.policy_info.clear()
            self.policy_info.labels(policy.version, policy.sha256).set(1)

    def observe_banks(self, verdict: Verdict) -> None:
        """One request's lookup: counted, its shown match by bank and action, media that could not be hashed."""
        self.bank_lookups.inc()
        if verdict.shown is not None:
            self.bank_matches.labels(verdict.shown.match.bank, verdict.shown.match.entry.action,
                                     str(verdict.decides).lower()).inc()
        for medium in verdict.hash_failures:
            self.bank_hash_failures.labels(medium.partition("[")[0]).inc()

    def set_banks(self, described: list[dict], reloaded: bool | None = None) -> None:
        """The banks in force (`reloaded`: True/False counts a reload that worked or failed)."""
        if reloaded is not None:
            self.bank_reloads.labels("ok" if reloaded else "error").inc()
        if reloaded is not False:
            self.bank_entries.clear()
            for bank in described:
                self.bank_entries.labels(bank["name"], bank["version"]).set(bank["entries"])

    def observe_qa(self, qa: dict) -> None:
        """A decision drawn for QA: each of its checked questions counted."""
        for qid in qa.get("questions") or {}:
            self.qa_sampled.labels(qid).inc()

    def watch_qa(self, estimate: Callable[[], dict[str, dict]]) -> None:
        """Export the running QA estimate at scrape time: `estimate()` is `omni.governance.qa.qa_report`'s
        `questions` (per question: labelled, precision, interval, target, below_target)."""
        self._qa.stats = estimate

    def set_model(self, name: str, tiny_default: bool) -> None:
        self.model_info.clear()
        self.model_info.labels(name, str(tiny_default).lower()).set(1)

    def watch_engine(self, engine: ServingEngine) -> None:
        """Export the engine's own counters at scrape time: its caches, micro-batcher and long prefills."""
        self._caches.stats = engine.cache_stats
        self._batcher.stats = engine.batcher_stats
        self._longs.stats = engine.long_prefills

    def watch_adapters(self, adapters: Callable[[], dict[str, int]],
                       shadows: Callable[[], dict[str, int]] | None) -> None:
        """Export the adapter registry's counters (`AdapterRegistry.stats`) and the shadow scores'
        (`Selector.stats`)."""
        self._adapters.stats = adapters
        self._shadows.stats = shadows

    def watch_webhooks(self, webhooks: WebhookStats) -> None:
        """Export the webhook sender's counters: delivered, retried, failed attempts, dropped, dead-lettered."""
        self._webhooks.stats = webhooks.stats

    def watch_video_hasher(self, stats: Callable[[], dict[str, int]]) -> None:
        """Export the banks' vPDQ workers (`VideoHasher.stats`): alive, and stopped since start by why."""
        self._video_hasher.stats = stats

    def watch_decision_log(self, decision_log: DecisionLog) -> None:
        """Export the decision log's counters: written, dropped (never silently), write errors, queue, bytes."""
        self._decision_log.stats = decision_log.stats

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class _ScrapeCollector(Generic[S]):
    """Reads a `stats()` callable at scrape time (nothing until one is set) and turns its value into families."""

    def __init__(self) -> None:
        self.stats: Callable[[], S | None] | None = None

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        value = self.stats() if self.stats is not None else None
        if value is not None:               # None: nothing to show now (no serving path, say)
            yield from self.families(value)

    def families(self, stats: S) -> Iterable[Metric]:
        raise NotImplementedError


class _BatcherCollector(_ScrapeCollector[BatcherStats]):
    """`MicroBatcher.stats()`: per-batch sizes (not per request), queue depth, drops."""

    def families(self, stats: BatcherStats) -> Iterable[Metric]:
        depth = GaugeMetricFamily("omni_queue_depth", "requests waiting for the model thread")
        depth.add_metric([], stats.queue_depth)
        batches = CounterMetricFamily("omni_batches", "model batches run, by size", labels=["size"])
        for size, count in sorted(stats.batch_sizes.items()):
            batches.add_metric([str(size)], count)
        dropped = CounterMetricFamily("omni_batcher_dropped", "requests never computed, by reason", labels=["reason"])
        dropped.add_metric(["deadline_or_cancelled"], stats.expired)
        dropped.add_metric(["queue_full"], stats.rejected)
        return depth, batches, dropped


class _CacheCollector(_ScrapeCollector[dict[str, CacheStats]]):
    """The media and prefix caches' counters (name -> CacheStats): hits, misses, evictions, refusals, bytes."""

    def families(self, caches: dict[str, CacheStats]) -> Iterable[Metric]:
        counters = {name: CounterMetricFamily(f"omni_cache_{name}", f"cache {name}, by cache", labels=["cache"])
                    for name in ("hits", "misses", "evictions", "refused")}
        used = GaugeMetricFamily("omni_cache_bytes", "bytes held, by cache", labels=["cache"])
        budget = GaugeMetricFamily("omni_cache_budget_bytes", "configured budget, by cache (0 = off)", labels=["cache"])
        entries = GaugeMetricFamily("omni_cache_entries", "entries held, by cache", labels=["cache"])
        for cache, s in sorted(caches.items()):
            for name, family in counters.items():
                family.add_metric([cache], getattr(s, name))
            used.add_metric([cache], s.bytes)
            budget.add_metric([cache], s.budget_bytes)
            entries.add_metric([cache], s.entries)
        return (*counters.values(), used, budget, entries)


class _LongPrefillCollector(_ScrapeCollector[LongPrefillStats]):
    """The engine's long-prefill admission: in flight, refused for want of time."""

    def families(self, stats: LongPrefillStats) -> Iterable[Metric]:
        in_flight = GaugeMetricFamily("omni_long_prefills_in_flight", "long prefills admitted and not yet ended")
        in_flight.add_metric([], stats["in_flight"])
        refused = CounterMetricFamily("omni_long_prefills_refused",
                                      "long requests refused (429) because they could not finish before their deadline")
        refused.add_metric([], stats["refused"])
        return in_flight, refused


class _DecisionLogCollector(_ScrapeCollector[DecisionLogStats]):
    """The decision log: records written and dropped (a full queue, a failed write), its queue and bytes, health."""

    def families(self, stats: DecisionLogStats) -> Iterable[Metric]:
        records = CounterMetricFamily("omni_decision_log_records", "decisions by what became of them",
                                      labels=["outcome"])
        records.add_metric(["written"], stats.written)
        records.add_metric(["dropped"], stats.dropped)
        errors = CounterMetricFamily("omni_decision_log_write_errors", "records lost to a failed write (in dropped)")
        errors.add_metric([], stats.write_errors)
        written = CounterMetricFamily("omni_decision_log_bytes", "bytes written, by kind", labels=["kind"])
        written.add_metric(["segments"], stats.bytes_written)
        written.add_metric(["media"], stats.media_bytes_written)
        queue = GaugeMetricFamily("omni_decision_log_queue_depth", "decisions waiting for the log's writer")
        queue.add_metric([], stats.queue_depth)
        healthy = GaugeMetricFamily("omni_decision_log_healthy", "1 when the log can be written")
        healthy.add_metric([], 1.0 if stats.healthy else 0.0)
        return records, errors, written, queue, healthy


class _WebhookCollector(_ScrapeCollector[dict[str, int]]):
    """Webhook deliveries: counters by what became of them, the queue and the attempts in flight."""

    def families(self, stats: dict[str, int]) -> Iterable[Metric]:
        deliveries = CounterMetricFamily("omni_webhook_events", "webhook events: delivered, retried (attempts after "
                                         "the first), failed attempts, dropped (queue full), dead-lettered, "
                                         "dead-letter write errors", labels=["event"])
        for name in WEBHOOK_COUNTERS:
            deliveries.add_metric([name], stats.get(name, 0))
        queue = GaugeMetricFamily("omni_webhook_queue_depth", "deliveries waiting (retries included)")
        queue.add_metric([], stats.get("queue_depth", 0))
        in_flight = GaugeMetricFamily("omni_webhook_in_flight", "delivery attempts under way")
        in_flight.add_metric([], stats.get("in_flight", 0))
        return deliveries, queue, in_flight


class _VideoHasherCollector(_ScrapeCollector[dict[str, int]]):
    """The banks' vPDQ worker processes: alive now, and stopped since start by why."""

    def families(self, stats: dict[str, int]) -> Iterable[Metric]:
        alive = GaugeMetricFamily("omni_bank_vpdq_workers", "vPDQ worker processes alive")
        alive.add_metric([], stats.get("workers", 0))
        stopped = CounterMetricFamily("omni_bank_vpdq_workers_stopped", "vPDQ workers ended and replaced, by why: "
                                      "timeout (no hash within --bank-vpdq-timeout-s), died, unwanted (its request "
                                      "was answered without the hash, which ran past the grace), interrupted",
                                      labels=["reason"])
        for key in sorted(stats):
            if key.startswith("stopped_"):
                stopped.add_metric([key.removeprefix("stopped_")], stats[key])
        return alive, stopped


class _AdapterCollector(_ScrapeCollector[dict[str, int]]):
    """The adapters served: gauges (served, resident, LoRA, bytes, in flight, the bound) and events since start."""

    def families(self, stats: dict[str, int]) -> Iterable[Metric]:
        for name, text in ADAPTER_GAUGES.items():
            gauge = GaugeMetricFamily(f"omni_adapters_{name}", text)
            gauge.add_metric([], stats.get(name, 0))
            yield gauge
        events = CounterMetricFamily("omni_adapter_events", "adapter loads, reloads, unloads, evictions (LRU, idle "
                                     "ones) and failed loads", labels=["event"])
        for name in ADAPTER_EVENTS:
            events.add_metric([name], stats.get(name, 0))
        yield events


class _QaCollector(_ScrapeCollector[dict[str, dict]]):
    """The automatic precision per question from the labelled QA samples, its 95% interval and whether it is below
    the policy's target (the same figures as `omni report qa`)."""

    def families(self, stats: dict[str, dict]) -> Iterable[Metric]:
        labelled = GaugeMetricFamily("omni_qa_labelled", "QA samples reviewers labelled, per question",
                                     labels=["question"])
        precision = GaugeMetricFamily("omni_qa_precision", "automatic precision from labelled QA samples "
                                      "(bound: estimate, low, high of the 95% Wilson interval)",
                                      labels=["question", "bound"])
        below = GaugeMetricFamily("omni_qa_below_target", "1 when the whole 95% interval is under the question's "
                                  "QA target", labels=["question"])
        for qid, row in stats.items():
            labelled.add_metric([qid], row["labelled"])
            if row["labelled"]:
                for bound, value in (("estimate", row["precision"]), ("low", row["interval"][0]),
                                     ("high", row["interval"][1])):
                    precision.add_metric([qid, bound], value)
            below.add_metric([qid], 1.0 if row["below_target"] else 0.0)
        return labelled, precision, below


class _ShadowCollector(_ScrapeCollector[dict[str, int]]):
    """Shadow scores by what became of them: from the live forward, by a forward of their own, dropped, failed."""

    def families(self, stats: dict[str, int]) -> Iterable[Metric]:
        scores = CounterMetricFamily("omni_shadow_scores", "shadow candidates' scores: same_forward (from the live "
                                     "request's forward), own_forward, dropped (no room: never delays a live answer), "
                                     "failed", labels=["result"])
        for name in SHADOW_EVENTS:
            scores.add_metric([name], stats.get(name, 0))
        return (scores,)
