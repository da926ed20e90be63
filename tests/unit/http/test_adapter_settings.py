"""The adapters' serve flags and variables: `--adapters DIR`, `--adapter NAME=PATH` (repeatable), `--max-adapters`,
`--shadow LIVE=CANDIDATE` (repeatable) and their OMNI_* names -> the EngineConfig fields, with clear errors."""
from __future__ import annotations

import argparse

import pytest

from api.cli.serve import add_serve_arguments, build_settings
from api.http.settings import SettingsError


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    return parser.parse_args(list(argv))


def test_the_flags_fill_the_engine_config(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    engine = build_settings(parse("--adapters", str(tmp_path), "--adapter", f"a={tmp_path / 'a'}",
                                  "--adapter", f"b={tmp_path / 'b'}", "--max-adapters", "3",
                                  "--shadow", "clef-omni=a", "--shadow", "b=a"), environ={}).engine
    assert engine.adapters_dir == str(tmp_path)
    assert engine.adapters == (("a", str(tmp_path / "a")), ("b", str(tmp_path / "b")))
    assert engine.max_adapters == 3
    assert engine.shadows == (("clef-omni", "a"), ("b", "a"))


def test_the_variables_fill_the_same_fields_and_flags_win(tmp_path):
    (tmp_path / "a").mkdir()
    env = {"OMNI_ADAPTERS_DIR": str(tmp_path), "OMNI_ADAPTERS": f"a={tmp_path / 'a'}", "OMNI_MAX_ADAPTERS": "2",
           "OMNI_SHADOWS": "clef-omni=a"}
    engine = build_settings(parse(), environ=env).engine
    assert (engine.adapters_dir, engine.adapters, engine.max_adapters, engine.shadows) == \
        (str(tmp_path), (("a", str(tmp_path / "a")),), 2, (("clef-omni", "a"),))
    assert build_settings(parse("--max-adapters", "5"), environ=env).engine.max_adapters == 5


@pytest.mark.parametrize(("argv", "words"), [
    (("--adapter", "noequals"), "--adapter: expected NAME=VALUE"),
    (("--shadow", "live="), "--shadow: expected NAME=VALUE"),
    (("--adapters", "/no/such/dir"), "--adapters"),
    (("--adapter", "x=/no/such/dir"), "not a directory"),
    (("--max-adapters", "0"), "max_adapters"),
])
def test_bad_values_are_settings_errors_naming_the_flag(argv, words):
    with pytest.raises(SettingsError, match=words):
        build_settings(parse(*argv), environ={})


def test_an_adapter_name_given_twice_is_refused(tmp_path):
    with pytest.raises(SettingsError, match="given twice"):
        build_settings(parse("--adapter", f"a={tmp_path}", "--adapter", f"a={tmp_path}"), environ={})


def test_a_bad_variable_names_the_variable():
    with pytest.raises(SettingsError, match="OMNI_SHADOWS"):
        build_settings(parse(), environ={"OMNI_SHADOWS": "oops"})
