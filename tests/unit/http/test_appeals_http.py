"""Appeals (issue 36 item 3) behind `omni serve` (the real app, engine and decision log; the FakeModel answers): a
logged decision appealed with the caller's reason goes to the appeals queue with its answers and outcome; a reviewer
upholds or reverses it, recorded with who and when, kept across a restart; a reversal goes to the webhook; roles;
every bad input a clear 4xx; the statements export says the decision was appealed and what became of it."""
from __future__ import annotations

import json

import pytest

from api.cli.main import main as omni
from omni.review.appeals import APPEALS_FILE, AppealBook
from tests.unit.http.serving import body, served

POLICY = 'version = "p1"\n[questions.ok]\nauto_at = 0.4\nact_on = [true]\n'     # the FakeModel's true at 0.5: act
MAP = """
[defaults]
source_type = "SOURCE_VOLUNTARY"
territorial_scope = "EU"
decision_facts = "An automated classifier assessed the post."
category = "STATEMENT_CATEGORY_ILLEGAL_OR_HARMFUL_SPEECH"
decision_ground = "DECISION_GROUND_INCOMPATIBLE_CONTENT"
incompatible_content_ground = "Community guidelines, section 3"
incompatible_content_explanation = "The post breaks the rule."

[[rules]]
name = "ok"
when = {question = "ok", answer = true}
decision_visibility = ["DECISION_VISIBILITY_CONTENT_REMOVED"]
"""


@pytest.fixture
def dirs(tmp_path):
    (tmp_path / "policy.toml").write_text(POLICY, encoding="utf-8")
    return {"decision_log": str(tmp_path / "log"), "review_dir": str(tmp_path / "review"),
            "policy": str(tmp_path / "policy.toml")}


def decide(client, request_id: str) -> dict:
    answer = client.post("/v1/systemone", json=body(state=f"post {request_id}"), headers={"x-request-id": request_id})
    assert answer.status_code == 200
    return answer.json()


class Recorder:
    """Stands in for the webhook sender: what was offered, by key."""

    def __init__(self) -> None:
        self.offered: list[tuple[dict, str]] = []

    def offer(self, payload: dict, key: str) -> bool:
        self.offered.append((payload, key))
        return True


def test_an_appeal_is_queued_with_the_decision_then_reversed_with_who_and_when(dirs, tmp_path):
    with served(**dirs) as (client, _):
        wire = decide(client, "post-1")
        made = client.post("/v1/decisions/post-1/appeal", json={"reason": "It is a quote, not an attack."},
                           headers={"x-omni-reviewer": "carol"})
        assert made.status_code == 201
        appeal = made.json()
        assert appeal["state"] == "pending" and appeal["appealed_by"] == "carol"
        assert appeal["reason"] == "It is a quote, not an attack."
        assert appeal["decision"]["answers"] == wire["answers"] and appeal["decision"]["x_outcome"] == wire["x_outcome"]
        assert appeal["decision"]["x_outcome"]["overall"] == "act"
        queue = client.get("/v1/appeals", params={"state": "pending"}).json()["appeals"]
        assert [a["request_id"] for a in queue] == ["post-1"]
        client.app.state.service.webhooks = recorder = Recorder()
        reversed_ = client.post("/v1/appeals/post-1/decision", json={"result": "reversed", "note": "satire"},
                                headers={"x-omni-reviewer": "dana"})
        assert reversed_.status_code == 200
        decided = reversed_.json()
        assert decided["state"] == "reversed" and decided["decided_by"] == "dana" and decided["note"] == "satire"
        assert decided["decided_at"].endswith("Z") and decided["decided_at"] >= appeal["appealed_at"]
        assert [(p["event"], key) for p, key in recorder.offered] == [("appeal_reversed", "post-1:appeal")]
        assert client.get("/v1/appeals", params={"state": "pending"}).json()["appeals"] == []
        again = client.post("/v1/appeals/post-1/decision", json={"result": "upheld"})
        assert again.status_code == 409 and "decided already: reversed by dana" in again.json()["detail"]["message"]
        twice = client.post("/v1/decisions/post-1/appeal", json={"reason": "again"})
        assert twice.status_code == 409
        decide(client, "post-2")
        assert client.post("/v1/decisions/post-2/appeal", json={"reason": "wrong"}).status_code == 201
        upheld = client.post("/v1/appeals/post-2/decision", json={"result": "upheld"}).json()
        assert upheld["state"] == "upheld"
        assert [key for p, key in recorder.offered if "event" in p] == ["post-1:appeal"]   # an upheld one is not sent
    with served(**dirs) as (client, _):                                         # a restart: every appeal is there
        kept = {a["request_id"]: a["state"] for a in client.get("/v1/appeals").json()["appeals"]}
        assert kept == {"post-1": "reversed", "post-2": "upheld"}
        assert client.get("/v1/appeals/post-1").json()["decided_by"] == "dana"
    (tmp_path / "map.toml").write_text(MAP, encoding="utf-8")
    out = tmp_path / "statements.jsonl"
    assert omni(["export", "statements", dirs["decision_log"], "--map", str(tmp_path / "map.toml"),
                 "--review-dir", dirs["review_dir"], "--out", str(out)]) == 0
    facts = {s["puid"]: s["decision_facts"] for s in map(json.loads, out.read_text().splitlines())}
    assert "the decision was reversed and no longer stands" in facts["post-1"]
    assert "the decision was upheld" in facts["post-2"]


