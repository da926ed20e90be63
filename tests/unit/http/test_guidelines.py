"""Review guidelines: `--review-guidelines [QUEUE=]FILE` checked at start, served per queue as markdown and safe HTML
(no raw HTML, no javascript: links), reviewer role and above."""
from __future__ import annotations

import json

import pytest

from api.cli.serve import add_serve_arguments, build_settings
from api.http.guidelines import render
from api.http.settings import SettingsError
from tests.unit.http.serving import body, served, settings_with

HOSTILE = ("# Rules\n\n<script>alert(1)</script>\n\n<img src=x onerror=alert(2)>\n\n"
           "[click](javascript:alert(3)) [ok](https://example.org/guide) **bold**\n")


def batch(tmp_path, name="out.jsonl"):
    (tmp_path / "in.jsonl").write_text(json.dumps(body()) + "\n")
    path = tmp_path / name
    path.write_text(json.dumps({"line": 1, "input": "in.jsonl", "response": {"answers": {}}}) + "\n")
    return str(path)


def guide(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_markdown_renders_without_passing_any_html_or_script_link():
    html = render(HOSTILE)
    assert "<h1>Rules</h1>" in html and "<strong>bold</strong>" in html
    assert '<a href="https://example.org/guide" target="_blank" rel="noopener noreferrer">ok</a>' in html
    assert "<script" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<img" not in html and "&lt;img src=x onerror=alert(2)&gt;" in html
    assert "javascript:" not in html.replace("[click](javascript:alert(3))", "")   # left as text, not a link
    assert 'href="javascript' not in html.lower()


def test_only_http_and_mailto_links_are_links():
    html = render("[a](ftp://x) [b](rel/page) ![c](data:image/png;base64,AA) [d](VBScript:x) [e](mailto:qa@x.org) "
                  "<https://x.org/y>")
    assert "[a](ftp://x)" in html and "[b](rel/page)" in html and "![c](data:image/png;base64,AA)" in html
    assert "[d](VBScript:x)" in html and "<img" not in html
    assert html.count("<a ") == 2 and 'href="mailto:qa@x.org"' in html and 'href="https://x.org/y"' in html


def test_each_queue_gets_its_own_file_or_the_shared_one(tmp_path):
    out = batch(tmp_path)
    own = guide(tmp_path, "batch.md", "# Batch rules\n")
    shared = guide(tmp_path, "all.md", HOSTILE)
    with served(review_dir=str(tmp_path / "rv"), review_batches=(out,),
                review_guidelines=("out.jsonl=" + own, shared)) as (client, _):
        [batch_queue, kept] = client.get("/v1/review/queues").json()["queues"]
        mine = client.get(f"/v1/review/queues/{batch_queue['id']}/guidelines")
        assert mine.status_code == 200 and mine.json() == {"markdown": "# Batch rules\n", "html": "<h1>Batch rules</h1>\n"}
        other = client.get(f"/v1/review/queues/{kept['id']}/guidelines").json()
        assert other["markdown"] == HOSTILE and "&lt;script&gt;" in other["html"] and "<script" not in other["html"]
        assert client.get("/v1/review/queues/nope/guidelines").status_code == 404


def test_a_queue_is_named_by_its_id_and_without_guidelines_gets_empty_ones(tmp_path):
    kept_only = guide(tmp_path, "kept.md", "keep *calm*")
    with served(review_dir=str(tmp_path / "rv"), review_batches=(batch(tmp_path),),
                review_guidelines=("kept=" + kept_only,)) as (client, _):
        [batch_queue, _kept] = client.get("/v1/review/queues").json()["queues"]
        assert client.get("/v1/review/queues/kept/guidelines").json() == {"markdown": "keep *calm*",
                                                                          "html": "<p>keep <em>calm</em></p>\n"}
        assert client.get(f"/v1/review/queues/{batch_queue['id']}/guidelines").json() == {"markdown": "", "html": ""}
    with served(review_dir=str(tmp_path / "rv2")) as (client, _):
        assert client.get("/v1/review/queues/kept/guidelines").json() == {"markdown": "", "html": ""}


def test_guidelines_need_the_reviewer_role(tmp_path):
    keys = ("k-app app caller", "k-ada ada")
    with served(api_keys=keys, review_dir=str(tmp_path / "rv"),
                review_guidelines=(guide(tmp_path, "g.md", "hi"),)) as (client, _):
        path = "/v1/review/queues/kept/guidelines"
        assert client.get(path).status_code == 401
        refused = client.get(path, headers={"Authorization": "Bearer k-app"})
        assert refused.status_code == 403 and "reviewer role" in refused.json()["detail"]["message"]
        assert client.get(path, headers={"Authorization": "Bearer k-ada"}).json()["markdown"] == "hi"


def test_review_off_is_404_saying_how_to_turn_it_on():
    with served() as (client, _):
        response = client.get("/v1/review/queues/kept/guidelines")
    assert response.status_code == 404 and "--review-dir" in response.json()["detail"]["message"]


def test_bad_guidelines_are_refused_at_start_naming_the_flag(tmp_path):
    rv = str(tmp_path / "rv")
    big = tmp_path / "big.md"
    big.write_bytes(b"x" * (256 * 1024 + 1))
    (tmp_path / "bin.md").write_bytes(b"\xff\xfe")
    ok = guide(tmp_path, "ok.md", "fine")
    for entries, says in (((str(tmp_path / "missing.md"),), "cannot read"),
                          ((str(big),), "262145 bytes, over the 256 KiB limit"),
                          ((str(tmp_path / "bin.md"),), "not UTF-8"),
                          ((str(tmp_path),), "not a file"),
                          ((ok, ok), "two guidelines files for every other queue"),
                          (("kept=" + ok, "kept=" + ok), "two guidelines files for queue 'kept'"),
                          (("=" + ok,), "expected \\[QUEUE=\\]FILE")):
        with pytest.raises(SettingsError, match=says) as caught:
            settings_with(review_dir=rv, review_guidelines=entries)
        assert "--review-guidelines" in str(caught.value)
    with pytest.raises(SettingsError, match="needs review_dir"):
        settings_with(review_guidelines=(ok,))
    exactly = tmp_path / "exact.md"
    exactly.write_bytes(b"x" * (256 * 1024))
    assert settings_with(review_dir=rv, review_guidelines=(str(exactly),)).review_guidelines == (str(exactly),)


def test_a_queue_that_names_no_queue_stops_the_start(tmp_path, capsys):
    ok = guide(tmp_path, "ok.md", "fine")
    with pytest.raises(SettingsError, match="--review-guidelines.*no review queue 'typo'.*kept"):
        served(review_dir=str(tmp_path / "rv"), review_guidelines=("typo=" + ok,))
    from api.cli.main import main

    code = main(["serve", "--review-dir", str(tmp_path / "rv"), "--review-guidelines", "typo=" + ok])
    assert code == 2
    assert "no review queue 'typo'" in capsys.readouterr().err


def test_the_flag_may_be_repeated(tmp_path):
    import argparse

    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    a, b = guide(tmp_path, "a.md", "a"), guide(tmp_path, "b.md", "b")
    args = parser.parse_args(["--review-dir", str(tmp_path / "rv"), "--review-guidelines", a,
                              "--review-guidelines", "kept=" + b])
    assert build_settings(args, environ={}).review_guidelines == (a, "kept=" + b)


def test_a_path_with_an_equals_sign_is_a_file(tmp_path):
    odd = guide(tmp_path, "a=b.md", "odd")
    with served(review_dir=str(tmp_path / "rv"), review_guidelines=(odd,)) as (client, _):
        assert client.get("/v1/review/queues/kept/guidelines").json()["markdown"] == "odd"
