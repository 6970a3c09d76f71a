"""Task evaluation: a trained algorithmic or grid2d run scored at every problem size.

`posjax extrapolate --workdir=RUN` calls `evaluate_tasks` for these runs. Every evaluation
split (`data.task_eval_batches`: the training sizes' validation split and the longer test
sizes or grids) is scored per size, teacher-forced:

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

The result is an extrapolation result with protocol "task" and one row per size (`length` =
problem size n, or grid side), so `posjax plot` draws accuracy against size.
`mean_reciprocal_rank` ranks encodings over such results (Kazemnejad et al.'s summary).
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import jax
import numpy as np

from posjax import data, encoders, io
from posjax.data import algorithmic
from posjax.encoders.positions import randomize_positions
from posjax.errors import ConfigError
from posjax.eval import extrapolate
from posjax.models.transformer import ATTENTION_SITES, position_axes
from posjax.train import trainer
from posjax.train.steps import INPUT_KEY, eval_token_losses

TASK_PROTOCOL = "task"


@dataclasses.dataclass(frozen=True)
class TaskKind:
    """How one dataset kind is evaluated.

    train_size(config) -> int: the largest size trained on (train_max, or the grid side).
    reach(config, encoding, size) -> int: how many positions the encoding must define to read
        an example of this size (ConfigError when the run cannot be evaluated there).
    prepare(config, batch, key) -> batch: the positions the model saw in training.
    describe(config, size) -> dict: extra fields of that size's row.
    common_length: pad every size to the longest one, so the evaluation compiles once; only
        sound for causal models, where trailing padding never reaches earlier tokens.
    """

    train_size: Callable[..., int]
    reach: Callable[..., int]
    prepare: Callable[..., dict]
    describe: Callable[..., dict]
    common_length: bool


# --- algorithmic ------------------------------------------------------------------------


def _tokens(config, size: int) -> int:
    """Tokens in one `prompt SEP answer` example of problem size `size`."""
    return algorithmic.get_task(config.data.task).length(size)


def _algorithmic_reach(config, encoding, size: int) -> int:
    del encoding
    tokens = _tokens(config, size)
    m = int(config.train.randomize_positions)
    if not m:
        return tokens
    if tokens > m:
        raise ConfigError(
            f"size {size} has {tokens} tokens but this run draws positions from [0, {m}) "
            f"(randomize_positions={m}): train with randomize_positions >= {tokens}"
        )
    return m


def _algorithmic_prepare(config, batch: dict, key: jax.Array) -> dict:
    """batch["positions"] int32[B, T] -> T sorted draws from [0, M) per row, when randomized."""
    m = int(config.train.randomize_positions)
    if not m:
        return batch
    positions = randomize_positions(key, batch["positions"], m, batch.get("segment_ids"))
    return {**batch, "positions": np.asarray(positions)}


# --- grid2d -----------------------------------------------------------------------------


def _grid_reach(config, encoding, side: int) -> int:
    """A 2-D encoding and the axial input path read each coordinate (< side); a 1-D
    encoding's attention sites read the raster index row * grid_width + col (PatchModel)."""
    raster = position_axes(encoding) is None and (
        getattr(encoding, "absolute_last_layers", 0)
        or any(s in encoding.sites() for s in ATTENTION_SITES)
    )
    if not raster:
        return side
    width = int(config.model.grid_width)
    if side > width:
        raise ConfigError(
            f"grid side {side} is wider than model.grid_width={width}, so raster indices "
            f"row * {width} + col repeat: train with model.grid_width >= {side}"
        )
    return (side - 1) * width + side


TASK_KINDS: dict[str, TaskKind] = {
    "algorithmic": TaskKind(
        train_size=lambda config: int(config.data.train_lengths[1]),
        reach=_algorithmic_reach,
        prepare=_algorithmic_prepare,
        describe=lambda config, size: {"tokens": _tokens(config, size)},
        common_length=True,
    ),
    "grid2d": TaskKind(
        train_size=lambda config: int(config.data.grid_size),
        reach=_grid_reach,
        prepare=lambda config, batch, key: batch,
        describe=lambda config, side: {"patches": side * side},
        common_length=False,
    ),
}


# --- evaluation -------------------------------------------------------------------------


def _size_encoding(config, kind: TaskKind, base, spec: str, extension: str, size: int):
    """The encoding that evaluates `size` (a learned table may switch to its extension), or
    ConfigError. The table is at least as long as what training read (else training would
    have read NaN), hence dims.max_len = max(training length, training reach)."""
    train_reach = kind.reach(config, base, kind.train_size(config))
    reach = kind.reach(config, base, size)
    model = config.model
    dims = encoders.Dims(
        model.d_model,
        model.num_heads,
        model.head_dim or model.d_model // model.num_heads,
        max(trainer.max_train_len(config), train_reach),
    )
    return extrapolate._length_encoding(base, spec, extension, train_reach, reach, dims)


def _pad_length(batch: dict, length: int) -> dict:
    """Zero-pad axis 1 of every array to `length` (segment 0, weight 0: never scored)."""
    return {
        k: np.pad(v, [(0, 0), (0, length - v.shape[1])] + [(0, 0)] * (v.ndim - 2))
        for k, v in batch.items()
    }


def _batches_by_size(config, batch_size: int, sizes) -> dict[int, tuple[list[str], list[dict]]]:
    """{size: (splits, batches)} over every evaluation split, sizes ascending."""
    grouped: dict[int, tuple[list[str], list[dict]]] = {}
    for split, size, batch in data.task_eval_batches(config.data, batch_size):
        if sizes and size not in sizes:
            continue
        splits, batches = grouped.setdefault(size, ([], []))
        if split not in splits:
            splits.append(split)
        batches.append(batch)
    if not grouped:
        raise ConfigError(
            f"no evaluation examples of sizes {sorted(sizes)}: pick sizes between 1 and the "
            "largest test size"
        )
    return dict(sorted(grouped.items()))


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


