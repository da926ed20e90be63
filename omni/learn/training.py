"""Fine-tuning a ClefModel on labelled requests: the joint-schema head, optionally LoRA adapters or the whole thinker.

Loss (clef-reference §1.3): label-smoothed cross-entropy + Brier, per labelled question, averaged over the batch's
questions. Each step runs the serving pipeline (`ClefModel.prepare` → `ClefModel.logits`) with gradients enabled
for the trained parts; media are decoded and encoded once per record and reused. Augmentation shuffles question
order and permutes the ids of a choice question's described options (labels follow). A seeded train/validation
split, early stopping on validation NLL, a resumable `training_state.pt` after every epoch, and at the end the best
weights written: for modes head and lora, by default, as an adapter folder beside the base checkpoint
(`omni.model.adapter_save`: the head, peft's LoRA weights, adapter.json naming the base's sha256); with `merged`, and
always for mode full, as a whole checkpoint in the released layout, LoRA merged (`omni.model.export`). LoRA sits in
the thinker's text decoder only (`omni.model.lora.lora_config`). Knows nothing of argv, HTTP or the environment.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import random
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Generic, TypedDict

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from omni.contract.types import DecisionRequest, Option, Question
from omni.learn.dataset import LabelledRequest, label_index
from omni.learn.evaluation import collect_logits, compute_metrics
from omni.learn.training_config import TrainingConfig
from omni.model.adapter_format import LoraSpec
from omni.model.adapter_save import save_adapter
from omni.model.checkpoint import default_cache_dir
from omni.model.export import save_released
from omni.model.fingerprint import checkpoint_sha256
from omni.model.lora import lora_config
from omni.model.media import RequestMedia
from omni.model.qlora import check_trainable, served_base, trainable_base
from omni.model.surface import RecordT, TrainableModel

STATE_FILE = "training_state.pt"
SUMMARY_FILE = "training.json"


# ------------------------------------------------------------------------------------------------------ loss
def clef_loss(logits: torch.Tensor, label: int, smoothing: float, brier_weight: float) -> torch.Tensor:
    """One question: logits [n] → label-smoothed CE (ε spread evenly over n options) + w · Σ (p − onehot)²."""
    log_p = F.log_softmax(logits.float(), dim=-1)
    onehot = F.one_hot(torch.tensor(label, device=logits.device), len(logits)).to(log_p.dtype)
    target = (1.0 - smoothing) * onehot + smoothing / len(logits)
    cross_entropy = -(target * log_p).sum()
    brier = ((log_p.exp() - onehot) ** 2).sum()
    return cross_entropy + brier_weight * brier


def batch_loss(questions_per_record: Sequence[Sequence[Question]], logits_per_record: Sequence[Sequence[torch.Tensor]],
               labels_per_record: Sequence[dict[str, str]], config: TrainingConfig) -> torch.Tensor:
    """Mean Clef loss over every labelled question of the batch."""
    losses = [clef_loss(logits, label_index(q, labels[q.id]), config.label_smoothing, config.brier_weight)
              for questions, per_question, labels in zip(questions_per_record, logits_per_record, labels_per_record,
                                                         strict=True)
              for q, logits in zip(questions, per_question, strict=True) if q.id in labels]
    return torch.stack(losses).mean()


# ------------------------------------------------------------------------------------------------ augmentation
def _permute_choice_ids(question: Question, rng: random.Random) -> tuple[Question, dict[str, str]]:
    """Described options swap ids (an option with no description keeps its id: the id is all it means)."""
    described = [o.id for o in question.options if o.description is not None]
    shuffled = described[:]
    rng.shuffle(shuffled)
    renamed = dict(zip(described, shuffled, strict=True))
    options = [Option(renamed.get(o.id, o.id), o.description) for o in question.options]
    rng.shuffle(options)                    # request order is free too (the prompt sorts by id)
    return replace(question, options=tuple(options)), renamed


def augment(record: LabelledRequest, rng: random.Random) -> tuple[DecisionRequest, dict[str, str]]:
    """Shuffled question order and permuted choice option ids; labels remapped to the new ids."""
    labels = dict(record.labels)
    questions = []
    for question in record.request.questions:
        if question.type == "choice":
            question, renamed = _permute_choice_ids(question, rng)
            if question.id in labels:
                labels[question.id] = renamed.get(labels[question.id], labels[question.id])
        questions.append(question)
    rng.shuffle(questions)
    return replace(record.request, questions=tuple(questions)), labels


# ------------------------------------------------------------------------------------------------------ split
def split_dataset(records: Sequence[LabelledRequest], validation_fraction: float,
                  seed: int) -> tuple[list[LabelledRequest], list[LabelledRequest]]:
    """Seeded shuffle; the first ⌈fraction·N⌉ records validate (at least one when the fraction is > 0)."""
    order = np.random.default_rng(seed).permutation(len(records))
    n_validation = 0 if validation_fraction <= 0 else max(1, math.ceil(validation_fraction * len(records)))
    if n_validation >= len(records):
        raise ValueError(f"{len(records)} records are too few for a validation fraction of {validation_fraction}")
    validation = sorted((records[i] for i in order[:n_validation]), key=lambda r: r.line)
    train = sorted((records[i] for i in order[n_validation:]), key=lambda r: r.line)
    return train, validation


def dataset_digest(records: Sequence[LabelledRequest], chars: int = 16) -> str:
    digest = hashlib.sha256()
    for r in records:
        digest.update(json.dumps([r.line, r.labels, repr(r.request.state), [q.id for q in r.request.questions],
                                  [len(m.data) for m in r.request.media]], sort_keys=True).encode())
    return digest.hexdigest()[:chars]


def training_data_sha256(train: Sequence[LabelledRequest], validation: Sequence[LabelledRequest]) -> str:
    """What an adapter's manifest names as its training data: a sha256 over the train and validation records."""
    return hashlib.sha256((dataset_digest(train, 64) + dataset_digest(validation, 64)).encode()).hexdigest()


