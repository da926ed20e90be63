"""A backlog backend that sends each line to a running `omni serve` (`omni batch --url`), with httpx.

A line is read as a backlog line (`omni.contract.request_line.read_request_line`: JSON, `labels` dropped, media paths read
relative to the input file) and posted to `POST /v1/systemone`: as JSON when it has no media files, else as
multipart/form-data, a `request` part holding the JSON plus one part per file, named by its slot (`images`, `audio`,
`videos`) with the path as its filename; no base64. The server answers every rule of the request, so a record holds
exactly its status and body; the line's request id goes in `x-request-id`, so the server's log names it. 429 and 503
are retried after their `retry-after-ms` / `Retry-After` (bounded); a server that cannot be reached, or that refuses
the key or the route (401, 403, 404, 405), stops the run (`BackendUnavailable`) instead of failing every line.
Knows nothing of the engine or the model; reads no environment (the key comes from a flag).
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from omni.contract.request_line import RequestLine, read_request_line
from omni.serve.backlog import BackendUnavailable, LineFailed

RETRY_STATUSES = (429, 503)
FATAL_STATUSES = {401: "the server refused the API key (--api-key)", 403: "the server refused the API key",
                  404: "no System One route at this URL", 405: "no System One route at this URL"}
ROUTE = "/v1/systemone"


class RemoteBackend:
    """Posts backlog lines to `url`; `answer(text, request_id) -> response body`, `LineFailed(status, body)`."""

    def __init__(self, url: str, root: str | Path, api_key: str | None = None, concurrency: int = 16,
                 timeout_s: float = 600.0, retries: int = 5, max_wait_s: float = 60.0,
                 transport: httpx.BaseTransport | None = None, sleep: Callable[[float], None] = time.sleep):
        self.url, self.root = url.rstrip("/"), Path(root)
        self.retries, self.max_wait_s, self.sleep = retries, max_wait_s, sleep
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        self.client = httpx.Client(base_url=self.url, headers=headers, timeout=timeout_s, limits=limits,
                                   transport=transport)

    def close(self) -> None:
        self.client.close()

    def answer(self, text: bytes, request_id: str) -> dict:
        line = read_request_line(text, self.root)      # not JSON, a missing file: the caller's describe says so
        for attempt in range(self.retries + 1):
            response = self._post(line, request_id, attempt)
            if response.status_code == 200:
                return response.json()
            if response.status_code in FATAL_STATUSES:
                raise BackendUnavailable(f"{self.url}{ROUTE}: {response.status_code}, "
                                         f"{FATAL_STATUSES[response.status_code]}")
            if response.status_code not in RETRY_STATUSES or attempt == self.retries:
                raise LineFailed(response.status_code, _body(response))
            self.sleep(retry_after_s(response.headers, self.max_wait_s))
        raise AssertionError("unreachable")

    def _post(self, line: RequestLine, request_id: str, attempt: int) -> httpx.Response:
        """One POST; a transport failure is retried like a 503, then stops the run."""
        for tries in range(self.retries + 1):
            try:
                content, headers = encode_line(line)
                return self.client.post(ROUTE, headers={"x-request-id": request_id, **headers}, **content)
            except httpx.TransportError as exc:
                if tries == self.retries:
                    raise BackendUnavailable(f"{self.url}: {type(exc).__name__}: {exc}") from exc
                self.sleep(min(self.max_wait_s, 0.5 * 2 ** tries))
        raise AssertionError("unreachable")


def encode_line(line: RequestLine) -> tuple[dict[str, Any], dict[str, str]]:
    """(httpx body arguments, headers) for the line: a JSON body, or multipart with a `request` part and the files."""
    # ASCII escapes: any string the line held travels unchanged; x_audit: the record carries the audit record
    body = json.dumps({**line.body, "x_audit": True}).encode()
    if not line.parts:
        return {"content": body}, {"Content-Type": "application/json"}
    files: list[tuple[str, tuple[str | None, bytes, str]]] = [("request", (None, body, "application/json"))]
    files += [(part.name, (name, part.data, "application/octet-stream")) for part, name in zip(line.parts, line.files, strict=True)]
    return {"files": files}, {}


def retry_after_s(headers: httpx.Headers, max_wait_s: float) -> float:
    """How long the server asked us to wait: `retry-after-ms`, else `Retry-After` seconds, else 1 s; capped."""
    for name, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
        try:
            return min(max_wait_s, max(0.0, float(headers[name]) * scale))
        except (KeyError, ValueError):
            continue                      # absent, or an HTTP date: fall through
    return min(max_wait_s, 1.0)


def _body(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:                    # not JSON (a proxy's page): keep what it said
        return {"text": response.text[:2000]}
