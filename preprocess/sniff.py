"""Media format by magic bytes, and whether that format may be sent in a given slot.

The file name, the data-URL type and the declared content type are never trusted: only the first bytes are.

Accepted containers (`Sniffed.container`) and the slot each may arrive in:

| container  | kind  | slots           | notes |
|------------|-------|-----------------|-------|
| png jpeg webp | image | images       | animated WebP: first frame |
| gif        | image | images          | **first frame only** (what PIL and the reference give); an animated GIF is not a video |
| bmp        | image | images          | plain still image (BITMAPINFOHEADER family) |
| wav        | audio | audio           | RIFF/RF64 WAVE: PCM 8/16/24/32-bit, float, WAVE_FORMAT_EXTENSIBLE (decoded by libsndfile) |
| mp3        | audio | audio           | MPEG audio with or without an ID3v2 tag (cover art is ignored, never a video) |
| flac ogg aac | audio | audio         | decoded by PyAV; ogg = Vorbis/Opus in Ogg, aac = ADTS |
| m4a        | audio | audio           | ISO-BMFF whose major brand says audio (M4A, M4B, M4P, F4A) |
| mp4 mov    | video | videos, audio   | ISO-BMFF / QuickTime; in `audio` only the soundtrack is used |
| webm matroska | video | videos, audio | EBML DocType; in `audio` only the soundtrack is used |

Refused (`UnsupportedMedia`): anything else, including HEIF/AVIF images (ISO-BMFF with an image brand),
TIFF, AVI, and any accepted format sent in a slot not listed above (an mp4 in `images`, an mp3 in `videos`).
Empty input is `CorruptMedia`.

Knows nothing of decoding, limits, the model, HTTP or the filesystem.
"""
from __future__ import annotations

from dataclasses import dataclass

from preprocess.errors import CorruptMedia, UnsupportedMedia
from preprocess.item import MediaItem


@dataclass(frozen=True)
class Sniffed:
    kind: str  # "image" | "audio" | "video": what the container naturally carries
    container: str  # e.g. "png", "wav", "mp4", "webm"


SLOT_CONTAINERS: dict[str, frozenset[str]] = {
    "images": frozenset({"png", "jpeg", "webp", "gif", "bmp"}),
    "audio": frozenset({"wav", "mp3", "flac", "ogg", "aac", "m4a", "mp4", "mov", "webm", "matroska"}),
    "videos": frozenset({"mp4", "mov", "webm", "matroska"}),
}

_AUDIO_BRANDS = {b"M4A ", b"M4B ", b"M4P ", b"F4A ", b"F4B "}
_IMAGE_BRANDS = {b"heic", b"heix", b"heim", b"heis", b"hevc", b"hevx", b"mif1", b"msf1", b"avif", b"avis"}
_QUICKTIME_ATOMS = {b"moov", b"mdat", b"wide", b"free", b"skip", b"pnot"}
_BMP_HEADER_SIZES = {12, 40, 52, 56, 64, 108, 124}


def _id3v2_size(data: bytes) -> int:
    """Bytes taken by a leading ID3v2 tag (header + body + footer), 0 if none."""
    if len(data) < 10 or data[:3] != b"ID3":
        return 0
    body = 0
    for byte in data[6:10]:  # syncsafe integer: 7 bits per byte
        body = (body << 7) | (byte & 0x7F)
    footer = 10 if data[5] & 0x10 else 0
    return 10 + body + footer


def _mpeg_audio_layer(data: bytes, offset: int = 0) -> int | None:
    """Layer (1-3) of an MPEG audio frame header at `offset`, 0 for ADTS AAC, None if no frame sync."""
    if len(data) < offset + 4 or data[offset] != 0xFF or data[offset + 1] & 0xE0 != 0xE0:
        return None
    version = (data[offset + 1] >> 3) & 0x3
    layer_bits = (data[offset + 1] >> 1) & 0x3
    if layer_bits == 0:  # ADTS: 12-bit sync, layer always 00
        return 0 if data[offset + 1] & 0xF0 == 0xF0 else None
    if version == 1 or (data[offset + 2] >> 4) == 0xF:  # reserved version / invalid bitrate index
        return None
    return 4 - layer_bits


