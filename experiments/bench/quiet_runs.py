"""The training-speed table of experiments/bench/README.md from every quiet run on record.

    python experiments/bench/quiet_runs.py

Three runs of `scripts/bench_train.py --sections speed` on 2026-11-21 measured the same code
on a quiet machine with huge-page malloc (as posjax runs): train.json and
train_runs/quiet_speed_hugetlb_run{1,2}.json, each in its own process. Per encoding the table
gives the median and min-max over the three runs of tokens/s, the ratio to `none` (taken
within each run) and MFU; a target is met only if the median meets it.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNS = ("train.json", "train_runs/quiet_speed_hugetlb_run1.json",
        "train_runs/quiet_speed_hugetlb_run2.json")
# encoding -> (what the target bounds, bound): attention-benchmark targets of the training step.
TARGETS = {"rope": ("ratio_to_none", 1.1), "xpos": ("ratio_to_none", 1.1),
           "alibi": ("ratio_to_none", 1.3), "t5": ("ratio_to_none", 1.3),
           "kerple_log": ("ratio_to_none", 1.3), "fire": ("ratio_to_none", 1.3),
           "shaw": ("ratio_to_none", 2.0), "xl": ("ratio_to_none", 2.0),
           "deberta": ("ratio_to_none", 2.0)}
MFU_TARGET = ("rope", 0.40)


def rows() -> dict[str, list[dict]]:
    """encoding -> its row of each run."""
    out: dict[str, list[dict]] = {}
    for name in RUNS:
        for row in json.loads((HERE / name).read_text())["speed"]["rows"]:
            out.setdefault(row["encoding"], []).append(row)
    return out


def _spread(values, fmt) -> str:
    return f"{fmt(statistics.median(values))} ({fmt(min(values))}-{fmt(max(values))})"


def _target(encoding: str, runs: list[dict]) -> str:
    notes = []
    if encoding == MFU_TARGET[0]:
        met = statistics.median(r["mfu"] for r in runs) >= MFU_TARGET[1]
        notes.append(f"MFU >= {MFU_TARGET[1]:.0%}: {'met' if met else '**not met**'}")
    if encoding in TARGETS:
        key, bound = TARGETS[encoding]
        met = statistics.median(r[key] for r in runs) <= bound
        notes.append(f"<= {bound}x: {'met' if met else '**not met**'}")
    return "; ".join(notes)


def table() -> str:
    lines = ["| encoding | tokens/s | ratio to none | MFU | target, on the median |",
             "|---|---|---|---|---|"]
    for encoding, runs in rows().items():
        lines.append(
            f"| {encoding} | {_spread([r['tokens_per_s'] for r in runs], lambda v: f'{v:.0f}')} "
            f"| {_spread([r['ratio_to_none'] for r in runs], lambda v: f'{v:.2f}')} "
            f"| {_spread([r['mfu'] for r in runs], lambda v: f'{100 * v:.1f}%')} "
            f"| {_target(encoding, runs)} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
