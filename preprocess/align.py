"""Placeholder token ids for decoded media: block layout, audio-in-video interleave, token-count formulas.

The media segment that follows "STATE:\\n" is (Clef reference, clef-reference §4):

    per image : <|vision_start|> <|image_pad|> x N <|vision_end|> "\\n"
    per audio : <|audio_start|>  <|audio_pad|> x N <|audio_end|>  "\\n"
    per video : <|vision_start|> <|video_pad|> x N <|vision_end|> "\\n"                      (not heard)
              | <|vision_start|><|audio_start|> V/A pads merged by time <|audio_end|><|vision_end|> "\\n"  (heard)

all images first, then all audio clips, then all videos. Videos are "heard" (`use_audio_in_video`) only when
there are videos and EVERY one has a soundtrack. In a heard video the pads of temporal grid k carry the time key
`k * second_per_grid * position_id_per_seconds` and audio pad j the key j; the two lists are merged with the
video first on ties, exactly as `Qwen3OmniMoeProcessor.replace_video_with_audio_token` and the thinker's
`get_rope_index` do (at 2 fps, spg 1.0, 13 ids/s: V x n, A x 13, V x n, A x 13, ...).

Pure integer arithmetic: knows nothing of torch, transformers, tokenizers (ids are passed in), decoding or HTTP.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

TOKEN_STRINGS: dict[str, str] = {
    "image_pad": "<|image_pad|>",
    "video_pad": "<|video_pad|>",
    "audio_pad": "<|audio_pad|>",
    "vision_start": "<|vision_start|>",
    "vision_end": "<|vision_end|>",
    "audio_start": "<|audio_start|>",
    "audio_end": "<|audio_end|>",
}


class TokenizerLike(Protocol):
    """What `PlaceholderIds.from_tokenizer` calls on a tokenizer (a transformers tokenizer has both)."""

    def convert_tokens_to_ids(self, tokens: str, /) -> int | list[int]: ...

    def __call__(self, text: str, /, *, add_special_tokens: bool) -> Mapping[str, Any]: ...


@dataclass(frozen=True)
class PlaceholderIds:
    """Special-token ids of the checkpoint's tokenizer, plus the ids of "\\n" that end every media block."""

    image_pad: int
    video_pad: int
    audio_pad: int
    vision_start: int
    vision_end: int
    audio_start: int
    audio_end: int
    newline: tuple[int, ...]

    @classmethod
    def from_mapping(cls, ids: Mapping[str, int], newline: Sequence[int]) -> PlaceholderIds:
        """`ids` keyed by field name ("image_pad", ...) or by token string ("<|image_pad|>", ...)."""
        values = {name: int(ids[name] if name in ids else ids[text]) for name, text in TOKEN_STRINGS.items()}
        return cls(**values, newline=tuple(int(i) for i in newline))

    @classmethod
    def from_tokenizer(cls, tokenizer: TokenizerLike) -> PlaceholderIds:
        """Any tokenizer with `convert_tokens_to_ids` and `__call__(text, add_special_tokens=False)`."""
        ids: dict[str, int] = {}
        for name, text in TOKEN_STRINGS.items():
            token_id = tokenizer.convert_tokens_to_ids(text)
            if isinstance(token_id, list):      # one token string is one id; the signature allows a list
                raise TypeError(f"the tokenizer gave {token_id!r} for the one token {text}")
            ids[name] = token_id
        newline = tokenizer("\n", add_special_tokens=False)["input_ids"]
        return cls.from_mapping(ids, newline)


def audio_tokens_for_mel_frames(n_frames: int, n_window: int = 50) -> int:
    """Audio-tower output length for `n_frames` mel frames (10 ms each): 13 per full second + the remainder
    through three stride-2 convolutions (transformers `_get_feat_extract_output_lengths`; reference MLX:303)."""
    chunk = n_window * 2
    remainder = n_frames % chunk
    after_first_conv = (remainder - 1) // 2 + 1
    return int(((after_first_conv - 1) // 2 + 1 - 1) // 2 + 1 + (n_frames // chunk) * 13)


def audio_tokens_for_samples(n_samples: int, hop_length: int = 160, n_window: int = 50) -> int:
    """Token count of a lone 16 kHz clip of `n_samples`, before computing features (for budgets).

    Exact for a clip alone in the feature-extractor call (n // hop mel frames). A clip padded to a longer one in
    the same call gets ceil(n / hop) frames in its mask, which can add one token: `encode_media` counts from the
    mask, as the reference does."""
    return audio_tokens_for_mel_frames(n_samples // hop_length, n_window)


def video_tokens_for_grid(grid_thw: Sequence[int], merge_size: int = 2) -> int:
    grid_t, grid_h, grid_w = (int(v) for v in grid_thw)
    return grid_t * grid_h * grid_w // (merge_size * merge_size)


def video_audio_order(grid_thw: Sequence[int], n_audio_tokens: int, *, merge_size: int = 2,
                      second_per_grid: float = 1.0, position_id_per_seconds: float = 13.0) -> np.ndarray:
    """Bool array over the merged pads of a heard video: True = video pad, False = audio pad.

    A stable sort on (time key, video-before-audio) of two already sorted lists is the processor's merge.
    """
    grid_t, grid_h, grid_w = (int(v) for v in grid_thw)
    per_grid = (grid_h // merge_size) * (grid_w // merge_size)
    video_keys = np.repeat(np.arange(grid_t, dtype=np.float64), per_grid) * second_per_grid * position_id_per_seconds
    audio_keys = np.arange(n_audio_tokens, dtype=np.float64)
    keys = np.concatenate([video_keys, audio_keys])
    is_audio = np.concatenate([np.zeros(len(video_keys), bool), np.ones(n_audio_tokens, bool)])
    order = np.lexsort((is_audio, keys))  # last key is primary: time, then video (False) before audio
    return ~is_audio[order]


def image_block(n_tokens: int, ids: PlaceholderIds) -> list[int]:
    return [ids.vision_start, *[ids.image_pad] * n_tokens, ids.vision_end, *ids.newline]


def audio_block(n_tokens: int, ids: PlaceholderIds) -> list[int]:
    return [ids.audio_start, *[ids.audio_pad] * n_tokens, ids.audio_end, *ids.newline]


def video_block(n_tokens: int, ids: PlaceholderIds) -> list[int]:
    return [ids.vision_start, *[ids.video_pad] * n_tokens, ids.vision_end, *ids.newline]


def video_audio_block(grid_thw: Sequence[int], n_audio_tokens: int, ids: PlaceholderIds, *, merge_size: int = 2,
                      second_per_grid: float = 1.0, position_id_per_seconds: float = 13.0) -> list[int]:
    is_video = video_audio_order(grid_thw, n_audio_tokens, merge_size=merge_size,
                                 second_per_grid=second_per_grid, position_id_per_seconds=position_id_per_seconds)
    pads = np.where(is_video, ids.video_pad, ids.audio_pad).tolist()
    return [ids.vision_start, ids.audio_start, *pads, ids.audio_end, ids.vision_end, *ids.newline]


def hear_videos(soundtracks: Sequence[object | None]) -> bool:
    """`use_audio_in_video`: there are videos and every one has a soundtrack (one silent video mutes all)."""
    return bool(soundtracks) and all(track is not None for track in soundtracks)
