"""`RemoteEngine`: the `ServingEngine` surface (omni/serve/surface.py) answered by the engine replicas of a Ray Serve
deployment through a deployment handle; the HTTP app uses it exactly as the local `DecisionEngine`.

`submit(request, deadline_s)` returns an asyncio task (the route awaits it like the local engine's future and
cancels it at the deadline, which cancels the call on the replica); `decide` / `decide_batch` block on the same calls
(from a thread that runs no event loop: a batch's requests are sent at once, each to its own replica). Each call carries the request's affinity key
(`api.cluster.affinity`) for `CacheAffinityRouter`; a request whose `model` names an adapter is sent with
`multiplexed_model_id=<adapter>` (Ray Serve's model multiplexing: it goes to a replica where that adapter is resident),
a base request without one; a `model` the deployment does not serve is UnknownModel here, naming every model served
(`model_names()`: the base's names and the adapters', learned from a replica at `load`). Each answer comes back as a `ReplicaAnswer`: the decision or
the typed error the engine raised (pickled whole: the HTTP error table maps it exactly as for `omni serve`), plus a
snapshot of that replica's counters. `/metrics` shows their sums: counters over every replica heard from, gauges
(queue depth, cache bytes and entries, long prefills in flight) over the replicas heard from in the last minute.
A replica that dies under a call: the call is tried once more on another replica (a decision has no side effects),
then it is a 503 NotReady. Ray's own backpressure (`max_queued_requests`) is a 429 Overloaded.
Knows nothing of HTTP routes or the model; the only Ray it touches is the handle and its exceptions.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from typing_extensions import Self

from api.cluster.adapters import ServedModels
from api.cluster.affinity import affinity_key
from omni.contract.errors import InferenceFailed, NotReady, Overloaded, Withdrawn
from omni.contract.types import Decision, DecisionRequest
from omni.model.cache import CacheStats
from omni.serve.batcher import BatcherStats
from omni.serve.surface import LongPrefillStats, ModelCard

if TYPE_CHECKING:
    from ray.serve.handle import DeploymentHandle

    from omni.serve.adapters import AdapterRegistry

log = logging.getLogger("omni.cluster")
FRESH_S = 60.0          # gauges count the replicas heard from within this long
GAUGES = ("entries", "bytes", "budget_bytes")


@dataclass
class ReplicaSnapshot:
    """One replica's counters when it sent an answer."""

    replica: str
    caches: dict[str, CacheStats] = field(default_factory=dict)
    batcher: BatcherStats | None = None
    long_prefills: LongPrefillStats = field(default_factory=lambda: LongPrefillStats(in_flight=0, refused=0))
    at: float = 0.0                       # the gateway's time.monotonic() when it arrived
    multiplexed_model_id: str = ""        # the model id Ray routed the call by ("" for the base)
    adapters: tuple[str, ...] = ()        # the adapters resident on that replica after the call


@dataclass
class ReplicaAnswer:
    """What an engine replica sends back for one call: a decision or the engine's typed error, and its counters."""

    decision: Decision | None
    error: BaseException | None
    snapshot: ReplicaSnapshot


