"""Data kinds: a dataset is one class and one registration (posjax.data.kinds).

Toy kinds defined here keep their examples in memory and have no tfds builder; the fixture
below makes any TFDS read fail, so they show a kind needs nothing but its class.
"""

from __future__ import annotations

import string

import numpy as np
import pytest

from posjax import data
from posjax.data import (
    algorithmic,
    builders,
    evaluation,
    grid2d,
    kinds,
    packing,
    sources,
    training,
)
from posjax.data.specs import BatchSpec, token_arrays
from posjax.errors import ConfigError


def _pattern_text(start: int, words: int = 40) -> str:
    """A repeated pattern of lowercase words, shifted by `start`."""
    letters = string.ascii_lowercase
    return " ".join(letters[(start + i) % 26] * (1 + (start + i) % 5) for i in range(words))


@data.register("toy_pattern_text")
class ToyPatternText(data.TextData):
    """Text documents held in memory: 40 for training, 4 held out."""

    defaults = {"eval_split": "heldout"}

    def source(self, split):
        starts = range(4) if split == self.cfg.eval_split else range(10, 50)
        return [{"text": _pattern_text(s)} for s in starts]

    def split_names(self):
        return ("train", "heldout")

    def corpus_name(self):
        return "toy_pattern_text"


@data.register("toy_counting_task")
class ToyCountingTask(data.TaskData):
    """Count from a random start for n steps: prompt = the start, answer = the next n
    numbers (n = the problem size). Sizes 1-3 train, 4-6 test."""

    defaults = {"tokenizer": "symbols", "eval_split": "test", "num_symbols": 16}
    common_length = True
    size_label = "numbers counted"
    panels = (("acc", "token accuracy"), ("seq_acc", "exact match"))

    def split_names(self):
        return ("train", "validation", "test")

    def source(self, split):
        lo, hi = (4, 6) if split == "test" else (1, 3)
        rng = np.random.default_rng(["train", "validation", "test"].index(split))
        examples = []
        for _ in range(60 if split == "train" else 9):
            n, start = int(rng.integers(lo, hi + 1)), int(rng.integers(0, 8))
            tokens = np.concatenate([[start + 4, algorithmic.SEP],
                                     np.arange(start + 1, start + 1 + n) % 16 + 4])
            mask = np.r_[0, 0, np.ones(n)]
            examples.append({"tokens": tokens.astype(np.int32),
                             "answer_mask": mask.astype(np.int32), "size": np.int32(n)})
        return examples

    def train_dataset(self, seq_len, batch_size, seed, *, mlm=None):
        self._refuse_mlm(mlm, "toy counting is causal")
        return training.packed_lm(self.source("train"), algorithmic.task_document,
                                  seq_len, batch_size, seed)

    def batch_spec(self, seq_len, batch_size):
        return BatchSpec("tokens", token_arrays(seq_len, batch_size), vocab_size=20)

    def split_batches(self, split, batch_size):
        by_size: dict[int, list[dict]] = {}
        for example in self.source(split):
            n = len(example["tokens"])
            by_size.setdefault(int(example["size"]), []).append(packing.lm_example(
                example["tokens"], np.ones(n), np.arange(n), example["answer_mask"]))
        for size in sorted(by_size):
            for batch in evaluation.batched(iter(by_size[size]), batch_size):
                yield split, size, batch

    def train_size(self, config):
        return 3

    def reach(self, config, encoding, size):
        return size + 2

    def describe(self, config, size):
        return {"tokens": size + 2}


@pytest.fixture(autouse=True)
def no_tfds(monkeypatch):
    """The toy kinds must never reach TFDS."""

    def refuse(*args, **kwargs):
        raise AssertionError("a toy data kind read TFDS")

    for name in ("prepare", "data_source", "make_builder", "split_names"):
        monkeypatch.setattr(sources, name, refuse)


def shapes(arrays: dict) -> dict:
    return {k: (tuple(v.shape), np.dtype(v.dtype)) for k, v in arrays.items()}


# --- the registry -----------------------------------------------------------------------


def test_kind_of_returns_the_registered_kind_with_its_defaults():
    cfg = data.default_data_config("toy_pattern_text")
    assert cfg.eval_split == "heldout"  # the kind's defaults, over the common ones
    kind = data.kind_of(cfg)
    assert type(kind) is ToyPatternText and kind.cfg is cfg
    assert kind.name == "toy_pattern_text" and kind.evaluation == "text" and kind.builder is None
    assert {"toy_pattern_text", "toy_counting_task"} <= set(kinds.names())


def test_posjax_datasets_are_kinds_next_to_their_builders():
    expected = {"stdlib_text": builders.StdlibText, "local_text": builders.LocalText,
                "algorithmic": algorithmic.Algorithmic, "grid2d": grid2d.Grid2d}
    for name, builder in expected.items():
        kind = data.kind_of(data.default_data_config(name))
        assert kind.name == name and kind.builder is builder
    assert isinstance(data.kind_of(data.default_data_config("stdlib_text")), data.TextData)
    for name in ("algorithmic", "grid2d"):
        kind = data.kind_of(data.default_data_config(name))
        assert isinstance(kind, data.TaskData) and kind.evaluation == "task"
    config = data.kind_of(data.default_data_config("stdlib_text")).builder_config()
    assert config.name.startswith("python")


