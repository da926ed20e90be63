"""A bank file read and checked: CSV and JSONL give the same entries; every mistake names the file, line and field."""
from __future__ import annotations

import hashlib
import json

import pytest

from omni.banks.entries import BankError, read_bank

PDQ = "f" * 63 + "0"
SHA = hashlib.sha256(b"x").hexdigest()
ROWS = [{"hash_type": "pdq", "hash": PDQ.upper(), "label": "known-bad", "action": "act", "source": "ncmec",
         "added": "2026-12-01T10:00:00Z"},
        {"hash_type": "sha256", "hash": SHA, "label": "approved-logo", "action": "flag", "source": "review:alice",
         "added": "2026-12-02T09:30:00+01:00"}]
CSV_HEADER = "hash_type,hash,label,action,source,added\n"


def csv_text(rows: list[dict]) -> str:
    return CSV_HEADER + "".join(",".join(row[k] for k in ("hash_type", "hash", "label", "action", "source",
                                                            "added")) + "\n" for row in rows)


def test_csv_and_jsonl_give_the_same_entries_and_the_version_is_the_files_sha256(tmp_path):
    (tmp_path / "known.csv").write_text(csv_text(ROWS))
    (tmp_path / "known.jsonl").write_text("".join(json.dumps(row) + "\n" for row in ROWS) + "\n")
    from_csv, from_jsonl = read_bank(tmp_path / "known.csv"), read_bank(tmp_path / "known.jsonl")
    strip = [(e.hash_type, e.hash, e.label, e.action, e.source, e.added) for e in from_csv.entries]
    assert strip == [(e.hash_type, e.hash, e.label, e.action, e.source, e.added) for e in from_jsonl.entries]
    assert from_csv.entries[0].hash == PDQ and from_csv.entries[1].line == 3 and from_jsonl.entries[1].line == 2
    assert from_csv.name == "known" and from_csv.version == hashlib.sha256((tmp_path / "known.csv").read_bytes()
                                                                          ).hexdigest()


@pytest.mark.parametrize(("change", "expected"), [
    ({"hash": "abc"}, "line 2: hash: a pdq hash is 64 hex digits, not 'abc'"),
    ({"hash": "g" * 64}, "line 2: hash: a pdq hash is 64 hex digits"),
    ({"hash_type": "md5"}, "line 2: hash_type: 'md5' is not one of pdq, vpdq, sha256"),
    ({"action": "delete"}, "line 2: action: 'delete' is not one of act, review, pass, flag"),
    ({"label": ""}, "line 2: label: required"),
    ({"added": "yesterday"}, "line 2: added: 'yesterday' is not an ISO 8601 time"),
    ({"added": "2026-12-01T10:00:00"}, "line 2: added: '2026-12-01T10:00:00' needs a time zone"),
])
def test_a_bad_entry_names_its_line_and_field(tmp_path, change, expected):
    path = tmp_path / "bank.csv"
    path.write_text(csv_text([{**ROWS[0], **change}]))
    with pytest.raises(BankError) as caught:
        read_bank(path)
    assert f"{path}: {expected}" in str(caught.value)


def test_duplicates_unknown_fields_a_short_header_and_bad_files_are_named(tmp_path):
    cases = {
        "dup.csv": (csv_text([ROWS[0], ROWS[1], {**ROWS[0], "hash": PDQ.lower(), "label": "again"}]),
                    "line 4: hash: pdq ffffffffffffffff… is already on line 2"),
        "extra.jsonl": (json.dumps({**ROWS[0], "colour": "red"}) + "\n", "line 1: unknown field(s) colour"),
        "short.csv": ("hash_type,hash,label\npdq," + PDQ + ",x\n", "line 1: the header lacks action, source, added"),
        "notjson.jsonl": (json.dumps(ROWS[0]) + "\n{oops\n", "line 2: not JSON"),
        "list.jsonl": ("[1, 2]\n", "line 1: an entry is a JSON object"),
        "bank.txt": ("x", "a bank file is .csv or .jsonl, not .txt"),
    }
    for name, (text, expected) in cases.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(BankError) as caught:
            read_bank(tmp_path / name)
        assert expected in str(caught.value), (name, str(caught.value))
    with pytest.raises(BankError, match="cannot be read"):
        read_bank(tmp_path / "missing.csv")
