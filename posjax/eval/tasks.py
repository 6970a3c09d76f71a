"""Task evaluation: a trained algorithmic or grid2d run scored at every problem size.

`posjax extrapolate --workdir=RUN` scores these runs with `TaskEvaluation`. Every evaluation
split (the data kind's `task_batches`: the training sizes' validation split and the longer
test sizes or grids) is scored per size, teacher-forced:

    loss      mean cross-entropy over the scored targets (answer tokens, or grid cells)
    acc           token accuracy: share of scored targets whose argmax is right
    seq_acc       exact match: share of examples whose every scored target is right
    balanced_acc  mean over target classes of their accuracy (grid2d: the background class
                  grows with the grid, (S-1)^2 / S^2 of the cells for row_col, so `acc` of a
                  constant guess rises with S while this stays at 1 / classes)

A causal model's argmax at answer token i is what greedy decoding emits there once answer
tokens < i are right, so seq_acc is the exact-match accuracy of greedy decoding, the metric of
Kazemnejad et al. 2023 ("The Impact of Positional Encoding on Length Generalization in
Transformers", arXiv:2305.19466).

Positions are the ones the run trained with: 0..T-1 per example, or, when trained with
randomized positions (train.randomize_positions = M), T sorted distinct draws from [0, M) per
example (seeded), since Ruoss et al. 2023 (arXiv:2305.16843) randomize at test time as well.
A size whose positions the encoding cannot reach (a learned table shorter than the example,
T > M, a grid wider than model.grid_width) gets an error row instead of numbers, as in
posjax.eval.extrapolate.

What a size means, how far positions reach and how positions are drawn are the data kind's
(`posjax.data.DataKind`: train_size, reach, prepare, describe, common_length); this module is
the evaluation over them. The result is an extrapolation result with protocol "task" and one
row per size (`length` = problem size n, or grid side), so `posjax plot` draws accuracy
against size; posjax.results.ranking ranks encodings over such results.
"""

from __future__ import annotations

import math
from collections import defaultdict

import jax
import numpy as np

from posjax import data
from posjax.errors import ConfigError
from posjax.eval.evaluation import TASK_PROTOCOL, TEXT_STEM, Evaluation, register


def _pad_length(batch: dict, length: int) -> dict:
    """Zero-pad axis 1 of every array to `length` (segment 0, weight 0: never scored)."""
    return {
        k: np.pad(v, [(0, 0), (0, length - v.shape[1])] + [(0, 0)] * (v.ndim - 2))
        for k, v in batch.items()
    }


def _batches_by_size(kind, batch_size: int,
                     sizes) -> tuple[dict[int, tuple[list[str], list[dict]]], str]:
    """({size: (splits, batches)} over every evaluation split, sizes ascending (those of
    `sizes` where given), the sizes the splits hold, in words)."""
    grouped: dict[int, tuple[list[str], list[dict]]] = {}
    held = set()
    for split, size, batch in kind.task_batches(batch_size):
        held.add(size)
        if sizes and size not in sizes:
            continue
        splits, batches = grouped.setdefault(size, ([], []))
        if split not in splits:
            splits.append(split)
        batches.append(batch)
    absent = sorted(set(range(min(held), max(held) + 1)) - held) if held else []
    words = (f"the evaluation splits hold sizes {min(held)}-{max(held)}"
             + (f" but {', '.join(map(str, absent))}" if absent else "")) if held else (
        "the evaluation splits hold no example")
    if not grouped:
        raise ConfigError(f"no evaluation examples of sizes {sorted(sizes)}: {words}")
    return dict(sorted(grouped.items())), words


def size_metrics(losses, correct, targets, weights) -> dict[str, float]:
    """Sums one batch adds to a size's metrics (add them key by key; see finish_metrics).

    losses: float[B, ...], correct: bool[B, ...], targets: int[B, ...], weights: float[B, ...]
    (0 = not scored). An example counts when it has a scored target; it is exactly right when
    every scored target is. "class_<c>_right" / "class_<c>_total" count scored targets of
    class c, for the class-balanced accuracy.
    """
    b = len(weights)
    w = np.asarray(weights, np.float64).reshape(b, -1)
    right = np.asarray(correct, bool).reshape(b, -1)
    real = w.sum(axis=1) > 0
    # where, not a product: a padding row attends to nothing and may hold nan
    loss = np.where(w > 0, np.asarray(losses, np.float64).reshape(b, -1), 0.0)
    sums = {
        "loss_sum": float(np.sum(loss * w)),
        "correct_sum": float(np.sum(right * w)),
        "weight_sum": float(w.sum()),
        "exact_sum": float(np.sum(np.all(right | (w == 0), axis=1) & real)),
        "examples": float(real.sum()),
    }
    labels = np.asarray(targets).reshape(b, -1)
    for c in np.unique(labels[w > 0]):
        of_class = (labels == c) * w
        sums[f"class_{c}_right"] = float(np.sum(of_class * right))
        sums[f"class_{c}_total"] = float(np.sum(of_class))
    return sums


