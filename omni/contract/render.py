"""A parsed request written back as a System One body: the inverse of `parse_request`, up to the media's form.

`render_request(request, media_entries)` gives the body whose parse is the same request: state and questions as
the wire writes them (noul descriptions, choice criteria in request order, score levels), the media in the Clef slots
(`images`, `audio`, `videos`), each entry given by the caller (a data URL, or a file path for datasets), and the
request's `truncate` / `x_isolation` / `x_audit` when they differ from the defaults. TypeSafe placeholders were already replaced
by the parser, so the rendered state reads the same to the model. Used to keep a request (the review directory, a
labelled dataset line) in one form whatever form it arrived in.
Knows nothing of files, HTTP or the model.
"""
from __future__ import annotations

import base64
import re
from collections.abc import Sequence

from omni.contract.json_values import JSONObject, JSONValue
from omni.contract.types import NOUL_DEFAULT_FALSE, NOUL_DEFAULT_TRUE, DecisionRequest, Question
from preprocess.item import SLOTS, MediaItem

MIME = re.compile(r"[\w.+-]+/[\w.+-]+")


def render_question(question: Question) -> JSONObject:
    """One question as the wire writes it (criteria only where they carry something)."""
    wire: JSONObject = {"type": question.type}
    if question.instructions is not None:
        wire["instructions"] = question.instructions
    if question.type == "noul":
        descriptions = {o.id: o.description for o in question.options}
        defaults = {"true": NOUL_DEFAULT_TRUE, "false": NOUL_DEFAULT_FALSE}
        if descriptions != defaults:
            wire["criteria"] = descriptions
    elif question.type == "choice":
        wire["criteria"] = {o.id: o.description for o in question.options}
    else:
        wire["criteria"] = [o.description for o in question.options]
    return wire


def data_url(item: MediaItem) -> str:
    """The item as a base64 data URL of its declared type, or a generic one (formats are sniffed on parse)."""
    declared = item.declared_type or ""
    mime = declared if MIME.fullmatch(declared) else "application/octet-stream"
    return f"data:{mime};base64,{base64.b64encode(item.data).decode()}"


def render_request(request: DecisionRequest, media_entries: Sequence[JSONValue] | None = None) -> JSONObject:
    """The body of `request`; `media_entries[i]` stands for `request.media[i]` (default: data URLs)."""
    entries = list(media_entries) if media_entries is not None else [data_url(m) for m in request.media]
    if len(entries) != len(request.media):
        raise ValueError(f"{len(entries)} media entries for {len(request.media)} media items")
    body: JSONObject = {"state": request.state,
                            "questions": {q.id: render_question(q) for q in request.questions}}
    if request.model is not None:
        body["model"] = request.model
    for slot in SLOTS:
        slot_entries = [entry for item, entry in zip(request.media, entries, strict=True) if item.slot == slot]
        if slot_entries:
            body[slot] = slot_entries
    if not request.truncate:
        body["truncate"] = False
    if request.isolation is not None:
        body["x_isolation"] = request.isolation
    if request.audit:
        body["x_audit"] = True
    if request.evidence is not None:
        body["x_evidence"] = request.evidence.to_wire()
    return body
