"""Text and an image in one token sequence, for multimodal position encodings (M-RoPE,
Qwen2-VL; Wang et al. 2024): the grid2d setting of a grid placed between text tokens, trained
on grids of sides min_grid_size..grid_size and tested on larger grids with longer texts.

One example of size S (the grid side) has a text of n distinct symbols, S <= n <= 2S, then
the image: S * S patch tokens in raster order, each showing a symbol as that symbol's own token
id (a one-token patch, where Qwen2-VL's come from a vision encoder), framed by VISION_START and
VISION_END as Qwen2-VL frames its images. The answers are scored by answer-token accuracy
and exact match (every answer of the example right). Tasks (`TASKS`):

    successor  x_0 .. x_{n-1}  ROW_r COL_c  VISION_START  grid  VISION_END  SEP  answer
               every cell shows a text symbol (g = x_j, j drawn uniformly); the answer is the
               text symbol right after the one the named cell (r, c) shows (j <= n - 2:
               x_{j+1}): it needs the patch's row and column and the text's order
    cell       the same sequence; the answer is the symbol the named cell shows (x_j itself):
               the image lookup alone, a control for successor
    below      x_0 .. x_{n-1}  VISION_START  grid  VISION_END  q_1 a_1 .. q_K a_K
               the cells show S * S distinct symbols, none of them in the text; each q_k is
               one of them, not on the bottom row, and its answer a_k is the symbol of the
               cell right below q_k's: a fixed 2-D offset (one row) that is S steps of the
               raster order, so it needs the patches' rows and columns read relative to each
               other. K = BELOW_QUESTIONS answers are scored; exact match needs all of them
    next_row   x_0 .. x_{n-1}  VISION_START  grid  VISION_END
               the top row shows random symbols and every cell below it the symbol after
               the one in the cell above (s + 1 mod num_symbols): every patch past the top
               row is scored, so the model must read the patch one row up, S steps back in
               the raster order, at every grid side

In successor and cell, only the cell's row and column single it out (every cell shows a text
symbol). The row and column names are tokens of their own for r, c < grid_size, and the named
cell lies in that top-left block (and in the grid) on every grid, since a name never trained
has no meaning: a larger test grid adds rows and columns around it and a longer text, so what
changes at test is where things sit. In below, q lies anywhere on a test grid.

Positions (`position_rule`, what each encoding reads):

    mrope     (t, h, w) int32[T, 3], Qwen2-VL's rule (`mrope_positions`): text t = h = w
              continuing, the image's patches at (p0, p0 + row, p0 + col) with p0 the position
              after VISION_START, the text after it from p0 + S on
    axial     (h, w) int32[T, 2]: M-RoPE's rule without t, for axial 2-D RoPE (rope2d): a text
              token at (p, p), on the diagonal, so its order is the same step in both
              coordinates, and the image's patches at (p0 + row, p0 + col)
    rope_tv   (h, w) int32[T, 2]: Su's RoPE-Tie-v2 for axial 2-D RoPE
              (`rope_tv_positions`): a text token at (p, p), the image counted as its S * S
              patches (the text after it continues where the flattened sequence does), its
              patches one apart and centred in that span, equal gaps before and after
    sequence  the index in the sequence, int32[T], for 1-D encodings: the patch (r, c) at
              p0 + r * S + c, which moves with S

Vocabulary: PAD=0, SEP=1, VISION_START=2, VISION_END=3, text symbol s -> 4 + s, ROW_r ->
4 + num_symbols + r, COL_c -> 4 + num_symbols + grid_size + c.

Splits: train and validation draw each example's side uniformly from min_grid_size..grid_size
(small grids teach the lookup early, and its 2-D offsets are the same on every grid), and
`test_<S>` holds sides S of `test_grid_sizes`; each split has its own seed from
`generation_seed`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np
import tensorflow_datasets as tfds

from posjax.data import evaluation, kinds, training
from posjax.data.builders import LocalBuilder, LocalDatasetInfo
from posjax.data.packing import lm_example
from posjax.data.specs import BatchSpec
from posjax.encoders.rotary_multimodal import mrope_positions, rope_tv_positions
from posjax.errors import ConfigError, unknown

PAD, SEP, VISION_START, VISION_END = 0, 1, 2, 3
SYMBOL_OFFSET = 4
# Questions after one image in the below task (each one token, its answer the next).
BELOW_QUESTIONS = 8
# Tokens between the text and the image: ROW_r COL_c VISION_START (successor, cell), or
# VISION_START alone (below, next_row).
NAMED_CELL_PREFIX, PLAIN_PREFIX = 3, 1


def text_lengths(side: int) -> tuple[int, int]:
    """(min, max) text symbols of an example of grid side `side`: S to 2S."""
    return side, 2 * side


# Tokens after the image: VISION_END SEP answer (successor, cell), VISION_END and the
# questions with their answers (below), VISION_END alone (next_row).
NAMED_CELL_AFTER, BELOW_AFTER, NEXT_ROW_AFTER = 3, 1 + 2 * BELOW_QUESTIONS, 1


def longest_prefix(side: int) -> int:
    """Tokens before the image in the longest example of grid side `side`, any task."""
    return text_lengths(side)[1] + max(NAMED_CELL_PREFIX, PLAIN_PREFIX)


def sequence_length(side: int) -> int:
    """Tokens of the longest example of grid side `side`, any task: what comes before the
    image, the image, what comes after it."""
    return longest_prefix(side) + side * side + max(NAMED_CELL_AFTER, BELOW_AFTER,
                                                    NEXT_ROW_AFTER)


def sequence_parts(prefix_length: int, side: int,
                   after: int) -> list[int | tuple[int, int, int]]:
    """The example as `mrope_positions` parts: the tokens before the image, the image grid
    (1, S, S), the tokens after it."""
    return [prefix_length, (1, side, side), after]


POSITION_AXES = {"mrope": 3, "axial": 2, "rope_tv": 2, "sequence": 0}


def example_positions(rule: str, prefix_length: int, side: int,
                      after: int = NAMED_CELL_AFTER) -> np.ndarray:
    """Positions of an example under `rule` (module docstring): int32[T, 3] (mrope),
    int32[T, 2] (axial, rope_tv) or int32[T] (sequence), T = prefix_length + side**2 +
    after."""
    if rule not in POSITION_AXES:
        raise unknown("data.position_rule", rule, POSITION_AXES)
    parts = sequence_parts(prefix_length, side, after)
    if rule == "rope_tv":
        return rope_tv_positions(parts)
    thw = mrope_positions(parts)
    if rule == "mrope":
        return thw
    if rule == "axial":
        return np.ascontiguousarray(thw[:, 1:])
    return np.arange(len(thw), dtype=np.int32)


def _example(tokens: list, prefix_length: int, side: int) -> dict:
    tokens = np.concatenate(tokens).astype(np.int32)
    mask = np.zeros_like(tokens)
    mask[-1] = 1
    return {"tokens": tokens, "answer_mask": mask, "side": np.int32(side),
            "prefix_length": np.int32(prefix_length)}


def _named_cell_example(offset: int):
    """successor (offset 1) and cell (offset 0): the answer is the text symbol `offset`
    places after the one the named cell shows."""
    def make(rng: np.random.Generator, side: int, named_side: int, num_symbols: int) -> dict:
        lo, hi = text_lengths(side)
        n = int(rng.integers(lo, hi + 1))
        text = rng.choice(num_symbols, n, replace=False)
        cells = rng.integers(0, n, (side, side))
        r, c = (int(v) for v in rng.integers(0, min(side, named_side), 2))
        j = int(rng.integers(0, n - offset))
        cells[r, c] = j
        row_name = SYMBOL_OFFSET + num_symbols + r
        col_name = SYMBOL_OFFSET + num_symbols + named_side + c
        return _example([text + SYMBOL_OFFSET, [row_name, col_name, VISION_START],
                         text[cells.reshape(-1)] + SYMBOL_OFFSET,
                         [VISION_END, SEP, text[j + offset] + SYMBOL_OFFSET]],
                        n + NAMED_CELL_PREFIX, side)
    return make


def _below_example(rng: np.random.Generator, side: int, named_side: int,
                   num_symbols: int) -> dict:
    """below: the symbols of the cells under the q_k's (module docstring)."""
    del named_side
    lo, hi = text_lengths(side)
    n = int(rng.integers(lo, hi + 1))
    symbols = rng.choice(num_symbols, n + side * side, replace=False) + SYMBOL_OFFSET
    text, grid = symbols[:n], symbols[n:].reshape(side, side)
    rows = rng.integers(0, side - 1, BELOW_QUESTIONS)
    cols = rng.integers(0, side, BELOW_QUESTIONS)
    questions = np.stack([grid[rows, cols], grid[rows + 1, cols]], -1).reshape(-1)
    example = _example([text, [VISION_START], grid.reshape(-1), [VISION_END], questions],
                       n + PLAIN_PREFIX, side)
    example["answer_mask"][-2 * BELOW_QUESTIONS + 1::2] = 1
    return example


