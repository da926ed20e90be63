"""Hash banks behind `omni serve` (the real app and engine, the FakeModel behind them, real PDQ and sha256): a flag
rides along the model's answer; act answers without a forward pass (no answers, `x_match`, the outcome `by: bank`,
an audit record that says so); pass only when every medium passed; review goes to the review queue with the bank as
the reason; reloads by the admin route and by SIGHUP, a bad file keeping the banks in force; /metrics; the decision
log names the bank and its version; a photo that cannot be hashed still gets the model's answer, counted."""
from __future__ import annotations

import hashlib
import json
import signal
from pathlib import Path

import pytest

from api.http.app import create_app
from fixtures import media as fm
from omni.banks.entries import BankError
from omni.serve.decision_log_files import read_records
from omni.serve.replay import replay
from preprocess.hashes import pdq_of_image
from preprocess.item import MediaItem
from tests.unit.http.serving import body, served, settings_with, wait_until

ADDED = "2026-12-04T10:00:00+00:00"
HEADER = "hash_type,hash,label,action,source,added\n"
PHOTO = fm.image_bytes("PNG", "RGB", 96, 64)
OTHER = fm.image_bytes("PNG", "RGB", 80, 90)
POLICY = 'version = "p1"\n[questions.ok]\nauto_at = 0.4\nact_on = [false]\n'


def write_bank(path: Path, *rows: tuple[str, str, str]) -> Path:
    """rows: (hash_type, hash, action); labels name the row."""
    path.write_text(HEADER + "".join(f"{t},{h},row{i},{a},test,{ADDED}\n" for i, (t, h, a) in enumerate(rows)),
                    encoding="utf-8")
    return path


def pdq(data: bytes) -> str:
    return pdq_of_image(MediaItem("images", 0, data)).hex


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def upload(client, *photos: bytes, x_audit: bool = False, request_id: str = "r"):
    files = [("images", (f"p{i}.png", data, "image/png")) for i, data in enumerate(photos)]
    return client.post("/v1/systemone", data={"request": json.dumps(body(x_audit=x_audit))}, files=files,
                       headers={"x-request-id": request_id})


def metric(text: str, prefix: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix))


def test_a_flag_rides_along_the_models_answer(tmp_path):
    bank = write_bank(tmp_path / "watch.csv", ("pdq", pdq(PHOTO), "flag"))
    with served(bank=(str(bank),)) as (client, engine):
        before = engine.model.forwards_started
        response = upload(client, PHOTO, x_audit=True)
        assert response.status_code == 200
        wire = response.json()
        assert set(wire["answers"]) == {"ok", "team", "level"} and engine.model.forwards_started == before + 1
        assert wire["x_match"] == {"bank": "watch", "version": sha(bank.read_bytes()), "label": "row0", "distance": 0,
                                   "action": "flag", "medium": "images[0]", "hash_type": "pdq", "source": "test",
                                   "line": 2}
        assert wire["x_audit"]["match"] == wire["x_match"]
        assert wire["x_audit"]["banks"] == [{"name": "watch", "version": sha(bank.read_bytes())}]
        assert "match;dur=" in response.headers["server-timing"]
        plain = client.post("/v1/systemone", json=body()).json()          # no media: nothing to look up
        assert "x_match" not in plain
        metrics = client.get("/metrics").text
    assert metric(metrics, 'omni_bank_matches_total{action="flag",bank="watch",decided="false"}') == 1
    assert metric(metrics, "omni_bank_lookups_total") == 1


def test_act_answers_without_a_forward_pass(tmp_path):
    bank = write_bank(tmp_path / "known.csv", ("sha256", sha(PHOTO), "act"))
    with served(bank=(str(bank),), policy=str(write_policy(tmp_path))) as (client, engine):
        before = engine.model.forwards_started
        wire = upload(client, PHOTO, x_audit=True).json()
        assert engine.model.forwards_started == before                   # no forward ran
        assert wire["answers"] == {} and wire["usage"] == {"input_tokens": 0, "output_tokens": 0}
        assert wire["x_match"]["action"] == "act" and wire["x_match"]["hash_type"] == "sha256"
        assert wire["x_outcome"]["overall"] == "act" and wire["x_outcome"]["by"] == "bank"
        assert wire["x_outcome"]["policy"]["version"] == "p1"
        assert wire["x_audit"]["runtime"]["batch_size"] == 0 and wire["x_audit"]["probabilities"] is None
        cloudflare = client.post("/accounts/a/ai/run/@cf/cloudflare/clef-omni",
                                 data={"request": json.dumps(body(model="clef-omni"))},
                                 files={"images": ("p.png", PHOTO, "image/png")}).json()
        assert cloudflare["result"]["x_match"]["action"] == "act"
        modelled = upload(client, OTHER).json()                          # another photo: the model as always
        assert set(modelled["answers"]) == {"ok", "team", "level"} and "x_match" not in modelled
        metrics = client.get("/metrics").text
    assert metric(metrics, 'omni_bank_matches_total{action="act",bank="known",decided="true"}') == 2
    assert metric(metrics, 'omni_outcomes_total{outcome="act",policy_version="p1",question="_overall"}') >= 2


