"""`omni replay LOG|RECORD`: logged decisions re-run from their stored request and media, their probabilities
(and the evidence they kept, its weights within 1e-6) compared with the ones they were decided with
(`omni.serve.replay`).

LOG is a decision-log directory (`omni serve --decision-log DIR`); RECORD one of its segment files, or one line of
one, `SEGMENT.jsonl:LINE`; `--request-id` keeps the records of one request. The whole selection is read and checked
before a model is loaded, so a corrupt or foreign file costs no model load. The model defaults to the one the
first selected record names (its `audit.model.source`, when it is still there), its dtypes to the record's, and
calibration to on when that record was calibrated. Output: a table per record and a summary line on stdout (or one
JSON object with `--json`), progress on stderr. Exit status: 0 every record reproduced within `--tolerance`; 1
some record differs beyond it, drifted, was refused or could not be replayed; 2 bad input (no such path, a corrupt
or foreign file, no record selected, a model that cannot be loaded).
Knows nothing of model internals or HTTP; reads no environment.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from omni.contract.config import EngineConfig
    from omni.contract.json_values import JSONObject
    from omni.serve.decision_log_files import LoggedDecision
    from omni.serve.replay import RecordReplay, ReplaySummary

EMBEDDED_SOURCE = "embedded demo checkpoint"      # what an audit record names as the source of the tiny default
ONE_RECORD = re.compile(r"(?P<file>.+\.jsonl):(?P<line>\d+)")
RECORD_DTYPES = ("float32", "bfloat16", "float16")


def add_replay_arguments(parser: argparse.ArgumentParser) -> None:
    from api.cli.decide import add_torch_threads_flag
    from omni.serve.replay import DEFAULT_TOLERANCE

    parser.add_argument("log", metavar="LOG|RECORD",
                        help="a decision-log directory, one of its segment files, or one record: SEGMENT.jsonl:LINE")
    parser.add_argument("--request-id", help="replay only the records of this request id")
    parser.add_argument("--model", help="checkpoint directory or hub id (default: the one the first record names)")
    parser.add_argument("--calibration", action=argparse.BooleanOptionalAction, default=None,
                        help="apply the checkpoint's calibration.json, or not (default: as the first record was)")
    parser.add_argument("--force", action="store_true",
                        help="replay records whose model or calibration sha256 differs from what is loaded, and "
                             "report the drift (refused otherwise)")
    parser.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE,
                        help=f"largest probability difference that counts as reproduced (default {DEFAULT_TOLERANCE:g})")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout instead of the table")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1 … (default: cuda if available)")
    parser.add_argument("--dtype", default=None, choices=["auto", "float32", "bfloat16", "float16"],
                        help="backbone dtype (default: the first record's)")
    add_torch_threads_flag(parser)
    parser.add_argument("--batch-size", type=int, default=8,
                        help="records per forward pass (default 8; 1 runs each alone)")


def run_replay(args: argparse.Namespace) -> int:
    from omni.serve.decision_log_files import DecisionLogReadError

    if args.batch_size < 1 or not args.tolerance >= 0:
        return _bad("--batch-size must be at least 1 and --tolerance at least 0")
    try:
        selected, first = _select(args)
    except DecisionLogReadError as exc:
        return _bad(str(exc))
    if first is None:
        return _bad(f"{args.log}: no record with request id {args.request_id!r}" if args.request_id else
                    f"{args.log}: no decision-log records")
    config = engine_config(args, first)
    summary = _replay(args, config, selected)
    print(json.dumps(summary.to_wire(), indent=2) if args.json else format_table(summary))
    return 0 if summary.reproduced else 1


def _bad(message: str) -> int:
    print(f"omni replay: {message}", file=sys.stderr)
    return 2


def _target(spec: str) -> tuple[Path, int | None]:
    """(path, line or None) for LOG, SEGMENT or SEGMENT.jsonl:LINE."""
    path = Path(spec)
    match = ONE_RECORD.fullmatch(spec)
    if not path.exists() and match and Path(match["file"]).is_file():
        return Path(match["file"]), int(match["line"])
    return path, None


def _records(args: argparse.Namespace) -> Iterator[LoggedDecision]:
    """The selected records, read again from the files (a record that vanished since the check is an error)."""
    from omni.serve.decision_log_files import DecisionLogReadError, read_records

    path, line = _target(args.log)
    found = False
    for decision in read_records(path):
        if line is not None and decision.line != line:
            continue
        if args.request_id is not None and decision.record.get("request_id") != args.request_id:
            continue
        found = True
        yield decision
    if line is not None and not found:
        raise DecisionLogReadError(path, line, "no record on this line")


def _select(args: argparse.Namespace) -> tuple[set[tuple[str, int]], JSONObject | None]:
    """Every selected record read once (DecisionLogReadError on the first bad line): their (segment, line), which
    keeps later additions out of the replay, and the first one's audit record (for the defaults)."""
    selected, first = set(), None
    for decision in _records(args):
        selected.add((str(decision.segment), decision.line))
        if first is None:
            first = decision.audit if isinstance(decision.audit, dict) else {}
    return selected, first


