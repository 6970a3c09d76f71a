"""The report of fine-tune results (the `match` evaluation: posjax.eval.matching).

`posjax plot` on fine-tune runs (a sweep of configs/finetune.py, or several: one per
pretrained run) writes into its output folder

    finetune.json   per (pretrained run, encoding, pooling, fine-tune length, length read,
                    and what else its runs trained with where that differs: "differs"):
                    every seed's accuracy, their mean, min and max, and the data's ceiling
    finetune.md     that as a table
    finetune.png    per pretrained run (one colour each) the mean accuracy at each fine-tune
                    length, its min-max as a bar, every seed as a dot, and the ceiling (what
                    any reader of that many tokens can reach) as a dashed line, chance (0.5) as
                    a grey one
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from posjax import fileio  # noqa: E402
from posjax.errors import ConfigError  # noqa: E402
from posjax.records import RESUMABLE_CHANGES, flatten  # noqa: E402
from posjax.results import glyphs, smoke  # noqa: E402

# What a summary row groups over seeds by: a length-extension method's scores
# (--rope_scaling, --learned_extension) are a row of their own, never one more seed of the
# plain scores; and runs trained otherwise (another learning rate, long_len, theta:
# `_trained`) are rows of their own.
KEY_FIELDS = ("init_from", "encoding", "method", "extension", "pooling", "finetune_len",
              "length")
# What the label shows itself, so never a "differs" entry; and what a classifier does not
# read (it has no token head to tie: an MLM run's config carries True, a fresh one False).
_SHOWN = ("train.init_from", "model.pooling", "encoding.name", "train_len",
          "learned_extension", "model.tie_embeddings")


def label(row: dict) -> str:
    """A summary row's model as a reader names it: its encoding, the length-extension method
    and learned-table extension it was scored with, what it started from ("start", else the
    run's folder name) and its pooling (other than `cls`), and how it trained where runs of
    that encoding differ in that ("differs")."""
    start = row.get("start") or (Path(row["init_from"]).name if row["init_from"]
                                 else "no pretraining")
    if row.get("pooling", "cls") != "cls":
        start += f", {row['pooling']} pooling"
    method = row.get("method", "none")
    scored = ("" if method == "none" else f" +{method}") + (
        f" +{row['extension']} extension" if row.get("extension") else "")
    differs = f" [{row['differs']}]" if row.get("differs") else ""
    return f"{row['encoding']}{scored} ({start}){differs}"


def _trained(result: dict) -> dict:
    """What a result's model trained and was scored with but for its seed, flat ("a.b":
    value): its run's setup (posjax.results.plots: its config and how it was scored) with
    its encoding's settings, theta included, and the split scored; less what only observes a
    run (what its resumption may change: posjax.records.RESUMABLE_CHANGES) and what the
    label shows."""
    flat = flatten({**json.loads(result.get("setup") or "{}"), "encoding": result["encoding"],
                  "split": result.get("split", "test")})
    # (seq_len, batch, steps): the length is the fine-tune length, a column of its own
    if isinstance(flat.get("train.stages"), list):
        flat["train.stages"] = [stage[1:] for stage in flat["train.stages"]]
    return {key: value for key, value in flat.items()
            if key not in _SHOWN and not key.startswith(RESUMABLE_CHANGES)}


def _name_differences(groups: list[dict]) -> None:
    """Give the groups of one encoding that trained otherwise their "differs": the settings
    (dotted config keys) that tell them apart, "train.learning_rate=0.0001", the same in
    every row of a run's setup. A key in one setup alone is no difference (added to posjax
    since the other trained, it keeps the behaviour from before: as seeds are checked,
    posjax.results.seeds)."""
    by_encoding: dict[str, list[dict]] = {}
    for group in groups:
        by_encoding.setdefault(group["encoding"], []).append(group)
    for members in by_encoding.values():
        setups = [g["trained"] for g in members]
        keys = sorted({k for f in setups for k in f
                       if any(k in other and f[k] != other[k] for other in setups)})
        for group in members:
            group["differs"] = ", ".join(f"{k}={group['trained'][k]}" for k in keys
                                         if k in group["trained"])


def _start_names(groups: list[dict]) -> None:
    """Each group's "start": the shortest end of its pretrained run's path that no other
    run's shares (runs/x/mlm and runs/y/mlm: x/mlm and y/mlm), "no pretraining" for none."""
    paths = {g["init_from"] for g in groups if g["init_from"]}
    for group in groups:
        path = Path(group["init_from"])
        if not group["init_from"]:
            group["start"] = "no pretraining"
            continue
        for depth in range(1, len(path.parts) + 1):
            tail = Path(*path.parts[-depth:])
            if not any(other != group["init_from"] and Path(other).parts[-depth:] == tail.parts
                       for other in paths):
                break
        group["start"] = str(tail)


def _add_seed(group: dict, result: dict, acc: float) -> None:
    """One more seed's accuracy in `group`; a ConfigError where the group has that seed from
    another run (one fine-tune trained twice would count as two seeds)."""
    seed, folder = result.get("seed"), result.get("folder", result["run"])
    if seed is not None and seed in group["seeds"]:
        other = group["folders"][group["seeds"].index(seed)]
        if other != folder:
            raise ConfigError(
                f"runs {other} and {folder} are the same fine-tune ({label(group)}, "
                f"fine-tuned at {group['finetune_len']}) trained with the same seed {seed}: "
                "they would count as two seeds; plot one of them")
    group["seeds"].append(seed)
    group["acc"].append(acc)
    group["runs"].append(result["run"])
    group["folders"].append(folder)


