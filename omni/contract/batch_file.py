"""The batch output file (`omni batch IN.jsonl --out OUT.jsonl`): one JSON record per answered or failed input line.

    {"line": N, "input": "<IN.jsonl, relative to OUT's folder when possible>", "response": <the System One answer>,
     "audit": <the decision's audit record, omni.contract.audit>}
    {"line": N, "input": "...", "error": {"status": <HTTP status>, "body": <the service's error body>}}

Lines are numbered from 1 as in the input file. Records are appended as answers finish (any order); a rerun appends
again, so a reader takes the LAST record of each line. A torn last record (a crash mid-write) is ignored.
Knows nothing of the engine, HTTP or how the answers were computed.
"""
from __future__ import annotations

import json
from pathlib import Path

from omni.contract.json_values import JSONObject


def read_batch_output(path: str | Path) -> dict[int, JSONObject]:
    """Line number -> its last record; unreadable records (a torn last write) are skipped."""
    records: dict[int, JSONObject] = {}
    path = Path(path)
    if not path.exists():
        return records
    for text in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(text)
        except (ValueError, RecursionError):    # not JSON, or nested past what the parser can hold: not a record
            continue
        if isinstance(record, dict) and isinstance(record.get("line"), int) and ("response" in record
                                                                                 or "error" in record):
            records[record["line"]] = record
    return records
