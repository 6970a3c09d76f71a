"""Data kinds: one class per kind of dataset, registered under the dataset names users type.

    kind_of(data_cfg) -> DataKind      the registered class of data.dataset, else TextData
    register(name)                     class decorator
    names() -> tuple[str, ...]         the registered dataset names
    config_fields(dataset) -> dict     every `config.data` field, defaults for `dataset`
    Field(default, meaning)            one field a kind declares (`DataKind.fields`)

A data kind knows how its examples become training batches (`train_dataset`), what a batch
looks like before any data is read (`batch_spec`), what the trainer's evaluation scores
(`validation_batches`) and which evaluation scores a trained run (`evaluation`: "text",
windows by length, or "task", per problem size, whose hooks a task kind implements). Each
kind sits next to its builder: `TextData` here reads any prepared TFDS text dataset;
stdlib_text and local_text are in builders.py, algorithmic in algorithmic.py, grid2d in
grid2d.py. Adding a dataset is one subclass and one `@register`: the module is found by
posjax.data's import of every module of the package, and the class declares its own
config.data fields (`fields`, with defaults and meanings) and, for a task kind, its plot
labels (`size_label`, `panels`).

`config.data` holds the common fields (`COMMON_FIELDS`: what every pipeline reads) and every
registered kind's own fields, the chosen kind's defaults over the others'. Every field of
every kind is there so that any `--config.data.X=` override and any config.json written
before a kind's field existed load with any dataset; a dataset ignores the fields it does
not declare. This module sits above posjax.data.sources, which reads TFDS for a kind it is
given and imports no kind.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import grain
import numpy as np

from posjax.data import evaluation, sources, tokenizers, training
from posjax.data.packing import text_document, text_of
from posjax.data.specs import BatchSpec, token_arrays
from posjax.errors import ConfigError
from posjax.registry import Registry

_REGISTRY = Registry("dataset")


def register(name: str):
    """Class decorator: make a DataKind subclass the kind of `data.dataset = name`; a task
    kind without its plot labels is refused here, in one line."""

    def wrap(cls):
        cls.check_declaration(name)
        return _REGISTRY.register(name)(cls)

    return wrap


@dataclasses.dataclass(frozen=True)
class Field:
    """One config field: its default and what it means (`posjax list datasets`); `path`:
    its value names files or a folder, which a sweep makes absolute when it plans, so that
    every host that runs it reads the same ones (posjax.config.args.absolute_paths)."""

    default: Any
    meaning: str
    path: bool = False


# The fields every kind reads: where the data is, which splits, the tokenizer, sharding, MLM.
COMMON_FIELDS: dict[str, Field] = {
    "dataset": Field("stdlib_text", "the data kind, or any TFDS name (posjax list datasets)"),
    "data_dir": Field("", '"" = $POSJAX_DATA_DIR or ~/tensorflow_datasets', path=True),
    "train_split": Field("train", "split trained on (TFDS slices such as train[:99%] too)"),
    "eval_split": Field("validation", "split the trainer's evaluation reads"),
    "allow_download": Field(False, "let TFDS download a dataset not yet prepared"),
    "tokenizer": Field("bytes", "bytes, sentencepiece or symbols (task vocabularies)"),
    "sentencepiece_model": Field("", "an existing SentencePiece .model to use as is",
                                 path=True),
    "sentencepiece_vocab_size": Field(8192, "pieces of the locally trained model"),
    "sentencepiece_model_type": Field("unigram", "unigram or bpe"),
    "sentencepiece_train_chars": Field(10_000_000, "training-split characters it trains on"),
    "num_shards": Field(0, "training shards, each B/num_shards rows of a batch; 0 = one per "
                           "process"),
    "mlm": Field({"mask_rate": 0.15, "mask_token_fraction": 0.8,
                  "random_token_fraction": 0.1},
                 "MLM: share of tokens selected, replaced by MASK, by a random token"),
}


def names() -> tuple[str, ...]:
    """The dataset names with a registered kind (posjax builds these itself)."""
    return tuple(_REGISTRY)


def kind_class(dataset: str) -> type[DataKind]:
    """The class of `dataset` as config.data.dataset names it ('c4/en:3.1.0'): its
    registered kind, else TextData (a prepared TFDS set)."""
    return _REGISTRY.get(sources.base_name(dataset), TextData)


def kind_of(data_cfg, tokenizer: tokenizers.Tokenizer | None = None) -> DataKind:
    """The data kind of `data_cfg.dataset`, bound to `data_cfg` (and `tokenizer`, if given,
    instead of data.tokenizer's)."""
    return kind_class(data_cfg.dataset)(data_cfg, tokenizer)


def all_fields() -> dict[str, Field]:
    """Every config.data field: the common ones, then every registered kind's own (the first
    kind to declare a name gives its Field)."""
    fields = dict(COMMON_FIELDS)
    for other in _REGISTRY.values():
        for key, field in declared_fields(other).items():
            fields.setdefault(key, field)
    return fields


def config_fields(dataset: str) -> dict[str, Any]:
    """Every config.data field with its default for `dataset` (see the module docstring):
    the common fields, every registered kind's own fields (the first kind to declare a name
    gives its default), then the dataset's own kind's fields and `defaults_for`."""
    cls = kind_class(dataset)
    fields = {**all_fields(), **declared_fields(cls)}
    return {**{key: field.default for key, field in fields.items()}, "dataset": dataset,
            **cls.defaults_for(dataset)}


def declared_fields(cls: type[DataKind]) -> dict[str, Field]:
    """The config.data fields a kind class declares, its bases' first."""
    return {key: field for klass in reversed(cls.__mro__)
            for key, field in vars(klass).get("fields", {}).items()}


class DataKind(abc.ABC):
    """One kind of dataset: how its examples become batches, and how a run on it is scored.

    Class attributes: `name` (set by @register), `builder` (the tfds builder posjax builds
    the dataset with, or None for a dataset TFDS prepares), `evaluation` (the name of the
    evaluation that scores runs on it: "text" or "task"), `fields` (the config.data fields
    this class adds, `Field`s; a subclass inherits its bases'), `defaults` (values of fields
    declared elsewhere, e.g. the common `tokenizer`, for this dataset).
    """

    name: ClassVar[str] = ""
    builder: ClassVar[type | None] = None
    evaluation: ClassVar[str] = "text"
    fields: ClassVar[dict[str, Field]] = {}
    defaults: ClassVar[dict[str, Any]] = {}

    def __init__(self, data_cfg, tokenizer: tokenizers.Tokenizer | None = None,
                 tokenizer_name: str = "model"):
        """tokenizer: read the text with this one (a pretrained model's own, whose
        vocab_size is the model's, or a run's) instead of the one data.tokenizer names;
        tokenizer_name: what results record of it ("model": a snapshot's own)."""
        self.cfg = data_cfg
        self.given_tokenizer = tokenizer
        self.given_tokenizer_name = tokenizer_name

    @functools.cached_property
    def tokenizer(self) -> tokenizers.Tokenizer:
        """The tokenizer the data is read with: the one given, else data.tokenizer's."""
        return self.given_tokenizer or tokenizers.get_tokenizer(self.cfg)

    @classmethod
    def fields_read(cls, data_cfg) -> set[str]:
        """The config.data fields a run of this kind reads: the common ones and its own (a
        kind that reads another's text adds that one's)."""
        return {*COMMON_FIELDS, *declared_fields(cls)}

    @classmethod
    def check_declaration(cls, name: str) -> None:
        """Raise ValueError when the class lacks what its registration needs."""
        del name

    @staticmethod
    def known_names() -> tuple[str, ...]:
        """The dataset names posjax builds itself (for sources' unknown-dataset line)."""
        return names()

    @classmethod
    def defaults_for(cls, dataset: str) -> dict[str, Any]:
        """The config.data fields of `dataset` that differ from the common defaults."""
        del dataset
        return dict(cls.defaults)

    def builder_config(self):
        """The tfds BuilderConfig of a posjax-built dataset, made from config.data; None for
        a kind without a builder (sources reads it only when `builder` is set)."""
        return None

    def source(self, split: str) -> Sequence[dict]:
        """The examples of `split`, random access (a tfds.data_source by default).

        Every pipeline, evaluation and the SentencePiece trainer read examples through
        this, so a kind without a tfds builder overrides it (with `split_names` and, for a
        SentencePiece tokenizer, `corpus_name`) and needs no TFDS at all.
        """
        return sources.data_source(self, split)

    def split_names(self) -> tuple[str, ...]:
        """Every split of the dataset (the prepared TFDS dataset's by default)."""
        return sources.split_names(self)

    def corpus_name(self) -> str:
        """What files derived from the data (a trained SentencePiece model) are cached
        under: the prepared TFDS dataset's full name by default."""
        return sources.prepare(self).info.full_name

    @abc.abstractmethod
    def train_dataset(self, seq_len: int, batch_size: int, seed: int, *, mlm=None,
                      shard: training.Shard = training.WHOLE) -> grain.IterDataset:
        """Endless training batches of [batch_size, seq_len] from `shard` (index, count) of
        the training split (deterministic in `seed`)."""

    @abc.abstractmethod
    def batch_spec(self, seq_len: int, batch_size: int) -> BatchSpec:
        """Shapes, dtypes and sizes of one training batch; reads no data."""

    @abc.abstractmethod
    def validation_batches(self, seq_len: int, *, batch_size: int, num_batches: int,
                           mlm=None) -> Iterator[dict]:
        """What the trainer's own evaluation scores at `seq_len`."""

    def scored_data(self) -> dict[str, Any]:
        """What an evaluation of this data reads, recorded in its result (`data`): results
        whose `data` differ were measured on different inputs and are never merged."""
        return {"dataset": self.cfg.dataset}

    def position_reach(self, config, encoding) -> int:
        """The largest position count training reads beyond the stages' seq_len (0: none)."""
        del config, encoding
        return 0

    def prepare(self, config, batch: dict, key) -> dict:
        """The batch with the positions the model saw in training (as it is; a task kind
        trained on randomized positions draws them here, with `key`)."""
        del config, key
        return batch

    def check_evaluable(self, config, encoding) -> None:
        """A ConfigError, before training, where the run's own evaluation could not read the
        data it will score (none by default)."""
        del config, encoding

    def haystack_kind(self) -> TextData | None:
        """The text kind whose evaluation text a needle is hidden in (None: no text)."""
        return None

    def _check_batch_size(self, batch_size: int) -> None:
        if batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size}")


