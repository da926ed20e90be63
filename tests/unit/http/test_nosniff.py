"""Every response of the app says `X-Content-Type-Options: nosniff` (once): answers, probes, metrics, the OpenAPI
document and page, the workbench's files and its redirect, every kind of error (401, 404, 405, 422, 500) and a
review item's media (the real app and engine, the FakeModel behind them)."""
from __future__ import annotations

import json

import pytest

from tests.unit.http.serving import body, served
from tests.unit.http.test_review_routes import ask

KEYS = ("k-admin",)
ADMIN = {"Authorization": "Bearer k-admin"}


def nosniff(response) -> bool:
    return response.headers.get_list("x-content-type-options") == ["nosniff"]


@pytest.mark.parametrize(("method", "path", "payload", "headers", "status"), [
    ("POST", "/v1/systemone", body(), ADMIN, 200),
    ("GET", "/v1/models", None, ADMIN, 200),
    ("GET", "/health", None, {}, 200),
    ("GET", "/ready", None, {}, 200),
    ("GET", "/metrics", None, ADMIN, 200),
    ("GET", "/openapi.json", None, ADMIN, 200),
    ("GET", "/docs", None, ADMIN, 200),
    ("GET", "/ui", None, {}, 200),
    ("GET", "/ui/", None, {}, 307),
    ("GET", "/ui/app.js", None, {}, 200),
    ("GET", "/v1/models", None, {}, 401),
    ("GET", "/v2/nothing", None, ADMIN, 404),
    ("DELETE", "/v1/systemone", None, ADMIN, 405),
    ("POST", "/v1/systemone", {"state": "no questions"}, ADMIN, 422),
    ("POST", "/v1/systemone", body("__bug__"), ADMIN, 500),
])
def test_every_kind_of_response_says_nosniff(tmp_path, method, path, payload, headers, status):
    with served(api_keys=KEYS, review_dir=str(tmp_path / "rv")) as (client, _):
        response = client.request(method, path, json=payload, headers=headers, follow_redirects=False)
    assert response.status_code == status, response.text[:300]
    assert nosniff(response), dict(response.headers)


def test_review_media_says_nosniff(tmp_path):
    with served(review_dir=str(tmp_path / "rv")) as (client, _):
        assert ask(client).status_code == 200
        key = client.get("/v1/review/queues/kept/items").json()["items"][0]["key"]
        media = client.get(f"/v1/review/queues/kept/items/{key}/media/0")
        item = client.get(f"/v1/review/queues/kept/items/{key}")
    assert media.status_code == 200
    assert nosniff(media)
    assert nosniff(item)
    assert json.loads(item.content)["key"] == key
