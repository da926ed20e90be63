"""Audio decoding to 16 kHz mono, limits before and during decoding, and Whisper features / token counts."""
from __future__ import annotations

import io

import numpy as np
import pytest
import soundfile

import preprocess.audio as audio_module
from fixtures import media as fm
from preprocess.align import audio_tokens_for_mel_frames, audio_tokens_for_samples
from preprocess.audio import decode_audio, parse_wav_header
from preprocess.errors import CorruptMedia, MediaTooLarge, UnsupportedMedia
from preprocess.media import MediaLimits
from preprocess.processor import encode_audio
from tests.media_items import media_item

pytestmark = pytest.mark.integration


def rms(samples: np.ndarray, trim: int = 1600) -> float:
    return float(np.sqrt(np.mean(samples[trim:-trim] ** 2)))


def expected_rms(channels: int) -> float:
    """RMS of the channel MEAN of fm.tone: mean amplitude / sqrt(2)."""
    return float(np.mean(fm.CHANNEL_AMPLITUDES[:channels]) / np.sqrt(2))


@pytest.mark.parametrize("subtype", ["PCM_U8", "PCM_16", "PCM_24", "PCM_32", "FLOAT", "DOUBLE"])
@pytest.mark.parametrize(("rate", "channels"), [(44100, 2), (8000, 1), (48000, 6)])
def test_wav_depths_rates_layouts(subtype, rate, channels):
    decoded = decode_audio(media_item("audio", fm.wav_bytes(1.0, rate, channels, subtype)))
    assert decoded.samples.dtype == np.float32 and decoded.samples.ndim == 1
    assert abs(len(decoded.samples) - 16000) <= 2
    assert (decoded.source_sample_rate_hz, decoded.source_channels) == (rate, channels)
    assert rms(decoded.samples) == pytest.approx(expected_rms(channels), rel=0.02)


def test_extensible_wav():
    data = fm.wav_bytes(0.5, 22050, 4, "PCM_24", extensible=True)
    assert int.from_bytes(data[20:22], "little") == 0xFFFE  # WAVE_FORMAT_EXTENSIBLE
    decoded = decode_audio(media_item("audio", data))
    assert abs(len(decoded.samples) - 8000) <= 2 and rms(decoded.samples) == pytest.approx(expected_rms(4), rel=0.02)


def test_channels_are_averaged_not_downmixed_plus_3db():
    # L amplitude 0.6, R 0.2: mean 0.4 -> RMS 0.283; swresample's mono downmix would give 0.707*0.8 -> 0.40
    for data in (fm.wav_bytes(1.0, 48000, 2), fm.audio_bytes("flac", "flac", 1.0, 48000, 2)):
        assert rms(decode_audio(media_item("audio", data)).samples) == pytest.approx(0.4 / np.sqrt(2), rel=0.01)


def test_16k_mono_wav_is_passed_through_untouched():
    data = fm.wav_bytes(1.0, 16000, 1, "FLOAT")
    original, _ = soundfile.read(io.BytesIO(data), dtype="float32")
    assert np.array_equal(decode_audio(media_item("audio", data)).samples, original)


def test_resampling_keeps_the_pitch():
    samples = decode_audio(media_item("audio", fm.wav_bytes(1.0, 44100, 1, frequency_hz=1000.0))).samples
    spectrum = np.abs(np.fft.rfft(samples[:16000]))
    assert abs(int(np.argmax(spectrum)) - 1000) <= 1  # 1 Hz bins over one second at 16 kHz


