"""The adapters a server answers with, at the HTTP edge: what /v1/models lists of them, the admin routes that load,
reload and unload them and pair a shadow candidate with a live model, and the `--adapters DIR` rescan (SIGHUP).

    GET    /v1/admin/adapters                  every served adapter's card, the registry's counters, the shadow pairs
    POST   /v1/admin/adapters {name, path}     serve the adapter folder `path` (a path ON THE SERVER) as `name`
    POST   /v1/admin/adapters/{name}/reload    load it again from its folder (requests in flight keep the old one)
    DELETE /v1/admin/adapters/{name}           stop serving it (409 while requests hold it or a shadow pair names it)
    PUT    /v1/admin/shadows/{live} {candidate}, DELETE /v1/admin/shadows/{live}

Admin role only. A name that is not served is 404 on these routes; a name already served is 409; a bad folder, a
wrong base or a bad name is the registry's AdapterError (400, api/http/errors.py). Calls that load or free weights
run in a worker thread (they wait for the model lock): the event loop never blocks on them.
The registry is the engine's (`ServingEngine.adapters`): None when the model cannot load adapters or the engine is remote.
Knows nothing of the model's internals, the environment or argv.
"""
from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import JSONResponse

from api.http import schemas
from api.http.dependencies import ServiceState, require_role, service
from omni.contract.config import EngineConfig
from omni.contract.errors import AdapterError, NotReady
from omni.serve.surface import ServingEngine

if TYPE_CHECKING:
    from omni.serve.adapters import AdapterRegistry

log = logging.getLogger("omni.api")
NO_ADAPTERS = "this server serves no adapters (its model cannot load them, or it runs on Ray)"
router = APIRouter(prefix="/v1/admin", tags=["admin"], dependencies=[Depends(require_role("admin"))])


def adapter_names(engine: ServingEngine, config: EngineConfig) -> tuple[str, ...]:
    """The adapters a request's `model` may name: the engine's model names (in-process or on Ray replicas) less the
    base's served name and aliases (`config`)."""
    base = {config.served_name, *config.model_aliases}
    return tuple(n for n in engine.model_names() if n not in base) if engine.loaded else ()


def model_cards(engine: ServingEngine, config: EngineConfig, base: dict[str, Any]) -> list[dict[str, Any]]:
    """/v1/models' entries of the adapters served beside `base` (the base's card): each its name, the base's name,
    mode, `release_date` (the day it was created), whether it is resident, and the base's context and limits (on
    Ray, where the gateway holds no registry, by name only)."""
    registry = engine.adapters
    if registry is None:        # on Ray: the replicas' adapters, by name (each loaded where Ray routes it)
        return [{"name": name, "base": base["name"], "mode": None, "resident": False, "release_date": "",
                 "description": f"adapter of {base['name']}", "context": base["context"], "aliases": [],
                 "tiny_default": base["tiny_default"], "limits": base["limits"]}
                for name in adapter_names(engine, config)]
    cards = []
    for card in registry.cards():
        mode = card.get("mode")
        error = card.get("error")
        cards.append({"name": card["name"], "base": base["name"], "mode": mode,
                      "resident": bool(card.get("resident")), "release_date": str(card.get("created") or "")[:10],
                      "description": f"adapter of {base['name']} ({mode})" if error is None else
                      f"adapter of {base['name']}; its folder does not read: {error}",
                      "context": base["context"], "aliases": [], "tiny_default": base["tiny_default"],
                      "limits": base["limits"]})
    return cards


def rescan(svc: ServiceState) -> dict[str, list[str]] | None:
    """Make the served adapters match `--adapters DIR` again (blocking: it may load weights) and log what changed;
    None when the server has no adapters folder."""
    registry = svc.engine.adapters
    if registry is None or registry.scan_dir is None:
        return None
    report = registry.rescan()
    log.info("adapters rescanned in %s: added %s, removed %s, reloaded %s, errors %s", registry.scan_dir,
             report["added"] or "none", report["removed"] or "none", report["reloaded"] or "none",
             report["errors"] or "none")
    return report


def rescan_in_background(svc: ServiceState) -> threading.Thread | None:
    """`rescan` in a thread of its own (a signal handler must not wait for the model lock); None: nothing to scan."""
    registry = svc.engine.adapters
    if registry is None or registry.scan_dir is None:
        return None
    thread = threading.Thread(target=_rescan_logged, args=(svc,), name="adapters-rescan", daemon=True)
    thread.start()
    return thread


def _rescan_logged(svc: ServiceState) -> None:
    try:
        rescan(svc)
    except Exception:   # a vanished folder, a full disk: the adapters served stay as they were
        log.exception("adapters: the rescan failed; the adapters served stay as they were")


