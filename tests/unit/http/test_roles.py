"""Named callers and roles: the keys file's `KEY NAME [ROLE]` lines, caller < reviewer < admin on every route that
carries data (403 through the error table, naming the role), /v1/whoami, and the X-Omni-Reviewer header without keys."""
from __future__ import annotations

import hashlib

import pytest

from api.http.identity import ANONYMOUS, Caller, KeyRing, caller_of, key_name, parse_key_entry
from tests.unit.http.serving import body, served

KEYS = ("k-admin", "k-alice alice reviewer", "k-bob bob", "k-app app caller")
ADMIN, ALICE, BOB, APP = ({"Authorization": f"Bearer {k}"} for k in ("k-admin", "k-alice", "k-bob", "k-app"))
ADMIN_ONLY = ("/v1/review/reports", "/v1/admin/policy", "/metrics", "/docs", "/openapi.json")


def problem(response, status: int) -> dict:
    assert response.status_code == status, response.text
    assert "request_id" in response.json()
    return response.json()["detail"]


def test_key_entries_parse_to_a_name_and_a_role():
    assert parse_key_entry("k1") == ("k1", "key-" + hashlib.sha256(b"k1").hexdigest()[:8], "admin")
    assert parse_key_entry("k1 alice") == ("k1", "alice", "reviewer")
    assert parse_key_entry("k1  alice\tcaller") == ("k1", "alice", "caller")
    for bad, says in (("k1 alice boss", "unknown role 'boss'"), ("k1 a b c", "4 fields"),
                      ("k1 " + "n" * 65, "1..64 characters"), ("k1 al\x07ice", "control characters")):
        with pytest.raises(ValueError, match=says):
            parse_key_entry(bad)
    assert key_name("secret") != key_name("secreu") and "secret" not in key_name("secret")


def test_a_key_ring_finds_the_caller_of_a_key_and_nobody_for_a_wrong_one():
    ring = KeyRing.of(KEYS)
    assert ring.caller("k-alice") == Caller("alice", "reviewer", "key")
    assert ring.caller("k-admin") == Caller(key_name("k-admin"), "admin", "key")
    assert ring.caller("k-al") is None and ring.caller("") is None
    assert not KeyRing.of(()) and ring
    assert Caller("x", "reviewer").may("caller") and not Caller("x", "reviewer").may("admin")


def test_a_caller_key_decides_but_cannot_review_nor_administer(tmp_path):
    with served(api_keys=KEYS, review_dir=str(tmp_path / "rv")) as (client, _):
        assert client.get("/v1/models", headers=APP).status_code == 200
        refused = problem(client.get("/v1/review/queues", headers=APP), 403)
        assert refused["error_type"] == "permission_error"
        assert "reviewer role" in refused["message"] and "'app'" in refused["message"]
        assert "caller role" in refused["message"]
        for path in ADMIN_ONLY:
            detail = problem(client.get(path, headers=APP), 403)
            assert "admin role" in detail["message"], path


def test_a_reviewer_key_reviews_but_cannot_read_reports_or_administer(tmp_path):
    with served(api_keys=KEYS, review_dir=str(tmp_path / "rv")) as (client, _):
        for who in (ALICE, BOB):
            assert client.get("/v1/review/queues", headers=who).status_code == 200
            assert client.get("/v1/review/queues/kept/items", headers=who).status_code == 200
            assert client.get("/v1/models", headers=who).status_code == 200
            for path in (*ADMIN_ONLY, "/v1/review/reports/r-nope", "/v1/admin/policy/reload"):
                method = client.post if path.endswith("reload") else client.get
                detail = problem(method(path, headers=who), 403)
                assert "admin role" in detail["message"] and "reviewer role" in detail["message"], path


def test_agreement_is_for_admins(tmp_path):
    with served(api_keys=KEYS, review_dir=str(tmp_path / "rv")) as (client, _):
        for who in (APP, ALICE):
            detail = problem(client.get("/v1/review/agreement", headers=who), 403)
            assert "admin role" in detail["message"]
        assert client.get("/v1/review/agreement", headers=ADMIN).status_code == 200


def test_an_admin_key_and_a_bare_key_may_do_everything(tmp_path):
    with served(api_keys=KEYS, review_dir=str(tmp_path / "rv")) as (client, _):
        for path in ("/v1/models", "/v1/review/queues", "/v1/review/reports", "/metrics", "/docs", "/openapi.json"):
            assert client.get(path, headers=ADMIN).status_code == 200, path
        # the admin routes answer (404: this server runs without a policy), not 403
        assert problem(client.get("/v1/admin/policy", headers=ADMIN), 404)["error_type"] == "not_found"


