"""The workbench's HTTP side: /ui files (local, no data, open), /v1/review/* behind the keys, decisions kept with
--review-dir, labels saved through the API, eval reports; every bad id a 404 and every bad label a 422."""
from __future__ import annotations

import json

import pytest

from api.http.settings import SettingsError
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
                           "failed": 0, "failures": []}]
        [entry] = client.get("/v1/review/queues/kept/items").json()["items"]
        item = client.get(f"/v1/review/queues/kept/items/{entry['key']}").json()
        assert [q["id"] for q in item["questions"]] == list(BASIC_QUESTIONS)
        assert item["media"] == [{"index": 0, "slot": "images", "kind": "image", "type": "image/png"}]
        media = client.get(f"/v1/review/queues/kept/items/{entry['key']}/media/0")
        assert media.content == PNG and media.headers["content-type"] == "image/png"
        saved = client.put(f"/v1/review/queues/kept/items/{entry['key']}/labels", json={"labels": {"team": "tech"}})
        assert saved.status_code == 200 and saved.json() == {"labels": {"team": "tech"}}
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
        assert saved.json() == {"labels": {"ok": "false", "level": "2", "team": "tech"}}
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
