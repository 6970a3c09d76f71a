"""The same 4-run sweep on each executor: final losses and scheduling overhead per run.

    python experiments/executors/measure.py SCRATCH_DIR     (run.sh passes one)
    python experiments/executors/measure.py --table         (the README table from results.json)

The sweep is configs/lm.py's `linear` study at smoke size (4 runs: softmax RoPE and three
linear-attention variants), trained and evaluated by `posjax sweep` on each executor:
  local  --parallel=2
  ray    --executor=ray on a 2-CPU Ray cluster started here on 127.0.0.1 with `ray start`
         (its start-up is timed apart, not in the sweep's wall time)
  slurm  --executor=slurm --slurm_cluster=local --parallel=2 (submitit's local executor;
         results.json's repeats predate the limit posjax keeps there and ran 4 at a time)
A first local sweep, not recorded, fills the JAX compilation cache that every later sweep
shares (scripts/_venv.sh sets one), so no executor pays for compiles another one made; then
REPEATS rounds run the three executors in turn, in fresh sweep directories. results.json
records every sweep: its wall time, its concurrency, and per run the final loss and the seconds
its commands took where they ran (sweep.json). The scheduling overhead per run is
(wall x concurrency - sum of the runs' command seconds) / runs: worker time that went to no
posjax command, idle slots included. The table gives its median (min-max) over the repeats.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RESULTS = HERE / "results.json"
SWEEP = f"--config={ROOT / 'configs' / 'lm.py'}:smoke,study=linear"
EXECUTORS = {
    "local": (["--parallel=2"], 2),
    "ray": (["--executor=ray"], 2),  # plus --ray_address of the cluster started here
    "slurm": (["--executor=slurm", "--slurm_cluster=local", "--parallel=2"], 2),
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _sweep(workdir: Path, flags: list[str]) -> float:
    begin = time.perf_counter()
    subprocess.run([sys.executable, "-m", "posjax", "sweep", SWEEP, f"--workdir={workdir}",
                    *flags], check=True)
    return time.perf_counter() - begin


REPEATS = 3


def _one(scratch: Path, name: str, flags: list[str], concurrency: int) -> dict:
    """One sweep on executor `name` in a fresh directory under `scratch`."""
    ray, extra, started = str(Path(sys.executable).parent / "ray"), [], None
    if name == "ray":
        port, begin = _free_port(), time.perf_counter()
        subprocess.run([ray, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}",
                        "--num-cpus=2", "--include-dashboard=false", "--disable-usage-stats"],
                       check=True, capture_output=True)
        started, extra = time.perf_counter() - begin, [f"--ray_address=127.0.0.1:{port}"]
    workdir = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=scratch))
    try:
        wall = _sweep(workdir, [*flags, *extra])
    finally:
        if name == "ray":
            subprocess.run([ray, "stop", "--force"], check=True, capture_output=True)
    runs = json.loads((workdir / "sweep.json").read_text())["runs"]
    return {"wall_seconds": round(wall, 3), "concurrency": concurrency,
            "cluster_start_seconds": None if started is None else round(started, 3),
            "runs": {n: {"final_loss": r["summary"]["final_loss"], "seconds": r["seconds"]}
                     for n, r in runs.items()}}


def measure(scratch: Path) -> dict:
    _sweep(Path(tempfile.mkdtemp(prefix="warmup-", dir=scratch)), EXECUTORS["local"][0])
    out = {"sweep": SWEEP.replace(str(ROOT) + "/", ""), "repeats": REPEATS,
           "executors": {name: [] for name in EXECUTORS}}
    for _ in range(REPEATS):
        for name, (flags, concurrency) in EXECUTORS.items():
            out["executors"][name].append(_one(scratch, name, flags, concurrency))
    return out


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


def table(results: dict) -> str:
    """The README's table: each run's final loss per executor (the same in every repeat, see
    same_losses), then overhead per run and wall time, median (min-max) over the repeats."""
    executors = results["executors"]
    names = list(next(iter(executors.values()))[0]["runs"])
    lines = ["| run | " + " | ".join(executors) + " |", "|---" * (len(executors) + 1) + "|"]
    for run in names:
        losses = [f"{sweeps[0]['runs'][run]['final_loss']:.4f}" for sweeps in executors.values()]
        lines.append(f"| {run} | " + " | ".join(losses) + " |")
    overhead = [_spread([overhead_per_run(s) for s in sweeps]) for sweeps in executors.values()]
    lines.append("| overhead per run, s | " + " | ".join(overhead) + " |")
    walls = [_spread([s["wall_seconds"] for s in sweeps]) for sweeps in executors.values()]
    lines.append("| sweep wall time, s | " + " | ".join(walls) + " |")
    return "\n".join(lines)


def overhead_per_run(sweep: dict) -> float:
    seconds = [r["seconds"] for r in sweep["runs"].values()]
    return (sweep["wall_seconds"] * sweep["concurrency"] - sum(seconds)) / len(seconds)


def same_losses(results: dict) -> bool:
    """Whether every sweep of every executor printed the same final losses (4 decimals)."""
    printed = {json.dumps({n: f"{r['final_loss']:.4f}" for n, r in sweep["runs"].items()})
               for sweeps in results["executors"].values() for sweep in sweeps}
    return len(printed) == 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scratch", nargs="?", type=Path)
    parser.add_argument("--table", action="store_true")
    args = parser.parse_args()
    if args.table:
        results = json.loads(RESULTS.read_text())
        print(table(results))
        print(f"\nsame final losses in every sweep: {same_losses(results)}")
        return
    from posjax import fileio

    fileio.write_json(RESULTS, measure(args.scratch))
    print(table(json.loads(RESULTS.read_text())))


if __name__ == "__main__":
    main()