def finish_metrics(sums: dict[str, float]) -> dict:
    """A size's row from its summed `size_metrics`: loss, ppl, acc, seq_acc (exact match),
    balanced_acc (mean over target classes of their recall: 1 / classes for a constant
    guess whatever the class mix, so a grid's growing background share cannot lift it),
    examples and scored targets."""
    loss = sums["loss_sum"] / max(sums["weight_sum"], 1.0)
    classes = [k[: -len("_total")] for k in sums if k.startswith("class_") and
               k.endswith("_total")]
    recalls = [sums[f"{c}_right"] / sums[f"{c}_total"] for c in classes if sums[f"{c}_total"]]
    return {
        "loss": loss,
        "ppl": math.exp(min(loss, 50.0)),
        "acc": sums["correct_sum"] / max(sums["weight_sum"], 1.0),
        "seq_acc": sums["exact_sum"] / max(sums["examples"], 1.0),
        "balanced_acc": float(np.mean(recalls)) if recalls else 0.0,
        "examples": int(sums["examples"]),
        "scored": int(sums["weight_sum"]),
    }


@register("task")
class TaskEvaluation(Evaluation):
    """An algorithmic or grid2d run scored per problem size (see the module docstring)."""

    options = ("lengths", "batch_size")
    report = "task"
    stem = TEXT_STEM
    columns = (("loss", "loss", ".4f"), ("acc", "acc", ".4f"),
               ("exact match", "seq_acc", ".4f"))
    # a metric's short header in a table (the kind's `panels` name them on a plot's axes)
    HEADERS = {"acc": "acc", "seq_acc": "exact match", "balanced_acc": "balanced acc"}

    def run(self, *, lengths=None, batch_size=None) -> dict:
        """lengths: only these problem sizes / grid sides (default: all); batch_size: examples
        per batch (default config.eval.batch_size)."""
        experiment = self.experiment
        config, kind = experiment.config, experiment.data
        grouped, held = _batches_by_size(kind, int(batch_size or config.eval.batch_size),
                                         set(lengths or ()))
        pad_to = (max(b["positions"].shape[1] for _, batches in grouped.values()
                      for b in batches) if kind.common_length else None)
        train_reach = kind.reach(config, experiment.encoding, kind.train_size(config))
        rows = []
        for size, (splits, batches) in grouped.items():
            try:
                encoding = self.encoding_at(
                    train_reach, kind.reach(config, experiment.encoding, size))
            except ConfigError as e:
                rows.append({"length": size, "splits": splits, "error": str(e)})
                continue
            rows.append({"length": size, "splits": splits, **kind.describe(config, size),
                         **self.score_size(encoding, size, batches, pad_to)})
        # given, and not in the data: measured nothing, so it counts in no mean
        rows += [{"length": size, "error": f"no evaluation example of this size ({held})",
                  "no_examples": True} for size in set(lengths or ()) - set(grouped)]
        rows.sort(key=lambda row: row["length"])
        return self.result(kind.train_size(config), rows, protocol=TASK_PROTOCOL, stride=None,
                           dataset=config.data.dataset, task=config.data.task,
                           randomize_positions=int(config.train.randomize_positions))

    def within(self, limit: int) -> str:
        """The largest size (or grid side) whose positions the encoding's `limit` holds:
        --lengths takes sizes, not tokens."""
        config, kind = self.experiment.config, self.experiment.data
        size = kind.train_size(config)
        while True:
            try:  # a grid wider than the model indexes is past reach too
                if kind.reach(config, self.experiment.encoding, size + 1) > limit:
                    break
            except ConfigError:
                break
            size += 1
        return f"evaluate sizes up to {size} (--lengths={size})"

    def score_size(self, encoding, size: int, batches: list[dict], pad_to: int | None) -> dict:
        """One size's metrics (`finish_metrics`), its positions drawn as in training."""
        config, kind = self.experiment.config, self.experiment.data
        key = jax.random.key(config.train.seed)
        sums: dict[str, float] = defaultdict(float)
        for index, batch in enumerate(batches):
            batch = kind.prepare(config, batch,
                                 jax.random.fold_in(jax.random.fold_in(key, size), index))
            if pad_to:
                batch = _pad_length(batch, pad_to)
            losses, correct = self.token_losses(encoding, batch)
            for k, v in size_metrics(losses, correct, batch["targets"],
                                     batch["weights"]).items():
                sums[k] += v
        return finish_metrics(sums)

    @classmethod
    def result_columns(cls, result: dict) -> tuple[tuple[str, str, str], ...]:
        """The loss, then the data kind's own metrics (its `panels`: grid2d's class-balanced
        accuracy, where exact match of a whole grid is 0 for every run)."""
        kind = data.kinds.kind_class(result.get("dataset", "algorithmic"))
        return (cls.columns[0],
                *((cls.HEADERS.get(key, key), key, ".4f") for key, _ in kind.panels))

    @classmethod
    def row_header(cls, result: dict) -> str:
        """The data kind's own word for a size ("grid side (cells)", "problem size n")."""
        kind = data.kinds.kind_class(result.get("dataset", "algorithmic"))
        return getattr(kind, "size_label", "") or "size"

    @classmethod
    def title(cls, result: dict) -> str:
        return (f"{result['run']} ({result['dataset']} {result['task']}, trained on sizes up "
                f"to {result['train_len']}, method {result['method']})")
