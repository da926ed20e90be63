"""Fine-tuning the tiny checkpoint: the loss, augmentation, lower validation NLL, exact reload, resume, modes."""
import datetime as dt
import math
import random

import pytest
import torch
from safetensors import safe_open

from fixtures.inspection import inspection_sample, write_inspection_set, write_keyword_task
from omni.contract.config import EngineConfig
from omni.learn.dataset import load_dataset
from omni.learn.training import STATE_FILE, TrainingConfig, augment, clef_loss, finetune, split_dataset
from omni.model.clef import ClefModel
from omni.serve.engine import DecisionEngine

FAST = {"batch_records": 4, "learning_rate": 1e-2, "backbone_learning_rate": 1e-3, "patience_epochs": 50}


@pytest.fixture(scope="module")
def keyword_records(tmp_path_factory):
    return load_dataset(write_keyword_task(tmp_path_factory.mktemp("task") / "task.jsonl", 32, seed=0))


def probabilities(model, records) -> list[float]:
    """Every option probability of every record, flattened."""
    return [value for per_record in model.probabilities([model.prepare(r.request) for r in records])
            for p in per_record for value in p.tolist()]


def test_clef_loss_by_hand():
    # uniform logits over 2 options, ε = 0.1: CE = ln 2 whatever the target; Brier = 0.5² + 0.5² = 0.5
    loss = clef_loss(torch.zeros(2), 0, smoothing=0.1, brier_weight=1.0)
    assert float(loss) == pytest.approx(math.log(2) + 0.5)
    # logits (ln 3, 0) → p = (0.75, 0.25); label 1, ε = 0: CE = ln 4; Brier = 0.75² + 0.75²
    loss = clef_loss(torch.tensor([math.log(3.0), 0.0]), 1, smoothing=0.0, brier_weight=2.0)
    assert float(loss) == pytest.approx(math.log(4) + 2 * 1.125)


def test_augmentation_shuffles_questions_and_remaps_choice_labels(keyword_records, tmp_path):
    path = tmp_path / "choice.jsonl"
    path.write_text('{"state": "s", "questions": {"a": {"type": "noul"}, "b": {"type": "noul"}, '
                    '"team": {"type": "choice", "criteria": {"x": "Sales", "y": "Billing", "z": null}}}, '
                    '"labels": {"team": "x", "a": true}}\n')
    (record,) = load_dataset(path)
    orders, descriptions = set(), set()
    for seed in range(30):
        request, labels = augment(record, random.Random(seed))
        orders.add(tuple(q.id for q in request.questions))
        team = next(q for q in request.questions if q.id == "team")
        by_id = {o.id: o.description for o in team.options}
        assert by_id[labels["team"]] == "Sales"                 # the label follows its description
        assert by_id["z"] is None                               # an option with no description keeps its id
        descriptions.add(labels["team"])
        assert labels["a"] == "true"
    assert len(orders) > 1 and descriptions == {"x", "y"}


def test_split_is_seeded_and_disjoint(keyword_records):
    train, validation = split_dataset(keyword_records, 0.25, seed=3)
    assert len(validation) == 8 and len(train) == 24
    assert not {r.line for r in train} & {r.line for r in validation}
    assert [r.line for r in split_dataset(keyword_records, 0.25, seed=3)[1]] == [r.line for r in validation]


def test_head_finetuning_lowers_validation_nll_and_the_saved_directory_reloads_exactly(tiny_dir, keyword_records,
                                                                                      tmp_path):
    model = ClefModel.load(tiny_dir)
    summary = finetune(model, tiny_dir, keyword_records, tmp_path / "tuned", TrainingConfig(epochs=10, **FAST),
                       progress=False, merged=True)
    history = summary["history"]
    assert history[0]["epoch"] == 0 and len(history) == 11
    assert summary["best_validation_nll"] < history[0]["validation_nll"] - 0.05
    reloaded = ClefModel.load(tmp_path / "tuned")
    assert probabilities(reloaded, keyword_records[:6]) == pytest.approx(probabilities(model, keyword_records[:6]),
                                                                          abs=1e-6)
    assert not (tmp_path / "tuned" / STATE_FILE).exists() and (tmp_path / "tuned" / "training.json").is_file()
    # the backbone was not trained: its file is the source's, byte for byte
    assert (tmp_path / "tuned" / "model.safetensors").read_bytes() == (tiny_dir / "model.safetensors").read_bytes()
    # the export is dated (what /v1/models shows as its release date)
    assert reloaded.source.release_date == dt.datetime.now(dt.timezone.utc).date().isoformat()


