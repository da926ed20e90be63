"""`omni bank check` and `omni bank lookup` as a user runs them: what a bank holds, what a re-uploaded photo and a
recording match (the photo by PDQ within the threshold, the recording by its bytes), and every mistake one line on
stderr with exit 2."""
from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parents[3]
BANK = ROOT / "examples" / "banks" / "known.csv"


def omni(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "api.cli.main", "bank", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)


def test_check_says_what_a_bank_holds():
    done = omni("check", BANK)
    assert done.returncode == 0, done.stderr
    [summary] = [json.loads(line) for line in done.stdout.splitlines()]
    assert summary["bank"] == "known" and summary["entries"] == 2
    assert summary["hash_types"] == {"pdq": 1, "sha256": 1} and summary["actions"] == {"flag": 1, "review": 1}
    assert len(summary["version"]) == 64


def test_lookup_finds_a_reencoded_photo_and_the_recording_and_nothing_for_the_clip(tmp_path):
    image = Image.open(ROOT / "examples" / "inspection" / "unit.png").convert("RGB")
    buffer = io.BytesIO()
    image.resize((image.width * 3 // 4, image.height * 3 // 4)).save(buffer, "JPEG", quality=70)
    copy = tmp_path / "reupload.jpg"
    copy.write_bytes(buffer.getvalue())
    done = omni("lookup", BANK, "--image", copy, "--file", ROOT / "examples" / "inspection" / "hum.wav",
                "--file", ROOT / "examples" / "inspection" / "fan.mp4")
    assert done.returncode == 0, done.stderr
    photo, hum, clip = (json.loads(line) for line in done.stdout.splitlines())
    [match] = photo["matches"]
    assert match["label"] == "demo-unit-photo" and match["hash_type"] == "pdq" and 0 < match["distance"] <= 31
    assert match["action"] == "flag" and match["line"] == 2 and photo["pdq_quality"] >= 50
    assert [m["label"] for m in hum["matches"]] == ["demo-hum-recording"] and hum["matches"][0]["distance"] == 0
    assert clip["matches"] == [] and len(clip["hashes"]["sha256"]) == 64
    strict = omni("lookup", BANK, "--image", copy, "--pdq-threshold", "0")
    assert json.loads(strict.stdout)["matches"] == []


def test_every_mistake_is_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text(BANK.read_text().replace(",flag,", ",delete,"))
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n not really")
    cases = [(("check", bad), f"{bad}: line 2: action: 'delete' is not one of act, review, pass, flag"),
             (("check", tmp_path / "none.csv"), "cannot be read"),
             (("lookup", BANK), "give at least one --image PHOTO, --video CLIP or --file ANY"),
             (("lookup", BANK, "--image", broken), "broken.png"),
             (("lookup", BANK, "--image", broken, "--pdq-threshold", "64"), "outside 0..63")]
    for args, expected in cases:
        done = omni(*args)
        assert done.returncode == 2 and expected in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_add_banks_the_media_of_the_items_reviewers_labelled_so_and_skips_what_is_banked(tmp_path):
    from fixtures.inspection import write_split

    review = tmp_path / "review"
    labels = [json.loads(line) for line in write_split(review, "labels", 8, seed=3).read_text().splitlines()]
    chosen = [record for record in labels if record["labels"]["label_visible"] is False]
    assert 0 < len(chosen) < len(labels)
    bank = tmp_path / "nameplate-missing.csv"
    args = ("add", bank, "--from", review, "--where", "label_visible=false", "--action", "review",
            "--label", "no-nameplate")
    done = omni(*args)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["items"] == len(chosen) and summary["added"] == summary["media"] == 3 * len(chosen)
    listed = json.loads(omni("check", bank).stdout)
    assert listed["entries"] == 3 * len(chosen) and listed["actions"] == {"review": 3 * len(chosen)}
    assert listed["hash_types"] == {"pdq": len(chosen), "sha256": len(chosen), "vpdq": len(chosen)}
    # the banked photos and videos are found again, by PDQ and vPDQ, from the review directory's own files
    photo, video = review / chosen[0]["images"][0], review / chosen[0]["videos"][0]
    found = json.loads(omni("lookup", bank, "--image", photo).stdout)["matches"]
    assert found and found[0]["label"] == "no-nameplate" and found[0]["distance"] == 0
    [by_frames] = [m for m in json.loads(omni("lookup", bank, "--video", video).stdout)["matches"]
                   if m["hash_type"] == "vpdq"]
    assert by_frames["distance"] == 0 and by_frames["banked_match_percent"] == 100.0
    again = json.loads(omni(*args).stdout)                                 # nothing twice
    assert again["added"] == 0 and again["already_banked"] == 3 * len(chosen)
    before = bank.read_bytes()
    refused = omni(*args[:-1], "x" * 200)                                  # a label the bank cannot hold
    assert refused.returncode == 2 and "--label: 1-128 characters, not 200" in refused.stderr
    assert bank.read_bytes() == before                                    # the bank is left as it was
    wrong = omni("add", bank, "--from", review, "--where", "colour=red", "--action", "act", "--label", "x")
    assert wrong.returncode == 2 and "no item of" in wrong.stderr


def test_add_flagged_banks_the_media_of_the_items_a_reviewer_flagged(tmp_path):
    from fixtures.inspection import inspection_sample
    from omni.contract.config import EngineConfig
    from omni.contract.request import parse_request
    from omni.contract.request_line import file_media
    from omni.review.directory import ReviewDir

    review = ReviewDir(tmp_path / "review")
    keys = []
    for index in range(3):                     # three decisions a server kept; the reviewers flag two of them
        body, files = inspection_sample(5, index)
        (tmp_path / "media").mkdir(exist_ok=True)
        for name, data in files.items():
            (tmp_path / "media" / name).write_bytes(data)
        stripped, parts, _ = file_media(body, tmp_path)
        keys.append(review.keep_decision(parse_request(stripped, EngineConfig(), parts), {"answers": {}}))
    review.note(keys[0], "flag", "known bad", reviewer="alice")
    review.note(keys[2], "flag", "also known", reviewer="bob")
    bank = tmp_path / "flagged.jsonl"
    done = omni("add", bank, "--from", tmp_path / "review", "--flagged", "--action", "act", "--label", "flagged")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"bank": str(bank), "items": 2, "media": 6, "added": 6, "already_banked": 0}
    entries = [json.loads(line) for line in bank.read_text().splitlines()]
    assert {e["source"] for e in entries} == {f"review:review#{keys[0]}", f"review:review#{keys[2]}"}
    assert sorted(e["hash_type"] for e in entries) == ["pdq", "pdq", "sha256", "sha256", "vpdq", "vpdq"]
    both = omni("add", bank, "--from", tmp_path / "review", "--flagged", "--where", "x=y", "--action", "act",
                "--label", "x")
    assert both.returncode == 2 and "not allowed with argument" in both.stderr


def blocked_on_a_lock(pid: int) -> bool:
    """The kernel's own word (/proc/locks: a waiter's line starts with "->") that `pid` waits for a lock."""
    return any(fields[1] == "->" and fields[5] == str(pid)      # "1: -> FLOCK ADVISORY WRITE <pid> ..."
               for fields in map(str.split, Path("/proc/locks").read_text().splitlines()) if len(fields) > 5)


def test_add_keeps_the_banks_own_column_order_and_waits_for_another_add(tmp_path):
    import fcntl
    import time

    from fixtures.inspection import write_split

    review = tmp_path / "review"
    write_split(review, "labels", 4, seed=3)
    bank = tmp_path / "reordered.csv"
    bank.write_text("label,hash_type,hash,action,source,added\n"
                    f"kept,sha256,{'a' * 64},flag,test,2026-12-01T10:00:00Z\n", encoding="utf-8")
    args = ("add", bank, "--from", review, "--where", "label_visible=true", "--action", "review", "--label", "ok")
    with open(tmp_path / ".reordered.csv.lock", "a+b") as lock:        # another add holds the bank
        fcntl.flock(lock, fcntl.LOCK_EX)
        waiting = subprocess.Popen([sys.executable, "-m", "api.cli.main", "bank", *map(str, args)], cwd=ROOT,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 90
        while waiting.poll() is None and time.monotonic() < deadline and not blocked_on_a_lock(waiting.pid):
            time.sleep(0.05)
        try:
            assert blocked_on_a_lock(waiting.pid), waiting.poll()     # it waits (it did not read and write the bank)
            assert bank.read_text().count("\n") == 2
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    out, err = waiting.communicate(timeout=120)
    assert waiting.returncode == 0, err
    assert json.loads(out)["added"] > 0
    listed = json.loads(omni("check", bank).stdout)                        # the bank still reads, every row in place
    assert listed["entries"] == 1 + json.loads(out)["added"]
    assert bank.read_text().splitlines()[0] == "label,hash_type,hash,action,source,added"
    assert not list(tmp_path.glob(".reordered.csv.*.tmp"))               # no temporary file left behind
