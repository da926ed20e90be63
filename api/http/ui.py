"""The review workbench's files at /ui: one page (Ask, Review, Report), its scripts and its style sheets.

Everything is served from this package (no external URL: it works offline) and carries no data, so the files are
open even when API keys are configured; the page asks for a key once and sends it with every API call, exactly like
any other client. Only the files listed here are served: a path from the caller never reaches the filesystem.
Knows nothing of the engine, the model or the review store.
"""
from __future__ import annotations

from importlib import resources

from fastapi import APIRouter
from fastapi.responses import RedirectResponse, Response
from starlette.exceptions import HTTPException

from omni.contract.errors import quoted

router = APIRouter(include_in_schema=False)
FILES = {"index.html": "text/html; charset=utf-8", "app.js": "text/javascript; charset=utf-8",
         "dom.js": "text/javascript; charset=utf-8", "team.js": "text/javascript; charset=utf-8",
         "evidence.js": "text/javascript; charset=utf-8", "appeals.js": "text/javascript; charset=utf-8",
         "app.css": "text/css; charset=utf-8",
         "team.css": "text/css; charset=utf-8", "evidence.css": "text/css; charset=utf-8", "icon.svg": "image/svg+xml"}
HEADERS = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff",
           # the page's own files only; media arrive as blob: URLs made from API answers
           "Content-Security-Policy": "default-src 'self'; img-src 'self' blob: data:; media-src 'self' blob:; "
                                      "style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'"}


def _file(name: str) -> Response:
    if name not in FILES:
        raise HTTPException(404, f"no workbench file {quoted(name)}")
    data = resources.files("api.http").joinpath("static").joinpath(name).read_bytes()
    return Response(data, media_type=FILES[name], headers=HEADERS)


@router.get("/ui")
async def page() -> Response:
    return _file("index.html")


@router.get("/ui/")
async def page_slash() -> RedirectResponse:
    return RedirectResponse("/ui")


@router.get("/ui/{name}")
async def asset(name: str) -> Response:
    return _file(name)
