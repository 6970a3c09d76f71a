"""Numbers the README quotes, from results.json (through measure.py's own definitions):
per executor, overhead per run and sweep wall time (median, :lo min, :hi max over the
repeats), and the Ray cluster's start time."""

import importlib.util
import json
from pathlib import Path

from posjax.results.values import add_spread


def values(study: Path) -> dict[str, float]:
    spec = importlib.util.spec_from_file_location("measure", study / "measure.py")
    measure = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(measure)
    results = json.loads((study / "results.json").read_text())
    out = {"repeats": results["repeats"], "same_losses": float(measure.same_losses(results))}
    for name, sweeps in results["executors"].items():
        add_spread(out, f"{name}:overhead_s", [measure.overhead_per_run(s) for s in sweeps])
        add_spread(out, f"{name}:wall_s", [s["wall_seconds"] for s in sweeps])
        starts = [s["cluster_start_seconds"] for s in sweeps if s["cluster_start_seconds"]]
        if starts:
            add_spread(out, f"{name}:cluster_start_s", starts)
    return out