def _next_row_example(rng: np.random.Generator, side: int, named_side: int,
                      num_symbols: int) -> dict:
    """next_row: each row the one above it advanced by one symbol (module docstring)."""
    del named_side
    lo, hi = text_lengths(side)
    n = int(rng.integers(lo, hi + 1))
    text = rng.choice(num_symbols, n, replace=False)
    top = rng.integers(0, num_symbols, side)
    grid = (top[None, :] + np.arange(side)[:, None]) % num_symbols
    example = _example([text + SYMBOL_OFFSET, [VISION_START], grid.reshape(-1) + SYMBOL_OFFSET,
                        [VISION_END]], n + PLAIN_PREFIX, side)
    mask = np.zeros_like(example["tokens"])
    below_top = n + PLAIN_PREFIX + side
    mask[below_top:below_top + side * (side - 1)] = 1
    example["answer_mask"] = mask
    return example


# name -> (make(rng, side, named_side, num_symbols) -> example, distinct symbols an example
# of side S needs)
TASKS = {
    "successor": (_named_cell_example(1), lambda side: text_lengths(side)[1]),
    "cell": (_named_cell_example(0), lambda side: text_lengths(side)[1]),
    "below": (_below_example, lambda side: text_lengths(side)[1] + side * side),
    "next_row": (_next_row_example, lambda side: text_lengths(side)[1]),
}


