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
one test; a kind serves its examples through `source(split)` (a tfds.data_source unless it
overrides it), so a kind needs no tfds builder. Modules, one job each: kinds (the DataKind
classes and their registry), packing (documents -> packed LM batches, MLM masking), training
(the shared training-pipeline pieces), evaluation (evaluation windows and padded batches),
specs (BatchSpec), sources (prepared TFDS datasets), builders / algorithmic / grid2d
(posjax's own datasets, each with its kind), tokenizers.

`config.data` fields (every config has all of them; a dataset ignores those it does not use):

| field                     | default             | meaning                                        |
|---------------------------|---------------------|------------------------------------------------|
| dataset                   | "stdlib_text"       | stdlib_text, local_text, algorithmic, grid2d,  |
|                           |                     | lm1b, pg19, c4, wikipedia or any TFDS name     |
| data_dir                  | ""                  | "" = $POSJAX_DATA_DIR or ~/tensorflow_datasets |
| train_split / eval_split  | "train"/"validation"| TFDS split names (slices like "train[:99%]" ok)|
| allow_download            | False               | let TFDS download a dataset not yet prepared   |
| text_key                  | "text"              | text field of a TFDS example (pg19: book_text) |
| tokenizer                 | "bytes"             | bytes, sentencepiece, symbols (algorithmic)    |
| sentencepiece_model       | ""                  | an existing SentencePiece .model to use as is  |
| sentencepiece_vocab_size  | 8192                | pieces of the locally trained model            |
| sentencepiece_model_type  | "unigram"           | unigram or bpe                                 |
| sentencepiece_train_chars | 10_000_000          | training-split characters used to train it     |
| validation_fraction       | 0.05                | stdlib_text/local_text: files held out         |
| max_text_bytes            | 0                   | stdlib_text/local_text: size cap (0 = none)    |
| text_glob                 | ""                  | local_text: files to read, e.g. "/d/**/*.txt"  |
| num_shards                | 0                   | training shards, each B/num_shards rows of a   |
|                           |                     | batch; 0 = one per process (multi-process)     |
| task                      | "copy" / "row_col"  | algorithmic or grid2d task                     |
| train_lengths             | (1, 20)             | algorithmic: problem sizes trained on          |
| test_lengths              | (21, 40)            | algorithmic: problem sizes of the test split   |
| num_symbols               | 64                  | algorithmic: symbols in the task alphabet      |
| grid_size                 | 8                   | grid2d: side of training grids                 |
| test_grid_sizes           | (12, 16)            | grid2d: sides of the test_<S> splits           |
| num_colors                | 4                   | grid2d: distractor colours per cell            |
| max_distance              | 4                   | grid2d manhattan: last distance class          |
| num_train_examples        | 50_000 / 20_000     | algorithmic / grid2d training examples         |
| num_eval_examples         | 1_000 / 500         | algorithmic / grid2d examples per eval split   |
| generation_seed           | 0                   | algorithmic / grid2d data seed                 |
| mlm.mask_rate             | 0.15                | MLM: share of tokens selected                  |
| mlm.mask_token_fraction   | 0.8                 | MLM: selected tokens replaced by MASK          |
| mlm.random_token_fraction | 0.1                 | MLM: selected tokens replaced by a random one  |
"""

from __future__ import annotations

from collections.abc import Iterator

import ml_collections

# The kinds register on import: text (kinds), stdlib_text / local_text (builders),
# algorithmic, grid2d.
from posjax.data import algorithmic, builders, grid2d, kinds, sources, tokenizers
from posjax.data.kinds import DataKind, TaskData, TextData, kind_of, register
from posjax.data.packing import MLMConfig
from posjax.data.sources import data_dir, prepare
from posjax.data.specs import BatchSpec
from posjax.data.tokenizers import get_tokenizer
from posjax.errors import ConfigError

__all__ = [
    "BatchSpec",
    "DataKind",
    "MLMConfig",
    "TaskData",
    "TextData",
    "algorithmic",
    "batch_spec",
    "builders",
    "data_dir",
    "default_data_config",
    "eval_windows",
    "get_tokenizer",
    "grid2d",
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
    """`config.data` with every field (see the module table) set for `dataset`."""
    if not dataset:
        raise ConfigError("default_data_config needs a dataset name, e.g. 'stdlib_text'")
    cfg = {
        "dataset": dataset,
        "data_dir": "",
        "train_split": "train",
        "eval_split": "validation",
        "allow_download": False,
        "text_key": "text",
        "tokenizer": "bytes",
        "sentencepiece_model": "",
        "sentencepiece_vocab_size": 8192,
        "sentencepiece_model_type": "unigram",
        "sentencepiece_train_chars": 10_000_000,
        "validation_fraction": 0.05,
        "num_shards": 0,
        "max_text_bytes": 0,
        "text_glob": "",
        "task": "copy",
        "train_lengths": (1, 20),
        "test_lengths": (21, 40),
        "num_symbols": 64,
        "grid_size": 8,
        "test_grid_sizes": (12, 16),
        "num_colors": 4,
        "max_distance": 4,
        "num_train_examples": 50_000,
        "num_eval_examples": 1_000,
        "generation_seed": 0,
        "mlm": {"mask_rate": 0.15, "mask_token_fraction": 0.8, "random_token_fraction": 0.1},
    }
    cfg.update(kinds.kind_class(sources.base_name(dataset)).defaults_for(dataset))
    return ml_collections.ConfigDict(cfg)
