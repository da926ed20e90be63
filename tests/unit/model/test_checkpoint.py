"""Where a checkpoint's release date comes from: config.json, else the head file's metadata, else its file date."""
from __future__ import annotations

import datetime as dt
import json
import os

import torch
from safetensors.torch import save_file

from omni.model.checkpoint import DEMO_CHECKPOINT_DIR, release_date


def head_file(directory, metadata=None):
    save_file({"w": torch.zeros(2)}, str(directory / "joint_head.safetensors"), metadata=metadata)


def test_config_release_date_wins_over_the_head_metadata(tmp_path):
    head_file(tmp_path, {"release_date": "2026-10-01"})
    (tmp_path / "config.json").write_text(json.dumps({"release_date": "2026-10-09"}))
    assert release_date(tmp_path) == "2026-10-09"


def test_head_metadata_then_file_date(tmp_path):
    head_file(tmp_path, {"release_date": "2026-10-01"})
    (tmp_path / "config.json").write_text(json.dumps({"release_date": "not a date"}))
    assert release_date(tmp_path) == "2026-10-01"
    head_file(tmp_path)                                   # no metadata: the file's own date (UTC)
    stamp = dt.datetime(2026, 3, 4, 12, tzinfo=dt.timezone.utc).timestamp()
    os.utime(tmp_path / "joint_head.safetensors", (stamp, stamp))
    assert release_date(tmp_path) == "2026-03-04"


def test_the_embedded_demo_carries_the_day_it_was_trained():
    assert release_date(DEMO_CHECKPOINT_DIR) == "2026-11-29"
