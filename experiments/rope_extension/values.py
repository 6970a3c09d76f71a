"""Paired differences the README quotes: every method is evaluated on the same 3 trained
models, so the per-seed difference of two methods' accuracy at 8x removes the models' own
spread. `diff:A-B` is the mean of (A - B) over the seeds, with :lo and :hi its min and max
(in percentage points); A and B are method labels of the results, "rope" being
plain RoPE."""

import statistics
from pathlib import Path

from posjax.eval import plots

LENGTH = 1024
PAIRS = (("rope +ntk", "rope"), ("rope", "rope +linear"), ("rope +rerope:64", "rope +ntk"),
         ("rope +logn", "rope"), ("rope +ntk+logn", "rope +ntk"),
         ("rope +rerope:64+logn", "rope +rerope:64"), ("rope +yarn", "rope +ntk"),
         ("rope +llama3", "rope +ntk"), ("rope +dynamic", "rope +ntk"))


def _per_seed_acc(results: list[dict]) -> dict[str, list[float]]:
    out = {}
    for result in results:
        out[result["label"]] = [
            next(row["acc"] for row in member["lengths"] if row["length"] == LENGTH)
            for member in result["per_seed"]]
    return out


def values(study: Path) -> dict[str, float]:
    acc = _per_seed_acc(plots.load_results(study / "results"))
    out = {}
    for a, b in PAIRS:
        diffs = [100 * (x - y) for x, y in zip(acc[a], acc[b], strict=True)]
        name = f"diff:{a}-{b}"
        out[name], out[f"{name}:lo"], out[f"{name}:hi"] = (
            statistics.fmean(diffs), min(diffs), max(diffs))
    return out
