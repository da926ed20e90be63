"""The PNG of a drift report (`omni.governance.drift.drift_report`): PSI per question over the windows, with the 0.1 and
0.25 bands, and each question's answer shares window by window (matplotlib, Agg backend).

With many questions only the `top` most drifting are drawn (the title says how many of how many); a question with
many answers shows its most frequent ones and "other". A PSI line joins the windows that have one;
empty windows are gaps among the bars.
Knows nothing of files other than the one it writes, of the log or of how the numbers were computed.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from omni.governance.drift import MAJOR_PSI, MODERATE_PSI, most_drifting

MAX_ANSWERS_DRAWN = 8           # per question; the rest are summed as "other"
COLOURS = ("#4477aa", "#ee6677", "#228833", "#ccbb44", "#66ccee", "#aa3377", "#bbbbbb", "#000000", "#ee8866")


def drift_plot(report: dict[str, Any], path: Path, top: int = 6) -> Path:
    """Draw `report` into `path` (PNG): one PSI panel, then one answer-share panel per drawn question."""
    import matplotlib

    matplotlib.use("Agg", force=True)        # files only; never a display (as omni/learn/plots.py)
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    windows = report["windows"]
    drawn = most_drifting(report, top)
    starts = [_time(w["start"]) for w in windows]
    width_days = report["window_seconds"] / 86400 * 0.85
    centres = [start + timedelta(seconds=report["window_seconds"] / 2) for start in starts]
    figure, axes = plt.subplots(1 + len(drawn), 1, figsize=(7.5, 2.6 + 1.5 * len(drawn)), sharex=True,
                                height_ratios=[1.6] + [1.0] * len(drawn), squeeze=False)
    psi_axes = axes[0][0]
    peak = max([MAJOR_PSI * 1.6] + [w["questions"][q]["psi"] or 0.0 for w in windows for q in drawn
                                    if q in w["questions"]])
    psi_axes.axhspan(MODERATE_PSI, MAJOR_PSI, color="#ffdd88", alpha=0.35, label=f"moderate (>= {MODERATE_PSI})")
    psi_axes.axhspan(MAJOR_PSI, peak * 1.08, color="#ee6677", alpha=0.2, label=f"major (>= {MAJOR_PSI})")
    for number, qid in enumerate(drawn):
        points = [(centre, value) for centre, value in zip(centres, (_psi(w, qid) for w in windows), strict=True)
                  if value is not None]                 # a window without a PSI is skipped, not a break
        psi_axes.plot([x for x, _ in points], [y for _, y in points], marker="o", markersize=3, linewidth=1.2, color=COLOURS[number % len(COLOURS)],
                      label=qid)
    psi_axes.set_ylim(0, peak * 1.08)
    psi_axes.set_ylabel("PSI")
    shown = f"the {len(drawn)} most drifting of {len(report['questions'])} questions" \
        if len(drawn) < len(report["questions"]) else f"{len(drawn)} questions"
    psi_axes.set_title(f"PSI per question against the {report['baseline']} window ({shown})", fontsize=9)
    psi_axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    for row, qid in enumerate(drawn, start=1):
        _shares(axes[row][0], windows, starts, qid, width_days)
    axes[-1][0].xaxis.set_major_formatter(mdates.ConciseDateFormatter(axes[-1][0].xaxis.get_major_locator()))
    axes[-1][0].set_xlabel("window start (UTC)")
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)
    return path


def _shares(axes: Any, windows: list[dict[str, Any]], starts: list[datetime], qid: str, width_days: float) -> None:
    """Stacked bars: each window's answer shares for one question (its most frequent answers, then "other")."""
    totals: dict[str, int] = {}
    for window in windows:
        for answer, count in window["questions"].get(qid, {}).get("answers", {}).items():
            totals[answer] = totals.get(answer, 0) + count
    kind = next((w["questions"][qid]["type"] for w in windows if qid in w["questions"]), None)
    ranked = sorted(totals, key=lambda answer: (-totals[answer], answer))
    if kind == "score":                          # levels in order, true before false; choices by frequency
        ranked = sorted(totals, key=int)
    elif kind == "noul":
        ranked = [answer for answer in ("true", "false") if answer in totals]
    named = ranked[:MAX_ANSWERS_DRAWN] if len(ranked) <= MAX_ANSWERS_DRAWN else ranked[:MAX_ANSWERS_DRAWN - 1]
    labels = named + (["other"] if len(named) < len(ranked) else [])
    bottoms = [0.0] * len(windows)
    for number, label in enumerate(labels):
        heights = []
        for window in windows:
            answers = window["questions"].get(qid, {}).get("answers", {})
            total = sum(answers.values())
            count = answers.get(label, 0) if label != "other" else \
                sum(n for answer, n in answers.items() if answer not in named)
            heights.append(count / total if total else 0.0)
        axes.bar(starts, heights, width=width_days, bottom=bottoms, align="edge",
                 color=COLOURS[number % len(COLOURS)], label=label)
        bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    axes.set_ylim(0, 1)
    axes.set_ylabel("share", fontsize=8)
    axes.set_title(f"{qid}: answers", fontsize=8, loc="left")
    axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)


def _psi(window: dict[str, Any], qid: str) -> float | None:
    value = window["questions"].get(qid, {}).get("psi")
    return None if value is None else float(value)


def _time(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
