"""realsize_model: the model realsize.py measures, and the script's clock.

The shapes (REAL_TEXT, REAL_VISION, REAL_AUDIO, REAL_HEAD: the released Qwen3-Omni-30B-A3B thinker and the presumed
omni head; SHAPES["dry"]: the tiny checkpoint's shapes with the real vocabulary), the thinker and joint head built
with random weights directly on the device, the engines around them (`ClefModel` put together as `ClefModel.load`
would, its forward timing made real by a synchronise), and the real shapes' parameter counts on the meta device.
STARTED is the script's start: realsize.py imports this module before anything is timed, and it is set once torch
and the product modules are loaded, as before; `log` stamps progress lines on stderr with the seconds since then.
`ForwardLog` records what each forward of the thinker's transformer was given (new tokens, cached tokens, media
grids), through torch forward pre-hooks on `backbone.thinker.model`: the FLOP model counts what actually ran.

What it must not know: the cases, their inputs and rounds, the budget, how results are counted or reported, and any
real checkpoint or network (the weights are random and made on the device).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
from realsize_flops import FlopModel, count
from torch import nn

from omni.contract.config import EngineConfig
from omni.model.backbone import Backbone
from omni.model.checkpoint import CheckpointSource
from omni.model.clef import ClefModel
from omni.model.head import JointSchemaHead
from omni.model.tiny import TINY_AUDIO, TINY_TEXT, TINY_VISION, thinker_config, tiny_head_config
from omni.serve.engine import DecisionEngine
from preprocess.media import MiB

STARTED = time.monotonic()
GiB = 1024 ** 3
# Released Qwen3-Omni-30B-A3B thinker (clef-reference §1.2; qwen-omni-notes §5 / real_model_arith.py).
REAL_TEXT = {"vocab_size": 152064, "hidden_size": 2048, "intermediate_size": 768, "num_hidden_layers": 48,
                 "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "moe_intermediate_size": 768,
                 "num_experts": 128, "num_experts_per_tok": 8, "decoder_sparse_step": 1, "norm_topk_prob": True,
                 "mlp_only_layers": [], "max_position_embeddings": 65536, "rms_norm_eps": 1e-6,
                 "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [24, 20, 20],
                                  "interleaved": True, "mrope_interleaved": True}}
REAL_VISION = {"depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "num_heads": 16, "patch_size": 16,
                   "temporal_patch_size": 2, "spatial_merge_size": 2, "in_channels": 3, "num_position_embeddings": 2304,
                   "deepstack_visual_indexes": [8, 16, 24]}
REAL_AUDIO = {"num_mel_bins": 128, "encoder_layers": 32, "encoder_attention_heads": 20, "encoder_ffn_dim": 5120,
                  "d_model": 1280, "downsample_hidden_size": 480, "n_window": 50, "n_window_infer": 800,
                  "max_source_positions": 1500, "conv_chunksize": 500}
# Clef-flash's published head with hidden 2048 (§1.4's GUESS for omni): 109,175,812 parameters.
REAL_HEAD = {"hidden_size": 2048, "width": 1024, "routing_layers": 2, "layers": 4, "heads": 16, "feedforward": 4096, "dropout": 0.0}
SHAPES = {"real": {"text": REAL_TEXT, "vision": REAL_VISION, "audio": REAL_AUDIO, "head": REAL_HEAD},
          "dry": {"text": {**TINY_TEXT, "vocab_size": 152064}, "vision": TINY_VISION, "audio": TINY_AUDIO,
                      "head": tiny_head_config(TINY_TEXT["hidden_size"])}}


def log(message: str) -> None:
    """Progress on stderr, stamped with the seconds since start."""
    print(f"[{time.monotonic() - STARTED:7.1f}s] {message}", file=sys.stderr, flush=True)


def sync(device: str) -> None:
    """Wait for the device's queued work (a no-op on CPU)."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def thinker_config_for(shapes: dict, tokenizer):
    """Thinker config of `shapes` whose special-token ids are `tokenizer`'s (tiny.thinker_config) and whose vocabulary
    has the shapes' size (the tokenizer's ids are all below it)."""
    from transformers import Qwen3OmniMoeThinkerConfig

    values = thinker_config(tokenizer, text=shapes["text"], vision=shapes["vision"], audio=shapes["audio"])
    values["text_config"]["vocab_size"] = shapes["text"]["vocab_size"]
    return Qwen3OmniMoeThinkerConfig(**values)


@torch.no_grad()
def randomize_(module: nn.Module, std: float = 0.02) -> int:
    """Random weights in place, one kernel per tensor: norms 1 (bias 0), matrices N(0, std), vectors 0. Returns the
    number of tensors touched."""
    touched = 0
    for sub in module.modules():
        norm = "Norm" in type(sub).__name__
        for name, param in sub.named_parameters(recurse=False):
            if norm:
                param.fill_(1.0 if name == "weight" else 0.0)
            elif param.dim() >= 2:
                param.normal_(0.0, std)
            else:
                param.zero_()
            touched += 1
    return touched


