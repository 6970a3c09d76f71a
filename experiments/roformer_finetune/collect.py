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

from posjax import fileio
from posjax.errors import ConfigError
from posjax.results import plots

KEEP = ("config.json", "stages.json", "extrapolation*.json")


def copy_run(run: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for pattern in KEEP:
        for path in run.glob(pattern):
            shutil.copy2(path, dest / path.name)


def _refuse(message: str):
    """One line on stderr and exit status 2, before anything is written."""
    print(f"collect.py: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _sweeps(root: Path, dest: Path) -> list[Path]:
    """RUNS_ROOT's fine-tune sweeps, each checked to be collectable (a readable sweep.json,
    its runs/ folder), and DEST a folder: refused in one line otherwise."""
    sweeps = sorted(p for p in root.glob("ft_*") if (p / "sweep.json").exists())
    if not sweeps:
        _refuse(f"{root} holds no fine-tune sweep (ft_NAME/ with its sweep.json): give the "
                "RUNS_ROOT of the study's commands.sh")
    if dest.exists() and not dest.is_dir():
        _refuse(f"{dest} is a file: give the study's folder (experiments/roformer_finetune)")
    for sweep in sweeps:
        try:
            fileio.read_json(sweep / "sweep.json", remedy="re-run its sweep")
        except ConfigError as e:
            _refuse(str(e))
        if not (sweep / "runs").is_dir():
            _refuse(f"{sweep} has no runs/ folder: re-run its sweep (commands.sh)")
    return sweeps


def collect(root: Path, dest: Path) -> None:
    """DEST/results replaced whole by RUNS_ROOT's runs (a run left from an earlier
    collection would be counted in the README's provenance), then the plots."""
    sweeps = _sweeps(root, dest)
    fresh, results = dest / "results.new", dest / "results"
    shutil.rmtree(fresh, ignore_errors=True)  # a collection cut short before
    for run in sorted(root.glob("mlm_*")):
        copy_run(run, fresh / run.name)
    for sweep in sweeps:
        (fresh / sweep.name).mkdir(parents=True, exist_ok=True)
        shutil.copy2(sweep / "sweep.json", fresh / sweep.name / "sweep.json")
        for run in sorted((sweep / "runs").iterdir()):
            copy_run(run, fresh / sweep.name / run.name)
    if results.exists():
        shutil.rmtree(results)
    fresh.rename(results)
    for path in plots.plot_sweep([results / sweep.name for sweep in sweeps], output=dest):
        print(path)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("dest", type=Path)
    args = parser.parse_args()
    collect(args.root, args.dest)
