"""Issue 31, one name for the torch threads knob: `--torch-threads N` on every command that runs the model here, into
the config each one builds (0 or absent: sized when the model loads); `--threads`, the old name of `omni batch`,
`omni replay` and the learning commands, still parses but is not shown. `omni doctor` names the count a server here
would use and warns when a set count exceeds the usable CPUs."""
from __future__ import annotations

import pytest

from api.cli import batch, decide, doctor, learn, replay, serve
from api.cli.main import build_parser
from omni.contract.config import EngineConfig
from omni.serve.cpus import CpuBudget

COMMANDS = {"decide": ["decide", "r.json"], "explain": ["explain", "r.json"], "batch": ["batch", "in.jsonl", "--out", "o.jsonl"],
            "replay": ["replay", "log"],
            "eval": ["eval", "d.jsonl", "--out", "o"], "calibrate": ["calibrate", "d.jsonl"],
            "finetune": ["finetune", "d.jsonl", "--out", "o"],
            "policy fit": ["policy", "fit", "d.jsonl", "--target-precision", "0.9", "--out", "p.toml"],
            "policy check": ["policy", "check", "p.toml", "--on", "d.jsonl"], "serve": ["serve"]}


@pytest.mark.parametrize("command", COMMANDS)
def test_every_model_command_takes_torch_threads(command):
    args = build_parser().parse_args([*COMMANDS[command], "--torch-threads", "3"])
    assert int(args.torch_threads) == 3
    assert build_parser().parse_args(COMMANDS[command]).torch_threads is None      # not given: the config's 0


@pytest.mark.parametrize("command", [c for c in COMMANDS if c not in ("decide", "serve")])
def test_the_old_name_still_parses_but_is_not_shown(command, capsys):
    assert build_parser().parse_args([*COMMANDS[command], "--threads", "2"]).torch_threads == 2
    with pytest.raises(SystemExit):
        build_parser().parse_args([*COMMANDS[command][:2 if command.startswith("policy") else 1], "--help"])
    shown = capsys.readouterr().out
    assert "--torch-threads" in shown
    assert "--threads" not in shown.replace("--torch-threads", "")


def test_each_command_hands_the_count_to_its_engine_config():
    parse = build_parser().parse_args
    assert decide.engine_config_from_args(parse([*COMMANDS["decide"], "--torch-threads", "3"])).torch_threads == 3
    assert batch.engine_config(parse([*COMMANDS["batch"], "--torch-threads", "3"])).torch_threads == 3
    assert replay.engine_config(parse([*COMMANDS["replay"], "--torch-threads", "3"]), {}).torch_threads == 3
    assert learn.learn_config(parse([*COMMANDS["eval"], "--torch-threads", "3"])).torch_threads == 3
    assert serve.build_settings(parse(["serve", "--torch-threads", "3"]), {}).engine.torch_threads == 3
    assert learn.learn_config(parse(COMMANDS["eval"])).torch_threads == 0
    assert batch.engine_config(parse(COMMANDS["batch"])).torch_threads == 0
    assert serve.build_settings(parse(["serve"]), {}).engine.torch_threads == 0
    assert serve.build_settings(parse(["serve"]), {"OMNI_TORCH_THREADS": "2"}).engine.torch_threads == 2


def test_doctor_names_the_sized_count_and_warns_of_more_threads_than_cpus():
    sized = doctor.torch_threads(EngineConfig(), CpuBudget(2, None))
    assert sized.status == "info"
    assert sized.detail == "1, sized: 2 usable CPUs (affinity 2, no cgroup CPU quota) less 2 decode threads"
    assert sized.data["threads"] == 1
    assert sized.data["usable_cpus"] == 2
    quota = doctor.torch_threads(EngineConfig(decode_threads=1), CpuBudget(64, 4.0))
    assert quota.detail.startswith("3, sized: 4 usable CPUs (affinity 64, cgroup quota 4 CPUs)")
    over = doctor.torch_threads(EngineConfig(torch_threads=4), CpuBudget(2, None))
    assert over.status == "warn"
    assert "more than the 2 usable CPUs" in over.detail
    assert over.data["threads"] == 4
    assert doctor.torch_threads(EngineConfig(torch_threads=1), CpuBudget(2, None)).status == "info"
