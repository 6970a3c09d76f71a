"""Copy a sweep's small result files (no checkpoints) into an experiment folder and plot them.

    python scripts/collect_results.py runs/ext experiments/extrapolation

DEST/results/sweep.json and DEST/results/<run>/*.json (config, stages, every evaluation's
result) and metrics.jsonl, then `posjax plot` into DEST (extrapolation.png/.md,
position_loss.png, retrieval_*_heatmaps.png, ...).
Run folders of an earlier collection (its results/sweep.json) that the sweep no longer has
are removed, so results/ holds exactly the sweep's runs; any other folder, or one holding
anything this script does not copy, is kept, with a line saying so. Every file is written
whole or not at all: stopped (Ctrl-C, SIGTERM), it says so in one line, and the same command
collects again. A SWEEPDIR that is no sweep, or a file where DEST or a run's folder goes, is
one line and exit 2, before anything is written.
"""

import argparse
import shutil
import sys
from pathlib import Path

from posjax import runlock

# A stop during the imports below: one line.
runlock.stop_while_starting("", program="collect_results.py")

from posjax import fileio  # noqa: E402
from posjax.errors import ConfigError, missing_folder  # noqa: E402
from posjax.results import plots  # noqa: E402

# every JSON at a run's top level: its config, stages and each evaluation's result, one
# registered from the user's own code included (checkpoints/ and tensorboard/ stay)
KEEP = ("*.json", "metrics.jsonl")


def collect(sweepdir: Path, dest: Path) -> None:
    """The runs' files first, then sweep.json that lists them, then the earlier runs it no
    longer lists are removed: a collection stopped part-way leaves no listed run without
    its folder."""
    if not sweepdir.is_dir():
        raise missing_folder(sweepdir, "give the --workdir of a posjax sweep")
    if not (sweepdir / "sweep.json").is_file() or not (sweepdir / "runs").is_dir():
        raise ConfigError(f"{sweepdir} is no sweep (no sweep.json and runs/): give the "
                          "--workdir of a posjax sweep")
    results = dest / "results"
    runs = sorted((sweepdir / "runs").iterdir())
    for folder in (dest, results, *(results / run.name for run in runs)):
        if folder.exists() and not folder.is_dir():
            raise missing_folder(folder, "move it, or give another DEST")
    # the runs an earlier collection copied (its sweep.json): the only folders it removes
    earlier = fileio.read_json(results / "sweep.json", {}).get("runs", {})
    results.mkdir(parents=True, exist_ok=True)
    for run in runs:
        for pattern in KEEP:
            for path in run.glob(pattern):
                fileio.copy(path, results / run.name / path.name)
    fileio.copy(sweepdir / "sweep.json", results / "sweep.json")
    listed = {run.name for run in runs}
    for stale in results.iterdir():
        if not stale.is_dir() or stale.name in listed:
            continue
        foreign = [p.name for p in stale.rglob("*")
                   if not (p.is_file() and any(p.match(pattern) for pattern in KEEP))]
        if stale.name in earlier and not foreign:
            shutil.rmtree(stale)
        else:
            print(f"collect_results.py: kept {stale}, which the sweep does not list: no "
                  "earlier collection wrote it" if stale.name not in earlier else
                  f"collect_results.py: kept {stale}, which the sweep does not list: it holds "
                  f"{foreign[0]}, which this script does not copy", file=sys.stderr)
    for path in plots.plot_sweep(sweepdir, output=dest):
        print(path)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweepdir", type=Path)
    parser.add_argument("dest", type=Path)
    args = parser.parse_args()
    try:
        with runlock.interruptible():
            collect(args.sweepdir, args.dest)
    except ConfigError as error:
        print(f"collect_results.py: error: {error}", file=sys.stderr)
        sys.exit(2)
    except OSError as error:  # a DEST it may not write, a full disk
        print(f"collect_results.py: error: {error.strerror or error} "
              f"({error.filename or args.dest}): fix it, then re-run the same command",
              file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("collect_results.py: interrupted: re-run the same command to collect again",
              file=sys.stderr)
        sys.exit(runlock.stopped_code())
