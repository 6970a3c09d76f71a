"""Closed-form analysis of RoPE: the long-range decay bound and the critical dimension.

Plain numpy in float64 (these are reference curves, not model code), plus a matplotlib plot.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from posjax import fileio
from posjax.encoders.base import inverse_frequencies
from posjax.errors import ConfigError

# Elements of rope_decay_curve's [distances, d/2] complex temporary per block (4 MB).
_BLOCK_ELEMENTS = 2**18


def _check_dim(dim: int) -> None:
    if dim < 2 or dim % 2:
        raise ConfigError(f"RoPE analysis needs an even head dim >= 2, got {dim}")


def _check_theta(theta: float) -> None:
    if not theta > 1:
        raise ConfigError(f"RoPE base theta={theta} must be > 1 (the usual base is 10000)")


def rope_decay_curve(distances: Sequence[float], dim: int, theta: float = 10000.0) -> np.ndarray:
    """RoFormer's long-range decay bound float64[len(distances)] (Su et al. 2021, eq. 37).

    `(2/d) * sum_{j=1}^{d/2} |S_j|` with `S_j = sum_{i=0}^{j-1} exp(1j * r * theta_i)`,
    `theta_i = theta^(-2i/d)` (0-based i), r the relative distance. The score
    `q^T R_r k` is bounded by `max_i |h_{i+1} - h_i| * sum_j |S_j|`; this curve is the part that
    depends on r. It starts at (d/2 + 1)/2 (32.5 for d = 128) and decays with |r|.
    """
    _check_dim(dim)
    _check_theta(theta)
    r = np.asarray(distances, dtype=np.float64).reshape(-1)
    inv_freq = inverse_frequencies(dim, theta, xp=np)
    out = np.empty(r.shape, dtype=np.float64)
    rows = max(1, _BLOCK_ELEMENTS // inv_freq.size)  # any d fits in memory
    for start in range(0, r.size, rows):
        block = r[start : start + rows]
        partial_sums = np.cumsum(np.exp(1j * block[:, None] * inv_freq[None, :]), axis=1)
        out[start : start + rows] = np.abs(partial_sums).sum(axis=1) * (2.0 / dim)
    return out


def critical_dimension(dim: int, train_len: int, theta: float = 10000.0) -> int:
    """The number of dims whose rotation completes a full period within training (Liu et al. 2023).

    `d_extra = 2 * ceil((d/2) * log_theta(L_train / (2 pi)))`: pair i has period
    `2 pi theta^(2i/d)`, which fits in L_train for i < (d/2) log_theta(L_train / 2 pi). The
    result is clipped to [0, d] (no pair, or every pair, sees its full period).
    """
    _check_dim(dim)
    _check_theta(theta)
    if train_len < 1:
        raise ConfigError(f"train_len={train_len} must be >= 1")
    pairs = (dim / 2) * math.log(train_len / (2 * math.pi)) / math.log(theta)
    return int(min(max(2 * math.ceil(pairs), 0), dim))


def critical_length(dim: int, train_len: int, theta: float = 10000.0) -> float:
    """Length past which RoPE's perplexity collapses (Liu et al. 2023): `2 pi theta^(d_extra/d)`.

    It is the period of the first pair beyond the critical dimension `critical_dimension`:
    those pairs never completed a turn during training, so their unseen angles start here.
    When every pair completes a turn within training (d_extra = d, e.g. d = 128, theta = 500,
    L_train = 4096) no angle is unseen and Liu et al. predict no bound: math.inf.
    """
    extra = critical_dimension(dim, train_len, theta)
    if extra == dim:
        return math.inf
    return 2 * math.pi * theta ** (extra / dim)


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _label(theta: float) -> str:
    return f"theta={int(theta)}" if float(theta).is_integer() else f"theta={theta}"


def decay_table(
    dim: int, thetas: Sequence[float], distances: Sequence[float]
) -> list[dict[str, float]]:
    """One row per distance: {"distance": r, "theta=<base>": bound, ...} for every base."""
    curves = {_label(t): rope_decay_curve(distances, dim, t) for t in thetas}
    return [
        {"distance": float(r), **{name: float(curve[i]) for name, curve in curves.items()}}
        for i, r in enumerate(distances)
    ]


def plot_decay(path_png: str, dim: int, thetas: Sequence[float], max_distance: int) -> str:
    """Write the decay curves for each base at distances 0..max_distance to a PNG; returns path.

    The file is written to a temporary name in the same folder and renamed, so a reader never
    sees half a picture.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if max_distance < 1:
        raise ConfigError(f"max_distance={max_distance} must be >= 1")
    distances = np.arange(max_distance + 1)
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for t in thetas:
        ax.plot(distances, rope_decay_curve(distances, dim, t), label=_label(t))
    ax.set_xlabel("relative distance |n - m|")
    ax.set_ylabel("(2/d) sum_j |S_j|")
    ax.set_title(f"RoPE long-range decay bound (RoFormer eq. 37), d={dim}")
    ax.legend()
    ax.grid(alpha=0.3)
    try:
        fileio.save_figure(fig, path_png, dpi=120, bbox_inches="tight")
    finally:
        plt.close(fig)
    return path_png


REPORT_DISTANCES = (0, 5, 10, 50, 100, 256, 512, 1024, 2048, 4096)


def decay_report(
    dim: int, thetas: Sequence[float], max_distance: int, train_len: int, output: str
) -> list[str]:
    """`posjax analyze decay`: OUTPUT.png (the curves), OUTPUT.md and OUTPUT.json (the bound at
    REPORT_DISTANCES and each base's critical dimension / length for `train_len`)."""
    targets = [f"{output}{suffix}" for suffix in (".png", ".md", ".json")]
    for target in targets:  # all checked before any is written
        if os.path.isdir(target):
            raise ConfigError(f"--output={output}: {target} is a folder: give another --output")
        folder = Path(target).parent
        if (folder / "config.json").is_file() and fileio.is_run_file_name(target):
            raise ConfigError(f"--output={output} would write {target}, a file of the run in "
                              f"{folder}: give another name or folder")
    distances = [r for r in REPORT_DISTANCES if r <= max_distance]
    rows = decay_table(dim, thetas, distances)
    critical = [
        {
            "theta": float(t),
            "critical_dimension": critical_dimension(dim, train_len, t),
            # JSON has no infinity: null means no bound.
            "critical_length": _finite_or_none(critical_length(dim, train_len, t)),
        }
        for t in thetas
    ]
    names = [_label(t) for t in thetas]
    lines = [
        f"RoPE decay bound (2/d) sum_j |S_j|, d={dim} (RoFormer eq. 37)",
        "",
        "| distance | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
        *(f"| {int(r['distance'])} | " + " | ".join(f"{r[n]:.2f}" for n in names) + " |"
          for r in rows),
        "",
        f"Critical dimension (Liu et al. 2023) for training length {train_len}:",
        "",
        "| theta | critical dimension | critical length |",
        "|---|---|---|",
        *(f"| {c['theta']:g} | {c['critical_dimension']} | "
          f"{'none' if c['critical_length'] is None else format(c['critical_length'], '.0f')} |"
          for c in critical),
    ]
    png = plot_decay(targets[0], dim, thetas, max_distance)
    md = fileio.write_text(targets[1], "\n".join(lines) + "\n")
    js = fileio.write_json(targets[2], {"dim": dim, "train_len": train_len, "decay": rows,
                                        "critical": critical})
    return [png, str(md), str(js)]
