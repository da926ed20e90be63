"""The activation and key/value peak of the thinker's prefill, from what transformers' Qwen3-Omni text decoder and
this project's forward (`omni.model.backbone`, `forward`, `chunked`, `attention`) allocate — derived from their
code and checked against what torch allocates on the tiny checkpoint (tests/integration/model/test_memory_plan.py).

Inference frees each layer's rows before the next layer, so a forward's peak is one layer's, at its largest phase:
- the MoE phase, per token (rows x width of the batch): the residual stream's 4 hidden rows (the embeddings, the
  layer's input, the attention residual, the normed input), the rotary cos/sin (2 x head_dim), the ids (input ids
  and 3-D positions: 4 int64), the router's logits (experts) and top-k values (float32) and indices (int64), the
  grouped experts' sort (sorted ids, permutation, inverse: 3 int64 per pick, a float32 copy of the ids, the picks'
  weights) and their 4 rows of hidden size per pick (the gathered input, the down projection, the weighted output,
  the output put back in order: 4 x top_k x hidden);
- the attention phase, per new token: 3 hidden rows, cos/sin, the rotated queries and the CPU merge of cached and
  own keys (7 query-sized rows), plus, over every key (cached + new), the keys and values repeated to the query
  heads (2 x heads x head_dim per key), which grows with the context, not the chunk;
- keys and values kept: 2 x layers x kv_heads x head_dim per position — all of a forward's when the prefix cache
  is on (`prefill_with_cache`), the preallocated buffer of a chunked prefill, and the copy a continuation concatenates
  its own keys onto (`continue_from`).
A request with media adds, for the whole forward, its model-ready media tensors (the batch's concatenated copy:
image patches in the dtype, video patches as uint8 and normalised into the dtype, audio features in the dtype), and
with images or video one more hidden row per token (the deepstack step's clone) and, per visual token, the merged
embeddings, the deepstack features and their concatenation ((2 + deepstack layers) hidden rows). The towers' own
layers run before the decoder and are not planned (on the tiny checkpoint they peak below it).
A chunked record (prefix over 2 chunks) peaks in its continuation: the chunk buffer and the prefix's hidden rows,
the continuation's concatenated cache and the repeated keys over the whole context, and the suffix's attention phase.
Knows nothing of files, weights, devices' memory or argv.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omni.model.doctor.layout import ModelShape

INT64, FLOAT32 = 8, 4
IDS_PER_TOKEN = 4 * INT64              # input ids + 3-D position ids
STREAM_ROWS_MOE, STREAM_ROWS_ATTENTION = 4, 3
EXPERT_ROWS_PER_PICK = 4
QUERY_ROWS_ATTENTION = 7


@dataclass(frozen=True)
class Peak:
    """A forward's peak, split: activations (freed after the forward) and keys/values (kept while it runs)."""

    activation_bytes: int
    kv_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.activation_bytes + self.kv_bytes


@dataclass(frozen=True)
class Media:
    """What a request's media bring into a forward: patches of images and videos (each patch_dim values), audio
    feature frames (mel_bins values each), the visual tokens they become."""

    image_patches: int = 0
    video_patches: int = 0
    audio_frames: int = 0
    visual_tokens: int = 0


@dataclass(frozen=True)
class Towers:
    """The towers' figures the media terms need, from the config."""

    patch_dim: int            # in_channels x temporal_patch_size x patch_size^2
    merge: int                # patches per visual token (spatial_merge_size^2)
    deepstack: int            # deepstack visual layers
    mel_bins: int


def towers(config: Any) -> Towers:
    thinker = config.thinker_config
    vision, audio = thinker.vision_config, thinker.audio_config
    return Towers(int(vision.in_channels * vision.temporal_patch_size * vision.patch_size ** 2),
                  int(vision.spatial_merge_size ** 2), len(vision.deepstack_visual_indexes), int(audio.num_mel_bins))