def test_a_pending_appeal_is_said_in_the_statement_and_a_torn_last_line_is_skipped(dirs, tmp_path):
    with served(**dirs) as (client, _):
        decide(client, "post-3")
        assert client.post("/v1/decisions/post-3/appeal", json={"reason": "not me"}).status_code == 201
    path = tmp_path / "review" / APPEALS_FILE
    with path.open("a", encoding="utf-8") as torn:
        torn.write('{"event": "decided", "request_id": "post-3", "at"')        # a crash mid-write
    assert AppealBook(tmp_path / "review").get("post-3").state == "pending"
    whole = path.read_bytes()
    reason = '{"event": "appealed", "request_id": "post-9", "reason": "これは違う", "by": "c", "at": "t"}'.encode()
    path.write_bytes(whole + b"\n[1]\n" + reason[: reason.index("違".encode()) + 1])   # cut inside a character
    book = AppealBook(tmp_path / "review")           # a line that is no event and a torn one: skipped, not fatal
    assert book.get("post-3").state == "pending" and book.get("post-9") is None


def test_every_bad_appeal_is_a_clear_4xx(dirs):
    with served(**dirs) as (client, _):
        decide(client, "post-4")
        cases = [
            ("/v1/decisions/unknown-id/appeal", {"json": {"reason": "x"}}, 404, "no logged decision has the request id"),
            ("/v1/decisions/post-4/appeal", {"content": b"not json", "headers": {"content-type": "application/json"}},
             422, "not JSON"),
            ("/v1/decisions/post-4/appeal", {"json": ["reason"]}, 422, "a JSON object"),
            ("/v1/decisions/post-4/appeal", {"json": {}}, 422, "required"),
            ("/v1/decisions/post-4/appeal", {"json": {"reason": "   "}}, 422, "required"),
            ("/v1/decisions/post-4/appeal", {"json": {"reason": "x" * 2001}}, 422, "at most 2000 characters"),
            ("/v1/decisions/post-4/appeal", {"json": {"reason": "x" * 20000}}, 413, "16384-byte limit"),
            ("/v1/decisions/post-4/appeal", {"content": b'{"reason": "\\ud800 bad"}',
                                             "headers": {"content-type": "application/json"}}, 422, "lone surrogate"),
            ("/v1/decisions/post-4/appeal", {"content": b'{"a":' * 2500 + b"1" + b"}" * 2500,
                                             "headers": {"content-type": "application/json"}}, 422, "not JSON"),
            ("/v1/appeals/post-4/decision", {"json": {"result": "upheld"}}, 404, "no appeal of the decision"),
        ]
        for path, kwargs, status, said in cases:
            answer = client.post(path, **kwargs)
            assert answer.status_code == status, (path, kwargs, answer.text)
            assert said in answer.text, (said, answer.text)
        assert client.post("/v1/decisions/post-4/appeal", json={"reason": "x"}).status_code == 201
        surrogate = client.post("/v1/appeals/post-4/decision", content=b'{"result": "upheld", "note": "\\udc80"}',
                                headers={"content-type": "application/json"})
        assert surrogate.status_code == 422 and "note" in surrogate.text
        bad_result = client.post("/v1/appeals/post-4/decision", json={"result": "maybe"})
        assert bad_result.status_code == 422 and "upheld, reversed" in bad_result.text
        assert client.get("/v1/appeals", params={"state": "open"}).status_code == 422
        assert client.get("/v1/appeals/nobody").status_code == 404
        assert client.post("/v1/systemone", json=body()).status_code == 200      # the decision path is untouched


