"""Pictures and tables of a sweep: `posjax plot SWEEPDIR`.

extrapolation.png   perplexity against evaluation length, one line per run (and per
                    length-extension method), log axes, the training length marked
extrapolation.md    the same numbers as a Markdown table
position_loss.png   loss against position within the longest window, per run
theta.png           perplexity against rotary base at each length, when theta was swept
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from posjax import io  # noqa: E402


def load_results(sweepdir: str | Path) -> list[dict]:
    """Every extrapolation result of the sweep's runs, labelled by run name and method."""
    sweepdir = Path(sweepdir)
    index = io.read_json(sweepdir / "sweep.json")
    if index is None:
        from posjax.errors import ConfigError

        raise ConfigError(f"{sweepdir} has no sweep.json: run `posjax sweep` first")
    results = []
    for name in index["runs"]:
        for path in sorted((sweepdir / "runs" / name).glob("extrapolation*.json")):
            result = json.loads(path.read_text())
            method = result.get("method", "none")
            result["label"] = name if method == "none" else f"{name} +{method}"
            results.append(result)
    return results


def _ok(rows):
    return [r for r in rows if "ppl" in r]


def plot_extrapolation(results: list[dict], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7.5, 5))
    train_lens = set()
    for result in results:
        rows = _ok(result["lengths"])
        if rows:
            ax.plot([r["length"] for r in rows], [r["ppl"] for r in rows], marker="o", ms=3,
                    label=result["label"])
            train_lens.add(result["train_len"])
    for train_len in train_lens:
        ax.axvline(train_len, color="grey", ls="--", lw=1)
        ax.text(train_len, ax.get_ylim()[1], " train length", va="top", fontsize=8,
                color="grey")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("evaluation length (tokens)")
    ax.set_ylabel("perplexity (bytes)")
    protocols = sorted({r["protocol"] for r in results})
    ax.set_title(f"Length extrapolation ({', '.join(protocols)} windows)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    io.save_figure(fig, path, dpi=130)
    plt.close(fig)
    return path


def table(results: list[dict]) -> str:
    """Markdown: one row per run, one column per evaluation length (perplexity)."""
    lengths = sorted({r["length"] for res in results for r in res["lengths"]})
    header = "| run | " + " | ".join(str(n) for n in lengths) + " |"
    lines = [header, "|" + "---|" * (len(lengths) + 1)]
    for result in results:
        by_length = {r["length"]: r for r in result["lengths"]}
        cells = []
        for n in lengths:
            row = by_length.get(n)
            cells.append(f"{row['ppl']:.3f}" if row and "ppl" in row else "-")
        lines.append(f"| {result['label']} | " + " | ".join(cells) + " |")
    train_lens = sorted({r["train_len"] for r in results})
    lines.append("")
    lines.append(f"Perplexity per byte at each evaluation length; trained at "
                 f"{', '.join(map(str, train_lens))} tokens.")
    return "\n".join(lines) + "\n"


def plot_position_loss(results: list[dict], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7.5, 5))
    for result in results:
        rows = _ok(result["lengths"])
        if not rows:
            continue
        longest = rows[-1]
        size = longest["bucket_size"]
        xs = [(i + 0.5) * size for i, v in enumerate(longest["bucket_loss"]) if v is not None]
        ys = [v for v in longest["bucket_loss"] if v is not None]
        ax.plot(xs, ys, marker=".", label=f"{result['label']} (L={longest['length']})")
    ax.set_xlabel("position in window (bucket centre)")
    ax.set_ylabel("loss (nats / byte)")
    ax.set_title("Loss by position in the longest evaluation window")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    io.save_figure(fig, path, dpi=130)
    plt.close(fig)
    return path


def plot_theta(results: list[dict], path: Path) -> Path | None:
    """Perplexity against theta for each evaluation length, with the critical-length
    prediction (Liu et al.) marked, when the sweep varied theta; None otherwise."""
    from posjax.eval import analysis

    runs = [r for r in results if r["method"] == "none" and "theta" in r["encoding"]]
    if len({r["encoding"]["theta"] for r in runs}) < 2:
        return None
    runs.sort(key=lambda r: r["encoding"]["theta"])
    lengths = sorted({row["length"] for r in runs for row in _ok(r["lengths"])})
    fig, ax = plt.subplots(figsize=(7.5, 5))
    for n in lengths:
        pts = [(r["encoding"]["theta"], row["ppl"]) for r in runs for row in _ok(r["lengths"])
               if row["length"] == n]
        ax.plot(*zip(*pts, strict=True), marker="o", label=f"L={n}")
    first = runs[0]
    head_dim = first.get("head_dim")
    if head_dim:
        for r in runs:
            theta = r["encoding"]["theta"]
            limit = analysis.critical_length(head_dim, r["train_len"], theta)
            ax.annotate(f"{limit:.0f}", (theta, ax.get_ylim()[0]), fontsize=7, ha="center")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("rotary base theta")
    ax.set_ylabel("perplexity")
    ax.set_title("RoPE base against extrapolation (numbers: predicted critical length)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    io.save_figure(fig, path, dpi=130)
    plt.close(fig)
    return path


def plot_sweep(sweepdir: str | Path, output: str | Path | None = None) -> list[Path]:
    """Write every picture and table of the sweep; returns the paths written."""
    results = load_results(sweepdir)
    out = Path(output or sweepdir)
    paths = [
        plot_extrapolation(results, out / "extrapolation.png"),
        io.write_text(out / "extrapolation.md", table(results)),
        plot_position_loss(results, out / "position_loss.png"),
    ]
    theta = plot_theta(results, out / "theta.png")
    return paths + ([theta] if theta else [])
