"""Glue between the model and `preprocess`: a request's media items -> placeholder ids + thinker tensors, with a
content-addressed cache of per-item encodings.

Request-level limits first (counts, bytes), then each item: from the media cache when the same bytes were encoded
before under the same settings (a hit skips sniffing, decoding and encoding), else sniffed, decoded by the slot it was
sent in and encoded on its own (`preprocess.processor.encode_item`) and kept; the items not in the cache are decoded
side by side, or a lone one with FFmpeg frame threads, on threads lent by one `ThreadBudget` (`decode_threads`)
shared by every request. Then the request is assembled
(`assemble_media`: one feature-extractor call, the heard/silent decision, the ids) exactly as without a cache.
A cache key is the item's bytes hash, its slot and everything that changes its encoding: the media limits (a hit skips
their per-item checks), the image processor's settings and the video frame policy. Whether a video's soundtrack is
heard is decided at assembly from the items, so it is not part of the key. Only successes are kept: a file that fails
to decode raises its typed `MediaError` (carrying the item) every time it is sent. A bad item does not stop the
others: every item is tried, and two or more bad ones raise `MediaErrors` together (one answer names them all).
Knows nothing of HTTP, prompts or model weights.
"""
from __future__ import annotations

import hashlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from typing import cast

import numpy as np

from omni.contract.audit import MediaAudit
from omni.contract.json_values import JSONObject
from omni.model.cache import ByteLRU, resident_bytes
from preprocess.align import PlaceholderIds, hear_videos
from preprocess.audio import HEARABLE_SAMPLES, SAMPLE_RATE_HZ
from preprocess.decode import decode_item
from preprocess.errors import CorruptMedia, MediaError, raise_media_errors
from preprocess.item import MediaItem
from preprocess.loader import IMAGE_PROCESSOR_KEYS, ProcessorParts
from preprocess.media import MediaLimits, check_request
from preprocess.processor import EncodedMedia, ItemEncoding, assemble_media, encode_item
from preprocess.threads import ThreadBudget
from preprocess.video_frames import REFERENCE_FRAMES, VideoFramePolicy

NO_MEDIA = EncodedMedia(ids=[], tensors={}, use_audio_in_video=False, tokens_by_modality={})


@dataclass(frozen=True)
class RequestMedia:
    """A request's encoded media, a digest of its items' contents (in order), how many came from the cache, and per
    item what the model used of it (the audit record's media)."""

    encoded: EncodedMedia
    digest: str = ""
    cached_items: int = 0
    items: int = 0
    audit: tuple[MediaAudit, ...] = ()


class MediaEncoder:
    """Media items of one request -> RequestMedia. Thread-safe; one per model, shared by every edge."""

    def __init__(self, parts: ProcessorParts, limits: MediaLimits, cache_bytes: int = 0, *,
                 position_id_per_seconds: float = 13.0, n_window: int = 50,
                 policy: VideoFramePolicy = REFERENCE_FRAMES, decode_threads: int = 1):
        self.parts, self.limits, self.policy = parts, limits, policy
        self.position_id_per_seconds, self.n_window = position_id_per_seconds, n_window
        self.cache: ByteLRU[ItemEncoding] = ByteLRU(cache_bytes)
        self.threads = ThreadBudget(decode_threads)     # shared by every request: threads decoding at once
        processor = {key: getattr(parts.image_processor, key, None) for key in IMAGE_PROCESSOR_KEYS}
        self._settings = hashlib.blake2b(repr((limits, sorted(processor.items()), policy)).encode(),
                                         digest_size=16).hexdigest()

    def encode(self, items: Sequence[MediaItem]) -> RequestMedia:
        if not items:
            return RequestMedia(NO_MEDIA)
        check_request(items, self.limits)
        digests = [hashlib.sha256(item.data).hexdigest() for item in items]   # the cache key's and the audit's
        keys = [(item.slot, digest, self._settings) for item, digest in zip(items, digests, strict=True)]
        found: list[ItemEncoding | None] = [self.cache.get(key) if self.cache.enabled else None for key in keys]
        missing = [index for index, encoding in enumerate(found) if encoding is None]
        first: dict[tuple[str, str, str], int] = {}
        if self.cache.enabled:     # the same bytes twice in one request: decoded once, the second is a hit
            first = {keys[index]: index for index in reversed(missing)}
            missing = sorted(first.values())
        outcomes = dict(zip(missing, self._encode_each([items[index] for index in missing]), strict=True))
        repeats = [index for index, encoding in enumerate(found) if encoding is None and index not in outcomes
                   and isinstance(outcomes[first[keys[index]]], MediaError)]   # a bad one: its own error too
        outcomes |= dict(zip(repeats, self._encode_each([items[index] for index in repeats]), strict=True))
        raise_media_errors([outcome for _, outcome in sorted(outcomes.items()) if isinstance(outcome, MediaError)])
        encodings: list[ItemEncoding] = []
        for index, (key, encoding) in enumerate(zip(keys, found, strict=True)):
            if encoding is None and index in outcomes:
                encoding = cast(ItemEncoding, outcomes[index])
                if self.cache.enabled:
                    self.cache.put(key, encoding, resident_bytes(encoding.patches, encoding.samples))
            elif encoding is None:
                encoding = cast(ItemEncoding, outcomes[first[key]])    # a repeat of a good item: a hit
            encodings.append(encoding)
        cached = len(items) - len(outcomes)
        _check_hearable(items, encodings)
        encoded = assemble_media(encodings, image_processor=self.parts.image_processor,
                                 feature_extractor=self.parts.feature_extractor,
                                 token_ids=PlaceholderIds.from_mapping(self.parts.special_ids, self.parts.newline_ids),
                                 position_id_per_seconds=self.position_id_per_seconds, n_window=self.n_window)
        tokens = {key: count for key, count in encoded.tokens_by_modality.items() if count}
        return RequestMedia(replace(encoded, tokens_by_modality=tokens),
                            ",".join(f"{item.slot}:{digest}" for item, digest in zip(items, digests, strict=True)), cached,
                            len(items), media_audit(items, digests, encodings, encoded))

    def _encode_each(self, items: Sequence[MediaItem]) -> list[ItemEncoding | MediaError]:
        """Each item decoded and encoded on its own, in order; a bad one gives its MediaError (the others go on).

        Threads from the budget: a lone item takes every idle one (a video's FFmpeg frame threads); several items
        are decoded side by side, one thread each. An error that is not a MediaError (a bug) is raised once every
        item is done, so no thread is left running on its own."""
        if not items:
            return []
        with self.threads.lend(len(items) if len(items) > 1 else self.threads.total) as threads:
            if len(items) == 1 or threads == 1:
                outcomes = [self._encode_one(item, threads if len(items) == 1 else 1) for item in items]
            else:
                with ThreadPoolExecutor(threads, thread_name_prefix="omni-media") as pool:
                    futures = [pool.submit(self._encode_one, item, 1) for item in items]
                    wait(futures)
                outcomes = [future.result() for future in futures]     # a bug's exception, after every item ran
        return outcomes

    def _encode_one(self, item: MediaItem, threads: int) -> ItemEncoding | MediaError:
        try:
            return encode_item(decode_item(item, self.limits, self.policy, threads), item.slot,
                               self.parts.image_processor)
        except MediaError as error:
            return error


