"""Retrieval tasks: a key hidden at a chosen depth of a context of a chosen length.

Each task (a `Probe`, registered by name) makes one trial of `length` tokens with the
decisive information at `depth` (0 = the start of the context, 1 = its end), from a seeded
numpy Generator, with the run's tokenizer:

| task     | context                                     | answer (scored tokens)            |
|----------|---------------------------------------------|-----------------------------------|
| passkey  | filler, the pass key sentence at the depth  | the 5-digit key                   |
| needle   | the run's own text, a needle at the depth   | the needle's 7-digit number       |
| mqar     | key:value pairs, then queries of 4 of them  | the queried values                |
| flipflop | w/i/r instructions with bits                | the bit read back, = the last one |
|          |                                             | written                           |

passkey is Mohtashami & Jaggi 2023's format ("Landmark Attention", arXiv:2305.16300, as PI,
YaRN, LongRoPE and Self-Extend use it): their task line, the filler "The grass is green. The
sky is blue. The sun is yellow. Here we go. There and back again." repeated, "The pass key
is NNNNN. Remember it. NNNNN is the pass key." at the depth, then "What is the pass key? The
pass key is", lines joined by newlines; the filler is cut to the token budget, so the key
sits after `round(depth * F)` of the F filler tokens. `data.passkey_intro=false` drops the
task line (about 150 bytes), so a model trained at 128 bytes can hold a pass key.

needle is Kamradt 2023's needle in a haystack with RULER's needle and question (Hsieh et al.
2024, arXiv:2404.06654, niah_single): the haystack is the run's own evaluation text, its
documents one after another as plain text (each ending in a newline, no BOS or EOS between
them, as Kamradt concatenates essays), a window of it from a seeded offset; the needle
"One of the special magic numbers for WORD is: NNNNNNN." and the question "What is the
special magic number for WORD mentioned in the provided text? The special magic number for
WORD mentioned in the provided text is".

mqar is Zoology's multi-query associative recall (Arora et al. 2023, arXiv:2312.04927) in
characters: pairs "abc:7 " (3-letter keys, all distinct, and digit values) fill the context,
then `data.mqar_queries` of them are asked again as "abc:" and each value is scored; the
pairs asked are the ones at the depth.

flipflop is Liu et al. 2023's flip-flop language ("Exposing Attention Glitches with
Flip-Flop Language Modeling", arXiv:2306.00946) in characters: pairs "w1" (write), "i0"
(ignore), "r1" (read: the bit is the last one written), the first one a write; before the
depth, instructions are drawn FFL(p): ignore with p = `data.flipflop_ignore`, write and read
(1 - p) / 2 each; the last write is at the depth; after it come ignores and reads (weights p
: (1 - p) / 2) and the trial ends with a read. The reads after the last write are scored.

mqar and flipflop are character tasks: they need a tokenizer with one token per character
(bytes, the default). The tokens of a trial are BOS + context + question + answer,
`length` of them; a model reads all but the last (positions 0..length-2) and predicts each
answer token from the ones before it, so a trial of length L fits a training row of L tokens
(packed rows of seq_len hold trials of up to seq_len tokens).

Every trial comes with `candidates`: the true row and `distractors` rows with another answer
(other keys or values, drawn uniformly; flipflop: the other bit), of the same length, so any
causal LM can be scored by which answer it finds most likely, without training on the task
(posjax.eval.retrieval). `RetrievalData` (dataset=retrieval) trains on the task itself at
lengths `data.train_lengths` and depths drawn uniformly, mixed with the documents of
`data.mix_dataset` at the share `data.text_mix`.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from posjax.data import evaluation, kinds, tokenizers, training
from posjax.data.specs import BatchSpec, token_arrays
from posjax.errors import ConfigError
from posjax.registry import Registry

PROBES = Registry("retrieval task")
register_probe = PROBES.register
# Split seeds of the generated data (the evaluation's trials have their own).
SPLIT_SEEDS = {"train": 0, "validation": 1}


# What the text tasks' answers are written in.
DIGITS = "0123456789"


@dataclasses.dataclass(frozen=True)
class Trial:
    """One trial. tokens int32[T]: BOS, context, question, true answer (T = length);
    answer bool[T]: the answer's tokens; candidates int32[C, T]: row 0 = tokens, the others
    the same row with a distractor answer; key_start: the first token of the key (the pass
    key sentence, the needle, the first pair asked, the last write)."""

    tokens: np.ndarray
    answer: np.ndarray
    candidates: np.ndarray
    key_start: int


def _encode(tokenizer, text: str) -> np.ndarray:
    return np.asarray(tokenizer.encode(text), np.int32)


def _filled(filler: np.ndarray, count: int, offset: int = 0) -> np.ndarray:
    """`count` tokens of `filler` repeated, starting at `offset`."""
    if count <= 0:
        return np.zeros(0, np.int32)
    reps = -(-(offset + count) // len(filler))
    return np.tile(filler, reps)[offset:offset + count]


def _too_short(name: str, length: int, need: int) -> ConfigError:
    """The error of a trial that `length` tokens cannot hold; its `need` is the shortest."""
    error = ConfigError(f"{name} needs at least {need} tokens per trial, got length {length}: "
                        "use longer trials (to train: train_min=N in configs/retrieval.py's arg, "
                        "or --config.data.train_lengths=MIN,MAX; to evaluate: --lengths)")
    error.need = need
    return error


def _trial(bos: int, before, key, after, question, answers: list[np.ndarray]) -> Trial:
    """BOS + before + key + after + question + answer, with each answer a candidate."""
    prompt = np.concatenate([[bos], before, key, after, question]).astype(np.int32)
    rows = np.stack([np.concatenate([prompt, a]) for a in answers]).astype(np.int32)
    answer = np.zeros(rows.shape[1], bool)
    answer[len(prompt):] = True
    return Trial(rows[0], answer, rows, 1 + len(before))


class Probe(abc.ABC):
    """A retrieval task: `trial(rng, length, depth, tokenizer, haystack)` (see the module).

    cfg: config.data (the fields of `RetrievalData`); depths: the default depths of its
    evaluation grid; needs_haystack: the trial reads the run's own text.
    """

    name: ClassVar[str] = ""
    depths: ClassVar[tuple[float, ...]] = (0.0, 0.25, 0.5, 0.75, 1.0)
    needs_haystack: ClassVar[bool] = False

    def __init__(self, cfg):
        self.cfg = cfg
        self.check_fields()

    def check_fields(self) -> None:
        """A one-line ConfigError for a field that leaves nothing to score (0 distractors:
        every answer is right, accuracy 1 for a model that knows nothing)."""
        if type(self).candidates is Probe.candidates and int(self.cfg.distractors) < 1:
            raise ConfigError(f"data.distractors={self.cfg.distractors}: {self.name} scores "
                              "the true answer against its distractors (chance 1 / (1 + "
                              "distractors)): give at least 1")

    @property
    def candidates(self) -> int:
        """Rows per trial: the true answer and its distractors."""
        return 1 + int(self.cfg.distractors)

    @abc.abstractmethod
    def trial(self, rng: np.random.Generator, length: int, depth: float, tokenizer,
              haystack: np.ndarray | None = None) -> Trial:
        """One trial of `length` tokens with the key at `depth` (haystack: int32[n], the
        text a needle is hidden in)."""

    def check_tokenizer(self, tokenizer) -> None:
        """A one-line ConfigError when `tokenizer` cannot write this task (a text task)."""
        try:
            tokenizer.encode("The pass key is 12345.")
        except ConfigError as e:
            raise ConfigError(f"{self.name} is written in text, which this run's tokenizer "
                              "cannot encode: evaluate a run trained with the bytes or "
                              "sentencepiece tokenizer") from e
        if tokenizer.decode(tokenizer.encode(DIGITS)).strip() != DIGITS:
            raise ConfigError(f"{self.name}'s answers are numbers, and this tokenizer drops "
                              f"digits ({DIGITS} reads back as "
                              f"{tokenizer.decode(tokenizer.encode(DIGITS)).strip()!r}): "
                              "evaluate a model whose tokenizer writes them")

    def _numbers(self, rng, digits: int) -> list[str]:
        """The true number and distinct distractors, `digits` digits each."""
        low = 10 ** (digits - 1)
        values = rng.choice(9 * low, self.candidates, replace=False) + low
        return [str(v) for v in values]

    def _placed(self, length: int, depth: float, tokenizer, head, fill, key, question,
                answers) -> Trial:
        """BOS + head + F filler tokens (`fill(F)`) with `key` after round(depth * F) of
        them + question + answer, `length` tokens in all."""
        need = 1 + len(head) + len(key) + len(question) + len(answers[0])
        budget = length - need
        if budget < 0:
            raise _too_short(self.name, length, need)
        filler = fill(budget)
        before = int(round(float(depth) * budget))
        return _trial(tokenizer.bos_id, np.concatenate([head, filler[:before]]), key,
                      filler[before:], question, answers)


def _same_length(answers: list[np.ndarray], name: str) -> list[np.ndarray]:
    if len({len(a) for a in answers}) != 1:
        raise ConfigError(f"{name}: the tokenizer splits the candidate answers into different "
                          "numbers of tokens (a subword vocabulary without one token per "
                          "digit, such as posjax's sentencepiece), so their likelihoods do "
                          "not compare: score a run trained with data.tokenizer=bytes")
    return answers


@register_probe("passkey")
class Passkey(Probe):
    """Mohtashami & Jaggi 2023's 5-digit pass key in repeated filler."""

    INTRO = ("There is an important info hidden inside a lot of irrelevant text. Find it and "
             "memorize them. I will quiz you about the important information there.\n")
    FILLER = ("The grass is green. The sky is blue. The sun is yellow. Here we go. There and "
              "back again. ")
    QUESTION = "\nWhat is the pass key? The pass key is"

    def trial(self, rng, length, depth, tokenizer, haystack=None):
        keys = self._numbers(rng, 5)
        key = _encode(tokenizer, f"\nThe pass key is {keys[0]}. Remember it. {keys[0]} is the "
                                 "pass key.\n")
        answers = _same_length([_encode(tokenizer, " " + k) for k in keys], self.name)
        filler = _encode(tokenizer, self.FILLER)
        return self._placed(length, depth, tokenizer,
                            _encode(tokenizer, self.INTRO if self.cfg.passkey_intro else ""),
                            functools.partial(_filled, filler), key,
                            _encode(tokenizer, self.QUESTION), answers)


