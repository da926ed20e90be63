"""The workbench's HTTP side: /ui files (local, no data, open), /v1/review/* behind the keys, decisions kept with
--review-dir, labels saved through the API, eval reports; every bad id a 404 and every bad label a 422."""
from __future__ import annotations

import json

import pytest

from api.http.settings import Settings, SettingsError
from fixtures.media import image_bytes
from tests.unit.http.serving import BASIC_QUESTIONS, body, served, settings_with

PNG = image_bytes("PNG", "RGB", 48, 32)


def fetches_elsewhere(content: bytes) -> bool:
    """Whether a file names a URL outside this server (an SVG's namespace is a name, not a fetch)."""
    text = content.replace(b'xmlns="http://www.w3.org/2000/svg"', b"")
    return b"http://" in text or b"https://" in text or b"//cdn" in text


def ask(client, headers=None):
    files = {"request": ("request.json", json.dumps(body()), "application/json"), "images": ("unit.png", PNG, "image/png")}
    return client.post("/v1/systemone", files=files, headers=headers or {})


def test_decisions_are_kept_with_a_review_dir_and_labelled_through_the_api(tmp_path):
    with served(review_dir=str(tmp_path / "rv")) as (client, _):
        assert ask(client).status_code == 200
        queues = client.get("/v1/review/queues").json()["queues"]
        assert queues == [{"id": "kept", "kind": "kept", "name": "kept decisions", "items": 1, "reviewed": 0,
                           "k": 1, "failed": 0, "failures": []}]             # issue 22: each queue says its k
        [entry] = client.get("/v1/review/queues/kept/items").json()["items"]
        item = client.get(f"/v1/review/queues/kept/items/{entry['key']}").json()
        assert [q["id"] for q in item["questions"]] == list(BASIC_QUESTIONS)
        assert item["media"] == [{"index": 0, "slot": "images", "kind": "image", "type": "image/png"}]
        media = client.get(f"/v1/review/queues/kept/items/{entry['key']}/media/0")
        assert media.content == PNG and media.headers["content-type"] == "image/png"
        saved = client.put(f"/v1/review/queues/kept/items/{entry['key']}/labels", json={"labels": {"team": "tech"}})
        assert saved.status_code == 200 and saved.json()["labels"] == {"team": "tech"}   # issue 22: + "events"
        line = json.loads((tmp_path / "rv" / "labels.jsonl").read_text())
        assert line["labels"] == {"team": "tech"} and line["images"][0].startswith("media/")


def test_bad_ids_are_404_and_bad_labels_422_in_the_error_shape(tmp_path):
    with served(review_dir=str(tmp_path / "rv")) as (client, _):
        ask(client)
        key = client.get("/v1/review/queues/kept/items").json()["items"][0]["key"]
        for path in ("/v1/review/queues/nope/items", "/v1/review/queues/kept/items/d-nope",
                     f"/v1/review/queues/kept/items/{key}/media/5", "/v1/review/reports/r-nope",
                     "/v1/review/queues/..%2F..%2Fetc/items"):
            response = client.get(path)
            assert response.status_code == 404, path
            assert response.json()["detail"]["error_type"] == "not_found" and "request_id" in response.json()
        for labels, where in (({"team": "plumbing"}, ["body", "labels"]), ({"team": 2.5}, ["body", "labels", "team"]),
                              ({"team": 3}, ["body", "labels"]), ({"level": [1]}, ["body", "labels", "level"]),
                              ({"colour": "red"}, ["body", "labels"])):
            response = client.put(f"/v1/review/queues/kept/items/{key}/labels", json={"labels": labels})
            assert response.status_code == 422 and response.json()["detail"][0]["loc"] == where, labels
        assert client.put(f"/v1/review/queues/kept/items/{key}/labels", json={}).status_code == 422
        assert client.get("/v1/review/queues/kept/items?order=random").status_code == 422
        assert client.get("/v1/review/queues/kept/items?threshold=2").status_code == 422