def _ebml_doctype(data: bytes) -> str | None:
    """DocType string ("webm", "matroska") from an EBML header, None if absent."""
    pos = data.find(b"\x42\x82", 4, 64)
    if pos < 0 or pos + 3 > len(data):
        return None
    size_byte = data[pos + 2]
    if not size_byte & 0x80:  # we only read 1-byte sizes: doc types are short
        return None
    size = size_byte & 0x7F
    return data[pos + 3: pos + 3 + size].rstrip(b"\x00").decode("ascii", "replace")


def _iso_bmff(data: bytes) -> Sniffed | None:
    box = data[4:8]
    if box == b"ftyp":
        brand = data[8:12]
        if brand in _IMAGE_BRANDS:
            return None
        if brand in _AUDIO_BRANDS:
            return Sniffed("audio", "m4a")
        return Sniffed("video", "mov" if brand == b"qt  " else "mp4")
    if box in _QUICKTIME_ATOMS:
        return Sniffed("video", "mov")
    return None


def _riff(data: bytes) -> Sniffed | None:
    if data[:4] not in (b"RIFF", b"RF64") or len(data) < 12:
        return None
    form = data[8:12]
    if form == b"WAVE":
        return Sniffed("audio", "wav")
    if form == b"WEBP" and data[:4] == b"RIFF":
        return Sniffed("image", "webp")
    return None


def _still_image(data: bytes) -> Sniffed | None:
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return Sniffed("image", "png")
    if data[:3] == b"\xff\xd8\xff":
        return Sniffed("image", "jpeg")
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return Sniffed("image", "gif")
    if data[:2] == b"BM" and len(data) >= 18 and int.from_bytes(data[14:18], "little") in _BMP_HEADER_SIZES:
        return Sniffed("image", "bmp")
    return None


def _audio_stream(data: bytes) -> Sniffed | None:
    if data[:4] == b"fLaC":
        return Sniffed("audio", "flac")
    if data[:4] == b"OggS":
        return Sniffed("audio", "ogg")
    tag = _id3v2_size(data)
    if tag:
        if data[tag: tag + 4] == b"fLaC":
            return Sniffed("audio", "flac")
        layer = _mpeg_audio_layer(data, tag)
        # A tag followed by padding or a frame we cannot check yet is still an mp3: ID3v2 is an mp3 thing.
        return Sniffed("audio", "aac" if layer == 0 else "mp3")
    layer = _mpeg_audio_layer(data)
    if layer is None:
        return None
    return Sniffed("audio", "aac" if layer == 0 else "mp3")


def sniff(item: MediaItem) -> Sniffed:
    """Container and natural kind of the item's bytes from its magic bytes; `UnsupportedMedia` if not accepted."""
    data = item.data
    if not data:
        raise CorruptMedia(item, "empty (0 bytes)")
    head = bytes(data[:128])
    for probe in (_still_image, _riff, _iso_bmff, _audio_stream):
        found = probe(head)
        if found is not None:
            return found
    if head[:4] == b"\x1a\x45\xdf\xa3":
        doctype = _ebml_doctype(head)
        if doctype in ("webm", "matroska"):
            return Sniffed("video", doctype)
    raise UnsupportedMedia(item, f"unrecognised format (first bytes {head[:8].hex()})")


def sniff_for_slot(item: MediaItem) -> Sniffed:
    """`sniff`, then refuse a format that may not be sent in the item's slot (an mp4 in `images`)."""
    found = sniff(item)
    slot = item.slot
    allowed = SLOT_CONTAINERS[slot]
    if found.container not in allowed:
        raise UnsupportedMedia(item, f"{found.kind} ({found.container}) is not accepted in `{slot}` "
                                      f"(accepted: {', '.join(sorted(allowed))})")
    return found