class TextData(DataKind):
    """Text documents (a `text_key` field), tokenized and packed; scored by length.

    As it is, the kind of any prepared TFDS text dataset (lm1b, pg19, c4, wikipedia, or any
    TFDS name; `sources.NAMED_TEXT` holds the presets' text key and splits). Text kinds take
    MLM masking.
    """

    fields = {"text_key": Field("text", "text field of a TFDS example (pg19: book_text)"),
              "packing": Field("documents", "documents (each its own segment, packed, "
                               "masked apart) or stream (rows cut from the concatenated "
                               "text: no mask, as GPT-2 trains)")}

    @classmethod
    def defaults_for(cls, dataset: str) -> dict[str, Any]:
        preset = sources.NAMED_TEXT.get(sources.base_name(dataset))
        if preset is None:
            return dict(cls.defaults)
        return {**cls.defaults, "text_key": preset.text_key, "train_split": preset.train_split,
                "eval_split": preset.eval_split}

    def scored_data(self) -> dict[str, Any]:
        """The dataset, the split scored and the tokenizer ("model": the one given, a
        pretrained snapshot's own; a run's by its name)."""
        return {**super().scored_data(), "split": self.cfg.eval_split,
                "tokenizer": (self.given_tokenizer_name if self.given_tokenizer
                              else self.cfg.tokenizer)}

    def to_document(self, example: dict) -> dict:
        """One example -> {"inputs": BOS + tokens + EOS, "score": ones}."""
        return text_document(example, tokenizer=self.tokenizer, text_key=self.cfg.text_key)

    def train_dataset(self, seq_len, batch_size, seed, *, mlm=None, shard=training.WHOLE):
        """Packed LM batches (see posjax.data.packing); MLM-masked when `mlm` is given."""
        self._check_batch_size(batch_size)
        return training.packed_lm(self.source(self.cfg.train_split), self.to_document,
                                  int(seq_len), int(batch_size), int(seed), mlm=mlm,
                                  tokenizer=self.tokenizer, shard=shard,
                                  packing=self.packing)

    def batch_spec(self, seq_len, batch_size):
        return BatchSpec("tokens", token_arrays(int(seq_len), int(batch_size)),
                         vocab_size=(self.given_tokenizer.vocab_size if self.given_tokenizer
                                     else tokenizers.vocab_size(self.cfg)),
                         whole_rows=self.packing == "stream", gapless_positions=True)

    @property
    def packing(self) -> str:
        """data.packing (packing.ROW_LAYOUTS); "documents" for a config made without it."""
        return self.cfg.get("packing", "documents")

    def eval_windows(self, length: int, *, batch_size: int, split: str | None = None,
                     max_tokens: int | None = None, **options) -> Iterator[dict]:
        """Batches of evaluation windows of `length` tokens of `split` (default
        data.eval_split), scoring the first `max_tokens` tokens of its stream; options:
        protocol, stride, max_windows, mlm, seed, row_len (`evaluation.text_windows`)."""
        evaluation.check_window_options(int(length), **options)  # before reading any data
        stream = evaluation.text_stream(self.source(split or self.cfg.eval_split),
                                        self.tokenizer, self.cfg.text_key, max_tokens)
        return evaluation.text_windows(stream, self.tokenizer, int(length),
                                       batch_size=batch_size, **options)

    def haystack_kind(self) -> TextData:
        return self

    def haystack_tokens(self, max_tokens: int, split: str | None = None, *,
                        plain: bool = False) -> np.ndarray:
        """int32[<= max_tokens + 1]: `split` (default data.eval_split) as one stream (BOS
        doc EOS ..., or with `plain` one text: `evaluation.text_stream`); a one-line
        ConfigError where the split holds no document."""
        split = split or self.cfg.eval_split
        tokens = evaluation.text_stream(self.source(split), self.tokenizer, self.cfg.text_key,
                                        max_tokens, plain=plain)
        if len(tokens) == 0:
            raise ConfigError(f"dataset {self.cfg.dataset}'s {split} split holds no document "
                              "to score: check the files its config.data fields name (a glob "
                              "that matches nothing), or give it more text")
        return tokens

    def validation_batches(self, seq_len, *, batch_size, num_batches, mlm=None):
        """`num_batches` batches of non-overlapping windows of `seq_len` tokens."""
        return self.eval_windows(seq_len, batch_size=batch_size,
                                 max_tokens=num_batches * batch_size * seq_len, mlm=mlm)