def test_labels_are_taken_as_labels_jsonl_writes_them_or_as_their_ids(tmp_path):
    """Issue 22, bug 14: the API wanted "true" where labels.jsonl stores true (and "2" where it stores 2)."""
    with served(review_dir=str(tmp_path / "rv")) as (client, _):
        ask(client)
        key = client.get("/v1/review/queues/kept/items").json()["items"][0]["key"]
        saved = client.put(f"/v1/review/queues/kept/items/{key}/labels",
                           json={"labels": {"ok": False, "level": 2, "team": "tech"}})
        assert saved.status_code == 200, saved.text
        assert saved.json()["labels"] == {"ok": "false", "level": "2", "team": "tech"}   # issue 22: + "events"
        again = client.put(f"/v1/review/queues/kept/items/{key}/labels", json={"labels": {"ok": "true", "level": 0}})
        assert again.json()["labels"] == {"ok": "true", "level": "0", "team": "tech"}
    line = json.loads((tmp_path / "rv" / "labels.jsonl").read_text())
    assert line["labels"] == {"ok": True, "level": 0, "team": "tech"}


def test_an_item_counts_as_reviewed_once_every_question_is_labelled(tmp_path):
    """Issue 22, bug 6: a partly labelled item counted as reviewed."""
    with served(review_dir=str(tmp_path / "rv")) as (client, _):
        ask(client)
        key = client.get("/v1/review/queues/kept/items").json()["items"][0]["key"]
        labels = f"/v1/review/queues/kept/items/{key}/labels"

        def reviewed() -> int:
            return client.get("/v1/review/queues").json()["queues"][0]["reviewed"]

        client.put(labels, json={"labels": {"ok": "true", "team": "tech"}})
        assert reviewed() == 0                                  # two of three questions
        client.put(labels, json={"labels": {"level": "1"}})
        assert reviewed() == 1


def test_a_batch_queue_says_which_lines_failed(tmp_path):
    """Issue 22, bug 9: a batch's error lines never appeared: nothing said that lines failed."""
    (tmp_path / "in.jsonl").write_text(json.dumps(body()) + "\n" + json.dumps(body(state="x")) + "\n")
    error = {"status": 422, "body": {"detail": [{"loc": ["body", "images", 0], "msg": "cannot decode broken.png",
                                                 "type": "corrupt_media"}]}}
    (tmp_path / "out.jsonl").write_text(
        json.dumps({"line": 1, "input": "in.jsonl", "response": {"answers": {}}}) + "\n"
        + json.dumps({"line": 2, "input": "in.jsonl", "error": error}) + "\n")
    with served(review_dir=str(tmp_path / "rv"), review_batches=(str(tmp_path / "out.jsonl"),)) as (client, _):
        [batch, kept] = client.get("/v1/review/queues").json()["queues"]
    assert (batch["kind"], batch["items"], batch["failed"]) == ("batch", 1, 1)
    assert batch["failures"] == [{"line": 2, "status": 422, "message": "cannot decode broken.png"}]
    assert (kept["failed"], kept["failures"]) == (0, [])


def test_review_is_off_without_a_review_dir_and_says_how_to_turn_it_on():
    with served() as (client, _):
        assert ask(client).status_code == 200
        response = client.get("/v1/review/queues")
        assert response.status_code == 404 and "--review-dir" in response.json()["detail"]["message"]


def test_the_page_is_local_and_open_while_the_data_needs_the_key(tmp_path):
    with served(api_keys=("k1",), review_dir=str(tmp_path / "rv")) as (client, _):
        page = client.get("/ui")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert "default-src 'self'" in page.headers["content-security-policy"]
        for name in ("app.js", "app.css", "icon.svg"):
            asset = client.get(f"/ui/{name}")
            assert asset.status_code == 200 and not fetches_elsewhere(asset.content), name
        assert not fetches_elsewhere(page.content)
        assert client.get("/ui/../api/http/settings.py").status_code == 404
        assert client.get("/ui/secrets.txt").status_code == 404
        assert client.get("/v1/review/queues").status_code == 401
        assert client.get("/v1/review/queues", headers={"Authorization": "Bearer k1"}).status_code == 200


def test_the_page_can_be_turned_off():
    with served(ui=False) as (client, _):
        assert client.get("/ui").status_code == 404


