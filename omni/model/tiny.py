"""Builds a complete tiny random Clef-omni checkpoint directory offline, in the released layout.

Writes: `config.json` (Qwen3OmniMoeConfig, audio output disabled) + `model.safetensors` (thinker weights under
`thinker.*`), `joint_head_config.json` + `joint_head.safetensors` (Clef state-dict names), a byte-level BPE tokenizer
trained here with the 33 Qwen special tokens in release order, and `processor_config.json` (image processor + Whisper
feature extractor sections). The result loads through exactly the path a real `Cloudflare/clef-omni` directory takes.
Besides `omni.model.backbone` (which loads and runs them), the one module that names `Qwen3OmniMoe*` classes: it
builds a random model from a config rather than loading one. Knows nothing of serving, prompts or HTTP; the same seed
gives the same weight bytes.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors.torch import save_file

from omni.model.head import JointSchemaHead

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase, Qwen2Tokenizer

SPECIAL_TOKENS = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
    "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
    "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>",
    "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>",
    "<think>", "</think>", "<|audio_start|>", "<|audio_end|>", "<tts_pad>", "<tts_text_bos>", "<tts_text_eod>",
    "<tts_text_bos_single>", "<|audio_pad|>",
)
# Qwen marks these `special: false` (they are still single added tokens).
NOT_SPECIAL = frozenset({"<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
                         "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>",
                         "<think>", "</think>"})
MULTIMODAL_TOKENS = {"image_token": "<|image_pad|>", "audio_token": "<|audio_pad|>", "video_token": "<|video_pad|>",
                     "vision_bos_token": "<|vision_start|>", "vision_eos_token": "<|vision_end|>",
                     "audio_bos_token": "<|audio_start|>", "audio_eos_token": "<|audio_end|>"}
QWEN_SPLIT_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                    r"|\s*[\r\n]+|\s+(?!\S)|\s+")
TOKENIZER_CORPUS = (
    ("Read the complete state and schema. Decide every field jointly. Each answer must be exactly one of that "
     "field's allowed options."), "STATE:", "SCHEMA FIELDS:", "FIELD 1", "ID: label_visible", "TYPE: noul",
    "TYPE: choice", "TYPE: score", "INSTRUCTION: ", "ALLOWED OPTIONS:", "OPTION 1: ", "END FIELD",
    "JOINT SCHEMA DECISIONS:", '{"description":"The proposition is true or the answer is yes.","option_id":"true"}',
    '{"description":"The proposition is false or the answer is no.","option_id":"false"}',
    "Is the model and serial number label visible in the photo?",
    "Does the unit sound like it is running smoothly, without rattling or grinding?",
    "Is the fan running in the video?", ("Review the installation: a photo of the unit, an audio recording of it "
                                         "running, and a video of the fan."), "Which team should handle this? billing technical sales",
    "How urgent is this? can wait this week today right now", "Our checkout returns errors and orders are stuck.",
    "yes no maybe true false A B C D E 0 1 2 3 4 5 6 7 8 9 {} [] : , \" _ -",
)
CHAT_TEMPLATE = (
    "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}{%- else %}{%- for c in message['content'] %}"
    "{%- if c['type'] == 'image' %}{{- '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{%- elif c['type'] == 'video' %}{{- '<|vision_start|><|video_pad|><|vision_end|>' }}"
    "{%- elif c['type'] == 'audio' %}{{- '<|audio_start|><|audio_pad|><|audio_end|>' }}"
    "{%- elif c['type'] == 'text' %}{{- c['text'] }}{%- endif %}{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
IMAGE_PROCESSOR = {"image_processor_type": "Qwen2VLImageProcessor", "patch_size": 16, "temporal_patch_size": 2,
                   "merge_size": 2, "min_pixels": 3136, "max_pixels": 12845056, "image_mean": [0.5, 0.5, 0.5],
                   "image_std": [0.5, 0.5, 0.5], "rescale_factor": 1 / 255, "do_resize": True, "do_rescale": True,
                   "do_normalize": True, "do_convert_rgb": True}
FEATURE_EXTRACTOR = {"feature_extractor_type": "WhisperFeatureExtractor", "feature_size": 128,
                     "sampling_rate": 16000, "hop_length": 160, "n_fft": 400, "chunk_length": 300, "dither": 0.0,
                     "padding_side": "right", "padding_value": 0.0, "return_attention_mask": True}
# Small but real shapes: every Qwen3-Omni mechanism (MoE routing, M-RoPE, deepstack, audio windows) is exercised.
TINY_TEXT = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                 "num_key_value_heads": 2, "head_dim": 16, "moe_intermediate_size": 32, "num_experts": 4, "num_experts_per_tok": 2,
                 "decoder_sparse_step": 1, "norm_topk_prob": True, "max_position_embeddings": 65536, "rms_norm_eps": 1e-6,
                 "tie_word_embeddings": False,
                 "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [4, 2, 2],
                                  "interleaved": True, "mrope_interleaved": True}}
TINY_VISION = {"depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "patch_size": 16, "temporal_patch_size": 2,
                   "spatial_merge_size": 2, "in_channels": 3, "num_position_embeddings": 64, "deepstack_visual_indexes": [1]}
TINY_AUDIO = {"num_mel_bins": 128, "encoder_layers": 2, "encoder_attention_heads": 2, "encoder_ffn_dim": 64, "d_model": 32,
                  "downsample_hidden_size": 16, "n_window": 50, "n_window_infer": 800, "max_source_positions": 1500,
                  "conv_chunksize": 500}


def build_tokenizer(vocab_size: int = 1000) -> Qwen2Tokenizer:
    """A byte-level BPE with Qwen's pre-tokenizer, trained on a fixed corpus; specials appended in release order."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import Qwen2Tokenizer

    bpe = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    bpe.normalizer = normalizers.NFC()
    bpe.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    bpe.train_from_iterator(list(TOKENIZER_CORPUS) * 8, trainer=trainer)
    model = json.loads(bpe.to_str())["model"]
    vocab = dict(model["vocab"])
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
    base = len(vocab)
    for offset, token in enumerate(SPECIAL_TOKENS):  # fixes the specials' ids and order before add_tokens
        vocab[token] = base + offset
    # the annotations say merges are strings and unk_token a string; the class takes (a, b) pairs and None (Qwen's own
    # tokenizer has no unknown token), as transformers' converters pass them
    tokenizer = Qwen2Tokenizer(vocab=vocab, merges=merges, unk_token=None,  # type: ignore[arg-type]
                               bos_token=None, eos_token="<|im_end|>",
                               pad_token="<|endoftext|>", extra_special_tokens=dict(MULTIMODAL_TOKENS),
                               model_max_length=65536)
    tokenizer.add_tokens([AddedToken(t, special=t not in NOT_SPECIAL, normalized=False) for t in SPECIAL_TOKENS])
    tokenizer.chat_template = CHAT_TEMPLATE
    ids = tokenizer.convert_tokens_to_ids(list(SPECIAL_TOKENS))
    if ids != list(range(base, base + len(SPECIAL_TOKENS))):
        raise RuntimeError(f"special tokens did not land in release order: {ids}")
    return tokenizer


