"""Retrieval evaluation: accuracy per (length, depth) cell, for any causal LM run.

`posjax extrapolate --workdir=RUN --eval=passkey` (or needle, mqar, flipflop; a run trained on
dataset=retrieval gets its own task without --eval) makes `trials` trials per cell
(posjax.data.retrieval: the key at that depth of a context of that length) and scores each:

    acc        the true answer's log-likelihood against its distractors': 1 when it is the
               most likely, 1/k when it ties with k - 1 others, else 0 (a graded answer even
               for a model never trained on the task; chance = 1 / candidates)
    exact      greedy decoding right: every answer token is the model's argmax
    token_acc  share of answer tokens that are the argmax (mqar: per query, flipflop: per read)

The trials of a cell are drawn from (task, length, depth), not from the run, so every run is
scored on the same trials. Every length-extension method (`--rope_scaling`) applies as in
the text evaluation (`Evaluation.encoding_at`). The result, `retrieval_TASK[_METHOD].json`,
has one row per length (the means over its depths) with its cells; posjax.results.heatmap
draws it (`posjax extrapolate` writes the run's heatmap next to it) and a sweep's.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence

import numpy as np

from posjax.data import evaluation as batches
from posjax.data import retrieval
from posjax.errors import ConfigError
from posjax.eval.evaluation import EVALUATIONS, Evaluation, evaluation_lengths

# The protocol field of retrieval results (plots tell them apart by it).
RETRIEVAL_PROTOCOL = "retrieval"
DEFAULT_TRIALS = 10
DEFAULT_BATCH = 8
# Tokens of the run's text a needle trial's haystack is cut from, per token of the trial.
HAYSTACK_PER_TOKEN = 4


def choice_scores(loglik: np.ndarray) -> np.ndarray:
    """float[N] from loglik float[N, C] (column 0 the true answer): 1 / (number of candidates
    tied at the maximum) where the true answer is among them, else 0."""
    best = loglik.max(axis=1, keepdims=True)
    top = loglik == best
    return np.where(top[:, 0], 1.0 / top.sum(axis=1), 0.0)


def score_trials(trials: Sequence[retrieval.Trial], losses: Callable[[dict], tuple],
                 batch_size: int) -> dict:
    """A cell's metrics (see the module docstring) from its trials; losses(batch) -> (loss
    float[B, L], correct bool[B, L]) per target token, a batch being LM rows
    (`retrieval.trial_row`) of every candidate of every trial, `batch_size` rows each."""
    rows = [retrieval.trial_row(row, t.answer) for t in trials for row in t.candidates]
    loglik, right = [], []
    for batch in batches.batched(iter(rows), batch_size):
        loss, correct = losses(batch)
        weights = batch["weights"]
        loglik.extend(-(np.where(weights > 0, loss, 0.0)).sum(axis=1))
        right.extend([correct[i][weights[i] > 0] for i in range(len(weights))])
    count = len(trials[0].candidates)
    loglik = np.asarray(loglik[:len(rows)]).reshape(len(trials), count)
    truth = right[:len(rows)][::count]
    return {"acc": float(choice_scores(loglik).mean()),
            "exact": float(np.mean([r.all() for r in truth])),
            "token_acc": float(np.mean(np.concatenate(truth))),
            "trials": len(trials), "chance": 1.0 / count}


def _fits(probe, length: int, tokenizer, haystack) -> bool:
    """Whether a trial of `probe` fits in `length` tokens."""
    try:
        probe.trial(np.random.default_rng(0), length, 0.0, tokenizer, haystack)
    except ConfigError:
        return False
    return True


def _check_vocabulary(name: str, tokenizer, experiment) -> None:
    """A one-line refusal where the model cannot read the task's text: the tokenizer writes
    ids past its vocabulary (a text_image run reads a few symbols, not bytes)."""
    vocab = experiment.batch_spec().vocab_size
    ids = np.asarray(tokenizer.encode(f"The pass key is {retrieval.DIGITS}."))
    if ids.size and int(ids.max()) >= vocab:
        dataset = experiment.config.data.dataset
        raise ConfigError(f"--eval={name} writes its prompt in text, and this {dataset} run's "
                          f"model reads only {vocab} symbols, so its tokenizer cannot spell "
                          "the prompt: evaluate a run trained on text (posjax list datasets)")


def _none_fits(name: str, probe, lengths: list[int], tokenizer, haystack,
               given: bool = True) -> ConfigError:
    """The one-line refusal of lengths none of which holds one trial, naming the shortest
    length that does (or the trial's own error where it is not too short); `given`: the
    lengths were typed (--lengths), else they are the run's defaults, and said to be."""
    try:
        probe.trial(np.random.default_rng(0), max(lengths), 0.0, tokenizer, haystack)
    except ConfigError as e:
        if getattr(e, "need", None) is None:
            return e
        shown = ",".join(map(str, lengths))
        shown = (f"--lengths={shown}" if given else
                 f"the run's default lengths ({shown}: config.eval.lengths, or 1x-16x its "
                 "training length)")
        return ConfigError(f"{shown}: every length is too short for one {name} "
                           f"trial, which needs at least {e.need} tokens: evaluate at "
                           f"--lengths={e.need} or longer")
    raise AssertionError("a length fits")  # pragma: no cover


def _mean_row(length: int, cells: list[dict]) -> dict:
    row = {"length": length, **{k: float(np.mean([c[k] for c in cells]))
                                for k in ("acc", "exact", "token_acc")},
           "trials": int(sum(c["trials"] for c in cells)), "cells": cells}
    note = depth_note(length, cells)
    return {**row, "note": note} if note else row


def key_position(trials: Sequence[retrieval.Trial]) -> int:
    """The token a cell's key starts at (the median over its trials)."""
    return int(np.median([t.key_start for t in trials]))


def depth_note(length: int, cells: list[dict]) -> str | None:
    """A line saying that a length's depths hardly move the key, or None: where the key's
    positions over the depths span less than a tenth of the trial (a prompt that leaves
    little filler: passkey's at 256 tokens leaves 2), or where two depths put it at one
    position; cells: {"depth", "key_at"} per depth."""
    positions = [c["key_at"] for c in cells]
    span = max(positions) - min(positions)
    if len(cells) < 2 or (span >= length / 10 and len(set(positions)) == len(positions)):
        return None
    return (f"length {length}: the key starts at token {min(positions)} to {max(positions)} "
            f"over depths {cells[0]['depth']:g} to {cells[-1]['depth']:g} "
            f"({len(set(positions))} positions for {len(cells)} depths), so depth hardly "
            "varies there: compare depths at longer lengths")


class RetrievalEvaluation(Evaluation):
    """A causal LM scored on a retrieval task per (length, depth) cell; the task is the name
    it runs as (`retrieval.PROBES`)."""

    stem = "retrieval"
    report = "retrieval"
    own_data = False
    options = ("lengths", "depths", "trials", "batch_size")
    columns = (("accuracy", "acc", ".3f"), ("exact", "exact", ".3f"),
               ("token acc", "token_acc", ".3f"), ("trials", "trials", "d"))

    @classmethod
    def describe(cls, name: str) -> str:
        return f"{retrieval.PROBES[name].__doc__} Accuracy per (length, depth) cell."

    @classmethod
    def reads_text(cls, name: str) -> bool:
        return retrieval.PROBES[name].needs_haystack

    @classmethod
    def check_before_training(cls, experiment, options: dict | None = None) -> None:
        """A batch of trials at the longest length fits the device (`run` checks it again)."""
        options = options or {}
        experiment.check_memory(max(evaluation_lengths(experiment, options.get("lengths"))),
                                int(options.get("batch_size") or DEFAULT_BATCH), training=False)

    def scored_data(self) -> dict:
        """A task that hides its keys in the run's text (needle) names that text too."""
        if not retrieval.PROBES[self.name].needs_haystack:
            return super().scored_data()
        text = self.experiment.data.haystack_kind().scored_data()
        return {**text, "dataset": f"{self.name}'s keys in {text['dataset']}"}

    def run(self, *, lengths=None, depths=None, trials=None, batch_size=None) -> dict:
        """lengths: tokens per trial (default config.eval.lengths, else 1x..16x the training
        length, less the lengths too short for one trial of the task: a text run trained at
        128 bytes has no passkey column at 1x); depths: the task's grid by default; trials
        per cell (default 10); batch_size: rows per batch (default 8). A length given that
        is too short gets an error row; where every length is, or where the model's
        vocabulary cannot hold the task's text, the evaluation is refused in one line."""
        experiment, config = self.experiment, self.experiment.config
        if not experiment.model_class.causal:
            raise ConfigError(
                f"--eval={self.name} scores a causal LM's continuations, and this run is a "
                f"{config.model.kind}: drop --eval to score it with its own evaluation "
                f"({experiment.data.evaluation})")
        probe = retrieval.get_probe(self.name, config.data)
        train_len = experiment.train_len
        given = lengths
        lengths = evaluation_lengths(experiment, lengths)
        depths = sorted(depths or probe.depths)
        if any(not 0 <= d <= 1 for d in depths):
            raise ConfigError(f"--depths={','.join(map(str, depths))}: a depth is a fraction "
                              "of the context, 0 (start) to 1 (end)")
        batch_size = int(batch_size or DEFAULT_BATCH)
        tokenizer = experiment.data.tokenizer
        probe.check_tokenizer(tokenizer)
        _check_vocabulary(self.name, tokenizer, experiment)
        haystack = self._haystack(probe, max(lengths))
        fitting = [n for n in lengths if _fits(probe, n, tokenizer, haystack)]
        if not fitting:
            raise _none_fits(self.name, probe, lengths, tokenizer, haystack, bool(given))
        if not given:  # a length given that is too short gets an error row
            lengths = fitting
        self.experiment.check_memory(max(lengths), batch_size, training=False)
        trials = int(trials or DEFAULT_TRIALS)
        rows = [self.score_length(probe, length, depths, trials, tokenizer, haystack,
                                  train_len, batch_size)
                for length in lengths]
        return self.result(train_len, rows, protocol=RETRIEVAL_PROTOCOL, stride=None,
                           task=self.name, depths=depths, trials_per_cell=trials,
                           candidates=probe.candidates, chance=1.0 / probe.candidates)

    def _haystack(self, probe, longest: int):
        """int32[n]: the run's evaluation text, for a task that hides its key in it."""
        if not probe.needs_haystack:
            return None
        kind = self.experiment.data.haystack_kind()
        if kind is None:
            raise ConfigError(f"{self.name} hides its key in the run's own text, and this run "
                              "read none: use --eval=passkey")
        return kind.haystack_tokens(HAYSTACK_PER_TOKEN * longest, plain=True)

    def score_length(self, probe, length, depths, trials, tokenizer, haystack, train_len,
                     batch_size) -> dict:
        """One length's row; a length the encoding cannot reach, or too short for the task,
        gets an error row."""
        try:
            encoding = self.encoding_at(train_len, length)
            made = [self.trials(probe, length, depth, trials, tokenizer, haystack)
                    for depth in depths]
        except ConfigError as e:
            return {"length": length, "error": str(e)}
        return _mean_row(length, [
            {"depth": depth, "key_at": key_position(cell),
             **score_trials(cell, lambda b: self.token_losses(encoding, b), batch_size)}
            for depth, cell in zip(depths, made, strict=True)])

    def trials(self, probe, length, depth, count, tokenizer, haystack) -> list:
        """The trials of one cell, drawn from (task, length, depth) alone, so every run is
        scored on the same ones: a haystack is cut from the text's first HAYSTACK_PER_TOKEN
        x length tokens, whatever the longest length asked (whose text it was read to)."""
        rng = np.random.default_rng([zlib.crc32(self.name.encode()), length,
                                     round(depth * 1e6)])
        stack = None if haystack is None else haystack[:HAYSTACK_PER_TOKEN * length]
        return [probe.trial(rng, length, depth, tokenizer, stack) for _ in range(count)]

    @classmethod
    def title(cls, result: dict) -> str:
        return (f"{result['run']} ({result['task']}, trained at {result['train_len']}, "
                f"method {result['method']}; accuracy against {result['candidates'] - 1} "
                f"distractor{'s' * (result['candidates'] != 2)}, chance "
                f"{result['chance']:.2f})")

    @classmethod
    def extra_table(cls, result: dict) -> list[str]:
        """The accuracy per cell: one line per depth, one column per length."""
        rows = [r for r in result["lengths"] if "cells" in r]
        if not rows:
            return []
        lines = ["", "accuracy per cell (depth x length):", "",
                 "| depth | " + " | ".join(str(r["length"]) for r in rows) + " |",
                 "|" + "---|" * (len(rows) + 1)]
        for i, depth in enumerate(result["depths"]):
            lines.append(f"| {depth:.2f} | " + " | ".join(
                f"{r['cells'][i]['acc']:.2f}" for r in rows) + " |")
        notes = [r["note"] for r in rows if r.get("note")]
        return lines + ([""] + notes if notes else [])


# Every task is an evaluation named as the task (`--eval=NAME`), this class scoring each.
for _name in retrieval.PROBES:
    EVALUATIONS.add(_name, RetrievalEvaluation)
