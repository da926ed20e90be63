"""Cloudflare's route for the hosted model, so code written for Workers AI runs against us by changing its base URL.

`POST /accounts/{account_id}/ai/run/@cf/cloudflare/{clef-omni|clef}` takes the same body as `/v1/systemone` (JSON or
multipart, every media form) through the same decision path (`routes.decide`: auth, limits, batching, metrics,
Server-Timing) and wraps the answer in Cloudflare's envelope `{"result": ..., "success": true, "errors": [],
"messages": []}`; errors come in its error envelope (`api/http/errors.py`, `envelope="cloudflare"`). The route names
the model: a body `model` that contradicts it is refused, a missing one is accepted (as measured live), and the
account id is not checked (auth is the Bearer key, as on every route). An adapter served beside the base is chosen
as Workers AI chooses a fine-tune, by the body's `lora` (its name; or a body `model` naming it); an unknown one is
the 400 naming the models served. Knows nothing of the engine or the model.
"""
from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse

from api.http import schemas
from api.http.adapters import adapter_names
from api.http.dependencies import require_api_key, service
from api.http.errors import NoRoute
from api.http.routes import decide, kept
from omni.contract.errors import InvalidRequest, quoted

MODELS = ("clef-omni", "clef")      # `clef` too: the same request shape; this server runs one Clef model


async def cloudflare_envelope(request: Request) -> None:
    """Runs first on the route: every error from here on is rendered in Cloudflare's envelope."""
    request.state.envelope = "cloudflare"


router = APIRouter()


@router.post("/accounts/{account_id}/ai/run/@cf/cloudflare/{model_name}", response_model=None, tags=["decisions"],
             dependencies=[Depends(cloudflare_envelope), Depends(require_api_key)],
             summary="Cloudflare Workers AI route: the same decision in Cloudflare's envelope",
             responses={200: {"model": schemas.CloudflareResponse},
                        **{code: {"model": schemas.CloudflareErrorBody} for code in (400, 401, 413, 415, 422, 429,
                                                                                     500, 503, 504)}},
             openapi_extra=schemas.DECISION_REQUEST_BODY)
async def run(request: Request, account_id: str, model_name: str) -> Response:
    if model_name not in MODELS:
        raise NoRoute(f"no route for @cf/cloudflare/{model_name}: this server runs {' and '.join(MODELS)}")
    svc = service(request)
    adapters = adapter_names(svc.engine, svc.settings.engine)
    decision, server_timing = await decide(request, adapt_body=lambda body: route_model(body, model_name, adapters))
    wire = decision.to_wire()
    return JSONResponse({"result": wire, "success": True, "errors": [], "messages": []},
                        headers={"Server-Timing": server_timing}, background=kept(request, decision, wire))


def route_model(body: Any, model_name: str, adapters: tuple[str, ...] = ()) -> Any:
    """The body with the route's model: a `model` that names another one is refused; it is then left out, since the
    route (not the served name or its aliases) says which model answers. An adapter is named by `lora` (Workers AI's
    field for a fine-tune) or by a `model` that is one of `adapters`: the body's `model` is then that adapter."""
    if not isinstance(body, dict):
        return body
    lora = body.get("lora")
    if lora is not None:
        if not isinstance(lora, str):
            raise InvalidRequest.one(("lora",), "lora must be a string: the name of an adapter served", "string_type")
        return {**{key: value for key, value in body.items() if key != "lora"}, "model": lora}
    if "model" not in body:
        return body
    model = body["model"]
    if isinstance(model, str) and model in adapters:
        return body
    if model is not None and (not isinstance(model, str) or model.strip() != model_name):
        raise InvalidRequest.one(("model",), f"model {quoted(model)} contradicts the route "
                                 f"@cf/cloudflare/{model_name}; send {model_name!r} or leave it out", "value_error")
    return {key: value for key, value in body.items() if key != "model"}
