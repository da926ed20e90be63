"""Which adapter answers a request, and which shadow candidate scores it: the request's `model` -> a `Selection`.

`Selector.check(request)` runs at admission (fast, no loading): the base's names answer as the base; a served adapter
answers as itself; anything else is UnknownModel naming every model served. `Selector.select(request)` (on a decode
thread) acquires the adapter version the request keeps to its end (loading it when it is not resident) and, when a
shadow pair names the request's model, the candidate: a head-only candidate whose live side runs without LoRA is
scored from the same forward (`Selection.shadow`); any other candidate needs a forward of its own, which the engine
runs after the live answer only while the server has room (`shadow_room`), else drops it (counted). `Held.release`
ends what the request holds. Knows nothing of HTTP, argv, the environment or model internals.
"""
from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from omni.contract.errors import AdapterError, OmniError, Overloaded, UnknownModel
from omni.contract.types import Decision, DecisionRequest, ShadowScore
from omni.model.adapters import Adapter, Selection
from omni.serve.adapters import AdapterRegistry


@dataclass
class ShadowCounters:
    """/metrics counters of shadow scoring since start."""

    same_forward: int = 0        # scored from the live request's forward (its head after the live answer)
    own_forward: int = 0         # scored by a forward of their own, after the live answer
    dropped: int = 0             # not scored: the server had no room (they never delay a live answer)
    failed: int = 0              # the candidate's forward failed (the live answer was already sent)


@dataclass
class Held:
    """What one request holds until it ends: its adapter and shadow candidate versions, and a candidate that needs a
    forward of its own (`own_forward`, its name)."""

    registry: AdapterRegistry | None
    selection: Selection = field(default_factory=Selection)
    own_forward: str | None = None
    _released: bool = False

    def release(self) -> None:
        if self._released or self.registry is None:
            return
        self._released = True
        for adapter in (self.selection.adapter, self.selection.shadow):
            if adapter is not None:
                self.registry.release(adapter)


class Selector:
    def __init__(self, registry: AdapterRegistry | None, served_name: str, aliases: tuple[str, ...]):
        self.registry = registry
        self.served_name = served_name
        self.base_names = tuple(dict.fromkeys((served_name, *aliases)))
        self.counters = ShadowCounters()
        self._lock = threading.Lock()

    def model_names(self) -> list[str]:
        """Every name a request may give as `model`: the base's, then the adapters'."""
        return [*self.base_names, *(self.registry.names() if self.registry is not None else [])]

    def is_base(self, name: str | None) -> bool:
        return name is None or name.strip() in self.base_names

    def answered_as(self, selection: Selection) -> str:
        """The `model` a response names: the adapter's name, else the base's served name."""
        return selection.adapter.name if selection.adapter is not None else self.served_name

    def check(self, request: DecisionRequest) -> None:
        """UnknownModel (naming every model served) unless the request's model is served."""
        name = request.model
        if self.is_base(name):
            return
        if self.registry is None or name not in self.registry:
            raise UnknownModel(str(name), tuple(self.model_names()))

    def select(self, request: DecisionRequest) -> Held:
        """Acquire what the request is answered with (loading a non-resident adapter); `release` the result."""
        registry = self.registry
        if registry is None:
            return Held(None)
        held = Held(registry)
        try:
            adapter = None if self.is_base(request.model) else registry.acquire(str(request.model))
            held.selection = Selection(adapter)
            candidate = registry.shadow_of(request.model)
            if candidate is not None:
                self._shadow(held, registry, adapter, candidate)
        except BaseException:
            held.release()
            raise
        return held

    def _shadow(self, held: Held, registry: AdapterRegistry, adapter: Adapter | None, candidate: str) -> None:
        try:
            shadow = registry.acquire(candidate)
        except AdapterError:
            with self._lock:
                self.counters.failed += 1
            return
        if shadow.lora_key is None and (adapter is None or adapter.lora_key is None):
            held.selection = Selection(adapter, shadow)        # the same forward's hidden states: its head only
            return
        registry.release(shadow)
        held.own_forward = candidate

    def count(self, kind: str) -> None:
        with self._lock:
            setattr(self.counters, kind, getattr(self.counters, kind) + 1)

    def stats(self) -> dict[str, int]:
        with self._lock:
            return dict(vars(self.counters))

    def own_forward(self, submit: Callable[[DecisionRequest], Future[Decision]], request: DecisionRequest,
                    candidate: str, room: bool) -> Future[ShadowScore | None]:
        """The candidate's score of `request` by a forward of its own (`submit`), when there is `room`; else dropped
        (counted). Resolves to None when not scored; never raises."""
        scored: Future[ShadowScore | None] = Future()
        try:
            if not room:
                raise Overloaded("no room for shadow work")
            shadow = submit(dataclasses.replace(request, model=candidate, audit=True))
        except OmniError:
            self.count("dropped")
            scored.set_result(None)
            return scored

        def done(future: Future[Decision]) -> None:
            decision = future.result() if future.exception() is None else None
            audit = decision.audit if decision is not None else None
            if decision is None or audit is None or audit.probabilities is None:
                self.count("failed")
                scored.set_result(None)
                return
            self.count("own_forward")
            sha = (audit.model.adapter or {}).get("sha256")
            scored.set_result(ShadowScore(candidate, sha if isinstance(sha, str) else None, decision.answers,
                                          audit.probabilities, same_forward=False))

        shadow.add_done_callback(done)
        return scored
