"""The PNG of a QA report (`omni.governance.qa.qa_report`): per question, the automatic precision window by window
with its 95% interval, the whole period's estimate and the target (matplotlib, Agg backend).

A window where a question has no labelled sample is a gap. Knows nothing of files other than the one it writes, of
the review directory or of how the numbers were computed.
"""
from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

COLOURS = ("#4477aa", "#ee6677", "#228833", "#ccbb44", "#66ccee", "#aa3377", "#bbbbbb", "#000000")


def qa_plot(report: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg", force=True)        # files only; never a display (as omni/learn/plots.py)
    import matplotlib.pyplot as plt

    questions = list(report["questions"])
    fig, axes = plt.subplots(max(1, len(questions)), 1, figsize=(9, 2.6 * max(1, len(questions))), squeeze=False,
                             sharex=True)
    width = timedelta(seconds=float(report["window_s"]))
    for row, qid in enumerate(questions):
        ax = axes[row][0]
        colour = COLOURS[row % len(COLOURS)]
        points = [(datetime.fromisoformat(w["start"].replace("Z", "+00:00")) + width / 2, w["questions"][qid])
                  for w in report["windows"] if qid in w["questions"] and w["questions"][qid]["labelled"]]
        if points:
            times = [t for t, _ in points]
            values = [q["precision"] for _, q in points]
            low = [q["precision"] - q["interval"][0] for _, q in points]
            high = [q["interval"][1] - q["precision"] for _, q in points]
            ax.errorbar(times, values, yerr=[low, high], fmt="o-", color=colour, capsize=3,
                        label="precision per window (95% interval)")
        whole = report["questions"][qid]
        if whole["labelled"]:
            ax.axhspan(whole["interval"][0], whole["interval"][1], color=colour, alpha=0.12,
                       label=f"whole period {whole['precision']:.3f} ({whole['labelled']} labelled)")
        if whole["target"] is not None:
            ax.axhline(whole["target"], color="#000000", linestyle="--", linewidth=1,
                       label=f"target {whole['target']:.3f}")
        ax.set_ylim(-0.02, 1.02)
        ax.set_ylabel("precision")
        ax.set_title(f"{qid}" + ("  — BELOW TARGET" if whole["below_target"] else ""), loc="left", fontsize=10)
        ax.legend(loc="lower left", fontsize=8)
        ax.grid(alpha=0.3)
    axes[-1][0].set_xlabel("decision time (UTC)")
    fig.suptitle("Automatic precision from QA samples")
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
