"""Loads a Qwen3-Omni thinker from a Clef-omni checkpoint and runs one prefill to final-norm hidden states.

The only module that loads or runs `Qwen3OmniMoe*` model classes (`omni.model.tiny` names them too, to build a
random checkpoint offline; `omni.model.quantized_export` loads through `loadable_class` to save one quantized).
The text layers can be quantized while loading (`quantization`: `omni.model.quantize`'s schemes, through torchao or
bitsandbytes; a pre-quantized checkpoint brings its own in config.json). Loading follows Clef-omni's reference loader: audio output disabled, strict key checks
(only `talker.*` / `code2wav.*` may be unexpected), `lm_head` swapped for Identity while its weight is kept as the
head's lexical table; M-RoPE sections that do not share out the head's rotary frequencies are refused first
(`checkpoint.check_mrope_section`: transformers runs them, silently wrong). Knows nothing of prompts, questions,
answers or HTTP; it sees token ids, model-ready media tensors and per-record lengths.
"""
from __future__ import annotations

import contextlib
import functools
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import torch
from safetensors import SafetensorError
from torch import nn

from omni.contract.errors import CheckpointError
from omni.model import attention, quantize
from omni.model.checkpoint import check_mrope_section
from omni.model.chunk_cache import layer_kv, preallocated_layer
from omni.model.lora import LoraSlots
from preprocess.processor import media_on_device

if TYPE_CHECKING:
    from peft import PeftModel
    from transformers import Cache, Qwen3OmniMoeThinkerForConditionalGeneration

log = logging.getLogger(__name__)

ALLOWED_UNEXPECTED_PREFIXES = ("talker.", "code2wav.")
KV = tuple[tuple[torch.Tensor, torch.Tensor], ...]   # per layer: (keys, values) [rows, kv_heads, positions, head_dim]
MEDIA_TENSOR_KEYS = ("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw",
                     "video_second_per_grid", "input_features", "feature_attention_mask")


def resolve_dtype(dtype: str, device: str) -> torch.dtype:
    if dtype == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    try:
        return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    except KeyError:
        raise ValueError(f"dtype must be auto, float32, bfloat16 or float16, not {dtype!r}") from None


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


# transformers 5 nests the thinker's parts at load; the released checkpoint names them one level up.
_RUNTIME_TO_CHECKPOINT = (("thinker.model.language_model.", "thinker.model."),
                          ("thinker.model.audio_tower.", "thinker.audio_tower."),
                          ("thinker.model.visual.", "thinker.visual."))


def checkpoint_key(runtime_key: str) -> str:
    """The released checkpoint's name for a key as transformers reports it (so errors name what is in the files)."""
    for runtime, released in _RUNTIME_TO_CHECKPOINT:
        if runtime_key.startswith(runtime):
            return released + runtime_key[len(runtime):]
    return runtime_key


def _check_loading_info(info: dict[str, Any]) -> None:
    unexpected = [k for k in info.get("unexpected_keys", ()) if not k.startswith(ALLOWED_UNEXPECTED_PREFIXES)]
    problems = []
    if info.get("missing_keys"):
        problems.append("missing keys: " + ", ".join(sorted(map(checkpoint_key, info["missing_keys"]))))
    if info.get("mismatched_keys"):
        problems.append("shape-mismatched keys: " + ", ".join(
            f"{checkpoint_key(key)} (checkpoint {tuple(ckpt)} vs model {tuple(model)})"
            for key, ckpt, model in info["mismatched_keys"]))
    if unexpected:
        problems.append("unexpected keys: " + ", ".join(sorted(unexpected)))
    if info.get("error_msgs"):
        problems.append("errors: " + "; ".join(map(str, info["error_msgs"])))
    if problems:
        raise CheckpointError("backbone weights do not match config.json — " + " | ".join(problems))


class MediaTiming(TypedDict):
    """The thinker's audio/video timing constants (`MediaEncoder`'s keyword arguments)."""

    position_id_per_seconds: float
    n_window: int


@dataclass
class BackboneBatch:
    """Right-padded inputs of several records. input_ids [B, L]; position_ids [3, B, L]; row b is real for its
    first lengths[b] positions (no attention mask is needed: see `padded_hidden_states`)."""

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    lengths: list[int]
    media: dict[str, torch.Tensor] = field(default_factory=dict)


