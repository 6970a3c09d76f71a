"""How far the main job's numbers move when the same command runs on another kind of CPU:
rerun_zen5/ holds `bash scripts/run.sh` re-run at a later commit on the AMD EPYC family 26,
model 2 (Zen 5), against results/ from family 25, model 17 (Zen 4).

    rerun:POINT:max_abs_diff    largest |mean here - mean re-run| of POINT's perplexity over
                                the evaluation lengths; rerun:max_abs_diff over every point
    rerun:POINT:max_rel_diff    the same relative to the mean here (quote it with %)
    rerun:seed_max_abs_diff     largest difference of one seed's perplexity, any point, length
    rerun:pairs                 (pair of points, length) cells compared, and
    rerun:pairs_changed         those whose verdict differs: brackets apart in one and not
                                the other, or apart in the opposite order
"""

import itertools
from pathlib import Path

from posjax.results import plots, seeds
from posjax.results.values import per_seed

READS = ("rerun_zen5",)


def _ppl(study: Path) -> dict[str, dict[int, list[float]]]:
    """label -> length -> every seed's perplexity (in seed order)."""
    return {result["label"]: {n: [row["ppl"] for row in rows]
                              for n, rows in per_seed(result).items()}
            for result in plots.load_results(study / "results")}


def _verdict(a: list[float], b: list[float]) -> int:
    """-1 / 1 where a's interval lies below / above b's, 0 where they overlap."""
    ia, ib = seeds.interval(a), seeds.interval(b)
    return 0 if not seeds.separated(ia, ib) else (-1 if ia[2] < ib[1] else 1)


def values(study: Path) -> dict[str, float]:
    here, rerun = _ppl(study), _ppl(study / "rerun_zen5")
    out: dict[str, float] = {}
    seed_diffs = []
    for point, lengths in here.items():
        diffs = [abs(sum(ppl) / len(ppl) - sum(rerun[point][n]) / len(rerun[point][n]))
                 for n, ppl in lengths.items()]
        means = [sum(ppl) / len(ppl) for ppl in lengths.values()]
        out[f"rerun:{point}:max_abs_diff"] = max(diffs)
        out[f"rerun:{point}:max_rel_diff"] = max(d / m for d, m in zip(diffs, means, strict=True))
        seed_diffs += [abs(a - b) for n, ppl in lengths.items()
                       for a, b in zip(ppl, rerun[point][n], strict=True)]
    out["rerun:max_abs_diff"] = max(v for k, v in out.items() if k.endswith("max_abs_diff"))
    out["rerun:seed_max_abs_diff"] = max(seed_diffs)
    cells = [(a, b, n) for a, b in itertools.combinations(sorted(here), 2) for n in here[a]]
    out["rerun:pairs"] = len(cells)
    out["rerun:pairs_changed"] = sum(
        _verdict(here[a][n], here[b][n]) != _verdict(rerun[a][n], rerun[b][n])
        for a, b, n in cells)
    return out
