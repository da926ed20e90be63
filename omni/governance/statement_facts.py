"""The facts a decision relied on (DSA Art. 17(3)(b)), read from the evidence summary its log record kept.

`evidence_sentences(summary, questions, labels)`: one short sentence per question the statement's rule names, saying
where in the content the model looked when it gave its answer — the heaviest place of each medium and of the state,
heaviest first:

    fan_running=true relied on: video 0 at 7.0–8.0 s (box 0,0–60,60), audio 0 at 3.28–3.36 s, state 'scratch'

A question the summary lacks gets none; nor does one a reviewer labelled otherwise (the evidence is the model's
answer's, and the label prevails). `with_facts(text, sentences, limit_chars)`: the map's `decision_facts` followed by
them, as many whole sentences as the database's limit takes. Knows nothing of logs, files, the model or HTTP: JSON
in, text out.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

from omni.contract.answers import label_id
from omni.contract.json_values import JSONObject, JSONValue

FACTS_HEADING = "Facts relied on (where the model looked, by its routing attention):"
STATE_CHARS = 60             # a state span is quoted up to this many characters


def evidence_sentences(summary: JSONValue, questions: Iterable[str],
                       labels: Mapping[str, JSONValue] | None = None) -> list[str]:
    """A sentence per question of `questions` (in order, once each) whose evidence the summary kept."""
    kept = summary.get("questions") if isinstance(summary, dict) else None
    if not isinstance(kept, dict):
        return []
    sentences = []
    for qid in dict.fromkeys(questions):
        entry = kept.get(qid)
        if not isinstance(entry, dict):
            continue
        answer = str(entry.get("answer"))
        if labels is not None and qid in labels and label_id(labels[qid]) != answer:
            continue
        places = [text for _, text in sorted(_places(entry), key=lambda place: -place[0])]
        if places:
            sentences.append(f"{qid}={answer} relied on: {', '.join(places)}")
    return sentences


def with_facts(text: str, sentences: list[str], limit_chars: int) -> str:
    """`text`, then the heading and the sentences (`; ` between them, `.` after), as many whole ones as fit."""
    if not sentences:
        return text
    out, taken = f"{text}\n{FACTS_HEADING} ", 0
    for sentence in sentences:
        piece = ("; " if taken else "") + sentence
        if len(out) + len(piece) + 1 > limit_chars:
            break
        out, taken = out + piece, taken + 1
    return out + "." if taken else text


def _places(entry: JSONObject) -> list[tuple[float, str]]:
    """(weight, words) of the heaviest item of each medium and of the state."""
    places = []
    for image in _list(entry.get("images")):
        box = _first(image.get("boxes"))
        if box is not None:
            places.append((_weight(box), f"image {image.get('index')} (box {_box(box)})"))
    for clip in _list(entry.get("audio")):
        window = _first(clip.get("windows"))
        if window is not None:
            places.append((_weight(window), f"audio {clip.get('index')} at {_seconds(window)}"))
    for video in _list(entry.get("videos")):
        places.extend(_video_places(video))
    state = entry.get("state")
    span = _first(state.get("spans")) if isinstance(state, dict) else None
    if span is not None:
        text = " ".join(str(span.get("text", "")).split())
        quoted = text if len(text) <= STATE_CHARS else text[:STATE_CHARS - 1] + "…"
        places.append((_weight(span), f"state '{quoted}'"))
    return places


def _video_places(video: JSONObject) -> list[tuple[float, str]]:
    places = []
    moment = _first(video.get("moments"))
    if moment is not None:
        box = _first(moment.get("boxes"))
        where = f" (box {_box(box)})" if box is not None else ""
        places.append((_weight(moment), f"video {video.get('index')} at {_seconds(moment)}{where}"))
    soundtrack = video.get("soundtrack")
    window = _first(soundtrack.get("windows")) if isinstance(soundtrack, dict) else None
    if window is not None:
        places.append((_weight(window), f"video {video.get('index')}'s sound at {_seconds(window)}"))
    return places


def _list(value: JSONValue) -> list[JSONObject]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _first(value: JSONValue) -> JSONObject | None:
    items = _list(value)
    return items[0] if items else None


def _weight(item: JSONObject) -> float:
    weight = item.get("weight")
    return float(weight) if isinstance(weight, (int, float)) and not isinstance(weight, bool) else 0.0


def _seconds(item: JSONObject) -> str:
    return f"{_instant(item.get('start_s'))}–{_instant(item.get('end_s'))} s"


def _instant(value: JSONValue) -> str:
    """Seconds as the wire has them, always with a decimal point: 7.0, 3.28."""
    return str(float(value)) if isinstance(value, (int, float)) and not isinstance(value, bool) else "?"


def _box(box: JSONObject) -> str:
    return f"{_number(box.get('x0'))},{_number(box.get('y0'))}–{_number(box.get('x1'))},{_number(box.get('y1'))}"


def _number(value: JSONValue) -> str:
    return f"{value:g}" if isinstance(value, (int, float)) and not isinstance(value, bool) else "?"
