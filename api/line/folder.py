"""The folder-watch source: a camera cell drops each unit's files into a folder; a unit is decided when it is whole.

`[[source]] type = "folder"`:
    path            the watched folder, under the line's root (default: the root itself)
    layout          "folder": each subfolder is a unit, its name the unit id (`4711/unit.png`, `4711/hum.wav`);
                    "stem": files directly in the folder sharing a stem are a unit (`4711.png`, `4711.wav`)
    marker          the file that says a unit is whole: folder layout, a file name inside the unit's folder
                    (`READY`); stem layout, an extension (`.ready` → `4711.ready`). "" (the default): no marker,
                    a unit is whole once none of its files has changed for `quiet_ms`
    quiet_ms        the quiet period without a marker (default 500)
    max_files       media files one unit may have (default 16; the request's own limits still apply)
    max_unit_bytes  a unit's media bytes in all (default 512 MiB)
    poll_ms         poll every this many ms instead of the OS's change events (network shares); 0: events
    rescan_s        look at the whole folder again this often (a change event the OS dropped is not a lost
                    unit; default 30)
    ignore          file name globs that are not part of a unit (beside the defaults: dot files, `*.tmp`,
                    `*.part`, `*.partial`, `*.crdownload`, `*.swp`)

In the folder layout a `state.json` (a JSON state) or `state.txt` (a text state) in the unit's folder is the unit's
state, replacing the template's.

Media go to the request's slots by extension (`api.line.paths.slot_of`); other files (a camera's .xml, hidden
files, `*.tmp`, `*.part`) are not part of the unit. Files are named relative to the root and checked by
`api.line.paths.unit_files` (no links, nothing outside the root). A unit that cannot be decided — a bad unit id, a
link, no media, too many or too large files — is emitted with its `problem` (published as that unit's error, never
skipped). At start the folder is scanned (units that became whole while the line was down are decided; the ledger
skips the ones decided before); each unit is emitted once while it is in the folder (a unit removed and written
again is offered again, and the ledger decides whether it is new).
Knows nothing of the runner, the ledger, the model or any other transport.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import stat
import time
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

from watchfiles import awatch

from api.line.config import LineContext
from api.line.config_reader import TableReader
from api.line.paths import OutsideRoot, slot_of, unit_files
from api.line.ports import Backoff, Emit, Trigger, unit_id_problem

log = logging.getLogger(__name__)
KEYS = ("type", "path", "layout", "marker", "quiet_ms", "max_files", "max_unit_bytes", "poll_ms", "rescan_s",
        "ignore")
STATE_FILES = ("state.json", "state.txt")
MAX_STATE_BYTES = 1024 * 1024
IGNORED_SUFFIXES = (".tmp", ".part", ".partial", ".crdownload", ".swp")
MiB = 1024 * 1024


@dataclass(frozen=True)
class FolderConfig:
    path: Path
    layout: str
    marker: str
    quiet_ms: int
    max_files: int
    max_unit_bytes: int
    poll_ms: int
    rescan_s: float
    ignore: tuple[str, ...] = ()

    def build(self, context: LineContext) -> FolderSource:
        return FolderSource(self, context.root)


def parse_source(reader: TableReader, table: dict[str, Any], where: str, context: LineContext) -> FolderConfig:
    reader.no_unknown_keys(table, KEYS, where)
    root = context.root.resolve()
    raw = reader.string(table, "path", where, "")
    path = (root / raw).resolve() if raw else root
    if path != root and root not in path.parents:
        raise reader.error(where, "path", f"{raw!r} lies outside the line's root {root}; watch a folder under it")
    if not path.is_dir():
        raise reader.error(where, "path", f"{path}: no such folder")
    layout = reader.string(table, "layout", where, "folder", choices=("folder", "stem"))
    marker = reader.string(table, "marker", where, "")
    if marker and ("/" in marker or marker in (".", "..")):
        raise reader.error(where, "marker", f"{marker!r} must be a file name, not a path")
    if marker and layout == "stem" and not marker.startswith("."):
        raise reader.error(where, "marker", f"{marker!r}: with layout = \"stem\" the marker is an extension "
                                            f"(\".ready\" makes 4711.ready the marker of unit 4711)")
    return FolderConfig(path=path, layout=layout, marker=marker,
                        quiet_ms=reader.integer(table, "quiet_ms", where, 500, low=10, high=3_600_000),
                        max_files=reader.integer(table, "max_files", where, 16, low=1, high=1000),
                        max_unit_bytes=reader.integer(table, "max_unit_bytes", where, 512 * MiB, low=1),
                        poll_ms=reader.integer(table, "poll_ms", where, 0, low=0, high=60_000),
                        rescan_s=reader.number(table, "rescan_s", where, 30.0, low=0.1, high=86_400),
                        ignore=tuple(reader.strings(table, "ignore", where, [])))


@dataclass(frozen=True)
class _Look:
    """A unit as the folder shows it now."""

    files: tuple[Path, ...]        # media files (absolute, not yet checked against the root)
    whole: bool                    # its marker is there
    changed_wall_s: float          # the newest mtime among its files (and marker)
    problem: str | None = None
    signature: tuple[tuple[str, int, int], ...] = ()     # (name, size, mtime_ns) of every file: a change moves it


class FolderSource:
    def __init__(self, config: FolderConfig, root: Path):
        self.config = config
        self.root = root.resolve()
        self.name = f"folder:{config.path}"
        self._emitted: set[str] = set()
        self._pending: dict[str, tuple[Any, float]] = {}   # unit id → (its files' sizes and times, since when)
        self._counts = {"units": 0, "bad_units": 0, "scans": 0, "restarts": 0}
        self.watching = False

    def stats(self) -> dict[str, float]:
        return {**self._counts, "pending": len(self._pending), "watching": int(self.watching)}

    # ---- the loop ---------------------------------------------------------------------------------------------
    async def run(self, emit: Emit) -> None:
        backoff = Backoff(base_s=0.5, max_s=30.0)
        while True:
            try:
                await self._scan(emit)
                await asyncio.gather(self._watch(emit), self._tick(emit))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 (the folder went away, inotify ran out: look again, later)
                self.watching = False
                self._counts["restarts"] += 1
                log.warning("%s: %s; watching again", self.name, exc)
                await backoff.wait()

    async def _watch(self, emit: Emit) -> None:
        poll = self.config.poll_ms > 0
        async for changes in awatch(self.config.path, watch_filter=None, debounce=50, step=20, recursive=True,
                                    force_polling=poll, poll_delay_ms=self.config.poll_ms or 300,
                                    yield_on_timeout=True, rust_timeout=1000):
            self.watching = True
            touched = {unit for _, changed in changes if (unit := self._unit_of(Path(changed))) is not None}
            for unit_id in touched - self._emitted:
                await self._consider(unit_id, emit)

    async def _tick(self, emit: Emit) -> None:
        """Quiet periods run out and rescans come due without any change event."""
        step_s = min(self.config.quiet_ms / 4000, 0.1)
        last_scan = time.monotonic()
        while True:
            await asyncio.sleep(step_s)
            if time.monotonic() - last_scan >= self.config.rescan_s:
                await self._scan(emit)
                last_scan = time.monotonic()
            for unit_id in list(self._pending):
                await self._consider(unit_id, emit)

    async def _scan(self, emit: Emit) -> None:
        self._counts["scans"] += 1
        present = await asyncio.to_thread(self._unit_ids)
        self._emitted &= set(present)      # a unit the cell cleared away is forgotten: memory stays bounded by the folder
        for unit_id in present:
            if unit_id not in self._emitted:
                await self._consider(unit_id, emit)

    # ---- one unit ---------------------------------------------------------------------------------------------
    async def _consider(self, unit_id: str, emit: Emit) -> None:
        look = await asyncio.to_thread(self._look, unit_id)
        if look is None:                              # gone, or nothing of it yet
            self._pending.pop(unit_id, None)
            return
        if not look.whole:
            if self.config.marker:                    # waits for its marker, however long
                self._pending.pop(unit_id, None)
                return
            now = time.monotonic()
            seen = self._pending.get(unit_id)
            if seen is None or seen[0] != look.signature:     # new, or still being written: the quiet starts now
                self._pending[unit_id] = (look.signature, now)
                return
            if (now - seen[1]) * 1000 < self.config.quiet_ms:
                return
        self._pending.pop(unit_id, None)
        self._emitted.add(unit_id)
        await emit(self._trigger(unit_id, look))

    def _trigger(self, unit_id: str, look: _Look) -> Trigger:
        id_problem = unit_id_problem(unit_id)
        problem = id_problem or look.problem
        files: tuple[Path, ...] = ()
        if problem is None:
            try:
                files = unit_files(self.root, [str(path.relative_to(self.root)) for path in look.files])
            except (OutsideRoot, ValueError) as exc:
                problem = str(exc)
        if problem is None:
            problem = self._size_problem(files)
        state: Any = None
        if problem is None and self.config.layout == "folder":
            state, problem = _state(self.config.path / unit_id)
        self._counts["units"] += 1
        if problem is not None:
            self._counts["bad_units"] += 1
            files = ()
        shown_id = unit_id if id_problem is None else \
            f"invalid-{hashlib.sha256(unit_id.encode('utf-8', 'replace')).hexdigest()[:12]}"
        return Trigger(unit_id=shown_id, files=files, source=self.name, ready_wall_s=look.changed_wall_s,
                       state=state if problem is None else None, problem=problem)

    def _size_problem(self, files: tuple[Path, ...]) -> str | None:
        if not files:
            return "the unit has no media files (photos, audio, videos by their extension)"
        if len(files) > self.config.max_files:
            return f"the unit has {len(files)} media files; max_files is {self.config.max_files}"
        total = sum(path.stat().st_size for path in files)
        if total > self.config.max_unit_bytes:
            return f"the unit's files hold {total} bytes; max_unit_bytes is {self.config.max_unit_bytes}"
        return None

    # ---- what the folder shows (in a thread) -----------------------------------------------------------------
    def _unit_of(self, changed: Path) -> str | None:
        try:
            relative = changed.relative_to(self.config.path)
        except ValueError:
            return None
        if not relative.parts:
            return None
        if self.config.layout == "folder":
            return relative.parts[0]
        if len(relative.parts) != 1:
            return None
        name = relative.parts[0]
        return name[: -len(self.config.marker)] if self.config.marker and name.endswith(self.config.marker) \
            else Path(name).stem

    def _unit_ids(self) -> list[str]:
        try:
            entries = sorted(os.scandir(self.config.path), key=lambda entry: entry.name)
        except OSError as exc:
            raise RuntimeError(f"cannot read {self.config.path}: {exc.strerror}") from None
        ids: list[str] = []
        for entry in entries:
            if _hidden(entry.name, self.config.ignore):
                continue
            if self.config.layout == "folder":
                if entry.is_dir(follow_symlinks=False) or entry.is_symlink():
                    ids.append(entry.name)
            elif (unit := self._unit_of(Path(entry.path))) is not None and unit not in ids:
                ids.append(unit)
        return ids

    def _look(self, unit_id: str) -> _Look | None:
        folder = self.config.path
        if self.config.layout == "folder":
            home = folder / unit_id
            try:
                mode = os.lstat(home).st_mode
            except OSError:
                return None
            if stat.S_ISLNK(mode):
                return _Look((), True, time.time(), f"{unit_id}: a symbolic link; links are not followed")
            if not stat.S_ISDIR(mode):
                return None
            names = _names(home, self.config.ignore)
            marker_path = home / self.config.marker if self.config.marker else None
            media = [home / name for name in names if name != self.config.marker and _media(name)]
        else:
            names = [name for name in _names(folder, self.config.ignore) if self._unit_of(folder / name) == unit_id]
            marker_path = folder / f"{unit_id}{self.config.marker}" if self.config.marker else None
            media = [folder / name for name in names if _media(name) and not
                     (self.config.marker and name.endswith(self.config.marker))]
            if not names:
                return None
        whole = marker_path is not None and os.path.lexists(marker_path)
        stamps = [_stamp(path) for path in [*media, *([marker_path] if whole and marker_path else [])]]
        return _Look(tuple(media), whole, max((s[2] / 1e9 for s in stamps), default=time.time()),
                     signature=tuple(stamps))


def _names(folder: Path, ignore: tuple[str, ...]) -> list[str]:
    try:
        return sorted(entry.name for entry in os.scandir(folder) if not _hidden(entry.name, ignore))
    except OSError:
        return []


def _state(home: Path) -> tuple[Any, str | None]:
    """A unit folder's state file: (the state or None, a problem or None). Read as a file under the root is: no
    links, a size bound."""
    for name in STATE_FILES:
        path = home / name
        try:
            info = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISREG(info.st_mode):
            return None, f"{name}: not a regular file (links are not followed)"
        if info.st_size > MAX_STATE_BYTES:
            return None, f"{name} has {info.st_size} bytes; a state file holds at most {MAX_STATE_BYTES}"
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            return None, f"{name}: cannot be read as UTF-8 text ({exc})"
        if name == "state.txt":
            return text, None
        try:
            return json.loads(text), None
        except ValueError as exc:
            return None, f"state.json is not JSON ({exc})"
    return None, None


def _hidden(name: str, ignore: tuple[str, ...] = ()) -> bool:
    return name.startswith(".") or name.endswith(IGNORED_SUFFIXES) or any(fnmatch(name, glob) for glob in ignore)


def _media(name: str) -> bool:
    return slot_of(Path(name)) is not None


def _stamp(path: Path) -> tuple[str, int, int]:
    try:
        info = os.lstat(path)
    except OSError:
        return (path.name, -1, time.time_ns())
    return (path.name, info.st_size, info.st_mtime_ns)
