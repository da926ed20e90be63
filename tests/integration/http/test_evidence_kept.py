"""Evidence kept where it counts (issue 34, docs/evidence.md "Kept"): `omni serve` around the tiny checkpoint with a
decision log and a policy that sends every `ok` answer to review.

A decision whose caller asked for `x_evidence` is logged with its summary (top items, no maps; the logged response
without the full maps); one the policy routes to review is logged with it although the caller did not ask (and its
response carries none, its answers those of a request without evidence); one neither asked nor routed to review is
logged without. `omni replay` recomputes the kept summaries (weights within 1e-6, the same spans, boxes, moments and
windows) and reports a tampered one as differing, naming what; `omni export statements --evidence-facts` writes the
facts relied on into decision_facts, and without the flag does not.
"""
from __future__ import annotations

import base64
import json
import shutil
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.cli.main import main
from api.http.app import create_app
from api.http.settings import Settings
from fixtures.media import image_bytes, video_bytes, wav_bytes
from omni.contract.evidence_summary import evidence_summary
from omni.contract.request import parse_request
from omni.serve.decision_log_files import read_records
from omni.serve.engine import DecisionEngine
from tests.unit.http.serving import wait_ready

QUESTIONS = {"ok": {"type": "noul", "instructions": "Is the unit fine?"},
             "team": {"type": "choice", "criteria": {"hvac": None, "electric": "wiring"}}}
POLICY = """version = "evidence-kept"
[questions.ok]
auto_at = 1.0
act_on = [false]
"""
MAP = """
[defaults]
source_type = "SOURCE_VOLUNTARY"
territorial_scope = "EU"
decision_facts = "An automated inspection assessed the unit."
category = "STATEMENT_CATEGORY_UNSAFE_AND_PROHIBITED_PRODUCTS"
decision_ground = "DECISION_GROUND_INCOMPATIBLE_CONTENT"
incompatible_content_ground = "Listing rules, section 2"
incompatible_content_explanation = "The unit shown does not meet the listing rules."
decision_visibility = ["DECISION_VISIBILITY_CONTENT_LABELLED"]

[[rules]]
when = {question = "ok", answer = true}

[[rules]]
when = {question = "ok", answer = false}
"""
MAPS = ("heatmap", "grid", "per_second", "timeline", "options")