def write_policy(tmp_path: Path) -> Path:
    path = tmp_path / "policy.toml"
    path.write_text(POLICY, encoding="utf-8")
    return path


def test_pass_answers_only_when_every_photo_passed(tmp_path):
    bank = write_bank(tmp_path / "good.csv", ("sha256", sha(PHOTO), "pass"))
    with served(bank=(str(bank),)) as (client, engine):
        before = engine.model.forwards_started
        alone = upload(client, PHOTO).json()
        assert alone["answers"] == {} and alone["x_outcome"] == {"overall": "pass", "questions": {}, "policy": None,
                                                                 "by": "bank"}
        assert engine.model.forwards_started == before
        beside = upload(client, PHOTO, OTHER).json()                     # an unknown photo beside: the model answers
        assert set(beside["answers"]) == {"ok", "team", "level"} and beside["x_match"]["action"] == "pass"
        assert "x_outcome" not in beside and engine.model.forwards_started == before + 1


def test_review_goes_to_the_review_queue_with_the_bank_as_the_reason(tmp_path):
    bank = write_bank(tmp_path / "suspect.csv", ("pdq", pdq(PHOTO), "review"))
    review = tmp_path / "review"
    with served(bank=(str(bank),), policy=str(write_policy(tmp_path)), review_dir=str(review)) as (client, _):
        wire = upload(client, PHOTO, request_id="to-review").json()
        assert wire["x_outcome"]["overall"] == "review"
        wait_until(lambda: any(review.rglob("*.jsonl")), what="the kept decision")
        kept = [json.loads(line) for path in review.rglob("*.jsonl") for line in path.read_text().splitlines()]
    [record] = [k for k in kept if json.dumps(k).count("to-review")]
    text = json.dumps(record)
    assert '"bank": "suspect"' in text and '"label": "row0"' in text


def test_without_a_policy_a_banks_answer_is_kept_for_review_like_every_decision(tmp_path):
    bank = write_bank(tmp_path / "suspect.csv", ("sha256", sha(PHOTO), "review"))
    with served(bank=(str(bank),), review_dir=str(tmp_path / "review")) as (client, _):
        assert upload(client, PHOTO, request_id="kept-bank").json()["x_outcome"]["overall"] == "review"
        assert upload(client, OTHER, request_id="kept-model").status_code == 200
        wait_until(lambda: client.get("/v1/review/queues").json()["queues"][0]["items"] == 2, what="two kept")
        [queue] = client.get("/v1/review/queues").json()["queues"]
        assert queue["id"] == "kept"
        keys = [item["key"] for item in client.get("/v1/review/queues/kept/items").json()["items"]]
        shown = [client.get(f"/v1/review/queues/kept/items/{key}").json() for key in keys]
        assert sorted(bool(item["answers"]) for item in shown) == [False, True]   # the bank's has no answers


def test_reload_by_the_route_and_by_sighup_and_a_bad_file_keeps_the_banks_in_force(tmp_path):
    from api.cli.serve import _reload_on_sighup

    bank = write_bank(tmp_path / "known.csv")
    with served(bank=(str(bank),)) as (client, _):
        assert client.get("/v1/admin/banks").json()["banks"][0]["entries"] == 0
        assert "x_match" not in upload(client, PHOTO).json()
        write_bank(bank, ("sha256", sha(PHOTO), "act"))
        reloaded = client.post("/v1/admin/banks/reload")
        assert reloaded.status_code == 200 and reloaded.json()["reloads"] == 1
        assert reloaded.json()["banks"][0]["version"] == sha(bank.read_bytes())
        assert upload(client, PHOTO).json()["x_match"]["action"] == "act"
        bank.write_text(HEADER + f"pdq,{'0' * 63},bad,act,test,{ADDED}\n", encoding="utf-8")
        refused = client.post("/v1/admin/banks/reload")
        assert refused.status_code == 422 and refused.json()["detail"]["error_type"] == "bank_error"
        assert "known.csv: line 2: hash" in refused.json()["detail"]["message"]
        assert upload(client, PHOTO).json()["x_match"]["action"] == "act"          # still the banks in force
        previous = signal.getsignal(signal.SIGHUP)
        try:
            _reload_on_sighup(client.app.state.service)
            write_bank(bank, ("sha256", sha(PHOTO), "flag"))
            signal.raise_signal(signal.SIGHUP)
            wait_until(lambda: client.get("/v1/admin/banks").json()["reloads"] == 2, what="the SIGHUP reload")
            assert upload(client, PHOTO).json()["x_match"]["action"] == "flag"
        finally:
            signal.signal(signal.SIGHUP, previous)
        metrics = client.get("/metrics").text
    assert metric(metrics, 'omni_bank_reloads_total{result="ok"}') == 2
    assert metric(metrics, 'omni_bank_reloads_total{result="error"}') == 1
    assert metric(metrics, 'omni_bank_entries{bank="known"') == 1


