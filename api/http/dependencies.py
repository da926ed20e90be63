"""What every router depends on: the service's state (`ServiceState`, on `app.state.service`; `service(request)`
reads it) and `require_role`, the one check of who calls (API key -> name and role, see api/http/identity.py) that
every route with data depends on (`require_api_key`, `require_admin`, and the /metrics and /docs checks).

Knows nothing of the routes themselves, the engine's internals or the environment.
"""
from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote

import anyio
from fastapi import Depends, Request
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from api.http.errors import Forbidden, Unauthorized
from api.http.identity import (
    ANONYMOUS,
    NAME_MAX_CHARS,
    REVIEWER_HEADER,
    ROLES,
    Caller,
    KeyRing,
    name_problem,
)
from api.http.metrics import Metrics
from api.http.settings import Settings
from omni.contract.policy import Policy, PolicySource
from omni.serve.surface import ServingEngine

if TYPE_CHECKING:
    from api.http.guidelines import Guidelines
    from api.http.webhooks import WebhookSender
    from omni.banks.shelf import BankShelf
    from omni.review.appeals import AppealBook
    from omni.review.queues import ReviewQueues
    from omni.serve.decision_log import DecisionLog

log = logging.getLogger("omni.api")


@dataclass
class ServiceState:
    """Everything the routes need, held on `app.state.service` (no module-level state)."""

    settings: Settings
    engine: ServingEngine
    metrics: Metrics
    parse_limiter: anyio.CapacityLimiter | None = None
    drain_started: float | None = None   # time.monotonic() of SIGTERM / shutdown
    load_error: str | None = None
    review: ReviewQueues | None = None   # the review queues with --review-dir, else None
    decision_log: DecisionLog | None = None   # with --decision-log: every decision appended (off the response path)
    reports: dict = dataclasses.field(default_factory=dict)   # report id -> eval report directory
    policy: PolicySource | None = None   # with --policy: answers -> act / review / pass (swapped whole on reload)
    webhooks: WebhookSender | None = None   # with --webhook: decisions whose outcome is named are POSTed, signed
    guidelines: Guidelines | None = None     # with --review-guidelines: the queues' guidelines, rendered at start
    banks: BankShelf | None = None           # with --bank: media matched before the model (swapped whole on reload)
    appeals: AppealBook | None = None        # with --decision-log and --review-dir: appeals of logged decisions
    _keyring: tuple[tuple[str, ...], KeyRing] | None = dataclasses.field(default=None, repr=False)

    def keyring(self) -> KeyRing:
        """The API keys with their callers (parsed once per settings.api_keys)."""
        if self._keyring is None or self._keyring[0] is not self.settings.api_keys:
            self._keyring = (self.settings.api_keys, KeyRing.of(self.settings.api_keys))
        return self._keyring[1]

    def current_policy(self) -> Policy | None:
        """The policy a decision is taken under: read once per decision, so it sees one policy whole."""
        return self.policy.current if self.policy is not None else None

    def policy_for(self, model: str) -> Policy | None:
        """The policy a decision answered by `model` is taken under: the one bound to that adapter (its folder's
        policy.toml), else the server's when it governs that model (unbound, or bound to it), else none."""
        registry = self.engine.adapters
        bound = registry.policy_of(model) if registry is not None else None
        if bound is not None:
            return bound
        policy = self.current_policy()
        engine = self.settings.engine
        return policy if policy is not None and policy.governs(model, (engine.served_name,
                                                                      *engine.model_aliases)) else None

    def reload_policy(self) -> Policy | None:
        """Read the policy file again (SIGHUP, the admin route); PolicyError keeps the current one. None: no policy."""
        if self.policy is None:
            return None
        try:
            policy = self.policy.reload()
        except Exception:
            self.metrics.set_policy(None, reloaded=False)
            raise
        self.metrics.set_policy(policy, reloaded=True)
        log.info("policy reloaded: version %r, sha256 %s", policy.version, policy.sha256)
        return policy

    def reload_banks(self) -> list[dict] | None:
        """Read the bank files again (SIGHUP, the admin route), all or nothing; BankError keeps the banks in force.
        None: no banks."""
        if self.banks is None:
            return None
        try:
            self.banks.reload()
        except Exception:
            self.metrics.set_banks([], reloaded=False)
            raise
        described = self.banks.described()
        self.metrics.set_banks(described, reloaded=True)
        log.info("banks reloaded: %s", ", ".join(f"{b['name']} ({b['entries']} entries, {b['version'][:12]})"
                                                 for b in described))
        return described

    def begin_drain(self) -> None:
        if self.drain_started is None:
            self.drain_started = time.monotonic()


