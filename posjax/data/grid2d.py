"""A 2-D grid task whose answer depends on 2-D position: train on 8x8, test on 12x12, 16x16.

A grid of side S holds one random colour per cell (`num_colors`, distractors) and one marked
cell. Each cell is a patch `float32[1 + num_colors]`: channel 0 flags the marked cell, the
rest one-hot its colour. Positions are (row, col), row-major. Every cell has a target:

    row_col    0 = elsewhere, 1 = same row as the mark, 2 = same column, 3 = the mark itself
    manhattan  min(|row - mark_row| + |col - mark_col|, max_distance)

Both need the *relative 2-D offset* to the mark, which a 2-D relative encoding (axial RoPE)
gives directly at any grid size; a 1-D flattened index p = row * S + col encodes "same row"
as floor(p / S) = floor(p' / S), which depends on S, so it does not carry over from 8x8 to
16x16 (Heo et al. 2024, "Rotary Position Embedding for Vision Transformer", arXiv:2403.13298).

Splits: train and validation at `grid_size`, and `test_<S>` for each S in `test_grid_sizes`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator

import numpy as np
import tensorflow_datasets as tfds

from posjax.data import evaluation, kinds, training
from posjax.data.builders import LocalBuilder, LocalDatasetInfo
from posjax.data.specs import BatchSpec
from posjax.encoders.base import ATTENTION_SITES, grid_position_form
from posjax.errors import ConfigError, unknown


@dataclasses.dataclass(frozen=True)
class GridTask:
    """targets(side, mark_row, mark_col, max_distance) -> int32[side * side] (row-major)."""

    targets: Callable[[int, int, int, int], np.ndarray]
    num_classes: Callable[[int], int]  # max_distance -> classes


GRID_TASKS: dict[str, GridTask] = {}


def grid_task(name: str, num_classes: Callable[[int], int]):
    """Decorator registering a target rule under `name` (what users type as data.task)."""

    def wrap(fn):
        GRID_TASKS[name] = GridTask(fn, num_classes)
        return fn

    return wrap


def grid_positions(side: int) -> np.ndarray:
    """int32[side * side, 2]: (row, col) of each cell, row-major."""
    rows, cols = np.divmod(np.arange(side * side), side)
    return np.stack([rows, cols], axis=1).astype(np.int32)


@grid_task("row_col", num_classes=lambda max_distance: 4)
def row_col_targets(side: int, mark_row: int, mark_col: int, max_distance: int) -> np.ndarray:
    """0 elsewhere, 1 same row, 2 same column, 3 the marked cell."""
    del max_distance
    rows, cols = grid_positions(side).T
    same_row, same_col = rows == mark_row, cols == mark_col
    targets = np.where(same_row, 1, np.where(same_col, 2, 0))
    return np.where(same_row & same_col, 3, targets).astype(np.int32)


@grid_task("manhattan", num_classes=lambda max_distance: max_distance + 1)
def manhattan_targets(side: int, mark_row: int, mark_col: int, max_distance: int) -> np.ndarray:
    """min(|dr| + |dc|, max_distance): distances past max_distance share the last class."""
    rows, cols = grid_positions(side).T
    distance = np.abs(rows - mark_row) + np.abs(cols - mark_col)
    return np.minimum(distance, max_distance).astype(np.int32)


def get_grid_task(name: str) -> GridTask:
    if name not in GRID_TASKS:
        raise unknown("grid2d task", name, GRID_TASKS)
    return GRID_TASKS[name]


def make_grid_example(
    task_name: str, rng: np.random.Generator, side: int, num_colors: int, max_distance: int
) -> dict:
    """patches float32[N, 1 + num_colors], positions int32[N, 2], targets int32[N], N = side**2."""
    n = side * side
    colors = rng.integers(0, num_colors, n)
    mark = int(rng.integers(0, n))
    patches = np.zeros((n, 1 + num_colors), np.float32)
    patches[np.arange(n), 1 + colors] = 1.0
    patches[mark, 0] = 1.0
    targets = get_grid_task(task_name).targets(side, mark // side, mark % side, max_distance)
    return {"patches": patches, "positions": grid_positions(side), "targets": targets}


@dataclasses.dataclass(eq=False)
class Grid2dConfig(tfds.core.BuilderConfig):
    """One grid task with its sizes; `grid2d_config` names it after every field."""

    task: str = "row_col"
    grid_size: int = 8
    test_grid_sizes: tuple[int, ...] = (12, 16)
    num_colors: int = 4
    max_distance: int = 4
    num_train_examples: int = 20_000
    num_eval_examples: int = 500
    generation_seed: int = 0

    def split_sides(self) -> dict[str, int]:
        """{split name: grid side}: train, validation, test_<S>..."""
        sides = {"train": self.grid_size, "validation": self.grid_size}
        sides.update({f"test_{s}": s for s in self.test_grid_sizes})
        return sides


def grid2d_config(
    task: str,
    grid_size: int,
    test_grid_sizes: tuple[int, ...],
    num_colors: int,
    max_distance: int,
    num_train_examples: int,
    num_eval_examples: int,
    generation_seed: int,
) -> Grid2dConfig:
    """Validated config named e.g. 'row_col-g8-test12_16-c4-d4-20000x500-seed0'."""
    get_grid_task(task)
    sides = (grid_size, *test_grid_sizes)
    if min(sides) < 2 or num_colors < 1 or max_distance < 1:
        raise ConfigError(
            f"grid2d needs grid sizes >= 2, num_colors >= 1, max_distance >= 1; got sizes "
            f"{sides}, num_colors={num_colors}, max_distance={max_distance}"
        )
    if num_train_examples < 1 or num_eval_examples < 1:
        raise ConfigError("data.num_train_examples and data.num_eval_examples must be >= 1")
    below = [s for s in test_grid_sizes if s < grid_size]
    if below:
        raise ConfigError(
            f"test_grid_sizes={'+'.join(map(str, test_grid_sizes))}: side {below[0]} is below "
            f"grid_size={grid_size}, the one side trained on, yet a table counts it among the "
            f"sides seen: give test sides >= {grid_size}")
    tests = "_".join(str(int(s)) for s in test_grid_sizes) or "none"
    return Grid2dConfig(
        name=(
            f"{task}-g{grid_size}-test{tests}-c{num_colors}-d{max_distance}-"
            f"{num_train_examples}x{num_eval_examples}-seed{generation_seed}"
        ),
        description=f"grid2d task {task}",
        task=task,
        grid_size=int(grid_size),
        test_grid_sizes=tuple(int(s) for s in test_grid_sizes),
        num_colors=int(num_colors),
        max_distance=int(max_distance),
        num_train_examples=int(num_train_examples),
        num_eval_examples=int(num_eval_examples),
        generation_seed=int(generation_seed),
    )


def generate_grid_split(cfg: Grid2dConfig, split: str) -> Iterator[dict]:
    """The examples of `split`, deterministic in (generation_seed, split)."""
    sides = cfg.split_sides()
    count = cfg.num_train_examples if split == "train" else cfg.num_eval_examples
    rng = np.random.default_rng([cfg.generation_seed, list(sides).index(split), sides[split]])
    for _ in range(count):
        yield make_grid_example(cfg.task, rng, sides[split], cfg.num_colors, cfg.max_distance)


class Grid2d(LocalBuilder):
    """Generated 2-D grid tasks (see the module docstring)."""

    VERSION = tfds.core.Version("1.0.0")

    def _info(self) -> tfds.core.DatasetInfo:
        patch_dim = 1 + self.builder_config.num_colors
        return LocalDatasetInfo(
            builder=self,
            description=__doc__.split("\n\n")[0],
            features=tfds.features.FeaturesDict(
                {
                    "patches": tfds.features.Tensor(shape=(None, patch_dim), dtype=np.float32),
                    "positions": tfds.features.Tensor(shape=(None, 2), dtype=np.int32),
                    "targets": tfds.features.Tensor(shape=(None,), dtype=np.int32),
                }
            ),
            disable_shuffling=True,
        )

    def _split_generators(self, dl_manager):
        del dl_manager
        splits = self.builder_config.split_sides()
        return {split: self._generate_examples(split) for split in splits}

    def _generate_examples(self, split: str):
        yield from enumerate(generate_grid_split(self.builder_config, split))


def patch_example(example: dict) -> dict:
    """One example -> the patch2d arrays (every cell is scored)."""
    targets = np.asarray(example["targets"], np.int32)
    return {
        "patches": np.asarray(example["patches"], np.float32),
        "positions": np.asarray(example["positions"], np.int32),
        "segment_ids": np.ones_like(targets),
        "targets": targets,
        "weights": np.ones(targets.shape, np.float32),
    }


@kinds.register("grid2d")
class Grid2dData(kinds.TaskData):
    """Generated 2-D grid tasks: patch2d batches (patches float32[B, N, P], positions
    int32[B, N, 2], per-cell targets); scored per grid side."""

    builder = Grid2d
    fields = {
        "task": kinds.Field("row_col", "the grid task (see posjax.data.grid2d)"),
        "grid_size": kinds.Field(8, "side of the training grids"),
        "test_grid_sizes": kinds.Field((12, 16), "sides of the test_<S> splits"),
        "num_colors": kinds.Field(4, "distractor colours per cell"),
        "max_distance": kinds.Field(4, "manhattan: the last distance class"),
        "num_train_examples": kinds.Field(20_000, "training grids"),
        "num_eval_examples": kinds.Field(500, "grids per evaluation split"),
        "generation_seed": kinds.Field(0, "seed of the generated data"),
    }
    size_label = "grid side (cells)"
    panels = (("acc", "per-patch accuracy"), ("balanced_acc", "class-balanced accuracy"))

    def builder_config(self) -> Grid2dConfig:
        c = self.cfg
        return grid2d_config(c.task, c.grid_size, tuple(c.test_grid_sizes), c.num_colors,
                             c.max_distance, c.num_train_examples, c.num_eval_examples,
                             c.generation_seed)

    def train_dataset(self, seq_len, batch_size, seed, *, mlm=None, shard=training.WHOLE):
        """Batches of whole grids (seq_len is ignored: a grid has grid_size**2 cells)."""
        del seq_len
        self._check_batch_size(batch_size)
        self._refuse_mlm(mlm, "grid2d is classification")
        examples = training.shuffled_forever(self.source(self.cfg.train_split), int(seed),
                                             shard)
        return (examples.map(patch_example).to_iter_dataset(training.READ_OPTIONS)
                .batch(int(batch_size), drop_remainder=True))

    def batch_spec(self, seq_len, batch_size):
        import jax  # noqa: PLC0415 - only shapes need jax; the pipeline itself never does

        del seq_len
        c = self.cfg
        b, n, p = int(batch_size), int(c.grid_size) ** 2, 1 + int(c.num_colors)
        arrays = {
            "patches": jax.ShapeDtypeStruct((b, n, p), np.float32),
            "positions": jax.ShapeDtypeStruct((b, n, 2), np.int32),
            "segment_ids": jax.ShapeDtypeStruct((b, n), np.int32),
            "targets": jax.ShapeDtypeStruct((b, n), np.int32),
            "weights": jax.ShapeDtypeStruct((b, n), np.float32),
        }
        classes = get_grid_task(c.task).num_classes(int(c.max_distance))
        return BatchSpec("patches", arrays, num_classes=classes, patch_dim=p)

    def split_batches(self, split, batch_size):
        source = self.source(split)
        rows = (patch_example(source[i]) for i in range(len(source)))
        for batch in evaluation.batched(rows, batch_size):
            yield split, math.isqrt(batch["patches"].shape[1]), batch

    def train_size(self, config) -> int:
        return int(config.data.grid_size)

    def reach(self, config, encoding, side: int) -> int:
        """A 2-D encoding and the axial input path read each coordinate (< side); a 1-D
        encoding's attention sites, and DeBERTa's absolute table, read the raster index
        row * grid_width + col (posjax.models.transformer.PatchModel)."""
        raster = grid_position_form(encoding) == "raster" and (
            config.model.absolute_last_layers
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

    def check_evaluable(self, config, encoding) -> None:
        """Every test grid within what the model indexes (`reach`): a test side wider than
        model.grid_width, given after the config set it, was an error row only after
        training."""
        for side in config.data.test_grid_sizes:
            self.reach(config, encoding, int(side))

    def describe(self, config, side: int) -> dict:
        return {"patches": side * side}
