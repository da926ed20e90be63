"""Policies an operator can get wrong in ways the key checks do not see: a file nested thousands deep is a
PolicyError naming the nesting limit (never a RecursionError), nesting just past the limit reads the same way, and an
unknown top-level key is reported as a top-level key (not as if it were in a question table). The statement map,
read the same way, refuses the same depth."""
from __future__ import annotations

import re

import pytest

from omni.contract.policy import PolicyError, parse_policy, read_policy
from omni.contract.toml_text import MAX_TOML_DEPTH
from omni.governance.statement_map import StatementMapError, parse_statement_map

HEAD = b'version = "v"\n[questions.a]\nauto_at = 0.9\n'
DEEP = {
    "arrays, closed": HEAD + b"act_on = " + b"[" * 5000 + b"]" * 5000 + b"\n",
    "arrays, never closed": HEAD + b"act_on = " + b"[" * 5000 + b"\n",
    "inline tables": HEAD + b"auto_at_for = " + b"{x = " * 5000 + b"1" + b"}" * 5000 + b"\n",
    "just past the limit": HEAD + b"act_on = " + b"[" * MAX_TOML_DEPTH + b"]" * MAX_TOML_DEPTH + b"\n",
}


@pytest.mark.parametrize("text", DEEP.values(), ids=DEEP.keys())
def test_a_deeply_nested_policy_is_a_policy_error_naming_the_limit(text):
    with pytest.raises(PolicyError) as info:
        parse_policy(text, "deep.toml")
    message = str(info.value)
    assert message.startswith("deep.toml: "), message
    assert f"nested more than {MAX_TOML_DEPTH} levels" in message, message
    assert len(message) < 200


def test_a_deeply_nested_policy_file_is_read_as_a_policy_error(tmp_path):
    path = tmp_path / "deep.toml"
    path.write_bytes(DEEP["arrays, never closed"])
    with pytest.raises(PolicyError, match=rf"deep\.toml: .*nested more than {MAX_TOML_DEPTH} levels"):
        read_policy(path)


def test_nesting_a_policy_needs_reads():
    policy = parse_policy(HEAD + b"act_on = [true]\nauto_at_for = {true = 0.95}\n", "ok.toml")
    assert policy.questions["a"].act_on == (True,)
    assert policy.questions["a"].auto_at_for == {"true": 0.95}


@pytest.mark.parametrize(("text", "expected"), [
    (b'version = "v"\nauto_at = 0.9\n[questions.a]\nauto_at = 0.9\n',
     r"^p\.toml: auto_at \(line 2\): unknown key; the top level of a policy takes version, model, default, questions, qa$"),
    (b'version = "v"\n[question.a]\nauto_at = 0.9\n',
     r"^p\.toml: question \(line 2\): unknown key; the top level of a policy takes version, model, default, questions, qa$"),
])
def test_an_unknown_top_level_key_is_named_as_a_top_level_key(text, expected):
    with pytest.raises(PolicyError) as info:
        parse_policy(text, "p.toml")
    assert re.search(expected, str(info.value)), str(info.value)
    assert "question table" not in str(info.value)


def test_a_deeply_nested_statement_map_is_a_statement_map_error():
    text = '[[rules]]\nquestion = "q"\nanswer = ' + "[" * 5000 + "\n"
    with pytest.raises(StatementMapError, match=rf"map\.toml: .*nested more than {MAX_TOML_DEPTH} levels"):
        parse_statement_map(text, "map.toml")
