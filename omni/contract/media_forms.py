"""Every way a request carries media -> `MediaItem`s in prompt order, and TypeSafe placeholders -> `[image N]`.

The forms, folded here once for every edge (HTTP JSON and multipart, `omni decide`, dataset lines):
- Clef `images` / `audio` / `videos`: lists of data URLs or `{content_type, base64}` objects, and avrik's
  `{data, media_type}` objects (avrik-sdk's `image()`); the forms may be mixed within a list;
- llama.cpp `files`: data URLs, each routed to the slot its type names (image/audio/video);
- TypeSafe `assets`: placeholder -> `{"type": "image", "format", "data_base64"}` or `{"type": "image", "part"}`;
  each placeholder inside a string of state, instructions or criteria becomes `[image N]`, N the image's 1-based
  position among the request's images (the prompt puts every image before the state);
- named parts beside the JSON (`Part`): one named `images` / `audio` / `videos` joins that slot, any other must be
  claimed by exactly one asset.
Within a slot the order is: the JSON list, then `files`, then JSON assets, then asset parts, then slot parts in the
order they were sent. Base64 is decoded here; the bytes are sniffed and decoded later (`preprocess`). Every problem
is an issue naming its place in the body. Never fetches URLs or opens paths; knows nothing of HTTP, torch or the model.
"""
from __future__ import annotations

import base64
import binascii
import re
from collections import Counter
from collections.abc import Mapping, Sequence

from omni.contract.errors import Issues, Loc, clipped, quoted
from omni.contract.json_values import JSONValue
from omni.contract.types import Part
from preprocess.item import SLOT_OF_KIND, SLOTS, MediaItem

ASSET_FORMATS = {"png": "image/png", "jpg": "image/jpeg", "jpeg": "image/jpeg"}
GENERIC_TYPES = ("application/octet-stream", "")
_DATA_URL = re.compile(r"^data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?P<params>(;[\w.+-]+=[^;,]*)*)(?P<b64>;base64)?,(?P<data>.*)$",
                       re.IGNORECASE | re.DOTALL)
_FILE_KINDS = (("data:image/", "image"), ("data:audio/", "audio"), ("data:video/", "video"))


class _Slots:
    """The items of each slot as they are added; an item's index is its position in its slot."""

    def __init__(self) -> None:
        self.items: dict[str, list[MediaItem | None]] = {slot: [] for slot in SLOTS}

    def add(self, slot: str, data: bytes | None, declared: str | None = None, origin: str | None = None) -> int:
        """Append (None for an item that failed: it keeps its place so that later labels stay put); its index."""
        index = len(self.items[slot])
        self.items[slot].append(None if data is None else MediaItem(slot, index, data, declared, origin))
        return index

    def all(self) -> list[MediaItem]:
        return [item for slot in SLOTS for item in self.items[slot] if item is not None]


def collect_media(body: Mapping[str, JSONValue], parts: Sequence[Part],
                  issues: Issues) -> tuple[list[MediaItem], dict[str, str]]:
    """(every media item in prompt order, placeholder -> replacement text). Problems go to `issues`."""
    slots = _Slots()
    _add_slot_lists(body, slots, issues)
    _add_files(body, slots, issues)
    named = [p for p in parts if p.name not in SLOTS]
    for name, n in Counter(p.name for p in named).items():
        if n > 1:
            issues.add((name,), "two parts with this name", "value_error")
    replacements, claimed = _assets(body, {p.name: p for p in named}, slots, issues)
    for p in named:
        if p.name not in claimed:
            issues.add((p.name,), "part is not claimed by any asset and is not images/audio/videos", "extra_forbidden")
    _add_slot_parts(parts, slots, issues)
    return slots.all(), replacements


def _add_slot_lists(body: Mapping[str, JSONValue], slots: _Slots, issues: Issues) -> None:
    """The JSON lists `images` / `audio` / `videos`, each into its slot."""
    for slot in SLOTS:
        for i, item in enumerate(_as_list(body.get(slot), (slot,), issues)):
            slots.add(slot, *(decode_media_item(item, (slot, i), issues) or (None, None)))


def _add_files(body: Mapping[str, JSONValue], slots: _Slots, issues: Issues) -> None:
    """llama.cpp `files`: each data URL into the slot its type names."""
    for i, item in enumerate(_as_list(body.get("files"), ("files",), issues)):
        kind = _data_url_kind(item)
        if kind is None:
            issues.add(("files", i), "send a base64 data URL (data:image/..., data:audio/... or data:video/...;"
                       "base64,...)", "value_error")
            continue
        data, declared = decode_media_item(item, ("files", i), issues) or (None, None)
        slots.add(SLOT_OF_KIND[kind], data, declared, origin=f"files[{i}]")


