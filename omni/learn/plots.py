"""PNG figures of an evaluation: reliability diagrams and confusion matrices (matplotlib, Agg backend).

Knows nothing of models, datasets or how the numbers were computed: it draws arrays it is given.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from omni.learn.metrics import ReliabilityBins


def use_agg() -> None:
    """Select matplotlib's Agg backend before pyplot is imported (matplotlib is imported only when drawing)."""
    import matplotlib

    matplotlib.use("Agg", force=True)        # files only; never a display


def reliability_diagram(table: ReliabilityBins, title: str, path: Path, ece: float | None = None) -> Path:
    """Accuracy vs confidence per bin, the diagonal, and a histogram of how many rows fall in each bin."""
    use_agg()
    import matplotlib.pyplot as plt

    figure, (top, bottom) = plt.subplots(2, 1, figsize=(4.2, 5.0), height_ratios=(3, 1), sharex=True)
    centres = (table.edges[:-1] + table.edges[1:]) / 2
    width = table.edges[1] - table.edges[0]
    filled = table.counts > 0
    top.plot([0, 1], [0, 1], linestyle="--", color="grey", linewidth=1, label="perfect calibration")
    top.bar(centres[filled], table.accuracy[filled], width=width * 0.9, color="#4477aa", label="accuracy")
    top.scatter(table.mean_confidence[filled], table.accuracy[filled], color="#cc3311", s=12, zorder=3,
                label="mean confidence")
    top.set_ylim(0, 1)
    top.set_ylabel("accuracy")
    top.set_title(title + (f"  (ECE {ece:.3f})" if ece is not None else ""), fontsize=9)
    top.legend(fontsize=7, loc="upper left")
    bottom.bar(centres, table.counts, width=width * 0.9, color="#999999")
    bottom.set_xlim(0, 1)
    bottom.set_xlabel("confidence (top-label probability)")
    bottom.set_ylabel("count")
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)
    return path


def confusion_plot(matrix: np.ndarray, option_ids: list[str], title: str, path: Path) -> Path:
    """Counts with true options as rows and predicted options as columns."""
    use_agg()
    import matplotlib.pyplot as plt

    size = 1.6 + 0.45 * len(option_ids)
    figure, axes = plt.subplots(figsize=(size + 0.8, size))
    image = axes.imshow(matrix, cmap="Blues")
    axes.set_xticks(range(len(option_ids)), option_ids, rotation=45, ha="right", fontsize=8)
    axes.set_yticks(range(len(option_ids)), option_ids, fontsize=8)
    axes.set_xlabel("predicted")
    axes.set_ylabel("true")
    axes.set_title(title, fontsize=9)
    peak = matrix.max() if matrix.size else 0
    for (row, column), count in np.ndenumerate(matrix):
        axes.text(column, row, str(int(count)), ha="center", va="center", fontsize=8,
                  color="white" if peak and count > peak / 2 else "black")
    figure.colorbar(image, ax=axes, fraction=0.046)
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)
    return path
