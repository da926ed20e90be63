"""The audit record over HTTP (the real app and engine, the test FakeModel behind them): `x_audit` when the body asks,
for every request with `--audit always`, never otherwise; a bad `x_audit` is a 422 naming it; avrik's client gets
avrik's `audit` object, filled from the same record."""
from __future__ import annotations

import hashlib

from tests.unit.fake_model import media
from tests.unit.http.serving import BASIC_QUESTIONS, body, served


def test_x_audit_is_in_the_response_when_the_body_asks_and_names_the_request():
    with served() as (client, _engine):
        asked = client.post("/v1/systemone", json=body(x_audit=True), headers={"x-request-id": "audit-1"})
        plain = client.post("/v1/systemone", json=body())
    assert asked.status_code == plain.status_code == 200
    record = asked.json()["x_audit"]
    assert record["request_id"] == asked.headers["x-request-id"] == "audit-1"
    assert record["model"]["id"] == asked.json()["model"] and record["model"]["sha256"] == hashlib.sha256(
        b"fake").hexdigest()
    assert "x_audit" not in plain.json()


def test_a_photo_is_named_by_the_sha256_of_the_bytes_sent():
    photo = media("image")
    with served() as (client, _engine):
        response = client.post("/v1/systemone", data={"request": '{"state": "s", "questions": {"q": {"type": "noul"}},'
                                                                 ' "x_audit": true}'},
                               files={"images": ("unit.png", photo, "image/png")})
    assert response.status_code == 200, response.text
    [item] = response.json()["x_audit"]["media"]
    assert (item["slot"], item["index"], item["sha256"], item["bytes"]) == (
        "images", 0, hashlib.sha256(photo).hexdigest(), len(photo))


def test_audit_always_puts_the_record_in_every_response():
    with served(audit="always") as (client, _engine):
        response = client.post("/v1/systemone", json=body())
    assert response.status_code == 200 and response.json()["x_audit"]["request_id"]


def test_a_non_boolean_x_audit_is_a_422_naming_it():
    with served() as (client, _engine):
        response = client.post("/v1/systemone", json=body(x_audit="yes"))
    assert response.status_code == 422
    assert [issue["loc"] for issue in response.json()["detail"]] == [["body", "x_audit"]]


def test_avrik_clients_get_avriks_audit_object_from_the_same_record():
    with served() as (client, _engine):
        response = client.post("/v1/systemone", json=body(), headers={"User-Agent": "avrik-sdk/1.0.0"})
    assert response.status_code == 200
    wire = response.json()
    audit, record = wire["audit"], wire["x_audit"]
    n = len(BASIC_QUESTIONS)
    assert audit["model_hash"] == record["model"]["sha256"] and audit["calibration_version"] == "none"
    assert audit["prompt_template_sha256"] == [record["prompt"]["template_sha256"]] * n
    assert audit["input_tokens"] == [record["prompt"]["input_tokens"]] * n
    assert len(set(audit["allowed_token_set_hash"])) == n          # noul, a two-way choice, a three-level score
    assert audit["precision"] == record["runtime"]["backbone_dtype"] and audit["backend"].startswith("omni-decide")
