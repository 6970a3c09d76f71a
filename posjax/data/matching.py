"""A long-text matching task in CAIL2019-SCM's form, built offline from text posjax has.

CAIL2019-SCM (RoFormer, Table 5) gives three legal documents A, B, C and asks which of B and
C is closer to A. Here the documents are cut from a text corpus (`data.match_corpus`:
stdlib_text, the running Python's standard library, or local_text, any folder of text via
data.text_glob), and "close" means "from the same file":

    A   a window of n = data.doc_chars characters of file F
    P   (the close one) the first d characters of a window of file G, then n - d characters
        of F, from a window of F that does not overlap A
    N   (the far one) the same d characters of G, then n - d characters of another file H
    (B, C) = (P, N) for label 0, (N, P) for label 1: label i % 2, balanced in every split

F, G, H are distinct files, drawn per triplet from a seeded generator; d = round(depth * n)
with depth uniform in [0, data.max_depth). P and N are identical up to d: the evidence (F's
text) starts at a random depth of B and C, so a reader that sees only the first k
characters of each document can tell P from N only when d < k. That makes the gain of
length measurable from the data alone: with `visible` the share of triplets whose evidence
starts inside what a length reads, no model reading that length can beat
visible + (1 - visible) / 2 (a coin for the rest): the `ceiling` the evaluation reports
beside each accuracy (posjax.eval.matching).

Files long enough for two windows (2n characters) are eligible; the train split cuts its
triplets from the corpus's training files, validation and test (other seeds) from its
held-out files, so no test text was seen in training. The dataset is written once as
array_record under data_dir, like every posjax builder; its name carries the corpus and
every field, so changing one builds a new copy.

The model reads two rows per triplet, the pairs (A, B) and (A, C), each
`[BOS] A [EOS] X [EOS]` cut to the run's length (each document gets half of the L - 3
tokens: at 1024 tokens, 510 of each, at 512, 254), and scores each row with one number
(posjax.models.Classifier with num_classes = 1): the label is the softmax over the two.
Pairs rather than one row A [SEP] B [SEP] C: each document gets half the length, not a
third, and the model is symmetric in B and C by construction (no position of B or C to
prefer), as a siamese reading of CAIL's pairs is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence

import ml_collections
import numpy as np
import tensorflow_datasets as tfds

from posjax.data import builders, kinds, tokenizers, training
from posjax.data.packing import text_of
from posjax.data.specs import BatchSpec
from posjax.errors import ConfigError, unknown

SPLIT_SEEDS = {"train": 0, "validation": 1, "test": 2}
# The corpus split each split's triplets are cut from.
CORPUS_SPLIT = {"train": "train", "validation": "validation", "test": "validation"}
CORPORA = ("stdlib_text", "local_text")


@dataclasses.dataclass(eq=False)
class MatchConfig(tfds.core.BuilderConfig):
    """One matching dataset: the corpus it is cut from and its sizes."""

    corpus: str = "stdlib_text"
    corpus_config: str = ""  # the corpus builder config's name (its version, files)
    text_glob: str = ""
    data_dir: str = ""
    validation_fraction: float = 0.05  # the corpus's, as local_text's fields
    max_text_bytes: int = 0
    doc_chars: int = 512
    max_depth: float = 0.9
    num_train_examples: int = 20_000
    num_eval_examples: int = 1_000
    generation_seed: int = 0


# The config.data fields the corpus is read with.
CORPUS_FIELDS = ("data_dir", "text_glob", "validation_fraction", "max_text_bytes")


def corpus_kind(data_cfg) -> kinds.DataKind:
    """The text kind the triplets are cut from (data.match_corpus), with data_cfg's fields."""
    if data_cfg.match_corpus not in CORPORA:
        raise unknown("data.match_corpus", data_cfg.match_corpus, CORPORA)
    cfg = ml_collections.ConfigDict(kinds.config_fields(data_cfg.match_corpus))
    for key in CORPUS_FIELDS:
        cfg[key] = data_cfg.get(key, cfg[key])
    return kinds.kind_of(cfg)


# The fewest characters of a document A, B or C.
MIN_DOC_CHARS = 8


