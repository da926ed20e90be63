"""Request bytes as clients send them -> (JSON body dict, named parts): the HTTP transport, bytes only.

Handles the wire cap, `Content-Encoding: zstd | gzip | deflate` (inflated only up to the same cap, so a
compression bomb is refused, never expanded), JSON bodies, and `multipart/form-data` (exactly one `request` part
holding the JSON; every other part is handed on as a named `Part`). What the body and the parts *mean* — media slots,
TypeSafe assets, llama.cpp files — is decided by `omni.contract.request.parse_request`, the same for every edge.
Never fetches URLs or opens paths. Knows nothing of the request schema, the model, the engine or FastAPI.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import zstandard
from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header

if TYPE_CHECKING:
    from python_multipart.multipart import MultipartCallbacks

from api.http.errors import BodyTooLarge, UnsupportedContentType
from omni.contract.errors import InvalidRequest, clipped, quoted
from omni.contract.json_values import load_json
from omni.contract.types import Part

JSON_TYPES = ("application/json", "text/json", "application/x-www-form-urlencoded", "text/plain", "")
ENCODINGS = ("identity", "zstd", "gzip", "x-gzip", "deflate")


@dataclass
class WireBody:
    """A body as read off the wire: the JSON value and the parts sent beside it (multipart only)."""

    body: object
    parts: list[Part] = field(default_factory=list)


# ---------------------------------------------------------------------- transport
def check_content_headers(content_type: str | None, content_encoding: str | None) -> None:
    """Refuse (415) a Content-Type or Content-Encoding we cannot read, before reading the body."""
    for enc in _encodings(content_encoding):
        if enc not in ENCODINGS:
            raise UnsupportedContentType(f"Content-Encoding {quoted(enc)} is not supported; send zstd, gzip or none")
    mime = _mime(content_type)
    if mime != "multipart/form-data" and mime not in JSON_TYPES and not mime.endswith("+json"):
        raise UnsupportedContentType(f"Content-Type {quoted(mime)} is not supported; send application/json "
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
        raise InvalidRequest.one((), "the body is not valid zstd (Content-Encoding: zstd)", "body_decoding",
                                 raw=str(exc)) from None
    if len(out) > cap_bytes:
        raise BodyTooLarge(f"decompressed body is over the {cap_bytes}-byte limit")
    return out


def _bounded_zlib(data: bytes, cap_bytes: int, wbits: int) -> bytes:
    d = zlib.decompressobj(wbits=wbits)
    try:
        out = d.decompress(data, cap_bytes + 1)  # max_length: a bomb stops here
    except zlib.error as exc:
        raise InvalidRequest.one((), "the body is not valid gzip/deflate (Content-Encoding)", "body_decoding",
                                 raw=str(exc)) from None
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
def read_body(data: bytes, content_type: str | None, max_parts: int) -> WireBody:
    """Decoded body bytes -> WireBody. Raises InvalidRequest (422) for unreadable JSON or multipart."""
    if _mime(content_type) == "multipart/form-data":
        return _from_multipart(data, content_type or "", max_parts)
    return WireBody(load_json(data))


@dataclass
class _RawPart:
    name: str
    filename: str | None
    content_type: str
    data: bytearray = field(default_factory=bytearray)


def split_multipart(data: bytes, content_type: str, max_parts: int) -> list[_RawPart]:
    """All parts of a multipart/form-data body held in memory (it is already under the body cap)."""
    boundary = parse_options_header(content_type)[1].get(b"boundary")
    if not boundary:
        raise InvalidRequest.one((), "multipart body without a boundary in Content-Type", "multipart_invalid")
    parts: list[_RawPart] = []
    headers: list[tuple[bytes, bytes]] = []
    cur = {"field": b"", "value": b""}

    def on_header_end() -> None:
        headers.append((cur["field"].lower(), cur["value"]))
        cur["field"] = cur["value"] = b""

    def on_headers_finished() -> None:
        if len(parts) >= max_parts:
            raise InvalidRequest.one((), f"more than {max_parts} multipart parts", "too_long")
        hdr = dict(headers)
        headers.clear()
        _, opts = parse_options_header(hdr.get(b"content-disposition", b""))
        if b"name" not in opts:
            raise InvalidRequest.one((), "multipart part without a name", "multipart_invalid")
        filename = opts.get(b"filename")
        parts.append(_RawPart(opts[b"name"].decode("utf-8", "replace"),
                              filename.decode("utf-8", "replace") if filename is not None else None,
                              _mime(hdr.get(b"content-type", b"").decode("latin-1"))))

    callbacks: MultipartCallbacks = {
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
        raise InvalidRequest.one((), "malformed multipart/form-data body: its boundary or part headers are broken",
                                 "multipart_invalid", raw=str(exc)) from None
    return parts


def _from_multipart(data: bytes, content_type: str, max_parts: int) -> WireBody:
    parts = split_multipart(data, content_type, max_parts)
    requests = [p for p in parts if p.name == "request"]
    if len(requests) != 1:
        msg = "Field required" if not requests else "exactly one `request` part is allowed"
        raise InvalidRequest.one(("request",), msg, "missing" if not requests else "value_error")
    named = [Part(p.name, bytes(p.data), p.content_type or None,
                  f"multipart part {quoted(p.name)}" + (f" ({clipped(p.filename)})" if p.filename else ""))
             for p in parts if p.name != "request"]
    return WireBody(load_json(bytes(requests[0].data), ("request",)), named)
