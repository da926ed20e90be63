"""Runs a model over a labelled dataset → per-question probabilities → metrics → report files and plots.

Scoring goes through the serving pipeline (`ClefModel.prepare`, then `ClefModel.logits`); optional calibration is
applied to the logits before the float32 softmax, as serving does (each question in its request's modality bucket).
Writes `metrics.json`, `report.md`, `predictions.jsonl` and PNGs (reliability diagrams per question and per type,
confusion matrices per question). Knows nothing of argv, HTTP or the environment.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch

from omni.contract.errors import MediaError, OmniError
from omni.contract.json_values import JSONObject, JSONValue
from omni.contract.types import QUESTION_TYPES
from omni.learn import metrics
from omni.learn.dataset import DatasetError, LabelledRequest, label_index
from omni.model.calibration import TEXT_ONLY, Calibration, request_modality
from omni.model.surface import DecisionModel, RecordT

ItemT = TypeVar("ItemT")


@dataclass(frozen=True)
class ScoredQuestion:
    """One labelled question of one record: head-order option ids, raw logits [n], label index, and the record's
    modality set ('text', 'image', 'audio+image' …: its calibration bucket)."""

    line: int
    question_id: str
    question_type: str
    option_ids: tuple[str, ...]
    logits: np.ndarray
    label: int
    modality: str = TEXT_ONLY


def _chunks(items: Sequence[ItemT], size: int) -> Iterator[Sequence[ItemT]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def collect_logits(model: DecisionModel[RecordT], records: Sequence[LabelledRequest], batch_size: int = 4,
                   progress: bool = True, description: str = "scoring", source: str = "dataset",
                   prepare: Callable[[LabelledRequest], RecordT] | None = None) -> list[ScoredQuestion]:
    """Raw head logits of every labelled question. A record that cannot be prepared is a DatasetError line.

    `prepare(record)` → the model's record; default `model.prepare(record.request)` (media decoded each time).
    """
    prepare = prepare or (lambda record: model.prepare(record.request))
    from tqdm.auto import tqdm

    scored: list[ScoredQuestion] = []
    problems: list[tuple[int, str]] = []
    bar = tqdm(total=len(records), desc=description, unit="rec", disable=not progress, leave=False)
    for batch in _chunks(list(records), max(1, batch_size)):
        prepared: list[RecordT] = []
        kept: list[LabelledRequest] = []
        for record in batch:
            try:
                prepared.append(prepare(record))
                kept.append(record)
            except (OmniError, MediaError) as exc:    # bad media, context too long, unknown model …
                problems.append((record.line, f"{type(exc).__name__}: {exc}"))
        if prepared:
            with model.grad_off():
                per_record = model.logits(prepared)
            for record, logits in zip(kept, per_record, strict=True):
                scored.extend(_score_record(record, logits))
        bar.update(len(batch))
    bar.close()
    if problems:
        raise DatasetError(source, problems)
    return scored


def _score_record(record: LabelledRequest, logits: list[torch.Tensor]) -> list[ScoredQuestion]:
    out: list[ScoredQuestion] = []
    modality = request_modality(record.request)
    for question, question_logits in zip(record.request.questions, logits, strict=True):
        if question.id in record.labels:
            out.append(ScoredQuestion(record.line, question.id, question.type,
                                      tuple(o.id for o in question.prompt_options),
                                      question_logits.detach().float().cpu().numpy().astype(np.float64),
                                      label_index(question, record.labels[question.id]), modality))
    return out


def probabilities_of(scored: ScoredQuestion, calibration: Calibration | None = None) -> np.ndarray:
    """Softmax of the (calibrated) logits, head order."""
    logits = scored.logits
    if calibration is not None:
        logits = calibration.apply(scored.question_type, len(logits), logits, scored.modality)
    shifted = np.exp(logits - logits.max())
    return shifted / shifted.sum()


@dataclass
class Group:
    """Rows of one question (or one type): probabilities padded to a common width, labels, option ids."""

    name: str
    question_type: str
    option_ids: list[str]
    probabilities: np.ndarray
    labels: np.ndarray


def question_groups(scored: Sequence[ScoredQuestion], calibration: Calibration | None = None) -> list[Group]:
    """Per question id (first-seen order); a question whose option set varies gets the union of its options."""
    by_id: dict[str, list[ScoredQuestion]] = {}
    for item in scored:
        by_id.setdefault(item.question_id, []).append(item)
    groups: list[Group] = []
    for qid, items in by_id.items():
        option_ids: list[str] = []
        for item in items:
            option_ids.extend(o for o in item.option_ids if o not in option_ids)
        column = {o: i for i, o in enumerate(option_ids)}
        p = np.zeros((len(items), len(option_ids)))
        labels = np.empty(len(items), dtype=np.int64)
        for row, item in enumerate(items):
            p[row, [column[o] for o in item.option_ids]] = probabilities_of(item, calibration)
            labels[row] = column[item.option_ids[item.label]]
        groups.append(Group(qid, items[0].question_type, option_ids, p, labels))
    return groups


def _pooled(name: str, question_type: str, groups: Sequence[Group]) -> Group:
    width = max(g.probabilities.shape[1] for g in groups)
    p = np.vstack([np.pad(g.probabilities, ((0, 0), (0, width - g.probabilities.shape[1]))) for g in groups])
    return Group(name, question_type, [], p, np.concatenate([g.labels for g in groups]))


def compute_metrics(scored: Sequence[ScoredQuestion], calibration: Calibration | None = None,
                    target_precision: float = 0.95,
                    bins: int = metrics.ECE_BINS) -> tuple[JSONObject, list[Group], dict[str, Group]]:
    """metrics.json content + the groups it was computed from (per question, and per type + 'all')."""
    groups = question_groups(scored, calibration)
    questions: dict[str, JSONObject] = {}
    types: dict[str, JSONObject] = {}
    result: JSONObject = {"target_precision": target_precision, "ece_bins": bins, "questions": questions,
                          "types": types}
    for g in groups:
        summary = metrics.summarize(g.probabilities, g.labels, target_precision, bins)
        summary.update(type=g.question_type, options=g.option_ids, confusion_matrix=metrics.confusion_matrix(
            g.labels, metrics.predictions(g.probabilities), len(g.option_ids)).tolist())
        questions[g.name] = summary
    pooled: dict[str, Group] = {}
    for question_type in QUESTION_TYPES:
        members = [g for g in groups if g.question_type == question_type]
        if members:
            pooled[question_type] = _pooled(question_type, question_type, members)
    if groups:
        pooled["all"] = _pooled("all", "all", groups)
    for name, g in pooled.items():
        summary = metrics.summarize(g.probabilities, g.labels, target_precision, bins)
        of_type = [q for q in questions.values() if name == "all" or q["type"] == name]
        summary["macro_f1"] = float(np.mean([q["macro_f1"] for q in of_type]))   # mean of per-question macro-F1
        summary["questions"] = len(of_type)
        types[name] = summary
    return result, groups, pooled


def safe_name(text: str) -> str:
    """`text` as a file-name stem: runs of other characters as "_", at most 80 characters."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)[:80] or "_"