@pytest.mark.parametrize(("name", "make"), [
    ("mp3_id3", lambda: fm.mp3_bytes(1.0)),
    ("mp3_bare", lambda: fm.mp3_bytes(1.0, id3=False)),
    ("mp3_cover_art", lambda: fm.mp3_bytes(1.0, cover_art=True)),
    ("flac", lambda: fm.audio_bytes("flac", "flac", 1.0)),
    ("ogg_opus", lambda: fm.audio_bytes("ogg", "libopus", 1.0, 48000)),
    ("ogg_vorbis", lambda: fm.audio_bytes("ogg", "vorbis", 1.0)),
    ("m4a", lambda: fm.audio_bytes("ipod", "aac", 1.0)),
    ("adts", lambda: fm.audio_bytes("adts", "aac", 1.0)),
    ("mp4_soundtrack", lambda: fm.video_bytes(seconds=1.0, width=32, height=32)),
    ("webm_soundtrack", lambda: fm.video_bytes("webm", "libvpx", "libopus", 1.0, 32, 32)),
])
def test_compressed_audio_decodes(name, make, bounded):
    decoded = bounded(decode_audio, media_item("audio", make(), 1))
    assert 15500 <= len(decoded.samples) <= 17000, len(decoded.samples)
    assert rms(decoded.samples) == pytest.approx(0.4 / np.sqrt(2), rel=0.08)


def test_video_without_audio_in_audio_slot():
    with pytest.raises(UnsupportedMedia) as info:
        decode_audio(media_item("audio", fm.video_bytes(seconds=0.5, width=32, height=32, audio_codec=None), 2))
    assert info.value.label == "audio[2]" and "no audio stream" in str(info.value)


def test_ten_hour_wav_header_is_refused_without_reading_samples(monkeypatch):
    data = fm.wav_header(16000, 1, 16, 10 * 3600 * 16000 * 2) + bytes(3200)
    assert parse_wav_header(data).claimed_seconds == pytest.approx(36000)

    def no_reading(*args, **kwargs):
        raise AssertionError("samples were read")

    monkeypatch.setattr(soundfile.SoundFile, "read", no_reading)
    monkeypatch.setattr(audio_module.soundfile, "SoundFile", no_reading)
    with pytest.raises(MediaTooLarge) as info:
        decode_audio(media_item("audio", data, 3))
    assert info.value.label == "audio[3]"
    assert "36000.0 s" in str(info.value) and "max_audio_seconds=300" in str(info.value)


def test_wav_over_the_limit_by_header():
    with pytest.raises(MediaTooLarge) as info:
        decode_audio(media_item("audio", fm.wav_bytes(3.0, 16000, 1)), MediaLimits(max_audio_seconds=1.0))
    assert "max_audio_seconds=1" in str(info.value)


def test_wav_with_unknown_size_is_bounded_while_reading():
    data = bytearray(fm.wav_bytes(4.0, 16000, 1))
    header = parse_wav_header(bytes(data))
    data[header.data_offset - 4: header.data_offset] = (0xFFFFFFFF).to_bytes(4, "little")  # streaming writer
    limits = MediaLimits(max_audio_seconds=1.0, decode_slack_seconds=0.5)
    with pytest.raises(MediaTooLarge) as info:
        decode_audio(media_item("audio", bytes(data)), limits)
    assert "max_audio_seconds=1" in str(info.value)
    assert len(decode_audio(media_item("audio", bytes(data))).samples) == 64000  # within the default limit: all of it


@pytest.mark.parametrize("make", [lambda: fm.mp3_bytes(4.0), lambda: fm.audio_bytes("ogg", "libopus", 4.0, 48000),
                                  lambda: fm.audio_bytes("adts", "aac", 4.0)])
def test_a_lying_header_cannot_make_the_decoder_run_away(make, monkeypatch, bounded):
    monkeypatch.setattr(audio_module, "stream_seconds", lambda stream, container: 0.5)  # header claims 0.5 s
    added = []
    original_add = audio_module.MonoResampler.add

    def counting_add(self, frame):
        added.append(frame.samples / frame.sample_rate)
        original_add(self, frame)

    monkeypatch.setattr(audio_module.MonoResampler, "add", counting_add)
    with pytest.raises(MediaTooLarge) as info:
        bounded(decode_audio, media_item("audio", make(), 1), MediaLimits(max_audio_seconds=1.0, decode_slack_seconds=0.5))
    assert info.value.label == "audio[1]" and "max_audio_seconds=1" in str(info.value)
    assert sum(added) < 1.5 + 0.2  # stopped right after the bound, not at the real 4 s


