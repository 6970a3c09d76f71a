"""Pictures of retrieval results (posjax.eval.retrieval): accuracy per (length, depth) cell.

    plot_sweep(results, folder)     per task and method: one heatmap per sweep point (its
                                    seeds' mean cells) on the same scale (..._heatmaps.png),
                                    and accuracy against length with the seeds' band
                                    (..._curve.png); retrieval.md
    table(results) -> str           Markdown: accuracy per length, seeds combined

A run's own heatmap is its evaluation's picture (posjax.eval.retrieval.picture); a sweep's
heatmaps are drawn the same way (`draw`), one per point.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from posjax import io  # noqa: E402
from posjax.eval.retrieval import METRIC, draw
from posjax.results import seeds


def seed_mean(point: dict) -> dict:
    """A sweep point of `seeds.combine` with each length's cells the mean over its seeds'
    (a single run unchanged); a length some seed has no cells for keeps none."""
    if "per_seed" not in point:
        return point
    rows = []
    for row in point["lengths"]:
        members = [next(r for r in m["lengths"] if r["length"] == row["length"])
                   for m in point["per_seed"]]
        if all("cells" in m for m in members):
            row = {**row, "cells": [
                {"depth": column[0]["depth"], METRIC: float(np.mean([c[METRIC] for c in column]))}
                for column in zip(*(m["cells"] for m in members), strict=True)]}
        rows.append(row)
    return {**point, "lengths": rows}


def _heatmaps(results: list[dict], path: Path) -> Path:
    """One heatmap per sweep point (the mean of its seeds' cells), in rows of 4, one colour
    bar for all; depth labelled on the first column only."""
    results = [seed_mean(point) for point in seeds.combine([dict(r) for r in results])]
    columns = min(4, len(results))
    rows = -(-len(results) // columns)
    first = results[0]
    fig, axes = plt.subplots(rows, columns, squeeze=False, sharey=True, layout="constrained",
                             figsize=(columns * (1.0 + 0.6 * len(first["lengths"])) + 1.2,
                                      rows * (1.5 + 0.3 * len(first["depths"])) + 0.5))
    image = None
    for index, (ax, result) in enumerate(zip(axes.flat, results, strict=False)):
        title = result.get("label") or result["run"].removeprefix("encoding=")
        image = draw(ax, result, title=title + (f" (mean of {result['seeds']} seeds)"
                                                if "seeds" in result else ""))
        if index % columns:
            ax.set_ylabel("")
        if index < len(results) - columns:
            ax.set_xlabel("")
    for ax in list(axes.flat)[len(results):]:
        ax.axis("off")
    fig.colorbar(image, ax=axes, fraction=0.03, pad=0.01, label="accuracy")
    fig.suptitle(f"{first['task']} ({_method(first)}): accuracy per cell, chance "
                 f"{first['chance']:.2f}")
    io.save_figure(fig, path, dpi=150, bbox_inches="tight")
    plt.close(fig)
    return path


def _method(result: dict) -> str:
    return "no method" if result["method"] == "none" else f"method {result['method']}"


def _curves(results: list[dict], path: Path) -> Path:
    """Accuracy (mean over depths) against length, one line per sweep point with its seeds'
    band (posjax.results.seeds)."""
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for result in seeds.combine([dict(r) for r in results]):
        rows = [r for r in result["lengths"] if "acc" in r]
        if rows:
            seeds.line(ax, rows, METRIC, label=result["label"])
    lengths = sorted({row["length"] for r in results for row in r["lengths"]})
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths, [str(n) for n in lengths])
    ax.minorticks_off()
    for train_len in sorted({r["train_len"] for r in results}):
        ax.axvline(train_len, color="grey", ls="--", lw=1)
    ax.axhline(results[0]["chance"], color="grey", ls=":", lw=1)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("context length (tokens; dashed: training length, dotted: chance)")
    ax.set_ylabel("accuracy, mean over depths")
    ax.set_title(f"{results[0]['task']} ({_method(results[0])})")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5))
    io.save_figure(fig, path, dpi=150, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_sweep(results: list[dict], folder: Path) -> list[Path]:
    """Per (task, method): `retrieval_TASK[_METHOD]_heatmaps.png` (every point's heatmap) and
    `..._curve.png` (accuracy against length, seeds combined). results: labelled results
    (posjax.results.plots), one per run."""
    from posjax.eval.evaluation import result_name

    groups: dict[str, list[dict]] = {}
    for result in results:
        groups.setdefault(result_name(result), []).append(result)
    paths = []
    for name, members in sorted(groups.items()):
        stem = folder / name.removesuffix(".json")
        paths += [_heatmaps(members, Path(f"{stem}_heatmaps.png")),
                  _curves(members, Path(f"{stem}_curve.png"))]
    return paths + [io.write_text(folder / "retrieval.md", table(results))]


def table(results: list[dict]) -> str:
    """Markdown: one row per task, sweep point and method (seeds combined), one column per
    length, cells the accuracy (mean over depths; several seeds: "mean [low, high]")."""
    combined = seeds.combine([{**r, "label": f"{r['task']}: {r['label']}"} for r in results])
    lengths = sorted({row["length"] for r in combined for row in r["lengths"]})
    lines = ["| run | " + " | ".join(map(str, lengths)) + " |",
             "|" + "---|" * (len(lengths) + 1)]
    for result in sorted(combined, key=lambda r: r["label"]):
        by_length = {row["length"]: row for row in result["lengths"]}
        lines.append(f"| {result['label']} | " + " | ".join(
            seeds.cell(by_length.get(n), METRIC, 2) for n in lengths) + " |")
    trained = ", ".join(map(str, sorted({r["train_len"] for r in results})))
    chance = ", ".join(f"{c:.2f}" for c in sorted({r["chance"] for r in results}))
    lines += ["", f"Retrieval accuracy (the answer against its distractors, chance {chance}), "
              f"mean over depths, per context length; trained at {trained} tokens. "
              f"{seeds.seeds_note(combined)}"]
    return "\n".join(lines) + "\n"
