"""Copy a sweep's small result files (no checkpoints) into an experiment folder and plot them.

    python scripts/collect_results.py runs/ext experiments/extrapolation

DEST/results/sweep.json and DEST/results/<run>/{config,stages,extrapolation*,retrieval_*}.json
and metrics.jsonl, then `posjax plot` into DEST (extrapolation.png/.md, position_loss.png,
retrieval_*_heatmaps.png, ...).
Run folders of an earlier collection that the sweep no longer has are removed, so results/
holds exactly the sweep's runs.
"""

import argparse
import shutil
from pathlib import Path

from posjax.results import plots

KEEP = ("config.json", "stages.json", "metrics.jsonl", "extrapolation*.json",
        "retrieval_*.json")


def collect(sweepdir: Path, dest: Path) -> None:
    results = dest / "results"
    results.mkdir(parents=True, exist_ok=True)
    shutil.copy2(sweepdir / "sweep.json", results / "sweep.json")
    runs = {run.name for run in (sweepdir / "runs").iterdir()}
    for stale in results.iterdir():
        if stale.is_dir() and stale.name not in runs:
            shutil.rmtree(stale)
    for run in sorted((sweepdir / "runs").iterdir()):
        for pattern in KEEP:
            for path in run.glob(pattern):
                (results / run.name).mkdir(exist_ok=True)
                shutil.copy2(path, results / run.name / path.name)
    for path in plots.plot_sweep(sweepdir, output=dest):
        print(path)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweepdir", type=Path)
    parser.add_argument("dest", type=Path)
    args = parser.parse_args()
    collect(args.sweepdir, args.dest)
