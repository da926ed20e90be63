"""Adapters on an engine replica under Ray Serve's model multiplexing: which adapters the deployment serves, and
making one resident in (or evicting it from) this replica's engine.

Every replica knows the whole table of served adapters (`--adapters DIR`'s subfolders and `--adapter NAME=PATH`) but
loads one only when Ray's multiplexed loader asks for it (the first request for it routed here): the engine's
`AdapterRegistry` then serves exactly the adapters resident on this replica, plus the adapters of shadow pairs, which
are registered at start on every replica (a pair needs both sides) and never evicted by Ray. `ResidentAdapter` is the
object the loader hands Ray: when Ray's LRU evicts the model id it calls the object's `__del__`, which unloads the
adapter from the registry unless requests still hold it (then it goes when the last of them releases it). Loading one
more while every resident adapter is held waits for a release (the registry's bound, `max_adapters`, is never passed).
`ServedModels` is what the gateway learns from a replica: the base's names and every adapter's.
Knows nothing of HTTP or of Ray itself (the deployment in `deployments.py` wires the loader); the base model is always
resident and never passes through here.
"""
from __future__ import annotations

import dataclasses
import logging
import threading
from dataclasses import dataclass
from pathlib import Path

from omni.contract.config import EngineConfig
from omni.contract.errors import AdapterBusy, AdapterError, UnknownModel
from omni.model.adapters import Adapter
from omni.serve.adapters import AdapterRegistry, scan_folder

log = logging.getLogger("omni.cluster")


@dataclass(frozen=True)
class ServedModels:
    """Every name a request's `model` may give: the base's (served name first, then aliases), then the adapters'."""

    base: tuple[str, ...]
    adapters: tuple[str, ...]

    def names(self) -> list[str]:
        return [*self.base, *self.adapters]

    def adapter_of(self, model: str | None) -> str | None:
        """The adapter a request's `model` names; None for the base; UnknownModel (naming every model) otherwise."""
        if model is None or model.strip() in self.base:
            return None
        if model in self.adapters:
            return model
        raise UnknownModel(model, tuple(self.names()))


def adapter_table(config: EngineConfig) -> dict[str, str]:
    """Served adapters by name: `adapters_dir`'s subfolders, then `adapters` (name, folder) pairs."""
    found = scan_folder(Path(config.adapters_dir)) if config.adapters_dir else {}
    return {**{name: str(path) for name, path in found.items()}, **dict(config.adapters)}


def replica_config(config: EngineConfig) -> EngineConfig:
    """The engine config a replica starts with: no adapters loaded at start (Ray's loader brings them in)."""
    return dataclasses.replace(config, adapters=(), adapters_dir=None, shadows=())


class ReplicaAdapters:
    """This replica's view: the served table, and residency in its engine's registry."""

    def __init__(self, registry: AdapterRegistry | None, table: dict[str, str], base: tuple[str, ...],
                 shadows: tuple[tuple[str, str], ...] = ()):
        if table and registry is None:
            raise AdapterError(next(iter(table)), "this model cannot load adapters")
        self.registry = registry
        self.table = dict(table)
        self.served = ServedModels(base, tuple(sorted(self.table)))
        self._lock = threading.Lock()            # one residency change at a time (Ray loads one model at a time too)
        self._wanted: set[str] = set()           # the adapters Ray holds as loaded here
        self._pinned: set[str] = set()           # shadow pairs' adapters: resident for the replica's lifetime
        for live, candidate in shadows:          # both sides of a pair on every replica, for the pair's lifetime
            for name in (live, candidate):
                if not self._registry().is_base(name) and name not in self._registry():
                    self._registry().register(name, self._path(name))
                    self._pinned.add(name)
            self._registry().set_shadow(live, candidate)

    def _registry(self) -> AdapterRegistry:
        if self.registry is None:
            raise AdapterError("", "this model cannot load adapters")
        return self.registry

    def _path(self, name: str) -> str:
        path = self.table.get(name)
        if path is None:
            raise UnknownModel(name, tuple(self.served.names()))
        return path

    def make_resident(self, name: str) -> None:
        """Register and load `name` in this replica's engine (blocking: weights go in under the model lock).
        Overloaded while every resident adapter is held (the caller waits and tries again)."""
        registry, path = self._registry(), self._path(name)
        with self._lock:
            self._wanted.add(name)
            if name in registry:             # still here (held when Ray last evicted it, or a shadow pair's)
                registry.release(registry.acquire(name))       # loads it again if the registry's LRU evicted it
            else:
                registry.register(name, path)
        log.info("adapter %s resident on this replica", name)

    def hold(self, name: str) -> Adapter:
        """The adapter for one request, held until `release`; AdapterError when it was evicted meanwhile."""
        registry = self._registry()
        if name not in registry:
            raise AdapterError(name, "not resident on this replica")
        return registry.acquire(name)

    def release(self, adapter: Adapter) -> None:
        """End one request's hold; an adapter Ray evicted while it was held goes now, when nothing else holds it."""
        self._registry().release(adapter)
        if adapter.name not in self._wanted:
            self._unload(adapter.name)

    def evict(self, name: str) -> bool:
        """Ray evicted `name`: unload it from this replica's engine unless requests hold it (then the last release
        does) or a shadow pair names it; True if it went."""
        with self._lock:
            self._wanted.discard(name)
        return self._unload(name)

    def _unload(self, name: str) -> bool:
        registry = self._registry()
        with self._lock:
            if name not in registry or name in self._pinned or name in self._wanted or registry.held(name):
                return False
            try:
                registry.unload(name)
            except AdapterBusy as exc:
                log.info("adapter %s stays resident on this replica: %s", name, exc.cause)
                return False
        log.info("adapter %s evicted from this replica", name)
        return True

    def resident(self) -> tuple[str, ...]:
        """The adapters registered in this replica's engine: Ray's loaded set, shadow pairs', and any Ray evicted
        that a request still holds."""
        return tuple(self.registry.names()) if self.registry is not None else ()


class ResidentAdapter:
    """What Ray's multiplexed loader returns for an adapter: Ray calls its `__del__` when it evicts the model id.

    `__del__` is set on the instance, not the class: Ray looks it up on the object and calls it once, while the garbage
    collector (which looks on the class) never runs an unload at an arbitrary moment in an arbitrary thread."""

    def __init__(self, adapters: ReplicaAdapters, name: str):
        self.adapters = adapters
        self.name = name
        self._evicted = False
        self.__del__ = self.evict

    def evict(self) -> None:
        if not self._evicted:
            self._evicted = True
            self.adapters.evict(self.name)
