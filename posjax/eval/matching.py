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
alone (their ceilings).

`summarize(folders)` gathers the results of several runs (seeds, lengths, sweeps:
`python -m posjax.eval.matching SWEEPDIR_OR_RUNS... [--output=FILE]`) into one JSON:
per (pretrained run, encoding, pooling, fine-tune length, evaluated length), every seed's
accuracy, their mean, min and max, and the ceiling.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

import numpy as np

from posjax import fileio
from posjax.config import read_config_json
from posjax.data import matching
from posjax.errors import ConfigError
from posjax.eval.evaluation import Evaluation, register, trained_result_path
from posjax.experiment import Experiment


@register("match")
class MatchEvaluation(Evaluation):
    """Accuracy of a fine-tuned classifier on doc_match's test triplets, per length, with
    the ceiling a reader of that length can reach (see posjax.eval.matching)."""

    options = ("lengths", "batch_size", "split")
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
        rows = []
        for length in lengths:
            try:
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


def _runs(folders) -> list[Path]:
    """Run directories in `folders`: runs themselves, a sweep's runs/, or folders of runs."""
    found = []
    for folder in map(Path, folders):
        if (folder / "config.json").exists():
            found.append(folder)
        elif (folder / "runs").is_dir():
            found += sorted(p for p in (folder / "runs").iterdir() if p.is_dir())
        else:
            found += sorted(p.parent for p in folder.glob("*/config.json"))
    return found


def summarize(folders, output: str | Path | None = None) -> dict:
    """Every doc_match run's accuracies in `folders`, grouped over seeds (module doc);
    written to `output` when given."""
    groups: dict[tuple, dict] = {}
    for run in _runs(folders):
        if read_config_json(run) is None:
            continue
        experiment = Experiment.from_workdir(run)
        if not isinstance(experiment.data, matching.MatchData):
            continue
        result = fileio.read_json(trained_result_path(experiment, run))
        if not result or result.get("evaluation") != MatchEvaluation.name:
            continue
        for row in result["lengths"]:
            if "error" in row:
                continue
            key = (result.get("init_from", ""), result["encoding"]["name"],
                   result.get("pooling", "cls"), result["train_len"], row["length"])
            group = groups.setdefault(key, {
                "init_from": key[0], "encoding": key[1], "pooling": key[2],
                "finetune_len": key[3], "length": key[4], "seeds": [], "acc": [],
                "ceiling": row["ceiling"], "visible": row["visible"], "runs": []})
            group["seeds"].append(result.get("seed"))
            group["acc"].append(row["acc"])
            group["runs"].append(str(run))
    rows = []
    for group in sorted(groups.values(), key=lambda g: tuple(str(v) for v in (
            g["init_from"], g["encoding"], g["pooling"], g["finetune_len"], g["length"]))):
        accs = group["acc"]
        rows.append({**group, "mean_acc": statistics.fmean(accs), "min_acc": min(accs),
                     "max_acc": max(accs)})
    summary = {"kind": "finetune_match", "rows": rows}
    if output is not None:
        fileio.write_json(Path(output), summary)
    return summary


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m posjax.eval.matching",
        description="Gather doc_match fine-tune results over seeds into one JSON.")
    parser.add_argument("folders", nargs="+", help="run, sweep or run-folder directories")
    parser.add_argument("--output", default=None, help="default: FIRST_FOLDER/finetune.json")
    args = parser.parse_args(argv)
    output = args.output or Path(args.folders[0]) / "finetune.json"
    summary = summarize(args.folders, output)
    for row in summary["rows"]:
        print(f"{row['encoding']:>12} fine-tuned at {row['finetune_len']:>5}, read "
              f"{row['length']:>5}: acc {row['mean_acc']:.4f} [{row['min_acc']:.4f}, "
              f"{row['max_acc']:.4f}] over seeds {row['seeds']}; ceiling {row['ceiling']:.4f}")
    print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
