"""The banks a server runs with (`--bank FILE`, repeatable): read at start, read again on reload, all or nothing.

`BankShelf(paths, pdq_thresholds)` reads and indexes every file at once; a file that does not read (or two banks of
one name, or a threshold for a bank not given) is a `BankError` naming it, and a server does not start on one.
`reload()` (SIGHUP, `POST /v1/admin/banks/reload`) builds a whole new `BankSet` from the files as they are now and
swaps it in with one assignment: a request takes `current` once and consults either the old set or the new one,
never a mix; a file that no longer reads raises and the set in force stays. `current` is what a request consults;
`described()` names each bank, its version, entries and threshold. When a bank holds vPDQ hashes, request videos are
hashed by a `VideoHasher` (worker processes, one started as soon as a bank holds vPDQ hashes, kept across reloads;
`close()` ends them); a vpdq bank without the `vpdq` package installed is a `BankError` saying how to install it.
Knows nothing of HTTP, the engine, the model or policies.
"""
from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from omni.banks.entries import DEFAULT_PDQ_THRESHOLD, BankError, read_bank
from omni.banks.index import Bank
from omni.banks.matching import BankSet
from omni.banks.video_hasher import VideoHasher
from omni.contract.json_values import JSONObject
from preprocess.hashes import vpdq_available

VPDQ_INSTALL = ("pip install 'omni-decide[vpdq]' (it builds against FFmpeg's development libraries: on Debian, "
                "apt-get install pkg-config cmake g++ libavcodec-dev libavformat-dev libavdevice-dev libavfilter-dev "
                "libswresample-dev libswscale-dev libavutil-dev)")


class BankShelf:
    def __init__(self, paths: Sequence[str | Path], pdq_thresholds: Mapping[str, int] | None = None,
                 video_hasher: VideoHasher | None = None):
        self.paths = tuple(Path(path) for path in paths)
        self.video_hasher = video_hasher or VideoHasher()
        self.pdq_thresholds = dict(pdq_thresholds or {})
        names = [path.stem for path in self.paths]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise BankError(f"two banks are named {twice[0]!r} (a bank is named by its file's stem): rename one")
        unknown = sorted(set(self.pdq_thresholds) - set(names))
        if unknown:
            raise BankError(f"a PDQ threshold names the bank {unknown[0]!r}, which is not given "
                            f"(banks: {', '.join(names) or 'none'})")
        self._lock = threading.Lock()     # one reload at a time; readers never wait
        self.reloads = 0
        self.current = self._read()

    def _read(self) -> BankSet:
        banks = [Bank(read_bank(path), self.pdq_thresholds.get(path.stem, DEFAULT_PDQ_THRESHOLD))
                 for path in self.paths]
        with_vpdq = [bank.name for bank in banks if bank.vpdq_entries]
        if with_vpdq and not vpdq_available():
            raise BankError(f"the bank {with_vpdq[0]!r} holds vpdq hashes, and matching videos by them needs the vpdq "
                            f"package: {VPDQ_INSTALL}")
        if with_vpdq:
            self.video_hasher.warm()
        return BankSet(banks, self.video_hasher.features)

    def close(self) -> None:
        """Ends the video hasher's workers (a server's shutdown)."""
        self.video_hasher.close()

    def reload(self) -> BankSet:
        with self._lock:
            banks = self._read()          # BankError: the set in force stays
            self.current = banks
            self.reloads += 1
            return banks

    def described(self) -> list[JSONObject]:
        return [{"name": bank.name, "version": bank.version, "path": str(bank.file.path), "entries": len(bank),
                 "vpdq_entries": bank.vpdq_entries, "pdq_threshold": bank.pdq_threshold}
                for bank in self.current.banks]