def thinker_config(tokenizer: PreTrainedTokenizerBase, text: dict[str, Any] | None = None,
                   vision: dict[str, Any] | None = None, audio: dict[str, Any] | None = None) -> dict[str, Any]:
    """Thinker config dict with the token-id fields the released config.json carries (some are undeclared)."""
    ids = tokenizer.convert_tokens_to_ids
    text = {**TINY_TEXT, **(text or {}), "vocab_size": len(tokenizer)}
    vision = {**TINY_VISION, **(vision or {}), "out_hidden_size": text["hidden_size"]}
    audio = {**TINY_AUDIO, **(audio or {}), "output_dim": text["hidden_size"]}
    return {"text_config": text, "vision_config": vision, "audio_config": audio,
                "audio_token_id": ids("<|audio_pad|>"), "image_token_id": ids("<|image_pad|>"),
                "video_token_id": ids("<|video_pad|>"), "audio_start_token_id": ids("<|audio_start|>"),
                "audio_end_token_id": ids("<|audio_end|>"), "vision_start_token_id": ids("<|vision_start|>"),
                "vision_end_token_id": ids("<|vision_end|>"), "position_id_per_seconds": 13, "seconds_per_chunk": 2,
                "tie_word_embeddings": False}


def tiny_head_config(hidden_size: int) -> dict[str, Any]:
    return {"hidden_size": hidden_size, "width": 32, "routing_layers": 1, "layers": 2, "heads": 4,
            "feedforward": 64, "dropout": 0.0}


def write_checkpoint(out_dir: str | Path, seed: int = 0, text: dict[str, Any] | None = None,
                     head: dict[str, Any] | None = None) -> Path:
    """Write a complete random checkpoint directory. Same seed and shapes ⇒ same weight bytes."""
    from transformers import Qwen3OmniMoeConfig, Qwen3OmniMoeForConditionalGeneration

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    config = Qwen3OmniMoeConfig(thinker_config=thinker_config(tokenizer, text=text), enable_audio_output=False)
    torch.manual_seed(seed)
    model = Qwen3OmniMoeForConditionalGeneration(config).eval()
    model.save_pretrained(out, safe_serialization=True)
    thinker: Any = config.thinker_config      # transformers types its nested sub-configs loosely
    head_config = {**tiny_head_config(thinker.text_config.hidden_size), **(head or {})}
    torch.manual_seed(seed + 1)
    joint_head = JointSchemaHead(**head_config)
    save_file({k: v.contiguous() for k, v in joint_head.state_dict().items()}, str(out / "joint_head.safetensors"))
    (out / "joint_head_config.json").write_text(json.dumps(head_config, indent=2) + "\n")
    tokenizer.save_pretrained(out)
    processor = {"processor_class": "Qwen3OmniMoeProcessor", "image_processor": IMAGE_PROCESSOR,
                 "feature_extractor": FEATURE_EXTRACTOR}
    (out / "processor_config.json").write_text(json.dumps(processor, indent=2) + "\n")
    return out
