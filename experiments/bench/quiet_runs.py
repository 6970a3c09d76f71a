"""The training-speed table of experiments/bench/README.md, from train.json's speed section.

    python experiments/bench/quiet_runs.py

`scripts/bench_train.py --sections speed --processes 2 --repeats 3` measured the step in 2
fresh processes, 3 round-robin visits each, on a quiet machine with huge-page malloc (as
posjax runs). Per encoding the table gives the median and min-max over all 6 visits of
tokens/s, the ratio to `none` (within each visit) and MFU (against the matmul peak of the
same visit); a target is met only if the median meets it.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent
SPEED = HERE / "train.json"
# encoding -> (what the target bounds, bound): attention-benchmark targets of the training step.
TARGETS = {"rope": ("ratio_to_none", 1.1), "xpos": ("ratio_to_none", 1.1),
           "alibi": ("ratio_to_none", 1.3), "t5": ("ratio_to_none", 1.3),
           "kerple_log": ("ratio_to_none", 1.3), "fire": ("ratio_to_none", 1.3),
           "shaw": ("ratio_to_none", 2.0), "xl": ("ratio_to_none", 2.0),
           "deberta": ("ratio_to_none", 2.0)}
MFU_TARGET = ("rope", 0.40)


def visits() -> dict[str, list[dict]]:
    """encoding -> every visit of every process."""
    return {row["encoding"]: row["visits"]
            for row in json.loads(SPEED.read_text())["speed"]["rows"]}


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
    for encoding, runs in visits().items():
        lines.append(
            f"| {encoding} | {_spread([r['tokens_per_s'] for r in runs], lambda v: f'{v:.0f}')} "
            f"| {_spread([r['ratio_to_none'] for r in runs], lambda v: f'{v:.2f}')} "
            f"| {_spread([r['mfu'] for r in runs], lambda v: f'{100 * v:.1f}%')} "
            f"| {_target(encoding, runs)} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
