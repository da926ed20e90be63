"""The line's config: every mistake is a LineError naming the file, the line and the key (and the fix)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from api.line.config import read_line_config
from api.line.ports import LineError

QUESTIONS = {"ok": {"type": "noul", "question": "Is the unit fine?"}}


def write(tmp_path: Path, text: str, template: dict | None = None) -> Path:
    (tmp_path / "in").mkdir(exist_ok=True)
    (tmp_path / "request.json").write_text(json.dumps(template or {"state": "unit", "questions": QUESTIONS}))
    path = tmp_path / "line.toml"
    path.write_text(text)
    return path


GOOD = """\
[line]
name = "cell-4"
root = "in"
ledger = "ledger.jsonl"
deadline_ms = 2000

[request]
template = "request.json"

[[source]]
type = "folder"
"""


def error_of(tmp_path: Path, text: str, template: dict | None = None) -> str:
    with pytest.raises(LineError) as caught:
        read_line_config(write(tmp_path, text, template))
    return str(caught.value)


@pytest.mark.parametrize(("text", "expected"), [
    (GOOD.replace("deadline_ms = 2000", "deadline_ms = \"2s\""),
     "line.deadline_ms (line 5): must be an integer 1..3600000, not '2s'"),
    (GOOD.replace("deadline_ms = 2000", "deadline_ms = 0"), "line.deadline_ms (line 5): must be an integer"),
    (GOOD.replace('name = "cell-4"', 'name = "cell 4/x"'), "line.name (line 2): 'cell 4/x' must be 1-64 letters"),
    (GOOD.replace('root = "in"', 'root = "nowhere"'), "line.root (line 3):"),
    (GOOD + "colour = 1\n", "source[0].colour (line 12): unknown key"),
    (GOOD.replace("[line]", "[line]\nspeed = 3"), "line.speed (line 2): unknown key; [line] takes name, root"),
    (GOOD.replace('template = "request.json"', 'template = "missing.json"'), "request.template (line 8):"),
    (GOOD.replace('type = "folder"', 'type = "ftp"'), "source[0].type (line 11): 'ftp' is not one of folder, mqtt"),
    (GOOD.replace("[[source]]\ntype = \"folder\"\n", ""), "a line needs at least one [[source]]"),
    (GOOD.replace("[line]", "[lines]"), "unknown key"),
    (GOOD.replace("deadline_ms = 2000", "deadline_ms = 2000\nfallback = \"scrap\""),
     "line.fallback (line 6): 'scrap' is not one of act, review, pass"),
    ("[line\nname=1", "not valid TOML"),
])
def test_a_mistake_names_the_key_and_its_line(tmp_path, text, expected):
    assert expected in error_of(tmp_path, text)
    assert str(tmp_path / "line.toml") in error_of(tmp_path, text)


def test_a_template_that_carries_media_or_no_questions_is_refused(tmp_path):
    assert "images come from each unit's files" in error_of(tmp_path, GOOD, {"questions": QUESTIONS,
                                                                            "images": ["data:x"]})
    assert "a System One request with \"questions\"" in error_of(tmp_path, GOOD, {"state": "x"})


def test_a_file_that_is_not_utf8_or_too_large_is_refused(tmp_path):
    path = tmp_path / "line.toml"
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(LineError, match="not UTF-8"):
        read_line_config(path)
    path.write_bytes(b"#" * (1024 * 1024 + 1))
    with pytest.raises(LineError, match="over the 1048576-byte limit"):
        read_line_config(path)


def test_the_model_table_reaches_the_engines_config(tmp_path):
    from api.cli.line import engine_config_of

    text = GOOD + "\n[model]\ntorch_threads = 3\nmedia_cache_mb = 0\nprefix_cache_mb = 64.5\ndtype = \"float32\"\n"
    config = engine_config_of(read_line_config(write(tmp_path, text)))
    assert (config.torch_threads, config.media_cache_mb, config.prefix_cache_mb, config.dtype) == (3, 0, 64.5,
                                                                                                   "float32")
    assert config.max_queue >= 8 and config.model_path is None


def test_the_model_tables_banks_are_read_from_the_configs_folder_and_every_mistake_is_named(tmp_path):
    (tmp_path / "known.csv").write_text("hash_type,hash,label,action,source,added\n")
    text = GOOD + '\n[model]\nbanks = ["known.csv"]\nbank_pdq_threshold = {known = 12}\n'
    model = read_line_config(write(tmp_path, text)).model
    assert model.banks == (str((tmp_path / "known.csv").resolve()),)
    assert model.bank_pdq_thresholds == (("known", 12),)
    cases = {'banks = ["gone.csv"]': "model.banks (line 14): [0] ",
             'banks = "known.csv"': "model.banks (line 14): must be a list of non-empty strings",
             'bank_pdq_threshold = {known = 12}': "model.bank_pdq_threshold (line 14): goes with model.banks",
             'banks = ["known.csv"]\nbank_pdq_threshold = {other = 12}':
                 "model.bank_pdq_threshold (line 15): other: names no bank of model.banks (known)",
             'banks = ["known.csv"]\nbank_pdq_threshold = {known = 64}':
                 "model.bank_pdq_threshold (line 15): known: must be an integer 0..63 (bits), not 64",
             'url = "http://127.0.0.1:9"\nbanks = ["known.csv"]':
                 "model.banks (line 15): the server at model.url runs its own model"}
    for table, expected in cases.items():
        assert expected in error_of(tmp_path, GOOD + "\n[model]\n" + table + "\n"), table
