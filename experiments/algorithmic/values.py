"""Numbers the README quotes beyond the per-size ones (posjax.results.values):

    POINT:COLUMN:acc|exact[:lo|hi]    answer-token accuracy / exact match, mean over the sizes
                                      of a column of the table (COLUMN: seen, 21-25, ...),
                                      per seed, then mean and interval over seeds
    POINT:mrr[:lo|hi]                 each seed's mean reciprocal rank by exact match over the
                                      unseen columns (the seed's runs ranked against each
                                      other), then mean and interval
    ENCODING:randomized:COLUMN:acc|exact[:lo|hi]
                                      randomized minus plain positions, per seed (paired)
    FOLDER:POINT:COLUMN:acc|exact[:lo|hi], FOLDER:POINT:seeds
                                      the same from a sub-study: probe_3000/ (3000 steps, the
                                      encodings that had not learned the task at 1500) and
                                      kerple_fire/ (KERPLE and FIRE, the main study's setup)
    encodings_at_90                   encodings whose seen exact match with plain positions is
                                      >= 0.9 on every seed, at the main study's budget (here
                                      and in kerple_fire/): the bar for any claim about
                                      length generalisation across encodings
"""

from pathlib import Path

from posjax.results import plots, ranking
from posjax.results.values import add_interval

PLAIN, RANDOMIZED = "randomize_positions=0", "randomize_positions=256"
# Sub-studies beside results/, each collected from its own sweep; those in SAME_BUDGET ran the
# main study's setup (1500 steps), so they count towards the 90 % bar.
SUB_STUDIES, SAME_BUDGET = ("probe_3000", "kerple_fire"), ("kerple_fire",)


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
    at_budget = dict(per_column)
    for folder in SUB_STUDIES:
        sub = plots.load_results(study / folder / "results")
        columns = _columns(sub, out, f"{folder}:")
        for result in sub:
            out[f"{folder}:{result['label']}:seeds"] = len(result.get("per_seed", [result]))
        if folder in SAME_BUDGET:
            at_budget.update(columns)
    out["encodings_at_90"] = sum(min(m[1] for m in means) >= 0.9
                                 for (label, column), means in at_budget.items()
                                 if column == "seen" and label.endswith(PLAIN))

    seeds = min(len(r.get("per_seed", [r])) for r in results)
    ranks = [ranking.mean_reciprocal_rank([dict(r.get("per_seed", [r])[k], label=r["label"])
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
