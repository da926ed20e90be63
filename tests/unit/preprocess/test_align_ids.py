"""Placeholder layout and the audio-in-video merge, checked against the processor's own merge loop."""
from __future__ import annotations

import numpy as np
import pytest

from preprocess.align import (
    PlaceholderIds,
    audio_block,
    audio_tokens_for_mel_frames,
    hear_videos,
    image_block,
    video_audio_block,
    video_audio_order,
    video_block,
    video_tokens_for_grid,
)

pytestmark = pytest.mark.unit

IDS = PlaceholderIds(image_pad=50, video_pad=51, audio_pad=52, vision_start=53, vision_end=54, audio_start=55,
                     audio_end=56, newline=(10,))


def loop_merge(grid, n_audio, spg=1.0, per_second=13.0, merge=2):
    """The merge as a plain two-pointer loop (the shape of the processor's replace_video_with_audio_token)."""
    per_grid = (grid[1] // merge) * (grid[2] // merge)
    video_keys = [t * spg * per_second for t in range(grid[0]) for _ in range(per_grid)]
    out, i, j = [], 0, 0
    while i < len(video_keys) and j < n_audio:
        if video_keys[i] <= j:
            out.append("V")
            i += 1
        else:
            out.append("A")
            j += 1
    return out + ["V"] * (len(video_keys) - i) + ["A"] * (n_audio - j)


@pytest.mark.parametrize(("grid", "n_audio", "spg"), [((2, 4, 4), 26, 1.0), ((3, 20, 28), 39, 1.0), ((4, 2, 2), 10, 1.0),
                                                ((1, 4, 6), 50, 1.0), ((5, 8, 8), 0, 1.0), ((3, 4, 4), 30, 2.0),
                                                ((21, 24, 42), 273, 1.0)])
def test_merge_equals_the_processor_loop(grid, n_audio, spg):
    ours = ["V" if v else "A" for v in video_audio_order(grid, n_audio, second_per_grid=spg)]
    assert ours == loop_merge(grid, n_audio, spg)


def test_two_frames_per_second_interleave_is_v_n_then_a_13():
    grid, n_audio = (3, 16, 16), 39  # 3 s: 64 video tokens per second, 13 audio tokens per second
    block = video_audio_block(grid, n_audio, IDS)
    assert block[:2] == [IDS.vision_start, IDS.audio_start] and block[-3:] == [IDS.audio_end, IDS.vision_end, 10]
    runs, pads = [], block[2:-3]
    for token in pads:
        if runs and runs[-1][0] == token:
            runs[-1][1] += 1
        else:
            runs.append([token, 1])
    assert runs == [[51, 64], [52, 13]] * 3


def test_blocks():
    assert image_block(3, IDS) == [53, 50, 50, 50, 54, 10]
    assert audio_block(2, IDS) == [55, 52, 52, 56, 10]
    assert video_block(4, IDS) == [53, 51, 51, 51, 51, 54, 10]
    assert video_tokens_for_grid((2, 20, 28)) == 280


def test_hear_videos_only_when_every_video_has_a_soundtrack():
    track = np.zeros(10, np.float32)
    assert hear_videos([track, track]) and not hear_videos([track, None]) and not hear_videos([])


def test_audio_token_formula_reference_values():
    assert [audio_tokens_for_mel_frames(n) for n in (100, 50, 200, 1000, 1, 99, 101)] == [13, 7, 26, 130, 1, 13, 14]


def test_placeholder_ids_from_tokenizer_like_and_mapping():
    vocab = {"<|image_pad|>": 5, "<|video_pad|>": 6, "<|audio_pad|>": 7, "<|vision_start|>": 8, "<|vision_end|>": 9,
             "<|audio_start|>": 11, "<|audio_end|>": 12}

    class Tokenizer:
        def convert_tokens_to_ids(self, token):
            return vocab[token]

        def __call__(self, text, add_special_tokens=False):
            assert text == "\n" and add_special_tokens is False
            return {"input_ids": [198]}

    ids = PlaceholderIds.from_tokenizer(Tokenizer())
    assert (ids.image_pad, ids.audio_end, ids.newline) == (5, 12, (198,))
    by_name = {"image_pad": 5, "video_pad": 6, "audio_pad": 7, "vision_start": 8, "vision_end": 9,
               "audio_start": 11, "audio_end": 12}
    assert PlaceholderIds.from_mapping(by_name, [198]) == ids
