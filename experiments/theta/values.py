"""Numbers the README quotes besides the runs' own: Liu et al.'s critical dimension and
critical length for each base at this model's head dimension and training length
(posjax.results.analysis), and the period of each base's slowest rotary pair."""

import math
from pathlib import Path

from posjax.results import analysis

HEAD_DIM, TRAIN_LEN = 32, 128
THETAS = (100.0, 1000.0, 10000.0, 100000.0, 1000000.0)


def values(study: Path) -> dict[str, float]:
    del study
    out = {}
    for theta in THETAS:
        out[f"critical_dim@{theta:g}"] = analysis.critical_dimension(HEAD_DIM, TRAIN_LEN, theta)
        out[f"critical_len@{theta:g}"] = analysis.critical_length(HEAD_DIM, TRAIN_LEN, theta)
        # frequencies theta^(-2i/d), i = 0..d/2-1: the slowest turns once in 2 pi theta^((d-2)/d)
        out[f"slowest_period@{theta:g}"] = 2 * math.pi * theta ** ((HEAD_DIM - 2) / HEAD_DIM)
    return out
