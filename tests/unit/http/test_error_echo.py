"""Errors quote what the caller sent, but only a short prefix of it: a 10 MB label, question id, event id or model
name gives an error body of a few hundred bytes that still names the field and starts the value (the real app and
engine, the FakeModel behind them)."""
from __future__ import annotations

import json

import pytest

from tests.unit.http.serving import body, served
from tests.unit.http.test_review_routes import kept_item

HUGE = "x" * (10 * 1024 * 1024)
SMALL_BODY_BYTES = 2048


def small(response) -> dict:
    assert len(response.content) < SMALL_BODY_BYTES, response.content[:300]
    return response.json()


@pytest.fixture
def item(tmp_path):
    with served(review_dir=str(tmp_path / "rv")) as (client, _):
        yield client, f"/v1/review/queues/kept/items/{kept_item(client)}"


@pytest.mark.parametrize("question", ["team", "ok", "level"])
def test_a_huge_label_is_quoted_by_a_short_prefix(item, question):
    client, base = item
    refused = client.put(f"{base}/labels", json={"labels": {question: HUGE}})
    assert refused.status_code == 422
    [issue] = small(refused)["detail"]
    assert issue["loc"] == ["body", "labels"]
    assert issue["msg"].startswith("'xxxxxxxx")
    assert "…" in issue["msg"]


def test_a_huge_question_id_is_quoted_by_a_short_prefix(item):
    client, base = item
    for labels in ({HUGE: "tech"}, {HUGE: 2.5}):
        refused = client.put(f"{base}/labels", json={"labels": labels})
        assert refused.status_code == 422
        [issue] = small(refused)["detail"]
        assert issue["loc"][:2] == ["body", "labels"]
        assert "xxxxxxxx" in json.dumps(issue)


def test_a_huge_event_id_is_quoted_by_a_short_prefix(item):
    client, base = item
    refused = client.post(f"{base}/undo", json={"event": HUGE})
    assert refused.status_code == 404
    assert "xxxxxxxx" in small(refused)["detail"]["message"]


def test_a_huge_model_name_is_quoted_by_a_short_prefix():
    with served() as (client, _):
        unknown = client.post("/v1/systemone", json=body(model=HUGE))
        assert unknown.status_code == 400
        assert "xxxxxxxx" in small(unknown)["detail"]["message"]
        contradicts = client.post("/accounts/a/ai/run/@cf/cloudflare/clef-omni", json=body(model=HUGE))
        assert contradicts.status_code == 422
        assert "xxxxxxxx" in small(contradicts)["errors"][0]["message"]


@pytest.mark.parametrize("extra", [
    {"assets": {HUGE: {"type": "video"}}},
    {"assets": {"a": {"type": "image", "part": HUGE}}},
], ids=["asset placeholder", "asset part"])
def test_a_huge_asset_name_is_quoted_by_a_short_prefix(extra):
    with served() as (client, _):
        refused = client.post("/v1/systemone", json=body(**extra))
        assert refused.status_code == 422
        assert "xxxxxxxx" in json.dumps(small(refused))


@pytest.mark.parametrize("questions", [
    {HUGE: {"type": "noul"}},
    {"q": {"type": HUGE}},
], ids=["question id", "type"])
def test_a_huge_key_or_value_in_a_request_is_quoted_by_a_short_prefix(questions):
    with served() as (client, _):
        refused = client.post("/v1/systemone", json=body(questions=questions))
        assert 400 <= refused.status_code < 500
        assert "xxxxxxxx" in json.dumps(small(refused))
