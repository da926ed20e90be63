"""The figures of benchmarks/quantization.py, from answers already computed: |Δp| against the unquantized model (all
questions and per type), how often answers and a policy's outcomes agree, accuracy and ECE (omni.learn's own
metrics), and the tables that print them.

Pure numpy over `ScoredQuestion`s (omni.learn.evaluation.collect_logits): knows nothing of loading, quantization,
timing or argv.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from omni.contract.config import EngineConfig
from omni.contract.outcomes import decide_outcome, modalities_of_slots
from omni.contract.policy import Policy
from omni.contract.types import Outcome
from omni.governance.policy_fit import AnsweredQuestion, answered
from omni.learn.dataset import LabelledRequest
from omni.learn.evaluation import ScoredQuestion, compute_metrics, probabilities_of

Key = tuple[int, str]          # (record line, question id)


# ------------------------------------------------------------------------------------------------ |Δp|
def by_key(scored: Sequence[ScoredQuestion]) -> dict[Key, ScoredQuestion]:
    return {(item.line, item.question_id): item for item in scored}


def delta_p(base: Sequence[ScoredQuestion], other: Sequence[ScoredQuestion]) -> dict[str, dict[str, Any]]:
    """Per question type and `all`: max and mean |Δp| over every probability of every question (head order), the
    questions compared, and the share whose most probable answer is the same."""
    theirs = by_key(other)
    if set(theirs) != set(by_key(base)):
        raise ValueError("the two runs answered different questions")
    deltas: dict[str, list[np.ndarray]] = {}
    same: dict[str, list[bool]] = {}
    for item in base:
        p, q = probabilities_of(item), probabilities_of(theirs[(item.line, item.question_id)])
        for group in (item.question_type, "all"):
            deltas.setdefault(group, []).append(np.abs(p - q))
            same.setdefault(group, []).append(int(p.argmax()) == int(q.argmax()))
    out = {}
    for group, parts in deltas.items():
        flat = np.concatenate(parts)
        out[group] = {"questions": len(parts), "max_abs_dp": float(flat.max()), "mean_abs_dp": float(flat.mean()),
                      "answer_agreement": float(np.mean(same[group]))}
    return out


# ------------------------------------------------------------------------------------------------ a policy
def answered_rows(scored: Sequence[ScoredQuestion], records: Sequence[LabelledRequest],
                  config: EngineConfig) -> list[AnsweredQuestion]:
    """Every scored question answered as the server would answer it (api/cli/policy.py's `answer_dataset`, from
    logits already computed)."""
    by_line = {record.line: record for record in records}
    rows = []
    for item in scored:
        request = by_line[item.line].request
        question = next(q for q in request.questions if q.id == item.question_id)
        rows.append(answered(question, probabilities_of(item), item.option_ids[item.label], item.line,
                             modalities_of_slots(m.slot for m in request.media), config))
    return rows


def outcomes(policy: Policy, rows: Sequence[AnsweredQuestion]) -> dict[int, Outcome]:
    """Each record's outcome under `policy`, decided as the server decides (`decide_outcome`)."""
    by_record: dict[int, list[AnsweredQuestion]] = {}
    for row in rows:
        by_record.setdefault(row.line, []).append(row)
    return {line: decide_outcome(policy, {r.question_id: r.answer for r in record}, record[0].modalities)
            for line, record in by_record.items()}


