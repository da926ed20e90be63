"""Our side of scripts/vllm-check.sh, run with this project's venv.

`reference.py tiny DIR`: a tiny random checkpoint (`omni.model.tiny`) whose text heads are 32 wide, the narrowest
vLLM's CPU attention runs (the default tiny's 16 loads but cannot be scored: "Unsupported CPU attention
configuration: head_dim=16"); M-RoPE sections [8, 4, 4] to match.
`reference.py score DIR OUT.json`: answers a few requests with this project's model from DIR and writes, per
request, the prompt's token ids, the schema vLLM's clef_omni pooler takes (question types, spans counted from the end
of the prompt, option counts), our logits and our probabilities.
"""
from __future__ import annotations

import json
import sys

from omni.contract.config import EngineConfig
from omni.contract.request import parse_request
from omni.model.clef import ClefModel
from omni.model.tiny import TINY_TEXT, write_checkpoint

VLLM_TEXT = {"head_dim": 32, "rope_parameters": {**TINY_TEXT["rope_parameters"], "mrope_section": [8, 4, 4]}}

REQUESTS = [
    {"state": "The unit hums quietly; the label with the serial number is visible.",
     "questions": {"label": {"type": "noul", "instructions": "Is the serial number label visible?"},
                   "sound": {"type": "noul", "instructions": "Does the unit sound like it is running smoothly?"}}},
    {"state": "Our checkout returns errors and orders are stuck.",
     "questions": {"team": {"type": "choice", "instructions": "Which team should handle this?",
                            "criteria": {"billing": "Payments and invoices", "technical": "Bugs and outages",
                                         "sales": None}},
                   "urgency": {"type": "score", "instructions": "How urgent is this?",
                               "criteria": ["can wait", "this week", "today", "right now"]}}},
]


def schema(spans, length: int) -> dict[str, list]:
    """RecordSpans -> vLLM's `joint_schema` (spans from the end of the prompt, options question by question)."""
    return {"question_types": list(spans.question_types),
            "question_spans": [[start - length, end - length] for start, end in spans.question_spans],
            "option_spans": [[start - length, end - length] for per_question in spans.option_spans
                             for start, end in per_question],
            "option_counts": [len(per_question) for per_question in spans.option_spans]}


def flat(per_question) -> list[float]:
    return [float(value) for values in per_question for value in values.detach()]


def score(directory: str, out: str) -> int:
    model = ClefModel.load(directory, dtype="float32", device="cpu")
    config = EngineConfig(model_path=directory)
    records = [model.prepare(parse_request(body, config)) for body in REQUESTS]
    cases = []
    for record, logits, probabilities in zip(records, model.logits(records), model.probabilities(records),
                                             strict=True):
        ids = record.input_ids.tolist()
        cases.append({"prompt_token_ids": ids, "joint_schema": schema(record.prompt.spans, len(ids)),
                      "questions": [q.id for q in record.request.questions], "logits": flat(logits),
                      "probabilities": flat(probabilities)})
    with open(out, "w", encoding="utf-8") as handle:
        json.dump({"checkpoint": directory, "cases": cases}, handle, indent=1)
    print(f"reference: {len(cases)} requests, {sum(len(c['probabilities']) for c in cases)} option probabilities "
          f"from omni-decide's own model")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["tiny"] and len(argv) == 2:
        write_checkpoint(argv[1], seed=0, text=VLLM_TEXT)
        print(f"reference: a tiny checkpoint with head_dim {VLLM_TEXT['head_dim']} in {argv[1]}")
        return 0
    if argv[:1] == ["score"] and len(argv) == 3:
        return score(argv[1], argv[2])
    print("usage: reference.py tiny DIR | reference.py score DIR OUT.json", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
