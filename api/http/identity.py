"""Who is calling: the caller's name and role, as the API key (or, without keys, the X-Omni-Reviewer header) says.

Roles are ordered caller < reviewer < admin. `require_role` (api.http.dependencies) checks them and stores the caller on
`request.state.caller`; routes read it with `caller_of`. The keys file's line format (`KEY [NAME [ROLE]]`) is parsed
here (`parse_key_entry`); api/http/settings.py turns its ValueError into a SettingsError naming the file and line.
Knows nothing of the engine, the model, review files or the environment.
"""
from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, cast

if TYPE_CHECKING:
    from starlette.requests import Request

ROLES = ("caller", "reviewer", "admin")   # ordered: each role may do what the ones before it may
Role = Literal["caller", "reviewer", "admin"]
NAME_MAX_CHARS = 64
REVIEWER_HEADER = "X-Omni-Reviewer"


@dataclass(frozen=True)
class Caller:
    """The one calling: a name recorded with every label and comment, its role, and where the name came from."""

    name: str
    role: Role
    named_by: Literal["key", "header", "none"] = "none"

    def may(self, role: str) -> bool:
        """True when this caller's role is `role` or above it."""
        return ROLES.index(self.role) >= ROLES.index(role)


ANONYMOUS = Caller("anonymous", "admin", "none")


def caller_of(request: Request) -> Caller:
    """The caller `require_role` stored for this request (auth off and no name given: anonymous, admin)."""
    caller = getattr(request.state, "caller", None)
    return caller if isinstance(caller, Caller) else ANONYMOUS


# ---------------------------------------------------------------------- names
def name_problem(name: str, *, spaces: bool) -> str | None:
    """Why `name` cannot name a reviewer (None: it can): 1..64 printable characters; `spaces` False also refuses
    whitespace (a keys-file name, where whitespace separates the fields)."""
    if not 1 <= len(name) <= NAME_MAX_CHARS:
        return f"must be 1..{NAME_MAX_CHARS} characters, got {len(name)}"
    if not name.isprintable():
        return "must not contain control characters"
    if not spaces and any(ch.isspace() for ch in name):
        return "must not contain whitespace"
    if spaces and name != name.strip():
        return "must not start or end with whitespace"
    return None


def key_name(key: str) -> str:
    """The name of a key given without one: `key-` and the first 8 hex digits of its sha256 (never the key)."""
    return "key-" + hashlib.sha256(key.encode()).hexdigest()[:8]


# ---------------------------------------------------------------------- keys
def parse_key_entry(entry: str) -> tuple[str, str, Role]:
    """(key, name, role) of one keys-file line `KEY [NAME [ROLE]]`: a bare KEY is an admin (it could do everything
    before roles existed) named by `key_name`; `KEY NAME` is a reviewer. ValueError says what is wrong."""
    fields = entry.split()
    if not fields:
        raise ValueError("empty key")
    if len(fields) > 3:
        raise ValueError(f"expected KEY [NAME [ROLE]], got {len(fields)} fields")
    key = fields[0]
    if len(fields) == 1:
        return key, key_name(key), "admin"
    name = fields[1]
    problem = name_problem(name, spaces=False)
    if problem is not None:
        raise ValueError(f"name {name[:NAME_MAX_CHARS]!r} {problem}")
    role = fields[2] if len(fields) == 3 else "reviewer"
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r} (roles: {', '.join(ROLES)})")
    return key, name, cast(Role, role)


@dataclass(frozen=True)
class KeyRing:
    """The configured keys with their callers; empty = auth off."""

    entries: tuple[tuple[bytes, Caller], ...] = ()

    @classmethod
    def of(cls, api_keys: tuple[str, ...]) -> KeyRing:
        """From Settings.api_keys (each a keys-file line; settings checked them at start)."""
        out = []
        for entry in api_keys:
            key, name, role = parse_key_entry(entry)
            out.append((key.encode(), Caller(name, role, "key")))
        return cls(tuple(out))

    def __bool__(self) -> bool:
        return bool(self.entries)

    def caller(self, given: str) -> Caller | None:
        """The caller of key `given`, or None; every key is compared in constant time."""
        found = None
        raw = given.encode()
        for key, caller in self.entries:
            if hmac.compare_digest(raw, key) and found is None:
                found = caller
        return found
