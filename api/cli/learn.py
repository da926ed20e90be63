"""`omni eval`, `omni calibrate` and `omni finetune`: argv → labelled dataset + model → reports and checkpoints.

An edge like `api/cli/decide.py`: parses flags, reads the dataset (the wire parser's rules, before any model work;
a review directory stands for its `labels.jsonl`, whose media paths are relative to the directory),
loads the model with `ClefModel.from_config` (so the tiny default, hub ids and strict loading behave as in `omni
decide`), and hands the work to `omni.learn.evaluation`, `omni.model.calibration` and `omni.learn.training`.
Knows nothing of model internals or HTTP.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from omni.contract.config import EngineConfig
    from omni.learn.dataset import LabelledRequest
    from omni.learn.training_config import TrainingConfig
    from omni.model.clef import ClefModel


def add_model_flags(parser: argparse.ArgumentParser,
                    model_help: str = "checkpoint directory or hub id (default: the embedded tiny default)") -> None:
    """The flags of a command that loads the model in-process (`omni eval`, `omni calibrate`, `omni policy ...`)."""
    from api.cli.decide import add_quantize_flag, add_torch_threads_flag

    parser.add_argument("--model", help=model_help)
    parser.add_argument("--adapter", metavar="DIR", default=None,
                        help="answer with the adapter in DIR (an `omni finetune` output) on top of --model")
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1 … (default: cuda if available)")
    parser.add_argument("--dtype", default=None, choices=["auto", "float32", "bfloat16", "float16"])
    parser.add_argument("--batch-size", type=int, default=4, help="records per forward pass (default 4)")
    add_quantize_flag(parser)
    add_torch_threads_flag(parser)
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("data", help="labelled dataset: JSONL, one System One request with `labels` per line, or "
                        "a review directory (its labels.jsonl)")
    add_model_flags(parser)


def load_model(args: argparse.Namespace) -> ClefModel:
    """The loaded ClefModel for the flags (calibration is applied explicitly by the callers, never twice)."""
    from omni.model.clef import ClefModel
    from omni.serve.engine import set_torch_threads

    config = learn_config(args)
    set_torch_threads(config.torch_threads, config.decode_threads)     # as the engine does: 0 = sized here
    model = ClefModel.from_config(config)
    if getattr(args, "adapter", None):
        model.use_adapter(args.adapter)
    return model


def learn_config(args: argparse.Namespace) -> EngineConfig:
    from omni.contract.config import EngineConfig

    return EngineConfig(model_path=args.model, device=args.device or "auto", dtype=args.dtype or "auto",
                        torch_threads=args.torch_threads or 0, quantize=getattr(args, "quantize", None))


def dataset_file(path: str) -> Path:
    """The dataset file a DATA argument names: the file itself, or a review directory's labels.jsonl."""
    from omni.learn.dataset import DatasetError
    from omni.review.directory import REVIEW_DATASET_FILE, dataset_path

    file = dataset_path(path)
    if Path(path).is_dir() and not file.is_file():
        message = (f"a directory without {REVIEW_DATASET_FILE}: not a review directory (give a dataset file or "
                   "a directory that `omni review` labelled)")
        raise DatasetError(path, [(0, message)])
    return file


def labelled_records(args: argparse.Namespace, path: str | None = None) -> list[LabelledRequest]:
    from omni.learn.dataset import load_dataset

    return load_dataset(dataset_file(path or args.data), learn_config(args))


def say(message: str) -> None:
    print(message, file=sys.stderr)


# ------------------------------------------------------------------------------------------------------ eval
def add_eval_arguments(parser: argparse.ArgumentParser) -> None:
    _add_common(parser)
    parser.add_argument("--out", required=True, help="report directory (metrics.json, report.md, PNGs)")
    parser.add_argument("--target-precision", type=float, default=0.95,
                        help="precision the auto-decision threshold must reach (default 0.95)")
    parser.add_argument("--calibration", action="store_true",
                        help="apply the checkpoint's calibration.json (refused if fitted for another checkpoint)")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG figures")


