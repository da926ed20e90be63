"""Who answers a unit: an engine in this process (`EngineDecider`) or a running `omni serve` (`RemoteDecider`).

Both take a `Trigger` and the line's request template and return the System One response body (`answers`,
`x_outcome` under the line's policy or the server's), or raise `DecideFailed(status, body)` with the error as the
HTTP edge's one error table words it (`api.http.errors.error_payload`): a unit's error is published exactly as a
caller of `POST /v1/systemone` would have seen it. The unit's files go to the request's slots by extension
(`paths.slot_of`, in the order the trigger names them); a state the trigger carries replaces the template's.
Knows nothing of sources, sinks, the ledger or deadlines beyond passing one on.
"""
from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import httpx

from api.http.errors import error_payload
from api.line.paths import slot_of
from api.line.ports import Trigger
from omni.contract.config import EngineConfig
from omni.contract.errors import InvalidRequest
from omni.contract.outcomes import with_outcome
from omni.contract.policy import Policy
from omni.contract.request import parse_request
from omni.contract.types import DecisionRequest, Part
from omni.serve.surface import ServingEngine
from preprocess.errors import MediaTooLarge
from preprocess.item import MediaItem
from preprocess.media import MediaLimits

if TYPE_CHECKING:
    from omni.banks.gate import Consulted
    from omni.banks.shelf import BankShelf

ROUTE = "/v1/systemone"


class DecideFailed(Exception):
    """A unit's request failed: `status` and `body` as the HTTP edge would have answered it."""

    def __init__(self, status: int, body: Any):
        self.status, self.body = status, body
        super().__init__(f"status {status}")


class Decider(Protocol):
    name: str

    async def decide(self, trigger: Trigger, deadline_s: float) -> dict[str, Any]:
        """The response body for the unit; DecideFailed when the request is refused or fails."""
        ...

    async def close(self) -> None:
        ...


def unit_body(template: dict[str, Any], trigger: Trigger, model: str | None) -> dict[str, Any]:
    """The unit's System One body (without media): the template, the trigger's state, the unit id as its id."""
    body = dict(template)
    if trigger.state is not None:
        body["state"] = trigger.state
    body.setdefault("state", "")
    if model is not None:
        body["model"] = model
    body["id"] = trigger.unit_id
    return body


def slotted_files(files: Sequence[Path]) -> list[tuple[str, Path]]:
    """(slot, file) for each media file; InvalidRequest naming a file whose extension is no medium's."""
    slotted = []
    for i, path in enumerate(files):
        slot = slot_of(path)
        if slot is None:
            raise InvalidRequest.one(("files", i), f"{path.name}: not a photo, recording or video by its extension")
        slotted.append((slot, path))
    return slotted


def read_file(path: Path, i: int, slot: str, limits: MediaLimits) -> bytes:
    """A unit's file; InvalidRequest at `files[i]` when it went away or cannot be read, MediaTooLarge (413) when it is
    over its medium's byte limit — checked on its size, before a byte is read (a 50 GB file is never loaded)."""
    limit, name = {"images": (limits.max_image_bytes, "max_image_bytes"),
                   "audio": (limits.max_audio_bytes, "max_audio_bytes"),
                   "videos": (limits.max_video_bytes, "max_video_bytes")}[slot]
    try:
        size = path.stat().st_size
        if size > limit:
            item = MediaItem(slot, i, b"", origin=f"file {path.name}")
            raise MediaTooLarge(item, f"{size} bytes over {name}={limit}")
        return path.read_bytes()
    except OSError as exc:
        raise InvalidRequest.one(("files", i), f"{path.name}: cannot be read ({exc.strerror or exc})") from None