def _add_slot_parts(parts: Sequence[Part], slots: _Slots, issues: Issues) -> None:
    """Parts named `images` / `audio` / `videos`, each into that slot in the order they were sent."""
    for p in parts:
        if p.name in SLOTS:
            declared = None if (p.content_type or "") in GENERIC_TYPES else p.content_type
            index = slots.add(p.name, p.data or None, declared, p.origin)
            if not p.data:
                issues.add((p.name, index), "empty media item", "media_item")


def _assets(body: Mapping[str, JSONValue], parts: dict[str, Part], slots: _Slots,
            issues: Issues) -> tuple[dict[str, str], set[str]]:
    """TypeSafe assets -> images; (placeholder -> `[image N]`, the part names claimed)."""
    if "assets" not in body:
        return {}, set()
    assets = body["assets"]
    if not isinstance(assets, dict) or not assets:
        issues.add(("assets",), "assets must be a non-empty object: placeholder -> asset",
                   "dict_type" if not isinstance(assets, dict) else "too_short")
        return {}, set()
    valid = []
    for placeholder, asset in assets.items():
        loc = ("assets", clipped(placeholder))
        if not placeholder:
            issues.add(loc, "placeholder must be a non-empty string", "string_too_short")
        elif not isinstance(asset, dict) or asset.get("type") != "image":
            issues.add(loc + ("type",), "Input should be 'image'", "literal_error")
        else:
            valid.append((placeholder, asset))
    replacements: dict[str, str] = {}
    claimed: set[str] = set()
    # JSON assets first, so they sit in the slot before the parts; their order among themselves is the body's.
    for placeholder, asset in sorted(valid, key=lambda v: v[1].get("part") is not None):
        loc, origin = ("assets", clipped(placeholder)), f"assets[{quoted(placeholder)}]"
        if asset.get("part") is not None:
            data = _asset_part(asset["part"], parts, claimed, loc, issues)
            index = slots.add("images", data, _declared(parts, asset["part"]),
                              f"{origin} (part {quoted(asset['part'])})") if data else None
        else:
            decoded = _asset_base64(asset, loc, issues)
            index = slots.add("images", *decoded, origin=origin) if decoded else None
        if index is not None:
            replacements[placeholder] = f"[image {index + 1}]"
    return replacements, claimed


def _asset_part(name: JSONValue, parts: dict[str, Part], claimed: set[str], loc: Loc, issues: Issues) -> bytes | None:
    if not isinstance(name, str) or not name:
        issues.add(loc + ("part",), "part must be the non-empty name of a part sent with the request", "string_type")
    elif name not in parts:
        issues.add(loc + ("part",), f"no part named {quoted(name)} was sent with the request (send the JSON as the "
                   "`request` part of a multipart/form-data body, beside this part)", "missing")
    elif name in claimed:
        issues.add(loc + ("part",), f"part {quoted(name)} is claimed by two assets", "value_error")
    else:
        claimed.add(name)
        if parts[name].data:
            return parts[name].data
        issues.add(loc + ("part",), f"part {quoted(name)} is empty", "media_item")
    return None


def _declared(parts: dict[str, Part], name: str) -> str | None:
    content_type = parts[name].content_type or ""
    return None if content_type in GENERIC_TYPES else content_type


def _asset_base64(asset: dict[str, JSONValue], loc: Loc, issues: Issues) -> tuple[bytes, str | None] | None:
    fmt = str(asset.get("format") or "").lower()
    if not isinstance(asset.get("data_base64"), str):
        issues.add(loc + ("data_base64",), "Field required (or `part` in a multipart request)", "missing")
    elif fmt not in ASSET_FORMATS:
        issues.add(loc + ("format",), "Input should be 'png', 'jpg' or 'jpeg'", "literal_error")
    else:
        return _decode_base64(asset["data_base64"], loc + ("data_base64",), issues, ASSET_FORMATS[fmt])
    return None