class TaskData(DataKind):
    """Examples scored per problem size (algorithmic tasks, grids): the hooks of the task
    evaluation (posjax.eval.tasks), which a subclass implements.

    common_length: pad every size to the longest one, so the evaluation compiles once; only
        sound for causal models, where trailing padding never reaches earlier tokens.
    size_label: what a size is, on the x axis of `posjax plot` ("problem size n").
    panels: the two accuracy panels of `posjax plot`, ((row key, axis label), ...), keys of
        posjax.eval.tasks.finish_metrics ("acc", "seq_acc", "balanced_acc").
    rank_by: the index in `panels` of the metric the table's mean reciprocal rank ranks by
        (the second: exact match, as Kazemnejad et al. 2023 rank).
    """

    evaluation = "task"
    common_length: ClassVar[bool] = False
    size_label: ClassVar[str] = ""
    panels: ClassVar[tuple[tuple[str, str], ...]] = ()
    rank_by: ClassVar[int] = 1

    @classmethod
    def check_declaration(cls, name: str) -> None:
        """A task kind names its sizes and accuracy panels, or plots would mislabel it."""
        if not cls.size_label or len(cls.panels) != 2:
            raise ValueError(
                f"task kind {name!r} ({cls.__name__}) must set size_label (what a size is) "
                "and panels (two (row key, axis label) pairs) for posjax plot"
            )

    def task_batches(self, batch_size: int, *,
                     splits: tuple[str, ...] | None = None) -> Iterator[tuple[str, int, dict]]:
        """(split, size, batch) over `splits` (default: every split but train)."""
        for split in splits or tuple(s for s in self.split_names() if s != "train"):
            yield from self.split_batches(split, batch_size)

    @abc.abstractmethod
    def split_batches(self, split: str, batch_size: int) -> Iterator[tuple[str, int, dict]]:
        """(split, size, batch) of one split, one size per batch."""

    def validation_batches(self, seq_len, *, batch_size, num_batches, mlm=None):
        """The eval split's batches, every size (seq_len and num_batches do not apply)."""
        del seq_len, num_batches, mlm
        for _, _, batch in self.task_batches(batch_size, splits=(self.cfg.eval_split,)):
            yield batch

    @abc.abstractmethod
    def train_size(self, config) -> int:
        """The largest size trained on."""

    @abc.abstractmethod
    def reach(self, config, encoding, size: int) -> int:
        """How many positions `encoding` must define to read an example of `size`
        (ConfigError when the run cannot be evaluated there)."""

    @abc.abstractmethod
    def describe(self, config, size: int) -> dict:
        """Extra fields of that size's result row."""

    def position_reach(self, config, encoding) -> int:
        return self.reach(config, encoding, self.train_size(config))

    @staticmethod
    def _refuse_mlm(mlm, what: str) -> None:
        if mlm is not None:
            raise ConfigError(f"MLM masking applies to text datasets; {what}")