# RULER's needles are keyed by random words; these are common nouns.
NEEDLE_WORDS = ("apple", "river", "garden", "candle", "mirror", "violin", "pencil", "harbor",
                "lantern", "meadow", "ticket", "pillow", "marble", "falcon", "anchor", "ribbon",
                "basket", "canyon", "cookie", "dragon", "feather", "glacier", "hammer", "island",
                "jacket", "kettle", "ladder", "magnet", "napkin", "orchid", "parrot", "quilt")


@register_probe("needle")
class Needle(Probe):
    """A needle in the run's own text (Kamradt 2023; RULER's niah_single needle), every
    length x depth cell."""

    depths = tuple(i / 10 for i in range(11))
    needs_haystack = True

    def trial(self, rng, length, depth, tokenizer, haystack=None):
        if haystack is None or len(haystack) == 0:
            raise ConfigError("needle hides its needle in the run's own text, and this run has "
                              "none (it is not a text run): use --eval=passkey")
        word = NEEDLE_WORDS[rng.integers(len(NEEDLE_WORDS))]
        values = self._numbers(rng, 7)
        key, question = self._texts(tokenizer, word, values[0])
        answers = _same_length([_encode(tokenizer, " " + v) for v in values], self.name)
        # the shortest length is every word's, not this trial's: a length that held one
        # word's trial failed on a longer word's, in a later step or cell
        need = 1 + len(answers[0]) + max(sum(map(len, self._texts(tokenizer, w, values[0])))
                                         for w in NEEDLE_WORDS)
        if length < need:
            raise _too_short(self.name, length, need)
        offset = int(rng.integers(len(haystack)))
        return self._placed(length, depth, tokenizer, np.zeros(0, np.int32),
                            lambda count: _filled(haystack, count, offset), key, question,
                            answers)

    @staticmethod
    def _texts(tokenizer, word: str, value: str) -> tuple[np.ndarray, np.ndarray]:
        """The needle (its word's number) and the question, tokenized."""
        key = _encode(tokenizer, f" One of the special magic numbers for {word} is: {value}. ")
        question = _encode(tokenizer, f"\nWhat is the special magic number for {word} "
                                      "mentioned in the provided text? The special magic "
                                      f"number for {word} mentioned in the provided text is")
        return key, question


