"""The matching evaluation: a fine-tuned classifier's accuracy on doc_match triplets.

`posjax extrapolate --workdir=RUN` (or `posjax train ... --extrapolate`) scores a run of
configs/finetune.py on the test split (posjax.data.matching) at each length of
`--lengths` (default: config.eval.lengths, else the length it was fine-tuned at), the rows
cut to that length. Each row of the result (extrapolation.json) holds

    acc       share of triplets whose close document got the higher score
    loss      mean cross-entropy of the softmax over the two pairs (ppl = exp(loss))
    visible   share of the triplets whose evidence starts inside what that length reads
    ceiling   visible + (1 - visible) / 2: the most any reader of that length can reach

so the gain of length is measured twice: by the accuracies of two lengths, and by the data
alone (their ceilings). `posjax plot` gathers the results of several runs (seeds, lengths,
sweeps) over seeds into finetune.json, .md and .png (posjax.results.finetune).
"""

from __future__ import annotations

import math

import numpy as np

from posjax.data import matching
from posjax.errors import ConfigError, unknown
from posjax.eval.evaluation import TEXT_STEM, Evaluation, register


def _check_within_documents(length: int, doc_chars: int) -> None:
    """A ConfigError (the row's error) where rows of `length` tokens read past the documents:
    they were cut for long_len = 2 doc_chars + 3 (or + 4, configs/finetune.py's
    (long_len - 3) // 2 of an even long_len); a longer row is padding past them, its scores
    those of the shorter row."""
    longest = 2 * doc_chars + 4
    if length > longest:
        raise ConfigError(
            f"length {length} reads past the documents (data.doc_chars={doc_chars}, cut for "
            f"rows of {longest} tokens: the rest is padding): score lengths up to "
            f"{longest}, or fine-tune on documents that long (configs/finetune.py "
            f"long_len={length})")


@register("match")
class MatchEvaluation(Evaluation):
    """Accuracy of a fine-tuned classifier on doc_match's test triplets, per length, with
    the ceiling a reader of that length can reach (see posjax.eval.matching)."""

    options = ("lengths", "batch_size", "split")
    report = "match"
    stem = TEXT_STEM
    columns = (("acc", "acc", ".4f"), ("loss", "loss", ".4f"), ("visible", "visible", ".3f"),
               ("ceiling", "ceiling", ".4f"), ("examples", "examples", "d"))

    def run(self, *, lengths=None, batch_size=None, split=None) -> dict:
        """lengths: the row lengths scored (default config.eval.lengths, else the training
        length); batch_size: triplets per batch (default 16); split: default test."""
        experiment = self.experiment
        kind = experiment.data
        if not isinstance(kind, matching.MatchData):
            raise ConfigError(f"--eval=match scores doc_match runs; {self.workdir} trained on "
                              f"{experiment.config.data.dataset}")
        train_len = experiment.train_len
        lengths = tuple(int(n) for n in (lengths or experiment.config.eval.lengths
                                         or (train_len,)))
        split = split or "test"
        if split not in kind.split_names():
            raise unknown("--split", split, kind.split_names())
        rows = []
        for length in lengths:
            try:
                _check_within_documents(length, int(experiment.config.data.doc_chars))
                encoding = self.encoding_at(train_len, length)
            except ConfigError as e:
                rows.append({"length": length, "error": str(e)})
                continue
            rows.append(self.score(encoding, split, length, int(batch_size or 16)))
        return self.result(train_len, rows, protocol="match", stride=None, split=split,
                           dataset=experiment.config.data.dataset,
                           init_from=str(experiment.config.train.get("init_from", "")),
                           pooling=experiment.config.model.get("pooling", "cls"),
                           seed=int(experiment.config.train.seed))

    def score(self, encoding, split: str, length: int, batch_size: int) -> dict:
        sums = {"loss": 0.0, "correct": 0.0, "weight": 0.0, "visible": 0.0}
        for batch in self.experiment.data.batches(split, length, batch_size):
            visible = batch.pop("visible")
            losses, correct = self.token_losses(encoding, batch)
            weights = np.asarray(batch["weights"], np.float64)
            sums["loss"] += float(np.sum(np.where(weights > 0, losses, 0.0) * weights))
            sums["correct"] += float(np.sum(correct * weights))
            sums["weight"] += float(weights.sum())
            sums["visible"] += float(np.sum(visible * weights))
        count = max(sums["weight"], 1.0)
        loss, visible = sums["loss"] / count, sums["visible"] / count
        return {"length": length, "acc": sums["correct"] / count, "loss": loss,
                "ppl": math.exp(min(loss, 50.0)), "visible": visible,
                "ceiling": matching.ceiling(visible), "examples": int(sums["weight"])}

    @classmethod
    def title(cls, result: dict) -> str:
        start = result.get("init_from") or "no pretraining"
        return (f"{result['run']} (doc_match {result.get('split', 'test')}, fine-tuned at "
                f"{result['train_len']} tokens from {start}, seed {result.get('seed')})")