def test_missing_and_wrong_keys_stay_401_everywhere(tmp_path):
    with served(api_keys=KEYS, review_dir=str(tmp_path / "rv")) as (client, _):
        for path in ("/v1/models", "/v1/whoami", "/v1/review/queues", *ADMIN_ONLY):
            assert problem(client.get(path), 401)["message"] == "Must supply an API key!", path
            wrong = client.get(path, headers={"Authorization": "Bearer k-nobody"})
            assert problem(wrong, 401)["error_type"] == "authentication_error", path
            assert wrong.headers["www-authenticate"] == "Bearer"


def test_public_metrics_and_docs_stay_open_to_anyone():
    with served(api_keys=KEYS, public_metrics=True, public_docs=True) as (client, _):
        for path in ("/metrics", "/docs", "/openapi.json"):
            assert client.get(path).status_code == 200 and client.get(path, headers=APP).status_code == 200, path


def test_every_role_may_decide_on_both_envelopes():
    with served(api_keys=KEYS) as (client, _):
        for who in (APP, ALICE, ADMIN):
            assert client.post("/v1/systemone", json=body(), headers=who).status_code == 200
            cf = client.post("/accounts/0123abcd/ai/run/@cf/cloudflare/clef-omni",
                             json={**body(), "model": "clef-omni"}, headers=who)
            assert cf.status_code == 200, cf.text


def test_whoami_names_the_key_holder_and_ignores_the_header_when_keys_are_on():
    with served(api_keys=KEYS) as (client, _):
        me = client.get("/v1/whoami", headers={**ALICE, "X-Omni-Reviewer": "mallory"})
        assert me.json() == {"name": "alice", "role": "reviewer", "named_by": "key", "keys": True}
        assert client.get("/v1/whoami", headers=APP).json() == {"name": "app", "role": "caller", "named_by": "key",
                                                                 "keys": True}
        assert client.get("/v1/whoami", headers=ADMIN).json()["name"] == key_name("k-admin")
        # a bad header is not even read when the key names the caller
        assert client.get("/v1/whoami", headers={**BOB, "X-Omni-Reviewer": ""}).json()["name"] == "bob"


def test_without_keys_the_header_names_the_reviewer_and_everyone_is_admin(tmp_path):
    with served(review_dir=str(tmp_path / "rv")) as (client, _):
        assert client.get("/v1/whoami").json() == {"name": "anonymous", "role": "admin", "named_by": "none",
                                                   "keys": False}
        named = client.get("/v1/whoami", headers={"X-Omni-Reviewer": "Ada Lovelace"}).json()
        assert named == {"name": "Ada Lovelace", "role": "admin", "named_by": "header", "keys": False}
        # a browser percent-encodes what latin-1 cannot carry; curl sends UTF-8 as is
        assert client.get("/v1/whoami", headers={"X-Omni-Reviewer": "%C5%81ukasz"}).json()["name"] == "Łukasz"
        raw = client.get("/v1/whoami", headers={"X-Omni-Reviewer": "Łukasz".encode()}).json()
        assert raw["name"] == "Łukasz"
        assert client.get("/v1/review/queues", headers={"X-Omni-Reviewer": "ada"}).status_code == 200


@pytest.mark.parametrize(("value", "says"), [("", "1..64 characters, got 0"), ("x" * 65, "1..64 characters, got 65"),
                                             ("ada%0Abob", "control characters"), ("ada\tbob", "control characters"),
                                             (" ada", "start or end with whitespace"), ("%FF", "UTF-8")])
def test_a_bad_reviewer_header_is_422_naming_the_header_and_the_limit(value, says, tmp_path):
    with served(review_dir=str(tmp_path / "rv")) as (client, _):
        for path in ("/v1/whoami", "/v1/review/queues"):
            [issue] = problem(client.get(path, headers={"X-Omni-Reviewer": value}), 422)
            assert issue["loc"] == ["header", "X-Omni-Reviewer"], path
            assert says in issue["msg"] and "X-Omni-Reviewer" in issue["msg"] and "1..64" in issue["msg"]


def test_routes_read_the_caller_the_check_stored():
    class State:
        pass

    class Request:
        state = State()

    assert caller_of(Request()) is ANONYMOUS  # type: ignore[arg-type]
    Request.state.caller = Caller("ada", "reviewer", "key")
    assert caller_of(Request()) == Caller("ada", "reviewer", "key")  # type: ignore[arg-type]


def test_the_openapi_document_lists_whoami_and_the_403():
    with served() as (client, _):
        doc = client.get("/openapi.json").json()
    assert "/v1/whoami" in doc["paths"]
    assert "403" in doc["paths"]["/v1/review/queues"]["get"]["responses"]
    assert "403" in doc["paths"]["/v1/admin/policy"]["get"]["responses"]
