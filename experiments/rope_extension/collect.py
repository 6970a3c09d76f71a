"""Collect the length-extension evaluations into this study's results/, in the layout
`posjax report` reads: one folder per trained RoPE run (results/encoding=rope,seed=K/, its
config.json and stages.json) holding one extrapolation_<method>.json per method, and a
sweep.json that lists those runs.

    python experiments/rope_extension/collect.py SWEEPDIR EVALDIR

SWEEPDIR is the extrapolation study's sweep (its runs encoding=rope,seed=K were trained
there); EVALDIR/seed=K/<method>.json are the `posjax extrapolate --output` files of commands.sh.
"""

import argparse
import json
import shutil
from pathlib import Path

from posjax import fileio

HERE = Path(__file__).resolve().parent


def collect(sweepdir: Path, evaldir: Path, dest: Path = HERE / "results") -> None:
    sweep = json.loads((sweepdir / "sweep.json").read_text())
    runs = {}
    for seed_dir in sorted(evaldir.glob("seed=*")):
        name = f"encoding=rope,{seed_dir.name}"
        out = dest / name
        out.mkdir(parents=True, exist_ok=True)
        for kept in ("config.json", "stages.json"):
            shutil.copy2(sweepdir / "runs" / name / kept, out / kept)
        for result in sorted(seed_dir.glob("*.json")):
            shutil.copy2(result, out / f"extrapolation_{result.stem}.json")
        runs[name] = sweep["runs"][name]
    fileio.write_json(dest / "sweep.json", {"config": sweep["config"], "arg": sweep["arg"],
                                        "runs": runs})


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweepdir", type=Path)
    parser.add_argument("evaldir", type=Path)
    args = parser.parse_args()
    collect(args.sweepdir, args.evaldir)