def match_config(data_cfg) -> MatchConfig:
    """The builder config of `data_cfg` (ConfigError for sizes that cannot be built)."""
    c = data_cfg
    if int(c.doc_chars) < MIN_DOC_CHARS:
        raise ConfigError(f"data.doc_chars={c.doc_chars} must be >= {MIN_DOC_CHARS} characters")
    if not 0.0 <= float(c.max_depth) < 1.0:
        raise ConfigError(f"data.max_depth={c.max_depth} must be in [0, 1): the evidence "
                          "must start inside B and C")
    if int(c.num_train_examples) < 2 or int(c.num_eval_examples) < 2:
        raise ConfigError("data.num_train_examples and data.num_eval_examples must be >= 2 "
                          "(labels alternate)")
    corpus = corpus_kind(c).builder_config()
    return MatchConfig(
        name=(f"{c.match_corpus}-{corpus.name}-n{int(c.doc_chars)}-depth{float(c.max_depth):g}"
              f"-{int(c.num_train_examples)}x{int(c.num_eval_examples)}"
              f"-seed{int(c.generation_seed)}"),
        description=f"matching triplets of {int(c.doc_chars)} characters cut from "
                    f"{c.match_corpus} ({corpus.description})",
        corpus=str(c.match_corpus), corpus_config=corpus.name, text_glob=str(c.text_glob),
        data_dir=str(c.data_dir), validation_fraction=float(c.validation_fraction),
        max_text_bytes=int(c.max_text_bytes), doc_chars=int(c.doc_chars),
        max_depth=float(c.max_depth),
        num_train_examples=int(c.num_train_examples),
        num_eval_examples=int(c.num_eval_examples),
        generation_seed=int(c.generation_seed))


def _window(rng: np.random.Generator, text: str, start_range: tuple[int, int], n: int) -> str:
    lo, hi = start_range
    start = int(rng.integers(lo, hi + 1))
    return text[start:start + n]


def make_triplet(rng: np.random.Generator, texts: Sequence[str], n: int, max_depth: float,
                 label: int) -> dict:
    """One triplet (module doc) from `texts` (each >= 2n characters, at least 3)."""
    f, g, h = (int(i) for i in rng.choice(len(texts), 3, replace=False))
    own = texts[f]
    # two non-overlapping windows of F: A and the close document's evidence
    first = int(rng.integers(0, len(own) - 2 * n + 1))
    second = first + n + int(rng.integers(0, len(own) - 2 * n - first + 1))
    starts = (first, second) if rng.random() < 0.5 else (second, first)
    a, evidence = own[starts[0]:starts[0] + n], own[starts[1]:starts[1] + n]
    depth = int(round(float(rng.uniform(0.0, max_depth)) * n))
    shared = _window(rng, texts[g], (0, len(texts[g]) - n), n)[:depth]
    far = _window(rng, texts[h], (0, len(texts[h]) - n), n)
    close, other = shared + evidence[:n - depth], shared + far[:n - depth]
    b, c = (close, other) if label == 0 else (other, close)
    return {"a": a, "b": b, "c": c, "label": label, "evidence": depth,
            "depth": depth / n}


def generate_split(cfg: MatchConfig, split: str, texts: Sequence[str]) -> Iterator[dict]:
    count = cfg.num_train_examples if split == "train" else cfg.num_eval_examples
    for i in range(count):
        rng = np.random.default_rng([cfg.generation_seed, SPLIT_SEEDS[split], i])
        yield make_triplet(rng, texts, cfg.doc_chars, cfg.max_depth, i % 2)


