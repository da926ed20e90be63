"""`omni batch` with the tiny checkpoint: in-process answers equal `omni decide`'s, failing lines (corrupt media,
not JSON) get error records while the others succeed, a rerun computes only the lines left, and `--url` against a
real `omni serve` process writes the same records as the in-process run."""
from __future__ import annotations

import base64
import json
import math
import shutil
from pathlib import Path

import pytest

from api.cli.main import main
from fixtures.media import image_bytes, wav_bytes
from omni.serve.backlog import read_batch_output
from tests.integration.cli.test_serve_subprocess import Server

QUESTIONS = {"visible": {"type": "noul", "instructions": "Is the serial label visible?"},
             "team": {"type": "choice", "instructions": "Who handles it?", "criteria": {"hvac": None, "power": "P"}},
             "severity": {"type": "score", "instructions": "How severe?", "criteria": ["none", "minor", "major"]}}
TOLERANCE = 2e-4      # answers are rounded to 4 decimals; a batched forward may differ from a single one by ~1e-6


def body(state: str, **extra) -> dict:
    return {"state": state, "questions": QUESTIONS, **extra}


@pytest.fixture(scope="module")
def backlog(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("backlog")
    (root / "media").mkdir()
    photo = image_bytes("PNG")
    (root / "media" / "unit.png").write_bytes(photo)
    (root / "media" / "hum.wav").write_bytes(wav_bytes(1.0))
    (root / "media" / "broken.png").write_bytes(photo[: len(photo) // 3])
    lines = [json.dumps(body("The fan rattles since the service visit.")),                           # 1
             json.dumps(body("Hums evenly, label readable.", labels={"visible": True})),            # 2
             "",                                                                                     # 3
             json.dumps(body("Photo and recording attached.", images=["media/unit.png"],            # 4
                             audio=["media/hum.wav"])),
             json.dumps(body("Inline photo.", images=["data:image/png;base64,"                       # 5
                                                      + base64.b64encode(photo).decode()])),
             json.dumps(body("This photo is cut short.", images=["media/broken.png"])),              # 6
             '{"state": "no closing brace", ',                                                       # 7
             json.dumps(body("Unit 8: smells of burnt plastic.", labels={"severity": 2}))]          # 8
    path = root / "in.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def run_batch(*args) -> int:
    return main(["batch", *map(str, args), "--quiet"])


@pytest.fixture(scope="module")
def in_process(backlog, tiny_dir) -> dict[int, dict]:
    out = backlog.parent / "out" / "in_process.jsonl"
    assert run_batch(backlog, "--out", out, "--model", tiny_dir, "--torch-threads", 1, "--max-batch-records", 4) == 1
    return read_batch_output(out)


def assert_close(got, want, where: str = "") -> None:
    """Equal JSON values, numbers within TOLERANCE."""
    if isinstance(want, float) or isinstance(got, float):
        assert math.isclose(got, want, abs_tol=TOLERANCE), f"{where}: {got} != {want}"
    elif isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want), f"{where}: {got} != {want}"
        for key in want:
            assert_close(got[key], want[key], f"{where}.{key}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{where}: {got} != {want}"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_close(g, w, f"{where}[{i}]")
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"


def decide(capsys, backlog: Path, tiny_dir: Path, number: int) -> dict:
    """What `omni decide` answers for line `number` (its path media passed as --image/--audio files)."""
    line = json.loads(backlog.read_text(encoding="utf-8").split("\n")[number - 1])
    line.pop("labels", None)
    flags = []
    for field, flag in (("images", "--image"), ("audio", "--audio")):
        if line.get(field) and not line[field][0].startswith("data:"):
            flags += [part for path in line.pop(field) for part in (flag, str(backlog.parent / path))]
    request = backlog.parent / f"decide_{number}.json"
    request.write_text(json.dumps(line), encoding="utf-8")
    capsys.readouterr()
    assert main(["decide", str(request), "--compact", "--model", str(tiny_dir), *flags]) == 0
    return json.loads(capsys.readouterr().out)


def test_in_process_answers_equal_omni_decide(in_process, backlog, tiny_dir, capsys):
    for number in (1, 2, 4, 5, 8):
        assert_close(in_process[number]["response"], decide(capsys, backlog, tiny_dir, number), f"line {number}")
    assert in_process[4]["response"]["x_usage"]["image"] > 0 and in_process[4]["response"]["x_usage"]["audio"] > 0


def test_corrupt_media_and_a_line_that_is_not_json_get_error_records_while_the_others_succeed(in_process):
    assert sorted(in_process) == [1, 2, 4, 5, 6, 7, 8]                 # the blank line 3 is no record
    assert {n for n, r in in_process.items() if "response" in r} == {1, 2, 4, 5, 8}
    corrupt, not_json = in_process[6]["error"], in_process[7]["error"]
    assert corrupt["status"] == 422 and corrupt["body"]["detail"][0]["loc"] == ["body", "images", 0]
    assert corrupt["body"]["detail"][0]["type"] == "corrupt_media" and "broken.png" in corrupt["body"]["detail"][0]["msg"]
    assert not_json["status"] == 422 and not_json["body"]["detail"][0]["type"] == "json_invalid"
    assert all(r["input"] == "../in.jsonl" for r in in_process.values())


def test_a_rerun_after_a_partial_output_computes_only_the_missing_lines(in_process, backlog, tiny_dir, capsys):
    out = backlog.parent / "out" / "partial.jsonl"
    kept = [json.dumps(in_process[n]) for n in (1, 4)]
    out.write_text("\n".join(kept) + "\n" + kept[0][:30], encoding="utf-8")     # and a torn last record
    assert run_batch(backlog, "--out", out, "--model", tiny_dir, "--torch-threads", 1) == 1
    records = read_batch_output(out)
    assert [json.loads(t)["line"] for t in out.read_text().splitlines()] == [1, 2, 4, 5, 6, 7, 8]   # one per line
    assert records[1] == in_process[1] and records[4] == in_process[4]           # 1 and 4 were not computed again
    for number in (2, 5, 8):
        assert_close(records[number]["response"], in_process[number]["response"], f"line {number}")
    before = out.read_bytes()
    for _ in range(2):    # issue 22, bug 15: lines wrong in themselves (422) are not retried, and nothing grows
        capsys.readouterr()
        assert run_batch(backlog, "--out", out, "--model", tiny_dir, "--torch-threads", 1) == 1
        assert out.read_bytes() == before
        assert "nothing to retry" in capsys.readouterr().err


@pytest.fixture(scope="module")
def keyed_server(tiny_dir, tmp_path_factory):
    server = Server(tmp_path_factory.mktemp("batch-serve"), "--model", str(tiny_dir), "--torch-threads", "1",
                    env={"OMNI_API_KEYS": "batch-key"}).wait_ready()
    yield server
    server.stop()


def test_url_mode_against_omni_serve_writes_the_same_records_as_in_process(in_process, backlog, keyed_server):
    out = backlog.parent / "out" / "remote.jsonl"
    assert run_batch(backlog, "--out", out, "--url", keyed_server.url, "--api-key", "batch-key") == 1
    remote = read_batch_output(out)
    assert sorted(remote) == sorted(in_process)
    for number, record in in_process.items():
        if "response" in record:
            got, want = dict(remote[number]), dict(record)
            got_audit, want_audit = got.pop("audit"), want.pop("audit")     # each decision's own record
            assert_close(got, want, f"line {number}")
            for part in ("model", "prompt", "media", "calibration"):         # what made it: the same either way
                assert got_audit[part] == want_audit[part], f"line {number}: audit {part}"
            continue
        got, want = remote[number]["error"], record["error"]
        assert got["status"] == want["status"] and remote[number]["input"] == record["input"]
        if number == 6:     # the message names the file either way: "file media/…" here, the multipart part there
            (g,), (w,) = got["body"]["detail"], want["body"]["detail"]
            assert (g["loc"], g["type"]) == (w["loc"], w["type"]) and "media/broken.png" in g["msg"]
        else:
            assert {**got["body"], "request_id": None} == {**want["body"], "request_id": None}


def test_url_mode_with_a_refused_key_stops_without_writing_records(backlog, keyed_server, tmp_path):
    out = tmp_path / "refused.jsonl"
    assert run_batch(backlog, "--out", out, "--url", keyed_server.url, "--api-key", "wrong", "--concurrency", 1) == 3
    assert read_batch_output(out) == {}                 # no line is blamed for the server's refusal


def test_a_fully_answered_backlog_loads_no_model(in_process, backlog, tmp_path, capsys):
    out = tmp_path / "done.jsonl"
    shutil.copy(backlog.parent / "out" / "in_process.jsonl", out)
    with open(out, "a", encoding="utf-8") as records:     # pretend lines 6 and 7 were answered by a later run
        records.writelines(json.dumps({"line": n, "input": "x", "response": {"answers": {}}}) + "\n" for n in (6, 7))
    assert run_batch(backlog, "--out", out, "--model", tmp_path / "no-such-checkpoint") == 0
    assert "every line" in capsys.readouterr().err


def test_quiet_prints_no_progress_bar_not_even_while_the_weights_load(backlog, tiny_dir, tmp_path):
    """Issue 22, bug 10: `--quiet` still drew transformers' "Loading weights" bar (a process of its own here: the
    switch is process-wide)."""
    import subprocess
    import sys

    one = tmp_path / "one.jsonl"
    one.write_text(backlog.read_text(encoding="utf-8").split("\n")[0] + "\n", encoding="utf-8")
    run = subprocess.run([sys.executable, "-m", "api.cli.main", "batch", str(one), "--out", str(tmp_path / "o.jsonl"),
                          "--model", str(tiny_dir), "--torch-threads", "1", "--quiet"], capture_output=True, text=True,
                         timeout=300, check=False)
    assert run.returncode == 0, run.stderr
    assert "Loading weights" not in run.stderr and "it/s]" not in run.stderr, run.stderr
