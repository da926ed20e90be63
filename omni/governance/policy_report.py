"""A fitted policy as files: the policy TOML (a small writer whose output `read_policy` reads back to the same rules),
the table printed per question, report.md / report.json, and a coverage–precision PNG per question.

Knows nothing of torch, the model, argv or HTTP, nor of how the thresholds were chosen (`omni.governance.policy_fit`).
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path

from omni.contract.json_values import JSONObject
from omni.contract.policy import QuestionPolicy
from omni.governance.policy_fit import AppliedFigures, PolicyFit, QuestionFit
from omni.learn.plots import use_agg

BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def file_stem(text: str) -> str:
    """`text` as a file-name stem (as omni eval names its figures; evaluation.py is not imported: it brings torch)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)[:80] or "_"


# ------------------------------------------------------------------------------------------------ TOML
def toml_string(text: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's; DEL, which JSON leaves, is escaped too)."""
    return json.dumps(text).replace("\x7f", "\\u007f")


def toml_key(key: str) -> str:
    return key if BARE_KEY.match(key) else toml_string(key)


def toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} has no place in a policy")
        return repr(value)                   # the shortest text that reads back to the same float
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{toml_key(str(k))} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot write {type(value).__name__} to a policy")


def _rule_lines(rule: QuestionPolicy, with_act_on: bool = True) -> list[str]:
    lines = []
    if rule.type is not None:
        lines.append(f"type = {toml_value(rule.type)}")
        if rule.options is not None and rule.type != "noul":       # a noul question's answers go without saying
            count = len(rule.options)
            lines.append(f"options = {count}" if rule.type == "score" else f"options = {toml_value(rule.options)}")
    lines.append(f"auto_at = {toml_value(rule.auto_at)}")
    if with_act_on:
        lines.append(f"act_on = {toml_value(rule.act_on)}")
    if rule.auto_at_for:
        lines.append(f"auto_at_for = {toml_value(rule.auto_at_for)}")
    if rule.auto_at_with:
        lines.append(f"auto_at_with = {toml_value(rule.auto_at_with)}")
    return lines


def policy_toml(fit: PolicyFit, header: Sequence[str] = ()) -> str:
    """The policy file: `# header` lines, the version, the kept [default], one table per question."""
    lines = [f"# {' '.join(line.split())}".rstrip() for line in header]
    lines += [f"version = {toml_string(fit.version)}", ""]
    if fit.default is not None:
        lines += ["[default]", *_rule_lines(fit.default, with_act_on=False), ""]
    for qid, rule in fit.rules.items():
        lines += [f"[questions.{toml_key(qid)}]", *_rule_lines(rule), ""]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ tables