@pytest.mark.parametrize("name", ["lm1b", "pg19", "c4", "c4/realnewslike", "my_tfds_set"])
def test_unknown_names_are_tfds_text(name):
    cfg = data.default_data_config(name)
    kind = data.kind_of(cfg)
    assert type(kind) is data.TextData and kind.builder is None and kind.evaluation == "text"
    if name == "pg19":
        assert (cfg.text_key, cfg.eval_split) == ("book_text", "validation")


def test_a_kind_declares_its_own_fields_and_a_task_kind_its_plot_labels():
    @data.register("toy_fields_text")
    class ToyFields(ToyPatternText):
        fields = {"toy_width": data.Field(7, "a field only this kind reads")}

    try:
        cfg = data.default_data_config("toy_fields_text")
        assert cfg.toy_width == 7 and cfg.eval_split == "heldout"  # its own, and its base's
        # every config has every kind's fields, so a dataset can be switched by an override
        assert data.default_data_config("stdlib_text").toy_width == 7
    finally:  # other tests' configs keep today's fields
        kinds._REGISTRY.pop("toy_fields_text")
    assert data.default_data_config("grid2d").task == "row_col"  # the kind's own default
    assert data.default_data_config("stdlib_text").task == "copy"  # the first declarer's
    assert kinds.declared_fields(algorithmic.AlgorithmicData)["train_lengths"].default == (1, 20)
    with pytest.raises(ValueError, match="must set size_label"):

        @data.register("toy_unlabelled_task")
        class Unlabelled(ToyCountingTask):
            size_label = ""

    assert "toy_unlabelled_task" not in kinds.names()


def test_registering_a_name_twice_is_refused():
    with pytest.raises(ValueError, match="registered twice"):
        data.register("toy_pattern_text")(ToyPatternText)
    with pytest.raises(ValueError, match="registered twice"):

        @data.register("stdlib_text")
        class Again(data.TextData):
            pass

    assert data.kind_of(data.default_data_config("stdlib_text")).builder is builders.StdlibText


# --- a text kind without a tfds builder -------------------------------------------------


def test_toy_text_batches_match_the_batch_spec():
    cfg = data.default_data_config("toy_pattern_text")
    spec = data.kind_of(cfg).batch_spec(32, 4)
    assert spec.kind == "tokens"
    for mlm in (None, cfg.mlm):
        iterator = iter(data.kind_of(cfg).train_dataset(32, 4, 0, mlm=mlm))
        batches = [next(iterator) for _ in range(3)]
        for batch in batches:
            assert shapes(batch) == shapes(spec.arrays)
            assert batch["inputs"].max() < spec.vocab_size
        again = iter(data.kind_of(cfg).train_dataset(32, 4, 0, mlm=mlm))
        for a, b in zip(batches, [next(again) for _ in range(3)], strict=True):
            for k in a:
                np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_toy_text_validation_batches_are_windows_of_the_held_out_split():
    cfg = data.default_data_config("toy_pattern_text")
    kind = data.kind_of(cfg)
    spec = kind.batch_spec(16, 2)
    batches = list(kind.validation_batches(16, batch_size=2, num_batches=3))
    assert len(batches) == 3
    assert all(shapes(b) == shapes(spec.arrays) for b in batches)
    stream = evaluation.text_stream(kind.source("heldout"), kind.tokenizer, "text")
    np.testing.assert_array_equal(batches[0]["inputs"][0], stream[:16])
    sliding = list(data.kind_of(cfg).eval_windows(16, batch_size=2, protocol="sliding", row_len=32))
    assert all(b["inputs"].shape == (2, 32) for b in sliding)
    with pytest.raises(ConfigError, match="evaluation protocol"):
        data.kind_of(cfg).eval_windows(16, batch_size=2, protocol="strided")


def test_toy_text_trains_a_sentencepiece_tokenizer_from_its_source(tmp_path):
    cfg = data.default_data_config("toy_pattern_text")
    cfg.update(data_dir=str(tmp_path), tokenizer="sentencepiece", sentencepiece_vocab_size=300)
    assert data.kind_of(cfg).batch_spec(32, 2).vocab_size == 300
    batch = next(iter(data.kind_of(cfg).train_dataset(32, 2, 0)))
    assert batch["inputs"].max() < 300
    cached = list((tmp_path / "posjax_tokenizers" / "toy_pattern_text").rglob("*.model"))
    assert len(cached) == 1


# --- a task kind without a tfds builder -------------------------------------------------


def test_toy_task_kind_batches_per_size():
    cfg = data.default_data_config("toy_counting_task")
    kind = data.kind_of(cfg)
    assert cfg.tokenizer == "symbols" and kind.common_length
    spec = data.kind_of(cfg).batch_spec(16, 4)
    assert shapes(next(iter(data.kind_of(cfg).train_dataset(16, 4, 1)))) == shapes(spec.arrays)
    found = {(split, size) for split, size, _ in data.kind_of(cfg).task_batches(4)}
    assert {split for split, _ in found} == {"validation", "test"}
    assert {size for split, size in found if split == "test"} <= {4, 5, 6}
    validation = list(kind.validation_batches(16, batch_size=4, num_batches=1))
    test = [b for _, _, b in kind.task_batches(4, splits=("test",))]
    assert len(validation) == len(test)
    for a, b in zip(validation, test, strict=True):
        np.testing.assert_array_equal(a["inputs"], b["inputs"])
    assert kind.position_reach(None, None) == 5
    with pytest.raises(ConfigError, match="MLM masking applies to text datasets"):
        iter(data.kind_of(cfg).train_dataset(16, 4, 1, mlm=cfg.mlm))
