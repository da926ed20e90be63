"""Glue between the model and `preprocess`: a request's media items -> placeholder ids + thinker tensors.

Request-level limits first (counts, bytes), then each item sniffed and decoded by the slot it was sent in, then one
`encode_media` call (reference order: images, audio, videos). Knows nothing of HTTP, prompts or model weights;
every failure is a typed `MediaError` carrying the item.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from preprocess.align import PlaceholderIds
from preprocess.decode import decode_item
from preprocess.item import MediaItem
from preprocess.loader import ProcessorParts
from preprocess.media import MediaLimits, check_request
from preprocess.processor import EncodedMedia, encode_media

NO_MEDIA = EncodedMedia(ids=[], tensors={}, use_audio_in_video=False, tokens_by_modality={})


def encode_request_media(items: Sequence[MediaItem], parts: ProcessorParts, limits: MediaLimits, *,
                         position_id_per_seconds: float = 13.0, n_window: int = 50) -> EncodedMedia:
    """Items in prompt order -> the media segment's ids and the thinker's media tensors (NO_MEDIA for none)."""
    if not items:
        return NO_MEDIA
    check_request(items, limits)
    decoded = {slot: [decode_item(item, limits) for item in items if item.slot == slot]
               for slot in ("images", "audio", "videos")}
    encoded = encode_media(decoded["images"], decoded["audio"], decoded["videos"],
                           image_processor=parts.image_processor, feature_extractor=parts.feature_extractor,
                           token_ids=PlaceholderIds.from_mapping(parts.special_ids, parts.newline_ids),
                           position_id_per_seconds=position_id_per_seconds, n_window=n_window)
    tokens = {key: count for key, count in encoded.tokens_by_modality.items() if count}
    return replace(encoded, tokens_by_modality=tokens)