# ---------------------------------------------------------------------------------------------------- report
def _fmt(value: float | None, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and not np.isfinite(value)):
        return "–"
    return f"{value:.{digits}f}"


def _table_rows(entries: dict[str, JSONObject], with_type: bool) -> list[str]:
    head = "| {} | n | accuracy | macro-F1 | NLL | Brier | ECE | threshold | coverage |".format(
        "question | type" if with_type else "type")
    rows = [head, "|" + "---|" * (head.count("|") - 1)]
    for name, m in entries.items():
        threshold = m["precision_threshold"]
        first = f"`{name}` | {m['type']}" if with_type else name
        rows.append(f"| {first} | {m['count']} | {_fmt(m['accuracy'])} | {_fmt(m['macro_f1'])} | {_fmt(m['nll'])} "
                    f"| {_fmt(m['brier'])} | {_fmt(m['ece'])} | {_fmt(threshold['threshold'])} "
                    f"| {_fmt(threshold['coverage'])} |")
    return rows


def render_markdown(result: JSONObject, figures: dict[str, list[str]]) -> str:
    meta = result.get("meta", {})
    lines = ["# Evaluation report", ""]
    lines += [f"- {key}: {value}" for key, value in meta.items()]
    lines += [(f"- threshold / coverage: the lowest top-label confidence whose auto-decided answers reach precision "
              f"{result['target_precision']}, and the share of answers at or above it"), ""]
    lines += ["## Per question", ""] + _table_rows(result["questions"], True)
    lines += ["", "## Per type (macro-F1 = mean of the questions' macro-F1)", ""]
    lines += _table_rows(result["types"], False) + ["", "## Figures", ""]
    for name, files in figures.items():
        lines.append(f"### {name}")
        lines.append(" ".join(f"![{Path(f).stem}]({f})" for f in files))
        lines.append("")
    return "\n".join(lines)


def write_report(result: JSONObject, groups: Sequence[Group], pooled: dict[str, Group],
                 scored: Sequence[ScoredQuestion], out_dir: str | Path, calibration: Calibration | None = None,
                 plots: bool = True) -> Path:
    """metrics.json, report.md, predictions.jsonl and the PNGs into `out_dir` (created)."""
    from omni.learn.plots import confusion_plot, reliability_diagram

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    figures: dict[str, list[str]] = {}
    if plots:
        bins = result["ece_bins"]
        for name, g in pooled.items():
            file = f"reliability_type_{safe_name(name)}.png"
            reliability_diagram(metrics.reliability_bins(g.probabilities, g.labels, bins), f"type: {name}",
                                out / file, result["types"][name]["ece"])
            figures.setdefault(f"type {name}", []).append(file)
        for g in groups:
            stem = safe_name(g.name)
            reliability_diagram(metrics.reliability_bins(g.probabilities, g.labels, bins), f"question: {g.name}",
                                out / f"reliability_{stem}.png", result["questions"][g.name]["ece"])
            confusion_plot(np.asarray(result["questions"][g.name]["confusion_matrix"]), g.option_ids,
                           f"question: {g.name}", out / f"confusion_{stem}.png")
            figures[f"question {g.name}"] = [f"reliability_{stem}.png", f"confusion_{stem}.png"]
    (out / "metrics.json").write_text(json.dumps(_finite(result), indent=2, allow_nan=False) + "\n")
    (out / "report.md").write_text(render_markdown(result, figures) + "\n")
    with (out / "predictions.jsonl").open("w") as handle:
        for item in scored:
            p = probabilities_of(item, calibration)
            probabilities = {o: round(float(v), 6) for o, v in zip(item.option_ids, p, strict=True)}
            handle.write(json.dumps({"line": item.line, "question": item.question_id,
                                     "label": item.option_ids[item.label],
                                     "predicted": item.option_ids[int(np.argmax(p))],
                                     "probabilities": probabilities})
                         + "\n")
    return out


def _finite(value: Any) -> JSONValue:
    """JSON-ready copy: numpy scalars → Python, NaN/inf → null."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if isinstance(value, (np.floating, float)):
        return float(value) if np.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    return value