def engine_config(args: argparse.Namespace, first: JSONObject) -> EngineConfig:
    """The flags over what the first record was decided with (model, dtypes, calibration)."""
    from omni.contract.config import QUANTIZE_CHOICES, EngineConfig

    model, runtime = _object(first.get("model")), _object(first.get("runtime"))
    source = model.get("source")
    model_path = args.model
    if model_path is None and isinstance(source, str) and source != EMBEDDED_SOURCE:
        model_path = source         # a directory that is gone fails to load: a clear error asking for one
    backbone_dtype, head_dtype = runtime.get("backbone_dtype"), runtime.get("head_dtype")
    calibration = args.calibration if args.calibration is not None else first.get("calibration") is not None
    overrides: dict[str, Any] = {
        "model_path": model_path, "device": args.device, "torch_threads": args.torch_threads,
        "dtype": args.dtype or (backbone_dtype if backbone_dtype in RECORD_DTYPES else None),
        "head_dtype": head_dtype if head_dtype in RECORD_DTYPES else None, "calibration": calibration,
        "quantize": runtime.get("quantization") if runtime.get("quantization") in QUANTIZE_CHOICES else None,
        "audit": "record", "max_batch_records": args.batch_size}
    return replace(EngineConfig(), **{key: value for key, value in overrides.items() if value is not None})


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _replay(args: argparse.Namespace, config: EngineConfig, selected: set[tuple[str, int]]) -> ReplaySummary:
    from tqdm import tqdm

    from api.cli.decide import quiet_model_loading
    from omni.contract.request_line import parse_request_line
    from omni.serve.engine import DecisionEngine
    from omni.serve.replay import ReplaySummary, loaded, replay

    quiet_model_loading(args.quiet)
    engine = DecisionEngine(config)
    here = loaded(engine)

    def parse(body: JSONObject, root: Path) -> Any:
        return parse_request_line(json.dumps(body).encode(), root, engine.config)

    chosen = (d for d in _records(args) if (str(d.segment), d.line) in selected)
    records: list[RecordReplay] = []
    bar = tqdm(total=len(selected), unit="record", desc="omni replay", dynamic_ncols=True, disable=args.quiet,
               file=sys.stderr)
    try:
        for outcome in replay(engine, chosen, parse, tolerance=args.tolerance, force=args.force,
                              batch_records=args.batch_size, here=here):
            records.append(outcome)
            bar.update(1)
    finally:
        bar.close()
    return ReplaySummary(here, args.tolerance, records)


def format_table(summary: ReplaySummary) -> str:
    """One row per record (where, request id, status, largest |Δp|, what drifted or why not replayed), then totals."""
    from omni.serve.replay import EVIDENCE_TOLERANCE

    places = [f"{Path(record.segment).name}:{record.line}" for record in summary.records]
    width = max([len("record"), *map(len, places)])
    rows = [f"{'record':<{width}}  {'request id':<24} {'status':<12} {'max |dp|':>10}  note"]
    for where, record in zip(places, summary.records, strict=True):
        diff = "-" if record.max_abs_diff is None else f"{record.max_abs_diff:.3g}"
        rows.append(f"{where:<{width}}  {(record.request_id or '-')[:24]:<24} {record.status:<12} {diff:>10}  "
                    f"{_note(record)}".rstrip())
    counts = ", ".join(f"{n} {status}" for status, n in summary.counts.items() if n)
    overall = "-" if summary.max_abs_diff is None else f"{summary.max_abs_diff:.3g}"
    calibration = summary.loaded.calibration_sha256 or "none"
    weights = [r.evidence_max_abs_diff for r in summary.records if r.evidence_max_abs_diff is not None]
    evidence = f"; evidence max |dw| {max(weights):.3g} (tolerance {EVIDENCE_TOLERANCE:g})" if weights else ""
    rows.append(f"{len(summary.records)} records: {counts or 'none'}; max |dp| {overall} (tolerance "
                f"{summary.tolerance:g}){evidence}; model sha256 {summary.loaded.model_sha256}, "
                f"calibration {calibration}")
    return "\n".join(rows)


def _note(record: RecordReplay) -> str:
    if record.reason:
        return record.reason
    notes = []
    if record.evidence_differences:
        more = len(record.evidence_differences) - 1
        notes.append(f"evidence differs: {record.evidence_differences[0]}" + (f" (+{more} more)" if more else ""))
    for what, change in record.drift.items():
        if what == "media":
            notes.append(f"media used differently: {', '.join(change)}")
        elif what == "questions":
            notes.append(f"questions {', '.join(change['logged'])} -> {', '.join(change['replayed'])}")
        else:       # model, calibration, prompt: the two sha256
            notes.append(f"{what} {change['logged'] or 'none'} -> {change['replayed'] or 'none'}")
    return "; ".join(notes)