def build_thinker(config, device: str, dtype: torch.dtype) -> nn.Module:
    """The thinker made directly on `device` in `dtype` (construction-time init skipped), then randomized there."""
    from transformers import Qwen3OmniMoeThinkerForConditionalGeneration

    try:
        from transformers.initialization import no_init_weights
    except ImportError:   # transformers before 5.x kept it here
        from transformers.modeling_utils import no_init_weights

    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)   # as from_pretrained(dtype=...) does, for construction only
    try:
        with no_init_weights(), torch.device(device):
            thinker = Qwen3OmniMoeThinkerForConditionalGeneration(config)
    finally:
        torch.set_default_dtype(previous)
    torch.manual_seed(0)
    tensors = randomize_(thinker)
    thinker.set_attn_implementation("sdpa")   # Backbone.load's default
    log(f"thinker: {tensors} tensors randomized on {device}")
    return thinker.eval()


def build_model(args, shapes: dict, parts) -> tuple[Backbone, JointSchemaHead]:
    """Backbone (lm_head kept as the lexical table, as Backbone.load) + joint head, random, on the device."""
    dtype = getattr(torch, args.dtype)
    thinker = build_thinker(thinker_config_for(shapes, parts.tokenizer), args.device, dtype)
    lexical_table = thinker.lm_head.weight.detach()
    thinker.lm_head = nn.Identity()
    thinker.requires_grad_(False)
    torch.manual_seed(1)
    with torch.device(args.device):
        head = JointSchemaHead(**shapes["head"])
    head = head.to(dtype=getattr(torch, args.head_dtype)).eval().requires_grad_(False)
    sync(args.device)
    return Backbone(thinker, lexical_table, args.device, dtype), head


def make_engine(backbone: Backbone, head: JointSchemaHead, parts, directory: Path, config: EngineConfig,
                device: str) -> DecisionEngine:
    """A ClefModel assembled by hand as `ClefModel.from_config` would, behind a DecisionEngine; its forward timing is
    made real by a CUDA synchronise at the end of `probabilities` (where the product reads them anyway)."""
    model = ClefModel(backbone, head, parts, CheckpointSource(directory, False, "random"),
                      max_context_tokens=config.max_context_tokens, media_limits=config.media,
                      media_cache_bytes=int(config.media_cache_mb * MiB),
                      prefix_cache_bytes=int(config.prefix_cache_mb * MiB), isolation=config.isolation)
    probabilities = model.probabilities

    def synchronised(records):
        out = probabilities(records)
        sync(device)
        return out

    model.probabilities = synchronised
    return DecisionEngine(config, model=model).load()


class ForwardLog:
    """While `recording()`, one entry per forward of `module` (the thinker's `thinker.model`, which every prefill,
    chunk and continuation calls): (rows, new tokens per row, tokens already cached, its media tensors by name).
    A pure observer (a torch forward pre-hook): it keeps references, reads no values, so it adds no device sync."""

    MEDIA_KEYS = ("image_grid_thw", "video_grid_thw", "feature_attention_mask")

    def __init__(self, module: nn.Module):
        self.entries: list[tuple[int, int, int, dict[str, torch.Tensor]]] = []
        self.active = False
        module.register_forward_pre_hook(self.record, with_kwargs=True)

    def record(self, module, args, kwargs) -> None:
        if not self.active:
            return
        ids = kwargs["input_ids"]
        cache = kwargs.get("past_key_values")
        self.entries.append((int(ids.shape[0]), int(ids.shape[-1]), int(cache.get_seq_length()) if cache is not None
                             else 0, {k: kwargs[k] for k in self.MEDIA_KEYS if kwargs.get(k) is not None}))

    def recording(self) -> ForwardLog:
        """Start a fresh record (ends with `stop`)."""
        self.entries, self.active = [], True
        return self

    def stop(self) -> list[tuple[int, int, int, dict[str, torch.Tensor]]]:
        self.active = False
        return self.entries


def real_shapes_on_meta() -> None:
    """Dry run only: the real-size config built on the meta device, to show its parameter counts here."""
    from transformers import Qwen3OmniMoeThinkerForConditionalGeneration

    from omni.model.tiny import build_tokenizer

    with torch.device("meta"):
        thinker = Qwen3OmniMoeThinkerForConditionalGeneration(thinker_config_for(SHAPES["real"], build_tokenizer()))
        head = JointSchemaHead(**REAL_HEAD)
    params = FlopModel(thinker, head).params
    log("real shapes on the meta device: " + ", ".join(f"{k} {v / 1e9:.4f} B" for k, v in params.items())
        + f" ({count(thinker) * 2 / GiB:.1f} GiB in bf16)")
