"""Length-generalisation tasks: copy, reverse, sort, addition, parity, associative recall,
and the CoPE paper's counting and selective copy.

Each example is one token sequence `prompt SEP answer` over a small vocabulary, with an
answer mask (1 on answer tokens). A model is trained on problem sizes n in `train_lengths`
and tested on sizes in `test_lengths` (longer), the setting of e.g. Anil et al. 2022,
"Exploring Length Generalization in Large Language Models" (arXiv:2207.04901), and
Kazemnejad et al. 2023, "The Impact of Positional Encoding on Length Generalization in
Transformers" (arXiv:2305.19466).

Vocabulary ("symbols" tokenizer): PAD=0, SEP=1 ("="), PLUS=2 ("+"), MASK=3, and symbol s
(0 <= s < num_symbols) -> s + 4; digits and bits are the symbols 0..9 and 0..1.

| task               | prompt (n = problem size)                   | answer                    |
|--------------------|---------------------------------------------|---------------------------|
| copy               | x_1 .. x_n                                  | x_1 .. x_n                |
| reverse            | x_1 .. x_n                                  | x_n .. x_1                |
| sort               | x_1 .. x_n                                  | x sorted ascending        |
| addition           | a (n digits) + b (n digits)                 | a + b (n + 1 digits)      |
| parity             | n bits                                      | their sum mod 2           |
| associative_recall | k_1 v_1 .. k_n v_n q  (keys distinct)       | the v_i with k_i = q      |
| counting           | n statements on a counter c, then print c   | c's value, one digit      |
| selective_copy     | n tokens, max(1, n // 4) of them not blank  | the non-blank ones        |

counting is the CoPE paper's task (Golovneva et al. 2024, sec. 5.1; facebookresearch/RAM
projects/cope/scripts/count_data_gen.py) in its 1-variable setting, in symbols: every
statement is one token, `pass`, `c++` or `c = 0`, drawn with that generator's weights
50 : 7 : 1; c starts at 0 and an increment past 9 is a `pass` instead. The answer is the
count of `c++` since the last reset, so a model must count a kind of token, not tokens.
selective_copy (Gu & Dao 2023, used by the CoPE paper): blanks (symbol 0) with content
symbols at random places; the answer copies the content symbols in order.

Numbers are written least-significant digit first (answer digit i depends only on prompt
digits <= i and a carry), the order that makes addition learnable left to right
(Lee et al. 2023, "Teaching Arithmetic to Small Transformers", arXiv:2307.03381).

Splits: train and validation draw n uniformly from `train_lengths`, test from `test_lengths`;
each split has its own seed derived from `generation_seed`, so the data is the same on every
machine.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator

import numpy as np
import tensorflow_datasets as tfds

from posjax.data import evaluation, kinds, tokenizers, training
from posjax.data.builders import LocalBuilder, LocalDatasetInfo
from posjax.data.packing import lm_example
from posjax.data.specs import BatchSpec, token_arrays
from posjax.encoders.positions import randomize_positions
from posjax.errors import ConfigError, unknown

PAD, SEP, PLUS, MASK = 0, 1, 2, 3
SYMBOL_OFFSET = 4
SPLIT_SEEDS = {"train": 0, "validation": 1, "test": 2}

Generate = Callable[[np.random.Generator, int, int], tuple[np.ndarray, np.ndarray]]


@dataclasses.dataclass(frozen=True)
class Task:
    """generate(rng, n, num_symbols) -> (prompt symbols, answer symbols), as token ids.

    length(n): tokens in `prompt SEP answer`; min_symbols(n): symbols the task needs.
    """

    generate: Generate
    length: Callable[[int], int]
    min_symbols: Callable[[int], int]


TASKS: dict[str, Task] = {}


def task(name: str, *, length: Callable[[int], int], min_symbols: Callable[[int], int]):
    """Decorator registering a generator under `name` (what users type as data.task)."""

    def wrap(fn: Generate) -> Generate:
        TASKS[name] = Task(fn, length, min_symbols)
        return fn

    return wrap


def _symbols(values) -> np.ndarray:
    return np.asarray(values, dtype=np.int32) + SYMBOL_OFFSET


@task("copy", length=lambda n: 2 * n + 1, min_symbols=lambda n: 2)
def copy(rng, n, num_symbols):
    x = rng.integers(0, num_symbols, n)
    return _symbols(x), _symbols(x)


@task("reverse", length=lambda n: 2 * n + 1, min_symbols=lambda n: 2)
def reverse(rng, n, num_symbols):
    x = rng.integers(0, num_symbols, n)
    return _symbols(x), _symbols(x[::-1])


@task("sort", length=lambda n: 2 * n + 1, min_symbols=lambda n: 2)
def sort(rng, n, num_symbols):
    x = rng.integers(0, num_symbols, n)
    return _symbols(x), _symbols(np.sort(x))


def digits_to_int(digits: Iterable[int]) -> int:
    """Least-significant-first digits -> int."""
    return sum(int(d) * 10**i for i, d in enumerate(digits))


def int_to_digits(value: int, width: int) -> np.ndarray:
    """int -> `width` least-significant-first digits."""
    return np.asarray([(value // 10**i) % 10 for i in range(width)], dtype=np.int32)


@task("addition", length=lambda n: 3 * n + 3, min_symbols=lambda n: 10)
def addition(rng, n, num_symbols):
    del num_symbols
    a, b = rng.integers(0, 10, n), rng.integers(0, 10, n)
    total = int_to_digits(digits_to_int(a) + digits_to_int(b), n + 1)
    prompt = np.concatenate([_symbols(a), [PLUS], _symbols(b)]).astype(np.int32)
    return prompt, _symbols(total)


@task("parity", length=lambda n: n + 2, min_symbols=lambda n: 2)
def parity(rng, n, num_symbols):
    del num_symbols
    bits = rng.integers(0, 2, n)
    return _symbols(bits), _symbols([bits.sum() % 2])


@task("associative_recall", length=lambda n: 2 * n + 3, min_symbols=lambda n: n)
def associative_recall(rng, n, num_symbols):
    keys = rng.choice(num_symbols, n, replace=False)
    values = rng.integers(0, num_symbols, n)
    query = rng.integers(0, n)
    pairs = np.stack([keys, values], axis=1).reshape(-1)
    return _symbols(np.append(pairs, keys[query])), _symbols([values[query]])


COUNTERS = 1
# Statement tokens come after the answer digits 0..9: pass, then c++, c = 0, print c per counter.
PASS = 10
INCREMENT, RESET, PRINT = (PASS + 1 + COUNTERS * i for i in range(3))
# count_data_gen.py's OP_WEIGHTS: pass 50, increment 7, set to 0 1.
STATEMENT_WEIGHTS = np.array([50.0, 7.0, 1.0]) / 58.0


@task("counting", length=lambda n: n + 3, min_symbols=lambda n: PRINT + COUNTERS)
def counting(rng, n, num_symbols):
    del num_symbols
    values = np.zeros(COUNTERS, dtype=np.int32)
    statements = []
    for op, counter in zip(rng.choice(3, n, p=STATEMENT_WEIGHTS), rng.integers(0, COUNTERS, n),
                           strict=True):
        if op == 1 and values[counter] < 9:
            values[counter] += 1
            statements.append(INCREMENT + counter)
        elif op == 2:
            values[counter] = 0
            statements.append(RESET + counter)
        else:
            statements.append(PASS)
    query = rng.integers(0, COUNTERS)
    return _symbols(statements + [PRINT + query]), _symbols([values[query]])


def _kept(n: int) -> int:
    return max(1, n // 4)


@task("selective_copy", length=lambda n: n + 1 + _kept(n), min_symbols=lambda n: 3)
def selective_copy(rng, n, num_symbols):
    tokens = np.zeros(n, dtype=np.int64)
    where = np.sort(rng.choice(n, _kept(n), replace=False))
    tokens[where] = rng.integers(1, num_symbols, len(where))
    return _symbols(tokens), _symbols(tokens[where])


def get_task(name: str) -> Task:
    if name not in TASKS:
        raise unknown("algorithmic task", name, TASKS)
    return TASKS[name]


def make_example(task_name: str, rng: np.random.Generator, n: int, num_symbols: int) -> dict:
    """One example: tokens int32[T] = prompt SEP answer, answer_mask int32[T], size n."""
    prompt, answer = get_task(task_name).generate(rng, n, num_symbols)
    tokens = np.concatenate([prompt, [SEP], answer]).astype(np.int32)
    mask = np.zeros_like(tokens)
    mask[len(prompt) + 1 :] = 1
    return {"tokens": tokens, "answer_mask": mask, "size": np.int32(n)}


def generate_split(cfg: AlgorithmicConfig, split: str) -> Iterator[dict]:
    """The examples of `split`, deterministic in (generation_seed, split)."""
    lo, hi = cfg.test_lengths if split == "test" else cfg.train_lengths
    count = cfg.num_train_examples if split == "train" else cfg.num_eval_examples
    rng = np.random.default_rng([cfg.generation_seed, SPLIT_SEEDS[split]])
    for _ in range(count):
        yield make_example(cfg.task, rng, int(rng.integers(lo, hi + 1)), cfg.num_symbols)


@dataclasses.dataclass(eq=False)
class AlgorithmicConfig(tfds.core.BuilderConfig):
    """One task with its sizes; `algorithmic_config` names it after every field."""

    task: str = "copy"
    train_lengths: tuple[int, int] = (1, 20)
    test_lengths: tuple[int, int] = (21, 40)
    num_symbols: int = 64
    num_train_examples: int = 50_000
    num_eval_examples: int = 1_000
    generation_seed: int = 0


def algorithmic_config(
    task: str,
    train_lengths: tuple[int, int],
    test_lengths: tuple[int, int],
    num_symbols: int,
    num_train_examples: int,
    num_eval_examples: int,
    generation_seed: int,
) -> AlgorithmicConfig:
    """Validated config named e.g. 'copy-n1to20-test21to40-sym64-50000x1000-seed0'."""
    spec = get_task(task)
    for field, (lo, hi) in (("train_lengths", train_lengths), ("test_lengths", test_lengths)):
        if not 1 <= lo <= hi:
            raise ConfigError(f"data.{field}=({lo}, {hi}) must be (min, max) with 1 <= min <= max")
    need = spec.min_symbols(max(train_lengths[1], test_lengths[1]))
    if num_symbols < need:
        raise ConfigError(
            f"task {task!r} up to size {max(train_lengths[1], test_lengths[1])} needs "
            f"num_symbols >= {need}, got {num_symbols}; raise data.num_symbols"
        )
    if num_train_examples < 1 or num_eval_examples < 1:
        raise ConfigError("data.num_train_examples and data.num_eval_examples must be >= 1")
    (a, b), (c, d) = train_lengths, test_lengths
    return AlgorithmicConfig(
        name=(
            f"{task}-n{a}to{b}-test{c}to{d}-sym{num_symbols}-"
            f"{num_train_examples}x{num_eval_examples}-seed{generation_seed}"
        ),
        description=f"algorithmic task {task}",
        task=task,
        train_lengths=(int(a), int(b)),
        test_lengths=(int(c), int(d)),
        num_symbols=int(num_symbols),
        num_train_examples=int(num_train_examples),
        num_eval_examples=int(num_eval_examples),
        generation_seed=int(generation_seed),
    )


class Algorithmic(LocalBuilder):
    """Generated length-generalisation tasks (see the module docstring)."""

    VERSION = tfds.core.Version("1.0.0")

    def _info(self) -> tfds.core.DatasetInfo:
        return LocalDatasetInfo(
            builder=self,
            description=__doc__.split("\n\n")[0],
            features=tfds.features.FeaturesDict(
                {
                    "tokens": tfds.features.Tensor(shape=(None,), dtype=np.int32),
                    "answer_mask": tfds.features.Tensor(shape=(None,), dtype=np.int32),
                    "size": tfds.features.Scalar(dtype=np.int32),
                }
            ),
            disable_shuffling=True,
        )

    def _split_generators(self, dl_manager):
        del dl_manager
        return {split: self._generate_examples(split) for split in SPLIT_SEEDS}

    def _generate_examples(self, split: str):
        yield from enumerate(generate_split(self.builder_config, split))


def task_document(example: dict) -> dict:
    """One example -> {"inputs": tokens, "score": answer_mask}."""
    tokens = np.asarray(example["tokens"], np.int32)
    return {"inputs": tokens, "score": np.asarray(example["answer_mask"], np.int32)}


@kinds.register("algorithmic")
class AlgorithmicData(kinds.TaskData):
    """Generated algorithmic tasks: packed LM batches whose weights cover answer tokens;
    scored per problem size n (a causal model's teacher-forced exact match)."""

    builder = Algorithmic
    fields = {
        "task": kinds.Field("copy", "the task (see posjax.data.algorithmic)"),
        "train_lengths": kinds.Field((1, 20), "problem sizes trained on, (min, max)"),
        "test_lengths": kinds.Field((21, 40), "problem sizes of the test split, (min, max)"),
        "num_symbols": kinds.Field(64, "symbols in the task alphabet"),
        "num_train_examples": kinds.Field(50_000, "training examples"),
        "num_eval_examples": kinds.Field(1_000, "examples per evaluation split"),
        "generation_seed": kinds.Field(0, "seed of the generated data"),
    }
    defaults = {"tokenizer": "symbols", "eval_split": "test"}
    common_length = True
    size_label = "problem size n"
    panels = (("acc", "answer-token accuracy"), ("seq_acc", "exact match"))

    def builder_config(self) -> AlgorithmicConfig:
        c = self.cfg
        return algorithmic_config(c.task, tuple(c.train_lengths), tuple(c.test_lengths),
                                  c.num_symbols, c.num_train_examples, c.num_eval_examples,
                                  c.generation_seed)

    def _check_fits(self, seq_len: int) -> None:
        longest = get_task(self.cfg.task).length(int(self.cfg.train_lengths[1]))
        if seq_len < longest:
            raise ConfigError(
                f"task {self.cfg.task!r} with train_lengths up to {self.cfg.train_lengths[1]} "
                f"makes sequences of {longest} tokens; set seq_len >= {longest}"
            )

    def train_dataset(self, seq_len, batch_size, seed, *, mlm=None, shard=training.WHOLE):
        self._check_batch_size(batch_size)
        self._refuse_mlm(mlm, "algorithmic tasks are causal")
        self._check_fits(int(seq_len))
        return training.packed_lm(self.source(self.cfg.train_split), task_document,
                                  int(seq_len), int(batch_size), int(seed), shard=shard)

    def batch_spec(self, seq_len, batch_size):
        self._check_fits(int(seq_len))
        return BatchSpec("tokens", token_arrays(int(seq_len), int(batch_size)),
                         vocab_size=tokenizers.vocab_size(self.cfg))

    def split_batches(self, split, batch_size):
        """One example per row (segment 1, positions 0..T-1, weights on answer targets),
        sizes ascending, the last batch of a size filled with all-zero rows."""
        source = self.source(split)
        by_size: dict[int, list[dict]] = {}
        for i in range(len(source)):
            example = source[i]
            doc = task_document(example)
            n = len(doc["inputs"])
            row = lm_example(doc["inputs"], np.ones(n, np.int32), np.arange(n), doc["score"])
            by_size.setdefault(int(example["size"]), []).append(row)
        for size in sorted(by_size):
            for batch in evaluation.batched(iter(by_size[size]), batch_size):
                yield split, size, batch

    def train_size(self, config) -> int:
        return int(config.data.train_lengths[1])

    def reach(self, config, encoding, size: int) -> int:
        """The example's tokens, or M when positions are drawn from [0, M)."""
        del encoding
        tokens = get_task(config.data.task).length(size)
        m = int(config.train.randomize_positions)
        if not m:
            return tokens
        if tokens > m:
            raise ConfigError(
                f"size {size} has {tokens} tokens but this run draws positions from [0, {m}) "
                f"(randomize_positions={m}): train with randomize_positions >= {tokens}"
            )
        return m

    def prepare(self, config, batch: dict, key) -> dict:
        """positions int32[B, T] -> T sorted draws from [0, M) per row, when randomized
        (Ruoss et al. 2023 randomize at test time as well)."""
        m = int(config.train.randomize_positions)
        if not m:
            return batch
        positions = randomize_positions(key, batch["positions"], m, batch.get("segment_ids"))
        return {**batch, "positions": np.asarray(positions)}

    def describe(self, config, size: int) -> dict:
        return {"tokens": get_task(config.data.task).length(size)}


@dataclasses.dataclass(frozen=True)
class SymbolTokenizer:
    """Task vocabulary: PAD=0, SEP=1 '=', PLUS=2 '+', MASK=3, symbol s -> s + 4 (text 's')."""

    num_symbols: int
    pad_id: int = PAD
    bos_id: int = SEP
    eos_id: int = SEP
    mask_id: int = MASK
    first_regular_id: int = SYMBOL_OFFSET

    @property
    def vocab_size(self) -> int:
        return SYMBOL_OFFSET + self.num_symbols

    def encode(self, text: str) -> np.ndarray:
        """'3 1 + 2 = 5' -> ids: whitespace-separated symbols, '=' and '+'."""
        names = {"=": SEP, "+": PLUS}
        try:
            ids = [names[w] if w in names else SYMBOL_OFFSET + int(w) for w in text.split()]
        except ValueError as e:
            raise ConfigError(f"cannot encode {text!r}: use symbols 0..N, '=' and '+'") from e
        return np.asarray(ids, dtype=np.int32)

    def decode(self, ids: Iterable[int]) -> str:
        """ids -> '3 1 + 2 = 5'; PAD and MASK are dropped."""
        names = {SEP: "=", PLUS: "+"}
        return " ".join(
            names.get(int(i), str(int(i) - SYMBOL_OFFSET)) for i in ids if int(i) not in (PAD, MASK)
        )


@tokenizers.register(
    "symbols", vocab_size=lambda data_cfg: SYMBOL_OFFSET + int(data_cfg.num_symbols)
)
def _symbol_tokenizer(data_cfg) -> SymbolTokenizer:
    return SymbolTokenizer(num_symbols=int(data_cfg.num_symbols))