# ---------------------------------------------------------------------------------------------------- trainer
def _enable_lora(model: TrainableModel[RecordT], config: TrainingConfig) -> None:
    try:
        from peft import get_peft_model
    except ImportError as exc:
        raise RuntimeError("LoRA needs peft: pip install 'omni-decide[train]'") from exc
    lora = lora_config(config.lora_rank, config.lora_alpha, config.lora_targets)     # the text decoder only
    with torch.random.fork_rng():               # LoRA's initial A from the run's seed: a run repeats exactly
        torch.manual_seed(config.seed)
        model.backbone.peft_model = get_peft_model(model.backbone.thinker, lora)   # injects into the thinker in place


def merge_lora(model: TrainableModel[RecordT]) -> None:
    """Fold LoRA adapters into the thinker's weights (a no-op without adapters)."""
    peft_model = model.backbone.peft_model
    if peft_model is not None:
        model.backbone.thinker = peft_model.merge_and_unload()
        model.backbone.peft_model = None


def trainable_parameters(model: TrainableModel[RecordT],
                         config: TrainingConfig) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    """(head parameters, backbone parameters) set to require grad for this mode; the rest frozen. Over a quantized
    base only LoRA (QLoRA) or the head train (QuantizationError otherwise, naming the scheme and the fix)."""
    check_trainable(config.mode, model.backbone.quantization)
    head = list(model.head.parameters())
    for p in head:
        p.requires_grad_(True)
    if config.mode == "lora":
        _enable_lora(model, config)
        if model.backbone.quantization == "nf4":
            trainable_base(model.backbone.thinker)     # bitsandbytes' CPU inference kernel has no backward
        backbone = [p for n, p in model.backbone.thinker.named_parameters() if "lora_" in n]
    elif config.mode == "full":
        model.backbone.thinker.requires_grad_(True)
        backbone = list(model.backbone.thinker.parameters())
    else:
        backbone = []
    return head, backbone


def _trained_state(model: TrainableModel[RecordT], config: TrainingConfig) -> dict[str, torch.Tensor]:
    """The tensors this mode changes, by name (head.* and thinker.*), copied to the CPU."""
    state = {f"head.{k}": v.detach().cpu().clone() for k, v in model.head.state_dict().items()}
    if config.mode != "head":
        for name, p in model.backbone.thinker.named_parameters():
            if p.requires_grad:
                state[f"thinker.{name}"] = p.detach().cpu().clone()
    return state