def test_a_resumed_run_ends_where_an_uninterrupted_one_does(tiny_dir, keyword_records, tmp_path):
    config = TrainingConfig(epochs=3, **FAST)
    finetune(ClefModel.load(tiny_dir), tiny_dir, keyword_records, tmp_path / "straight", config, progress=False,
             merged=True)
    first = ClefModel.load(tiny_dir)
    finetune(first, tiny_dir, keyword_records, tmp_path / "resumed", TrainingConfig(epochs=1, **FAST),
             keep_state=True, progress=False)
    assert (tmp_path / "resumed" / STATE_FILE).is_file()
    messages = []
    summary = finetune(ClefModel.load(tiny_dir), tiny_dir, keyword_records, tmp_path / "resumed", config,
                       progress=False, log=messages.append, merged=True)
    assert any(m.startswith("resuming after epoch 1") for m in messages)
    assert [h["epoch"] for h in summary["history"]] == [0, 1, 2, 3]
    straight = ClefModel.load(tmp_path / "straight")
    resumed = ClefModel.load(tmp_path / "resumed")
    assert probabilities(resumed, keyword_records[:4]) == pytest.approx(probabilities(straight, keyword_records[:4]),
                                                                         abs=1e-6)


def test_a_state_from_other_settings_is_refused(tiny_dir, keyword_records, tmp_path):
    finetune(ClefModel.load(tiny_dir), tiny_dir, keyword_records, tmp_path / "run", TrainingConfig(epochs=1, **FAST),
             keep_state=True, progress=False)
    other = TrainingConfig(epochs=2, **{**FAST, "learning_rate": 5e-3})
    with pytest.raises(ValueError, match="learning_rate"):
        finetune(ClefModel.load(tiny_dir), tiny_dir, keyword_records, tmp_path / "run", other, progress=False)
    with pytest.raises(ValueError, match="must differ"):
        finetune(ClefModel.load(tiny_dir), tiny_dir, keyword_records, tiny_dir, TrainingConfig(epochs=0, **FAST),
                 progress=False)


def test_full_backbone_training_saves_the_released_key_names(tiny_dir, keyword_records, tmp_path):
    model = ClefModel.load(tiny_dir)
    finetune(model, tiny_dir, keyword_records, tmp_path / "full",
             TrainingConfig(mode="full", epochs=1, validation_fraction=0.0, **FAST), progress=False)
    with safe_open(str(tiny_dir / "model.safetensors"), "pt") as source, \
            safe_open(str(tmp_path / "full" / "model.safetensors"), "pt") as saved:
        assert set(saved.keys()) == set(source.keys())
        key = "thinker.model.layers.0.self_attn.q_proj.weight"
        assert not torch.equal(saved.get_tensor(key), source.get_tensor(key))
        assert torch.equal(saved.get_tensor("thinker.lm_head.weight"), source.get_tensor("thinker.lm_head.weight"))
    reloaded = ClefModel.load(tmp_path / "full")          # strict loading: no missing or unexpected keys
    assert probabilities(reloaded, keyword_records[:4]) == pytest.approx(probabilities(model, keyword_records[:4]),
                                                                          abs=1e-5)


@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
def test_lora_adapters_are_merged_on_save(tiny_dir, keyword_records, tmp_path):
    pytest.importorskip("peft")
    model = ClefModel.load(tiny_dir)
    finetune(model, tiny_dir, keyword_records, tmp_path / "lora",
             TrainingConfig(mode="lora", epochs=1, lora_rank=4, validation_fraction=0.0, **FAST), progress=False,
             merged=True)
    assert not any("lora_" in name for name, _ in model.backbone.thinker.named_parameters())
    with safe_open(str(tiny_dir / "model.safetensors"), "pt") as source, \
            safe_open(str(tmp_path / "lora" / "model.safetensors"), "pt") as saved:
        assert set(saved.keys()) == set(source.keys())               # merged: no adapter tensors left
        key = "thinker.model.layers.0.self_attn.q_proj.weight"       # a LoRA target, changed by the merge
        assert not torch.equal(saved.get_tensor(key), source.get_tensor(key))
    reloaded = ClefModel.load(tmp_path / "lora")
    assert probabilities(reloaded, keyword_records[:4]) == pytest.approx(probabilities(model, keyword_records[:4]),
                                                                          abs=1e-5)


def test_the_inspection_set_is_deterministic_and_trains_through_the_media_path(tiny_dir, tmp_path):
    assert inspection_sample(5, 2) == inspection_sample(5, 2)
    body, files = inspection_sample(5, 2)
    assert set(body["labels"]) == set(body["questions"]) and len(files) == 3
    paths = write_inspection_set(tmp_path / "set", n_train=4, n_test=2, seed=7)
    records = load_dataset(paths["train"])
    assert [m.kind for m in records[0].request.media] == ["image", "audio", "video"]
    model = ClefModel.load(tiny_dir)
    summary = finetune(model, tiny_dir, records, tmp_path / "tuned",
                       TrainingConfig(epochs=1, validation_fraction=0.0, **FAST), progress=False, merged=True)
    assert summary["history"][-1]["train_loss"] > 0
    engine = DecisionEngine(EngineConfig(model_path=str(tmp_path / "tuned"))).load()   # the serving path
    decision = engine.decide(records[0].request)
    assert set(decision.answers) == set(body["questions"]) and decision.tokens_by_modality["video"] > 0
    media = model.encode_media(records[0].request.media)
    in_memory = model.probabilities([model.prepare(records[0].request, media)])[0]
    fan_running = [q.id for q in records[0].request.questions].index("fan_running")
    assert decision.answers["fan_running"]["noul"] == pytest.approx(float(in_memory[fan_running][0]), abs=1e-4)