def _sentencepiece_vocab_size(data_cfg) -> int:
    if data_cfg.get("sentencepiece_model"):
        return tokenizers.load_sentencepiece(data_cfg.sentencepiece_model).vocab_size
    return int(data_cfg.sentencepiece_vocab_size)


@tokenizers.register("sentencepiece", vocab_size=_sentencepiece_vocab_size, reads=(
    "sentencepiece_model", "sentencepiece_vocab_size", "sentencepiece_model_type",
    "sentencepiece_train_chars"))
def _sentencepiece(data_cfg) -> tokenizers.SentencePieceTokenizer:
    """data.sentencepiece_model if set (an existing model, as is); else SentencePiece trained
    on the training split (read through the data kind, so kinds without a tfds builder get
    one too), cached beside the data under the kind's `corpus_name()` (a prepared TFDS
    dataset's full name)."""
    if data_cfg.get("sentencepiece_model"):
        return tokenizers.load_sentencepiece(data_cfg.sentencepiece_model)
    kind = kind_of(data_cfg)
    budget = int(data_cfg.sentencepiece_train_chars)

    def lines() -> Iterator[str]:
        source, used = kind.source(data_cfg.train_split), 0
        for i in range(len(source)):
            for line in text_of(source[i], data_cfg.text_key).split("\n"):
                if used >= budget:
                    return
                used += len(line)
                yield line

    return tokenizers.load_or_train_sentencepiece(
        sentencepiece_model_path(data_cfg), lines,
        vocab_size=int(data_cfg.sentencepiece_vocab_size),
        model_type=data_cfg.sentencepiece_model_type)


def sentencepiece_model_path(data_cfg) -> Path:
    """The SentencePiece model data.tokenizer=sentencepiece reads: data.sentencepiece_model,
    else the one trained on the corpus, cached beside the data under the kind's
    `corpus_name()` (a prepared TFDS dataset's full name; local_text's names its files, so
    a changed folder of text has a model of its own), whether trained yet or not."""
    if data_cfg.get("sentencepiece_model"):
        return Path(data_cfg.sentencepiece_model)
    return (Path(sources.data_dir(data_cfg)) / "posjax_tokenizers" / kind_of(data_cfg).corpus_name()
            / data_cfg.train_split.replace("/", "_")
            / (f"sentencepiece-{data_cfg.sentencepiece_model_type}-"
               f"v{int(data_cfg.sentencepiece_vocab_size)}-"
               f"c{int(data_cfg.sentencepiece_train_chars)}.model"))
