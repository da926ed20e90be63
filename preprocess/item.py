"""The media-slot table and `MediaItem`: one media item as one typed value, from where it enters to its error.

An edge (HTTP body, multipart part, CLI flag, dataset line) builds a `MediaItem` once: the slot it was sent in, its
index within that slot (the prompt order), its bytes, the content type the caller declared (never trusted, only
reported) and, when the caller sent it some other way than `slot[index]`, that way (`origin`, for messages). Every
`MediaError` carries the item, so whoever reports it reads `item.loc` and `item.origin`: nothing parses labels.

Knows nothing of decoding, limits, the model, HTTP or the filesystem.
"""
from __future__ import annotations

from dataclasses import dataclass, field

# The three media slots: request field -> what it holds. Their order is the prompt order (images, audio, videos).
SLOTS: dict[str, str] = {"images": "image", "audio": "audio", "videos": "video"}
SLOT_OF_KIND: dict[str, str] = {kind: slot for slot, kind in SLOTS.items()}


@dataclass(frozen=True)
class MediaItem:
    """One media item of a request: `slot` ("images" | "audio" | "videos") and `index` within it, the bytes."""

    slot: str
    index: int
    data: bytes = field(repr=False)
    declared_type: str | None = None   # what the caller said it is (informational: formats are sniffed)
    origin: str | None = None          # how it was sent, when not as `slot[index]` ("--image unit.png")

    def __post_init__(self) -> None:
        if self.slot not in SLOTS:
            raise ValueError(f"unknown media slot {self.slot!r} (one of {', '.join(SLOTS)})")

    @property
    def kind(self) -> str:
        """"image" | "audio" | "video"."""
        return SLOTS[self.slot]

    @property
    def label(self) -> str:
        """`videos[1]`: how messages name the item."""
        return f"{self.slot}[{self.index}]"

    @property
    def loc(self) -> tuple[str, int]:
        """Its place in the request body: ("videos", 1)."""
        return (self.slot, self.index)

    @property
    def size_bytes(self) -> int:
        return len(self.data)

    @property
    def slot_rank(self) -> int:
        """Position of its slot in the prompt order."""
        return list(SLOTS).index(self.slot)