def decode_media_item(item: JSONValue, loc: Loc, issues: Issues) -> tuple[bytes, str | None] | None:
    """A data URL, a Clef `{content_type, base64}` or an avrik `{data, media_type}` -> (bytes, declared type).

    An object is told by its payload field (`base64` or `data`; both is an issue), one without a payload by its type
    field (`content_type` or `media_type`); other fields are ignored, as everywhere in a body. URLs and paths are
    refused."""
    if isinstance(item, dict):
        if "base64" in item and "data" in item:
            issues.add(loc, "a media object has one payload: 'base64' (with 'content_type') or 'data' (with "
                       "'media_type'), not both", "media_item")
            return None
        if "data" in item or ("media_type" in item and "base64" not in item and "content_type" not in item):
            return _decode_avrik(item, loc, issues)
        content_type, payload = item.get("content_type"), item.get("base64")
        if not isinstance(content_type, str) or not isinstance(payload, str):
            issues.add(loc, "a media object needs string fields 'content_type' and 'base64' (or 'data' and an "
                       "optional 'media_type')", "media_item")
            return None
        return _decode_base64(payload, loc, issues, content_type)
    if isinstance(item, str):
        match = _DATA_URL.match(item.strip())
        if match is None or not match.group("b64"):
            kind = "remote URLs are not fetched" if item.lower().startswith(("http:", "https:")) else "not a data URL"
            issues.add(loc, f"{kind}: send a base64 data URL (data:<type>;base64,...), "
                       "{\"content_type\", \"base64\"} or {\"data\", \"media_type\"}", "media_item")
            return None
        return _decode_base64(match.group("data"), loc, issues, match.group("mime"))
    issues.add(loc, "a media item must be a data URL string, {\"content_type\", \"base64\"} or "
               "{\"data\", \"media_type\"}", "media_item")
    return None


def _decode_avrik(item: dict[str, JSONValue], loc: Loc, issues: Issues) -> tuple[bytes, str | None] | None:
    """avrik's `{"data": BASE64, "media_type": "image/png"}`: the type is optional and, like every declared type,
    only reported (the format is sniffed from the bytes). Problems are named at `loc.data` / `loc.media_type`."""
    payload, media_type = item.get("data"), item.get("media_type")
    bad = False
    if "data" not in item:
        issues.add(loc + ("data",), "Field required: the bytes, base64-encoded", "missing")
        bad = True
    elif not isinstance(payload, str):
        issues.add(loc + ("data",), f"data must be a base64 string, not {_json_type(payload)}", "string_type")
        bad = True
    if media_type is not None and not isinstance(media_type, str):
        issues.add(loc + ("media_type",), "media_type must be a string such as \"image/png\" (or left out: the "
                   f"format is read from the bytes), not {_json_type(media_type)}", "string_type")
        bad = True
    if bad or not isinstance(payload, str):
        return None
    if payload.lstrip()[:5].lower() == "data:":
        issues.add(loc + ("data",), "data holds the bare base64 of the bytes, not a data URL (a data URL can be "
                   "the list entry itself)", "media_item")
        return None
    return _decode_base64(payload, loc + ("data",), issues, media_type or None)


def _decode_base64(payload: str, loc: Loc, issues: Issues, declared: str | None) -> tuple[bytes, str | None] | None:
    """Standard base64 (padded; whitespace ignored) -> (bytes, declared); empty or invalid is an issue at `loc`."""
    try:
        data = base64.b64decode(re.sub(r"\s+", "", payload), validate=True)
    except (binascii.Error, ValueError):
        issues.add(loc, "invalid base64 payload", "media_item")
        return None
    if not data:
        issues.add(loc, "empty media item", "media_item")
        return None
    return data, declared


def _json_type(value: JSONValue) -> str:
    """How a message names a JSON value's type."""
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", list: "an array", dict: "an object"}.get(
        type(value), "a string")


def _as_list(value: JSONValue, loc: Loc, issues: Issues) -> list[JSONValue]:
    if value is None:
        return []
    if not isinstance(value, list):
        forms = "data URLs" if loc[0] == "files" else "data URLs, {content_type, base64} or {data, media_type} objects"
        issues.add(loc, f"{loc[0]} must be a list of {forms}", "list_type")
        return []
    return value


def _data_url_kind(item: JSONValue) -> str | None:
    head = item[:40].lower() if isinstance(item, str) else ""
    return next((kind for prefix, kind in _FILE_KINDS if head.startswith(prefix)), None)


def replace_placeholders(value: JSONValue, replacements: dict[str, str]) -> JSONValue:
    """A copy of `value` with each placeholder replaced inside its strings (object keys are never scanned)."""
    if not replacements:
        return value
    if isinstance(value, str):
        for placeholder, text in replacements.items():
            value = value.replace(placeholder, text)
        return value
    if isinstance(value, dict):
        return {k: replace_placeholders(v, replacements) for k, v in value.items()}
    if isinstance(value, list):
        return [replace_placeholders(v, replacements) for v in value]
    return value
