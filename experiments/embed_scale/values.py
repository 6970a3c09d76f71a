"""Paired ratios the README quotes: each encoding is trained with and without the embedding
scale from the same seed, so `ratio:ENCODING@LENGTH` is the mean over seeds of (perplexity
with the scale / perplexity without) at LENGTH, with its interval in :lo and :hi
(posjax.results.seeds.interval), and `diff:ENCODING@LENGTH` the same for (with - without)."""

from pathlib import Path

from posjax.results import plots
from posjax.results.values import add_interval, per_seed

ENCODINGS = ("sinusoidal", "learned", "rope", "alibi")


def values(study: Path) -> dict[str, float]:
    results = {r["label"]: per_seed(r) for r in plots.load_results(study / "results")}
    out = {}
    for encoding in ENCODINGS:
        on = results[f"{encoding},embed_scale=True"]
        off = results[f"{encoding},embed_scale=False"]
        for length, rows in on.items():
            pairs = [(a["ppl"], b["ppl"]) for a, b in zip(rows, off[length], strict=True)]
            add_interval(out, f"diff:{encoding}@{length}", [a - b for a, b in pairs])
            add_interval(out, f"ratio:{encoding}@{length}", [a / b for a, b in pairs])
    return out
