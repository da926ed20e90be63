"""`omni policy fit` (thresholds from labelled data) and `omni policy check` (read a policy, show its rules, and with
`--on DATA` how it decides on the model's answers to labelled data).

An edge like `api/cli/learn.py`, whose dataset and model helpers it reuses: parses flags, reads the old policy and
the dataset (a JSONL file or a review directory's labels.jsonl) before any model work, runs the model once over the
records (`omni.learn.evaluation.collect_logits`), turns each labelled question into the answer the server would give
(`omni.governance.policy_fit.answered`), and hands the fitting to `omni.governance.policy_fit` and the files to
`omni.governance.policy_report`. Knows nothing of model internals or HTTP.
"""
from __future__ import annotations

import argparse
import datetime
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from api.cli.decide import quiet_model_loading
from api.cli.learn import add_model_flags, dataset_file, labelled_records, learn_config, load_model, say

if TYPE_CHECKING:
    from omni.contract.config import EngineConfig
    from omni.governance.policy_fit import AnsweredQuestion
    from omni.learn.dataset import LabelledRequest
    from omni.model.calibration import Calibration
    from omni.model.surface import DecisionModel


def _fraction(text: str) -> float:
    """A flag's value strictly between 0 and 1 (argparse names the flag in its error)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"{text} must be between 0 and 1 (exclusive)")
    return value


def _add_model_flags(parser: argparse.ArgumentParser) -> None:
    add_model_flags(parser, "checkpoint directory or hub id (default: the embedded demo model)")
    parser.add_argument("--calibration", action="store_true",
                        help="apply the checkpoint's calibration.json, as a server run with calibration on does")


def add_policy_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="policy_command", required=True)
    fit = sub.add_parser("fit", help="choose each question's auto_at from labelled data at a target precision")
    fit.add_argument("data", help="labelled dataset (JSONL, the `omni eval` format) or a review directory")
    fit.add_argument("--target-precision", type=_fraction, required=True,
                     help="precision the automatic answers must reach, by the lower confidence bound (e.g. 0.99)")
    fit.add_argument("--confidence-level", type=_fraction, default=0.95,
                     help="one-sided confidence of the Clopper–Pearson lower bound (default 0.95)")
    fit.add_argument("--per-modality", action="store_true",
                     help="also fit a bar per medium (auto_at_with), written where stricter and supported")
    fit.add_argument("--from", dest="old", metavar="OLD.toml",
                     help="keep this policy's version, act_on, auto_at_for, type and options; replace auto_at")
    fit.add_argument("--version", help="the new policy's version (default: OLD's, else fitted-YYYY-MM-DD)")
    fit.add_argument("--out", required=True, metavar="POLICY.toml", help="where to write the policy")
    fit.add_argument("--report", metavar="DIR", help="also write report.md, report.json and curve PNGs there")
    _add_model_flags(fit)
    check = sub.add_parser("check", help="read a policy: its version, sha256 and rules (exit 2 when it is bad)")
    check.add_argument("file", help="the policy TOML")
    check.add_argument("--on", metavar="DATA", help="also decide the model's answers to this labelled dataset (or "
                       "review directory) with the policy: coverage and precision per question")
    _add_model_flags(check)
    check.set_defaults(needs_torch=lambda args: args.on is not None)    # reading a policy needs no model; --on does


def run_policy(args: argparse.Namespace) -> int:
    return run_fit(args) if args.policy_command == "fit" else run_check(args)


def answer_dataset(model: DecisionModel[Any], records: Sequence[LabelledRequest], config: EngineConfig,
                   calibration: Calibration | None = None, batch_size: int = 4, progress: bool = True,
                   source: str = "dataset") -> list[AnsweredQuestion]:
    """Every labelled question of `records`, answered by `model` as the server would answer it."""
    from omni.contract.outcomes import modalities_of_slots
    from omni.governance.policy_fit import answered
    from omni.learn.evaluation import collect_logits, probabilities_of

    by_line = {record.line: record for record in records}
    rows = []
    for scored in collect_logits(model, records, batch_size, progress, "answering", source):
        request = by_line[scored.line].request
        question = next(q for q in request.questions if q.id == scored.question_id)
        rows.append(answered(question, probabilities_of(scored, calibration), scored.option_ids[scored.label],
                             scored.line, modalities_of_slots(item.slot for item in request.media), config))
    return rows


def _answers(args: argparse.Namespace, data: str) -> tuple[list[AnsweredQuestion], str, int]:
    """(the answered questions of DATA, what answered them — the model's sha256, and the adapter's with --adapter —,
    records); the dataset is read before the model loads."""
    from omni.model.calibration import CalibrationError, load_calibration

    records = labelled_records(args, data)
    quiet_model_loading(args.quiet)
    model = load_model(args)
    calibration = load_calibration(model.answering_directory) if args.calibration else None
    if args.calibration and calibration is None:
        raise CalibrationError(f"--calibration: {model.answering_directory} has no calibration.json")
    rows = answer_dataset(model, records, learn_config(args), calibration, args.batch_size, not args.quiet,
                          str(dataset_file(data)))
    adapter = model.default_selection.adapter
    return rows, model.sha256 + (f", adapter sha256 {adapter.sha256}" if adapter is not None else ""), len(records)


def run_fit(args: argparse.Namespace) -> int:
    from omni.contract.policy import parse_policy, read_policy
    from omni.governance.policy_fit import apply_policy, fit_policy
    from omni.governance.policy_report import format_table, policy_toml, write_report

    old = read_policy(args.old) if args.old else None
    today = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    rows, model_sha256, records = _answers(args, args.data)
    fit = fit_policy(rows, args.target_precision, args.confidence_level, per_modality=args.per_modality, old=old,
                     version=args.version or (None if old else f"fitted-{today}"))
    data = str(dataset_file(args.data))
    header = [f"Fitted by `omni policy fit` on {today} from {data} ({records} records, {len(rows)} labelled answers)",
              f"model sha256 {model_sha256}" + (", calibration on" if args.calibration else ""),
              f"target precision {fit.target} by a one-sided {fit.level:.0%} Clopper-Pearson lower bound"
              + (", a bar per medium" if args.per_modality else "") + (f"; rules kept from {args.old}" if old else "")]
    if not all(question.supported for question in fit.questions.values()):
        header.append("auto_at = 1.0: no bar this data can support (everything to review); see the fit's report")
    text = policy_toml(fit, header)
    policy = parse_policy(text.encode(), args.out)           # what is written must read back (else: a bug, loudly)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    temporary = out.with_name(f".{out.name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, out)
    applied = apply_policy(policy, rows)
    print(format_table(fit))
    for qid, question in fit.questions.items():
        print(f"{qid}: {question.verdict()}")
    for note in fit.notes:
        print(f"note: {note}")
    if args.report:
        meta = {"data": data, "records": records, "labelled answers": len(rows), "model sha256": model_sha256,
                "calibration": "on" if args.calibration else "off", "policy": str(out), "policy sha256": policy.sha256,
                "version": policy.version, "fitted": today}
        write_report(fit, applied, args.report, meta)
        say(f"omni: wrote {Path(args.report) / 'report.md'}, report.json and curves")
    unsupported = [qid for qid, question in fit.questions.items() if not question.supported]
    if unsupported:
        say(f"omni: {', '.join(unsupported)}: precision {fit.target} cannot be supported by this data: auto_at = "
             "1.0 (everything to review)")
    say(f"omni: wrote {out} (version {policy.version}, sha256 {policy.sha256})")
    return 0


def run_check(args: argparse.Namespace) -> int:
    from omni.contract.policy import read_policy
    from omni.governance.policy_fit import apply_policy
    from omni.governance.policy_report import format_applied, toml_value

    policy = read_policy(args.file)
    print(f"version  {policy.version}\nsha256   {policy.sha256}\nfile     {args.file}")
    print(f"{'question':<24} {'type':<7} {'auto_at':>8}  {'act_on':<18} {'auto_at_for':<20} {'auto_at_with':<20} "
          "options")
    rules = list(policy.questions.items()) + ([("[default]", policy.default)] if policy.default else [])
    for qid, rule in rules:
        print(f"{qid[:24]:<24} {rule.type or '-':<7} {rule.auto_at:>8.4f}  {toml_value(rule.act_on):<18} "
              f"{toml_value(rule.auto_at_for) if rule.auto_at_for else '-':<20} "
              f"{toml_value(rule.auto_at_with) if rule.auto_at_with else '-':<20} "
              f"{', '.join(rule.options) if rule.options else '-'}")
    if args.on:
        rows, _, records = _answers(args, args.on)
        print(f"\non {dataset_file(args.on)} ({records} records): automatic = not sent to review")
        print(format_applied(apply_policy(policy, rows)))
    return 0
