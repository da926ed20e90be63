"""The occlusion check's masks (omni/learn/occlusion_media.py, occlusion_video.py): the region really is grey, silent,
cut or blank, and nothing else changed."""
from __future__ import annotations

import io
import json

import av
import numpy as np
import pytest
import soundfile
from PIL import Image

from fixtures.media import image_bytes, pattern, read_frame_index, video_bytes, wav_bytes
from omni.learn.occlusion_media import box_pixels, mask_audio, mask_image, mask_state
from omni.learn.occlusion_video import mask_video
from preprocess.errors import CorruptMedia, UnsupportedMedia
from preprocess.item import MediaItem


def pixels(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as image:
        assert image.format == "PNG"
        return np.asarray(image.convert("RGB"))


def test_an_image_box_is_mid_grey_and_the_rest_untouched():
    item = MediaItem("images", 0, image_bytes("PNG", width=96, height=64))
    out = pixels(mask_image(item, (10.4, 20.0, 30.0, 41.5)))
    before = pattern(64, 96)
    inside = np.zeros((64, 96), bool)
    inside[20:42, 10:30] = True                      # whole pixels the box touches: x 10..29, y 20..41
    assert (before[inside] != 128).any()             # the box covers more than the grey background
    assert (out[inside] == 128).all()
    assert (out[~inside] == before[~inside]).all()


@pytest.mark.parametrize("orientation", [6, 8, 3])
def test_a_rotated_photo_is_masked_in_upright_pixels(orientation):
    """Evidence boxes are in the upright image's pixels: the mask lands there whatever the EXIF orientation."""
    item = MediaItem("images", 0, image_bytes("PNG", width=96, height=64, exif_orientation=orientation))
    out = pixels(mask_image(item, (0.0, 0.0, 16.0, 8.0)))
    upright = pattern(64, 96)
    assert out.shape == upright.shape                # upright size, not the stored (64 x 96 turned) one
    assert (out[:8, :16] == 128).all()
    assert (out[8:, :] == upright[8:, :]).all()
    assert (out[:, 16:] == upright[:, 16:]).all()
    with Image.open(io.BytesIO(mask_image(item, (0.0, 0.0, 1.0, 1.0)))) as masked:
        assert masked.getexif().get(0x0112, 1) == 1  # no orientation left to apply twice


@pytest.mark.parametrize(("mode", "fill"), [("L", 128), ("RGBA", (128, 128, 128, 255)), ("P", (128, 128, 128))])
def test_image_modes_keep_what_the_decoder_reads(mode, fill):
    item = MediaItem("images", 0, image_bytes("PNG", mode=mode, width=32, height=32))
    with Image.open(io.BytesIO(mask_image(item, (0, 0, 4, 4)))) as out:
        assert out.getpixel((1, 1)) == fill
        assert out.mode == {"P": "RGB"}.get(mode, mode)


def test_a_box_is_clipped_to_the_image():
    assert box_pixels((-3.0, 5.2, 200.0, 7.0), 96, 64) == (0, 5, 96, 7)
    assert box_pixels((90.0, 60.0, 90.0, 60.0), 96, 64) == (90, 60, 90, 60)     # empty stays empty


def test_a_damaged_image_is_a_media_error():
    with pytest.raises(CorruptMedia, match="images\\[0\\]"):
        mask_image(MediaItem("images", 0, b"\x89PNG\r\n\x1a\nbroken"), (0, 0, 1, 1))


@pytest.mark.parametrize("channels", [1, 2])
def test_an_audio_window_is_silent_in_every_channel(channels):
    rate = 16_000
    item = MediaItem("audio", 0, wav_bytes(seconds=1.0, sample_rate_hz=rate, channels=channels))
    before, _ = soundfile.read(io.BytesIO(item.data), dtype="float32", always_2d=True)
    out, out_rate = soundfile.read(io.BytesIO(mask_audio(item, 0.25, 0.33)), dtype="float32", always_2d=True)
    assert out_rate == rate
    assert out.shape == before.shape == (rate, channels)
    assert (out[4000:5280] == 0).all()
    assert np.abs(before[4000:5280]).max() > 0.1
    assert np.array_equal(out[:4000], before[:4000])
    assert np.array_equal(out[5280:], before[5280:])


def test_audio_libsndfile_cannot_read_is_refused_in_words():
    with pytest.raises(UnsupportedMedia, match="libsndfile"):
        mask_audio(MediaItem("audio", 0, b"ID3 not really an mp3"), 0.0, 0.1)


def test_a_string_state_keeps_its_length_with_the_span_blank():
    assert mask_state("a scratch on the lid", 2, 9) == "a         on the lid"
    assert mask_state("short", 3, 99) == "sho  "


def test_a_json_state_is_blanked_in_its_compact_sorted_rendering():
    state = {"b": "scratch", "a": [1, 2]}
    rendered = json.dumps(state, separators=(",", ":"), sort_keys=True)       # {"a":[1,2],"b":"scratch"}
    start = rendered.index("scratch")
    masked = mask_state(state, start, start + 7)
    assert masked == rendered.replace("scratch", " " * 7)
    assert isinstance(masked, str)


def frames_of(data: bytes) -> list[tuple[float, int, int]]:
    """(time, pattern index, rotation) of every decoded frame."""
    with av.open(io.BytesIO(data)) as container:
        return [(round(float(f.time), 3), read_frame_index(np.rot90(f.to_ndarray(format="rgb24"), k=f.rotation // 90)),
                 f.rotation) for f in container.decode(video=0)]


def audio_seconds(data: bytes) -> float:
    with av.open(io.BytesIO(data)) as container:
        return sum(frame.samples for frame in container.decode(audio=0)) / container.streams.audio[0].rate


def test_a_video_loses_exactly_the_frames_and_sound_of_the_window():
    source = video_bytes(seconds=3.0, fps=8, width=64, height=48, audio_channels=1)
    out = mask_video(MediaItem("videos", 0, source), 1.0, 2.0)
    frames = frames_of(out)
    assert [index for _, index, _ in frames] == [*range(8), *range(16, 24)]      # frames 8..15 are [1, 2) s
    assert [t for t, _, _ in frames] == [i / 8 for i in range(16)]               # the rest moved up by 1 s
    assert audio_seconds(source) - audio_seconds(out) == pytest.approx(1.0, abs=0.03)   # AAC pads to its frame
    with av.open(io.BytesIO(out)) as container:
        assert container.format.name.startswith("mov,mp4")
        assert container.streams.audio[0].rate == 48_000
        assert container.streams.audio[0].channels == 1


def test_a_rotated_video_keeps_its_rotation():
    source = video_bytes(seconds=2.0, fps=4, width=64, height=48, rotation_degrees=90, audio_codec=None)
    frames = frames_of(mask_video(MediaItem("videos", 0, source), 0.5, 1.0))
    assert [index for _, index, _ in frames] == [0, 1, 4, 5, 6, 7]
    assert {rotation for _, _, rotation in frames} == {90}


def test_a_window_over_the_whole_video_is_refused():
    source = video_bytes(seconds=1.0, fps=4, width=32, height=32, audio_codec=None)
    with pytest.raises(UnsupportedMedia, match="no frame"):
        mask_video(MediaItem("videos", 0, source), 0.0, 5.0)