def _load_trained_state(model: TrainableModel[RecordT], state: dict[str, torch.Tensor]) -> None:
    model.head.load_state_dict({k[5:]: v for k, v in state.items() if k.startswith("head.")})
    params = dict(model.backbone.thinker.named_parameters())
    with torch.no_grad():
        for key, value in state.items():
            if key.startswith("thinker."):
                params[key[8:]].copy_(value)


@dataclass
class EpochResult:
    epoch: int
    train_loss: float | None                # None for epoch 0: the validation before any training
    validation_nll: float | None
    validation_accuracy: float | None


class TrainingState(TypedDict):
    """What a run keeps between epochs (and `training_state.pt` holds, with the current weights and optimizer)."""

    config: dict[str, Any]                  # asdict(TrainingConfig)
    digest: str                             # of the train and validation records
    stopped: bool
    bad_epochs: int
    history: list[dict[str, Any]]           # asdict(EpochResult) per epoch, from 0
    best_epoch: int
    best_nll: float | None
    best: dict[str, torch.Tensor]           # the best epoch's trained tensors


class SavedState(TrainingState):
    """`training_state.pt`: the run's state, the current epoch's trained tensors and the optimizer's state."""

    current: dict[str, torch.Tensor]
    optimizer: dict[str, Any]


class Trainer(Generic[RecordT]):
    """One fine-tuning run of `model` (loaded from `source_dir`) into `out_dir`."""

    def __init__(self, model: TrainableModel[RecordT], source_dir: str | Path, out_dir: str | Path,
                 config: TrainingConfig, progress: bool = True, log: Callable[[str], None] | None = None,
                 merged: bool = False) -> None:
        self.model, self.config = model, config
        self.merged = merged or config.mode == "full"    # a whole checkpoint, not an adapter folder
        self.data_sha256: str | None = None
        self.source_dir, self.out_dir = Path(source_dir), Path(out_dir)
        if self.merged and config.mode == "lora":
            _check_mergeable(self.source_dir, model.backbone.quantization)
        self.progress = progress
        self.log = log or (lambda message: None)
        self.media: dict[int, RequestMedia] = {}
        head, backbone = trainable_parameters(model, config)
        self.parameters = head + backbone
        groups: list[dict[str, Any]] = [{"params": head, "lr": config.learning_rate}]
        if backbone:
            groups.append({"params": backbone, "lr": config.backbone_learning_rate})
        self.optimizer = torch.optim.AdamW(groups, weight_decay=config.weight_decay)

    # ------------------------------------------------------------------------------------------- pipeline
    def _encoded_media(self, record: LabelledRequest) -> RequestMedia:
        cached = self.media.get(record.line)
        return cached if cached is not None else self.model.encode_media(record.request.media)

    def encode_media(self, records: Sequence[LabelledRequest]) -> None:
        """Decode + encode every record's media once, before any training: a bad file is a DatasetError line.

        The result is kept when `cache_media` (the default); otherwise each step encodes again (less memory).
        """
        from omni.contract.errors import MediaError, OmniError
        from omni.learn.dataset import DatasetError

        problems: list[tuple[int, str]] = []
        for record in records:
            try:
                encoded = self._encoded_media(record)
            except (OmniError, MediaError) as exc:
                problems.append((record.line, f"{type(exc).__name__}: {exc}"))
                continue
            if self.config.cache_media:
                self.media[record.line] = encoded
        if problems:
            raise DatasetError("dataset", problems)

    def prepare(self, record: LabelledRequest, request: DecisionRequest | None = None) -> RecordT:
        return self.model.prepare(request or record.request, self._encoded_media(record))

    def validate(self, validation: Sequence[LabelledRequest]) -> tuple[float, float]:
        """(NLL, accuracy) over every labelled validation question, no augmentation, no gradients."""
        self.model.forget_prefixes()        # cached prefixes were made with the weights before this epoch
        self.model.head.eval()
        scored = collect_logits(self.model, validation, self.config.batch_records, self.progress, "validating",
                                prepare=self.prepare)
        pooled = compute_metrics(scored)[0]["types"]["all"]
        return pooled["nll"], pooled["accuracy"]

    def train_epoch(self, train: Sequence[LabelledRequest], epoch: int) -> float:
        from tqdm.auto import tqdm

        config = self.config
        rng = random.Random(config.seed * 100_003 + epoch)     # per-epoch seed: a resumed run repeats the same steps
        order = list(range(len(train)))
        rng.shuffle(order)
        self.model.head.train()
        losses: list[float] = []
        steps = range(0, len(order), config.batch_records)
        bar = tqdm(steps, desc=f"epoch {epoch}", unit="step", disable=not self.progress, leave=False)
        for start in bar:
            batch = [train[i] for i in order[start:start + config.batch_records]]
            pairs = [augment(r, rng) if config.augment else (r.request, r.labels) for r in batch]
            prepared = [self.prepare(record, request) for record, (request, _) in zip(batch, pairs, strict=True)]
            with torch.enable_grad():
                logits = self.model.logits(prepared)
                loss = batch_loss([request.questions for request, _ in pairs], logits, [lab for _, lab in pairs],
                                  config)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.parameters, config.max_grad_norm)
            self.optimizer.step()
            losses.append(float(loss.detach()))
            bar.set_postfix(loss=f"{losses[-1]:.4f}")
        self.model.head.eval()
        return float(np.mean(losses))

    # ---------------------------------------------------------------------------------------------- the run
    def _load_state(self, digest: str) -> SavedState | None:
        path = self.out_dir / STATE_FILE
        if not path.is_file():
            return None
        state: SavedState = torch.load(path, map_location="cpu", weights_only=False)
        free = ("epochs", "patience_epochs", "cache_media")   # a resumed run may train or wait longer
        saved = {k: v for k, v in state["config"].items() if k not in free}
        wanted = {k: v for k, v in asdict(self.config).items() if k not in free}
        if saved != wanted or state["digest"] != digest:
            changed = sorted(k for k in wanted if saved.get(k) != wanted[k]) or ["the dataset"]
            raise ValueError(f"{path} belongs to another run (different {', '.join(changed)}); "
                             "pass --restart to start over")
        _load_trained_state(self.model, state["current"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.log(f"resuming after epoch {state['history'][-1]['epoch']} from {path}")
        return state

    def _save_state(self, state: TrainingState) -> None:
        path = self.out_dir / STATE_FILE
        staging = path.with_suffix(".tmp")
        # a resumed run's state holds the previous epoch's `current` and `optimizer`: these replace them
        saved: SavedState = {**state, "current": _trained_state(self.model, self.config),
                             "optimizer": self.optimizer.state_dict()}
        torch.save(saved, staging)
        os.replace(staging, path)

    def run(self, train: Sequence[LabelledRequest], validation: Sequence[LabelledRequest], restart: bool = False,
            keep_state: bool = False) -> dict[str, Any]:
        """Train, stop early on validation NLL, write the best weights in the released layout; a summary dict."""
        config = self.config
        if self.out_dir.resolve() == self.source_dir.resolve():     # an adapter or a checkpoint: never over the base
            raise ValueError("the output directory must differ from the source checkpoint")
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.encode_media(list(train) + list(validation))
        digest = dataset_digest(train) + dataset_digest(validation)
        self.data_sha256 = training_data_sha256(train, validation)
        state: TrainingState | None = None if restart else self._load_state(digest)
        if state is None:
            nll, accuracy = self.validate(validation) if validation else (None, None)
            state = {"config": asdict(config), "digest": digest, "stopped": False, "bad_epochs": 0,
                     "history": [asdict(EpochResult(0, None, nll, accuracy))], "best_epoch": 0,
                     "best_nll": nll, "best": _trained_state(self.model, config)}
            self.log(f"before training: validation NLL {_show(nll)}, accuracy {_show(accuracy)}")
        for epoch in range(state["history"][-1]["epoch"] + 1, config.epochs + 1):
            if state["stopped"]:
                break
            torch.manual_seed(config.seed * 100_003 + epoch)
            loss = self.train_epoch(train, epoch)
            nll, accuracy = self.validate(validation) if validation else (None, None)
            state["history"].append(asdict(EpochResult(epoch, loss, nll, accuracy)))
            best_nll = state["best_nll"]     # None only without validation, and then nll is None too
            if nll is None or best_nll is None or nll < best_nll - config.min_improvement:
                state.update({"best_epoch": epoch, "best_nll": nll, "bad_epochs": 0,
                              "best": _trained_state(self.model, config)})
            else:
                state["bad_epochs"] += 1
                state["stopped"] = state["bad_epochs"] >= config.patience_epochs
            self.log(f"epoch {epoch}: train loss {loss:.4f}, validation NLL {_show(nll)}, accuracy {_show(accuracy)}"
                     + (" (best)" if state["best_epoch"] == epoch else ""))
            self._save_state(state)
        return self._finish(state, keep_state)

    def _finish(self, state: TrainingState, keep_state: bool) -> dict[str, Any]:
        _load_trained_state(self.model, state["best"])
        if self.model.backbone.quantization == "nf4":
            served_base(self.model.backbone.thinker)
        self.model.forget_prefixes()
        self.model.head.eval()
        if self.merged and self.config.mode == "lora" and self.model.backbone.quantization != "none":
            self._save_merged_from_disk()
        elif self.merged:
            merge_lora(self.model)
            save_released(self.model, self.source_dir, self.out_dir, backbone_trained=self.config.mode != "head")
        else:
            self._save_adapter()
        summary = {"source": str(self.source_dir), "config": asdict(self.config), "best_epoch": state["best_epoch"],
                   "written": "checkpoint" if self.merged else "adapter",
                   "best_validation_nll": state["best_nll"], "stopped_early": state["stopped"],
                   "history": state["history"]}
        (self.out_dir / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n")
        if not keep_state:
            (self.out_dir / STATE_FILE).unlink(missing_ok=True)
        return summary

    def _save_adapter(self, out_dir: Path | None = None) -> None:
        """The head (and LoRA weights) as an adapter folder naming the base checkpoint by its sha256 and the
        quantization it was trained over."""
        config = self.config
        base = getattr(self.model, "sha256", None) or checkpoint_sha256(self.source_dir, default_cache_dir())
        lora = LoraSpec(config.lora_rank, config.lora_alpha, tuple(config.lora_targets))
        save_adapter(self.model, out_dir or self.out_dir, mode=config.mode,
                     lora=lora if config.mode == "lora" else None, base_sha256=base,
                     base_release_date=self.model.source.release_date, training_data_sha256=self.data_sha256,
                     base_quantization=self.model.backbone.quantization)

    def _save_merged_from_disk(self) -> None:
        """--merged over a quantized base: quantized weights cannot take the LoRA back (nor be written in the
        released layout), so the adapter is merged into the unquantized base read from disk, as `omni export
        --merge` does (omni.model.adapter_merge), on the CPU (RAM, not the card the quantized base was chosen
        to fit)."""
        from omni.model.adapter_merge import merge_adapter

        with tempfile.TemporaryDirectory(dir=self.out_dir, prefix=".adapter.") as staging:
            self._save_adapter(Path(staging) / "adapter")
            dtype = str(self.model.backbone.dtype).removeprefix("torch.")
            merge_adapter(Path(staging) / "adapter", self.source_dir, self.out_dir, device="cpu", dtype=dtype,
                          replace=True)


def _check_mergeable(source_dir: Path, scheme: str) -> None:
    """--merged LoRA over a quantized base merges into the unquantized weights on disk: a base stored quantized has
    none (ValueError saying so)."""
    if scheme != "none" and "quantization_config" in json.loads((source_dir / "config.json").read_text()):
        raise ValueError(f"--merged merges the LoRA into the unquantized base read from disk, but {source_dir} is "
                         f"stored quantized ({scheme}): write the adapter (omit --merged), or fine-tune from the "
                         "unquantized checkpoint")


def _show(value: float | None) -> str:
    return "–" if value is None else f"{value:.4f}"


def finetune(model: TrainableModel[RecordT], source_dir: str | Path, records: Sequence[LabelledRequest], out_dir: str | Path,
             config: TrainingConfig | None = None, validation: Sequence[LabelledRequest] | None = None,
             restart: bool = False, keep_state: bool = False, progress: bool = True,
             log: Callable[[str], None] | None = None, merged: bool = False) -> dict[str, Any]:
    """Split (unless `validation` is given), train and save: an adapter folder for modes head and lora, a whole
    checkpoint with `merged` (and for mode full). Returns the summary written to training.json."""
    config = config or TrainingConfig()
    if validation is None:
        train, validation = split_dataset(records, config.validation_fraction, config.seed)
    else:
        train = list(records)
    trainer = Trainer(model, source_dir, out_dir, config, progress, log, merged)
    return trainer.run(train, validation, restart=restart, keep_state=keep_state)