def summarize(results: list[dict]) -> dict:
    """The `match` results (as posjax.results.plots.load_results reads them: one per run,
    or a label's seeds combined with "per_seed") grouped over seeds: {"kind":
    "finetune_match", "rows": [...]} (module doc). A length that not every seed of a label
    scored is left out, as `posjax plot` says (posjax.results.seeds)."""
    groups: dict[tuple, dict] = {}
    for runs in (r.get("per_seed", [r]) for r in results):
        every_seed = set.intersection(*({row["length"] for row in run["lengths"]
                                         if "error" not in row} for run in runs))
        for result, row in ((run, row) for run in runs for row in run["lengths"]):
            if "error" in row or row["length"] not in every_seed:
                continue
            extension = (result.get("learned_extension") or "no"
                         if result.get("learned_extension_given") else "")
            key = (result.get("init_from", ""), result["encoding"]["name"],
                   " ".join(str(result.get("method", "none")).split()), extension,
                   result.get("pooling", "cls"), result["train_len"], row["length"])
            trained = _trained(result)
            group = groups.setdefault((*key, json.dumps(trained, sort_keys=True, default=str)),
                                      dict(zip(KEY_FIELDS, key, strict=True), seeds=[], acc=[],
                                           runs=[], folders=[], ceiling=row["ceiling"],
                                           visible=row["visible"], trained=trained))
            _add_seed(group, result, row["acc"])
    _name_differences(list(groups.values()))
    _start_names(list(groups.values()))
    rows = [{**{k: v for k, v in g.items() if k not in ("trained", "folders")},
             "split": g["trained"].get("split", "test"),
             "mean_acc": statistics.fmean(g["acc"]), "min_acc": min(g["acc"]),
             "max_acc": max(g["acc"])}
            for g in sorted(groups.values(), key=lambda g: (label(g), g["finetune_len"],
                                                            g["length"]))]
    return {"kind": "finetune_match", "rows": rows}


def table(results: list[dict]) -> str:
    """A Markdown table of `summarize(results)`, under the smoke note where it has one."""
    return smoke.noted(summary_table(summarize(results)), results)


def summary_table(summary: dict) -> str:
    """A Markdown table of a summary (`summarize`, or its finetune.json)."""
    lines = ["| model | fine-tuned at | read | accuracy mean [min, max] | seeds | ceiling |",
             "|---|---|---|---|---|---|"]
    for row in summary["rows"]:
        lines.append(f"| {label(row)} | {row['finetune_len']} | {row['length']} | "
                     f"{row['mean_acc']:.4f} [{row['min_acc']:.4f}, {row['max_acc']:.4f}] | "
                     f"{len(row['acc'])} | {row['ceiling']:.4f} |")
    return "\n".join(lines) + (f"\n\n{_accuracy_of(summary['rows'])} (chance 0.5); the ceiling "
                               "is the most any reader of that many tokens can reach.\n")


def _accuracy_of(rows: list[dict]) -> str:
    """What the rows' accuracy was scored on: "doc_match test accuracy", another split's, or
    where they differ, that each label names its own."""
    splits = sorted({row.get("split", "test") for row in rows})
    if len(splits) == 1:
        return f"doc_match {splits[0]} accuracy"
    return "doc_match accuracy on the test split, or the split a label names"


def plot(summary: dict, path: str | Path, note: str = "") -> Path:
    """Draw `summary`'s rows read at their own fine-tune length into the PNG `path`, with
    `note` (a smoke run's: posjax.results.smoke) under the title."""
    rows = [r for r in summary["rows"] if r["length"] == r["finetune_len"]]
    lengths = sorted({r["length"] for r in rows})
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(label(row), []).append(row)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    width = 0.8 / max(len(groups), 1)
    for g, (name, group) in enumerate(sorted(groups.items())):
        for row in group:
            x = lengths.index(row["length"]) + (g - (len(groups) - 1) / 2) * width
            ax.errorbar([x], [row["mean_acc"]],
                        yerr=[[row["mean_acc"] - row["min_acc"]],
                              [row["max_acc"] - row["mean_acc"]]],
                        fmt="o", color=f"C{g}", capsize=3,
                        label=name if row is group[0] else None)
            ax.plot([x] * len(row["acc"]), row["acc"], ".", color=f"C{g}", alpha=0.5)
    ceilings = {r["length"]: r["ceiling"] for r in rows}
    for i, length in enumerate(lengths):
        ax.hlines(ceilings[length], i - 0.45, i + 0.45, colors="k", linestyles="--",
                  label="ceiling (the data)" if i == 0 else None)
    ax.axhline(0.5, color="grey", lw=0.8, label="chance (two classes)")
    ax.set_xticks(range(len(lengths)), [f"{n} tokens" for n in lengths])
    ax.set_xlabel("fine-tuned and evaluated at")
    ax.set_ylabel(_accuracy_of(rows).replace(", or ", ",\nor "))
    title = ax.set_title("long-text matching: mean over seeds, bars min-max, dots per seed"
                         + (f"\n{note}" if note else ""), fontsize=9)
    if note:
        title.set_color("firebrick")
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5))  # off the ceiling
    path = glyphs.save(fig, path, dpi=130, bbox_inches="tight")
    plt.close(fig)
    return path


def pictures(results: list[dict], out: Path, prefix: str = "") -> list[Path]:
    """finetune.json, .md and .png of `results` in `out` (module doc)."""
    del prefix  # finetune.* clash with no other report
    summary = summarize(results)
    return [fileio.write_json(out / "finetune.json", summary),
            fileio.write_text(out / "finetune.md", table(results)),
            plot(summary, out / "finetune.png", smoke.note(results))]
