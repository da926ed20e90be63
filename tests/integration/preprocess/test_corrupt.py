"""Every committed corrupt or lying file raises its typed error, naming the item, without hanging."""
from __future__ import annotations

import re

import pytest

from fixtures.make_corrupt import CORRUPT_DIR, EXPECTED
from preprocess import errors
from preprocess.decode import decode_item
from preprocess.loader import load_processor_parts
from preprocess.media import MediaLimits
from tests.media_items import media_item

pytestmark = pytest.mark.integration


def test_every_expected_file_is_committed_and_tiny():
    assert sorted(p.name for p in CORRUPT_DIR.iterdir()) == sorted(EXPECTED)
    assert all(p.stat().st_size < 8 * 1024 for p in CORRUPT_DIR.iterdir())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corrupt_file_raises_typed_error_naming_the_item(name, bounded):
    slot, error_name = EXPECTED[name]
    with pytest.raises(errors.MediaError) as info:
        bounded(decode_item, media_item(slot, (CORRUPT_DIR / name).read_bytes(), 1), seconds=10)
    assert type(info.value).__name__ == error_name, str(info.value)
    assert info.value.label == f"{slot}[1]" and str(info.value).startswith(f"{slot}[1]: ")


def test_limit_errors_name_the_limit():
    huge = (CORRUPT_DIR / "huge_header.png").read_bytes()
    with pytest.raises(errors.MediaTooLarge) as info:
        decode_item(media_item("images", huge, 3))
    assert "max_image_pixels=16000000" in str(info.value)
    ten_hours = (CORRUPT_DIR / "wav_10h.wav").read_bytes()
    with pytest.raises(errors.MediaTooLarge) as info:
        decode_item(media_item("audio", ten_hours))
    assert "max_audio_seconds=300" in str(info.value)


def test_the_media_encoder_names_the_bad_item_among_good_ones(tiny_dir):
    from fixtures import media as fm
    from omni.model.media import MediaEncoder

    good_video = fm.video_bytes(seconds=0.5, width=32, height=32)
    bad_video = (CORRUPT_DIR / "truncated.mp4").read_bytes()
    good = [media_item("images", fm.image_bytes()), media_item("audio", fm.wav_bytes(0.5)),
            media_item("videos", good_video)]
    encoder = MediaEncoder(load_processor_parts(tiny_dir), MediaLimits())     # what the server decodes with
    with pytest.raises(errors.CorruptMedia) as info:
        encoder.encode(good + [media_item("videos", bad_video, 1)])
    assert info.value.label == "videos[1]"
    decoded = encoder.encode(good)
    slots = [item.slot for item in decoded.audit]
    assert (slots.count("images"), slots.count("audio"), slots.count("videos")) == (1, 1, 1)


LIBRARY_WORDS = re.compile(r"0x[0-9a-f]{4,}|object at|errno|Errno|Error\b|Exception|<[a-z_.]+|Traceback|avcodec|"
                           r"avformat|PIL|av\.|Image\.|\(\)")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_messages_are_plain_words_and_the_library_detail_stays_apart(name, bounded):
    slot, _ = EXPECTED[name]
    with pytest.raises(errors.MediaError) as info:
        bounded(decode_item, media_item(slot, (CORRUPT_DIR / name).read_bytes(), 1), seconds=10)
    assert not LIBRARY_WORDS.search(info.value.message), info.value.message
