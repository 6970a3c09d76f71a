"""Numbers the README quotes beyond the per-length ones (posjax.results.values):

    counting:POINT:COLUMN:acc|exact[:lo|hi]   the counting task (counting/): answer-token
                                              accuracy / exact match, mean over the sizes
                                              of a column of its table (`task_column_values`)
    passkey:POINT:METRIC@LENGTH, ...          passkey retrieval (passkey/, passkey_pose/:
    passkey_pose:POINT:METRIC@LENGTH, ...     PoSE) as `retrieval_values` names them
"""

from pathlib import Path

from posjax.results.values import retrieval_values, task_column_values

RETRIEVAL = ("passkey", "passkey_pose")


def values(study: Path) -> dict[str, float]:
    out = task_column_values(study / "counting" / "results", "counting")
    for task in RETRIEVAL:
        out.update(retrieval_values(study / task / "results", task))
    return out
