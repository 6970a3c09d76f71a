"""The trained T5 tables the README quotes, from table_stats.json (table_stats.py) here and
in per_layer/: for each point, `table:POINT:NAME` is the mean over seeds (and layers) of NAME,
one of std_init, std, std_change (the std of trained minus initial table), bias_min, bias_max
(scale x table), with its interval in :lo and :hi (posjax.results.seeds.interval); POINT is
the run's label (its name without the seed and a leading "encoding="), prefixed with
"per_layer/" for per_layer/'s runs."""

import json
import re
from pathlib import Path

from posjax.results.values import add_interval

NAMES = ("std_init", "std", "std_change", "bias_min", "bias_max")


def values(study: Path) -> dict[str, float]:
    points: dict[str, list[dict]] = {}
    for prefix, path in (("", study / "table_stats.json"),
                         ("per_layer/", study / "per_layer" / "table_stats.json")):
        for run, run_stats in json.loads(path.read_text()).items():
            point = prefix + re.sub(r"^encoding=|,?seed=\d+", "", run)
            points.setdefault(point, []).extend(run_stats["tables"])
    out = {}
    for point, tables in points.items():
        for name in NAMES:
            add_interval(out, f"table:{point}:{name}", [t[name] for t in tables])
    return out
