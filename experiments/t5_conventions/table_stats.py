"""The trained T5 tables of a sweep's runs: per run, each table's std at init and after
training, the std of what training changed, and the bias it gives (scale x table) at its
smallest and largest, read from the run's last checkpoint and its seed's initialisation.

    python experiments/t5_conventions/table_stats.py SWEEPDIR [OUT.json]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jax
import numpy as np

from posjax import fileio
from posjax.config import load_config
from posjax.experiment import Experiment
from posjax.train.checkpoint import restore_params


def table_stats(workdir: Path) -> dict:
    """{"step", "scale", "tables": [{"path", "std_init", "std", "std_change", "bias_min",
    "bias_max"}]} of one run."""
    experiment = Experiment.from_config(load_config(workdir))
    step, params = restore_params(experiment, workdir)
    initial = dict(jax.tree_util.tree_leaves_with_path(experiment.build().params))
    scale = float(experiment.config.encoding.get("scale", 1.0))
    tables = []
    for path, leaf in jax.tree_util.tree_leaves_with_path(params):
        name = jax.tree_util.keystr(path)
        if "enc_params" in name and "table" in name:
            table = np.asarray(leaf, np.float64)
            start = np.asarray(initial[path], np.float64)
            tables.append({"path": name, "std_init": round(float(start.std()), 4),
                           "std": round(float(table.std()), 4),
                           "std_change": round(float((table - start).std()), 4),
                           "bias_min": round(scale * float(table.min()), 3),
                           "bias_max": round(scale * float(table.max()), 3)})
    return {"step": int(step), "scale": scale, "tables": tables}


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        print("table_stats.py: error: usage: table_stats.py SWEEPDIR [OUT.json]", file=sys.stderr)
        return 2
    folder = Path(argv[0]) / "runs"
    runs = sorted(p for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []
    if not runs:
        print(f"table_stats.py: error: {folder} holds no runs: give the folder of a sweep of "
              "T5 runs (experiments/t5_conventions/commands.sh)", file=sys.stderr)
        return 2
    stats = {run.name: table_stats(run) for run in runs}
    untabled = [name for name, stat in stats.items() if not stat["tables"]]
    if untabled:
        print(f"table_stats.py: error: run {untabled[0]} has no T5 table (its encoding reads "
              "none): give a sweep of T5 runs", file=sys.stderr)
        return 2
    text = json.dumps(stats, indent=1)
    if len(argv) > 1:
        fileio.write_text(argv[1], text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
