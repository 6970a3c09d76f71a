"""Encodings ranked across task results by mean reciprocal rank (Kazemnejad et al. 2023's
summary), over buckets of the problem sizes no run trained on."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence

import numpy as np


def encoding_label(result: dict) -> str:
    """'rope', or 'rope+rand256' for a run trained with randomized positions (M = 256)."""
    m = result.get("randomize_positions", 0)
    name = result["encoding"]["name"]
    return f"{name}+rand{m}" if m else name


def measured(row: dict) -> bool:
    """Whether a task result's row measured anything: a size given to --lengths that the data
    has no example of measured nothing (it counts in no mean), where a size the encoding
    cannot reach (an error row) counts 0."""
    return not row.get("no_examples")


def size_bucket(size: int, train_len: int, bucket_size: int) -> int | None:
    """None for a size trained on (<= train_len); else the index of its bucket of unseen
    sizes: 0 for all of them when bucket_size <= 0, else (size - train_len - 1) // bucket_size
    (bucket_size = 5 after train_len = 20: 21-25 -> 0, 26-30 -> 1, ...)."""
    if size <= train_len:
        return None
    return 0 if bucket_size <= 0 else (size - train_len - 1) // bucket_size


def mean_reciprocal_rank(
    results: Sequence[dict],
    *,
    metric: str = "seq_acc",
    bucket_size: int = 0,
    label: Callable[[dict], str] = encoding_label,
) -> dict[str, float]:
    """{label: MRR} of task results ranked against each other (Kazemnejad et al. 2023, Fig. 1:
    NoPE 0.69, T5 0.55, ALiBi 0.50, RoPE 0.33, APE 0.22 over ten tasks).

    Groups are (task, train_len, bucket of unseen sizes) (see `size_bucket`); sizes trained on
    are left out. In a group each label scores the mean `metric` over its rows there (over
    sizes and over results sharing the label, e.g. seeds); an error row (the encoding cannot
    reach that size) or a non-finite value scores 0, a size with no example none
    (`measured`). Labels are ranked by score, best rank 1, ties sharing the better rank:
    rank = 1 + #labels scoring strictly higher. Then
        MRR(label) = mean over the groups the label appears in of 1 / rank,
    where a group of one label (a task or size no other run has) ranks nothing and counts in
    no mean.
    """
    reciprocal: dict[str, list[float]] = defaultdict(list)
    for means in _ranked_groups(results, metric, bucket_size, label):
        for name, score in means.items():
            rank = 1 + sum(other > score for other in means.values())
            reciprocal[name].append(1.0 / rank)
    return {name: float(np.mean(r)) for name, r in sorted(reciprocal.items())}


def _ranked_groups(results: Sequence[dict], metric: str, bucket_size: int,
                   label: Callable[[dict], str]) -> list[dict[str, float]]:
    """The groups `mean_reciprocal_rank` ranks, each {label: its mean `metric` there}: those
    of more than one label."""
    scores: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for result in results:
        train_len = int(result["train_len"])
        for row in filter(measured, result["lengths"]):
            bucket = size_bucket(int(row["length"]), train_len, bucket_size)
            if bucket is None:
                continue
            value = 0.0 if "error" in row else float(row[metric])
            group = (result.get("task"), train_len, bucket)
            scores[group][label(result)].append(value if math.isfinite(value) else 0.0)
    return [{name: float(np.mean(values)) for name, values in by_label.items()}
            for by_label in scores.values() if len(by_label) > 1]


def tied_groups(results: Sequence[dict], *, metric: str = "seq_acc", bucket_size: int = 0,
                label: Callable[[dict], str] = encoding_label) -> tuple[int, int]:
    """(groups where every label scores the same, groups ranked) of `mean_reciprocal_rank`:
    in a tied group each label ranks first, so where all tie the MRR of every label is 1
    and ranks nothing."""
    groups = _ranked_groups(results, metric, bucket_size, label)
    return sum(len(set(means.values())) == 1 for means in groups), len(groups)
