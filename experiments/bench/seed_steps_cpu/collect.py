"""The raw files of this folder, from run folders that no longer need to exist afterwards.

    python collect.py ab OUT ab.json            # ab.sh's runs: per way and repeat, seed 0's
                                                # stages.json "seconds" (shared by its seeds)
    python collect.py main_job SWEEPDIR main_job_in_turn.json
                                                # a run.sh sweep: per encoding those seconds,
                                                # and the sweep's wall seconds (from when
                                                # run.sh wrote rope_decay.json to sweep.json's
                                                # last write)
"""

import json
import sys
from pathlib import Path

from posjax import fileio


def ab(out: str, path: str) -> None:
    runs = []
    for folder in sorted(Path(out).glob("*_0")):
        way, repeat, _ = folder.name.rsplit("_", 2)
        stages = json.loads((folder / "stages.json").read_text())
        runs.append(dict(way=way, repeat=int(repeat), seconds=stages["seconds"],
                         steps=stages["final_step"]))
    fileio.write_json(Path(path), {"runs": runs})


def main_job(sweepdir: str, path: str) -> None:
    sweep = Path(sweepdir)
    encodings = {}
    for folder in sorted((sweep / "runs").glob("*,seed=0")):
        stages = json.loads((folder / "stages.json").read_text())
        encodings[folder.name.split(",")[0]] = stages["seconds"]
    wall = (sweep / "sweep.json").stat().st_mtime - (sweep / "rope_decay.json").stat().st_mtime
    fileio.write_json(Path(path), {"sweep_wall_s": wall, "seed0_seconds": encodings,
                                   "arg": json.loads((sweep / "sweep.json").read_text())["arg"]})


if __name__ == "__main__":
    {"ab": ab, "main_job": main_job}[sys.argv[1]](*sys.argv[2:])
