"""Collect the length-extension evaluations into a study folder's results/, in the layout
`posjax report` reads: one folder per trained RoPE run (results/encoding=rope,seed=K/, its
config.json and stages.json) holding one extrapolation_<method>.json per method, and a
sweep.json that lists those runs.

    python experiments/rope_extension/collect.py SWEEPDIR EVALDIR experiments/rope_extension

SWEEPDIR is the extrapolation study's sweep (its runs encoding=rope,seed=K were trained
there); EVALDIR/seed=K/<method>.json are the `posjax extrapolate --output` files of commands.sh.
Every seed must hold the same methods. DEST/results is replaced whole, only once the new one
is complete, so no seed of an earlier collection stays beside the new ones.
"""

import argparse
import shutil
import sys
from pathlib import Path

from posjax import fileio

KEPT = ("config.json", "stages.json")  # of each run, beside its evaluations


def _refuse(message: str):
    """One line on stderr and exit status 2, as the other studies' scripts refuse."""
    print(f"collect.py: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _methods(seed_dirs: list[Path]) -> list[str]:
    """The methods every seed was evaluated with; refused where the seeds differ."""
    found = {d.name: sorted(p.stem for p in d.glob("*.json")) for d in seed_dirs}
    first, methods = next(iter(found.items()))
    for name, other in found.items():
        if other != methods:
            missing = sorted(set(methods) ^ set(other))
            _refuse(f"{name} and {first} hold other methods ({', '.join(missing)} in one "
                    "only): evaluate every seed with every method (commands.sh), then collect "
                    "again")
    if not methods:
        _refuse(f"{first} holds no <method>.json: run commands.sh's evaluations")
    return methods


def collect(sweepdir: Path, evaldir: Path, dest: Path) -> list[Path]:
    """Write dest/results from `sweepdir` and `evaldir` (module doc); the files written."""
    seed_dirs = sorted(evaldir.glob("seed=*"))
    if not seed_dirs:
        _refuse(f"{evaldir} has no seed=K folder: give the folder commands.sh evaluated "
                "into (runs/rope_extension)")
    methods = _methods(seed_dirs)
    sweep = fileio.read_json(sweepdir / "sweep.json")
    if sweep is None:
        _refuse(f"{sweepdir} has no sweep.json: give the extrapolation study's sweep "
                "folder (runs/ext)")
    names = [f"encoding=rope,{seed_dir.name}" for seed_dir in seed_dirs]
    for name in names:  # every input is checked before anything is written
        if name not in sweep["runs"]:
            _refuse(f"{sweepdir} has no run {name}: give the sweep whose runs were evaluated")
        for kept in KEPT:
            if not (sweepdir / "runs" / name / kept).is_file():
                _refuse(f"{sweepdir / 'runs' / name} has no {kept}: give the sweep whose runs "
                        "were evaluated, once they finished")
    fresh, results = dest / "results.new", dest / "results"
    shutil.rmtree(fresh, ignore_errors=True)  # a collection cut short before
    runs, written = {}, []
    for name, seed_dir in zip(names, seed_dirs, strict=True):
        for kept in KEPT:
            written.append(fileio.copy(sweepdir / "runs" / name / kept, fresh / name / kept))
        for method in methods:
            written.append(fileio.copy(seed_dir / f"{method}.json",
                                       fresh / name / f"extrapolation_{method}.json"))
        runs[name] = sweep["runs"][name]
    written.append(fileio.write_json(fresh / "sweep.json", {
        "config": sweep["config"], "arg": sweep["arg"], "runs": runs}))
    if results.exists():
        shutil.rmtree(results)
    fresh.rename(results)
    return [results / path.relative_to(fresh) for path in written]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweepdir", type=Path)
    parser.add_argument("evaldir", type=Path)
    parser.add_argument("dest", type=Path, help="the study folder (experiments/rope_extension)")
    args = parser.parse_args()
    for path in collect(args.sweepdir, args.evaldir, args.dest):
        print(path)
