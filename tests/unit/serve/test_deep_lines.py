"""JSON lines nested thousands deep in the files the tools read back (a decision log, a batch output): a record
that is not one (ValueError, as for any unreadable line) or a line skipped, never a RecursionError."""
from __future__ import annotations

import pytest

from omni.contract.batch_file import read_batch_output
from omni.serve.decision_log_files import parse_record

DEEP = b"[" * 100_000


def test_a_deep_decision_log_line_is_not_a_record():
    with pytest.raises(ValueError, match="not a decision-log record"):
        parse_record(DEEP)


def test_a_deep_batch_output_line_is_skipped(tmp_path):
    path = tmp_path / "out.jsonl"
    path.write_bytes(DEEP + b'\n{"line": 1, "error": {"status": 422, "body": {}}}\n')
    assert list(read_batch_output(path)) == [1]
