"""Glue between the core and `preprocess`: a request's media refs → placeholder ids + thinker tensors.

Request-level limits first (counts, bytes), then each item sniffed and decoded by the slot it was sent in, then one
`encode_media` call (reference order: images, audio, videos). Knows nothing of HTTP, prompts or model weights;
every failure is a typed `MediaError` naming the item.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from omni.model.clef import NO_MEDIA
from omni.contract.types import MediaRef
from preprocess.align import PlaceholderIds
from preprocess.decode import decode_item
from preprocess.loader import ProcessorParts
from preprocess.media import MediaLimits, check_request
from preprocess.processor import EncodedMedia, encode_media

SLOT_OF_KIND = {"image": "images", "audio": "audio", "video": "videos"}


def encode_request_media(refs: Sequence[MediaRef], parts: ProcessorParts, limits: MediaLimits, *,
                         position_id_per_seconds: float = 13.0, n_window: int = 50) -> EncodedMedia:
    if not refs:
        return NO_MEDIA
    by_slot: dict[str, list[MediaRef]] = {"images": [], "audio": [], "videos": []}
    for ref in refs:
        by_slot[SLOT_OF_KIND[ref.kind]].append(ref)
    check_request(*([ref.data for ref in by_slot[slot]] for slot in ("images", "audio", "videos")), limits=limits)
    decoded = {slot: [decode_item(ref.data, slot, ref.label, limits) for ref in items]
               for slot, items in by_slot.items()}
    encoded = encode_media(decoded["images"], decoded["audio"], decoded["videos"],
                           image_processor=parts.image_processor, feature_extractor=parts.feature_extractor,
                           token_ids=PlaceholderIds.from_mapping(parts.special_ids, parts.newline_ids),
                           position_id_per_seconds=position_id_per_seconds, n_window=n_window)
    tokens = {key: count for key, count in encoded.tokens_by_modality.items() if count}
    return replace(encoded, tokens_by_modality=tokens)