def test_without_banks_the_admin_routes_say_how_to_start_with_them():
    with served() as (client, _):
        for response in (client.get("/v1/admin/banks"), client.post("/v1/admin/banks/reload")):
            assert response.status_code == 404 and "--bank FILE" in response.json()["detail"]["message"]


def test_the_decision_log_names_the_bank_and_its_version(tmp_path):
    bank = write_bank(tmp_path / "known.csv", ("sha256", sha(PHOTO), "act"), ("pdq", pdq(OTHER), "flag"))
    log_dir = tmp_path / "log"
    with served(bank=(str(bank),), decision_log=str(log_dir)) as (client, engine):
        assert upload(client, PHOTO, request_id="banked").status_code == 200
        assert upload(client, OTHER, request_id="flagged").status_code == 200
    records = {r.record["request_id"]: r.record for r in read_records(log_dir)}
    banked = [r for r in read_records(log_dir) if r.record["request_id"] == "banked"]
    [replayed] = replay(engine, banked, parse=lambda body, directory: pytest.fail("nothing to parse"))
    assert replayed.status == "unreplayable" and "a hash bank answered it without the model (known" in replayed.reason
    version = sha(bank.read_bytes())
    for request_id, action in (("banked", "act"), ("flagged", "flag")):
        audit = records[request_id]["audit"]
        assert audit["match"]["action"] == action and audit["match"]["version"] == version
        assert audit["banks"] == [{"name": "known", "version": version}]
        assert records[request_id]["response"]["x_match"] == audit["match"]


def test_a_photo_that_cannot_be_hashed_gets_the_models_answer_and_is_counted(tmp_path):
    bank = write_bank(tmp_path / "known.csv", ("pdq", pdq(PHOTO), "act"))
    broken = PHOTO[:70]
    with served(bank=(str(bank),)) as (client, _):
        response = upload(client, broken)
        metrics = client.get("/metrics").text
    assert response.status_code < 500 and "x_match" not in response.text     # the model's own answer for it
    assert metric(metrics, 'omni_bank_hash_failures_total{slot="images"}') == 1


@pytest.mark.parametrize(("make", "message"), [
    (lambda d: write_bank(d / "bad.csv", ("pdq", "xyz", "act")), "bad.csv: line 2: hash"),
    (lambda d: write_bank(d / "bad.csv", ("md5", "0" * 64, "act")), "bad.csv: line 2: hash_type"),
    (lambda d: write_bank(d / "bad.csv", ("sha256", "0" * 64, "act"), ("sha256", "0" * 64, "flag")),
     "already on line 2"),
    (lambda d: d / "missing.csv", "missing.csv: cannot be read"),
])
def test_a_bad_bank_file_stops_the_start_naming_file_line_and_field(tmp_path, make, message):
    with pytest.raises(BankError, match=message):
        create_app(settings_with(bank=(str(make(tmp_path)),)))


def test_a_bad_threshold_setting_is_named(tmp_path):
    from api.http.settings import SettingsError

    bank = write_bank(tmp_path / "known.csv")
    with pytest.raises(SettingsError, match="bank_pdq_threshold 'known=64'"):
        settings_with(bank=(str(bank),), bank_pdq_threshold=("known=64",))
    with pytest.raises(BankError, match="names the bank 'other'"):
        create_app(settings_with(bank=(str(bank),), bank_pdq_threshold=("other=20",)))


def test_the_banks_are_consulted_off_the_event_loop_for_small_and_large_bodies(tmp_path, monkeypatch):
    """A small body is parsed on the event loop, but its media's hashes (a photo's decode, a video's wait for its
    vPDQ worker: up to --bank-vpdq-timeout-s for a hostile file) would hold up every other request there."""
    import asyncio

    from omni.banks.matching import BankSet

    consulted_on_loop: list[bool] = []
    consult = BankSet.consult

    def recording(self, items, *args):
        try:
            asyncio.get_running_loop()
            consulted_on_loop.append(True)
        except RuntimeError:
            consulted_on_loop.append(False)
        return consult(self, items, *args)

    monkeypatch.setattr(BankSet, "consult", recording)
    import io

    import numpy as np
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(np.random.default_rng(5).integers(0, 256, (120, 160, 3), dtype=np.uint8)).save(out, "PNG")
    large = out.getvalue()                                            # noise: it does not compress
    assert len(PHOTO) < 8 * 1024 and len(large) > 32 * 1024           # either side of the inline-parse size
    bank = write_bank(tmp_path / "watch.csv", ("pdq", pdq(PHOTO), "flag"))
    with served(bank=(str(bank),)) as (client, _):
        small_answer, large_answer = upload(client, PHOTO), upload(client, large)
    assert small_answer.json()["x_match"]["label"] == "row0" and large_answer.status_code == 200
    assert consulted_on_loop == [False, False]


