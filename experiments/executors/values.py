"""Numbers the README quotes, from results.json (through measure.py's own definitions):
per executor, overhead per run and sweep wall time (median, :lo min, :hi max over the
repeats), and the Ray cluster's start time."""

import importlib.util
import json
import statistics
from pathlib import Path


def _spread(out: dict, name: str, values: list[float]) -> None:
    out[name], out[f"{name}:lo"], out[f"{name}:hi"] = (
        statistics.median(values), min(values), max(values))


def values(study: Path) -> dict[str, float]:
    spec = importlib.util.spec_from_file_location("measure", study / "measure.py")
    measure = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(measure)
    results = json.loads((study / "results.json").read_text())
    out = {"repeats": results["repeats"], "same_losses": float(measure.same_losses(results))}
    for name, sweeps in results["executors"].items():
        _spread(out, f"{name}:overhead_s", [measure.overhead_per_run(s) for s in sweeps])
        _spread(out, f"{name}:wall_s", [s["wall_seconds"] for s in sweeps])
        starts = [s["cluster_start_seconds"] for s in sweeps if s["cluster_start_seconds"]]
        if starts:
            _spread(out, f"{name}:cluster_start_s", starts)
    return out
