"""The line's counters, as Prometheus text (`/metrics`) and as one JSON object (`/status`, `omni line --status`).

`LineStats` is plain counters the runner bumps on its event loop; sources and sinks keep their own (`stats()`), read
at scrape time. `render(stats, sources, sinks)` builds a fresh `CollectorRegistry` per scrape (no module-level
registry): `omni_line_units_in_total{source}`, `omni_line_units_total{outcome}` (act, review, pass, decided,
timeout, overload, error), `omni_line_deadline_misses_total`, `omni_line_late_answers_total`,
`omni_line_duplicate_triggers_total`, `omni_line_queue_depth`, `omni_line_in_flight`,
`omni_line_source_lag_seconds{source}` (the last unit's ready → taken), `omni_line_latency_seconds` (trigger →
result, a histogram), `omni_line_sink_sent_total{sink}`, `omni_line_sink_failures_total{sink}`,
`omni_line_sink_backlog{sink}` and every source's and sink's own figures as `omni_line_source_stat_<name>{source}` /
`omni_line_sink_stat_<name>{sink}`.
Knows nothing of transports, the engine or HTTP.
"""
from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from api.line.ports import Sink, Source

LATENCY_BUCKETS_S = (0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0)


@dataclass
class LineStats:
    line: str
    started_wall_s: float = field(default_factory=time.time)
    units_in: Counter[str] = field(default_factory=Counter)         # by source
    outcomes: Counter[str] = field(default_factory=Counter)
    deadline_misses: int = 0
    late_answers: int = 0
    duplicate_triggers: int = 0
    queue_depth: int = 0
    in_flight: int = 0
    source_lag_s: dict[str, float] = field(default_factory=dict)
    sink_sent: Counter[str] = field(default_factory=Counter)
    sink_failures: Counter[str] = field(default_factory=Counter)
    sink_backlog: dict[str, int] = field(default_factory=dict)
    latency_buckets: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS_S) + 1))
    latency_sum_s: float = 0.0
    last_units: list[dict[str, Any]] = field(default_factory=list)  # the newest results, newest first

    def observe(self, payload: dict[str, Any]) -> None:
        self.outcomes[payload["outcome"]] += 1
        seconds = payload["latency_ms"] / 1000
        self.latency_sum_s += seconds
        index = next((i for i, bound in enumerate(LATENCY_BUCKETS_S) if seconds <= bound), len(LATENCY_BUCKETS_S))
        self.latency_buckets[index] += 1
        self.last_units.insert(0, {key: payload[key] for key in ("unit_id", "outcome", "published_outcome",
                                                                 "latency_ms", "decided_at", "source")})
        del self.last_units[8:]

    def snapshot(self, sources: Sequence[Source], sinks: Sequence[Sink]) -> dict[str, Any]:
        return {"line": self.line, "uptime_s": round(time.time() - self.started_wall_s, 1),
                "units_in": dict(self.units_in), "outcomes": dict(self.outcomes),
                "deadline_misses": self.deadline_misses, "late_answers": self.late_answers,
                "duplicate_triggers": self.duplicate_triggers, "queue_depth": self.queue_depth,
                "in_flight": self.in_flight, "source_lag_s": self.source_lag_s,
                "latency_ms_p50": _quantile_ms(self.latency_buckets, 0.5),
                "latency_ms_p99": _quantile_ms(self.latency_buckets, 0.99),
                "sources": {source.name: source.stats() for source in sources},
                "sinks": {sink.name: {**sink.stats(), "sent": self.sink_sent[sink.name],
                                      "failures": self.sink_failures[sink.name],
                                      "backlog": self.sink_backlog.get(sink.name, 0)} for sink in sinks},
                "last_units": self.last_units}


def _quantile_ms(buckets: list[int], q: float) -> float | None:
    """The bucket bound the q-quantile falls under (histogram resolution), in ms; None before any unit."""
    total = sum(buckets)
    if not total:
        return None
    seen = 0
    for count, bound in zip(buckets, (*LATENCY_BUCKETS_S, float("inf")), strict=True):
        seen += count
        if seen >= q * total:
            return bound * 1000
    return None


class _Collector:
    def __init__(self, stats: LineStats, sources: Sequence[Source], sinks: Sequence[Sink]):
        self.stats, self.sources, self.sinks = stats, sources, sinks

    def collect(self) -> Any:
        s = self.stats
        units_in = CounterMetricFamily("omni_line_units_in", "units the sources handed in", labels=["source"])
        for source, count in sorted(s.units_in.items()):
            units_in.add_metric([source], count)
        yield units_in
        outcomes = CounterMetricFamily("omni_line_units", "units settled, by outcome", labels=["outcome"])
        for outcome in ("act", "review", "pass", "decided", "timeout", "overload", "error"):
            outcomes.add_metric([outcome], s.outcomes[outcome])
        yield outcomes
        yield CounterMetricFamily("omni_line_deadline_misses", "units not decided by their deadline",
                                  value=s.deadline_misses)
        yield CounterMetricFamily("omni_line_late_answers", "answers that came after their unit's deadline",
                                  value=s.late_answers)
        yield CounterMetricFamily("omni_line_duplicate_triggers", "triggers of a unit already decided or in flight",
                                  value=s.duplicate_triggers)
        yield GaugeMetricFamily("omni_line_queue_depth", "units waiting for the model", value=s.queue_depth)
        yield GaugeMetricFamily("omni_line_in_flight", "units being decided", value=s.in_flight)
        lag = GaugeMetricFamily("omni_line_source_lag_seconds", "the last unit's ready-to-taken time",
                                labels=["source"])
        for source, seconds in sorted(s.source_lag_s.items()):
            lag.add_metric([source], seconds)
        yield lag
        cumulative, buckets = 0, []
        for count, bound in zip(s.latency_buckets, (*LATENCY_BUCKETS_S, float("inf")), strict=True):
            cumulative += count
            buckets.append((str(bound) if bound != float("inf") else "+Inf", cumulative))
        yield HistogramMetricFamily("omni_line_latency_seconds", "trigger to result", buckets=buckets,
                                    sum_value=s.latency_sum_s)
        for name, counter, kind in (("sent", s.sink_sent, CounterMetricFamily),
                                    ("failures", s.sink_failures, CounterMetricFamily)):
            family = kind(f"omni_line_sink_{name}", f"sink deliveries: {name}", labels=["sink"])
            for sink in self.sinks:
                family.add_metric([sink.name], counter[sink.name])
            yield family
        backlog = GaugeMetricFamily("omni_line_sink_backlog", "results waiting for a sink", labels=["sink"])
        for sink in self.sinks:
            backlog.add_metric([sink.name], s.sink_backlog.get(sink.name, 0))
        yield backlog
        yield from _own_figures("source", self.sources)
        yield from _own_figures("sink", self.sinks)


def _own_figures(kind: str, parts: Sequence[Source] | Sequence[Sink]) -> Any:
    figures: dict[str, GaugeMetricFamily] = {}
    for part in parts:
        for key, value in part.stats().items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            name = f"omni_line_{kind}_stat_{''.join(ch if ch.isalnum() else '_' for ch in key)}"
            family = figures.setdefault(name, GaugeMetricFamily(name, f"{kind} figure {key}", labels=[kind]))
            family.add_metric([part.name], float(value))
    yield from figures.values()


def render(stats: LineStats, sources: Sequence[Source], sinks: Sequence[Sink]) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(stats, sources, sinks))
    return generate_latest(registry)
