"""The adapters a server answers with: names -> folders, which are resident, which requests hold which version.

`AdapterRegistry` keeps the served names (from `--adapters DIR`, each subfolder an adapter named by the folder, and
`--adapter NAME=PATH`), loads them through the model (`AdapterHost`) under the engine's model lock (no forward runs
while LoRA weights go in or out), and bounds how many are resident (`max_resident`): loading one more evicts the
least recently used adapter that no request holds (it stays served and is loaded again on its next request).
`acquire(name)` gives a request the current version and counts it until `release`; `reload` loads a new version
beside the old one, and the old one goes once the last request admitted with it ends; `unload` refuses an adapter
that requests still hold (AdapterBusy). `rescan` (SIGHUP) makes the served set match `--adapters DIR` again.
Shadow pairs (`LIVE=CANDIDATE`) are kept here too: which candidate scores a live model's requests.
Knows nothing of HTTP, argv, the environment or model internals (it sees `Adapter` values and the host's two calls).
"""
from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omni.contract.errors import AdapterBusy, AdapterError, Overloaded
from omni.contract.policy import Policy
from omni.model.adapter_format import MANIFEST_FILE, check_adapter_name
from omni.model.adapters import Adapter
from omni.model.surface import AdapterHost

log = logging.getLogger(__name__)


@dataclass
class AdapterCounters:
    """/metrics counters since start."""

    loads: int = 0
    reloads: int = 0
    unloads: int = 0
    evictions: int = 0
    load_failures: int = 0


def parse_pair(text: str, flag: str) -> tuple[str, str]:
    """"NAME=VALUE" of a flag (`--adapter NAME=PATH`, `--shadow LIVE=CANDIDATE`); ValueError naming the flag."""
    name, sep, value = text.partition("=")
    if not sep or not name or not value:
        raise ValueError(f"{flag} takes NAME=VALUE, not {text!r}")
    return name.strip(), value.strip()


def scan_folder(directory: Path) -> dict[str, Path]:
    """Each subfolder of `directory` holding an adapter.json, by folder name (names checked)."""
    if not directory.is_dir():
        raise AdapterError(str(directory), "--adapters must name a directory")
    found: dict[str, Path] = {}
    for child in sorted(directory.iterdir()):
        if child.is_dir() and (child / MANIFEST_FILE).is_file():
            found[check_adapter_name(child.name)] = child
    return found