def data_url(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


@pytest.fixture(scope="module")
def served_log(tiny_dir, tmp_path_factory) -> tuple[Path, dict[str, dict], dict[str, dict], list[dict]]:
    """(the log, the responses by request id, in-process answers of the review request decided without evidence,
    the items the policy kept for review as the workbench reads them)."""
    work = tmp_path_factory.mktemp("evidence-kept")
    (work / "policy.toml").write_text(POLICY, encoding="utf-8")
    log_dir = work / "log"
    settings = Settings().with_values({"model": str(tiny_dir), "decision_log": str(log_dir),
                                       "policy": str(work / "policy.toml"), "review_dir": str(work / "rv")})
    media = {"images": [data_url("image/png", image_bytes("PNG", width=96, height=64))],
             "audio": [data_url("audio/wav", wav_bytes(1.0))],
             "videos": [data_url("video/mp4", video_bytes(seconds=1.0, width=64, height=48))]}
    bodies = {"asked": {"state": "The fan rattles; see the photo.", "questions": QUESTIONS, **media,
                        "x_evidence": True},
              "review": {"state": "The fan rattles; see the photo.", "questions": QUESTIONS, **media},
              "neither": {"state": "Which team?", "questions": {"team": QUESTIONS["team"]}, **media}}
    engine = DecisionEngine(settings.engine)
    with TestClient(create_app(settings, engine)) as client:
        wait_ready(client, seconds=120)
        responses = {}
        for rid, body in bodies.items():
            reply = client.post("/v1/systemone", json=body, headers={"x-request-id": rid})
            assert reply.status_code == 200, reply.text
            responses[rid] = reply.json()
        plain = engine.decide(parse_request(bodies["review"], engine.config)).to_wire()
        for _ in range(200):                                     # kept for review after the answers were sent
            items = client.get("/v1/review/queues/policy/items").json().get("items", [])
            if len(items) >= 2:
                break
            time.sleep(0.05)
        kept_items = [client.get(f"/v1/review/queues/policy/items/{item['key']}").json() for item in items]
    return log_dir, responses, plain["answers"], kept_items


def records(log_dir: Path) -> dict[str, dict]:
    return {d.record["request_id"]: d.record for d in read_records(log_dir)}


def test_asked_evidence_is_logged_as_its_summary(served_log):
    log_dir, responses, _, _ = served_log
    asked = records(log_dir)["asked"]
    evidence = responses["asked"]["x_evidence"]
    assert asked["evidence"] == evidence_summary(evidence, 3)
    assert "x_evidence" not in asked["response"]                       # the full maps are not kept
    assert asked["response"] == {k: v for k, v in responses["asked"].items() if k != "x_evidence"}
    assert asked["request"]["x_evidence"] is True
    kept = asked["evidence"]["questions"]["ok"]
    assert kept["answer"] == evidence["questions"]["ok"]["answer"]
    assert len(kept["images"][0]["boxes"]) == len(kept["audio"][0]["windows"]) == 3
    assert kept["videos"][0]["moments"] and kept["videos"][0]["soundtrack"]["windows"]
    assert kept["state"]["spans"] and all(span["text"] for span in kept["state"]["spans"])
    text = json.dumps(asked["evidence"])
    assert not [key for key in MAPS if f'"{key}"' in text]


def test_a_decision_routed_to_review_is_logged_with_evidence_the_caller_did_not_see(served_log):
    log_dir, responses, plain_answers, _ = served_log
    review = records(log_dir)["review"]
    assert responses["review"]["x_outcome"]["overall"] == "review"
    assert "x_evidence" not in responses["review"] and "x_evidence" not in review["request"]
    assert responses["review"]["answers"] == plain_answers                  # asking for evidence changed no answer
    kept = review["evidence"]
    assert kept["top"] == 3 and set(kept["questions"]) == set(QUESTIONS)
    assert kept["questions"]["ok"]["images"][0]["boxes"]
    assert kept["questions"]["ok"]["answer"] == ("true" if plain_answers["ok"]["noul"] >= 0.5 else "false")


def test_a_decision_neither_asked_nor_under_review_keeps_no_evidence(served_log):
    log_dir, responses, _, _ = served_log
    neither = records(log_dir)["neither"]
    assert responses["neither"]["x_outcome"]["overall"] == "pass"         # the policy names no question it asks
    assert "x_evidence" not in responses["neither"]
    assert "evidence" not in neither and "x_evidence" not in neither["response"]


def replay_json(capsys, *args) -> tuple[int, dict]:
    capsys.readouterr()
    code = main(["replay", *map(str, args), "--quiet", "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_replay_reproduces_the_kept_evidence(served_log, capsys):
    log_dir, _, _, _ = served_log
    code, result = replay_json(capsys, log_dir)                       # the three in one forward
    assert code == 0, result
    assert result["counts"]["reproduced"] == 3 and result["evidence_tolerance"] == 1e-6
    by_id = {r["request_id"]: r for r in result["records"]}
    for rid in ("asked", "review"):
        assert by_id[rid]["evidence_differences"] == []
        assert 0 <= by_id[rid]["evidence_max_abs_diff"] <= 1e-6
    assert by_id["neither"]["evidence_max_abs_diff"] is None


def test_replay_reports_a_tampered_summary(served_log, tmp_path, capsys):
    log_dir, _, _, _ = served_log
    copy = tmp_path / "log"
    shutil.copytree(log_dir, copy)
    [segment] = sorted((copy / "segments").glob("*.jsonl"))
    lines = segment.read_text(encoding="utf-8").splitlines()
    for n, line in enumerate(lines):
        record = json.loads(line)
        if record["request_id"] == "review":
            ok = record["evidence"]["questions"]["ok"]
            ok["images"][0]["boxes"][0]["x0"] += 32.0
            ok["videos"][0]["moments"][0]["weight"] += 0.01
            lines[n] = json.dumps(record, ensure_ascii=False)
    segment.write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, result = replay_json(capsys, copy, "--request-id", "review")
    assert code == 1
    [record] = result["records"]
    assert record["status"] == "differs" and record["max_abs_diff"] <= 1e-5     # the probabilities did reproduce
    found = record["evidence_differences"]
    assert len(found) == 2, found
    assert found[0].startswith("questions.ok.images[0].boxes[0].x0: ")
    assert found[1].startswith("questions.ok.videos[0].moments[0].weight: ")
    assert 0.0099 < record["evidence_max_abs_diff"] < 0.0101
    capsys.readouterr()
    assert main(["replay", str(copy), "--request-id", "review", "--quiet"]) == 1
    assert "evidence differs: questions.ok.images[0].boxes[0].x0" in capsys.readouterr().out


def test_statements_carry_the_facts_relied_on_with_the_flag(served_log, tmp_path, capsys):
    log_dir, _, _, _ = served_log
    (tmp_path / "map.toml").write_text(MAP, encoding="utf-8")
    statements = {}
    for name, extra in (("plain", []), ("facts", ["--evidence-facts"])):
        out = tmp_path / f"{name}.jsonl"
        assert main(["export", "statements", str(log_dir), "--map", str(tmp_path / "map.toml"), "--out", str(out),
                     *extra]) == 0
        statements[name] = {s["puid"]: s for s in map(json.loads, out.read_text(encoding="utf-8").splitlines())}
    assert set(statements["facts"]) == set(statements["plain"]) == {"asked", "review"}
    kept = records(log_dir)
    for puid, plain in statements["plain"].items():
        facts = statements["facts"][puid]["decision_facts"]
        assert plain["decision_facts"] == "An automated inspection assessed the unit."
        assert facts.startswith(plain["decision_facts"] + "\nFacts relied on")
        answer = kept[puid]["evidence"]["questions"]["ok"]["answer"]
        sentence = facts.split("\n")[1].split(": ", 1)[1]
        assert sentence.startswith(f"ok={answer} relied on: ") and sentence.endswith(".")
        for place in ("image 0 (box ", "audio 0 at ", "video 0 at ", "video 0's sound at ", "state '"):
            assert place in sentence
        assert "team=" not in sentence                                  # only the question the rule names
        assert {k: v for k, v in statements["facts"][puid].items() if k != "decision_facts"} == \
            {k: v for k, v in plain.items() if k != "decision_facts"}


def test_review_items_carry_their_evidence_for_the_workbench(served_log):
    _, responses, _, kept_items = served_log
    by_state = {json.dumps(item["evidence"]["questions"]["ok"]["share"]): item for item in kept_items}
    assert len(kept_items) == 2 and all("evidence" in item for item in kept_items)     # asked, and routed unasked
    asked = responses["asked"]["x_evidence"]
    assert json.dumps(asked["questions"]["ok"]["share"]) in by_state                   # the full maps, as sent
    item = by_state[json.dumps(asked["questions"]["ok"]["share"])]
    assert item["evidence"] == asked
    unasked = next(i for i in kept_items if i is not item)
    assert unasked["evidence"]["questions"]["ok"]["images"][0]["heatmap"]            # computed for review: full maps
