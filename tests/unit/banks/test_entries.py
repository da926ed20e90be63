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


def test_a_bom_a_long_vpdq_cell_and_text_that_splitlines_would_cut_read_and_odd_files_are_named(tmp_path):
    bom = tmp_path / "excel.csv"
    bom.write_bytes(b"\xef\xbb\xbf" + csv_text(ROWS).encode())            # a spreadsheet's byte-order mark
    assert len(read_bank(bom).entries) == 2
    frames = ";".join(f"{i},100,{PDQ},{i:.3f}" for i in range(2000))       # 2000 frames: a 170 KB cell
    long = tmp_path / "long.csv"
    long.write_text(CSV_HEADER + f'vpdq,"{frames}",long,act,test,2026-12-01T10:00:00Z\n')
    [entry] = read_bank(long).entries
    assert entry.hash.count(";") == 1999
    unicode_line = tmp_path / "u2028.jsonl"
    unicode_line.write_text(json.dumps({**ROWS[0], "label": "a\u2028b"}, ensure_ascii=False) + "\n", encoding="utf-8")
    assert read_bank(unicode_line).entries[0].label == "a\u2028b"
    cases = {
        "twice.csv": ("hash_type,hash,label,action,source,added,hash\n", "line 1: the header names hash more than once"),
        "nested.jsonl": ('{"a":' * 5000 + "1" + "}" * 5000 + "\n", "line 1: not an entry (JSON nested past any use)"),
        "nul.csv": (CSV_HEADER + "pdq,\0" + PDQ + ",x,act,s,2026-12-01T10:00:00Z\n", "line 2:"),
    }
    for name, (text, expected) in cases.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(BankError) as caught:
            read_bank(tmp_path / name)
        assert expected in str(caught.value), (name, str(caught.value))