# ------------------------------------------------------------------------------------------------------ admin routes
def _registry(request: Request) -> AdapterRegistry:
    svc = service(request)
    if not svc.engine.loaded:
        raise NotReady("the model is still loading")
    registry = svc.engine.adapters
    if registry is None:
        raise HTTPException(404, NO_ADAPTERS)
    return registry


def _served(registry: AdapterRegistry, name: str) -> None:
    if name not in registry:
        raise HTTPException(404, f"adapter {name!r} is not served (served: {', '.join(registry.names()) or 'none'})")


def _card(registry: AdapterRegistry, name: str) -> dict[str, Any]:
    return next((card for card in registry.cards() if card["name"] == name), {"name": name})


def describe(registry: AdapterRegistry, shadow_stats: dict[str, int]) -> dict[str, Any]:
    return {"adapters": registry.cards(), "stats": registry.stats(), "shadows": registry.shadows(),
            "shadow_stats": shadow_stats}


@router.get("/adapters", summary="The adapters served: cards, counters, shadow pairs", response_model=None,
            responses={200: {"model": schemas.AdaptersServed}, **schemas.ADAPTER_ADMIN_RESPONSES})
async def adapters_served(request: Request) -> JSONResponse:
    registry = _registry(request)
    return JSONResponse(describe(registry, service(request).engine.shadow_stats()))


@router.post("/adapters", summary="Serve an adapter folder (a path on the server) under a name", status_code=201,
             response_model=None, responses={201: {"model": schemas.AdapterCard}, **schemas.ADAPTER_ADMIN_RESPONSES})
async def load_adapter(request: Request, body: schemas.AdapterLoad) -> JSONResponse:
    registry = _registry(request)
    if body.name in registry:
        raise HTTPException(409, f"adapter {body.name!r} is already served; reload or unload it first")
    folder = Path(body.path)
    if not folder.is_dir():
        raise AdapterError(body.name, f"{body.path!r} is not a directory on the server")
    await anyio.to_thread.run_sync(lambda: registry.register(body.name, folder.resolve()))
    log.info("adapter %r loaded from %s", body.name, folder)
    return JSONResponse(_card(registry, body.name), status_code=201)


@router.post("/adapters/{name}/reload", summary="Load an adapter again from its folder", response_model=None,
             responses={200: {"model": schemas.AdapterCard}, **schemas.ADAPTER_ADMIN_RESPONSES})
async def reload_adapter(request: Request, name: str) -> JSONResponse:
    registry = _registry(request)
    _served(registry, name)
    await anyio.to_thread.run_sync(lambda: registry.reload(name))
    log.info("adapter %r reloaded", name)
    return JSONResponse(_card(registry, name))


@router.delete("/adapters/{name}", summary="Stop serving an adapter (409 while requests hold it)", response_model=None,
               responses={200: {"model": schemas.AdapterUnloaded}, **schemas.ADAPTER_ADMIN_RESPONSES})
async def unload_adapter(request: Request, name: str) -> JSONResponse:
    registry = _registry(request)
    _served(registry, name)
    await anyio.to_thread.run_sync(lambda: registry.unload(name))
    log.info("adapter %r unloaded", name)
    return JSONResponse({"name": name, "unloaded": True})


@router.put("/shadows/{live}", summary="Score requests to a live model with a candidate adapter too",
            response_model=None, responses={200: {"model": schemas.ShadowPairs}, **schemas.ADAPTER_ADMIN_RESPONSES})
async def set_shadow(request: Request, live: str, body: schemas.ShadowCandidate) -> JSONResponse:
    registry = _registry(request)
    if not registry.is_base(live):
        _served(registry, live)
    registry.set_shadow(live, body.candidate)           # AdapterError (400) when the candidate is not served
    log.info("shadow pair %s=%s set", live, body.candidate)
    return JSONResponse({"shadows": registry.shadows()})


@router.delete("/shadows/{live}", summary="Stop scoring a live model's requests with its candidate",
               response_model=None, responses={200: {"model": schemas.ShadowPairs}, **schemas.ADAPTER_ADMIN_RESPONSES})
async def clear_shadow(request: Request, live: str) -> JSONResponse:
    registry = _registry(request)
    if registry.shadow_of(live) is None:
        raise HTTPException(404, f"{live!r} has no shadow candidate (pairs: {registry.shadows() or 'none'})")
    registry.clear_shadow(live)
    log.info("shadow pair of %s removed", live)
    return JSONResponse({"shadows": registry.shadows()})
