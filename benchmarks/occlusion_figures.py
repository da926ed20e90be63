"""The figures of benchmarks/occlusion.py, from occlusion rows already computed (`OcclusionRow.to_wire()` dicts):
per medium (and per medium × question) the mean |Δp| of the chosen answer with its top-evidence region masked and with
a random region of the same size masked, the paired difference with a bootstrap 95 % interval, how often the top
mask moved the answer more (a two-sided sign test over the rows that are not tied), answers flipped; the markdown
tables that print them and the PNG that draws them.

Numpy, scipy's binomial test and matplotlib (Agg) over plain dicts: knows nothing of the model, the engine or argv.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import binomtest

from omni.learn.plots import use_agg

KINDS = ("image", "audio", "video", "state")
COLOURS = {"image": "#4477aa", "audio": "#ee6677", "video": "#228833", "state": "#ccbb44"}
BOOTSTRAP = 2000


def figures(rows: Sequence[Mapping[str, Any]], seed: int = 0) -> dict[str, Any]:
    """The figures of one group of rows."""
    top = np.array([row["top"]["abs_dp"] for row in rows])
    rand = np.array([row["random"]["abs_dp"] for row in rows])
    diff = top - rand
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, len(diff), size=(BOOTSTRAP, len(diff)))].mean(axis=1)
    more, less = int((diff > 0).sum()), int((diff < 0).sum())
    return {"rows": len(rows), "mean_abs_dp_top": float(top.mean()), "mean_abs_dp_random": float(rand.mean()),
            "median_abs_dp_top": float(np.median(top)), "median_abs_dp_random": float(np.median(rand)),
            "mean_diff": float(diff.mean()),
            "mean_diff_ci95": [float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))],
            "top_moved_more": more, "random_moved_more": less, "tied": len(rows) - more - less,
            "sign_test_p": float(binomtest(more, more + less).pvalue) if more + less else 1.0,
            "flipped_top": sum(row["top"]["flipped"] for row in rows),
            "flipped_random": sum(row["random"]["flipped"] for row in rows)}


def grouped(rows: Sequence[Mapping[str, Any]], key: Callable[[Mapping[str, Any]], str]) -> dict[str, dict]:
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        groups.setdefault(key(row), []).append(row)
    return {name: figures(group) for name, group in groups.items()}


def by_medium(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict]:
    found = grouped(rows, lambda row: row["kind"])
    return {kind: found[kind] for kind in KINDS if kind in found}


def by_medium_question(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict]:
    found = grouped(rows, lambda row: f"{row['kind']} / {row['question']}")
    return dict(sorted(found.items(), key=lambda item: (KINDS.index(item[0].split(" / ")[0]), item[0])))


def table(groups: Mapping[str, Mapping[str, Any]], first: str) -> str:
    header = (f"| {first} | rows | mean abs Δp top | mean abs Δp random | top − random (95 % CI) | top moved more / "
              "less / tied | sign test p | answers flipped top / random |")
    lines = [header, "|---|---|---|---|---|---|---|---|"]
    for name, f in groups.items():
        low, high = f["mean_diff_ci95"]
        lines.append(f"| {name} | {f['rows']} | {f['mean_abs_dp_top']:.4f} | {f['mean_abs_dp_random']:.4f} | "
                     f"{f['mean_diff']:+.4f} ({low:+.4f}, {high:+.4f}) | {f['top_moved_more']} / "
                     f"{f['random_moved_more']} / {f['tied']} | {f['sign_test_p']:.2g} | {f['flipped_top']} / "
                     f"{f['flipped_random']} |")
    return "\n".join(lines)


def control_table(control: Mapping[str, Mapping[str, Any]]) -> str:
    lines = ["| control | rows | mean abs Δp | max abs Δp |", "|---|---|---|---|"]
    lines += [f"| {name} | {c['rows']} | {c['mean_abs_dp']:.4f} | {c['max_abs_dp']:.4f} |"
              for name, c in control.items()]
    return "\n".join(lines)


def draw(rows: Sequence[Mapping[str, Any]], path: Path, title: str) -> Path:
    """Left: mean |Δp| per medium, top vs random, with bootstrap 95 % intervals of each mean (symlog axis). Right:
    every row's |Δp| random (x) against top (y), by medium, on symlog axes; above the diagonal the top mask moved it
    more."""
    use_agg()
    import matplotlib.pyplot as plt

    kinds = [k for k in KINDS if any(row["kind"] == k for row in rows)]
    figure, (bars, scatter) = plt.subplots(1, 2, figsize=(10, 4.2))
    rng = np.random.default_rng(0)
    for offset, side, colour in ((-0.2, "top", "#cc3311"), (0.2, "random", "#999999")):
        means, errors = [], []
        for kind in kinds:
            values = np.array([row[side]["abs_dp"] for row in rows if row["kind"] == kind])
            boot = values[rng.integers(0, len(values), size=(BOOTSTRAP, len(values)))].mean(axis=1)
            means.append(values.mean())
            errors.append([values.mean() - np.quantile(boot, 0.025), np.quantile(boot, 0.975) - values.mean()])
        bars.bar(np.arange(len(kinds)) + offset, means, width=0.4, color=colour, yerr=np.array(errors).T, capsize=3,
                 label=f"{side} region masked")
    bars.set_xticks(range(len(kinds)), kinds)
    bars.set_yscale("symlog", linthresh=1e-4)
    bars.set_ylim(0, 1)
    bars.set_ylabel("mean |Δp| of the chosen answer (symlog)")
    bars.legend(fontsize=8)
    bars.set_title("top-evidence region vs random region of the same size", fontsize=9)
    high = max([row["top"]["abs_dp"] for row in rows] + [row["random"]["abs_dp"] for row in rows] + [1e-3])
    for kind in kinds:
        mine = [row for row in rows if row["kind"] == kind]
        scatter.scatter([row["random"]["abs_dp"] for row in mine], [row["top"]["abs_dp"] for row in mine], s=10,
                        alpha=0.6, color=COLOURS[kind], label=kind)
    scatter.plot([0, high], [0, high], linestyle="--", color="grey", linewidth=1)
    for axis in ("x", "y"):
        getattr(scatter, f"set_{axis}scale")("symlog", linthresh=1e-3)
    scatter.set_xlim(0, high * 1.1)
    scatter.set_ylim(0, high * 1.1)
    scatter.set_xlabel("|Δp| random region masked")
    scatter.set_ylabel("|Δp| top region masked")
    scatter.legend(fontsize=8)
    scatter.set_title("each question × medium × record (symlog axes)", fontsize=9)
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path
