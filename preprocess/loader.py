"""Loads the text tokenizer, image processor and Whisper feature extractor of a checkpoint directory.

Reads `processor_config.json` (v5 layout: `image_processor` / `feature_extractor` sections) or, failing that, the
flat `preprocessor_config.json`. The stock `AutoProcessor` cannot be used here: it needs torchvision for the video
processor, which does not load beside the CPU torch wheel — video is decoded and patchified by `preprocess.video`.
Knows nothing of the model weights, prompts or HTTP.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:   # transformers is imported when a checkpoint is loaded, not when this module is
    from transformers import PreTrainedTokenizerBase, Qwen2VLImageProcessorPil, WhisperFeatureExtractor

IMAGE_PROCESSOR_KEYS = ("patch_size", "temporal_patch_size", "merge_size", "min_pixels", "max_pixels", "image_mean",
                        "image_std", "rescale_factor", "do_resize", "do_rescale", "do_normalize", "do_convert_rgb", "size")
FEATURE_EXTRACTOR_KEYS = ("feature_size", "sampling_rate", "hop_length", "n_fft", "chunk_length", "dither",
                          "padding_side", "padding_value", "return_attention_mask")
SPECIAL_TOKEN_NAMES = {"image_pad": "<|image_pad|>", "video_pad": "<|video_pad|>", "audio_pad": "<|audio_pad|>",
                       "vision_start": "<|vision_start|>", "vision_end": "<|vision_end|>",
                       "audio_start": "<|audio_start|>", "audio_end": "<|audio_end|>"}


@dataclass(frozen=True)
class ProcessorParts:
    tokenizer: PreTrainedTokenizerBase
    image_processor: Qwen2VLImageProcessorPil
    feature_extractor: WhisperFeatureExtractor
    special_ids: dict[str, int]
    newline_ids: tuple[int, ...]


class ProcessorConfigError(Exception):
    """The checkpoint's tokenizer or processor files are missing or unreadable."""


def _sections(directory: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    combined = directory / "processor_config.json"
    if combined.is_file():
        data = json.loads(combined.read_text())
        return data.get("image_processor", {}), data.get("feature_extractor", {})
    flat = directory / "preprocessor_config.json"
    if flat.is_file():
        data = json.loads(flat.read_text())
        return data, data
    raise ProcessorConfigError(f"{directory} has neither processor_config.json nor preprocessor_config.json")


def load_processor_parts(directory: str | Path) -> ProcessorParts:
    from transformers import AutoTokenizer, Qwen2VLImageProcessorPil, WhisperFeatureExtractor

    directory = Path(directory)
    try:
        tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
        image_section, audio_section = _sections(directory)
    except (OSError, ValueError) as exc:
        raise ProcessorConfigError(f"cannot load the tokenizer/processor from {directory}: {exc}") from exc
    image_processor = Qwen2VLImageProcessorPil(**{k: v for k, v in image_section.items() if k in IMAGE_PROCESSOR_KEYS})
    feature_extractor = WhisperFeatureExtractor(
        **{k: v for k, v in audio_section.items() if k in FEATURE_EXTRACTOR_KEYS})
    special_ids: dict[str, int] = {}
    unknown: list[str] = []
    for name, token in SPECIAL_TOKEN_NAMES.items():
        token_id = tokenizer.convert_tokens_to_ids(token)
        if isinstance(token_id, int) and token_id != tokenizer.unk_token_id:
            special_ids[name] = token_id
        else:           # None (some tokenizers), or the unknown token's id
            unknown.append(name)
    if unknown:
        raise ProcessorConfigError(f"tokenizer lacks the multimodal special tokens: {', '.join(unknown)}")
    newline_ids = tuple(tokenizer("\n", add_special_tokens=False).input_ids)
    return ProcessorParts(tokenizer, image_processor, feature_extractor, special_ids, newline_ids)
