"""A video bank behind `omni serve` (the real app and engine, the FakeModel behind them, the real vPDQ hasher in its
worker process): a re-encoded copy of a banked video is acted on without a forward pass, named by `x_match` with
how much of each video matched; a video that cannot be hashed gets the model's own answer and is counted; the admin
route says how many vpdq entries a bank holds. Skips without the `vpdq` package unless `OMNI_REQUIRE_VPDQ=1`."""
from __future__ import annotations

import json
import os

import pytest

from preprocess.hashes import vpdq_available
from tests.unit.http.serving import body, served

if not vpdq_available():
    if os.environ.get("OMNI_REQUIRE_VPDQ"):
        pytest.fail("OMNI_REQUIRE_VPDQ=1 but the vpdq package is not installed (bash scripts/bootstrap.sh --tests)",
                    pytrace=False)
    pytest.skip("the vpdq package is not installed", allow_module_level=True)

from tests.unit.banks.test_vpdq import clip, entry_of, reencoded
from tests.unit.http.test_banks_http import metric

HEADER = "hash_type,hash,label,action,source,added\n"


def upload_video(client, data: bytes):
    return client.post("/v1/systemone", data={"request": json.dumps(body())},
                       files=[("videos", ("clip.mp4", data, "video/mp4"))])


def test_a_reencoded_copy_of_a_banked_video_is_acted_on_without_the_model(tmp_path):
    banked = clip(3.0)
    entry = entry_of(banked, action="act")
    bank = tmp_path / "videos.csv"
    bank.write_text(HEADER + f'vpdq,"{entry.hash}",known-clip,act,test,2026-12-04T10:00:00+00:00\n')
    with served(bank=(str(bank),)) as (client, engine):
        before = engine.model.forwards_started
        matched = upload_video(client, reencoded(banked, 240, 180))
        assert matched.status_code == 200, matched.text
        wire = matched.json()
        assert wire["answers"] == {} and engine.model.forwards_started == before
        match = wire["x_match"]
        assert (match["bank"], match["label"], match["hash_type"], match["medium"], match["action"]) == \
            ("videos", "known-clip", "vpdq", "videos[0]", "act")
        assert match["banked_match_percent"] >= 80.0 and 0 <= match["distance"] <= 31
        assert wire["x_outcome"]["by"] == "bank"
        other = upload_video(client, clip(3.0, seed=9))                        # another video: the model answers
        assert other.status_code == 200 and "x_match" not in other.json()
        assert engine.model.forwards_started == before + 1
        broken = upload_video(client, banked[: len(banked) // 3])             # cannot be hashed: the model's answer
        assert broken.status_code < 500 and "x_match" not in broken.text
        described = client.get("/v1/admin/banks").json()
        metrics = client.get("/metrics").text
    assert [(b["name"], b["vpdq_entries"]) for b in described["banks"]] == [("videos", 1)]
    assert metric(metrics, 'omni_bank_hash_failures_total{slot="videos"}') == 1
    assert metric(metrics, 'omni_bank_matches_total{action="act",bank="videos",decided="true"}') == 1
    assert "\nomni_bank_vpdq_workers 1.0\n" in metrics            # one worker, never stopped
    for reason in ("died", "interrupted", "timeout", "unwanted"):
        assert f'\nomni_bank_vpdq_workers_stopped_total{{reason="{reason}"}} 0.0\n' in metrics