def _characters(tokenizer, name: str) -> None:
    """mqar and flipflop count characters: refuse a tokenizer that does not."""
    try:
        ok = len(tokenizer.encode("w1 ab:7")) == 7
    except ConfigError:
        ok = False
    if not ok:
        raise ConfigError(f"{name} is a character task: it needs one token per character, "
                          "as a run trained with data.tokenizer=bytes (the default) has; a "
                          "subword or symbol tokenizer, such as a pretrained model's, does "
                          "not: score passkey or needle instead, where the tokenizer writes "
                          "their numbers and words")


class CharacterProbe(Probe, abc.ABC):
    """A task counted in characters (one token each)."""

    def check_tokenizer(self, tokenizer) -> None:
        _characters(tokenizer, self.name)


@register_probe("mqar")
class MQAR(CharacterProbe):
    """Zoology's multi-query associative recall: key:value pairs, then some keys again."""

    PAIR = 6  # "abc:7 "

    def check_fields(self) -> None:
        super().check_fields()
        if int(self.cfg.mqar_queries) < 1:
            raise ConfigError(f"data.mqar_queries={self.cfg.mqar_queries}: mqar asks that "
                              "many keys per trial and scores their values: give at least 1")

    def trial(self, rng, length, depth, tokenizer, haystack=None):
        self.check_tokenizer(tokenizer)
        queries, chars = int(self.cfg.mqar_queries), length - 1
        pairs = (chars - queries * self.PAIR) // self.PAIR
        if pairs < queries:
            raise _too_short(self.name, length, 1 + 2 * queries * self.PAIR)
        pad = chars - (pairs + queries) * self.PAIR
        keys = ["".join(chr(97 + (k // 26**i) % 26) for i in range(3))
                for k in rng.choice(26**3, pairs, replace=False)]
        values = rng.integers(0, 10, pairs)
        first = int(round(float(depth) * (pairs - queries)))
        asked = first + rng.permutation(queries)
        context = " " * pad + "".join(f"{k}:{v} " for k, v in zip(keys, values, strict=True))
        rows = [self._asked(context, keys, asked, values[asked])]
        for _ in range(self.candidates - 1):
            other = (values[asked] + rng.integers(1, 10, queries)) % 10
            rows.append(self._asked(context, keys, asked, other))
        tokens = np.stack([np.concatenate([[tokenizer.bos_id], _encode(tokenizer, r)])
                           for r in rows]).astype(np.int32)
        answer = np.zeros(tokens.shape[1], bool)
        answer[1 + len(context) + 4 + self.PAIR * np.arange(queries)] = True
        return Trial(tokens[0], answer, tokens, 1 + pad + self.PAIR * first)

    @staticmethod
    def _asked(context: str, keys, asked, values) -> str:
        return context + "".join(f"{keys[i]}:{v} " for i, v in zip(asked, values, strict=True))


@register_probe("flipflop")
class FlipFlop(CharacterProbe):
    """Liu et al. 2023's flip-flop language: remember the last written bit."""

    def trial(self, rng, length, depth, tokenizer, haystack=None):
        self.check_tokenizer(tokenizer)
        pairs = (length - 1) // 2
        if pairs < 2:
            raise _too_short(self.name, length, 5)
        write = int(round(float(depth) * (pairs - 2)))
        ops, bits = _ffl(rng, write, float(self.cfg.flipflop_ignore))
        p = float(self.cfg.flipflop_ignore)
        tail = rng.choice(["i", "r"], pairs - write - 2, p=np.array([p, (1 - p) / 2]) /
                          (p + (1 - p) / 2))
        ops = [*ops, "w", *tail, "r"]
        bit = int(rng.integers(2))
        bits = [*bits, bit, *(int(rng.integers(2)) if o == "i" else bit for o in tail), bit]
        pad = " " * (length - 1 - 2 * pairs)
        scored = np.zeros(length, bool)
        rows = []
        for b in (bit, 1 - bit):
            shown = [b if k > write and o == "r" else x
                     for k, (o, x) in enumerate(zip(ops, bits, strict=True))]
            text = pad + "".join(f"{o}{x}" for o, x in zip(ops, shown, strict=True))
            rows.append(np.concatenate([[tokenizer.bos_id], _encode(tokenizer, text)]))
        for k, op in enumerate(ops):
            scored[1 + len(pad) + 2 * k + 1] = k > write and op == "r"
        tokens = np.stack(rows).astype(np.int32)
        return Trial(tokens[0], scored, tokens, 1 + len(pad) + 2 * write)

    @property
    def candidates(self) -> int:
        return 2


def _ffl(rng, count: int, ignore: float) -> tuple[list[str], list[int]]:
    """`count` FFL(ignore) instructions and their bits, the first a write; a read's bit is the
    last written one."""
    ops = ["w", *rng.choice(["w", "i", "r"], max(count - 1, 0),
                            p=[(1 - ignore) / 2, ignore, (1 - ignore) / 2])][:count]
    bits, last = [], 0
    for op in ops:
        bit = last if op == "r" else int(rng.integers(2))
        last = bit if op == "w" else last
        bits.append(bit)
    return list(ops), bits


def get_probe(name: str, cfg) -> Probe:
    """The registered task `name`, bound to config.data (its fields)."""
    return PROBES.lookup(name)(cfg)


def trial_row(tokens: np.ndarray, answer: np.ndarray) -> dict:
    """One LM row of [T] arrays from a trial's T tokens: inputs tokens 0..T-2 at positions
    0..T-2, targets the next tokens, weights 1 on the answer's targets; the last column is
    padding (segment 0, weight 0), so a trial of length L is a row of L."""
    n = len(tokens)
    last = np.arange(n) == n - 1
    return {"inputs": np.where(last, 0, tokens).astype(np.int32),
            "targets": np.append(tokens[1:], 0).astype(np.int32),
            "positions": np.arange(n, dtype=np.int32),
            "segment_ids": (~last).astype(np.int32),
            "weights": np.append(answer[1:], False).astype(np.float32)}


class _Examples(Sequence):
    """The examples of a split, made on demand from (generation_seed, split, index): a trial
    of a length in data.train_lengths at a uniform depth, or, at the share data.text_mix, a
    window of that many tokens of a document of data.mix_dataset. Items are documents
    ({"inputs", "score"}), the answer (or every corpus token) scored."""

    def __init__(self, kind: RetrievalData, split: str, count: int):
        self.kind, self.split, self.count = kind, split, count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> dict:
        cfg = self.kind.cfg
        rng = np.random.default_rng([int(cfg.generation_seed), SPLIT_SEEDS[self.split],
                                     int(index)])
        lo, hi = (int(n) for n in cfg.train_lengths)
        length = int(rng.integers(lo, hi + 1))
        if float(cfg.text_mix) > 0 and rng.random() < float(cfg.text_mix):
            return self.kind.corpus_window(rng, length)
        trial = self.kind.probe.trial(rng, length, float(rng.random()), self.kind.tokenizer,
                                      self.kind.haystack(self.split))
        return {"inputs": trial.tokens, "score": trial.answer.astype(np.int32)}


@kinds.register("retrieval")
class RetrievalData(kinds.DataKind):
    """A retrieval task trained from scratch (passkey, needle, mqar, flipflop), optionally
    mixed with a text corpus; scored by that task's evaluation (posjax.eval.retrieval)."""

    fields = {
        "task": kinds.Field("passkey", "passkey, needle, mqar or flipflop"),
        "train_lengths": kinds.Field((128, 256), "trial lengths trained on, tokens (min, max)"),
        "distractors": kinds.Field(4, "wrong answers each trial is scored against"),
        "passkey_intro": kinds.Field(True, "passkey: the paper's task line first (~150 bytes)"),
        "mqar_queries": kinds.Field(4, "mqar: keys asked per trial"),
        "flipflop_ignore": kinds.Field(0.8, "flipflop: p of FFL(p), the share of ignores"),
        "text_mix": kinds.Field(0.0, "share of training documents drawn from mix_dataset"),
        "mix_dataset": kinds.Field("stdlib_text", "the text mixed in, and needle's haystack"),
        # made on demand, so an epoch costs nothing to hold: a million distinct trials
        "num_train_examples": kinds.Field(1_000_000, "training examples per epoch"),
        "generation_seed": kinds.Field(0, "seed of the generated data"),
    }

    @property
    def evaluation(self) -> str:
        """The evaluation named by data.task (posjax.eval.retrieval registers one per task)."""
        return str(self.cfg.task)

    @functools.cached_property
    def probe(self) -> Probe:
        return get_probe(self.cfg.task, self.cfg)

    @classmethod
    def fields_read(cls, data_cfg) -> set[str]:
        mixed = kinds.kind_class(data_cfg.mix_dataset)
        return super().fields_read(data_cfg) | mixed.fields_read(data_cfg)

    @functools.cached_property
    def corpus(self) -> kinds.DataKind:
        """The kind of data.mix_dataset, read with this run's tokenizer."""
        cfg = self.cfg.copy_and_resolve_references()
        cfg.dataset = self.cfg.mix_dataset
        return kinds.kind_of(cfg)

    def haystack_kind(self) -> kinds.TextData | None:
        """The corpus, when this run read text (needle's haystack, or text mixed in)."""
        return self.corpus.haystack_kind() if self.probe.needs_haystack or float(
            self.cfg.text_mix) > 0 else None

    @functools.cache  # noqa: B019 - one stream per kind and split, read once
    def haystack(self, split: str) -> np.ndarray | None:
        """The tokens needle's trials of `split` (train: the corpus's training split, else
        its evaluation split) cut their haystack from; None for the other tasks."""
        if not self.probe.needs_haystack:
            return None
        return self.corpus.haystack_tokens(
            max(int(self.cfg.train_lengths[1]) * 64, 1 << 16),
            split=self.cfg.train_split if split == "train" else None, plain=True)

    @functools.cached_property
    def _corpus_documents(self) -> Sequence[dict]:
        return self.corpus.source(self.cfg.train_split)

    def corpus_window(self, rng: np.random.Generator, length: int) -> dict:
        """A window of `length` tokens of a random training document of the corpus, every
        token scored."""
        source = self._corpus_documents
        doc = self.corpus.to_document(source[int(rng.integers(len(source)))])["inputs"]
        start = int(rng.integers(max(len(doc) - length, 0) + 1))
        window = doc[start:start + length]
        return {"inputs": window, "score": np.ones_like(window)}

    def split_names(self) -> tuple[str, ...]:
        return tuple(SPLIT_SEEDS)

    def _check(self, seq_len: int) -> None:
        lo, hi = (int(n) for n in self.cfg.train_lengths)
        if not 1 <= lo <= hi <= seq_len:
            raise ConfigError(f"data.train_lengths=({lo}, {hi}) must be (min, max) with "
                              f"1 <= min <= max <= seq_len={seq_len} (tokens per trial)")
        if not 0 <= float(self.cfg.text_mix) <= 1:  # 1.5 trained on text alone, no word
            raise ConfigError(f"data.text_mix={self.cfg.text_mix} is a share of the training "
                              "documents: give one from 0 to 1")
        # a trial too short for the task fails here, in one line, not in a reader thread
        self.probe.trial(np.random.default_rng(0), lo, 0.5, self.tokenizer,
                         self.haystack("train"))

    def train_dataset(self, seq_len, batch_size, seed, *, mlm=None, shard=training.WHOLE):
        self._check_batch_size(batch_size)
        if mlm is not None:
            raise ConfigError("MLM masking applies to text datasets; retrieval tasks are "
                              "causal")
        self._check(int(seq_len))
        return training.packed_lm(_Examples(self, "train", int(self.cfg.num_train_examples)),
                                  lambda doc: doc, int(seq_len), int(batch_size), int(seed),
                                  shard=shard)

    def batch_spec(self, seq_len, batch_size):
        self._check(int(seq_len))
        return BatchSpec("tokens", token_arrays(int(seq_len), int(batch_size)),
                         vocab_size=tokenizers.vocab_size(self.cfg))

    def validation_batches(self, seq_len, *, batch_size, num_batches, mlm=None):
        """Trials of seq_len tokens (one row each), depths cycling over the task's grid,
        from the validation split's seed."""
        del mlm
        depths = self.probe.depths
        rng = np.random.default_rng([int(self.cfg.generation_seed), SPLIT_SEEDS["validation"]])
        trials = (self.probe.trial(rng, int(seq_len), depths[i % len(depths)], self.tokenizer,
                                   self.haystack("validation"))
                  for i in range(batch_size * num_batches))
        rows = (trial_row(trial.tokens, trial.answer) for trial in trials)
        return evaluation.batched(rows, batch_size)
