"""`omni export statements LOG --map MAP.toml --out FILE.jsonl`: DSA statements of reasons from a decision log;
`omni export checkpoint MODEL --out DIR [--max-shard-size 5GB]`: a checkpoint in the released layout;
`omni export checkpoint MODEL --quantize SCHEME --out DIR`: a pre-quantized checkpoint (omni.model.quantized_export);
`omni export --merge ADAPTER --base DIR --out DIR`: an adapter folder and its base made one whole checkpoint.

statements: reads the log (`omni.serve.decision_log_files.read_records`), the map
(`omni.governance.statements.load_statement_map`) and, with `--review-dir`, the reviewers' labels of kept decisions (a
labelled decision is only partially automated, and its labels prevail); with `--evidence-facts`, adds to each
statement's decision_facts where the model looked (the evidence its record kept); writes one statement per selected
decision to a temporary file renamed over `--out` only when the whole log was read without error, so a failed export
never leaves half a file. A summary and every skipped record and warning go to stderr.

checkpoint: `omni.model.export.export_checkpoint` writes MODEL (a directory, or a hub id downloaded first) as
Cloudflare publishes Clef-omni: sharded `model-*.safetensors` with their index, the head config with the release's
keys, a processor config naming its video processor; into a new directory, whole or not at all. A source that would
not load is refused with what `omni doctor` finds wrong.

--merge: `omni.model.adapter_merge.merge_adapter` checks the adapter's files, refuses a base whose sha256 is not the
one the adapter names (both named), and writes the base with the adapter's head and its LoRA merged into the thinker.

Bad input (no such log, a corrupt or foreign file, a map naming unknown questions or values, a checkpoint that would
not load, an output directory that is not empty) is one line and exit 2 (`api/cli/main.py` prints it).
Knows nothing of HTTP or the model.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from pathlib import Path


def add_export_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--merge", metavar="ADAPTER", default=None,
                        help="an adapter folder (omni finetune's output) to merge with --base into a whole checkpoint")
    parser.add_argument("--base", metavar="DIR", default=None, help="with --merge: the adapter's base checkpoint")
    parser.add_argument("--out", metavar="DIR", dest="merge_out", default=None,
                        help="with --merge: a new (or empty) directory for the merged checkpoint")
    kinds = parser.add_subparsers(dest="export_kind", required=False)
    statements = kinds.add_parser("statements", help="DSA statements of reasons (the Transparency Database's fields) "
                                                     "for the logged decisions a map selects")
    statements.add_argument("log", help="a decision log directory (omni serve --decision-log) or one segment file")
    statements.add_argument("--map", required=True, dest="map_path", metavar="MAP.toml",
                            help="which decisions get a statement, and the fields the service cannot know")
    statements.add_argument("--out", required=True, metavar="FILE.jsonl", help="one statement per line")
    statements.add_argument("--review-dir", default=None,
                            help="a review directory: decisions its reviewers labelled are partially automated, and "
                                 "its appeals (appeals.jsonl) are said in decision_facts")
    statements.add_argument("--evidence-facts", action="store_true",
                            help="add to decision_facts the facts each decision relied on: where the model looked "
                                 "(the evidence its log record kept: asked for, or kept for review)")
    statements.set_defaults(needs_torch=False)   # a decision log's records: no model


    checkpoint = kinds.add_parser("checkpoint", help="a checkpoint in the released layout (sharded weights with "
                                                     "their index): what vLLM's clef_omni and transformers load")
    checkpoint.add_argument("model", help="a checkpoint directory (or a hub id, downloaded first)")
    checkpoint.add_argument("--out", required=True, metavar="DIR", help="a new (or empty) directory")
    checkpoint.add_argument("--max-shard-size", type=byte_size, default="5GB", metavar="SIZE",
                            help="the largest weight file: bytes, or with a unit (KB, MB, GB; KiB, MiB, GiB); "
                                 "default 5GB as released")
    checkpoint.add_argument("--quantize", default=None, metavar="SCHEME", choices=("int8", "fp8", "nf4", "int4"),
                            help="write it pre-quantized (int8, fp8, nf4; int4 on a CUDA GPU), as the library saves "
                                 "it: `--model DIR` then loads it quantized (docs/quantization.md)")
    checkpoint.add_argument("--device", default="auto", help="where to quantize (default: cuda if available)")


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMG]i?B|B)?\s*$", re.IGNORECASE)
_UNITS = {"b": 1, "kb": 1000, "mb": 1000 ** 2, "gb": 1000 ** 3, "kib": 1024, "mib": 1024 ** 2, "gib": 1024 ** 3}


def byte_size(text: str) -> int:
    """'5GB' -> 5_000_000_000, '300KiB' -> 307_200, '4096' -> 4096 (argparse's type: a usage error otherwise)."""
    match = _SIZE.match(text)
    size = int(float(match.group(1)) * _UNITS[(match.group(2) or "B").lower()]) if match else 0
    if size < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a size such as 5GB, 500MB, 300KiB or a byte count")
    return size


def run_export(args: argparse.Namespace) -> int:
    if args.merge is not None:
        return run_export_merge(args)
    if args.export_kind == "checkpoint":
        return run_export_checkpoint(args)
    if args.export_kind == "statements":
        return run_export_statements(args)
    print("omni export: choose what to export: statements, checkpoint, or --merge ADAPTER --base DIR --out DIR",
          file=sys.stderr)
    return 2


def run_export_merge(args: argparse.Namespace) -> int:
    from omni.model.adapter_merge import merge_adapter

    if args.export_kind is not None or not args.base or not args.merge_out:
        print("omni export: --merge ADAPTER needs --base DIR and --out DIR (and no statements/checkpoint)",
              file=sys.stderr)
        return 2
    out = merge_adapter(args.merge, args.base, args.merge_out)
    print(f"omni export: {args.merge} merged with its base {args.base} into {out} (a whole checkpoint: "
          f"`omni decide --model {out}`)", file=sys.stderr)
    return 0


def run_export_checkpoint(args: argparse.Namespace) -> int:
    from omni.model.checkpoint import resolve_checkpoint_dir
    from omni.model.export import export_checkpoint
    from omni.model.shards import INDEX_FILE

    if args.quantize is not None:
        return run_export_quantized(args)
    out = export_checkpoint(resolve_checkpoint_dir(args.model), args.out, args.max_shard_size)
    index = json.loads((out / INDEX_FILE).read_text())
    shards = sorted(set(index["weight_map"].values()))
    print(f"omni export: {len(index['weight_map'])} backbone tensors ({index['metadata']['total_size']:,} bytes) in "
          f"{len(shards)} shard{'s' if len(shards) != 1 else ''} with {INDEX_FILE}, the joint head and its config, "
          f"the processor config in {out}", file=sys.stderr)
    return 0


def run_export_quantized(args: argparse.Namespace) -> int:
    from omni.model.checkpoint import resolve_checkpoint_dir
    from omni.model.quantized_export import export_quantized

    out = export_quantized(resolve_checkpoint_dir(args.model), args.out, args.quantize, args.device)
    size = sum(p.stat().st_size for p in out.glob("*.safetensors") if p.name != "joint_head.safetensors")
    print(f"omni export: {args.model} quantized as {args.quantize} ({size:,} bytes of backbone weights) in {out}: "
          f"`omni decide --model {out}` loads it quantized", file=sys.stderr)
    return 0


def run_export_statements(args: argparse.Namespace) -> int:
    from omni.governance.statements import ExportTally, export_statements, load_statement_map
    from omni.review.appeals import AppealBook
    from omni.review.directory import ReviewDir
    from omni.serve.decision_log_files import read_records

    statement_map = load_statement_map(args.map_path)
    labels = ReviewDir(args.review_dir).labels_by_request_id() if args.review_dir else {}
    appeals = ({a.request_id: a.to_wire() for a in AppealBook(args.review_dir).all()} if args.review_dir else {})
    tally = ExportTally()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    records = (logged.record for logged in read_records(args.log))
    with tempfile.NamedTemporaryFile("w", dir=out.parent, prefix=f".{out.name}.", delete=False,
                                     encoding="utf-8") as handle:
        try:
            for statement in export_statements(records, statement_map, labels, tally, args.evidence_facts, appeals):
                handle.write(json.dumps(statement, ensure_ascii=False) + "\n")
        except BaseException:
            handle.close()
            os.unlink(handle.name)
            raise
    os.replace(handle.name, out)
    for line in (*statement_map.notes, *tally.warnings, *tally.skipped):
        print(f"omni export: {line}", file=sys.stderr)
    if args.evidence_facts and tally.without_evidence:
        print(f"omni export: {tally.without_evidence} statements without facts from evidence: their decisions' "
              "records kept none (not asked for, not routed to review)", file=sys.stderr)
    print(f"omni export: {tally.statements} statements from {tally.records} decisions ({tally.unselected} not "
          f"selected by the map, {len(tally.skipped)} skipped, {tally.appealed} appealed) in {out}", file=sys.stderr)
    return 0