def outcome_agreement(base: Mapping[int, Outcome], other: Mapping[int, Outcome]) -> dict[str, Any]:
    """The share of decisions whose overall outcome agrees, of (decision, question) outcomes that agree (and per
    question), each side's overall counts, the decisions whose overall outcome changed and the question outcomes
    that changed (with both confidences and the bar)."""
    overall = [base[line].overall == other[line].overall for line in base]
    per_question: dict[str, list[bool]] = {}
    moved = []
    for line, outcome in base.items():
        for qid, decided in outcome.questions.items():
            theirs = other[line].questions[qid]
            per_question.setdefault(qid, []).append(decided.outcome == theirs.outcome)
            if decided.outcome != theirs.outcome:
                moved.append({"line": line, "question": qid, "none": decided.outcome, "this": theirs.outcome,
                              "confidence_none": decided.confidence, "confidence_this": theirs.confidence,
                              "auto_at": decided.auto_at})
    pairs = [agrees for values in per_question.values() for agrees in values]
    changed = [{"line": line, "none": base[line].overall, "this": other[line].overall}
               for line in base if base[line].overall != other[line].overall]
    return {"decisions": len(overall), "overall_agreement": float(np.mean(overall)),
            "question_agreement": float(np.mean(pairs)),
            "per_question": {qid: float(np.mean(values)) for qid, values in per_question.items()},
            "overall_counts_none": dict(Counter(o.overall for o in base.values())),
            "overall_counts_this": dict(Counter(o.overall for o in other.values())), "changed": changed,
            "questions_changed": moved}


# ------------------------------------------------------------------------------------------------ quality
def quality(scored: Sequence[ScoredQuestion]) -> dict[str, dict[str, float]]:
    """Accuracy and ECE per question type and `all` (omni.learn.evaluation.compute_metrics, as `omni eval`)."""
    result, _, _ = compute_metrics(scored)
    types = result["types"]
    assert isinstance(types, dict)
    return {name: {"accuracy": float(figures["accuracy"]), "ece": float(figures["ece"])}
            for name, figures in types.items()}


# ------------------------------------------------------------------------------------------------ tables
def _dp(figures: Mapping[str, Any], group: str) -> str:
    if group not in figures:
        return "-"
    return f"{figures[group]['max_abs_dp']:.1e} / {figures[group]['mean_abs_dp']:.1e}"


def faithfulness_table(rows: Mapping[str, Mapping[str, Any]], types: Sequence[str]) -> str:
    """One line per scheme: |Δp| max / mean (all, per type), answers and outcomes agreeing, accuracy and ECE."""
    head = ("| scheme | max / mean abs Δp (all) | " + " | ".join(f"{t} max / mean" for t in types)
            + " | answers agree | overall outcome agree | question outcomes agree | accuracy | ECE |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for name, row in rows.items():
        dp, agree, q = row["delta_p"], row["outcomes"], row["quality"]["all"]
        lines.append(f"| {name} | {_dp(dp, 'all')} | " + " | ".join(_dp(dp, t) for t in types)
                     + (f" | {dp['all']['answer_agreement']:.3f} | {agree['overall_agreement']:.3f} | "
                        f"{agree['question_agreement']:.3f}" if dp else " | - | - | -")
                     + f" | {q['accuracy']:.4f} | {q['ece']:.4f} |")
    return "\n".join(lines)


def cost_table(rows: Mapping[str, Mapping[str, Any]], not_run: Mapping[str, str]) -> str:
    """One line per scheme: backbone and text-layer weight bytes with their ratios to none, load time and p50
    forward with theirs, and the batched-vs-one-record |Δp|; then the schemes not run, with why."""
    head = ("| scheme | backbone bytes | / none | text layers bytes | / none | load s (median) | / none | "
            "p50 forward ms | / none | batched vs one max abs Δp |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for name, row in rows.items():
        w, t = row["weights"], row["timing"]
        lines.append(f"| {name} | {w['backbone_bytes']:,} | {w['backbone_ratio']:.3f} | {w['text_layers_bytes']:,} | "
                     f"{w['text_layers_ratio']:.3f} | {t['load_s_median']:.3f} | {t['load_ratio']:.2f} | "
                     f"{t['p50_forward_ms']:.2f} | {t['p50_ratio']:.2f} | {row['batched_vs_one_max_abs_dp']:.2e} |")
    lines += [f"| {name} | not run: {why} |" + " |" * 8 for name, why in not_run.items()]
    return "\n".join(lines)