def test_eval_reports_are_listed_read_and_their_figures_served(tmp_path):
    report = tmp_path / "eval"
    report.mkdir()
    (report / "metrics.json").write_text(json.dumps({"target_precision": 0.95, "questions": {}, "types": {}}))
    (report / "report.md").write_text("# Evaluation report\n")
    (report / "reliability_all.png").write_bytes(PNG)
    with served(review_reports=(str(report),)) as (client, _):
        [entry] = client.get("/v1/review/reports").json()["reports"]
        data = client.get(f"/v1/review/reports/{entry['id']}").json()
        assert data["figures"] == ["reliability_all.png"] and data["markdown"].startswith("# Evaluation")
        figure = client.get(f"/v1/review/reports/{entry['id']}/figures/reliability_all.png")
        assert figure.content == PNG and figure.headers["content-type"] == "image/png"
        assert client.get(f"/v1/review/reports/{entry['id']}/figures/metrics.json").status_code == 404


def test_review_settings_name_what_is_missing(tmp_path):
    with pytest.raises(SettingsError, match="needs review_dir"):
        settings_with(review_batches=(str(tmp_path / "out.jsonl"),))
    with pytest.raises(SettingsError, match="no batch output file"):
        settings_with(review_dir=str(tmp_path), review_batches=(str(tmp_path / "missing.jsonl"),))
    with pytest.raises(SettingsError, match="no metrics.json"):
        settings_with(review_reports=(str(tmp_path),))


# ------------------------------------------------------------------------------------------------ issue 22: a team
def as_(name: str) -> dict:
    return {"X-Omni-Reviewer": name}


def kept_item(client) -> str:
    ask(client)
    return client.get("/v1/review/queues/kept/items").json()["items"][0]["key"]


def test_the_item_api_carries_the_review_and_every_action_its_reviewer(tmp_path):
    with served(review_dir=str(tmp_path / "rv")) as (client, _):
        key = kept_item(client)
        base = f"/v1/review/queues/kept/items/{key}"
        saved = client.put(f"{base}/labels", json={"labels": {"ok": True, "team": "tech"}}, headers=as_("alice"))
        assert saved.status_code == 200 and len(saved.json()["events"]) == 2
        changed = client.put(f"{base}/labels", json={"labels": {"team": "billing"}}, headers=as_("bob")).json()
        assert changed["labels"] == {"ok": "true", "team": "billing"} and len(changed["events"]) == 1
        comment = client.post(f"{base}/comments", json={"text": "fan or motor?"}, headers=as_("bob"))
        assert comment.status_code == 201 and comment.json()["reviewer"] == "bob"
        flag = client.post(f"{base}/flag", json={"reason": "blurred"}, headers=as_("alice"))
        assert flag.status_code == 201 and flag.json()["reason"] == "blurred"
        skip = client.post(f"{base}/skip", headers=as_("carol"))                 # no body: a skip without reason
        assert skip.status_code == 201 and skip.json()["reason"] is None
        item = client.get(base, headers=as_("alice")).json()
        assert [(h["question"], h["old"], h["new"], h["reviewer"]) for h in item["history"]] == [
            ("ok", None, "true", "alice"), ("team", None, "tech", "alice"), ("team", "tech", "billing", "bob")]
        assert item["comments"] == [comment.json()] and item["flags"] == [flag.json()] and item["skips"] == [skip.json()]
        assert (item["review_state"], item["flagged"], item["k"]) == ("partly", True, 1)
        assert item["labelled_by"] == {"ok": ["alice"], "team": ["bob"]} and item["consensus"] == item["labels"]
        assert item["state"] == "Fan rattles."
        [entry] = client.get("/v1/review/queues/kept/items", headers=as_("carol")).json()["items"]
        assert {n: entry[n] for n in ("state", "flagged", "reviewers", "outcome", "skipped")} == {
            "state": "partly", "flagged": True, "reviewers": ["alice", "bob"], "outcome": None, "skipped": True}
        assert client.get("/v1/review/queues/kept/items", headers=as_("bob")).json()["items"][0]["skipped"] is False
    line = json.loads((tmp_path / "rv" / "labels.jsonl").read_text())
    assert line["x_review"]["labelled_by"] == {"ok": ["alice"], "team": ["bob"]}