def test_a_server_that_shows_every_audit_record_shows_a_bank_answers_too(tmp_path):
    """`--audit always`: every response carries its audit record, the bank's answers (no forward pass) as well."""
    bank = write_bank(tmp_path / "known.csv", ("sha256", sha(PHOTO), "act"))
    with served(bank=(str(bank),), audit="always") as (client, _engine):
        acted, modelled = upload(client, PHOTO).json(), upload(client, OTHER).json()
    assert acted["x_match"]["action"] == "act" and acted["x_audit"]["prompt"]["template"] == "none"
    assert acted["x_audit"]["match"] == acted["x_match"] and "x_match" not in modelled and modelled["x_audit"]


class HeldHasher:
    """Stands in for the vPDQ worker: every video hashes to one frame of `hex`, once `released` is set."""

    def __init__(self, monkeypatch, hex_digits: str):
        import threading
        from types import SimpleNamespace

        from omni.banks.video_hasher import VideoHasher

        self.released, self.asked = threading.Event(), threading.Event()

        def features(hasher, item, limits=None, cancelled=None):
            self.asked.set()
            self.released.wait(30)
            return (SimpleNamespace(quality=100, hex=hex_digits),)

        monkeypatch.setattr(VideoHasher, "features", features)
        monkeypatch.setattr(VideoHasher, "warm", lambda hasher: None)


def post_in_background(client, files):
    import threading

    answer: dict = {}

    def post():
        answer["response"] = client.post("/v1/systemone", data={"request": json.dumps(body())}, files=files)

    thread = threading.Thread(target=post)
    thread.start()
    return thread, answer


VIDEO = fm.video_bytes(seconds=1.0, width=64, height=48)


@pytest.mark.parametrize(("frame", "banked"), [("f" * 64, False), ("0" * 64, True)])
def test_a_requests_media_are_decoded_for_the_model_while_its_video_is_hashed(tmp_path, monkeypatch, frame, banked):
    """A video's vPDQ hash takes about a second for a 1080p phone clip: meanwhile the request's media are decoded for
    the model, which waits before the forward pass until the banks answer. Unmatched: the model answers (the wait was
    the longer of the two, not their sum); an act match: the bank answers, and the decoded request is dropped
    without a forward pass."""
    pytest.importorskip("vpdq")
    held = HeldHasher(monkeypatch, frame)
    bank = write_bank(tmp_path / "videos.csv", ("vpdq", f'"0,100,{"0" * 64},0.000"', "act"))
    with served(bank=(str(bank),)) as (client, engine):
        model = engine.model
        thread, answer = post_in_background(client, [("images", ("p.png", OTHER, "image/png")),
                                                     ("videos", ("v.mp4", VIDEO, "video/mp4"))])
        try:
            wait_until(held.asked.is_set, what="the video's hash asked for")
            wait_until(lambda: len(model.seen) == 1, 10, what="the media decoded for the model during the hash")
            assert model.forwards_started == 0 and not answer
        finally:
            held.released.set()
            thread.join(30)
        wire = answer["response"].json()
        if banked:
            assert wire["answers"] == {} and wire["x_match"]["hash_type"] == "vpdq" and model.forwards_started == 0
        else:
            assert set(wire["answers"]) == {"ok", "team", "level"} and "x_match" not in wire
            assert model.forwards_started == 1
        wait_until(lambda: engine._in_flight == 0, what="the engine's place given back")


def test_a_photos_act_match_never_starts_the_models_decoding(tmp_path, monkeypatch):
    """The model's media are only decoded once the request waits on its videos alone: a photo matched by an act entry
    answers before that, and the model never sees the request."""
    pytest.importorskip("vpdq")
    held = HeldHasher(monkeypatch, "f" * 64)
    bank = write_bank(tmp_path / "known.csv", ("pdq", pdq(PHOTO), "act"), ("vpdq", f'"0,100,{"0" * 64},0.000"', "flag"))
    try:
        with served(bank=(str(bank),)) as (client, engine):
            response = client.post("/v1/systemone", data={"request": json.dumps(body())},
                                   files=[("images", ("p.png", PHOTO, "image/png")),
                                          ("videos", ("v.mp4", VIDEO, "video/mp4"))])
            assert response.json()["x_match"]["hash_type"] == "pdq" and engine.model.seen == []
    finally:
        held.released.set()
