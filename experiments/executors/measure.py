"""The same 4-run sweep on each executor: final losses and scheduling overhead per run.

    python experiments/executors/measure.py SCRATCH_DIR     (run.sh passes one)
    python experiments/executors/measure.py --table         (the README table from results.json)

The sweep is configs/lm.py's `linear` study at smoke size (4 runs: softmax RoPE and three
linear-attention variants), trained and evaluated by `posjax sweep` on each executor:
  local  --parallel=2
  ray    --executor=ray on a 2-CPU Ray cluster started here on 127.0.0.1 with `ray start`
         (its start-up is timed apart, not in the sweep's wall time)
  slurm  --executor=slurm --slurm_cluster=local (submitit's local executor, which starts
         every array task at once: 4 at a time)
results.json records each sweep's wall time, its concurrency, and per run the final loss and
the seconds its commands took where they ran (sweep.json). The scheduling overhead per run is
(wall x concurrency - sum of the runs' command seconds) / runs: worker time that went to no
posjax command, idle slots included.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RESULTS = HERE / "results.json"
SWEEP = f"--config={ROOT / 'configs' / 'lm.py'}:smoke,study=linear"
EXECUTORS = {
    "local": (["--parallel=2"], 2),
    "ray": (["--executor=ray"], 2),  # plus --ray_address of the cluster started here
    "slurm": (["--executor=slurm", "--slurm_cluster=local"], 4),
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _sweep(workdir: Path, flags: list[str]) -> float:
    begin = time.perf_counter()
    subprocess.run([sys.executable, "-m", "posjax.cli", "sweep", SWEEP, f"--workdir={workdir}",
                    *flags], check=True)
    return time.perf_counter() - begin


def measure(scratch: Path) -> dict:
    ray = str(Path(sys.executable).parent / "ray")
    out = {"sweep": SWEEP.replace(str(ROOT) + "/", ""), "executors": {}}
    for name, (flags, concurrency) in EXECUTORS.items():
        extra, started = [], None
        if name == "ray":
            port, begin = _free_port(), time.perf_counter()
            subprocess.run([ray, "start", "--head", "--node-ip-address=127.0.0.1",
                            f"--port={port}", "--num-cpus=2", "--include-dashboard=false",
                            "--disable-usage-stats"], check=True, capture_output=True)
            started, extra = time.perf_counter() - begin, [f"--ray_address=127.0.0.1:{port}"]
        try:
            wall = _sweep(scratch / name, [*flags, *extra])
        finally:
            if name == "ray":
                subprocess.run([ray, "stop", "--force"], check=True, capture_output=True)
        runs = json.loads((scratch / name / "sweep.json").read_text())["runs"]
        out["executors"][name] = {
            "wall_seconds": round(wall, 3), "concurrency": concurrency,
            "cluster_start_seconds": None if started is None else round(started, 3),
            "runs": {n: {"final_loss": r["summary"]["final_loss"], "seconds": r["seconds"]}
                     for n, r in runs.items()},
        }
    return out


def table(results: dict) -> str:
    """The README's table: final losses per run and executor, then overhead per run."""
    executors = results["executors"]
    names = list(next(iter(executors.values()))["runs"])
    lines = ["| run | " + " | ".join(executors) + " |", "|---" * (len(executors) + 1) + "|"]
    for run in names:
        losses = [f"{e['runs'][run]['final_loss']:.4f}" for e in executors.values()]
        lines.append(f"| {run} | " + " | ".join(losses) + " |")
    overhead = [overhead_per_run(e) for e in executors.values()]
    lines.append("| overhead per run (s) | " + " | ".join(f"{o:.1f}" for o in overhead) + " |")
    walls = [f"{e['wall_seconds']:.1f}" for e in executors.values()]
    lines.append("| sweep wall time (s) | " + " | ".join(walls) + " |")
    return "\n".join(lines)


def overhead_per_run(entry: dict) -> float:
    seconds = [r["seconds"] for r in entry["runs"].values()]
    return (entry["wall_seconds"] * entry["concurrency"] - sum(seconds)) / len(seconds)


def same_losses(results: dict) -> bool:
    """Whether every executor printed the same final losses (4 decimals)."""
    printed = {json.dumps({n: f"{r['final_loss']:.4f}" for n, r in e["runs"].items()})
               for e in results["executors"].values()}
    return len(printed) == 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scratch", nargs="?", type=Path)
    parser.add_argument("--table", action="store_true")
    args = parser.parse_args()
    if args.table:
        results = json.loads(RESULTS.read_text())
        print(table(results))
        print(f"\nsame final losses on every executor: {same_losses(results)}; median command "
              f"seconds per run: " + ", ".join(
                  f"{n} {statistics.median(r['seconds'] for r in e['runs'].values()):.1f}"
                  for n, e in results["executors"].items()))
        return
    from posjax import io

    io.write_json(RESULTS, measure(args.scratch))
    print(table(json.loads(RESULTS.read_text())))


if __name__ == "__main__":
    main()