def evaluate_tasks(
    workdir,
    *,
    sizes: Iterable[int] | None = None,
    rope_scaling: str | None = None,
    learned_extension: str | None = None,
    batch_size: int | None = None,
    output=None,
) -> dict:
    """Score the run in `workdir` at every evaluation size; write and return the result.

    sizes: only these problem sizes / grid sides (default: all). rope_scaling: a rotary
    length-extension method, learned_extension: what evaluates a learned table past its end
    ("hierarchical"; "" for an error row), both as in `extrapolate` (None: the run's
    config.eval value). batch_size: examples per batch (default config.eval.batch_size). Writes
    WORKDIR/extrapolation.json (extrapolation_<method>.json with a method) unless `output`.
    """
    workdir = Path(workdir)
    config = trainer.load_config(workdir)
    kind_name = data.dataset_kind(config.data)
    if kind_name not in TASK_KINDS:
        raise ConfigError(
            f"{workdir} trained on text ({config.data.dataset!r}): evaluate it with "
            "`posjax extrapolate`, which windows text by length"
        )
    kind = TASK_KINDS[kind_name]
    spec = rope_scaling if rope_scaling is not None else config.eval.rope_scaling
    extension = (learned_extension if learned_extension is not None
                 else config.eval.get("learned_extension", ""))
    base = trainer.build_encoding(config)
    params = trainer.restore_params(workdir, config, trainer.build(config, base))
    grouped = _batches_by_size(
        config, int(batch_size or config.eval.batch_size), set(sizes or ())
    )
    pad_to = (
        max(b["positions"].shape[1] for _, batches in grouped.values() for b in batches)
        if kind.common_length
        else None
    )
    key = jax.random.key(config.train.seed)
    models: dict = {}
    rows = []
    for size, (splits, batches) in grouped.items():
        try:
            encoding = _size_encoding(config, kind, base, spec, extension, size)
        except ConfigError as e:
            rows.append({"length": size, "splits": splits, "error": str(e)})
            continue
        if encoding not in models:
            models[encoding] = trainer.build(config, encoding)
        built = models[encoding]
        sums: dict[str, float] = defaultdict(float)
        for index, batch in enumerate(batches):
            batch_key = jax.random.fold_in(jax.random.fold_in(key, size), index)
            batch = kind.prepare(config, batch, batch_key)
            if pad_to:
                batch = _pad_length(batch, pad_to)
            losses, correct = jax.device_get(eval_token_losses(
                params, built.rest, batch, graphdef=built.graphdef,
                input_key=INPUT_KEY[config.model.kind]))
            for k, v in size_metrics(losses, correct, batch["targets"],
                                     batch["weights"]).items():
                sums[k] += v
        rows.append({"length": size, "splits": splits, **kind.describe(config, size),
                     **finish_metrics(sums)})
    result = {
        "run": workdir.name,
        "encoding": config.encoding.to_dict(),
        "train_len": kind.train_size(config),
        "head_dim": config.model.head_dim,
        "protocol": TASK_PROTOCOL,
        "stride": None,
        "method": spec or "none",
        "learned_extension": extension or None,
        "dataset": config.data.dataset,
        "task": config.data.task,
        "randomize_positions": int(config.train.randomize_positions),
        "lengths": rows,
    }
    name = "extrapolation.json" if not spec else f"extrapolation_{spec.replace(':', '-')}.json"
    io.write_json(output or workdir / name, result)
    return result


def format_table(result: dict) -> str:
    """A Markdown table of one task result: loss, accuracy and exact match per size."""
    lines = [
        f"{result['run']} ({result['dataset']} {result['task']}, trained on sizes up to "
        f"{result['train_len']}, method {result['method']})",
        "",
        "| size | loss | acc | exact match |",
        "|---|---|---|---|",
    ]
    for row in result["lengths"]:
        if "error" in row:
            lines.append(f"| {row['length']} | - | - | {row['error']} |")
        else:
            lines.append(f"| {row['length']} | {row['loss']:.4f} | {row['acc']:.4f} | "
                         f"{row['seq_acc']:.4f} |")
    return "\n".join(lines)


# --- ranking encodings across tasks -----------------------------------------------------


def encoding_label(result: dict) -> str:
    """'rope', or 'rope+rand256' for a run trained with randomized positions (M = 256)."""
    m = result.get("randomize_positions", 0)
    name = result["encoding"]["name"]
    return f"{name}+rand{m}" if m else name


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
    reach that size) or a non-finite value scores 0. Labels are ranked by score, best rank 1,
    ties sharing the better rank: rank = 1 + #labels scoring strictly higher. Then
        MRR(label) = mean over the groups the label appears in of 1 / rank.
    """
    scores: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for result in results:
        train_len = int(result["train_len"])
        for row in result["lengths"]:
            bucket = size_bucket(int(row["length"]), train_len, bucket_size)
            if bucket is None:
                continue
            value = 0.0 if "error" in row else float(row[metric])
            group = (result.get("task"), train_len, bucket)
            scores[group][label(result)].append(value if math.isfinite(value) else 0.0)
    reciprocal: dict[str, list[float]] = defaultdict(list)
    for by_label in scores.values():
        means = {name: float(np.mean(values)) for name, values in by_label.items()}
        for name, score in means.items():
            rank = 1 + sum(other > score for other in means.values())
            reciprocal[name].append(1.0 / rank)
    return {name: float(np.mean(r)) for name, r in sorted(reciprocal.items())}