def test_a_10_ms_clip_decodes_and_an_empty_one_is_corrupt():
    assert len(decode_audio(media_item("audio", fm.wav_bytes(0.01, 16000, 1))).samples) == 160
    with pytest.raises(CorruptMedia) as info:
        decode_audio(media_item("audio", fm.wav_header(16000, 1, 16, 0) + b""))
    assert "no audio samples" in str(info.value)


@pytest.mark.parametrize(("seconds", "tokens"), [(1.0, 13), (2.0, 26), (10.0, 130), (0.5, 7), (3.7, 13 * 3 + 9)])
def test_token_formula(seconds, tokens):
    assert audio_tokens_for_samples(int(seconds * 16000)) == tokens


def test_features_equal_the_whisper_extractor_and_tokens_come_from_the_mask(feature_extractor):
    clips = [decode_audio(media_item("audio", fm.wav_bytes(seconds, 16000, 1, "FLOAT"))).samples for seconds in (2.0, 1.0037)]
    raw = [soundfile.read(io.BytesIO(fm.wav_bytes(s, 16000, 1, "FLOAT")), dtype="float32")[0] for s in (2.0, 1.0037)]
    tensors, tokens = encode_audio(clips, feature_extractor)
    reference = feature_extractor(raw, sampling_rate=16000, padding="longest", truncation=False,
                                  return_attention_mask=True, return_tensors="pt")
    assert set(tensors) == {"input_features", "feature_attention_mask"}
    assert tensors["input_features"].shape == (2, 128, 200)
    assert (tensors["input_features"] - reference["input_features"]).abs().max().item() < 1e-6
    assert tensors["feature_attention_mask"].tolist() == reference["attention_mask"].tolist()
    frames = reference["attention_mask"].sum(-1).tolist()
    assert frames == [200, 101]  # the shorter clip gets ceil(n / hop) frames when padded
    assert tokens == [audio_tokens_for_mel_frames(f) for f in frames] == [26, 14]


def test_resampled_features_match_the_extractor_on_a_reference_resample(feature_extractor):
    """44.1 kHz stereo through our path vs the Whisper features of the analytic 16 kHz mono signal."""
    ours = decode_audio(media_item("audio", fm.wav_bytes(2.0, 44100, 2, "FLOAT"))).samples
    analytic = fm.tone(2.0, 16000, 1, amplitudes=(0.4,))[:, 0]
    n = min(len(ours), len(analytic))
    a, _ = encode_audio([ours[:n]], feature_extractor)
    b, _ = encode_audio([analytic[:n]], feature_extractor)
    difference = (a["input_features"] - b["input_features"]).abs()[..., 5:-5]  # edges: resampler filter delay
    assert difference.mean().item() < 0.01 and difference.max().item() < 0.1


def test_wave_codec_libsndfile_cannot_read_goes_to_pyav(monkeypatch):
    data = fm.wav_bytes(1.0, 44100, 2, "PCM_24")

    def unsupported(*args, **kwargs):
        raise soundfile.LibsndfileError(1, "unsupported wave codec")  # e.g. an exotic format tag

    monkeypatch.setattr(audio_module.soundfile, "SoundFile", unsupported)
    decoded = decode_audio(media_item("audio", data))
    assert decoded.container == "wav" and abs(len(decoded.samples) - 16000) <= 2
    assert rms(decoded.samples) == pytest.approx(0.4 / np.sqrt(2), rel=0.01)
    with pytest.raises(CorruptMedia) as info:  # and when FFmpeg cannot either, it is corrupt, naming the item
        decode_audio(media_item("audio", fm.wav_header(16000, 1, 16, 3200, format_tag=0x7777) + bytes(3200), 2))
    assert info.value.label == "audio[2]"