class RemoteEngine:
    def __init__(self, handle: DeploymentHandle, *, load_poll_s: float = 5.0,
                 settled: Callable[[], bool] | None = None):
        """`handle`: the engine deployment's `DeploymentHandle`. `settled()`: whether every replica the deployment
        wants is running (`load` waits for it too, so that the first requests find the replicas their keys belong to
        instead of all landing on the first one up)."""
        self._handle = handle
        self._load_poll_s = load_poll_s
        self._settled = settled
        self._info: ModelCard | None = None
        self._served: ServedModels | None = None
        self._routes: dict[str, DeploymentHandle] = {}     # adapter -> the handle that sends its multiplexed id
        self._ready = False
        self._lock = threading.Lock()
        self._snapshots: dict[str, ReplicaSnapshot] = {}
        self.in_flight = 0                 # calls sent and not yet answered (the launcher's drain waits for 0)

    # ------------------------------------------------------------------------------------------------ lifecycle
    def load(self) -> Self:
        """Block until an engine replica answers (Ray routes nothing to a replica before its engine is warm), then
        until the deployment has all the replicas it wants."""
        while self._info is None:
            try:
                self._info = self._handle.info.remote().result(timeout_s=self._load_poll_s)
            except TimeoutError:
                log.info("waiting for an engine replica to finish loading")
        if self._served is None:
            self._served = self._handle.served_models.remote().result(timeout_s=60)
        while self._settled is not None and not self._settled():
            time.sleep(0.2)
        return self

    def start(self) -> Self:
        self.load()
        self._ready = True
        return self

    def stop(self, drain: bool = True, timeout_s: float | None = None) -> None:
        """The replicas drain themselves (Ray Serve's graceful shutdown); the gateway only stops sending."""
        self._ready = False

    @property
    def ready(self) -> bool:
        return self._ready

    @property
    def loaded(self) -> bool:
        return self._info is not None

    @property
    def info(self) -> ModelCard:
        if self._info is None:
            raise NotReady("no engine replica has finished loading")
        return self._info

    def model_names(self) -> list[str]:
        """Every name a request may give as `model`: the base's, then the adapters' (every replica serves them all)."""
        if self._served is None:
            return [self.info["name"]]
        return self._served.names()

    @property
    def adapters(self) -> AdapterRegistry | None:
        """None: each replica holds its own registry (adapters are loaded where Ray's multiplexing routes them)."""
        return None

    def shadow_stats(self) -> dict[str, int]:
        return {}

    # ------------------------------------------------------------------------------------------------ deciding
    def submit(self, request: DecisionRequest, deadline_s: float | None = None,
               gate: Future[bool] | None = None) -> asyncio.Task[Decision]:
        """On the event loop: a task that ends with the Decision or the engine's typed error. `gate`: the request
        is sent once it ends True (a replica decodes and answers in one call: nothing overlaps the wait here), else
        dropped (`Withdrawn`)."""
        if not self._ready:
            raise NotReady("no engine replica has finished loading")
        self._route(request)                 # an unknown model: at once, as the local engine
        return asyncio.ensure_future(self._call(request, deadline_s) if gate is None
                                     else self._call_through(gate, request, deadline_s))

    async def _call_through(self, gate: Future[bool], request: DecisionRequest, deadline_s: float | None
                            ) -> Decision:
        try:
            opened = await asyncio.wrap_future(gate)
        except BaseException as exc:       # a failed or cancelled gate: dropped as a closed one
            raise Withdrawn("withdrawn before it was sent") from exc
        if opened is not True:
            raise Withdrawn("withdrawn before it was sent")
        return await self._call(request, deadline_s)

    def decide(self, request: DecisionRequest) -> Decision:
        """Synchronous: one request on the replica its affinity key picks."""
        return self.decide_batch([request])[0]

    def decide_batch(self, requests: Sequence[DecisionRequest]) -> list[Decision]:
        """Synchronous (blocks the calling thread): every request sent at once, each routed by its own affinity key
        (so each may land on another replica), answered in order; the first error is raised. The calls run on an
        event loop of their own, on a thread of their own, so a caller that runs a loop itself is no obstacle."""
        if not self._ready:
            raise NotReady("no engine replica has finished loading")
        with ThreadPoolExecutor(1, thread_name_prefix="omni-remote-batch") as pool:
            return pool.submit(asyncio.run, self._gather(requests)).result()

    async def _gather(self, requests: Sequence[DecisionRequest]) -> list[Decision]:
        return list(await asyncio.gather(*(self._call(request, None) for request in requests)))

    async def _call(self, request: DecisionRequest, deadline_s: float | None) -> Decision:
        self.in_flight += 1
        try:
            return await self._call_replicas(request, deadline_s)
        finally:
            self.in_flight -= 1

    async def _call_replicas(self, request: DecisionRequest, deadline_s: float | None) -> Decision:
        from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError
        from ray.serve.exceptions import BackPressureError, DeploymentUnavailableError, ReplicaUnavailableError

        key = affinity_key(request)
        handle = self._route(request)
        for attempt in (1, 2):
            try:
                answer: ReplicaAnswer = await handle.decide.remote(request, deadline_s, affinity=key)
                break
            except BackPressureError:
                raise Overloaded("every engine replica's queue is full", retry_after_s=1.0) from None
            except DeploymentUnavailableError:
                raise NotReady("the engine deployment is not running") from None
            except (ActorDiedError, ActorUnavailableError, RayActorError, ReplicaUnavailableError) as exc:
                log.warning("request %s: an engine replica went away (try %d): %s", request.request_id, attempt,
                            type(exc).__name__)
                if attempt == 2:
                    raise NotReady("the engine replica answering this request went away; retry") from None
        self._remember(answer.snapshot)
        if answer.error is not None:
            raise answer.error
        if answer.decision is None:            # a replica sends one or the other
            raise InferenceFailed("an engine replica sent neither a decision nor an error")
        return answer.decision

    def _route(self, request: DecisionRequest) -> DeploymentHandle:
        """The handle for a request: with its adapter as the multiplexed model id, or the plain one for the base.
        UnknownModel when the deployment does not serve its `model` (before a replica learnt them: the replica says)."""
        adapter = self._served.adapter_of(request.model) if self._served is not None else None
        if adapter is None:
            return self._handle
        handle = self._routes.get(adapter)
        if handle is None:
            handle = self._routes[adapter] = self._handle.options(multiplexed_model_id=adapter)
        return handle

    # ------------------------------------------------------------------------------------------------ metrics
    def _remember(self, snapshot: ReplicaSnapshot) -> None:
        snapshot.at = time.monotonic()
        with self._lock:
            self._snapshots[snapshot.replica] = snapshot

    def _views(self) -> tuple[list[ReplicaSnapshot], set[str]]:
        with self._lock:
            snapshots = list(self._snapshots.values())
        now = time.monotonic()
        return snapshots, {s.replica for s in snapshots if now - s.at <= FRESH_S}

    def cache_stats(self) -> dict[str, CacheStats]:
        snapshots, fresh = self._views()
        total: dict[str, dict[str, int]] = {}
        for snap in snapshots:
            for name, stats in snap.caches.items():
                into = total.setdefault(name, {f.name: 0 for f in dataclasses.fields(CacheStats)})
                for f in dataclasses.fields(CacheStats):
                    if f.name not in GAUGES or snap.replica in fresh:
                        into[f.name] += getattr(stats, f.name)
        return {name: CacheStats(**values) for name, values in total.items()}

    def long_prefills(self) -> LongPrefillStats:
        snapshots, fresh = self._views()
        return {"in_flight": sum(s.long_prefills["in_flight"] for s in snapshots if s.replica in fresh),
                "refused": sum(s.long_prefills["refused"] for s in snapshots)}

    def batcher_stats(self) -> BatcherStats:
        snapshots, fresh = self._views()
        total = BatcherStats()
        for snap in snapshots:
            if snap.batcher is None:
                continue
            for f in dataclasses.fields(BatcherStats):
                if f.name == "batch_sizes":
                    for size, n in snap.batcher.batch_sizes.items():
                        total.batch_sizes[size] = total.batch_sizes.get(size, 0) + n
                elif f.name != "queue_depth" or snap.replica in fresh:
                    setattr(total, f.name, getattr(total, f.name) + getattr(snap.batcher, f.name))
        return total