def test_without_a_decision_log_or_review_dir_appeals_say_what_they_need(dirs):
    with served(review_dir=dirs["review_dir"]) as (client, _):
        answer = client.post("/v1/decisions/any/appeal", json={"reason": "x"})
        assert answer.status_code == 404 and "--decision-log DIR" in answer.text
        assert client.get("/v1/appeals").status_code == 404


def test_callers_appeal_and_only_reviewers_decide(dirs):
    keys = ("k-caller alice caller", "k-reviewer bob reviewer")
    with served(**dirs, api_keys=keys) as (client, _):
        caller, reviewer = {"authorization": "Bearer k-caller"}, {"authorization": "Bearer k-reviewer"}
        assert client.post("/v1/systemone", json=body(), headers={**caller, "x-request-id": "post-5"}).status_code == 200
        made = client.post("/v1/decisions/post-5/appeal", json={"reason": "x"}, headers=caller)
        assert made.status_code == 201 and made.json()["appealed_by"] == "alice"
        assert client.post("/v1/decisions/post-5/appeal", json={"reason": "x"}).status_code == 401
        assert client.get("/v1/appeals", headers=caller).status_code == 403
        assert client.post("/v1/appeals/post-5/decision", json={"result": "upheld"}, headers=caller).status_code == 403
        decided = client.post("/v1/appeals/post-5/decision", json={"result": "upheld"}, headers=reviewer)
        assert decided.status_code == 200 and decided.json()["decided_by"] == "bob"


def test_a_damaged_line_in_the_decision_log_costs_only_the_decisions_it_may_hold(dirs, tmp_path):
    with served(**dirs) as (client, _):
        decide(client, "post-7")
        decide(client, "post-8")
        client.app.state.service.decision_log.flush(timeout_s=10.0)      # the records on disk
        [segment] = [p for p in (tmp_path / "log").rglob("*") if p.is_file() and b"post-7" in p.read_bytes()]
        lines = segment.read_bytes().split(b"\n")
        damaged = [line if b"post-7" not in line else b'{"damaged": ' + line[:40] for line in lines]
        segment.write_bytes(b"\n".join(damaged))            # post-7's record damaged mid-file, post-8's whole
        kept = client.post("/v1/decisions/post-8/appeal", json={"reason": "not me"})
        assert kept.status_code == 201, kept.text
        lost = client.post("/v1/decisions/post-7/appeal", json={"reason": "not me"})
        assert lost.status_code == 503 and "damaged" in lost.text and segment.name in lost.text, lost.text
        assert client.post("/v1/decisions/nobody/appeal", json={"reason": "x"}).status_code == 503
