"""Request bodies as clients send them -> (System One JSON body, extra MediaRefs) for `omni.contract.request.parse_request`.

Handles: the wire cap, `Content-Encoding: zstd | gzip | deflate` (inflated only up to the same cap, so a
compression bomb is refused, never expanded), JSON, and `multipart/form-data` (a `request` JSON part plus file
parts: TypeSafe `assets` entries naming parts, or plain repeatable `images` / `audio` / `videos` fields).
JSON-side extensions are folded into the Clef slots so the core decodes them once: llama.cpp `files` data URLs
and TypeSafe `assets` with `data_base64`. An asset's placeholder in state / instructions / criteria strings is
replaced by `[image N]` (N = its 1-based position among the request's images, which the prompt places before
the state). Never fetches URLs or opens paths. Knows nothing of the model, the engine or FastAPI.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any

import zstandard
from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header

from api.http.errors import BodyTooLarge, UnsupportedContentType, label_loc
from omni.contract.errors import InvalidRequest, Issue
from omni.contract.request import load_json
from omni.contract.types import MediaRef

SLOTS = {"images": "image", "audio": "audio", "videos": "video"}  # JSON/multipart field -> MediaRef kind
SLOT_OF_KIND = {kind: slot for slot, kind in SLOTS.items()}
ASSET_FORMATS = {"png": "image/png", "jpg": "image/jpeg", "jpeg": "image/jpeg"}
JSON_TYPES = ("application/json", "text/json", "application/x-www-form-urlencoded", "text/plain", "")
ENCODINGS = ("identity", "zstd", "gzip", "x-gzip", "deflate")
GENERIC_TYPES = ("application/octet-stream", "")


@dataclass
class ParsedBody:
    body: dict                                   # System One JSON, extensions folded into the Clef slots
    extra_media: list[MediaRef] = field(default_factory=list)
    origins: dict[str, str] = field(default_factory=dict)  # media label -> what the caller sent, for messages


# ---------------------------------------------------------------------- transport
def check_content_headers(content_type: str | None, content_encoding: str | None) -> None:
    """Refuse (415) a Content-Type or Content-Encoding we cannot read, before reading the body."""
    for enc in _encodings(content_encoding):
        if enc not in ENCODINGS:
            raise UnsupportedContentType(f"Content-Encoding {enc!r} is not supported; send zstd, gzip or none")
    mime = _mime(content_type)
    if mime != "multipart/form-data" and mime not in JSON_TYPES and not mime.endswith("+json"):
        raise UnsupportedContentType(f"Content-Type {mime!r} is not supported; send application/json "
                                     "or multipart/form-data with a `request` part")


def decompress(data: bytes, content_encoding: str | None, cap_bytes: int) -> bytes:
    """Undo the encodings (last applied first), never producing more than `cap_bytes`."""
    for enc in reversed(_encodings(content_encoding)):
        if enc == "zstd":
            data = _bounded_zstd(data, cap_bytes)
        elif enc in ("gzip", "x-gzip", "deflate"):
            data = _bounded_zlib(data, cap_bytes, wbits=31 if "gzip" in enc else 47)
    return data


def _bounded_zstd(data: bytes, cap_bytes: int) -> bytes:
    try:
        with zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True) as reader:
            out = reader.read(cap_bytes + 1)
    except zstandard.ZstdError as exc:
        raise InvalidRequest.one((), f"body is not valid zstd: {exc}", "body_decoding") from None
    if len(out) > cap_bytes:
        raise BodyTooLarge(f"decompressed body is over the {cap_bytes}-byte limit")
    return out


def _bounded_zlib(data: bytes, cap_bytes: int, wbits: int) -> bytes:
    d = zlib.decompressobj(wbits=wbits)
    try:
        out = d.decompress(data, cap_bytes + 1)  # max_length: a bomb stops here
    except zlib.error as exc:
        raise InvalidRequest.one((), f"body is not valid gzip/deflate: {exc}", "body_decoding") from None
    if len(out) > cap_bytes:
        raise BodyTooLarge(f"decompressed body is over the {cap_bytes}-byte limit")
    if not d.eof:
        raise InvalidRequest.one((), "gzip/deflate body is truncated", "body_decoding")
    return out


def _encodings(header: str | None) -> list[str]:
    return [e.strip().lower() for e in (header or "").split(",") if e.strip()]


def _mime(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


# ---------------------------------------------------------------------- bodies
def parse_body(data: bytes, content_type: str | None, max_parts: int) -> ParsedBody:
    """Decoded body bytes -> ParsedBody. Raises InvalidRequest (422) with a loc for every client mistake."""
    if _mime(content_type) == "multipart/form-data":
        return _from_multipart(data, content_type or "", max_parts)
    parsed = ParsedBody(_load_json(data, ()))
    _fold_json_extensions(parsed)
    return parsed


def _load_json(data: bytes, loc: tuple) -> dict:
    value = load_json(data, loc)
    if not isinstance(value, dict):
        raise InvalidRequest.one(loc, "Input should be a valid dictionary or object", "model_attributes_type")
    return value


@dataclass
class Part:
    name: str
    filename: str | None
    content_type: str
    data: bytearray = field(default_factory=bytearray)


def split_multipart(data: bytes, content_type: str, max_parts: int) -> list[Part]:
    """All parts of a multipart/form-data body held in memory (it is already under the body cap)."""
    boundary = parse_options_header(content_type)[1].get(b"boundary")
    if not boundary:
        raise InvalidRequest.one((), "multipart body without a boundary in Content-Type", "multipart_invalid")
    parts: list[Part] = []
    headers: list[tuple[bytes, bytes]] = []
    cur = {"field": b"", "value": b""}

    def on_header_end():
        headers.append((cur["field"].lower(), cur["value"]))
        cur["field"] = cur["value"] = b""

    def on_headers_finished():
        if len(parts) >= max_parts:
            raise InvalidRequest.one((), f"more than {max_parts} multipart parts", "too_long")
        hdr = dict(headers)
        headers.clear()
        _, opts = parse_options_header(hdr.get(b"content-disposition", b""))
        if b"name" not in opts:
            raise InvalidRequest.one((), "multipart part without a name", "multipart_invalid")
        filename = opts.get(b"filename")
        parts.append(Part(opts[b"name"].decode("utf-8", "replace"),
                          filename.decode("utf-8", "replace") if filename is not None else None,
                          _mime(hdr.get(b"content-type", b"").decode("latin-1"))))

    callbacks = {
        "on_header_field": lambda d, s, e: cur.__setitem__("field", cur["field"] + d[s:e]),
        "on_header_value": lambda d, s, e: cur.__setitem__("value", cur["value"] + d[s:e]),
        "on_header_end": on_header_end,
        "on_headers_finished": on_headers_finished,
        "on_part_data": lambda d, s, e: parts[-1].data.extend(d[s:e]),
    }
    try:
        parser = MultipartParser(boundary, callbacks)
        parser.write(data)
        parser.finalize()
    except FormParserError as exc:
        raise InvalidRequest.one((), f"malformed multipart body: {exc}", "multipart_invalid") from None
    return parts


def _from_multipart(data: bytes, content_type: str, max_parts: int) -> ParsedBody:
    parts = split_multipart(data, content_type, max_parts)
    requests = [p for p in parts if p.name == "request"]
    if len(requests) != 1:
        msg = "Field required" if not requests else "exactly one `request` part is allowed"
        raise InvalidRequest.one(("request",), msg, "missing" if not requests else "value_error")
    parsed = ParsedBody(_load_json(bytes(requests[0].data), ("request",)))
    named = [p for p in parts if p.name != "request" and p.name not in SLOTS]
    by_name = {p.name: p for p in named}
    issues = [Issue((name,), "two parts with this name", "value_error") for name in by_name
              if sum(p.name == name for p in named) > 1]
    if issues:
        raise InvalidRequest(issues)
    claimed = _fold_json_extensions(parsed, by_name)
    issues = [Issue((p.name,), "part is not claimed by any asset and is not images/audio/videos", "extra_forbidden")
              for p in named if p.name not in claimed]
    for p in parts:
        if p.name in SLOTS:
            label = _add_ref(parsed, SLOTS[p.name], bytes(p.data), p.content_type, f"multipart part {p.name!r}"
                             + (f" ({p.filename})" if p.filename else ""))
            if not p.data:
                issues.append(Issue(tuple(label_loc(label)), "empty media item", "media_item"))
    if issues:
        raise InvalidRequest(issues)
    return parsed


def _add_ref(parsed: ParsedBody, kind: str, data: bytes, content_type: str | None, origin: str) -> str:
    slot = SLOT_OF_KIND[kind]
    index = _slot_len(parsed.body, slot) + sum(1 for m in parsed.extra_media if m.kind == kind)
    label = f"{slot}[{index}]"
    declared = None if (content_type or "") in GENERIC_TYPES else content_type
    parsed.extra_media.append(MediaRef(kind=kind, data=data, label=label, declared_type=declared))
    parsed.origins[label] = origin
    return label


def _slot_len(body: dict, slot: str) -> int:
    items = body.get(slot)
    return len(items) if isinstance(items, list) else 0


# ---------------------------------------------------------------------- JSON extensions
def _fold_json_extensions(parsed: ParsedBody, parts: dict[str, Part] | None = None) -> set[str]:
    """llama.cpp `files` and TypeSafe `assets` -> Clef slots / extra media. Returns the part names claimed."""
    body = parsed.body
    if "files" in body:
        for i, item in enumerate(_as_list(body.pop("files"), ("files",))):
            kind = _data_url_kind(item, ("files", i))
            _append_to_slot(parsed, SLOT_OF_KIND[kind], item, f"files[{i}]")
    if "assets" not in body:
        return set()
    return _fold_assets(parsed, body.pop("assets"), parts)


def _fold_assets(parsed: ParsedBody, assets: Any, parts: dict[str, Part] | None) -> set[str]:
    if not isinstance(assets, dict) or not assets:
        raise InvalidRequest.one(("assets",), "assets must be a non-empty object: placeholder -> asset",
                                 "dict_type" if not isinstance(assets, dict) else "too_short")
    claimed: set[str] = set()
    issues: list[Issue] = []
    replacements: dict[str, str] = {}
    valid = []
    for placeholder, asset in assets.items():
        loc = ("assets", placeholder)
        if not placeholder:
            issues.append(Issue(loc, "placeholder must be a non-empty string", "string_too_short"))
        elif not isinstance(asset, dict) or asset.get("type") != "image":
            issues.append(Issue(loc + ("type",), "Input should be 'image'", "literal_error"))
        else:
            valid.append((placeholder, asset, loc, f"assets[{placeholder!r}]"))
    # JSON items first, so they sit in the Clef slot before the multipart ones whose labels continue after it.
    for placeholder, asset, loc, origin in sorted(valid, key=lambda v: v[1].get("part") is not None):
        if asset.get("part") is not None:
            label = _asset_from_part(parsed, asset["part"], parts, claimed, loc, origin, issues)
        else:
            label = _asset_from_base64(parsed, asset, loc, origin, issues)
        if label:
            replacements[placeholder] = f"[image {label_loc(label)[1] + 1}]"
    if issues:
        raise InvalidRequest(issues)
    _replace_placeholders(parsed.body, replacements)
    return claimed


def _asset_from_part(parsed, part_name, parts, claimed, loc, origin, issues) -> str | None:
    if parts is None:
        issues.append(Issue(loc + ("part",), "`part` needs a multipart/form-data request", "value_error"))
    elif part_name not in parts:
        issues.append(Issue(loc + ("part",), f"no multipart part named {part_name!r}", "missing"))
    elif part_name in claimed:
        issues.append(Issue(loc + ("part",), f"part {part_name!r} is claimed by two assets", "value_error"))
    else:
        claimed.add(part_name)
        p = parts[part_name]
        if not p.data:
            issues.append(Issue(loc + ("part",), f"part {part_name!r} is empty", "media_item"))
            return None
        return _add_ref(parsed, "image", bytes(p.data), p.content_type, f"{origin} (part {part_name!r})")
    return None


def _asset_from_base64(parsed, asset, loc, origin, issues) -> str | None:
    fmt = str(asset.get("format") or "").lower()
    if not isinstance(asset.get("data_base64"), str):
        issues.append(Issue(loc + ("data_base64",), "Field required (or `part` in a multipart request)", "missing"))
    elif fmt not in ASSET_FORMATS:
        issues.append(Issue(loc + ("format",), "Input should be 'png', 'jpg' or 'jpeg'", "literal_error"))
    else:
        item = {"content_type": ASSET_FORMATS[fmt], "base64": asset["data_base64"]}
        return _append_to_slot(parsed, "images", item, origin)
    return None


def _append_to_slot(parsed: ParsedBody, slot: str, item: Any, origin: str) -> str:
    """Put a JSON media item into the Clef slot (before any multipart media of that slot)."""
    existing = parsed.body.get(slot)
    if existing is not None and not isinstance(existing, list):
        raise InvalidRequest.one((slot,), "Input should be a valid list", "list_type")
    items = list(existing or [])
    items.append(item)
    parsed.body[slot] = items
    label = f"{slot}[{len(items) - 1}]"
    parsed.origins[label] = origin
    return label


def _as_list(value: Any, loc: tuple) -> list:
    if not isinstance(value, list):
        raise InvalidRequest.one(loc, "Input should be a valid list", "list_type")
    return value


def _data_url_kind(item: Any, loc: tuple) -> str:
    head = item[:40].lower() if isinstance(item, str) else ""
    for prefix, kind in (("data:image/", "image"), ("data:audio/", "audio"), ("data:video/", "video")):
        if head.startswith(prefix):
            return kind
    raise InvalidRequest.one(loc, "send a base64 data URL (data:image/..., data:audio/... or data:video/...;base64,...)",
                             "value_error")


def _replace_placeholders(body: dict, replacements: dict[str, str]) -> None:
    """Rewrite placeholders inside string values (never object keys) of state, instructions and criteria."""
    if not replacements:
        return
    if "state" in body:
        body["state"] = _replace_in(body["state"], replacements)
    questions = body.get("questions")
    if isinstance(questions, dict):
        for q in questions.values():
            if isinstance(q, dict):
                for key in ("instructions", "criteria"):
                    if key in q:
                        q[key] = _replace_in(q[key], replacements)


def _replace_in(value: Any, replacements: dict[str, str]) -> Any:
    if isinstance(value, str):
        for placeholder, text in replacements.items():
            value = value.replace(placeholder, text)
        return value
    if isinstance(value, dict):
        return {k: _replace_in(v, replacements) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace_in(v, replacements) for v in value]
    return value
