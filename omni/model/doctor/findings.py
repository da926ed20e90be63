"""What one check of `omni doctor` found: a status (ok / info / warn / fail), a name, one line in plain words, and the
figures behind it for `--json`; and what a list of them means for the exit code.

`fail` is something that stops the model from loading or answering (a missing file, a tensor of the wrong shape,
not enough memory); `warn` works but deserves a look (a transformers release other than the pinned one); `info` is
what is there (optional tools, devices). Knows nothing of how the findings are printed, argv or the checks themselves.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

STATUSES = ("ok", "info", "warn", "fail")
NAMES_SHOWN = 3            # a finding's line names at most this many keys; `data` holds them all


@dataclass(frozen=True)
class Finding:
    check: str                                   # short name: "torch", "decoders", "backbone tensors"
    status: str                                  # one of STATUSES
    detail: str                                  # one line, plain words
    data: Mapping[str, Any] = field(default_factory=dict)   # the figures behind it (JSON-ready)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, not {self.status!r}")

    def to_json(self) -> dict[str, Any]:
        return {"check": self.check, "status": self.status, "detail": self.detail, **({"data": dict(self.data)}
                                                                                     if self.data else {})}


def failed(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if f.status == "fail"]


def exit_code(findings: Iterable[Finding]) -> int:
    """0 when nothing failed (warnings included), 1 otherwise."""
    return 1 if failed(findings) else 0


def some_names(names: Sequence[str], limit: int = NAMES_SHOWN) -> str:
    """'a, b, c and 4 more': a line stays a line however many keys are wrong."""
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def gib(n_bytes: float) -> str:
    """Bytes in the unit a reader takes in at a glance (GiB, MiB or KiB, with one decimal)."""
    for unit, size in (("GiB", 1024 ** 3), ("MiB", 1024 ** 2), ("KiB", 1024)):
        if n_bytes >= size:
            return f"{n_bytes / size:.1f} {unit}"
    return f"{int(n_bytes)} B"