def media_bytes(shape: ModelShape, parts: Towers, itemsize: int, media: Media, tokens: int,
                batched: bool = True) -> int:
    """Bytes a request's media add to a forward of `tokens` tokens (see the module's docstring). `batched`: the
    batch's concatenated float32 copy of the images' patches and audio features and uint8 copy of the videos'
    (a chunked record's first chunk takes the record's own tensors: only what is converted into the dtype)."""
    converted = itemsize if itemsize != FLOAT32 else 0          # float32 patches and features cast to the dtype
    copied = FLOAT32 if batched else 0
    inputs = (media.image_patches * (copied + converted)
              + media.video_patches * ((1 if batched else 0) + itemsize)) * parts.patch_dim
    inputs += media.audio_frames * parts.mel_bins * (copied + converted)
    if not media.visual_tokens:
        return inputs
    rows = tokens + (2 + parts.deepstack) * media.visual_tokens
    return inputs + rows * shape.hidden_size * itemsize


def kv_per_token(shape: ModelShape, itemsize: int) -> int:
    """Bytes of one position's keys and values over every layer."""
    return 2 * shape.layers * shape.kv_heads * shape.head_dim * itemsize


def moe_per_token(shape: ModelShape, itemsize: int) -> int:
    """Bytes per token of a layer's MoE phase (grouped experts), the peak of a forward without a long cache."""
    h, k = shape.hidden_size, shape.experts_per_token
    floating = (STREAM_ROWS_MOE * h + 2 * shape.head_dim + shape.experts + EXPERT_ROWS_PER_PICK * k * h + k) * itemsize
    top_k_values = k * (FLOAT32 + (itemsize if itemsize != FLOAT32 else 0))     # float32, then cast to the dtype
    routing = k * (INT64 + 3 * INT64 + FLOAT32)        # top-k indices; sorted ids, permutation, inverse; histc input
    return floating + top_k_values + routing + IDS_PER_TOKEN


def attention_bytes(shape: ModelShape, itemsize: int, tokens: int, keys: int) -> int:
    """A layer's attention phase for `tokens` new tokens over `keys` keys (cached + new)."""
    query = shape.attention_heads * shape.head_dim
    rows = STREAM_ROWS_ATTENTION * shape.hidden_size + 2 * shape.head_dim + QUERY_ROWS_ATTENTION * query
    per_token = rows * itemsize
    return tokens * (per_token + IDS_PER_TOKEN) + 2 * query * keys * itemsize


def forward_peak(shape: ModelShape, itemsize: int, rows: int, tokens: int, keep_kv: bool) -> Peak:
    """One forward of `rows` records of `tokens` tokens from scratch (a batch, chunking off or short prompts)."""
    activations = rows * max(tokens * moe_per_token(shape, itemsize), attention_bytes(shape, itemsize, tokens, tokens))
    return Peak(activations, rows * tokens * kv_per_token(shape, itemsize) if keep_kv else 0)


def chunked_peak(shape: ModelShape, itemsize: int, prefix: int, suffix: int, chunk: int, first_chunk: int = 0,
                 media: int = 0) -> Peak:
    """One record whose `prefix` tokens are prefilled `chunk` at a time (the first chunk `first_chunk` tokens: it
    holds every media item whole, whose tensors add `media` bytes), then `suffix` tokens continue them."""
    kv = kv_per_token(shape, itemsize)
    first_chunk = max(first_chunk, min(chunk, prefix))
    first = Peak(first_chunk * moe_per_token(shape, itemsize) + media, prefix * kv)
    hidden_rows = prefix * shape.hidden_size * itemsize
    last_chunk = max(chunk * moe_per_token(shape, itemsize), attention_bytes(shape, itemsize, chunk, prefix))
    continuation = max(suffix * moe_per_token(shape, itemsize),
                       attention_bytes(shape, itemsize, suffix, prefix + suffix))
    chunks = Peak(hidden_rows + last_chunk, prefix * kv)
    continued = Peak(hidden_rows + continuation, prefix * kv + (prefix + suffix) * kv)
    return max(first, chunks, continued, key=lambda peak: peak.total_bytes)
