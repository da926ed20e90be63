"""`omni export statements` end to end on a real decision log (written by `DecisionLog`): one statement per decision
the map selects, written whole or not at all; a reviewer's label makes a decision partially automated; a map naming
a question no decision asked, a corrupt log and a missing log are one line and exit 2 with no output file.
`omni export checkpoint` on the embedded demo: its shards and summary, shard sizes as argv gives them, and a target in
use or a source that is no checkpoint refused in one line with exit 2."""
from __future__ import annotations

import argparse
import json

import pytest

from api.cli.export import byte_size
from api.cli.main import main
from omni.contract.types import DecisionRequest, Option, Question
from omni.model.checkpoint import DEMO_CHECKPOINT_DIR
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


# ------------------------------------------------------------------------------------------------ omni export checkpoint
@pytest.mark.parametrize(("text", "size"), [("5GB", 5_000_000_000), ("300KB", 300_000), ("2GiB", 2 * 1024 ** 3),
                                            ("1.5MB", 1_500_000), ("4096", 4096), (" 64 kib ", 65_536)])
def test_shard_sizes_read_as_bytes(text, size):
    assert byte_size(text) == size


@pytest.mark.parametrize("text", ["0", "5 GB of it", "-3MB", "big", "5TB", ""])
def test_a_size_that_is_not_one_is_a_usage_error(text, capsys):
    with pytest.raises(argparse.ArgumentTypeError, match="expected a size"):
        byte_size(text)
    with pytest.raises(SystemExit) as info:
        main(["export", "checkpoint", str(DEMO_CHECKPOINT_DIR), "--out", "x", "--max-shard-size", text])
    assert info.value.code == 2
    assert "--max-shard-size" in capsys.readouterr().err


def test_the_demo_checkpoint_is_exported_in_shards_with_a_summary(tmp_path, capsys):
    out = tmp_path / "clef-omni"
    code = main(["export", "checkpoint", str(DEMO_CHECKPOINT_DIR), "--out", str(out), "--max-shard-size", "500KB"])
    err = capsys.readouterr().err
    assert code == 0, err
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert sorted(set(index["weight_map"].values())) == [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    assert err.startswith("omni export: 129 backbone tensors (1,231,616 bytes) in 3 shards with "
                          "model.safetensors.index.json")
    assert str(out) in err
    # again into the same directory: refused in one line, the first export untouched
    code = main(["export", "checkpoint", str(DEMO_CHECKPOINT_DIR), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert "already exists and is not an empty directory" in err
    assert sorted(set(json.loads((out / "model.safetensors.index.json").read_text())["weight_map"].values())) == \
        sorted(set(index["weight_map"].values()))


def test_a_source_that_is_no_checkpoint_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "notes.txt").write_text("not a model")
    code = main(["export", "checkpoint", str(tmp_path / "src"), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert "would not load, so it is not exported: files: not a checkpoint" in err
    assert not (tmp_path / "out").exists()
