"""Copy the study's small result files into this folder, summarise and draw them.

    python experiments/roformer_finetune/collect.py RUNS_ROOT experiments/roformer_finetune

RUNS_ROOT holds mlm_ENC (pretraining runs) and ft_NAME (fine-tune sweeps, NAME an encoding
or `scratch`). Writes results/mlm_ENC/{config,stages}.json, results/ft_NAME/ (the sweep's
sweep.json and per run config.json, stages.json, extrapolation*.json), then `posjax plot` of
every sweep: finetune.json, .md and .png (posjax.results.finetune).
"""

import argparse
import shutil
import sys
from pathlib import Path

from posjax.results import plots

KEEP = ("config.json", "stages.json", "extrapolation*.json")


def copy_run(run: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for pattern in KEEP:
        for path in run.glob(pattern):
            shutil.copy2(path, dest / path.name)


def collect(root: Path, dest: Path) -> None:
    sweeps = sorted(p for p in root.glob("ft_*") if (p / "sweep.json").exists())
    if not sweeps:  # before anything is copied
        print(f"collect.py: error: {root} holds no fine-tune sweep (ft_NAME/ with its "
              "sweep.json): give the RUNS_ROOT of the study's commands.sh", file=sys.stderr)
        raise SystemExit(2)
    results = dest / "results"
    for run in sorted(root.glob("mlm_*")):
        copy_run(run, results / run.name)
    for sweep in sweeps:
        (results / sweep.name).mkdir(parents=True, exist_ok=True)
        shutil.copy2(sweep / "sweep.json", results / sweep.name / "sweep.json")
        for run in sorted((sweep / "runs").iterdir()):
            copy_run(run, results / sweep.name / run.name)
    for path in plots.plot_sweep([results / sweep.name for sweep in sweeps], output=dest):
        print(path)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("dest", type=Path)
    args = parser.parse_args()
    collect(args.root, args.dest)
