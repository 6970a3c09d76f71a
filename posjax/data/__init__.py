"""Data: TFDS builders (array_record), tokenizers, data kinds and grain pipelines.

    kind_of(data_cfg) -> DataKind                       the dataset's kind (posjax.data.kinds)
    register(name)                                      class decorator: a DataKind subclass
                                                        becomes the kind of dataset=name
    DataKind / TextData / TaskData                      the kind base classes
    default_data_config(dataset) -> ConfigDict          every `config.data` field, defaults
    get_tokenizer(data_cfg) -> Tokenizer

A kind is where the data is read: `kind.train_dataset(seq_len, batch_size, seed, mlm=)` (a
grain IterDataset), `kind.batch_spec(seq_len, batch_size)` (shapes and vocabulary, no data
read), `kind.eval_windows(length, ...)` (text kinds), `kind.task_batches(batch_size)` (task
kinds) and `sources.prepare(kind)` (the tfds builder, built offline on first use). Adding a
dataset is one DataKind subclass, one `@register` and one test: this package imports every
module in it (`pkgutil`), so a new module's kinds register without an import here, and each
kind declares its own config.data fields (`DataKind.fields`, listed with their defaults by
`posjax list datasets`) and, for a task kind, its plot labels. A kind serves its examples
through `source(split)` (a tfds.data_source unless it overrides it), so a kind needs no tfds
builder.

The package reads top-down (tests/test_code_shape.py checks that no module imports another
that imports it back): tokenizers, packing, specs, evaluation and training (pieces of
pipelines) < sources (prepared TFDS datasets of a kind) < kinds (the DataKind classes, their
registry and fields) < builders, algorithmic, grid2d, retrieval (posjax's own datasets, each
with its kind).
"""

from __future__ import annotations

import ml_collections

from posjax.data import kinds, sources, tokenizers
from posjax.data.kinds import DataKind, Field, TaskData, TextData, kind_of, register
from posjax.data.packing import MLMConfig
from posjax.data.sources import data_dir
from posjax.data.specs import BatchSpec
from posjax.data.tokenizers import get_tokenizer
from posjax.errors import ConfigError
from posjax.registry import import_package_modules

__all__ = [
    "BatchSpec",
    "DataKind",
    "Field",
    "MLMConfig",
    "TaskData",
    "TextData",
    "data_dir",
    "default_data_config",
    "get_tokenizer",
    "kind_of",
    "kinds",
    "register",
    "sources",
    "tokenizers",
]

import_package_modules(__name__, __path__)  # each module registers its kinds (and tokenizers)


def default_data_config(dataset: str = "stdlib_text") -> ml_collections.ConfigDict:
    """`config.data` with every field set for `dataset` (`kinds.config_fields`)."""
    if not dataset:  # it named this function, and no dataset
        raise ConfigError("dataset= names no dataset: give one (posjax list datasets), e.g. "
                          f"dataset=stdlib_text; posjax builds {', '.join(kinds.names())}")
    return ml_collections.ConfigDict(kinds.config_fields(dataset))