def _fewer_chars(texts: Sequence[str]) -> str:
    """The fix that fits `texts`: the doc_chars whose triplets its third-longest file can
    give (configs/finetune.py derives doc_chars from long_len)."""
    if len(texts) < 3 or (most := sorted(map(len, texts))[-3] // 2) < MIN_DOC_CHARS:
        return "no doc_chars fits its files"
    return (f"lower data.doc_chars to at most {most} (configs/finetune.py's long_len to at "
            f"most {2 * most + 4})")


class DocMatch(builders.LocalBuilder):
    """Matching triplets (A, B, C) cut from a text corpus (see the module docstring)."""

    VERSION = tfds.core.Version("1.0.0")

    def _info(self) -> tfds.core.DatasetInfo:
        return builders.LocalDatasetInfo(
            builder=self,
            description=__doc__.split("\n\n")[0],
            features=tfds.features.FeaturesDict({
                "a": tfds.features.Text(), "b": tfds.features.Text(),
                "c": tfds.features.Text(),
                "label": tfds.features.Scalar(dtype=np.int32),
                "evidence": tfds.features.Scalar(dtype=np.int32),
                "depth": tfds.features.Scalar(dtype=np.float32),
            }),
            disable_shuffling=True,
        )

    def _split_generators(self, dl_manager):
        del dl_manager
        cfg = self.builder_config
        data_cfg = ml_collections.ConfigDict(kinds.config_fields("doc_match"))
        data_cfg.update(match_corpus=cfg.corpus, text_glob=cfg.text_glob,
                        data_dir=cfg.data_dir, validation_fraction=cfg.validation_fraction,
                        max_text_bytes=cfg.max_text_bytes)  # the corpus the name records
        corpus = corpus_kind(data_cfg)
        texts = {}
        for split in dict.fromkeys(CORPUS_SPLIT.values()):
            source = corpus.source(split)
            every = [text_of(source[i], "text") for i in range(len(source))]
            texts[split] = [t for t in every if len(t) >= 2 * cfg.doc_chars]
            if len(texts[split]) < 3:
                raise ConfigError(
                    f"doc_match: the {split} split of {cfg.corpus} has {len(texts[split])} "
                    f"file(s) of at least 2 x doc_chars = {2 * cfg.doc_chars} characters; "
                    f"a triplet needs 3: {_fewer_chars(every)}, or use more text")
        return {split: self._generate_examples(split, texts[CORPUS_SPLIT[split]])
                for split in SPLIT_SEEDS}

    def _generate_examples(self, split: str, texts: list[str]):
        yield from enumerate(generate_split(self.builder_config, split, texts))


def _tokens(tokenizer, text) -> np.ndarray:
    return np.asarray(tokenizer.encode(text), np.int32)


def pair_rows(example: dict, tokenizer, length: int) -> dict:
    """The two rows of a triplet at `length` tokens (module doc): inputs, positions,
    segment_ids int32[2, length]; targets (the label) and weights (1) scalars; visible: 1.0
    when the evidence starts inside what the rows read, else 0.0."""
    text = {k: (v.decode("utf-8") if isinstance(v, bytes) else str(v))
            for k, v in example.items() if k in "abc"}
    depth = int(example["evidence"])
    budget = length - 3
    if budget < 2:
        raise ConfigError(f"doc_match rows need at least 5 tokens, got length {length}")
    keep_a, keep_x = budget // 2, budget - budget // 2
    a = _tokens(tokenizer, text["a"])[:keep_a]
    rows, evidence_at = [], None
    for key in "bc":
        head = _tokens(tokenizer, text[key][:depth])
        x = np.concatenate([head, _tokens(tokenizer, text[key][depth:])])[:keep_x]
        evidence_at = len(head)
        rows.append(np.concatenate([[tokenizer.bos_id], a, [tokenizer.eos_id], x,
                                    [tokenizer.eos_id]]).astype(np.int32))
    inputs = np.zeros((2, length), np.int32)
    segments = np.zeros((2, length), np.int32)
    for k, row in enumerate(rows):
        inputs[k, :len(row)] = row
        segments[k, :len(row)] = 1
    positions = np.broadcast_to(np.arange(length, dtype=np.int32), (2, length)).copy()
    return {"inputs": inputs, "positions": positions, "segment_ids": segments,
            "targets": np.int32(example["label"]), "weights": np.float32(1.0),
            "visible": np.float32(evidence_at < keep_x)}


@kinds.register("doc_match")
class MatchData(kinds.DataKind):
    """CAIL2019-SCM-style matching triplets cut from a text corpus (module docstring);
    the model scores the pairs (A, B) and (A, C); scored by accuracy (eval: match)."""

    builder = DocMatch
    evaluation = "match"

    @classmethod
    def fields_read(cls, data_cfg) -> set[str]:
        return super().fields_read(data_cfg) | set(CORPUS_FIELDS)

    fields = {
        "match_corpus": kinds.Field("stdlib_text", "matching: the text the triplets are cut "
                                                   "from, stdlib_text or local_text"),
        "text_glob": kinds.Field("", 'files to read, e.g. "/d/**/*.txt"', path=True),
        "doc_chars": kinds.Field(512, "matching: characters of each document A, B, C"),
        "max_depth": kinds.Field(0.9, "matching: the evidence starts at a depth drawn from "
                                      "[0, max_depth) of B and C"),
        "num_train_examples": kinds.Field(20_000, "training examples"),
        "num_eval_examples": kinds.Field(1_000, "examples per evaluation split"),
        "generation_seed": kinds.Field(0, "seed of the generated data"),
    }

    def builder_config(self) -> MatchConfig:
        return match_config(self.cfg)

    def corpus_name(self) -> str:
        """The corpus's own: a SentencePiece model trained for pretraining on that corpus is
        the one found."""
        return corpus_kind(self.cfg).corpus_name()

    def scored_data(self) -> dict:
        return {**super().scored_data(), "corpus": self.cfg.match_corpus,
                "doc_chars": int(self.cfg.doc_chars), "max_depth": float(self.cfg.max_depth),
                "generation_seed": int(self.cfg.generation_seed),
                "tokenizer": self.cfg.tokenizer}

    def batch_spec(self, seq_len, batch_size):
        import jax  # noqa: PLC0415 - shapes only

        rows = (int(batch_size), 2, int(seq_len))
        arrays = {k: jax.ShapeDtypeStruct(rows, np.int32)
                  for k in ("inputs", "positions", "segment_ids")}
        arrays["targets"] = jax.ShapeDtypeStruct(rows[:1], np.int32)
        arrays["weights"] = jax.ShapeDtypeStruct(rows[:1], np.float32)
        return BatchSpec("tokens", arrays, vocab_size=tokenizers.vocab_size(self.cfg),
                         num_classes=1)

    def _rows(self, length: int):
        tokenizer = self.tokenizer
        return lambda example: pair_rows(example, tokenizer, length)

    def train_dataset(self, seq_len, batch_size, seed, *, mlm=None, shard=training.WHOLE):
        self._check_batch_size(batch_size)
        if mlm is not None:
            raise ConfigError("MLM masking applies to text datasets; doc_match is a "
                              "classification task (model.kind=classifier)")
        train = tuple(self.batch_spec(seq_len, batch_size).arrays)
        rows = training.shuffled_forever(self.source(self.cfg.train_split), seed, shard).map(
            self._rows(int(seq_len))).map(lambda r: {k: r[k] for k in train})
        return rows.to_iter_dataset(training.READ_OPTIONS).batch(int(batch_size))

    def examples(self, split: str, length: int) -> Iterator[dict]:
        """Every triplet of `split` as its rows at `length` tokens (with `visible`)."""
        source = self.source(split)
        to_rows = self._rows(int(length))
        return (to_rows(source[i]) for i in range(len(source)))

    def batches(self, split: str, length: int, batch_size: int,
                limit: int | None = None) -> Iterator[dict]:
        """Batches of `split`'s rows; the last one filled up with copies of its first row at
        weight 0 (a copy, not zeros: an all-padding row attends to nothing)."""
        rows = self.examples(split, length)
        chunk: list[dict] = []
        for index, row in enumerate(rows):
            if limit is not None and index >= limit:
                break
            chunk.append(row)
            if len(chunk) == batch_size:
                yield _stack(chunk)
                chunk = []
        if chunk:
            filler = {**chunk[0], "weights": np.float32(0.0), "visible": np.float32(0.0)}
            yield _stack(chunk + [filler] * (batch_size - len(chunk)))

    def validation_batches(self, seq_len, *, batch_size, num_batches, mlm=None):
        del mlm
        for batch in self.batches(self.cfg.eval_split, int(seq_len), int(batch_size),
                                  limit=int(batch_size) * int(num_batches)):
            yield {k: v for k, v in batch.items() if k != "visible"}

    def split_names(self) -> tuple[str, ...]:
        return tuple(SPLIT_SEEDS)


def _stack(rows: list[dict]) -> dict:
    return {k: np.stack([np.asarray(r[k]) for r in rows]) for k in rows[0]}


def visible_share(kind: MatchData, split: str, length: int) -> float:
    """The share of `split`'s triplets whose evidence starts inside rows of `length` tokens:
    what a reader of that length can see (module doc)."""
    seen = [float(row["visible"]) for row in kind.examples(split, length)]
    return float(np.mean(seen)) if seen else 0.0


def ceiling(visible: float) -> float:
    """The best accuracy a reader that sees the evidence of a `visible` share can reach."""
    return visible + (1.0 - visible) / 2.0