def task_of(name: str):
    if name not in TASKS:
        raise unknown("text_image task", name, TASKS)
    return TASKS[name]


def make_example(task: str, rng: np.random.Generator, side: int, named_side: int,
                 num_symbols: int) -> dict:
    """One example: tokens int32[T], answer_mask int32[T] (1 on the answers), side, and
    prefix_length (the tokens before the image); a named cell (r, c) has
    r, c < min(side, named_side)."""
    return task_of(task)[0](rng, side, named_side, num_symbols)


@dataclasses.dataclass(eq=False)
class TextImageConfig(tfds.core.BuilderConfig):
    """One task with its sizes; `text_image_config` names it after every field."""

    task: str = "next_row"
    grid_size: int = 6
    min_grid_size: int = 2
    test_grid_sizes: tuple[int, ...] = (9, 12)
    num_symbols: int = 64
    num_train_examples: int = 50_000
    num_eval_examples: int = 500
    generation_seed: int = 0

    def split_sides(self) -> dict[str, tuple[int, int]]:
        """{split name: (min, max) grid side}: train, validation, test_<S>..."""
        trained = (self.min_grid_size, self.grid_size)
        sides = {"train": trained, "validation": trained}
        sides.update({f"test_{s}": (s, s) for s in self.test_grid_sizes})
        return sides


def text_image_config(task: str, min_grid_size: int, grid_size: int,
                      test_grid_sizes: tuple[int, ...], num_symbols: int,
                      num_train_examples: int, num_eval_examples: int,
                      generation_seed: int) -> TextImageConfig:
    """Validated config named e.g. 'successor-g2to6-test9_12-sym64-50000x500-seed0'."""
    symbols_needed = task_of(task)[1]
    sides = (min_grid_size, grid_size, *test_grid_sizes)
    if not 2 <= min_grid_size <= grid_size or any(s < grid_size for s in test_grid_sizes):
        raise ConfigError(
            f"text_image min_grid_size={min_grid_size}, grid_size={grid_size}, test_grid_sizes="
            f"{tuple(test_grid_sizes)}: need 2 <= min_grid_size <= grid_size <= every test side "
            "(the named cell lies in the training grid's block)")
    longest = symbols_needed(max(sides))
    if num_symbols < longest:
        raise ConfigError(
            f"text_image task {task} with a grid of side {max(sides)} needs up to {longest} "
            f"distinct symbols: raise data.num_symbols={num_symbols} to >= {longest}")
    if num_train_examples < 1 or num_eval_examples < 1:
        raise ConfigError("data.num_train_examples and data.num_eval_examples must be >= 1")
    tests = "_".join(str(int(s)) for s in test_grid_sizes) or "none"
    return TextImageConfig(
        name=(f"{task}-g{min_grid_size}to{grid_size}-test{tests}-sym{num_symbols}-"
              f"{num_train_examples}x{num_eval_examples}-seed{generation_seed}"),
        description=f"text_image task {task}",
        task=task,
        grid_size=int(grid_size),
        min_grid_size=int(min_grid_size),
        test_grid_sizes=tuple(int(s) for s in test_grid_sizes),
        num_symbols=int(num_symbols),
        num_train_examples=int(num_train_examples),
        num_eval_examples=int(num_eval_examples),
        generation_seed=int(generation_seed),
    )


