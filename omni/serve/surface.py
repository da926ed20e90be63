"""`ServingEngine`: everything the HTTP app (and `omni batch`) may call on an engine, declared once.

Two engines implement it: `omni.serve.engine.DecisionEngine` (in-process: a model, a decode pool, a micro-batcher)
and `api.cluster.remote.RemoteEngine` (the engine replicas of a Ray Serve deployment). `ServiceState.engine` is typed
by it; mypy checks both classes against it, and `tests/conformance/serving_engine.py` runs the same behaviour tests
against both (the local engine in the unit tests, the remote one in the cluster tests).

    readiness   loaded / ready; load() (blocking), start() (the serving path), stop(drain)
    model card  info: what /v1/models shows (name, description, release date, context, limits);
                model_names: every name a request's `model` may give (the base's, then the adapters')
    deciding    submit (the serving path: a future, awaited by the route), decide, decide_batch (synchronous)
    metrics     cache_stats, batcher_stats, long_prefills (counters; the remote engine sums its replicas'),
                shadow_stats
    adapters    model_names (base and adapters), adapters (the in-process registry; None on Ray)

Kept light on purpose (no torch, no model imports): the Ray gateway's process imports it. Knows nothing of HTTP.
"""
from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Protocol, TypedDict, runtime_checkable

from typing_extensions import Self

from omni.contract.types import Decision, DecisionRequest
from omni.model.cache import CacheStats
from omni.serve.batcher import BatcherStats

if TYPE_CHECKING:      # the registry loads models: the Ray gateway's process never imports it
    from omni.serve.adapters import AdapterRegistry


class InputLimits(TypedDict):
    questions: int
    choice_options: int
    score_levels: int
    images: int
    image_bytes: int
    image_pixels: int
    audio: int
    audio_bytes: int
    audio_seconds: float
    videos: int
    video_bytes: int
    video_seconds: float


class Limits(TypedDict):
    inputs: InputLimits


class ModelCard(TypedDict):
    """What /v1/models shows of the served model."""

    name: str
    description: str
    release_date: str
    context_tokens: int
    tiny_default: bool
    limits: Limits


class LongPrefillStats(TypedDict):
    in_flight: int          # long prefills admitted and not yet ended
    refused: int            # refused for want of time (429) since start


@runtime_checkable
class ServingEngine(Protocol):
    @property
    def loaded(self) -> bool:
        """True once a model is in and warm (`info` answers)."""
        ...

    @property
    def ready(self) -> bool:
        """True once `start()` finished and until `stop()`: `submit` takes work."""
        ...

    def load(self) -> Self:
        """Block until the model is loaded and warm. Idempotent."""
        ...

    def start(self) -> Self:
        """Load, then start the serving path."""
        ...

    def stop(self, drain: bool = True, timeout_s: float | None = None) -> None:
        """Stop taking work; with `drain`, let the work in flight finish (up to `timeout_s`)."""
        ...

    @property
    def info(self) -> ModelCard:
        """The model card; NotReady until a model is in."""
        ...

    def model_names(self) -> list[str]:
        """Every name a request's `model` may give: the base's served name and aliases, then the adapters'."""
        ...

    @property
    def adapters(self) -> AdapterRegistry | None:
        """The in-process adapter registry (admin routes, SIGHUP, metrics, bound policies); None when the model
        cannot load adapters, before it is in, and on Ray (whose replicas each hold their own)."""
        ...

    def shadow_stats(self) -> dict[str, int]:
        """Shadow scoring's counters (same_forward, own_forward, dropped, failed); empty where there are none."""
        ...

    def submit(self, request: DecisionRequest, deadline_s: float | None = None,
               gate: Future[bool] | None = None) -> Future[Decision] | asyncio.Future[Decision]:
        """The serving path: Overloaded / NotReady at once, else a future that ends with the Decision or the
        engine's typed error. Cancelling it drops work not yet computed. `gate`: the request goes no further than
        its media's decoding until the gate ends — True: on to the forward pass; else dropped (`Withdrawn`)."""
        ...

    def decide(self, request: DecisionRequest) -> Decision:
        """Synchronous: one request (it blocks the calling thread: not for an event loop's)."""
        ...

    def decide_batch(self, requests: Sequence[DecisionRequest]) -> list[Decision]:
        """Synchronous: several requests, the same answers as one `decide` each."""
        ...

    def cache_stats(self) -> dict[str, CacheStats]:
        """The caches' counters by name (media, prefix); empty before a model is in."""
        ...

    def batcher_stats(self) -> BatcherStats | None:
        """The micro-batcher's counters; None while there is no serving path."""
        ...

    def long_prefills(self) -> LongPrefillStats:
        """Long prefills in flight and refused."""
        ...
