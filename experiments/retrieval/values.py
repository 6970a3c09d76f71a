"""Numbers the README quotes beyond what posjax.results.values names for text studies, per
TASK (passkey, flipflop: the sub-folders):

    TASK:POINT:METRIC@LENGTH[:lo|hi]   retrieval METRIC (acc: the answer against its
                                       distractors; exact: greedy decoding right; token_acc:
                                       share of answer tokens right), mean over depths, per
                                       seed, then mean and interval; POINT as in the table
                                       ("rope", "rope +yarn", ...)
    TASK:POINT:acc@past[:lo|hi]        acc over the lengths past the training length (mean
                                       over them per seed, then mean and interval)
    TASK:POINT:train_acc[:lo|hi]       token accuracy of the last logged training steps
                                       (metrics.jsonl), per seed, then mean and interval
"""

from pathlib import Path

import numpy as np

from posjax import io
from posjax.results import plots, seeds
from posjax.results.values import add_interval, per_seed

TASKS = ("passkey", "flipflop")
METRICS = ("acc", "exact", "token_acc")


def values(study: Path) -> dict[str, float]:
    out: dict[str, float] = {}
    for task in TASKS:
        results = study / task / "results"
        for result in plots.load_results(results, plots.RETRIEVAL_FILES):
            _cells(out, task, result)
        _training(out, task, results)
    return out


def _cells(out: dict, task: str, result: dict) -> None:
    by_length = per_seed(result)
    for length, rows in by_length.items():
        for metric in METRICS:
            if all(metric in row for row in rows):
                add_interval(out, f"{task}:{result['label']}:{metric}@{length}",
                             [row[metric] for row in rows])
    past = [rows for length, rows in by_length.items() if length > result["train_len"]
            and all("acc" in row for row in rows)]
    if past:
        add_interval(out, f"{task}:{result['label']}:acc@past",
                     list(np.mean([[row["acc"] for row in rows] for rows in past], axis=0)))


def _training(out: dict, task: str, results: Path) -> None:
    by_point: dict[str, list[float]] = {}
    for run in sorted(p for p in results.iterdir() if (p / "metrics.jsonl").exists()):
        rows = io.read_jsonl(run / "metrics.jsonl")
        by_point.setdefault(seeds.label(run.name), []).append(rows[-1]["acc"])
    for point, accs in by_point.items():
        add_interval(out, f"{task}:{point}:train_acc", accs)