def generate_split(cfg: TextImageConfig, split: str) -> Iterator[dict]:
    """The examples of `split`, deterministic in (generation_seed, split)."""
    sides = cfg.split_sides()
    lo, hi = sides[split]
    count = cfg.num_train_examples if split == "train" else cfg.num_eval_examples
    rng = np.random.default_rng([cfg.generation_seed, list(sides).index(split), hi])
    for _ in range(count):
        side = int(rng.integers(lo, hi + 1))
        yield make_example(cfg.task, rng, side, cfg.grid_size, cfg.num_symbols)


class TextImage(LocalBuilder):
    """Generated text + image sequences (see the module docstring)."""

    VERSION = tfds.core.Version("1.1.0")
    RELEASE_NOTES = {"1.1.0": "the below task; prefix_length (tokens before the image) in "
                              "place of text_length"}

    def _info(self) -> tfds.core.DatasetInfo:
        return LocalDatasetInfo(
            builder=self,
            description=__doc__.split("\n\n")[0],
            features=tfds.features.FeaturesDict({
                "tokens": tfds.features.Tensor(shape=(None,), dtype=np.int32),
                "answer_mask": tfds.features.Tensor(shape=(None,), dtype=np.int32),
                "side": tfds.features.Scalar(dtype=np.int32),
                "prefix_length": tfds.features.Scalar(dtype=np.int32),
            }),
            disable_shuffling=True,
        )

    def _split_generators(self, dl_manager):
        del dl_manager
        splits = self.builder_config.split_sides()
        return {split: self._generate_examples(split) for split in splits}

    def _generate_examples(self, split: str):
        yield from enumerate(generate_split(self.builder_config, split))


def lm_row(example: dict, rule: str, length: int) -> dict:
    """One example -> LM arrays of `length` tokens (segment 1, then padding: segment 0,
    weight 0, position 0), positions by `rule`; the weight sits on the token before the
    answer (SEP), whose prediction is the answer."""
    tokens = np.asarray(example["tokens"], np.int32)
    t = len(tokens)
    prefix, side = int(example["prefix_length"]), int(example["side"])
    positions = example_positions(rule, prefix, side, t - prefix - side * side)
    pad = length - t
    return lm_example(np.pad(tokens, (0, pad), constant_values=PAD),
                      np.pad(np.ones(t, np.int32), (0, pad)),
                      np.pad(positions, [(0, pad)] + [(0, 0)] * (positions.ndim - 1)),
                      np.pad(np.asarray(example["answer_mask"], np.int32), (0, pad)))


