"""Typed errors of the decision core. Each names what went wrong in the caller's terms (field path, limit).

Knows nothing of HTTP status codes: `api/http/errors.py` maps these classes to responses in one table.
"""
from __future__ import annotations

import reprlib
from dataclasses import dataclass

from preprocess.errors import (
    MediaError,  # noqa: F401  (re-exported: media faults are request faults too)
    Reduction,
    rebuild_error,
)

Loc = tuple[str | int, ...]  # a field path such as ("questions", "q1", "criteria") or ("images", 0)
QUOTE_MAX_CHARS = 60         # what an error message quotes of a caller's value, at most


def clipped(text: str, max_chars: int = QUOTE_MAX_CHARS) -> str:
    """A caller's text (a key, an id) cut to `max_chars`, "…" marking the cut: what an error may echo of it."""
    return text if len(text) <= max_chars else text[:max_chars - 1] + "…"


def quoted(value: object, max_chars: int = QUOTE_MAX_CHARS) -> str:
    """A caller's value as an error message quotes it: its repr, cut to `max_chars` ("…" marks the cut), so a 10 MB
    value never makes a 10 MB error. Only a prefix is ever rendered (a nested value to a few levels)."""
    if isinstance(value, (str, bytes)):
        return clipped(repr(value[:max_chars + 1]), max_chars)
    shorter = reprlib.Repr()
    shorter.maxlevel, shorter.maxstring, shorter.maxother = 3, max_chars, max_chars
    return clipped(shorter.repr(value), max_chars)


@dataclass(frozen=True)
class Issue:
    """One validation problem: where (`loc`, without the leading "body"), what, and a pydantic-style type tag."""

    loc: Loc
    msg: str
    type: str = "value_error"


class OmniError(Exception):
    """Base class of every error the core raises on purpose. Pickles whole (every subclass, whatever its
    constructor takes): a cluster replica sends its errors back to the HTTP edge."""

    def __reduce__(self) -> Reduction:
        return rebuild_error, (type(self), self.args, dict(self.__dict__))


class InvalidRequest(OmniError):
    """The request breaks a rule of the schema or a configured limit. Carries every issue found."""

    def __init__(self, issues: list[Issue] | tuple[Issue, ...], raw: str | None = None):
        self.issues = tuple(issues)
        self.raw = raw          # a library's own words, for the server log only
        super().__init__("; ".join(f"{'.'.join(map(str, i.loc))}: {i.msg}" for i in self.issues))

    @classmethod
    def one(cls, loc: Loc, msg: str, type: str = "value_error", raw: str | None = None) -> InvalidRequest:
        return cls([Issue(tuple(loc), msg, type)], raw)


class Issues:
    """Collects every problem of a body, so that all of them are reported together (`raise_if_any`)."""

    def __init__(self) -> None:
        self.issues: list[Issue] = []

    def add(self, loc: Loc, msg: str, type_: str = "value_error") -> None:
        self.issues.append(Issue(tuple(loc), msg, type_))

    def count(self, loc: Loc, n: int, minimum: int, maximum: int, container: str) -> None:
        """Pydantic-style too_short / too_long messages for a map ("Dictionary") or a list ("List")."""
        for bound, word, kind, broken in ((minimum, "least", "too_short", n < minimum),
                                          (maximum, "most", "too_long", n > maximum)):
            if broken:
                noun = "item" if bound == 1 else "items"
                self.add(loc, f"{container} should have at {word} {bound} {noun} after validation, not {n}", kind)

    def raise_if_any(self) -> None:
        if self.issues:
            raise InvalidRequest(self.issues)


class ContextTooLong(InvalidRequest):
    """The prompt does not fit the context: the schema and media alone, or the state with `truncate: false`."""

    def __init__(self, loc: Loc, msg: str, needed_tokens: int, max_tokens: int):
        self.needed_tokens = needed_tokens
        self.max_tokens = max_tokens
        super().__init__([Issue(tuple(loc), msg, "context_too_long")])


class UnknownModel(OmniError):
    """The request names a model this engine does not serve."""

    def __init__(self, requested: str, served: tuple[str, ...]):
        self.requested = requested
        self.served = served
        super().__init__(f"Unknown model: {quoted(requested)}; this server answers as {', '.join(served)}")


class ConfigError(OmniError, ValueError):
    """A configuration value out of range; the message names the field (EngineConfig checks itself)."""


class CheckpointError(OmniError):
    """A model directory is incomplete or does not match its config (missing/mismatched/unexpected keys, files)."""


class CheckpointConfigError(CheckpointError):
    """A checkpoint's config holds a value the model cannot run with: `field` is its path in `file`, the message
    gives the numbers that disagree."""

    def __init__(self, file: str, field: str, msg: str):
        self.file, self.field = file, field
        super().__init__(f"{file}: {field} {msg}")


class Overloaded(OmniError):
    """The admission queue is full; retry after `retry_after_s`."""

    def __init__(self, msg: str = "server is at capacity", retry_after_s: float = 1.0):
        self.retry_after_s = retry_after_s
        super().__init__(msg)


class NotReady(OmniError):
    """The model is not loaded (or the engine is stopping)."""


class DeadlineExceeded(OmniError):
    """The request outlived its deadline before an answer was computed."""


class Withdrawn(OmniError):
    """A request held at its gate before the forward pass was withdrawn (a hash bank answered it meanwhile): the
    engine drops it; nobody waits for this error."""


class InferenceFailed(OmniError):
    """The model failed on a batch for a reason that is not the caller's fault (a bug or a device fault)."""


class AdapterError(OmniError):
    """An adapter cannot be used: its folder, files, name or base is wrong, or it is not served. Names the adapter and
    the cause."""

    def __init__(self, adapter: str, cause: str):
        self.adapter = adapter
        self.cause = cause
        super().__init__(f"adapter {quoted(adapter)}: {cause}")


class AdapterBusy(AdapterError):
    """The adapter has requests in flight (it cannot be unloaded now)."""
