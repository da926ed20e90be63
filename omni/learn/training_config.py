"""What a fine-tuning run is asked to do: the mode (head, LoRA, full), its epochs, rates, loss weights and split.

A plain frozen dataclass apart from the training itself (omni/learn/training.py), so that `omni finetune --help`
can show the modes and defaults without importing torch. Knows nothing of torch, argv, HTTP or the environment.
"""
from __future__ import annotations

from dataclasses import dataclass

TRAINING_MODES = ("head", "lora", "full")


@dataclass(frozen=True)
class TrainingConfig:
    mode: str = "head"                      # head | lora (LoRA on the thinker's text decoder) | full
    epochs: int = 20
    batch_records: int = 8                  # records per optimizer step
    learning_rate: float = 1e-3             # the head
    backbone_learning_rate: float = 1e-4    # LoRA adapters or the whole thinker
    weight_decay: float = 0.01
    label_smoothing: float = 0.05
    brier_weight: float = 1.0
    max_grad_norm: float = 1.0
    validation_fraction: float = 0.2
    patience_epochs: int = 3
    min_improvement: float = 1e-4           # validation NLL must drop by this much to count
    augment: bool = True
    cache_media: bool = True                # keep encoded media in memory (~9 MB per 2 s video) or re-encode
    seed: int = 0
    lora_rank: int = 16
    lora_alpha: float = 32.0
    lora_targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")

    def __post_init__(self) -> None:
        if self.mode not in TRAINING_MODES:
            raise ValueError(f"mode must be one of {TRAINING_MODES}, not {self.mode!r}")
