"""`omni export statements` end to end on a real decision log (written by `DecisionLog`): one statement per decision
the map selects, written whole or not at all; a reviewer's label makes a decision partially automated; a map naming
a question no decision asked, a corrupt log and a missing log are one line and exit 2 with no output file."""
from __future__ import annotations

import json

from api.cli.main import main
from omni.contract.types import DecisionRequest, Option, Question
from omni.review.directory import ReviewDir
from omni.serve.decision_log import DecisionLog

YES_NO = (Option("true", None), Option("false", None))
MAP = """
[defaults]
source_type = "SOURCE_VOLUNTARY"
territorial_scope = "EEA"
category = "STATEMENT_CATEGORY_ILLEGAL_OR_HARMFUL_SPEECH"
decision_ground = "DECISION_GROUND_INCOMPATIBLE_CONTENT"
incompatible_content_ground = "Community guidelines, section 3"
incompatible_content_explanation = "The post attacks people for a protected characteristic."

[[rules]]
name = "remove"
when = {question = "QUESTION", answer = true, at_least = 0.9}
decision_visibility = ["DECISION_VISIBILITY_CONTENT_REMOVED"]
decision_facts = "Automated review found hateful conduct with high confidence; the post was removed."
"""


def write_log(directory, decisions: list[tuple[str, float]]) -> None:
    """One logged decision per (request id, P(hateful)), as `omni serve --decision-log` writes them."""
    with DecisionLog(directory) as log:
        for request_id, p in decisions:
            request = DecisionRequest(state=f"post {request_id}", questions=(Question("hateful", "noul", YES_NO),),
                                      request_id=request_id)
            response = {"model": "clef-omni", "answers": {"hateful": {"type": "noul", "noul": p}},
                        "usage": {"input_tokens": 10, "output_tokens": 0}}
            log.append(request, response, {"request_id": request_id}, request_id=request_id,
                       decided_at="2026-12-02T10:00:00.000000Z")


def export(tmp_path, question: str = "hateful", *extra: str) -> tuple[int, list[dict]]:
    (tmp_path / "map.toml").write_text(MAP.replace("QUESTION", question))
    out = tmp_path / "out" / "statements.jsonl"
    code = main(["export", "statements", str(tmp_path / "log"), "--map", str(tmp_path / "map.toml"), "--out",
                 str(out), *extra])
    return code, [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []


def test_selected_decisions_become_statements_with_what_the_service_knows(tmp_path):
    write_log(tmp_path / "log", [("r-1", 0.97), ("r-2", 0.2), ("r-3", 0.95)])
    code, statements = export(tmp_path)
    assert code == 0 and [s["puid"] for s in statements] == ["r-1", "r-3"]
    first = statements[0]
    assert first["automated_detection"] == "Yes" and first["automated_decision"] == "AUTOMATED_DECISION_FULLY"
    assert first["application_date"] == "2026-12-02" and first["content_type"] == ["CONTENT_TYPE_TEXT"]
    assert first["decision_visibility"] == ["DECISION_VISIBILITY_CONTENT_REMOVED"]


def test_a_decision_a_reviewer_labelled_is_partially_automated_and_the_label_prevails(tmp_path):
    write_log(tmp_path / "log", [("r-1", 0.97), ("r-3", 0.95)])
    review = ReviewDir(tmp_path / "review")
    for request_id, label in (("r-1", "true"), ("r-3", "false")):          # the reviewer overturned r-3
        request = DecisionRequest(state=f"post {request_id}", questions=(Question("hateful", "noul", YES_NO),),
                                  request_id=request_id)
        key = review.keep_decision(request, {"answers": {}}, {"request_id": request_id})
        review.save_labels(key, "decisions", request, {}, {"hateful": label})
    code, statements = export(tmp_path, "hateful", "--review-dir", str(tmp_path / "review"))
    assert code == 0 and [(s["puid"], s["automated_decision"]) for s in statements] == [
        ("r-1", "AUTOMATED_DECISION_PARTIALLY")]


def test_bad_input_is_one_line_and_exit_2_and_no_file(tmp_path, capsys):
    write_log(tmp_path / "log", [("r-1", 0.97)])
    code, statements = export(tmp_path, "spam")                 # no logged decision asks "spam"
    assert code == 2 and statements == [] and "spam" in capsys.readouterr().err
    segment = next((tmp_path / "log" / "segments").iterdir())
    segment.write_text('{"not": "a decision"}\n' + segment.read_text())
    code, statements = export(tmp_path)
    assert code == 2 and statements == [] and "line 1" in capsys.readouterr().err
    (tmp_path / "nowhere").mkdir()                               # a folder without a log in it
    code, _ = export(tmp_path / "nowhere")
    assert code == 2 and "nowhere" in capsys.readouterr().err
