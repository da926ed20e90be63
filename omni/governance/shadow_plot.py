"""The PNG of a shadow report (`omni.governance.shadow.shadow_report`): the live and candidate models side by side.

Three panels (matplotlib, Agg backend through `omni.learn.plots.use_agg`): the agreement of the top answers per
question with its Wilson interval; the overall outcome flips live -> candidate as a 3x3 heat map with counts (or a
note when no policy was in force); and the reliability of each side on reviewed items, pooled over questions (or a
note when none was reviewed).
Knows nothing of files other than the one it writes, of the log or of how the numbers were computed.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

COLOURS = {"live": "#4477aa", "candidate": "#ee6677"}


def shadow_plot(report: dict[str, Any], path: Path) -> Path:
    """Draw `report` into `path` (PNG)."""
    from omni.learn.plots import use_agg

    use_agg()
    import matplotlib.pyplot as plt

    questions = report["questions"]
    height = max(3.2, 0.9 + 0.32 * len(questions))
    figure, axes = plt.subplots(1, 3, figsize=(13.5, height), width_ratios=(1.3, 1.0, 1.0))
    _agreement(axes[0], questions, report["level"])
    _flips(figure, axes[1], report["flips"], report["outcomes"])
    _calibration(axes[2], report["reviewed"])
    figure.suptitle(f"shadow: live {report['live']} vs candidate {report['candidate']} "
                    f"({report['shadow_records']} records)", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)
    return path


def _agreement(axes: Any, questions: dict[str, Any], level: float) -> None:
    names = list(questions)
    rows = range(len(names))
    shares = [questions[q]["agreement"] for q in names]
    low = [questions[q]["agreement"] - questions[q]["agreement_interval"][0] for q in names]
    high = [questions[q]["agreement_interval"][1] - questions[q]["agreement"] for q in names]
    axes.errorbar(shares, rows, xerr=[low, high], fmt="o", color=COLOURS["live"], ecolor="#555555", capsize=3)
    axes.set_yticks(list(rows), [f"{qid} (n={questions[qid]['n']})" for qid in names], fontsize=8)
    axes.set_ylim(len(names) - 0.5, -0.5)
    axes.set_xlim(-0.02, 1.02)
    axes.set_xlabel(f"agreement of the top answers ({level:.0%} Wilson interval)", fontsize=8)
    axes.set_title("agreement per question", fontsize=9)


def _flips(figure: Any, axes: Any, flips: dict[str, dict[str, int]] | None, outcomes: list[str]) -> None:
    axes.set_title("overall outcome: live -> candidate", fontsize=9)
    if flips is None:
        axes.text(0.5, 0.5, "no outcomes\n(no policy in force)", ha="center", va="center", fontsize=9)
        axes.set_axis_off()
        return
    matrix = [[flips[live][candidate] for candidate in outcomes] for live in outcomes]
    image = axes.imshow(matrix, cmap="Blues")
    peak = max(max(row) for row in matrix)
    for i, row in enumerate(matrix):
        for j, count in enumerate(row):
            axes.text(j, i, str(count), ha="center", va="center", fontsize=9,
                      color="white" if peak and count > peak / 2 else "black")
    axes.set_xticks(range(len(outcomes)), outcomes, fontsize=8)
    axes.set_yticks(range(len(outcomes)), outcomes, fontsize=8)
    axes.set_xlabel("candidate", fontsize=8)
    axes.set_ylabel("live", fontsize=8)
    figure.colorbar(image, ax=axes, fraction=0.046)


def _calibration(axes: Any, reviewed: dict[str, Any] | None) -> None:
    axes.set_title("calibration on reviewed items", fontsize=9)
    if reviewed is None:
        axes.text(0.5, 0.5, "no reviewed items\n(--reviews REVIEW_DIR)", ha="center", va="center", fontsize=9)
        axes.set_axis_off()
        return
    axes.plot([0, 1], [0, 1], linestyle="--", color="grey", linewidth=1)
    for side, colour in COLOURS.items():
        bins = reviewed[side]["bins"]
        points = [(x, y) for x, y in zip(bins["mean_confidence"], bins["accuracy"], strict=True) if x is not None]
        axes.plot([x for x, _ in points], [y for _, y in points], marker="o", markersize=4, color=colour,
                  label=f"{side}: acc {reviewed[side]['accuracy']:.2f}, ECE {reviewed[side]['ece']:.3f}")
    axes.set_xlim(0, 1)
    axes.set_ylim(0, 1)
    axes.set_xlabel("confidence (top-label probability)", fontsize=8)
    axes.set_ylabel("accuracy", fontsize=8)
    axes.legend(fontsize=7, loc="lower right", title=f"n={reviewed['n']}", title_fontsize=7)
