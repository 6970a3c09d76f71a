"""Numbers the README quotes beyond the per-size ones (posjax.eval.values):

    POINT:COLUMN:acc|exact[:lo|hi]    answer-token accuracy / exact match, mean over the sizes
                                      of a column of the table (COLUMN: seen, 21-25, ...),
                                      per seed, then mean and interval over seeds
    POINT:mrr[:lo|hi]                 each seed's mean reciprocal rank by exact match over the
                                      unseen columns (the seed's runs ranked against each
                                      other), then mean and interval
    ENCODING:randomized:COLUMN:acc|exact[:lo|hi]
                                      randomized minus plain positions, per seed (paired)
    probe_3000:POINT:COLUMN:acc|exact[:lo|hi], probe_3000:POINT:seeds
                                      the same from probe_3000/ (3000 steps, the encodings
                                      that had not learned the task at 1500)
    encodings_at_90                   encodings whose seen exact match with plain positions is
                                      >= 0.9 on every seed (the bar for any claim about
                                      length generalisation across encodings)
"""

from pathlib import Path

from posjax.eval import plots, tasks
from posjax.eval.values import add_interval

PLAIN, RANDOMIZED = "randomize_positions=0", "randomize_positions=256"


def _columns(results: list[dict], out: dict[str, float],
             prefix: str = "") -> dict[tuple[str, str], list[tuple[float, float]]]:
    """Add PREFIX+POINT:COLUMN:acc|exact to `out`; returns (point, column) -> per-seed
    (acc, exact) means."""
    bucket_size, columns = plots.size_columns(results)
    per_column: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for result in results:
        for heading, bucket in columns:
            column = "seen" if bucket is None else heading
            means = [plots.bucket_means(member, bucket, bucket_size, ("acc", "seq_acc"))
                     for member in result.get("per_seed", [result])]
            per_column[result["label"], column] = means
            for index, metric in enumerate(("acc", "exact")):
                add_interval(out, f"{prefix}{result['label']}:{column}:{metric}",
                             [m[index] for m in means])
    return per_column


def values(study: Path) -> dict[str, float]:
    results = plots.load_results(study / "results")
    bucket_size, _ = plots.size_columns(results)
    out: dict[str, float] = {}
    per_column = _columns(results, out)
    # The probe at twice the budget (probe_3000/): only the finished runs count.
    probe = plots.load_results(study / "probe_3000" / "results")
    _columns(probe, out, "probe_3000:")
    for result in probe:
        out[f"probe_3000:{result['label']}:seeds"] = len(result.get("per_seed", [result]))
    out["encodings_at_90"] = sum(min(m[1] for m in per_column[r["label"], "seen"]) >= 0.9
                                 for r in results if r["label"].endswith(PLAIN))

    seeds = min(len(r.get("per_seed", [r])) for r in results)
    ranks = [tasks.mean_reciprocal_rank([dict(r.get("per_seed", [r])[k], label=r["label"])
                                         for r in results], metric="seq_acc",
                                        bucket_size=bucket_size, label=lambda r: r["label"])
             for k in range(seeds)]
    for result in results:
        add_interval(out, f"{result['label']}:mrr", [rank[result["label"]] for rank in ranks])

    for (label, column), means in per_column.items():
        if not label.endswith(PLAIN):
            continue
        encoding = label.removesuffix("," + PLAIN)
        randomized = per_column.get((f"{encoding},{RANDOMIZED}", column))
        if randomized is None:
            continue
        for index, metric in enumerate(("acc", "exact")):
            add_interval(out, f"{encoding}:randomized:{column}:{metric}",
                         [r[index] - p[index] for r, p in zip(randomized, means, strict=True)])
    return out
