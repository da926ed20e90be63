"""Settings given as lists: a comma list of strings or of NAME=VALUE pairs (`OMNI_ADAPTERS=a=/srv/a,b=/srv/b`,
`--shadow LIVE=CANDIDATE`), and the checks of the adapters' settings made at start.

Pure functions over values `api/http/settings.py` has read; knows nothing of the environment, FastAPI or the model
(what is inside an adapter folder is checked when the model loads it).
"""
from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

from omni.banks.entries import MAX_PDQ_THRESHOLD
from omni.contract.config import EngineConfig


class SettingsError(ValueError):
    """A setting has a value of the wrong type or out of range; the message names the variable or flag (defined here
    so that these helpers raise it; `api.http.settings` exports it)."""


def coerce_list(text: str, hint: Any, source: str) -> tuple[Any, ...]:
    """A comma list: of strings, or of NAME=VALUE pairs (`tuple[tuple[str, str], ...]`)."""
    parts = tuple(part.strip() for part in text.split(",") if part.strip())
    return tuple(pair(part, source) for part in parts) if of_pairs(hint) else parts


def of_pairs(hint: Any) -> bool:
    """`tuple[tuple[str, str], ...]`: a list of NAME=VALUE pairs."""
    return any(typing.get_origin(arg) is tuple for arg in typing.get_args(hint))


def pair(text: str, source: str) -> tuple[str, str]:
    """"NAME=VALUE" -> (NAME, VALUE); SettingsError naming the flag or variable otherwise."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip() or not value.strip():
        raise SettingsError(f"{source}: expected NAME=VALUE, got {text!r}")
    return name.strip(), value.strip()


def check_adapters(engine: EngineConfig) -> None:
    """The adapters' folders are there (a typo is a clear error at start); a name given twice is refused. What is in
    a folder (its files, its base) is checked when the model loads it."""
    if engine.adapters_dir is not None and not Path(engine.adapters_dir).is_dir():
        raise SettingsError(f"adapters_dir (--adapters): {engine.adapters_dir!r} is not a directory")
    seen: set[str] = set()
    for name, path in engine.adapters:
        if name in seen:
            raise SettingsError(f"adapters (--adapter): the name {name!r} is given twice")
        seen.add(name)
        if not Path(path).is_dir():
            raise SettingsError(f"adapters (--adapter {name}=PATH): {path!r} is not a directory")


def bank_pdq_thresholds(entries: tuple[str, ...]) -> dict[str, int]:
    """`BANK=BITS` entries -> {bank: bits}; SettingsError naming the entry when it is not that (the banks themselves
    are read when the app is built: a threshold for a bank not given is refused there)."""
    out: dict[str, int] = {}
    for entry in entries:
        name, sep, bits = entry.partition("=")
        if not sep or not name.strip() or not bits.strip().isdigit() or not 0 <= int(bits) <= MAX_PDQ_THRESHOLD:
            raise SettingsError(f"bank_pdq_threshold {entry!r}: give BANK=BITS, BITS 0..{MAX_PDQ_THRESHOLD} "
                                f"(BANK: the bank file's stem)")
        out[name.strip()] = int(bits)
    return out