def run_eval(args: argparse.Namespace) -> int:
    from omni.learn.evaluation import collect_logits, compute_metrics, write_report
    from omni.model.calibration import CalibrationError, load_calibration

    records = labelled_records(args)
    model = load_model(args)
    directory = model.answering_directory
    calibration = load_calibration(directory) if args.calibration else None
    if args.calibration and calibration is None:
        raise CalibrationError(f"--calibration: {directory} has no calibration.json (fit one with `omni calibrate`)")
    scored = collect_logits(model, records, args.batch_size, not args.quiet, "evaluating",
                            str(dataset_file(args.data)))
    result, groups, pooled = compute_metrics(scored, calibration, args.target_precision)
    result["meta"] = {"model": str(directory), "dataset": str(dataset_file(args.data)), "records": len(records),
                      "labelled questions": len(scored), "calibration": "on" if calibration else "off"}
    out = write_report(result, groups, pooled, scored, args.out, calibration, plots=not args.no_plots)
    print(format_summary(result))
    say(f"omni: wrote {out / 'metrics.json'}, {out / 'report.md'} and figures")
    return 0


def format_summary(result: dict) -> str:
    """A plain-text table of the per-question and per-type headline numbers."""
    lines = [(f"{'question':<24} {'type':<7} {'n':>5} {'acc':>6} {'F1':>6} {'NLL':>7} {'Brier':>6} {'ECE':>6} "
             f"{'thresh':>6} {'cover':>6}")]
    rows = list(result["questions"].items()) + [(f"[{k}]", {**v, "type": ""}) for k, v in result["types"].items()]
    for name, m in rows:
        t = m["precision_threshold"]
        threshold = "-" if t["threshold"] is None else f"{t['threshold']:.3f}"
        lines.append(f"{name[:24]:<24} {m['type']:<7} {m['count']:>5} {m['accuracy']:>6.3f} {m['macro_f1']:>6.3f} "
                     f"{m['nll']:>7.4f} {m['brier']:>6.3f} {m['ece']:>6.3f} {threshold:>6} {t['coverage']:>6.3f}")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------- calibrate
def add_calibrate_arguments(parser: argparse.ArgumentParser) -> None:
    _add_common(parser)
    parser.add_argument("--out", default=None, help="where to write calibration.json (default: the model directory)")
    parser.add_argument("--min-samples", type=int, default=20,
                        help="a bucket with fewer labels is not fitted: type × band × modality set falls back to "
                        "type × band, and that to temperature 1 (default 20)")


def run_calibrate(args: argparse.Namespace) -> int:
    from omni.learn import metrics
    from omni.learn.evaluation import collect_logits, compute_metrics
    from omni.model.calibration import checkpoint_fingerprint, fit_calibration, save_calibration

    records = labelled_records(args)
    model = load_model(args)
    scored = collect_logits(model, records, args.batch_size, not args.quiet, "scoring", str(dataset_file(args.data)))
    directory = model.answering_directory
    calibration = fit_calibration(((s.question_type, s.logits, s.label, s.modality) for s in scored),
                                  checkpoint_fingerprint(directory), args.min_samples)
    path = save_calibration(calibration, Path(args.out) if args.out else directory)
    before, after = (compute_metrics(scored, c)[0]["types"]["all"] for c in (None, calibration))
    width = max([14] + [len(key) for key in calibration.details])
    for key, detail in calibration.details.items():
        print(f"{key:<{width}} n = {detail['samples']:<6} {_fit_summary(key, detail):<42} "
              f"NLL {detail['nll_before']:.4f} → {detail['nll_after']:.4f}")
    print(f"{'all':<{width}} NLL {before['nll']:.4f} → {after['nll']:.4f}, ECE ({metrics.ECE_BINS} bins) "
          f"{before['ece']:.4f} → {after['ece']:.4f}")
    if any(d.get("at_bound") for d in calibration.details.values()):
        say("omni: warning: a temperature sits at its search bound — the model separates these labels perfectly, "
             "so the fit cannot tell how sure it should be; calibrate on harder (or more) data")
    say(f"omni: wrote {path} (bound to this checkpoint; serving applies it only when calibration is switched on)")
    return 0


def _fit_summary(key: str, detail: dict) -> str:
    """'T = 1.234', 'T = 0.010 (search bound: …)', or what an unfitted bucket falls back to."""
    if detail["fitted"]:
        return f"T = {detail['temperature']:.3f}" + (" (search bound: labels separable)" if detail["at_bound"] else "")
    fallback = detail.get("fallback_temperature", 1.0)
    if key.count(":") > 1:
        return f"too few samples: type × band T = {fallback:.3f}"
    return "not fitted (too few samples)"


