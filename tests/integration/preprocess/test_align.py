"""encode_media end to end: ids layout, tensors, the audio-in-video policy, the processor's own merge, and a
tiny Qwen3-Omni thinker that accepts the result and places the heard video's positions as expected."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from fixtures import media as fm
from preprocess.align import video_audio_order
from preprocess.audio import decode_audio
from preprocess.image import decode_image
from preprocess.processor import encode_media
from preprocess.video import decode_video
from tests.media_items import media_item

pytestmark = pytest.mark.integration

THINKER_KWARGS = {"pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw", "video_second_per_grid",
                  "input_features", "feature_attention_mask"}


@pytest.fixture(scope="module")
def decoded():
    return SimpleNamespace(
        images=[decode_image(media_item("images", fm.image_bytes("PNG", "RGB", 96, 64))),
                decode_image(media_item("images", fm.image_bytes("JPEG", "RGB", 128, 128), 1))],
        audio=[decode_audio(media_item("audio", fm.wav_bytes(1.0, 44100, 2)))],
        heard=[decode_video(media_item("videos", fm.video_bytes(seconds=2.0, width=64, height=64))),
               decode_video(media_item("videos", fm.video_bytes(seconds=3.0, width=64, height=64), 1))],
        silent=decode_video(media_item("videos", fm.video_bytes(seconds=2.0, width=64, height=64, audio_codec=None), 1)),
    )


def encode(decoded_media, image_processor, feature_extractor, token_ids, videos):
    return encode_media(decoded_media.images, decoded_media.audio, videos, image_processor=image_processor,
                        feature_extractor=feature_extractor, token_ids=token_ids)


def split_blocks(ids, newline=10):
    blocks, current = [], []
    for token in ids:
        current.append(token)
        if token == newline:
            blocks.append(current)
            current = []
    assert current == []
    return blocks


def test_all_media_with_heard_videos(decoded, image_processor, feature_extractor, token_ids):
    out = encode(decoded, image_processor, feature_extractor, token_ids, decoded.heard)
    assert out.use_audio_in_video is True
    assert set(out.tensors) == THINKER_KWARGS
    blocks = split_blocks(out.ids)
    assert len(blocks) == 2 + 1 + 2
    # order: images, audio, videos; counts equal the tensors' rows
    assert [b[0] for b in blocks] == [53, 53, 55, 53, 53] and [b[1] for b in blocks[3:]] == [55, 55]
    grids = out.tensors["image_grid_thw"]
    assert out.tokens_per_item["image"] == [int(g.prod()) // 4 for g in grids] == [b.count(50) for b in blocks[:2]]
    assert out.tensors["pixel_values"].shape[0] == int(grids.prod(-1).sum())
    assert out.tokens_per_item["audio"] == [13] == [blocks[2].count(52)]
    video_grids = out.tensors["video_grid_thw"].tolist()
    assert video_grids == [[2, 24, 24], [3, 24, 24]]  # 64x64 frames are scaled up to 384x384 (>= 131,072 px)
    assert out.tokens_per_item["video"] == [2 * 144, 3 * 144] == [b.count(51) for b in blocks[3:]]
    assert out.tokens_per_item["video_audio"] == [b.count(52) for b in blocks[3:]]
    assert out.tokens_per_item["video_audio"][0] in (26, 27) and out.tokens_per_item["video_audio"][1] in (39, 40)
    # one feature row per clip: the standalone clip first, then the soundtracks
    assert out.tensors["input_features"].shape[:2] == (3, 128)
    assert out.tensors["feature_attention_mask"].sum(-1).tolist()[0] == 100
    assert out.tensors["video_second_per_grid"].tolist() == [1.0, 1.0]
    assert out.tokens_by_modality == {k: sum(v) for k, v in out.tokens_per_item.items()}
    assert len(out.ids) == sum(out.tokens_by_modality.values()) + 2 * 2 + 2 + 2 * 4 + 5  # wrappers + newlines


def test_one_silent_video_mutes_every_video(decoded, image_processor, feature_extractor, token_ids):
    out = encode(decoded, image_processor, feature_extractor, token_ids, [decoded.heard[0], decoded.silent])
    assert out.use_audio_in_video is False
    assert out.tokens_by_modality["video_audio"] == 0
    assert out.tensors["input_features"].shape[0] == 1  # the standalone clip only
    video_blocks = split_blocks(out.ids)[3:]
    assert all(b[0] == 53 and b[-2] == 54 and set(b[1:-2]) == {51} for b in video_blocks)


def test_no_media_and_single_modalities(image_processor, feature_extractor, token_ids, decoded):
    empty = encode_media(image_processor=image_processor, feature_extractor=feature_extractor, token_ids=token_ids)
    assert (empty.ids, empty.tensors, empty.use_audio_in_video) == ([], {}, False)
    images = encode_media(decoded.images, image_processor=image_processor, feature_extractor=feature_extractor,
                          token_ids=token_ids)
    assert set(images.tensors) == {"pixel_values", "image_grid_thw"}
    clips = encode_media(audio_clips=[np.zeros(16000, np.float32)], image_processor=image_processor,
                         feature_extractor=feature_extractor, token_ids=token_ids)
    assert set(clips.tensors) == {"input_features", "feature_attention_mask"} and clips.tokens_by_modality["audio"] == 13


def test_merge_equals_transformers_replace_video_with_audio_token():
    from transformers import Qwen3OmniMoeProcessor

    stub = SimpleNamespace(audio_bos_token="<|audio_start|>", audio_eos_token="<|audio_end|>",
                           video_token="V", audio_token="A", video_processor=SimpleNamespace(merge_size=2))
    for grid, n_audio in [((2, 4, 4), 26), ((3, 20, 28), 40), ((4, 6, 2), 7), ((21, 24, 42), 273)]:
        text = Qwen3OmniMoeProcessor.replace_video_with_audio_token(
            stub, {"video_grid_thw": [np.array(grid)], "video_second_per_grid": [1.0]}, 0,
            {"num_audio_tokens": [n_audio]}, 0, position_id_per_seconds=13.0)
        pads = text.removeprefix("<|audio_start|>").removesuffix("<|audio_end|>")
        assert pads == "".join("V" if v else "A" for v in video_audio_order(grid, n_audio))


def wrap(media_ids):
    text_before, text_after = [1, 2, 3, 4], [5, 6, 7]  # "STATE:\n" ... state text (tiny vocab ids)
    return torch.tensor([text_before + media_ids + text_after])


def test_tiny_thinker_accepts_the_ids_and_tensors(decoded, image_processor, feature_extractor, token_ids,
                                                  tiny_thinker):
    for videos in (decoded.heard, [decoded.heard[0], decoded.silent]):
        out = encode(decoded, image_processor, feature_extractor, token_ids, videos)
        input_ids = wrap(out.ids)
        with torch.inference_mode():
            result = tiny_thinker(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                                  use_audio_in_video=out.use_audio_in_video, **out.tensors)
        assert result.logits.shape == (1, input_ids.shape[1], 64)
        assert torch.isfinite(result.logits).all()


def test_rope_index_places_the_heard_video_interleave(decoded, image_processor, feature_extractor, token_ids,
                                                      tiny_thinker):
    video = decoded.heard[1]  # 3 s: grid (3, 24, 24) -> 144 video tokens per second, 13 audio tokens per second
    out = encode_media(videos=[video], image_processor=image_processor, feature_extractor=feature_extractor,
                       token_ids=token_ids)
    input_ids = wrap(out.ids)
    positions, _ = tiny_thinker.model.get_rope_index(
        input_ids, None, out.tensors["video_grid_thw"], torch.ones_like(input_ids), True,
        out.tensors["feature_attention_mask"].sum(-1), out.tensors["video_second_per_grid"])
    ids = input_ids[0].tolist()
    t_row = positions[0, 0].tolist()
    first_pad = ids.index(token_ids.audio_start) + 1
    base = t_row[first_pad - 1] + 1  # the pads start right after <|vision_start|><|audio_start|>
    pads = ids[first_pad: ids.index(token_ids.audio_end)]
    runs = []
    for token in pads:
        if runs and runs[-1][0] == token:
            runs[-1][1] += 1
        else:
            runs.append([token, 1])
    n_audio = out.tokens_per_item["video_audio"][0]
    expected = [[51, 144], [52, 13]] * 3 + ([[52, n_audio - 39]] if n_audio > 39 else [])
    assert runs == expected  # V x 144, A x 13, V x 144, A x 13, V x 144, A x 13 (+ a leftover audio token)
    video_seen = audio_seen = 0
    for offset, token in enumerate(pads):
        t = t_row[first_pad + offset]
        if token == token_ids.video_pad:
            assert t == base + 13 * (video_seen // 144)  # temporal grid k at 13 k
            video_seen += 1
        else:
            assert t == base + audio_seen  # audio token j at j
            audio_seen += 1
    assert (video_seen, audio_seen) == (3 * 144, n_audio)