class EngineDecider:
    """A `ServingEngine` in this process, the line's policy applied to its answers; with `banks` (a `BankShelf`), the
    unit's media consulted first (`omni.banks.gate`, in a thread): a match that decides answers without the engine,
    any other rides along its answer."""

    name = "engine"

    def __init__(self, engine: ServingEngine, config: EngineConfig, template: dict[str, Any],
                 policy: Policy | None, model: str | None = None, banks: BankShelf | None = None):
        self.engine, self.config, self.template, self.policy, self.model = engine, config, template, policy, model
        self.banks = banks

    def _request(self, trigger: Trigger) -> DecisionRequest:
        parts = [Part(slot, read_file(path, i, slot, self.config.media), origin=f"file {path.name}")
                 for i, (slot, path) in enumerate(slotted_files(trigger.files))]
        return parse_request(unit_body(self.template, trigger, self.model), self.config, parts,
                             adapters=self.engine.model_names())

    async def decide(self, trigger: Trigger, deadline_s: float) -> dict[str, Any]:
        try:
            request = await asyncio.to_thread(self._request, trigger)
            started_s = time.monotonic()
            consulted = await asyncio.to_thread(self._consulted, request) if self.banks is not None else None
            decision = consulted.answer(request, self.config) if consulted is not None else None
            if decision is None:
                remaining_s = max(deadline_s - (time.monotonic() - started_s), 0.001)
                future = self.engine.submit(request, deadline_s=remaining_s)
                decision = await (asyncio.wrap_future(future) if not isinstance(future, asyncio.Future) else future)
                decision = consulted.joined(decision) if consulted is not None else decision
            return with_outcome(decision, request, self.policy).to_wire()
        except asyncio.CancelledError:
            raise
        except Exception as exc:    # every failure is the unit's, in the error table's words
            status, body, _ = error_payload(exc, trigger.unit_id)
            raise DecideFailed(status, body) from exc

    def _consulted(self, request: DecisionRequest) -> Consulted | None:
        from omni.banks.gate import consult

        return consult(self.banks, request, self.config.media)

    async def close(self) -> None:
        if self.banks is not None:
            await asyncio.to_thread(self.banks.close)


class RemoteDecider:
    """`POST /v1/systemone` on a running `omni serve`: multipart, a `request` part and one part per file."""

    name = "remote"

    def __init__(self, url: str, template: dict[str, Any], model: str | None = None, api_key: str | None = None,
                 timeout_s: float = 60.0, max_connections: int = 16, transport: httpx.AsyncBaseTransport | None = None):
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        self.client = httpx.AsyncClient(base_url=url.rstrip("/"), headers=headers, timeout=timeout_s, limits=limits,
                                        transport=transport, trust_env=False)
        self.template, self.model = template, model
        self.limits = MediaLimits()     # the server applies its own; these bound what the line reads for it

    async def decide(self, trigger: Trigger, deadline_s: float) -> dict[str, Any]:
        try:
            files_slotted = slotted_files(trigger.files)
            blobs = await asyncio.to_thread(lambda: [read_file(path, i, slot, self.limits)
                                                     for i, (slot, path) in enumerate(files_slotted)])
        except (InvalidRequest, MediaTooLarge) as exc:
            status, body, _ = error_payload(exc, trigger.unit_id)
            raise DecideFailed(status, body) from exc
        request = json.dumps(unit_body(self.template, trigger, self.model)).encode()
        files: list[tuple[str, tuple[str | None, bytes, str]]] = [("request", (None, request, "application/json"))]
        files += [(slot, (path.name, blob, "application/octet-stream"))
                  for (slot, path), blob in zip(files_slotted, blobs, strict=True)]
        headers = {"x-request-id": trigger.unit_id}     # the line keeps the deadline; a late answer is logged
        try:
            response = await self.client.post(ROUTE, files=files, headers=headers)
        except httpx.TransportError as exc:
            raise DecideFailed(503, {"detail": {"error_type": "unavailable",
                                                "message": f"{self.client.base_url}: {type(exc).__name__}: {exc}"}}) from exc
        try:
            body = response.json()
        except ValueError:
            body = {"text": response.text[:2000]}
        if response.status_code != 200:
            raise DecideFailed(response.status_code, body)
        return dict(body)

    async def close(self) -> None:
        await self.client.aclose()