def _f(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _row(fit: QuestionFit) -> tuple[int, int, float, float | None, float | None]:
    point = fit.chosen
    if point is None:
        return fit.labelled, 0, 0.0, None, None
    return fit.labelled, point.automatic, point.coverage, point.precision, point.lower_bound


def format_table(fit: PolicyFit) -> str:
    """Per question: n, automatic, coverage, precision, lower bound, auto_at (plain text)."""
    lines = [f"{'question':<24} {'type':<7} {'n':>6} {'auto':>6} {'cover':>6} {'prec':>7} {'lower':>7} {'auto_at':>8}"]
    for qid, q in fit.questions.items():
        n, automatic, coverage, precision, bound = _row(q)
        lines.append(f"{qid[:24]:<24} {q.question_type:<7} {n:>6} {automatic:>6} {coverage:>6.3f} {_f(precision):>7} "
                     f"{_f(bound):>7} {q.auto_at:>8.4f}")
        lines += [f"  with {medium}: auto_at {bar:.4f}" for medium, bar in q.auto_at_with.items()]
    return "\n".join(lines)


def format_applied(applied: Mapping[str, AppliedFigures]) -> str:
    """Per question: labelled answers, automatic, acted on, coverage and precision of the automatic ones."""
    lines = [f"{'question':<24} {'n':>6} {'auto':>6} {'act':>6} {'cover':>6} {'prec':>7}"]
    for qid, a in applied.items():
        lines.append(f"{qid[:24]:<24} {a.labelled:>6} {a.automatic:>6} {a.acted:>6} {a.coverage:>6.3f} "
                     f"{_f(a.precision):>7}")
    return "\n".join(lines)


def report_json(fit: PolicyFit, applied: Mapping[str, AppliedFigures], meta: JSONObject) -> JSONObject:
    def question(q: QuestionFit) -> JSONObject:
        return {"type": q.question_type, "labelled": q.labelled, "auto_at": q.auto_at, "supported": q.supported,
                "verdict": q.verdict(), "needed": q.needed,
                "chosen": None if q.chosen is None else asdict(q.chosen), "best": None if q.best is None else asdict(q.best),
                "auto_at_with": dict(q.auto_at_with), "by_medium": {m: question(f) for m, f in q.by_medium.items()},
                "curve": [asdict(p) for p in q.curve]}

    return {"meta": meta, "version": fit.version, "target_precision": fit.target, "confidence_level": fit.level,
            "questions": {qid: question(q) for qid, q in fit.questions.items()},
            "applied": {qid: {"labelled": a.labelled, "automatic": a.automatic, "acted": a.acted,
                              "coverage": a.coverage, "precision": a.precision} for qid, a in applied.items()},
            "notes": list(fit.notes)}


def render_markdown(fit: PolicyFit, applied: Mapping[str, AppliedFigures], meta: JSONObject,
                    figures: Mapping[str, str]) -> str:
    lines = ["# Policy fit", ""] + [f"- {key}: {value}" for key, value in meta.items()] + [""]
    lines += [(f"Per question, the lowest `auto_at` whose automatic answers reach precision {fit.target} with a "
              f"one-sided {fit.level:.0%} Clopper–Pearson lower bound; 1.0 (everything to review) when none does."), "",
              "| question | type | n | automatic | coverage | precision | lower bound | auto_at |",
              "|---|---|---|---|---|---|---|---|"]
    for qid, q in fit.questions.items():
        n, automatic, coverage, precision, bound = _row(q)
        lines.append(f"| `{qid}` | {q.question_type} | {n} | {automatic} | {coverage:.3f} | {_f(precision)} "
                     f"| {_f(bound)} | {q.auto_at:.4f} |")
    lines += ["", "## Verdicts", ""] + [f"- `{qid}`: {q.verdict()}" for qid, q in fit.questions.items()]
    for qid, q in fit.questions.items():
        lines += [f"- `{qid}` with {m}: {f.verdict()}" + (" (written)" if m in q.auto_at_with else " (not written)")
                  for m, f in q.by_medium.items()]
    lines += ["", "## The written policy on the same data (as the server decides)", "",
              "| question | n | automatic | acted | coverage | precision |", "|---|---|---|---|---|---|"]
    lines += [f"| `{qid}` | {a.labelled} | {a.automatic} | {a.acted} | {a.coverage:.3f} | {_f(a.precision)} |"
              for qid, a in applied.items()]
    if fit.notes:
        lines += ["", "## Notes", ""] + [f"- {note}" for note in fit.notes]
    lines += ["", "## Coverage–precision curves", ""]
    lines += [f"![{qid}]({file})" for qid, file in figures.items()]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------ figures
def coverage_precision_plot(q: QuestionFit, path: Path) -> Path:
    """Precision and its lower bound against coverage over the candidate bars; the target and the chosen bar."""
    use_agg()
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(4.6, 3.6))
    points = sorted(q.curve, key=lambda p: p.coverage)
    coverage = [p.coverage for p in points]
    axes.step(coverage, [p.precision for p in points], where="post", color="#4477aa", label="precision")
    axes.step(coverage, [p.lower_bound for p in points], where="post", color="#4477aa", linestyle="--",
              linewidth=1, label=f"lower bound ({q.level:.0%})")
    for medium, medium_fit in q.by_medium.items():
        medium_points = sorted(medium_fit.curve, key=lambda p: p.coverage)
        axes.step([p.coverage * medium_fit.labelled / max(q.labelled, 1) for p in medium_points],
                  [p.precision for p in medium_points], where="post", linewidth=0.8, alpha=0.7,
                  label=f"precision with {medium}")
    axes.axhline(q.target, color="#cc3311", linestyle=":", linewidth=1, label=f"target {q.target}")
    marked = q.chosen or q.best
    if marked is not None:
        text = f"auto_at {marked.auto_at:.4f}" if q.chosen else "best (unsupported)"
        axes.scatter([marked.coverage], [marked.lower_bound], color="#cc3311", s=28, zorder=3, label=text)
    lowest = min([q.target] + [p.precision for p in points])          # the bound may fall below: it is clipped
    axes.set_xlim(0, 1.02)
    axes.set_ylim(max(0.0, lowest - 0.05), 1.005)
    axes.set_xlabel("coverage (share of answers automatic)")
    axes.set_ylabel("precision of the automatic answers")
    axes.set_title(f"question: {q.question_id} (auto_at {q.auto_at:.4f})", fontsize=9)
    axes.legend(fontsize=7, loc="lower left")
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)
    return path


def write_report(fit: PolicyFit, applied: Mapping[str, AppliedFigures], out_dir: str | Path,
                 meta: JSONObject, plots: bool = True) -> Path:
    """report.json, report.md and curve_<question>.png into `out_dir` (created)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    figures: dict[str, str] = {}
    if plots:
        for qid, q in fit.questions.items():
            figures[qid] = coverage_precision_plot(q, out / f"curve_{file_stem(qid)}.png").name
    (out / "report.json").write_text(json.dumps(report_json(fit, applied, meta), indent=2) + "\n")
    (out / "report.md").write_text(render_markdown(fit, applied, meta, figures))
    return out
