"""Bank files opened for whatever answers requests here — `omni serve --bank`, `omni decide` / `omni batch --bank`,
an in-process `omni line`'s `[model] banks` — the same way everywhere.

`open_banks(paths, pdq_thresholds, vpdq_workers, vpdq_timeout_s)`: a `BankShelf` with every file read and indexed and
a `VideoHasher` for vPDQ, or `BankError` naming the file, line and field (also when the [banks] extra is missing: it
says how to install it). Logs one line per bank: entries, version, threshold, path.
Knows nothing of HTTP, argv, settings, the engine or the model.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from omni.banks.entries import BankError

if TYPE_CHECKING:
    from omni.banks.shelf import BankShelf

log = logging.getLogger("omni.banks")


def open_banks(paths: Sequence[str | Path], pdq_thresholds: Mapping[str, int] | None = None,
               vpdq_workers: int = 1, vpdq_timeout_s: float = 20.0) -> BankShelf:
    try:   # lazily: faiss and pdqhash (the [banks] extra) only when banks are given
        from omni.banks.shelf import BankShelf
        from omni.banks.video_hasher import VideoHasher
    except ImportError as exc:
        raise BankError(f"banks need the [banks] extra (pdqhash, faiss-cpu): pip install 'omni-decide[banks]' "
                        f"({exc})") from None
    shelf = BankShelf(paths, pdq_thresholds, VideoHasher(vpdq_workers, vpdq_timeout_s))
    for bank in shelf.described():
        log.info("bank %r: %d entries, version %s, PDQ threshold %d bits, from %s", bank["name"], bank["entries"],
                 bank["version"], bank["pdq_threshold"], bank["path"])
    return shelf