class Backbone:
    """A loaded thinker: `hidden_states(records)` → one [T_i, H] tensor per record, in one forward."""

    def __init__(self, thinker: Qwen3OmniMoeThinkerForConditionalGeneration, lexical_table: torch.Tensor, device: str,
                 dtype: torch.dtype, quantization: str = "none"):
        self.thinker = thinker
        self.peft_model: PeftModel | None = None    # LoRA adapters around the thinker while fine-tuning injects them
        self.lora = LoraSlots(thinker)              # served LoRA adapters: `lora.rows(keys)` applies keys[b] to row b
        self.lexical_table = lexical_table          # [V, H], the original untied lm_head weight
        self.device, self.dtype = device, dtype
        self.quantization = quantization            # the text layers' scheme (omni.model.quantize)
        self.hidden_size = int(lexical_table.shape[1])

    @classmethod
    def load(cls, directory: Path, dtype: str = "auto", device: str = "auto",
             attn_implementation: str = "sdpa", quantization: str | None = None) -> Backbone:
        """`quantization`: a scheme of `omni.model.quantize` for the text layers; None = as the checkpoint is stored
        (a pre-quantized checkpoint's own scheme, else none)."""
        from transformers import AutoConfig

        device = resolve_device(device)
        torch_dtype = resolve_dtype(dtype, device)
        config = AutoConfig.from_pretrained(directory)
        config.enable_audio_output = False
        check_mrope_section(config)
        stored = quantize.stored_scheme(config)
        scheme = quantize.resolve(quantization, stored, directory)
        quantize.check_usable(scheme, device)
        # a pre-quantized checkpoint brings its library config in config.json; only the experts' forward is ours
        options = quantize.loading_arguments(scheme, torch_dtype)
        if stored is not None:
            options.pop("quantization_config", None)
        try:
            # with output_loading_info=True it returns (model, info), which its annotation does not say
            loaded: Any = loadable_class().from_pretrained(
                directory, config=config, dtype=torch_dtype, output_loading_info=True, ignore_mismatched_sizes=True,
                attn_implementation=attn_implementation, device_map={"": device}, **options)
            model, info = loaded
        except (OSError, ValueError, RuntimeError, SafetensorError) as exc:
            fix = (f": export it again (omni export checkpoint SOURCE --quantize {stored} --out DIR)" if stored
                   else "")
            raise CheckpointError(f"could not load the backbone ({scheme}) from {directory}: {exc}{fix}") from exc
        _check_loading_info(info)
        thinker = model.thinker.eval()
        quantize.finish(thinker, scheme)
        if attn_implementation == "sdpa":       # the text layers: causal SDPA that also continues caches, maskless
            thinker.set_attn_implementation({"text_config": attention.register()})
        lexical_table = thinker.lm_head.weight.detach()
        thinker.lm_head = nn.Identity()        # hidden states out; its weight is kept as the lexical table
        thinker.requires_grad_(False)
        return cls(thinker, lexical_table, device, torch_dtype, scheme)

    def grad_off(self) -> contextlib.AbstractContextManager[Any]:
        """The grad mode answers run in: inference_mode, or no_grad where the quantized weights need it."""
        return quantize.grad_off(self.quantization)

    @property
    def media_timing(self) -> MediaTiming:
        """The thinker's audio/video timing constants the media encoder must agree with."""
        config: Any = self.thinker.config      # transformers types its nested sub-configs loosely
        return {"position_id_per_seconds": float(config.position_id_per_seconds),
                "n_window": int(config.audio_config.n_window)}

    def position_ids(self, input_ids: torch.Tensor, media: dict[str, torch.Tensor], use_audio_in_video: bool) -> torch.Tensor:
        """Explicit 3-D M-RoPE ids [3, 1, T] for one record, via the thinker's own get_rope_index.

        Always passed to the forward: the model would otherwise compute them itself and keep `rope_deltas` on the
        module (shared state, not thread-safe).
        """
        ids = input_ids.view(1, -1)
        if not any(k in media for k in ("image_grid_thw", "video_grid_thw", "feature_attention_mask")):
            return torch.arange(ids.shape[1]).view(1, 1, -1).expand(3, 1, -1)
        audio_lengths = media["feature_attention_mask"].sum(-1) if "feature_attention_mask" in media else None
        positions, _ = self.thinker.model.get_rope_index(
            ids, media.get("image_grid_thw"), media.get("video_grid_thw"), torch.ones_like(ids),
            use_audio_in_video, audio_lengths, media.get("video_second_per_grid"))
        return positions.to(torch.long)

    def collate(self, records: list[tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]]) -> BackboneBatch:
        """records: (input_ids [T], position_ids [3, 1, T], media tensors) → one right-padded batch."""
        lengths = [int(ids.numel()) for ids, _, _ in records]
        width = max(lengths)
        input_ids = torch.zeros(len(records), width, dtype=torch.long)
        position_ids = torch.zeros(3, len(records), width, dtype=torch.long)
        for row, (ids, positions, _) in enumerate(records):
            n = lengths[row]
            input_ids[row, :n] = ids
            position_ids[:, row, :n] = positions[:, 0]
            # pads continue the sequence; they sit after every real token, so causal attention never sees them
            position_ids[:, row, n:] = positions.max() + 1 + torch.arange(width - n)
        return BackboneBatch(input_ids, position_ids, lengths, _concat_media([m for _, _, m in records]))

    def hidden_states(self, batch: BackboneBatch) -> list[torch.Tensor]:
        """One prefill of the whole batch; returns each record's final-norm hidden states [T_i, H]."""
        hidden = self.padded_hidden_states(batch)
        return [hidden[row, :n] for row, n in enumerate(batch.lengths)]

    def padded_hidden_states(self, batch: BackboneBatch) -> torch.Tensor:
        """One prefill of the whole batch; the final-norm hidden states [B, L, H], right-padded like the batch.

        Runs under whatever grad mode the caller chose: serving wraps it in inference_mode, training does not.
        """
        return self._prefill(batch, use_cache=False)[0]

    def prefill_with_cache(self, batch: BackboneBatch) -> tuple[torch.Tensor, Cache]:
        """`padded_hidden_states` plus every position's keys and values (a transformers Cache) to take prefixes from."""
        return self._prefill(batch, use_cache=True)

    def _prefill(self, batch: BackboneBatch, use_cache: bool) -> tuple[torch.Tensor, Cache]:
        media = media_on_device(batch.media, self.device, self.dtype)   # uint8 video pixels normalised there
        # No padding mask, on purpose: the pads sit after every real token, so under causal attention no real token
        # ever attends to one, and nothing else in the thinker mixes positions. Without a mask the attention runs
        # its causal kernel; with one, every layer would apply a [B, 1, L, L] mask (measured on CPU: a mixed batch
        # of 8 spent 13 of its 61 ms converting that mask). Pad rows' outputs are garbage and are never read.
        output = self.thinker.model(
            input_ids=batch.input_ids.to(self.device), attention_mask=None,
            position_ids=batch.position_ids.to(self.device), use_cache=use_cache, **media)
        return output.last_hidden_state, output.past_key_values

    @staticmethod
    def prefix_kv(cache: Cache, row: int, length: int) -> KV:
        """Row `row`'s keys and values for its first `length` positions, per layer (copies: [1, heads, P, d])."""
        return tuple((keys[row:row + 1, :, :length].clone(), values[row:row + 1, :, :length].clone())
                     for keys, values in map(layer_kv, cache.layers))

    def chunk_cache(self, capacity: int) -> Cache:
        """An empty key/value cache for one record's prefill in chunks, room for `capacity` positions per layer."""
        from transformers import Cache

        config: Any = self.thinker.config      # transformers types its nested sub-configs loosely
        layers = int(config.text_config.num_hidden_layers)
        return Cache(layers=[preallocated_layer(capacity) for _ in range(layers)])

    def prefill_chunk(self, cache: Cache, input_ids: torch.Tensor, position_ids: torch.Tensor,
                      media: dict[str, torch.Tensor]) -> torch.Tensor:
        """The next chunk of one record: input_ids [S], position_ids [3, 1, S], the media whose placeholders are in it
        -> final-norm hidden states [S, H]; its keys/values are appended to `cache` (`chunk_cache`)."""
        media = media_on_device(media, self.device, self.dtype)
        output = self.thinker.model(input_ids=input_ids[None].to(self.device), position_ids=position_ids.to(self.device),
                                    past_key_values=cache, use_cache=True, **media)
        return output.last_hidden_state[0]

    @staticmethod
    def cached_kv(cache: Cache) -> KV:
        """The keys/values a chunked prefill left in its cache (views of its buffers: no copy)."""
        return tuple(map(layer_kv, cache.layers))

    def continue_from(self, kv: KV, input_ids: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        """Prefill tokens that follow a cached prefix: input_ids [K, S] (right-padded), position_ids [3, K, S], the
        prefix's keys/values (one row, repeated for the K rows) -> final-norm hidden states [K, S, H]. Each row is
        causal over the prefix and itself (the pads sit after every real token, as in `padded_hidden_states`)."""
        from transformers import DynamicCache

        rows = input_ids.shape[0]
        cache = DynamicCache(ddp_cache_data=[(k.expand(rows, -1, -1, -1).contiguous(),
                                              v.expand(rows, -1, -1, -1).contiguous()) for k, v in kv])
        output = self.thinker.model(input_ids=input_ids.to(self.device), position_ids=position_ids.to(self.device),
                                    past_key_values=cache, use_cache=False)
        return output.last_hidden_state


@functools.cache
def loadable_class() -> Any:
    """Qwen3-Omni's top-level class with the embedding accessors quantizers ask for (transformers leaves them
    unimplemented on this composite model, and its torchao quantizer calls `get_input_embeddings`)."""
    from transformers import Qwen3OmniMoeForConditionalGeneration

    class ClefOmniForConditionalGeneration(Qwen3OmniMoeForConditionalGeneration):
        def get_input_embeddings(self) -> nn.Module:
            return self.thinker.get_input_embeddings()

        def get_output_embeddings(self) -> nn.Module:
            return self.thinker.lm_head

    return ClefOmniForConditionalGeneration


def _concat_media(per_record: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Concatenate each media tensor across records in record order (the model scatters them in sequence order).

    Audio features are padded to the longest clip of the batch; `feature_attention_mask` keeps each clip's length.
    """
    merged: dict[str, torch.Tensor] = {}
    for key in MEDIA_TENSOR_KEYS:
        parts = [m[key] for m in per_record if key in m]
        if not parts:
            continue
        if key in ("input_features", "feature_attention_mask"):
            width = max(p.shape[-1] for p in parts)
            parts = [nn.functional.pad(p, (0, width - p.shape[-1])) for p in parts]
        merged[key] = torch.cat(parts, dim=0)
    return merged