class AdapterRegistry:
    def __init__(self, host: AdapterHost | None, model_lock: threading.Lock, *, base_names: tuple[str, ...],
                 max_resident: int = 8, scan_dir: str | Path | None = None):
        if max_resident < 1:
            raise ValueError(f"max_adapters must be >= 1, got {max_resident}")
        self.host = host
        self.model_lock = model_lock
        self.base_names = base_names                  # the base model's served name and aliases
        self.max_resident = max_resident
        self.scan_dir = Path(scan_dir) if scan_dir is not None else None
        self.counters = AdapterCounters()
        self._lock = threading.RLock()
        self._paths: dict[str, Path] = {}             # served name -> folder
        self._current: OrderedDict[str, Adapter] = OrderedDict()   # resident current versions, least recent first
        self._holds: dict[int, int] = {}              # id(adapter version) -> requests holding it
        self._retired: dict[int, Adapter] = {}        # replaced or evicted versions still held
        self._shadows: dict[str, str] = {}            # live name -> candidate name
        self._policies: dict[str, Policy] = {}        # adapter name -> the policy bound to it (policy.toml)

    # ---------------------------------------------------------------------------------------------- what is served
    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._paths)

    def __contains__(self, name: object) -> bool:
        with self._lock:
            return name in self._paths

    def is_base(self, name: str | None) -> bool:
        return name is None or name.strip() in self.base_names

    def cards(self) -> list[dict[str, Any]]:
        """Per served adapter: name, mode, base, created, resident (and its sha256 / bytes when resident)."""
        from omni.model.adapter_format import read_manifest

        cards = []
        with self._lock:
            items = sorted(self._paths.items())
            resident = dict(self._current)
        for name, path in items:
            adapter = resident.get(name)
            try:
                manifest = adapter.manifest if adapter is not None else read_manifest(path, name)
            except AdapterError as exc:
                cards.append({"name": name, "error": exc.cause, "resident": False})
                continue
            cards.append({"name": name, "mode": manifest.mode, "base_sha256": manifest.base_sha256,
                          "created": manifest.created, "resident": adapter is not None,
                          **({"sha256": adapter.sha256, "bytes": adapter.nbytes} if adapter is not None else {})})
        return cards

    def stats(self) -> dict[str, int]:
        with self._lock:
            current = list(self._current.values())
            return {"served": len(self._paths), "resident": len(current),
                    "resident_lora": sum(a.lora_key is not None for a in current),
                    "resident_bytes": sum(a.nbytes for a in current), "retired": len(self._retired),
                    "in_flight": sum(self._holds.values()), "max_resident": self.max_resident,
                    **vars(self.counters)}

    # -------------------------------------------------------------------------------------------- per request
    def check(self, name: str) -> None:
        """AdapterError unless `name` is served (fast: no loading)."""
        with self._lock:
            if name not in self._paths:
                raise AdapterError(name, "not served")

    def acquire(self, name: str) -> Adapter:
        """The current version of `name` for one request (loaded first when it is not resident); `release` it."""
        with self._lock:
            adapter = self._current.get(name)
            if adapter is not None:
                self._current.move_to_end(name)
                self._holds[id(adapter)] = self._holds.get(id(adapter), 0) + 1
                return adapter
        self._load(name, replace=False)
        return self.acquire(name)

    def release(self, adapter: Adapter) -> None:
        with self._lock:
            held = self._holds.get(id(adapter), 0) - 1
            if held > 0:
                self._holds[id(adapter)] = held
                return
            self._holds.pop(id(adapter), None)
            retired = self._retired.pop(id(adapter), None)
        if retired is not None:
            self._free(retired)

    def held(self, name: str) -> int:
        with self._lock:
            return sum(self._holds.get(id(a), 0) for a in self._versions(name))

    def policy_of(self, name: str) -> Policy | None:
        """The policy bound to adapter `name` (its folder's policy.toml as last loaded; kept while it is evicted)."""
        with self._lock:
            return self._policies.get(name)

    def _versions(self, name: str) -> list[Adapter]:
        return [a for a in [self._current.get(name), *self._retired.values()] if a is not None and a.name == name]

    # ----------------------------------------------------------------------------------------------- admin
    def register(self, name: str, path: str | Path, *, load: bool = True) -> Adapter | None:
        """Serve the adapter in `path` as `name` (loaded now when `load`). AdapterError for a taken name, a bad folder
        or a wrong base (then nothing changes)."""
        check_adapter_name(name)
        if self.is_base(name):
            raise AdapterError(name, "is the base model's name")
        with self._lock:
            if name in self._paths:
                raise AdapterError(name, f"an adapter of this name is already served (from {self._paths[name]}); "
                                   "reload or unload it first")
        path = Path(path)
        adapter = self._loaded(name, path) if load else None
        with self._lock:
            if name in self._paths:                     # registered meanwhile by another call
                if adapter is not None:
                    self._free(adapter)
                raise AdapterError(name, "an adapter of this name is already served")
            self._paths[name] = path
            if adapter is not None:
                self._make_room()
                self._current[name] = adapter
                self._bind(adapter)
        return adapter

    def reload(self, name: str) -> Adapter:
        """Load `name` again from its folder; requests admitted with the old version keep it to their end."""
        with self._lock:
            if name not in self._paths:
                raise AdapterError(name, "not served")
        adapter = self._load(name, replace=True)
        self.counters.reloads += 1
        return adapter

    def unload(self, name: str) -> None:
        """Stop serving `name` and free it; AdapterBusy while requests hold it (nothing changes then)."""
        with self._lock:
            if name not in self._paths:
                raise AdapterError(name, "not served")
            held = sum(self._holds.get(id(a), 0) for a in self._versions(name))
            if held:
                raise AdapterBusy(name, f"{held} request(s) in flight use it; unload it when they are done")
            if name in self._shadows.values() or name in self._shadows:
                raise AdapterBusy(name, "it is in a shadow pair; remove the pair first")
            del self._paths[name]
            self._policies.pop(name, None)
            adapter = self._current.pop(name, None)
        if adapter is not None:
            self._free(adapter)
        self.counters.unloads += 1

    def rescan(self) -> dict[str, list[str]]:
        """Make the served set match `--adapters DIR`: new folders are served, gone ones unloaded (unless busy), the
        rest reloaded when their adapter.json changed. Returns what happened, by kind; errors are logged and listed."""
        if self.scan_dir is None:
            return {"added": [], "removed": [], "reloaded": [], "errors": []}
        report: dict[str, list[str]] = {"added": [], "removed": [], "reloaded": [], "errors": []}
        try:
            found = scan_folder(self.scan_dir)
        except AdapterError as exc:
            report["errors"].append(str(exc))
            return report
        with self._lock:
            served = {n: p for n, p in self._paths.items() if p.parent == self.scan_dir}
        for name, path in found.items():
            self._rescan_one(name, path, served.get(name), report)
        for name in sorted(set(served) - set(found)):
            self._attempt(report, "removed", name, lambda n=name: self.unload(n))
        return report

    def _rescan_one(self, name: str, path: Path, known: Path | None, report: dict[str, list[str]]) -> None:
        if known is None:
            self._attempt(report, "added", name, lambda: self.register(name, path, load=False))
            return
        with self._lock:
            current = self._current.get(name)
        if current is not None and (path / MANIFEST_FILE).stat().st_mtime_ns != current.manifest_mtime_ns:
            self._attempt(report, "reloaded", name, lambda: self.reload(name))

    @staticmethod
    def _attempt(report: dict[str, list[str]], kind: str, name: str, action: Any) -> None:
        try:
            action()
        except AdapterError as exc:
            log.warning("adapters: %s", exc)
            report["errors"].append(str(exc))
        else:
            report[kind].append(name)

    # ----------------------------------------------------------------------------------------------- shadows
    def set_shadow(self, live: str, candidate: str) -> None:
        """Score requests to `live` (the base's name or an adapter) with `candidate` (an adapter) too."""
        if not self.is_base(live):
            self.check(live)
        try:
            self.check(candidate)
        except AdapterError:
            raise AdapterError(candidate, f"the shadow candidate of {live!r} is not served") from None
        with self._lock:
            self._shadows[self.base_names[0] if self.is_base(live) else live] = candidate

    def clear_shadow(self, live: str) -> None:
        with self._lock:
            if self._shadows.pop(self.base_names[0] if self.is_base(live) else live, None) is None:
                raise AdapterError(live, "has no shadow candidate")

    def shadow_of(self, live: str | None) -> str | None:
        with self._lock:
            return self._shadows.get(self.base_names[0] if self.is_base(live) else str(live))

    def shadows(self) -> dict[str, str]:
        with self._lock:
            return dict(self._shadows)

    # ----------------------------------------------------------------------------------------------- loading
    def _loaded(self, name: str, path: Path) -> Adapter:
        if self.host is None:
            raise AdapterError(name, "this model cannot load adapters")
        try:
            with self.model_lock:
                adapter = self.host.load_adapter(path, name)
        except AdapterError:
            self.counters.load_failures += 1
            raise
        self.counters.loads += 1
        return adapter

    def _load(self, name: str, replace: bool) -> Adapter:
        with self._lock:
            path = self._paths.get(name)
        if path is None:
            raise AdapterError(name, "not served")
        adapter = self._loaded(name, path)
        with self._lock:
            old = self._current.pop(name, None)
            if old is not None and not replace:            # loaded meanwhile by another request: keep that one
                self._current[name] = old
                self._free(adapter)
                return old
            self._make_room()
            self._current[name] = adapter
            self._bind(adapter)
            if old is not None:
                self._retire(old)
        return adapter

    def _bind(self, adapter: Adapter) -> None:
        """Remember the policy bound to the version just made current (lock held)."""
        if adapter.policy is not None:
            self._policies[adapter.name] = adapter.policy
        else:
            self._policies.pop(adapter.name, None)

    def _make_room(self) -> None:
        """Evict least recently used unheld adapters until one more fits (lock held); Overloaded when all are held."""
        while len(self._current) >= self.max_resident:
            idle = next((n for n, a in self._current.items() if not self._holds.get(id(a))), None)
            if idle is None:
                raise Overloaded(f"all {len(self._current)} resident adapters are in use (max_adapters "
                                 f"{self.max_resident})", retry_after_s=1.0)
            self._free(self._current.pop(idle))
            self.counters.evictions += 1

    def _retire(self, adapter: Adapter) -> None:
        if self._holds.get(id(adapter)):
            self._retired[id(adapter)] = adapter
        else:
            self._free(adapter)

    def _free(self, adapter: Adapter) -> None:
        if self.host is not None:
            with self.model_lock:
                self.host.unload_adapter(adapter)
