"""Numbers the README quotes beyond the per-length ones (posjax.results.values):

    TASK:POINT:COLUMN:acc|exact[:lo|hi]   answer-token accuracy / exact match of a task
                                          sub-study (counting/, selective_copy/), mean over
                                          the sizes of a column of its table (COLUMN: seen,
                                          21-25, ..., 36-40), per seed, then mean and interval
"""

from pathlib import Path

from posjax.results import plots
from posjax.results.values import add_interval

TASKS = ("counting", "selective_copy")


def values(study: Path) -> dict[str, float]:
    out: dict[str, float] = {}
    for task in TASKS:
        results = plots.load_results(study / task / "results")
        bucket_size, columns = plots.size_columns(results)
        for result in results:
            for heading, bucket in columns:
                means = [plots.bucket_means(member, bucket, bucket_size, ("acc", "seq_acc"))
                         for member in result.get("per_seed", [result])]
                column = "seen" if bucket is None else heading
                for index, metric in enumerate(("acc", "exact")):
                    add_interval(out, f"{task}:{result['label']}:{column}:{metric}",
                                 [m[index] for m in means])
    return out
