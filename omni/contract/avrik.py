"""avrik's `audit` object: what the open peer avrik-server returns with every decision and its published client
(`avrik-sdk`, `avrik_sdk.models.Audit`) requires, filled from our audit record.

    model_hash               the checkpoint's sha256 (`AuditRecord.model.sha256`)
    adapter_hash             None (no adapters are served; a fine-tune is a checkpoint of its own)
    calibration_version      the calibration file's sha256, or "none"
    prompt_template_sha256   per question, in question order: the prompt template's sha256
    allowed_token_set_hash   per question: sha256 of its allowed answers (the option ids in prompt order, JSON)
    input_tokens             per question: the tokens of the prompt it was answered in (one joint prompt: all equal)
    backend, precision       "omni-decide <version> torch <version> <device>", the backbone's dtype
Knows nothing of HTTP (the edge decides who gets it) or of how the record was made.
"""
from __future__ import annotations

import hashlib
import json

from omni.contract.audit import AuditRecord
from omni.contract.json_values import JSONObject
from omni.contract.types import DecisionRequest, Question

AVRIK_CLIENT_AGENT = "avrik-sdk/"      # the User-Agent prefix of avrik's published client


def allowed_set_sha256(question: Question) -> str:
    """sha256 of a question's allowed answers: its option ids in prompt (head) order, as a JSON list."""
    ids = [option.id for option in question.prompt_options]
    return hashlib.sha256(json.dumps(ids, ensure_ascii=False).encode()).hexdigest()


def avrik_audit(record: AuditRecord, request: DecisionRequest) -> JSONObject:
    """avrik's `audit` object for a decision (list fields in the request's question order)."""
    questions = request.questions
    runtime = record.runtime
    return {"model_hash": record.model.sha256, "adapter_hash": None,
            "calibration_version": record.calibration.sha256 if record.calibration is not None else "none",
            "prompt_template_sha256": [record.prompt.template_sha256] * len(questions),
            "allowed_token_set_hash": [allowed_set_sha256(q) for q in questions],
            "input_tokens": [record.prompt.input_tokens] * len(questions),
            "backend": f"omni-decide {runtime.omni_decide} torch {runtime.torch} {runtime.device}",
            "precision": runtime.backbone_dtype}