def service(request: Request) -> ServiceState:
    return request.app.state.service


_bearer = HTTPBearer(auto_error=False, description="required only when the server is started with API keys")


class RoleCheck:
    """The dependency `require_role(role)` returns: the caller must hold `role` (caller < reviewer < admin) and is
    stored on `request.state.caller` (read it with `api.http.identity.caller_of`)."""

    def __init__(self, role: str) -> None:
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r} (roles: {', '.join(ROLES)})")
        self.role = role

    async def __call__(self, request: Request,
                       credentials: HTTPAuthorizationCredentials | None = Depends(_bearer)) -> None:
        caller = identify(request, credentials)
        if not caller.may(self.role):
            needed = _route_role(request, self.role)   # a router's check runs first: name what the route needs
            raise Forbidden(f"this needs the {needed} role; the key of {caller.name!r} has the {caller.role} role")
        request.state.caller = caller


def require_role(role: str) -> RoleCheck:
    """A dependency: the caller must hold `role`. With keys: no key or a wrong one is 401, a key whose role is too low
    403 (naming both roles), and the name is the key's. Without keys (auth off): everyone is an admin, named by the
    X-Omni-Reviewer header (percent-encoded UTF-8; a bad one is 422) or "anonymous"."""
    return RoleCheck(role)


def _route_role(request: Request, role: str) -> str:
    """The highest role any role check of the matched route asks for (at least `role`)."""
    route = request.scope.get("route")
    checks = route.dependencies if isinstance(route, APIRoute) else []
    roles = [d.dependency.role for d in checks if isinstance(d.dependency, RoleCheck)]
    return max([role, *roles], key=ROLES.index)


def identify(request: Request, credentials: HTTPAuthorizationCredentials | None) -> Caller:
    """Who calls: the key's caller (401 without a known key), or with auth off the header's name (or anonymous)."""
    keyring = service(request).keyring()
    if keyring:
        if credentials is None or not credentials.credentials:
            raise Unauthorized("Must supply an API key!")
        caller = keyring.caller(credentials.credentials)
        if caller is None:
            raise Unauthorized("Cannot authenticate with the server.")
        return caller  # a name sent in the header is ignored: the key says who calls
    raw = request.headers.get(REVIEWER_HEADER)   # auth off: a present Authorization header is accepted as is
    if raw is None:
        return ANONYMOUS
    problem: str | None
    try:   # Starlette reads header bytes as latin-1: curl sends UTF-8 as is, a browser percent-encodes it
        name = unquote(raw.encode("latin-1").decode("utf-8"), errors="strict")
    except UnicodeError:
        name, problem = "", "must be UTF-8"
    else:
        problem = name_problem(name, spaces=True)
    if problem is not None:
        raise RequestValidationError([{"loc": ("header", REVIEWER_HEADER), "type": "value_error",
                                       "msg": f"{REVIEWER_HEADER} {problem} (1..{NAME_MAX_CHARS} printable "
                                              "characters, percent-encoded UTF-8)"}])
    return Caller(name, "admin", "header")


require_api_key = require_role("caller")
require_admin = require_role("admin")


async def require_key_for_metrics(request: Request,
                                  credentials: HTTPAuthorizationCredentials | None = Depends(_bearer)) -> None:
    """/metrics: admins only, unless the server was started with --public-metrics."""
    if not service(request).settings.public_metrics:
        await require_admin(request, credentials)


async def require_key_for_docs(request: Request,
                               credentials: HTTPAuthorizationCredentials | None = Depends(_bearer)) -> None:
    """/docs and /openapi.json: admins only, unless the server was started with --public-docs."""
    if not service(request).settings.public_docs:
        await require_admin(request, credentials)
