"""Glue between the core and `preprocess`: request media refs → placeholder ids + model tensors.

Knows nothing of HTTP or the model weights; limits come from `MediaLimits`.
"""
from __future__ import annotations

from typing import Sequence

from omni.errors import InvalidRequest
from omni.model import EncodedMediaInputs
from omni.types import MediaRef
from preprocess.loader import ProcessorParts
from preprocess.media import MediaLimits


def encode_request_media(refs: Sequence[MediaRef], parts: ProcessorParts, limits: MediaLimits) -> EncodedMediaInputs:
    if not refs:
        return EncodedMediaInputs()
    raise InvalidRequest.one((refs[0].label.split("[")[0],), "media inputs are not supported by this build yet",
                             "media_unsupported")
