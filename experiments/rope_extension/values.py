"""Paired differences the README quotes: every method is evaluated on the same 3 trained
models, so the per-seed difference of two methods' accuracy at 8x removes the models' own
spread. `diff:A-B` is the mean of (A - B) over the seeds in percentage points, with its
interval in :lo and :hi (posjax.results.seeds.interval); A and B are method labels of the
results, "rope" being plain RoPE."""

from pathlib import Path

from posjax.results import plots
from posjax.results.values import add_interval, per_seed

LENGTH = 1024
PAIRS = (("rope +ntk", "rope"), ("rope", "rope +linear"), ("rope +rerope:64", "rope +ntk"),
         ("rope +logn", "rope"), ("rope +ntk+logn", "rope +ntk"),
         ("rope +rerope:64+logn", "rope +rerope:64"), ("rope +yarn", "rope +ntk"),
         ("rope +llama3", "rope +ntk"), ("rope +dynamic", "rope +ntk"))


def values(study: Path) -> dict[str, float]:
    acc = {r["label"]: [row["acc"] for row in per_seed(r)[LENGTH]]
           for r in plots.load_results(study / "results")}
    out = {}
    for a, b in PAIRS:
        add_interval(out, f"diff:{a}-{b}",
                     [100 * (x - y) for x, y in zip(acc[a], acc[b], strict=True)])
    return out
