"""Clips of one feature frame (160..200 samples at 16 kHz) alone: encoded as the extractor's numpy path hears them.

torch's centred STFT (what `WhisperFeatureExtractor.__call__` uses when torch is installed) cannot reflect-pad fewer
than 201 samples; numpy's reflect pad can, and gives one frame from 160 samples. `encode_audio` must equal that path
(on the tiny checkpoint's own extractor), with one frame and one audio token, and keep the normal path's layout.
"""
from __future__ import annotations

import io

import numpy as np
import pytest
import soundfile

from fixtures.media import video_bytes, wav_header
from preprocess.audio import HEARABLE_SAMPLES, decode_audio
from preprocess.decode import decode_item
from preprocess.errors import CorruptMedia
from preprocess.loader import load_processor_parts
from preprocess.processor import encode_audio
from preprocess.video import decode_video
from tests.media_items import media_item

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def extractor(tiny_dir):
    """The feature extractor of the tiny checkpoint, loaded as the product loads it."""
    return load_processor_parts(tiny_dir).feature_extractor


def tone_with_noise(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(n) / 16000
    return (0.3 * np.sin(2 * np.pi * 440 * t) + 0.05 * rng.standard_normal(n)).astype(np.float32)


def numpy_path(extractor, samples: np.ndarray) -> np.ndarray:
    """The extractor's own numpy log-mel of one clip, (1, 128, frames)."""
    return extractor._np_extract_fbank_features(samples[None, :], "cpu")


@pytest.mark.parametrize("n", [160, 180, 200, 201])
def test_a_clip_of_one_frame_alone_equals_the_numpy_path(extractor, n):
    samples = tone_with_noise(n)
    tensors, tokens = encode_audio([samples], extractor)
    reference = numpy_path(extractor, samples)
    assert reference.shape == (1, 128, 1)
    assert tuple(tensors["input_features"].shape) == (1, 128, 1)
    assert np.abs(tensors["input_features"].numpy() - reference).max() < 1e-5
    assert tensors["feature_attention_mask"].tolist() == [[1]]
    assert tokens == [1]


def test_short_clips_keep_the_layout_of_the_normal_path(extractor):
    short, _ = encode_audio([tone_with_noise(180), tone_with_noise(100, seed=1)], extractor)
    normal, _ = encode_audio([tone_with_noise(16000), tone_with_noise(100, seed=1)], extractor)
    assert set(short) == set(normal) == {"input_features", "feature_attention_mask"}
    for key in short:
        assert short[key].dtype == normal[key].dtype and short[key].dim() == normal[key].dim()
    assert tuple(short["input_features"].shape) == (2, 128, 1)
    assert short["feature_attention_mask"].tolist() == [[1], [1]]   # the 100-sample clip is padded, as beside 1 s


def test_normal_clips_are_bit_identical_to_the_extractor_call(extractor):
    clips = [tone_with_noise(16000), tone_with_noise(3210, seed=2)]
    ours, _ = encode_audio(clips, extractor)
    call = extractor(clips, sampling_rate=16000, padding=True, truncation=False, return_attention_mask=True,
                     return_tensors="pt")
    assert ours["input_features"].equal(call["input_features"])
    assert ours["feature_attention_mask"].equal(call["attention_mask"])


def ten_ms_stereo_float_wav() -> bytes:
    """10 ms at 44.1 kHz, 2 channels, 32-bit float: 441 frames of a tone plus noise (different in each channel)."""
    rng = np.random.default_rng(7)
    t = np.arange(441) / 44100
    left = 0.5 * np.sin(2 * np.pi * 440 * t) + 0.05 * rng.standard_normal(441)
    right = 0.3 * np.sin(2 * np.pi * 1000 * t) + 0.05 * rng.standard_normal(441)
    buffer = io.BytesIO()
    soundfile.write(buffer, np.stack([left, right], axis=1).astype(np.float32), 44100, subtype="FLOAT", format="WAV")
    return buffer.getvalue()


def test_the_10_ms_44k_stereo_float_wav_alone_is_one_frame_and_one_token(extractor):
    data = ten_ms_stereo_float_wav()
    info = soundfile.info(io.BytesIO(data))
    assert (info.frames, info.samplerate, info.channels, info.subtype) == (441, 44100, 2, "FLOAT")
    decoded = decode_item(media_item("audio", data))
    assert len(decoded.samples) == 160 == HEARABLE_SAMPLES
    assert np.abs(decoded.samples).max() > 0.1                       # a real signal came through, not silence
    tensors, tokens = encode_audio([decoded.samples], extractor)
    reference = numpy_path(extractor, decoded.samples)
    assert tuple(tensors["input_features"].shape) == reference.shape == (1, 128, 1)
    assert np.abs(tensors["input_features"].numpy() - reference).max() < 1e-5
    assert tokens == [1]


@pytest.mark.parametrize(("n", "frames"), [(100, 0), (159, 0), (160, 1), (200, 1), (201, 1), (320, 2)])
def test_the_reference_frame_count_is_one_per_whole_hop(extractor, n, frames):
    """Why 160 is the minimum: the numpy path's spectrogram (centred, reflect pad) less its last frame."""
    from transformers.audio_utils import spectrogram, window_function

    spec = spectrogram(tone_with_noise(n), window_function(extractor.n_fft, "hann"), frame_length=extractor.n_fft,
                       hop_length=extractor.hop_length, power=2.0, mel_filters=extractor.mel_filters, log_mel="log10")
    assert spec.shape[1] - 1 == frames == n // extractor.hop_length


def test_an_empty_clip_is_still_corrupt():
    with pytest.raises(CorruptMedia, match="no audio samples"):
        decode_audio(media_item("audio", wav_header(16000, 1, 16, 0), 3))


def soundtrack_video(last_frame_seconds: float) -> bytes:
    """A mov whose PCM soundtrack lasts last_frame_seconds + 1 ms (16 kHz: exact sample counts, no codec delay)."""
    return video_bytes("mov", "libx264", "pcm_s16le", frame_times=[0.0, last_frame_seconds], fps=1000,
                       audio_rate_hz=16000, audio_channels=1)


def test_a_soundtrack_counts_from_the_same_minimum():
    at_minimum = decode_video(media_item("videos", soundtrack_video(0.009))).soundtrack
    below = decode_video(media_item("videos", soundtrack_video(0.0089375))).soundtrack
    assert at_minimum is not None and len(at_minimum) == 160
    assert below is None                                              # 159 samples: a video without a soundtrack