def test_undo_through_the_api_and_what_it_refuses(tmp_path):
    with served(review_dir=str(tmp_path / "rv")) as (client, _):
        key = kept_item(client)
        base = f"/v1/review/queues/kept/items/{key}"
        [mine] = client.put(f"{base}/labels", json={"labels": {"level": 1}}, headers=as_("alice")).json()["events"]
        refused = client.post(f"{base}/undo", json={"event": mine}, headers=as_("bob"))
        assert refused.status_code == 409 and "only the reviewer who gave it" in refused.json()["detail"]["message"]
        [theirs] = client.put(f"{base}/labels", json={"labels": {"level": 2}}, headers=as_("bob")).json()["events"]
        refused = client.post(f"{base}/undo", json={"event": mine}, headers=as_("alice"))
        assert refused.status_code == 409 and "changed since by bob" in refused.json()["detail"]["message"]
        undone = client.post(f"{base}/undo", json={"event": theirs}, headers=as_("bob"))
        assert undone.status_code == 200, undone.text
        assert undone.json()["labels"] == {"level": "1"} and undone.json()["event"].startswith("e-")
        again = client.post(f"{base}/undo", json={"event": theirs}, headers=as_("bob"))
        assert again.status_code == 409 and "already undone" in again.json()["detail"]["message"]
        flag = client.post(f"{base}/flag", json={"reason": "x"}, headers=as_("alice")).json()
        assert client.post(f"{base}/undo", json={"event": flag["id"]}, headers=as_("alice")).json()["flags"] == []
        history = client.get(base).json()["history"]
        assert [h["action"] for h in history] == ["label", "label", "revert"]
        assert (history[-1]["old"], history[-1]["new"], history[-1]["reviewer"]) == ("2", "1", "bob")
        assert client.post(f"{base}/undo", json={"event": "e-nope"}).status_code == 404
        for body in ({}, {"event": 3}, [1]):
            response = client.post(f"{base}/undo", json=body)
            assert response.status_code == 422, body
        assert client.post(f"{base}/undo", json={}).json()["detail"][0]["loc"] == ["body", "event"]


def test_bad_review_input_is_a_clear_4xx(tmp_path):
    with served(review_dir=str(tmp_path / "rv"), review_max_comment_chars=50) as (client, _):
        key = kept_item(client)
        base = f"/v1/review/queues/kept/items/{key}"
        for path in ("/v1/review/queues/kept/items/d-nope/comments", "/v1/review/queues/nope/items/x/comments"):
            assert client.post(path, json={"text": "hi"}).status_code == 404, path
        assert client.put("/v1/review/queues/kept/items/d-nope/labels", json={"labels": {"ok": True}}).status_code == 404
        unknown = client.put(f"{base}/labels", json={"labels": {"colour": "red"}})
        assert unknown.status_code == 422 and "'colour' is not a question" in unknown.json()["detail"][0]["msg"]
        for text in ("", "   ", None, 5):
            response = client.post(f"{base}/comments", json={"text": text})
            assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["body", "text"], text
        huge = client.post(f"{base}/comments", json={"text": "x" * 51})
        assert huge.status_code == 422 and "at most 50 characters" in huge.json()["detail"][0]["msg"]
        assert client.post(f"{base}/comments", json={"text": "x" * 50}).status_code == 201
        assert client.post(f"{base}/comments", content=b"{torn").json()["detail"][0]["type"] == "json_invalid"
        for body in ({}, {"reason": ""}, {"reason": "x" * 501}):
            response = client.post(f"{base}/flag", json=body)
            assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["body", "reason"], body
        assert "500" in client.post(f"{base}/skip", json={"reason": "x" * 501}).json()["detail"][0]["msg"]
        items = "/v1/review/queues/kept/items"
        for query, field in (("answer=true", "answer"), ("state=finished", "state"), ("outcome=maybe", "outcome"),
                             ("min_confidence=2", "min_confidence"),
                             ("min_confidence=0.9&max_confidence=0.1", "min_confidence")):
            response = client.get(f"{items}?{query}")
            assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["query", field], query
        assert "give question too" in client.get(f"{items}?answer=true").json()["detail"][0]["msg"]
        assert client.get(f"{items}?question=ok&answer=true&state=partly&min_confidence=0").json()["items"] == []
        assert len(client.get(f"{items}?question=team&state=unlabelled&max_confidence=1").json()["items"]) == 1


