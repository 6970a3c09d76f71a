"""Data: TFDS builders (array_record), tokenizers, data kinds and grain pipelines.

    kind_of(data_cfg) -> DataKind                       the dataset's kind (posjax.data.kinds)
    register(name)                                      class decorator: a DataKind subclass
                                                        becomes the kind of dataset=name
    DataKind / TextData / TaskData                      the kind base classes
    default_data_config(dataset) -> ConfigDict          every `config.data` field, defaults
    train_iterator(data_cfg, seq_len, batch_size, seed, *, mlm=None) -> grain iterator
    eval_windows(data_cfg, length, *, batch_size, protocol, stride, row_len, ...) -> batches
    task_eval_batches(data_cfg, batch_size, *, splits=None) -> (split, size, batch)
    batch_spec(data_cfg, seq_len, batch_size) -> BatchSpec (shapes, vocab; reads no data)
    get_tokenizer(data_cfg) -> Tokenizer
    prepare(data_cfg) -> tfds builder (builds posjax's datasets offline on first use)

The functions are the data kind's methods reached from a config (for callers that hold a
config rather than a kind). Adding a dataset is one DataKind subclass, one `@register` and
one test: this package imports every module in it (`pkgutil`), so a new module's kinds
register without an import here, and each kind declares its own config.data fields
(`DataKind.fields`, listed with their defaults by `posjax list datasets`) and, for a task
kind, its plot labels. A kind serves its examples through `source(split)` (a
tfds.data_source unless it overrides it), so a kind needs no tfds builder.

The package reads top-down (tests/test_code_shape.py checks that no module imports another
that imports it back): tokenizers, packing, specs, evaluation and training (pieces of
pipelines) < sources (prepared TFDS datasets of a kind) < kinds (the DataKind classes, their
registry and fields) < builders, algorithmic, grid2d, retrieval (posjax's own datasets, each
with its kind).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator

import ml_collections

from posjax.data import kinds, sources, tokenizers
from posjax.data.kinds import DataKind, Field, TaskData, TextData, kind_of, register
from posjax.data.packing import MLMConfig
from posjax.data.sources import data_dir
from posjax.data.specs import BatchSpec
from posjax.data.tokenizers import get_tokenizer
from posjax.errors import ConfigError

__all__ = [
    "BatchSpec",
    "DataKind",
    "Field",
    "MLMConfig",
    "TaskData",
    "TextData",
    "batch_spec",
    "data_dir",
    "default_data_config",
    "eval_windows",
    "get_tokenizer",
    "kind_of",
    "kinds",
    "prepare",
    "register",
    "sources",
    "task_eval_batches",
    "tokenizers",
    "train_dataset",
    "train_iterator",
]

# Every module of the package, so each registers its kinds (and tokenizers) on import.
for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")


def prepare(data_cfg):
    """The prepared tfds builder of data.dataset (`sources.prepare` of its kind): posjax's
    own datasets build offline on first use."""
    return sources.prepare(kind_of(data_cfg))


def train_dataset(data_cfg, seq_len: int, batch_size: int, seed: int, *, mlm=None):
    """The training pipeline of data.dataset as a grain IterDataset."""
    return kind_of(data_cfg).train_dataset(int(seq_len), int(batch_size), int(seed), mlm=mlm)


def train_iterator(data_cfg, seq_len: int, batch_size: int, seed: int, *, mlm=None):
    """Endless iterator of training batches; `.get_state()` / `.set_state(s)` restore it.

    Text datasets: packed LM batches (MLM when `mlm` is a config with mask_rate,
    mask_token_fraction, random_token_fraction). algorithmic: packed LM batches whose
    weights cover answer tokens only. grid2d: patch2d batches (seq_len is ignored).
    """
    return iter(train_dataset(data_cfg, seq_len, batch_size, seed, mlm=mlm))


def batch_spec(data_cfg, seq_len: int, batch_size: int) -> BatchSpec:
    """Shapes, dtypes and vocabulary of `train_iterator(data_cfg, seq_len, batch_size, ...)`.

    Reads only the config (no data, no tokenizer training): SentencePiece models are trained
    to exactly data.sentencepiece_vocab_size pieces. grid2d ignores seq_len (N = grid_size**2).
    """
    return kind_of(data_cfg).batch_spec(int(seq_len), int(batch_size))


def eval_windows(data_cfg, length: int, **options) -> Iterator[dict]:
    """Evaluation windows of a text dataset (`TextData.eval_windows`)."""
    kind = kind_of(data_cfg)
    if not isinstance(kind, TextData):
        raise ConfigError(
            f"eval_windows reads text; dataset {data_cfg.dataset!r} is evaluated with "
            "task_eval_batches"
        )
    return kind.eval_windows(length, **options)


def task_eval_batches(data_cfg, batch_size: int, *,
                      splits: tuple[str, ...] | None = None) -> Iterator[tuple[str, int, dict]]:
    """(split, size, batch) of an algorithmic or grid2d dataset (`TaskData.task_batches`).

    size = problem size n (algorithmic) or grid side (grid2d). Default splits: every split
    but train (algorithmic: validation and test; grid2d: validation and every test_<S>).
    """
    kind = kind_of(data_cfg)
    if not isinstance(kind, TaskData):
        raise ConfigError(
            f"task_eval_batches reads algorithmic or grid2d data; evaluate {data_cfg.dataset!r} "
            "with eval_windows"
        )
    return kind.task_batches(batch_size, splits=splits)


def default_data_config(dataset: str = "stdlib_text") -> ml_collections.ConfigDict:
    """`config.data` with every field set for `dataset` (`kinds.config_fields`)."""
    if not dataset:
        raise ConfigError("default_data_config needs a dataset name, e.g. 'stdlib_text'")
    return ml_collections.ConfigDict(kinds.config_fields(dataset))
