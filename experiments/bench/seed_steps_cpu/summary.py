"""Print this folder's tables from its raw files (README.md quotes them):
python experiments/bench/seed_steps_cpu/summary.py"""

import json
import re
import statistics
from pathlib import Path

HERE = Path(__file__).parent
KIND = "cpu@AuthenticAMD-25-1"
# ab.sh's files of other kinds of CPU (ab-KIND.json, ab_two_cores-KIND.json), in name order
OTHER_KINDS = tuple(sorted(p.stem.removeprefix("ab-") for p in HERE.glob("ab-*.json")))


def spread(values, fmt="{:.1f}") -> str:
    return (f"{fmt.format(statistics.median(values))} "
            f"({fmt.format(min(values))}-{fmt.format(max(values))})")


def main() -> None:
    print("| CPU | cores | seeds stepped | repeats | training steps' seconds (300 steps) "
          "| ms per step |")
    print("|---|---|---|---|---|---|")
    for kind, suffix in ((KIND, ""), *((f"cpu@{k}", f"-{k}") for k in OTHER_KINDS)):
        for cores, name in ((1, "ab"), (2, "ab_two_cores")):
            runs = json.loads((HERE / f"{name}{suffix}.json").read_text())["runs"]
            for way in ("vmap", "in_turn"):
                mine = [r for r in runs if r["way"] == way]
                steps = [r["seconds"]["steps"] for r in mine]
                ms = [1e3 * r["seconds"]["steps"] / (r["steps"] - 1)  # 1: it compiles
                      for r in mine]
                print(f"| {kind.removeprefix('cpu@')} | {cores} | {way} | {len(steps)} "
                      f"| {spread(steps)} | {spread(ms, '{:.0f}')} |")
    print()
    rows = {}
    for line in (HERE / "tight_loop.log").read_text().splitlines():
        way, _, ms = re.match(r"(\w+) (\d+) ([\d.]+) ms/step", line).groups()
        rows.setdefault(way, []).append(float(ms))
    print("| the step alone, both cores | visits | ms per step of 3 seeds |")
    print("|---|---|---|")
    for way, ms in rows.items():
        print(f"| {way} | {len(ms)} | {spread(ms, '{:.0f}')} |")
    print()
    job = json.loads((HERE / "main_job_in_turn.json").read_text())
    repeats = json.loads((HERE.parent / "vmap_seeds.json").read_text())[KIND]["main_job"]
    vmapped = [r for r in repeats["repeats"] if r["parallel"] == 2]  # all vmapped
    sweeps = [r["phases_s"]["sweep"] for r in vmapped]
    print("| main job (run.sh, 2 at a time) | timed runs | sweep, s "
          "| xpos's steps, s (alone, 2 cores) |")
    print("|---|---|---|---|")
    print(f"| vmapped (vmap_seeds.json, 2026-11-29) | {len(sweeps)} | {spread(sweeps, '{:.0f}')} "
          f"| {spread([r['runs']['encoding=xpos,seed=0']['phases']['steps'] for r in vmapped])} |")
    print(f"| in turn (main_job_in_turn.json) | 1 | {job['sweep_wall_s']:.0f} "
          f"| {job['seed0_seconds']['encoding=xpos']['steps']:.1f} |")


if __name__ == "__main__":
    main()