def test_k2_through_the_api_disagreements_adjudication_and_agreement(tmp_path):
    keys = ("k-root", "k-ann ann", "k-ben ben", "k-cy cy")
    with served(review_dir=str(tmp_path / "rv"), review_k=2, api_keys=keys) as (client, _):
        def by(key: str) -> dict:
            return {"Authorization": f"Bearer {key}"}

        ask(client, by("k-root"))
        key = client.get("/v1/review/queues/kept/items", headers=by("k-ann")).json()["items"][0]["key"]
        base = f"/v1/review/queues/kept/items/{key}"
        client.put(f"{base}/labels", json={"labels": {"ok": True, "team": "tech", "level": 1}}, headers=by("k-ann"))
        blind = client.get(base, headers=by("k-ben")).json()
        assert blind["labels"] == {} and blind["history"] == [] and blind["by_reviewer"] is None
        assert client.get(base, headers=by("k-root")).json()["by_reviewer"] == {
            "ann": {"ok": "true", "team": "tech", "level": "1"}}                    # an admin sees them
        client.put(f"{base}/labels", json={"labels": {"ok": True, "team": "billing", "level": 1}}, headers=by("k-ben"))
        queues = {q["id"]: q for q in client.get("/v1/review/queues", headers=by("k-cy")).json()["queues"]}
        assert queues["disagreements"]["items"] == 1 and queues["kept"]["reviewed"] == 1 and queues["kept"]["k"] == 2
        listed = client.get("/v1/review/queues/disagreements/items", headers=by("k-cy")).json()["items"]
        assert [e["key"] for e in listed] == [key]
        item = client.get(f"/v1/review/queues/disagreements/items/{key}", headers=by("k-cy")).json()
        assert item["disagreements"] == ["team"] and item["by_reviewer"]["ben"]["team"] == "billing"
        adjudicated = client.put(f"/v1/review/queues/disagreements/items/{key}/labels",
                                 json={"labels": {"team": "tech"}}, headers=by("k-cy"))
        assert adjudicated.json()["labels"] == {"ok": "true", "team": "tech", "level": "1"}
        assert client.get("/v1/review/queues/disagreements/items", headers=by("k-cy")).json()["items"] == []
        assert client.get("/v1/review/agreement", headers=by("k-ann")).status_code == 403     # admins only
        report = client.get("/v1/review/agreement", headers=by("k-root"))
        assert report.status_code == 200, report.text
        assert report.json()["k"] == 2 and report.json()["questions"]["team"]["method"] == "cohen"
        assert report.json()["questions"]["ok"]["observed"] == 1.0
    line = json.loads((tmp_path / "rv" / "labels.jsonl").read_text())
    assert line["labels"] == {"ok": True, "team": "tech", "level": 1}
    assert line["x_review"]["adjudicated_by"] == {"team": "cy"}


def test_review_k_and_the_comment_cap_are_settings_and_flags(tmp_path):
    import argparse

    from api.cli.review import add_review_arguments
    from api.cli.serve import add_serve_arguments, build_settings

    for bad in ({"review_k": 0}, {"review_k": 11}):
        with pytest.raises(SettingsError, match=r"review_k .* 1\.\.10"):
            settings_with(**bad)
    with pytest.raises(SettingsError, match="review_max_comment_chars must be >= 1"):
        settings_with(review_max_comment_chars=0)
    for add in (add_serve_arguments, add_review_arguments):
        parser = argparse.ArgumentParser()
        add(parser)
        args = parser.parse_args(["--review-k", "3", "--review-max-comment-chars", "500"])
        settings = build_settings(args, environ={})
        assert (settings.review_k, settings.review_max_comment_chars) == (3, 500)
    assert Settings.from_env({"OMNI_REVIEW_K": "2"}).review_k == 2