def media_audit(items: Sequence[MediaItem], digests: Sequence[str], encodings: Sequence[ItemEncoding],
                encoded: EncodedMedia) -> tuple[MediaAudit, ...]:
    """Per item: its place, the sha256 of its bytes, its sniffed format and what the model used of it (sizes,
    seconds, frames as decoded; the tokens it became; for a video, whether its soundtrack was heard)."""
    per_kind = {kind: iter(counts) for kind, counts in encoded.tokens_per_item.items()}
    out = []
    for item, digest, encoding in zip(items, digests, encodings, strict=True):
        used: JSONObject = dict(encoding.used)
        if item.slot == "audio":
            used["tokens"] = next(per_kind["audio"])
        elif item.slot == "videos":
            used["tokens"] = next(per_kind["video"])
            used["soundtrack_heard"] = encoded.use_audio_in_video
            used["soundtrack_tokens"] = next(per_kind["video_audio"]) if encoded.use_audio_in_video else 0
        out.append(MediaAudit(item.slot, item.index, digest, len(item.data), encoding.container, used))
    return tuple(out)


def _check_hearable(items: Sequence[MediaItem], encodings: Sequence[ItemEncoding]) -> None:
    """Audio clips are encoded in one call with the soundtracks of heard videos; the longest of them must give one
    frame of features (HEARABLE_SAMPLES), and then every clip is heard (a shorter one is padded). Otherwise refuse
    the longest clip, in words that say how short it is and what the minimum is. (An empty clip never gets here:
    `preprocess.audio` refuses it as corrupt; a soundtrack under the minimum counts as none.)"""
    clips = [(_length(e.samples), item) for item, e in zip(items, encodings, strict=True) if item.slot == "audio"]
    if not clips:
        return
    tracks = [e.samples for e in encodings if e.slot == "videos"]
    heard_tracks = [_length(track) for track in tracks] if hear_videos(tracks) else []
    if max([n for n, _ in clips] + heard_tracks) < HEARABLE_SAMPLES:
        n, item = max(clips, key=lambda clip: clip[0])
        raise CorruptMedia(item, f"{n / SAMPLE_RATE_HZ * 1000:.1f} ms of audio ({n} samples at 16 kHz) is too short "
                                 f"to hear alone: the minimum is {HEARABLE_SAMPLES / SAMPLE_RATE_HZ * 1000:.1f} ms "
                                 f"({HEARABLE_SAMPLES} samples at 16 kHz, one frame of features); sent with a longer "
                                 f"clip it is heard")


def _length(samples: np.ndarray | None) -> int:
    """Samples in a clip or a soundtrack (none: 0)."""
    return 0 if samples is None else len(samples)