@kinds.register("text_image")
class TextImageData(kinds.TaskData):
    """Text and an image grid in one sequence: causal LM batches (model kind mixed_lm) whose
    positions follow data.position_rule (M-RoPE's (t, h, w), axial (h, w), Su's (h, w), or
    the sequence index); the answers are scored (exact match) per grid side."""

    builder = TextImage
    fields = {
        "task": kinds.Field("next_row", f"the task: {', '.join(TASKS)} (see "
                            "posjax.data.text_image)"),
        "grid_size": kinds.Field(6, "side of the largest training grids"),
        "min_grid_size": kinds.Field(2, "side of the smallest training grids"),
        "test_grid_sizes": kinds.Field((9, 12), "sides of the test_<S> splits"),
        "num_symbols": kinds.Field(64, "symbols in the task alphabet"),
        "position_rule": kinds.Field("mrope", "text_image positions: mrope (t, h, w), axial "
                                     "(h, w), rope_tv (Su's h, w) or sequence (1-D index)"),
        "num_train_examples": kinds.Field(50_000, "training examples"),
        "num_eval_examples": kinds.Field(500, "examples per evaluation split"),
        "generation_seed": kinds.Field(0, "seed of the generated data"),
    }
    size_label = "grid side (patches per row)"
    panels = (("acc", "answer-token accuracy"), ("seq_acc", "exact match"))
    # every scored patch of an example right is out of reach past the trained grid sides (0
    # for every run there: a tie), so the ranking reads the share of patches right
    rank_by = 0

    def builder_config(self) -> TextImageConfig:
        c = self.cfg
        return text_image_config(c.task, c.min_grid_size, c.grid_size, tuple(c.test_grid_sizes),
                                 c.num_symbols, c.num_train_examples, c.num_eval_examples,
                                 c.generation_seed)

    @property
    def rule(self) -> str:
        if self.cfg.position_rule not in POSITION_AXES:
            raise unknown("data.position_rule", self.cfg.position_rule, POSITION_AXES)
        return self.cfg.position_rule

    @property
    def vocab_size(self) -> int:
        return SYMBOL_OFFSET + int(self.cfg.num_symbols) + 2 * int(self.cfg.grid_size)

    def _check_fits(self, seq_len: int) -> None:
        longest = sequence_length(int(self.cfg.grid_size))
        if seq_len < longest:
            raise ConfigError(
                f"text_image grids of side {self.cfg.grid_size} make sequences of up to "
                f"{longest} tokens; set seq_len >= {longest}")

    def train_dataset(self, seq_len, batch_size, seed, *, mlm=None, shard=training.WHOLE):
        """Batches of one example per row, padded to seq_len."""
        self._check_batch_size(batch_size)
        self._refuse_mlm(mlm, "text_image is causal")
        self._check_fits(int(seq_len))
        rule, length = self.rule, int(seq_len)
        examples = training.shuffled_forever(self.source(self.cfg.train_split), int(seed),
                                             shard)
        return (examples.map(lambda ex: lm_row(ex, rule, length))
                .to_iter_dataset(training.READ_OPTIONS)
                .batch(int(batch_size), drop_remainder=True))

    def batch_spec(self, seq_len, batch_size):
        import jax  # noqa: PLC0415 - only shapes need jax; the pipeline itself never does

        self._check_fits(int(seq_len))
        shape = (int(batch_size), int(seq_len))
        axes = POSITION_AXES[self.rule]
        arrays = {
            "inputs": jax.ShapeDtypeStruct(shape, np.int32),
            "targets": jax.ShapeDtypeStruct(shape, np.int32),
            "positions": jax.ShapeDtypeStruct(shape + ((axes,) if axes else ()), np.int32),
            "segment_ids": jax.ShapeDtypeStruct(shape, np.int32),
            "weights": jax.ShapeDtypeStruct(shape, np.float32),
        }
        return BatchSpec("tokens", arrays, vocab_size=self.vocab_size, position_axes=axes)

    def split_batches(self, split, batch_size):
        """One example per row, padded to its side's longest example; sides ascending."""
        source = self.source(split)
        rule = self.rule
        by_side: dict[int, list[dict]] = {}
        for i in range(len(source)):
            example = source[i]
            side = int(example["side"])
            by_side.setdefault(side, []).append(lm_row(example, rule, sequence_length(side)))
        for side in sorted(by_side):
            for batch in evaluation.batched(iter(by_side[side]), batch_size):
                yield split, side, batch

    def train_size(self, config) -> int:
        return int(config.data.grid_size)

    def reach(self, config, encoding, side: int) -> int:
        """The positions an example of grid side `side` reads: its longest one's largest
        position + 1 (the sequence index: its tokens)."""
        del encoding
        rule = config.data.position_rule
        return int(example_positions(rule, longest_prefix(side), side,
                                     max(NAMED_CELL_AFTER, BELOW_AFTER,
                                         NEXT_ROW_AFTER)).max()) + 1

    def describe(self, config, side: int) -> dict:
        lo, hi = text_lengths(side)
        return {"patches": side * side, "text": [lo, hi], "tokens": sequence_length(side)}