# -------------------------------------------------------------------------------------------------- finetune
def add_finetune_arguments(parser: argparse.ArgumentParser) -> None:
    from omni.learn.training_config import TRAINING_MODES, TrainingConfig

    d = TrainingConfig()
    _add_common(parser)
    parser.add_argument("--out", required=True, help="output directory: an adapter folder beside the base "
                        "(modes head and lora), or a whole checkpoint (--merged, mode full)")
    parser.add_argument("--mode", choices=TRAINING_MODES, default=d.mode,
                        help="head: the joint-schema head only; lora: + LoRA on the thinker's text decoder (needs "
                        "peft; over --quantize nf4 or int8: QLoRA); full: + every thinker weight (small models "
                        "only; always a whole checkpoint; not over a quantized base)")
    parser.add_argument("--merged", action="store_true",
                        help="write a whole checkpoint in the released layout (LoRA merged into the thinker) "
                        "instead of an adapter folder")
    parser.add_argument("--epochs", type=int, default=d.epochs)
    parser.add_argument("--lr", type=float, default=d.learning_rate, help="head learning rate")
    parser.add_argument("--backbone-lr", type=float, default=d.backbone_learning_rate,
                        help="learning rate of the LoRA adapters / thinker")
    parser.add_argument("--validation", default=None,
                        help="a separate labelled validation dataset (a file or a review directory)")
    parser.add_argument("--validation-fraction", type=float, default=d.validation_fraction,
                        help="share of DATA held out for validation when --validation is not given")
    parser.add_argument("--patience", type=int, default=d.patience_epochs,
                        help="stop after this many epochs without a better validation NLL")
    parser.add_argument("--label-smoothing", type=float, default=d.label_smoothing)
    parser.add_argument("--brier-weight", type=float, default=d.brier_weight)
    parser.add_argument("--no-augment", action="store_true",
                        help="keep question order and choice option ids as written")
    parser.add_argument("--seed", type=int, default=d.seed)
    parser.add_argument("--lora-rank", type=int, default=d.lora_rank)
    parser.add_argument("--lora-alpha", type=float, default=d.lora_alpha)
    parser.add_argument("--no-media-cache", action="store_true",
                        help="encode media again at every step instead of keeping them in memory")
    parser.add_argument("--restart", action="store_true", help="ignore a training_state.pt left in --out")
    parser.add_argument("--keep-state", action="store_true", help="keep training_state.pt after finishing")
    parser.set_defaults(batch_size=d.batch_records)     # records per optimizer step (default 8)


def training_config_from_args(args: argparse.Namespace) -> TrainingConfig:
    from omni.learn.training_config import TrainingConfig

    return TrainingConfig(mode=args.mode, epochs=args.epochs, batch_records=args.batch_size, learning_rate=args.lr,
                          backbone_learning_rate=args.backbone_lr, validation_fraction=args.validation_fraction,
                          patience_epochs=args.patience, label_smoothing=args.label_smoothing,
                          brier_weight=args.brier_weight, augment=not args.no_augment, seed=args.seed,
                          lora_rank=args.lora_rank, lora_alpha=args.lora_alpha,
                          cache_media=not args.no_media_cache)


def run_finetune(args: argparse.Namespace) -> int:
    from omni.learn.training import finetune

    config = training_config_from_args(args)
    if args.adapter:
        print("omni: finetune: --adapter: a fine-tune starts from the base (--model); an adapter is what it writes",
              file=sys.stderr)
        return 2
    if args.quantize:          # before loading: full fine-tuning of a quantized base, LoRA over fp8 (QuantizationError)
        from omni.model.qlora import check_trainable

        check_trainable(config.mode, args.quantize)
    records = labelled_records(args)
    validation = labelled_records(args, args.validation) if args.validation else None
    model = load_model(args)
    try:
        summary = finetune(model, model.source.directory, records, args.out, config, validation,
                           restart=args.restart, keep_state=args.keep_state, progress=not args.quiet, log=say,
                           merged=args.merged)
    except ValueError as exc:          # a leftover state of another run, a split too small, an output = input
        print(f"omni: finetune: {exc}", file=sys.stderr)
        return 2
    best = summary["best_validation_nll"]
    done = f"omni: best epoch {summary['best_epoch']}" + ("" if best is None else f" (validation NLL {best:.4f})")
    if summary["written"] == "checkpoint":
        say(f"{done}; wrote {args.out} — use it with `omni decide --model {args.out}` or "
            f"`omni serve --model {args.out}`")
    else:
        say(f"{done}; wrote the adapter {args.out} for the base {model.source.directory} — check it with "
            f"`omni doctor --adapter {args.out}`, or write a whole checkpoint with `omni export --merge {args.out} "
            f"--base {model.source.directory} --out DIR`")
    return 0
