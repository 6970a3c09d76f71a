"""Paired differences the README quotes: each encoding is trained with and without the
embedding scale from the same seed, so `diff:ENCODING@LENGTH` is the mean over seeds of
(perplexity with the scale - perplexity without) at LENGTH, with :lo and :hi its min and
max, and `ratio:ENCODING@LENGTH` the same for (with / without)."""

import statistics
from pathlib import Path

from posjax.eval import plots

ENCODINGS = ("sinusoidal", "learned", "rope", "alibi")


def _per_seed_ppl(results: list[dict]) -> dict[str, dict[int, list[float]]]:
    out = {}
    for result in results:
        out[result["label"]] = {row["length"]: [
            next(r["ppl"] for r in member["lengths"] if r["length"] == row["length"])
            for member in result["per_seed"]] for row in result["lengths"]}
    return out


def _add(out: dict, name: str, numbers: list[float]) -> None:
    out[name], out[f"{name}:lo"], out[f"{name}:hi"] = (
        statistics.fmean(numbers), min(numbers), max(numbers))


def values(study: Path) -> dict[str, float]:
    ppl = _per_seed_ppl(plots.load_results(study / "results"))
    out = {}
    for encoding in ENCODINGS:
        on, off = ppl[f"{encoding},embed_scale=True"], ppl[f"{encoding},embed_scale=False"]
        for length in on:
            pairs = list(zip(on[length], off[length], strict=True))
            _add(out, f"diff:{encoding}@{length}", [a - b for a, b in pairs])
            _add(out, f"ratio:{encoding}@{length}", [a / b for a, b in pairs])
    return out
