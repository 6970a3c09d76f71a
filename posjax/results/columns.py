"""The report of an evaluation that names none of posjax's (`Evaluation.report = "columns"`,
an evaluation of the user's own: docs/extending.md): its table's columns against length.

`posjax plot` on runs that hold such results writes into its output folder, per evaluation
NAME (the result's "evaluation"),

    NAME.png   a panel per numeric column of the evaluation's table (the result's
               "columns"), the column's value against evaluation length, a line per run
               (dashed: the training length)
    NAME.md    per column, a table of its values: a row per run, a column per length

a sweep's seeds of one point combined, as the text report combines them: their mean, and
its interval in brackets and as a band (posjax.results.seeds).
"""

from __future__ import annotations

import numbers
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from posjax import fileio  # noqa: E402
from posjax.results import glyphs, seeds, smoke  # noqa: E402


def _by_evaluation(results: list[dict]) -> dict[str, list[dict]]:
    groups: dict[str, list[dict]] = {}
    for result in results:
        groups.setdefault(result["evaluation"], []).append(result)
    return groups


def _number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _numeric_columns(results: list[dict]) -> list[tuple[str, str, str]]:
    """The (header, row key, format) columns of `results` that hold a number in some row."""
    return [tuple(column) for column in results[0]["columns"]
            if any(_number(row.get(column[1])) for r in results for row in r["lengths"])]


def _lengths(results: list[dict]) -> list[int]:
    return sorted({row["length"] for r in results for row in r["lengths"]})


def _formatted(value, spec: str) -> str:
    if not _number(value):
        return "-"
    try:
        return format(value, spec)
    except ValueError:  # "d" for a float: a mean over seeds
        return f"{value:g}"


def _cell(row: dict | None, key: str, spec: str) -> str:
    """A row's value, and its seeds' interval in brackets where it is a mean over seeds."""
    value = (row or {}).get(key)
    interval = (row or {}).get(f"{key}_interval")
    if not _number(value) or not interval:
        return _formatted(value, spec)
    low, high = (_formatted(v, spec) for v in interval)
    return f"{_formatted(value, spec)} [{low}, {high}]"


def table(results: list[dict]) -> str:
    """Per evaluation and numeric column, a Markdown table: a row per run (its label), a
    column per length."""
    blocks = []
    for name, members in _by_evaluation(results).items():
        lengths = _lengths(members)
        for header, key, spec in _numeric_columns(members):
            lines = [f"{name}: {header} by evaluation length", "",
                     "| run | " + " | ".join(map(str, lengths)) + " |",
                     "|---|" + "---|" * len(lengths)]
            for result in members:
                by_length = {row["length"]: row for row in result["lengths"]}
                lines.append(f"| {result['label']} | " + " | ".join(
                    _cell(by_length.get(length), key, spec) for length in lengths) + " |")
            blocks.append("\n".join(lines))
    note = seeds.seeds_note(results)
    return smoke.noted("\n\n".join(blocks) + f"\n\n{note}", results) + "\n"


def _picture(name: str, members: list[dict], path: Path) -> Path:
    columns, lengths = _numeric_columns(members), _lengths(members)
    fig, axes = plt.subplots(1, len(columns), figsize=(5 * len(columns) + 2.5, 4.5),
                             squeeze=False)
    colors = glyphs.colours(r["label"] for r in members)
    for ax, (header, key, _) in zip(axes[0], columns, strict=True):
        for result in members:
            rows = [row for row in result["lengths"] if _number(row.get(key))]
            if rows:
                seeds.line(ax, rows, key, label=result["label"], color=colors[result["label"]])
        marks = glyphs.training_lengths(ax, members, colors)
        glyphs.length_axis(ax, lengths)
        ax.set_xlabel(f"evaluation length (tokens; {marks})")
        ax.set_title(header)
        ax.grid(True, alpha=0.3)
    glyphs.legend(fig, *axes[0][-1].get_legend_handles_labels(), loc="center left",
                  bbox_to_anchor=(1.0, 0.5), fontsize=8)
    smoke.titled(fig, f"{name}: each column against evaluation length"
                 + seeds.band_note(members), members)
    fig.tight_layout()
    glyphs.save(fig, path, dpi=130, bbox_inches="tight")
    plt.close(fig)
    return path


def pictures(results: list[dict], out: Path, prefix: str = "") -> list[Path]:
    """NAME.png and NAME.md per evaluation NAME of `results` (the picture where a column
    holds numbers)."""
    del prefix  # each evaluation's files carry its own name
    paths = []
    for name, members in _by_evaluation(results).items():
        if _numeric_columns(members):
            paths.append(_picture(name, members, out / f"{name}.png"))
        paths.append(fileio.write_text(out / f"{name}.md", table(members)))
    return paths
