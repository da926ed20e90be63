"""Admin routes: the policy in force (`GET /v1/admin/policy`) and its reload without a restart
(`POST /v1/admin/policy/reload`, the same as sending the process SIGHUP); the hash banks in force
(`GET /v1/admin/banks`) and their reload (`POST /v1/admin/banks/reload`, SIGHUP too). Admin role only
(api/http/identity.py). A policy file that no longer reads is a 422 naming the key and line, a bank file one naming
the file, line and field; what was in force stays.
Knows nothing of the model, the engine's internals or the environment.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import JSONResponse

from api.http import schemas
from api.http.dependencies import require_role, service
from omni.contract.policy import Policy

if TYPE_CHECKING:
    from omni.banks.shelf import BankShelf

NO_POLICY = "this server runs without a policy (start it with --policy FILE)"
router = APIRouter(prefix="/v1/admin", tags=["admin"], dependencies=[Depends(require_role("admin"))])


def describe(policy: Policy, reloads: int) -> dict:
    return {"version": policy.version, "sha256": policy.sha256, "source": policy.source, "reloads": reloads,
            "questions": {qid: {"type": rule.type, "auto_at": rule.auto_at, "act_on": list(rule.act_on),
                                "auto_at_for": rule.auto_at_for, "auto_at_with": rule.auto_at_with}
                          for qid, rule in policy.questions.items()},
            "default": ({"auto_at": policy.default.auto_at, "auto_at_with": policy.default.auto_at_with}
                        if policy.default is not None else None)}


@router.get("/policy", summary="The policy in force: version, sha256 and its rules", response_model=None,
            responses={200: {"model": schemas.PolicyInForce}, **schemas.ADMIN_RESPONSES})
async def policy_in_force(request: Request) -> JSONResponse:
    svc = service(request)
    if svc.policy is None:
        raise HTTPException(404, NO_POLICY)
    return JSONResponse(describe(svc.policy.current, svc.policy.reloads))


@router.post("/policy/reload", summary="Read the policy file again, atomically (as SIGHUP does)",
             response_model=None, responses={200: {"model": schemas.PolicyInForce}, **schemas.ADMIN_RESPONSES})
async def reload_policy(request: Request) -> JSONResponse:
    svc = service(request)
    policy = svc.reload_policy()
    if policy is None or svc.policy is None:
        raise HTTPException(404, NO_POLICY)
    return JSONResponse(describe(policy, svc.policy.reloads))


NO_BANKS = "this server runs without hash banks (start it with --bank FILE)"


@router.get("/banks", summary="The hash banks in force: name, version, entries and PDQ threshold of each",
            response_model=None, responses=schemas.ADMIN_RESPONSES)
async def banks_in_force(request: Request) -> JSONResponse:
    banks = _banks(request)
    return JSONResponse({"banks": banks.described(), "reloads": banks.reloads})


@router.post("/banks/reload", summary="Read the bank files again, all or nothing (as SIGHUP does)",
             response_model=None, responses=schemas.ADMIN_RESPONSES)
async def reload_banks(request: Request) -> JSONResponse:
    banks = _banks(request)
    from anyio import to_thread

    described = await to_thread.run_sync(service(request).reload_banks)   # a million entries: seconds to index
    return JSONResponse({"banks": described, "reloads": banks.reloads})


def _banks(request: Request) -> BankShelf:
    banks = service(request).banks
    if banks is None:
        raise HTTPException(404, NO_BANKS)
    return banks
