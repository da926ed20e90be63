"""Review directories: the labelled dataset a review produces, and where its files live.

A review directory holds `labels.jsonl`: one System One request per line with the reviewer's `labels`, in exactly
the dataset format `omni eval`, `omni calibrate` and `omni finetune` read (`omni.learn.dataset`); its media files
live under `media/` beside it and are named in the lines by paths relative to the directory.
Knows nothing of HTTP, the engine or the model.
"""
from __future__ import annotations

from pathlib import Path

REVIEW_DATASET_FILE = "labels.jsonl"
REVIEW_MEDIA_DIR = "media"


def dataset_path(path: str | Path) -> Path:
    """A dataset file as given, or the labelled dataset inside a review directory."""
    path = Path(path)
    return path / REVIEW_DATASET_FILE if path.is_dir() else path
