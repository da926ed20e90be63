"""Per-question probabilities → System One answers (noul / choice / score), confidence and rounding; and back: an
answer read as a label id (`top_answer`, `answer_confidence`, `label_id`: what review and governance compare).

Rounding is done in integer units (largest remainder) so each question's rounded probabilities still sum to
exactly 1; argmax, score and confidence come from the unrounded distribution. Knows nothing of torch, the model or
HTTP: it sees questions and float probability vectors in prompt (head) order.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from omni.contract.errors import InferenceFailed
from omni.contract.json_values import JSONObject, JSONValue
from omni.contract.types import Question


def round_distribution(probabilities: Sequence[float], decimals: int = 4) -> list[float]:
    """Round to `decimals` places so the results sum to exactly 1 (largest remainder; ties to the earlier item)."""
    p = np.asarray(probabilities, dtype=np.float64)
    p = p / p.sum()
    scale = 10 ** decimals
    scaled = p * scale
    units = np.floor(scaled).astype(np.int64)
    short = int(scale - units.sum())
    order = sorted(range(len(p)), key=lambda i: (-(scaled[i] - units[i]), i))
    for i in order[:short]:
        units[i] += 1
    return [int(u) / scale for u in units]


def clef_confidence(p: np.ndarray) -> float:
    """Clef reference: the probability of the most likely answer."""
    return float(p.max())


def typesafe_choice_confidence(p: np.ndarray) -> float:
    """TypeSafe (fitted): p_max rescaled so a uniform answer is 0 and a certain one is 1."""
    n = len(p)
    return float((p.max() - 1.0 / n) / (1.0 - 1.0 / n))


def typesafe_score_confidence(p: np.ndarray) -> float:
    """TypeSafe (fitted): 1 − expected distance from the mode over the uniform distribution's, floored at 0."""
    n = len(p)
    levels = np.arange(n)
    mode = int(np.argmax(p))
    spread = float((p * np.abs(levels - mode)).sum())
    uniform_spread = float(np.abs(levels - (n - 1) / 2).sum() / n)
    return max(0.0, 1.0 - spread / uniform_spread)


def confidence_of(question_type: str, p: np.ndarray, formula: str) -> float:
    if formula == "clef":
        return clef_confidence(p)
    if question_type == "score":
        return typesafe_score_confidence(p)
    return typesafe_choice_confidence(p)


def answer_question(question: Question, head_order_probabilities: Sequence[float], *, confidence: str = "clef",
                    decimals: int = 4) -> JSONObject:
    """One System One answer; `head_order_probabilities` follow `question.prompt_options`."""
    values = np.asarray(head_order_probabilities, dtype=np.float64)
    if values.shape != (len(question.options),) or not np.all(np.isfinite(values)) or values.sum() <= 0:
        raise InferenceFailed(f"question {question.id!r}: the model produced invalid probabilities")
    by_id = dict(zip((o.id for o in question.prompt_options), values, strict=True))
    p = np.array([by_id[o.id] for o in question.options])            # request order
    p = p / p.sum()
    rounded = round_distribution(p, decimals)
    if question.type == "noul":
        return {"type": "noul", "noul": rounded[0]}
    best = int(np.argmax(p))                                         # first maximum = first in request order
    # Clef's confidence is p[choice]: report the very number shown in `probabilities`, not a second rounding of it
    conf = rounded[best] if confidence == "clef" else round(confidence_of(question.type, p, confidence), decimals)
    if question.type == "choice":
        return {"type": "choice", "choice": question.options[best].id,
                "probabilities": {o.id: r for o, r in zip(question.options, rounded, strict=True)}, "confidence": conf}
    score = float((np.arange(len(p)) * p).sum())
    return {"type": "score", "score": round(score, decimals),
            "legend": {str(i): o.description for i, o in enumerate(question.options)},
            "probabilities": {str(i): r for i, r in enumerate(rounded)}, "confidence": conf}


def build_answers(questions: Sequence[Question], probabilities: Sequence[Sequence[float]], *,
                  confidence: str = "clef", decimals: int = 4) -> dict[str, JSONObject]:
    """All answers, keyed by question id in request order."""
    answers = {q.id: answer_question(q, p, confidence=confidence, decimals=decimals)
               for q, p in zip(questions, probabilities, strict=True)}
    for answer in answers.values():
        for key in ("noul", "score", "confidence"):
            if key in answer and not math.isfinite(answer[key]):
                raise InferenceFailed("the model produced a non-finite answer")
    return answers


# ------------------------------------------------------------------ an answer read back as a label id
def top_answer(answer: JSONObject) -> str | None:
    """The model's answer to one question as a label id (noul "true"/"false", choice id, score level "k")."""
    if answer.get("type") == "noul" and isinstance(answer.get("noul"), (int, float)):
        return "true" if answer["noul"] >= 0.5 else "false"
    probabilities = answer.get("probabilities")
    if isinstance(probabilities, dict) and probabilities:
        return max(probabilities, key=lambda option: probabilities[option])
    return None


def answer_confidence(answer: JSONObject) -> float:
    """The probability of the model's top answer to one question."""
    if answer.get("type") == "noul" and isinstance(answer.get("noul"), (int, float)):
        return max(answer["noul"], 1.0 - answer["noul"])
    probabilities = answer.get("probabilities")
    return max(probabilities.values()) if isinstance(probabilities, dict) and probabilities else 1.0


def label_id(value: JSONValue) -> str:
    """A dataset label back to its id (true -> "true", 2 -> "2")."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
