"""Issue 33: `--quantize SCHEME` on every command that loads the model here, into the config each one builds (absent:
None, the checkpoint as stored); `omni replay` reloads with the scheme a record names; an unknown scheme is a usage
error (exit 2) naming the choices."""
from __future__ import annotations

import pytest

from api.cli import batch, decide, learn, replay, serve
from api.cli.main import build_parser
from omni.contract.config import QUANTIZE_CHOICES
from tests.unit.cli.test_torch_threads import COMMANDS as MODEL_COMMANDS

# every command that loads the model here (test_torch_threads' list) but replay, which takes the record's scheme
COMMANDS = {name: argv for name, argv in MODEL_COMMANDS.items() if name != "replay"}


@pytest.mark.parametrize("command", COMMANDS)
def test_every_model_command_takes_quantize(command):
    assert build_parser().parse_args([*COMMANDS[command], "--quantize", "nf4"]).quantize == "nf4"
    assert build_parser().parse_args(COMMANDS[command]).quantize is None      # not given: as the checkpoint is


@pytest.mark.parametrize("command", [c for c in COMMANDS if c != "serve"])
def test_an_unknown_scheme_is_a_usage_error_naming_the_choices(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args([*COMMANDS[command], "--quantize", "int3"])
    assert exit_.value.code == 2
    choices = ", ".join(f"'{name}'" for name in QUANTIZE_CHOICES)
    assert f"argument --quantize: invalid choice: 'int3' (choose from {choices})" in capsys.readouterr().err


def test_each_command_hands_the_scheme_to_its_engine_config():
    parse = build_parser().parse_args
    assert decide.engine_config_from_args(parse([*COMMANDS["decide"], "--quantize", "int8"])).quantize == "int8"
    assert batch.engine_config(parse([*COMMANDS["batch"], "--quantize", "fp8"])).quantize == "fp8"
    assert learn.learn_config(parse([*COMMANDS["eval"], "--quantize", "nf4"])).quantize == "nf4"
    assert serve.build_settings(parse(["serve", "--quantize", "nf4"]), {}).engine.quantize == "nf4"
    assert serve.build_settings(parse(["serve"]), {"OMNI_QUANTIZE": "int8"}).engine.quantize == "int8"


def test_replay_reloads_with_the_scheme_the_record_names():
    args = build_parser().parse_args(["replay", "log"])
    assert replay.engine_config(args, {"runtime": {"quantization": "nf4"}}).quantize == "nf4"
    assert replay.engine_config(args, {"runtime": {}}).quantize is None       # records of unquantized decisions
    assert replay.engine_config(args, {"runtime": {"quantization": "gptq"}}).quantize is None   # not a scheme here
