"""occlusion: does the evidence matter? (issue 34 item 3) `omni explain --occlude` over every record of the demo
inspection TEST set (fixtures/inspection.py, seed 1: the test set benchmarks/quantization.py uses) with the embedded
demo checkpoint (tiny-inspection-v1), on this CPU.

Each record is decided once with `x_evidence` (`DecisionEngine.decide`, in-process as `omni explain`); then, for each
question and each medium with evidence (the state, the photo, the recording, the video), the top region of the chosen
answer's evidence is masked (grey box, silent 80 ms window, the video's second cut out with its sound, blanked
state span) and the record decided again, then a random region of the same size (seeded by `--seed`, the record and
the place): `omni.learn.occlusion.occlusion_rows`, the same code as the command. Per medium and per medium × question:
mean |Δp| of the chosen answer (top vs random), the paired difference with a bootstrap 95 % interval, how often the
top mask moved it more (sign test over the rows not tied), answers flipped. A control per record: the video only
re-encoded (an empty window), to show how much of a video's |Δp| re-encoding alone explains (the image and audio
masks are lossless outside their region).

The demo model is tiny (hidden 64, 2 layers) and trained only on this synthetic task; its evidence is routing
attention, not a saliency method tuned to occlusion. What the figures show is reported as they come; nothing here is
tuned to them.

Prints JSON lines (env, per-medium and per-medium×question figures, control, summary), then markdown tables; draws
the PNG (`--png`); `--json OUT` writes every row.

    .venv/bin/python benchmarks/occlusion.py [--test 80] [--data DIR] [--seed 0] [--threads 1] [--batch-size 8]
        [--png benchmarks/results/occlusion.png] [--json OUT] [--smoke]

`--smoke` runs the same code on 2 records and writes no PNG unless `--png` is given; its figures mean nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from occlusion_figures import by_medium, by_medium_question, control_table, draw, table
from smoke import parse_with_smoke

from fixtures.inspection import write_inspection_set
from omni.contract.config import EngineConfig
from omni.contract.types import DecisionRequest, EvidenceAsk
from omni.learn.dataset import LabelledRequest, load_dataset
from omni.learn.occlusion import masked_request, occlusion_rows, option_probabilities
from omni.learn.occlusion_regions import Region, Target
from omni.serve.engine import DecisionEngine

SMOKE = {"test": 2, "png": None}
PNG = Path(__file__).resolve().parent / "results" / "occlusion.png"


def emit(event: str, **fields: Any) -> dict:
    line = {"event": event, **fields}
    print(json.dumps(line), flush=True)
    return line


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def records(args: argparse.Namespace, scratch: Path, config: EngineConfig) -> list[LabelledRequest]:
    folder = Path(args.data) if args.data else scratch / "set"
    if not args.data:
        write_inspection_set(folder, n_train=0, n_test=args.test)
    return load_dataset(folder / "test.jsonl", config)[:args.test]


def reencode_control(engine: DecisionEngine, request: DecisionRequest, answers: dict, evidence: dict) -> list[float]:
    """|Δp| of each question's chosen answer when the video is only re-encoded (an empty window cut)."""
    if not any(m.kind == "video" for m in request.media):
        return []
    again = engine.decide(masked_request(request, Target("video"), Region("window", 0.0, 0.0))).answers
    return [abs(option_probabilities(again[qid])[entry["answer"]] - option_probabilities(answers[qid])[entry["answer"]])
            for qid, entry in evidence["questions"].items()]


def run(engine: DecisionEngine, data: Sequence[LabelledRequest], args: argparse.Namespace
        ) -> tuple[list[dict], list[float], float]:
    rows: list[dict] = []
    control: list[float] = []
    started = time.perf_counter()
    for n, record in enumerate(data, 1):
        decision = engine.decide(replace(record.request, evidence=EvidenceAsk()))
        assert decision.evidence is not None, "the engine gave no evidence"
        found = occlusion_rows(record.request, decision.evidence, decision.answers,
                               lambda requests: [d.answers for d in engine.decide_batch(requests)],
                               seed=args.seed, record=record.line, batch_size=args.batch_size)
        rows += [row.to_wire() for row in found]
        control += reencode_control(engine, record.request, decision.answers, decision.evidence)
        say(f"occlusion: {n}/{len(data)} records, {len(rows)} rows, {time.perf_counter() - started:.0f} s")
    return rows, control, time.perf_counter() - started


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--test", type=int, default=80, help="test records (the first N of the demo test set)")
    parser.add_argument("--data", help="an existing inspection set (test.jsonl) instead of writing one")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random regions")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--batch-size", type=int, default=8, help="masked requests per forward")
    parser.add_argument("--png", type=Path, default=PNG, help="the figure (default benchmarks/results/occlusion.png)")
    parser.add_argument("--json", metavar="OUT", help="write every row and the figures as JSON")
    return parse_with_smoke(parser, SMOKE, argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    load_average = [round(v, 2) for v in os.getloadavg()]
    config = EngineConfig(torch_threads=args.threads)
    engine = DecisionEngine(config)
    engine.load()
    with tempfile.TemporaryDirectory() as scratch:
        data = records(args, Path(scratch), config)
        emit("env", smoke=args.smoke, records=len(data), seed=args.seed, threads=torch.get_num_threads(),
             cpus=os.cpu_count(), load_average_start=load_average, torch=torch.__version__)
        rows, control, seconds = run(engine, data, args)
    media, per_question = by_medium(rows), by_medium_question(rows)
    for kind, figures in media.items():
        emit("medium", medium=kind, **figures)
    for name, figures in per_question.items():
        emit("medium_question", group=name, **figures)
    controls = {"video re-encoded only": {"rows": len(control), "mean_abs_dp": sum(control) / max(1, len(control)),
                                          "max_abs_dp": max(control, default=0.0)}}
    emit("control", **controls["video re-encoded only"])
    png = draw(rows, args.png, f"occlusion on the demo inspection test set ({len(data)} records, seed {args.seed})"
               ) if args.png else None
    emit("summary", rows=len(rows), records=len(data), seconds=round(seconds, 1), png=str(png) if png else None,
         load_average_end=[round(v, 2) for v in os.getloadavg()])
    print("\n" + table(media, "medium") + "\n\n" + table(per_question, "medium / question") + "\n\n"
          + control_table(controls))
    if args.json:
        result = {"rows": rows, "by_medium": media, "by_medium_question": per_question, "control": controls}
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
