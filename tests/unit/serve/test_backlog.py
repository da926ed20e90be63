"""omni.serve.backlog: one record per line through the REAL DecisionEngine (FakeModel behind it) — completion order,
an error record per failing line equal to what HTTP answers, resume (answered lines skipped, errors retried), the
last record of a line wins, a backend that cannot answer stops the run. No timing assertions."""
from __future__ import annotations

import base64
import json
import threading
from concurrent.futures import Future
from pathlib import Path

import pytest

from api.cli.batch import _describe, engine_backend
from omni.contract.errors import Overloaded
from omni.contract.types import Decision, Usage
from omni.serve.backlog import (
    BackendUnavailable,
    EngineBackend,
    answered_lines,
    pending_lines,
    read_batch_output,
    run_backlog,
)
from omni.serve.engine import DecisionEngine
from tests.unit.fake_model import FakeModel, media
from tests.unit.http.serving import BASIC_QUESTIONS, served, wait_until

WAIT_S = 20.0   # a bound that turns a hang into a failure, never a claim about speed


def line(state: str = "Fan rattles.", **extra) -> str:
    return json.dumps({"state": state, "questions": BASIC_QUESTIONS, **extra})


def data_url(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def write_lines(path: Path, *lines: str) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def engine():
    engine = DecisionEngine(model=FakeModel()).start()
    yield engine
    engine.model.release.set()
    engine.stop(drain=False)


def run(engine, source: Path, out: Path, concurrency: int = 4):
    return run_backlog(source, out, engine_backend(engine, source), _describe(), concurrency, progress=False)


def records_in_file_order(out: Path) -> list[dict]:
    return [json.loads(text) for text in out.read_text(encoding="utf-8").splitlines()]


def states_seen(engine) -> list[str]:
    return [request.state for request in engine.model.seen]


def test_every_line_gets_one_record_numbered_as_in_the_file_and_blank_lines_are_skipped(engine, tmp_path):
    source = write_lines(tmp_path / "in.jsonl", line("a"), "", "   ", line("b"), line("c", labels={"ok": True}))
    out = tmp_path / "out" / "records.jsonl"
    summary = run(engine, source, out)
    records = read_batch_output(out)
    assert sorted(records) == [1, 4, 5] and (summary.answered, summary.failed) == (3, 0)
    assert all(record["input"] == "../in.jsonl" for record in records.values())   # relative to OUT's folder
    assert records[4]["response"]["model"] == "clef-omni"
    assert set(records[5]["response"]["answers"]) == set(BASIC_QUESTIONS)           # labels are not a question


def test_records_are_written_as_answers_finish_so_a_slow_line_does_not_hold_the_others(engine, tmp_path):
    source = write_lines(tmp_path / "in.jsonl", line("__slow_decode__"), line("a"), line("b"), line("c"))
    out = tmp_path / "out.jsonl"
    result: dict = {}
    runner = threading.Thread(target=lambda: result.update(summary=run(engine, source, out)))
    runner.start()
    try:
        wait_until(lambda: out.exists() and len(read_batch_output(out)) == 3, WAIT_S, "the three fast lines written")
        assert 1 not in read_batch_output(out)            # line 1 is still being decoded
    finally:
        engine.model.release.set()
    runner.join(WAIT_S)
    assert result["summary"].answered == 4
    assert [r["line"] for r in records_in_file_order(out)] == [1, 2, 3, 4]   # at the end: compacted, in line order


def test_each_failing_line_gets_the_error_record_http_would_answer_and_the_others_succeed(engine, tmp_path):
    corrupt = data_url(media("image", corrupt=True))
    bodies = {2: "{not json", 3: json.dumps({"questions": BASIC_QUESTIONS}), 4: line(images=[corrupt]),
              5: line(model="gpt-4"), 6: json.dumps([1, 2])}
    source = write_lines(tmp_path / "in.jsonl", line("ok"), *bodies.values(), line("__bug__"), line("fine"))
    out = tmp_path / "out.jsonl"
    summary = run(engine, source, out)
    records = read_batch_output(out)
    assert {n for n, r in records.items() if "response" in r} == {1, 8} and summary.failed == 6
    with served() as (client, _):
        for number, text in bodies.items():
            http = client.post("/v1/systemone", content=text.encode(), headers={"Content-Type": "application/json"})
            error = records[number]["error"]
            assert error["status"] == http.status_code, (number, error, http.text)
            assert _without_id(error["body"]) == _without_id(http.json()), number
    bug = records[7]["error"]
    assert bug["status"] == 500 and "secret" not in json.dumps(bug) and bug["body"]["request_id"] in json.dumps(bug)


def test_a_missing_media_file_is_a_422_at_its_entry_and_paths_are_read_relative_to_the_input(engine, tmp_path):
    (tmp_path / "media").mkdir()
    (tmp_path / "media" / "unit.png").write_bytes(media("image"))
    source = write_lines(tmp_path / "in.jsonl", line(images=["media/unit.png"]), line(images=["media/gone.png"]))
    out = tmp_path / "elsewhere" / "out.jsonl"
    run(engine, source, out)
    records = read_batch_output(out)
    assert records[1]["response"]["x_usage"]["image"] > 0
    issue = records[2]["error"]["body"]["detail"][0]
    assert records[2]["error"]["status"] == 422 and issue["loc"] == ["body", "images", 0]
    assert "file not found: media/gone.png" in issue["msg"]


def test_a_rerun_skips_answered_lines_and_retries_errors_leaving_one_record_per_line(engine, tmp_path):
    source = write_lines(tmp_path / "in.jsonl", line("one"), line("two"), line("three"))
    out = tmp_path / "out.jsonl"
    with open(out, "w", encoding="utf-8") as partial:     # an earlier run: line 1 answered, line 2 failed, torn tail
        partial.write(json.dumps({"line": 1, "input": "in.jsonl", "response": {"answers": {}}}) + "\n")
        partial.write(json.dumps({"line": 2, "input": "in.jsonl", "error": {"status": 504, "body": {}}}) + "\n")
        partial.write('{"line": 3, "input": "in.js')
    summary = run(engine, source, out)
    assert sorted(states_seen(engine)) == ["three", "two"] and summary.skipped == 1
    records = read_batch_output(out)
    assert records[1]["response"] == {"answers": {}}                       # untouched
    assert "response" in records[2] and "response" in records[3]
    assert [r["line"] for r in records_in_file_order(out)] == [1, 2, 3]      # one each: compacted, the torn one gone
    engine.model.seen.clear()
    assert run(engine, source, out).pending == 0 and states_seen(engine) == []


def test_the_last_record_of_a_line_wins(tmp_path):
    out = tmp_path / "out.jsonl"
    rows = [{"line": 3, "error": {"status": 429, "body": {}}}, {"line": 3, "response": {"n": 1}},
            {"line": 5, "response": {"n": 2}}, {"line": 5, "error": {"status": 500, "body": {}}}]
    out.write_text("".join(json.dumps({"input": "in.jsonl", **row}) + "\n" for row in rows))
    records = read_batch_output(out)
    assert records[3]["response"] == {"n": 1} and "error" in records[5]
    assert answered_lines(out) == {3}                  # line 5 is retried by the next run


@pytest.mark.parametrize(("status", "retried"), [(400, False), (404, False), (413, False), (415, False), (422, False),
                                                 (408, True), (429, True), (500, True), (503, True), (504, True)])
def test_a_rerun_retries_only_what_can_succeed_on_a_retry(engine, tmp_path, status, retried):
    """Issue 22, bug 15: every failed line was tried again and appended a new record, also a line wrong in itself."""
    source = write_lines(tmp_path / "in.jsonl", line("one"), line("two"))
    out = tmp_path / "out.jsonl"
    out.write_text(json.dumps({"line": 1, "input": "in.jsonl", "error": {"status": status, "body": {"n": 1}}}) + "\n"
                   + json.dumps({"line": 2, "input": "in.jsonl", "response": {"answers": {}}}) + "\n")
    for _ in range(3):
        summary = run(engine, source, out)
        assert [r["line"] for r in records_in_file_order(out)] == [1, 2]   # one record per line, every rerun
    assert states_seen(engine) == (["one"] if retried else [])           # tried once, then answered
    assert ("response" in read_batch_output(out)[1]) is retried
    assert summary.failed_before == (0 if retried else 1)


def test_line_separators_inside_strings_neither_split_input_lines_nor_output_records(engine, tmp_path):
    criteria = ["calm\u2028ish", "angry\x85", "furious\u2029"]
    questions = {"mood": {"type": "score", "instructions": "Mood?", "criteria": criteria}}
    text = json.dumps({"state": "s\u2028t", "questions": questions}, ensure_ascii=False)
    source = write_lines(tmp_path / "in.jsonl", text, line("next"))
    assert [n for n, _ in pending_lines(source, set())] == [1, 2]
    out = tmp_path / "out.jsonl"
    run(engine, source, out)
    records = read_batch_output(out)                   # its reader splits with str.splitlines()
    assert records[1]["response"]["answers"]["mood"]["legend"]["0"] == "calm\u2028ish" and "response" in records[2]
    assert len(out.read_text(encoding="utf-8").splitlines()) == 2


def test_a_backend_that_cannot_answer_stops_the_run_without_records_for_the_lines_left(tmp_path):
    source = write_lines(tmp_path / "in.jsonl", *(line(str(i)) for i in range(1, 9)))
    out = tmp_path / "out.jsonl"

    class Flaky:
        def answer(self, text: bytes, request_id: str) -> dict:
            if json.loads(text)["state"] == "3":
                raise BackendUnavailable("server gone")
            return {"answers": {}}

    summary = run_backlog(source, out, Flaky(), _describe(), concurrency=1, progress=False)
    assert summary.aborted == "server gone" and set(read_batch_output(out)) == {1, 2}


def test_the_engine_backend_retries_a_full_queue_after_its_wait_then_reports_429(tmp_path):
    class Busy:
        def __init__(self, refusals: int):
            self.refusals, self.calls = refusals, 0

        def submit(self, request, deadline_s=None):
            self.calls += 1
            if self.calls <= self.refusals:
                raise Overloaded("full", retry_after_s=90.0)
            done: Future = Future()
            done.set_result(Decision(model="m", answers={}, usage=Usage(1, 0)))
            return done

    from omni.contract.types import DecisionRequest

    waits: list[float] = []
    parse = lambda text: DecisionRequest(state="s", questions=())
    backend = EngineBackend(Busy(2), parse, retries=3, max_wait_s=5.0, sleep=waits.append)
    assert backend.answer(b"{}", "id")["model"] == "m" and waits == [5.0, 5.0]     # Retry-After, capped
    source = write_lines(tmp_path / "in.jsonl", line())
    out = tmp_path / "out.jsonl"
    run_backlog(source, out, EngineBackend(Busy(99), parse, retries=1, sleep=waits.append), _describe(), 1, False)
    error = read_batch_output(out)[1]["error"]
    assert error["status"] == 429 and error["body"]["detail"]["error_type"] == "rate_limit_error"


def _without_id(body: dict) -> dict:
    return {k: v for k, v in body.items() if k != "request_id"}
