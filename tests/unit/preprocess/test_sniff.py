"""Format by magic bytes, and the slot each format may be sent in."""
from __future__ import annotations

import pytest

from fixtures import media as fm
from preprocess.errors import CorruptMedia, UnsupportedMedia
from preprocess.sniff import Sniffed, sniff, sniff_for_slot
from tests.media_items import media_item

pytestmark = pytest.mark.unit

CASES = {
    "png": (lambda: fm.image_bytes("PNG"), Sniffed("image", "png")),
    "jpeg": (lambda: fm.image_bytes("JPEG"), Sniffed("image", "jpeg")),
    "webp": (lambda: fm.image_bytes("WEBP"), Sniffed("image", "webp")),
    "gif": (lambda: fm.image_bytes("GIF", "P"), Sniffed("image", "gif")),
    "bmp": (lambda: fm.image_bytes("BMP"), Sniffed("image", "bmp")),
    "wav_pcm16": (lambda: fm.wav_bytes(0.1), Sniffed("audio", "wav")),
    "wav_float": (lambda: fm.wav_bytes(0.1, subtype="FLOAT"), Sniffed("audio", "wav")),
    "wav_extensible": (lambda: fm.wav_bytes(0.1, channels=6, extensible=True), Sniffed("audio", "wav")),
    "mp3_id3": (lambda: fm.mp3_bytes(0.2), Sniffed("audio", "mp3")),
    "mp3_bare": (lambda: fm.mp3_bytes(0.2, id3=False), Sniffed("audio", "mp3")),
    "mp3_cover": (lambda: fm.mp3_bytes(0.2, cover_art=True), Sniffed("audio", "mp3")),
    "flac": (lambda: fm.audio_bytes("flac", "flac", 0.2), Sniffed("audio", "flac")),
    "ogg": (lambda: fm.audio_bytes("ogg", "libopus", 0.2, 48000), Sniffed("audio", "ogg")),
    "m4a": (lambda: fm.audio_bytes("ipod", "aac", 0.2), Sniffed("audio", "m4a")),
    "adts": (lambda: fm.audio_bytes("adts", "aac", 0.2), Sniffed("audio", "aac")),
    "mp4": (lambda: fm.video_bytes(seconds=0.2, width=32, height=32, audio_codec=None), Sniffed("video", "mp4")),
    "mov": (lambda: fm.video_bytes("mov", seconds=0.2, width=32, height=32, audio_codec=None),
            Sniffed("video", "mov")),
    "webm": (lambda: fm.video_bytes("webm", "libvpx", None, seconds=0.2, width=32, height=32),
             Sniffed("video", "webm")),
    "mkv": (lambda: fm.video_bytes("matroska", "libx264", None, seconds=0.2, width=32, height=32),
            Sniffed("video", "matroska")),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_sniff_finds_format_by_magic_bytes(name):
    make, expected = CASES[name]
    assert sniff(media_item("images", make())) == expected


def test_id3_tag_before_flac_is_flac():
    data = fm.id3v23_tag() + fm.audio_bytes("flac", "flac", 0.1)
    assert sniff(media_item("audio", data)) == Sniffed("audio", "flac")


@pytest.mark.parametrize("brand", [b"heic", b"avif", b"mif1"])
def test_heif_and_avif_images_are_not_videos(brand):
    data = b"\x00\x00\x00\x18ftyp" + brand + b"\x00\x00\x00\x00mif1heic" + bytes(64)
    with pytest.raises(UnsupportedMedia) as info:
        sniff_for_slot(media_item("videos", data))
    assert info.value.label == "videos[0]"


@pytest.mark.parametrize(("name", "slot"), [("mp4", "images"), ("mp3_id3", "videos"), ("png", "audio"),
                                        ("wav_pcm16", "videos"), ("webm", "images"), ("m4a", "videos"),
                                        ("gif", "videos"), ("flac", "images")])
def test_format_in_the_wrong_slot_is_refused_naming_the_item(name, slot):
    with pytest.raises(UnsupportedMedia) as info:
        sniff_for_slot(media_item(slot, CASES[name][0](), 3))
    assert info.value.label == f"{slot}[3]"
    assert str(info.value).startswith(f"{slot}[3]: ")
    assert f"not accepted in `{slot}`" in str(info.value)


@pytest.mark.parametrize("name", ["mp4", "webm", "mkv", "mov", "m4a", "wav_pcm16", "mp3_cover"])
def test_audio_slot_takes_audio_and_soundtracks_of_containers(name):
    assert sniff_for_slot(media_item("audio", CASES[name][0]())) == CASES[name][1]


def test_declared_name_is_irrelevant_only_bytes_count():
    png = fm.image_bytes("PNG")
    assert sniff(media_item("images", png)).container == "png"
    with pytest.raises(UnsupportedMedia):
        sniff(media_item("images", b"GIF is what the name says, text is what it is"))


def test_empty_is_corrupt_and_junk_is_unsupported():
    with pytest.raises(CorruptMedia) as info:
        sniff(media_item("images", b"", 2))
    assert info.value.label == "images[2]" and "0 bytes" in str(info.value)
    with pytest.raises(UnsupportedMedia) as info:
        sniff(media_item("images", b"%PDF-1.7\n...", 1))
    assert info.value.label == "images[1]"
    for junk in (b"II*\x00" + bytes(20), b"RIFF\x10\x00\x00\x00AVI LIST", b"\xff\xd8"):  # TIFF, AVI, 2-byte stub
        with pytest.raises(UnsupportedMedia):
            sniff(media_item("images", junk))
