"""Pictures of retrieval results (posjax.eval.retrieval): accuracy per (length, depth) cell.

    picture(result, path)           one run's heatmap: length on x, depth on y, accuracy
                                    0..1 in colour and in numbers, the training length marked
    plot_sweep(results, folder)     per task and method: one heatmap per sweep point (its
                                    seeds' mean cells) on the same scale (..._heatmaps.png),
                                    and accuracy against length with the seeds' band
                                    (..._curve.png); retrieval.md
    table(results) -> str           Markdown: accuracy per length, seeds combined

A sweep's heatmaps are drawn as a run's (`draw`), one per point.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from posjax import fileio  # noqa: E402
from posjax.results import glyphs, seeds, smoke  # noqa: E402

# Red (0) through yellow to green (1), the scale of Kamradt's needle plots; every cell also
# prints its number, so the picture reads without colour.
CMAP = "RdYlGn"
METRIC = "acc"


def grid(result: dict, metric: str = METRIC) -> tuple[list[int], list[float], np.ndarray]:
    """(lengths, depths, values float[D, L]) of a result; NaN where a length has no cells (an
    error row)."""
    lengths = [row["length"] for row in result["lengths"]]
    depths = list(result["depths"])
    values = np.full((len(depths), len(lengths)), np.nan)
    for j, row in enumerate(result["lengths"]):
        for i, cell in enumerate(row.get("cells", [])):
            values[i, j] = cell[metric]
    return lengths, depths, values


def draw(ax, result: dict, *, title: str, metric: str = METRIC):
    """One heatmap on `ax`; returns the image (for a shared colour bar)."""
    lengths, depths, values = grid(result, metric)
    cmap = plt.get_cmap(CMAP).with_extremes(bad="0.85")  # grey: a length not scored
    image = ax.imshow(values, cmap=cmap, vmin=0.0, vmax=1.0, aspect="auto", origin="upper")
    for (i, j), value in np.ndenumerate(values):
        ax.text(j, i, "n/a" if math.isnan(value) else f"{value:.2f}", ha="center",
                va="center", fontsize=8,
                color="black" if math.isnan(value) or 0.2 < value < 0.85 else "white")
    # a length whose depths hardly move the key (posjax.eval.retrieval.depth_note): starred
    noted = {row["length"] for row in result["lengths"] if row.get("note")}
    ax.set_xticks(range(len(lengths)), [f"{n}*" if n in noted else str(n) for n in lengths])
    ax.set_yticks(range(len(depths)), [f"{d:.0%}" for d in depths])
    # the boundary between the lengths trained on (<= train_len) and the longer ones
    trained = sum(n <= result["train_len"] for n in lengths)
    if trained < len(lengths):
        ax.axvline(trained - 0.5, color="black", lw=2, ls="--")
        ax.annotate(f"trained at {result['train_len']}", (trained - 0.5, -0.5),
                    xytext=(3, 3), textcoords="offset points", fontsize=7, va="bottom",
                    annotation_clip=False)
    ax.set_xlabel("context length (tokens" + ("; *: the key's depth hardly varies)"
                                              if noted else ")"))
    ax.set_ylabel("depth of the key")
    ax.set_title(title, fontsize=9, pad=14)
    return image


def trials_text(results: list[dict]) -> str:
    """'N trials per cell' (or 'N-M trials per cell' where cells differ) over `results`."""
    counts = sorted({cell["trials"] for result in results for row in result["lengths"]
                     for cell in row.get("cells", []) if "trials" in cell})
    span = f"{counts[0]}-{counts[-1]}" if len(counts) > 1 else (str(counts[0]) if counts
                                                                  else "no")
    return f"{span} trial{'' if span == '1' else 's'} per cell"


def _label(result: dict) -> str:
    return f"{result['task']}, {result.get('label') or result['run']}" + (
        f" +{' '.join(result['method'].split())}"  # one line, as plots' labels
        if result["method"] != "none" and "label" not in result else "")


def picture(result: dict, path: Path) -> Path:
    """One run's heatmap, written atomically to `path` (`posjax extrapolate` writes it next
    to the result, same name, .png)."""
    fig, ax = plt.subplots(layout="constrained",
                           figsize=(2.6 + 0.8 * len(result["lengths"]),
                                    1.6 + 0.34 * len(result["depths"])))
    image = draw(ax, result, title=f"{_label(result)}: accuracy over {trials_text([result])} "
                                   f"(chance {result['chance']:.2f})")
    fig.colorbar(image, ax=ax, fraction=0.08, pad=0.03, label="accuracy")
    smoke.titled(fig, "", [result])
    glyphs.save(fig, path, dpi=150, bbox_inches="tight")
    plt.close(fig)
    return path


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
                {"depth": column[0]["depth"], METRIC: float(np.mean([c[METRIC] for c in column])),
                 **{key: column[0][key] for key in ("trials",) if key in column[0]}}
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
    smoke.titled(fig, f"{first['task']} ({_method(first)}): accuracy over "
                      f"{trials_text(results)}, chance {first['chance']:.2f}", results)
    glyphs.save(fig, path, dpi=150, bbox_inches="tight")
    plt.close(fig)
    return path


def _method(result: dict) -> str:
    return "no method" if result["method"] == "none" else f"method {result['method']}"


def _curves(results: list[dict], path: Path) -> Path:
    """Accuracy (mean over depths) against length, one line per sweep point with its seeds'
    band (posjax.results.seeds)."""
    fig, ax = plt.subplots(figsize=(7.5, 4.8), layout="constrained")  # room for the title
    combined = seeds.combine([dict(r) for r in results])
    colors = glyphs.colours(r["label"] for r in combined)
    for result in combined:
        rows = [r for r in result["lengths"] if "acc" in r]
        if rows:
            seeds.line(ax, rows, METRIC, label=result["label"], color=colors[result["label"]])
    lengths = sorted({row["length"] for r in results for row in r["lengths"]})
    glyphs.length_axis(ax, lengths)
    marks = glyphs.training_lengths(ax, combined, colors)
    ax.axhline(results[0]["chance"], color="grey", ls=":", lw=1)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel(f"context length (tokens; {marks}, dotted: chance)")
    ax.set_ylabel("accuracy, mean over depths")
    smoke.titled(fig, f"{results[0]['task']} ({_method(results[0])})"
                 + seeds.band_note(combined), results)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5))
    glyphs.save(fig, path, dpi=150, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_sweep(results: list[dict], folder: Path) -> list[Path]:
    """Per (task, method): `retrieval_TASK[_METHOD]_heatmaps.png` (every point's heatmap) and
    `..._curve.png` (accuracy against length, seeds combined). results: labelled results
    (posjax.results.plots), one per run."""
    groups: dict[str, list[dict]] = {}
    for result in results:
        groups.setdefault(result["file"], []).append(result)  # the file it was read from
    paths = []
    for name, members in sorted(groups.items()):
        stem = folder / name.removesuffix(".json")
        paths += [_heatmaps(members, Path(f"{stem}_heatmaps.png")),
                  _curves(members, Path(f"{stem}_curve.png"))]
    return paths + [fileio.write_text(folder / "retrieval.md", table(results))]


def table(results: list[dict]) -> str:
    """Markdown: per task (a table each, with its chance), one row per sweep point and
    method (seeds combined), one column per length, cells the accuracy (mean over depths;
    several seeds: "mean [low, high]"); the lengths not every seed of a point scored, named."""
    tasks = sorted({r["task"] for r in results})
    return smoke.noted("\n".join(
        (f"Task {task}:\n\n" if len(tasks) > 1 else "")
        + _task_table([r for r in results if r["task"] == task]) for task in tasks), results)


def _task_table(results: list[dict]) -> str:
    """`table` of one task's results."""
    combined = seeds.combine([{**r, "label": f"{r['task']}: {r['label']}"} for r in results])
    lengths = sorted({row["length"] for r in combined for row in r["lengths"]})
    lines = ["| run | " + " | ".join(map(str, lengths)) + " |",
             "|" + "---|" * (len(lengths) + 1)]
    for result in combined:  # in the order of the pictures: the sweep's
        by_length = {row["length"]: row for row in result["lengths"]}
        lines.append(f"| {result['label']} | " + " | ".join(
            seeds.cell(by_length.get(n), METRIC, 2) for n in lengths) + " |")
    trained = ", ".join(map(str, sorted({r["train_len"] for r in results})))
    lines += ["", f"Retrieval accuracy (the answer against its distractors, chance "
              f"{results[0]['chance']:.2f}), mean over depths, per context length; trained at "
              f"{trained} tokens. {seeds.seeds_note(combined)}"]
    partial = [f"{r['label']} ({', '.join(map(str, r['partial_lengths']))})"
               for r in combined if r.get("partial_lengths")]
    if partial:
        lines += ["", f"Left out, scored by some seeds only: {'; '.join(partial)}."]
    if unscored := seeds.unscored_note(combined, METRIC):
        lines += ["", unscored]
    return "\n".join(lines) + "\n"
