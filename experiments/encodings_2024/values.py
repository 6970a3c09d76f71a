"""Numbers the README quotes beyond the per-length ones (posjax.results.values):

    TASK:POINT:COLUMN:acc|exact[:lo|hi]   answer-token accuracy / exact match of a task
                                          sub-study (counting/, selective_copy/), mean over
                                          the sizes of a column of its table (COLUMN: seen,
                                          21-25, ..., 36-40), per seed, then mean and interval
"""

from pathlib import Path

from posjax.results.values import task_column_values

TASKS = ("counting", "selective_copy")


def values(study: Path) -> dict[str, float]:
    out: dict[str, float] = {}
    for task in TASKS:
        out.update(task_column_values(study / task / "results", task))
    return out
