"""A whole sweep timed: the README's main job (configs/lm.py study=main, seeds=3) swept with
each point's seeds in one vmapped program (`posjax sweep --vmap_seeds`) against the same sweep
seed by seed, each repeat a fresh sweep directory, fresh processes and a cold compilation
cache, the two modes alternated so that a drift in the machine's load hits both.

Per repeat: the sweep's wall seconds and, per run, sweep.json's seconds and status, the first
step's seconds (compilation included: stages.json's first_step_s), tokens/s (the median of
metrics.jsonl's windows; a vmapped seed's own tokens in the program's time) and the
perplexity at every length (extrapolation.json). The pure parts (`disagreements`,
`summary`) are what experiments/bench/values.py generates the page from.
"""

from __future__ import annotations

import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from posjax import fileio
from posjax.errors import ConfigError
from posjax.launch.sweep import expand, run_dir

# mode -> the flags `posjax sweep` gets; the order of a repeat's sweeps.
MODES = {"seed_by_seed": (), "vmapped": ("--vmap_seeds",)}
# Perplexities of seed k vmapped against seed k alone, |a - b| <= RTOL |b|. Batched and
# single matmuls round differently and 600 steps grow it: in the main job RoPE stays within
# it, NoPE and T5 reach about 1e-2 (experiments/bench/README.md), which `table_shift` weighs
# against the seeds' spread; tests/test_vmap_seeds.py's 1e-5 is for 12 steps.
RTOL = 1e-3
# The sweep's own persistent compilation cache (SWEEPDIR/.jax_cache), fresh each repeat.
CACHE_ENV = ("JAX_COMPILATION_CACHE_DIR", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS")


def points(config_file: str, arg: str, encodings: list[str]) -> tuple[list[str], bool]:
    """(the sweep's points (run names without seed=K) of `encodings`, each with >= 2 seeds;
    whether they are all its points)."""
    runs = expand(config_file, arg)
    seeds = {point: sum(r.point == point for r in runs) for point in {r.point for r in runs}}
    chosen = [f"encoding={e}" for e in encodings]
    missing = [p for p in chosen if seeds.get(p, 0) < 2]
    if missing:
        raise ConfigError(f"the sweep {config_file}:{arg} has no point with 2 or more seeds "
                          f"for {', '.join(missing)}: give seeds=N (N >= 2) and a study with "
                          "those encodings")
    return chosen, set(chosen) == set(seeds)


def commands(config_file: str, arg: str, chosen: list[str], every: bool, sweepdir: Path,
             mode: str, parallel: int = 1) -> list[list[str]]:
    """The `posjax sweep` command lines of one repeat: the whole sweep in one (`every`: all its
    points chosen, as scripts/run.sh runs it), else one per point (--only); `parallel` runs
    at a time (--parallel, each on its share of the cores, as run.sh's PARALLEL)."""
    base = [sys.executable, "-m", "posjax", "sweep", f"--config={config_file}:{arg}",
            f"--workdir={sweepdir}", *MODES[mode],
            *([f"--parallel={parallel}"] if parallel > 1 else [])]
    return [base] if every else [[*base, f"--only={point},seed=*"] for point in chosen]


def _tokens_per_s(workdir: Path) -> float | None:
    rows = [row.get("tokens_per_sec") for row in fileio.read_jsonl(workdir / "metrics.jsonl")]
    speeds = [s for s in rows if s is not None]
    return statistics.median(speeds) if speeds else None


def run_results(sweepdir: Path) -> dict[str, dict]:
    """run name -> status, seconds (sweep.json), stages (config.json's [seq_len, batch_size,
    steps] per stage), first_step_s (stage 1's, compilation included), tokens_per_s, ppl
    ({length: perplexity}), phases (stages.json's seconds: setup, first_steps, steps,
    heldout_eval, checkpoints, score; a vmapped program's shared by its seeds but score) and
    score_s ({length: seconds}) of a finished sweep."""
    out = {}
    for name, entry in fileio.read_json(sweepdir / "sweep.json")["runs"].items():
        workdir = run_dir(sweepdir, name)
        stages = fileio.read_json(workdir / "stages.json", {})
        lengths = _lengths(workdir)
        config = fileio.read_json(workdir / "config.json", {})
        out[name] = dict(status=entry["status"], seconds=entry.get("seconds"),
                         stages=config.get("train", {}).get("stages"),
                         first_step_s=stages.get("stages", [{}])[0].get("first_step_s"),
                         tokens_per_s=_tokens_per_s(workdir),
                         ppl=perplexities(workdir), phases=stages.get("seconds"),
                         score_s={str(r["length"]): r["seconds"] for r in lengths
                                  if "seconds" in r})
    return out


def budget(runs: dict[str, dict]) -> tuple[int, int]:
    """(steps, batch_size) every run of `runs` (run_results) trained, from their one stage;
    refused where a run has several stages or the runs differ."""
    stages = [r["stages"] for r in runs.values()]
    budgets = {(s[0][2], s[0][1]) for s in stages if s and len(s) == 1}
    if len(budgets) != 1 or any(not s or len(s) != 1 for s in stages):
        raise ConfigError(f"the sweep's runs do not share one stage's steps and batch: {stages}")
    return budgets.pop()


def _lengths(workdir: Path) -> list[dict]:
    """The per-length rows of a run's extrapolation.json ([] before it was scored)."""
    return fileio.read_json(workdir / "extrapolation.json", {}).get("lengths", [])


def perplexities(workdir: Path) -> dict[str, float]:
    """{length: perplexity} of a run's extrapolation.json."""
    return {str(r["length"]): r["ppl"] for r in _lengths(workdir) if "ppl" in r}


def per_run(runs: dict[str, dict], key: str) -> list[float]:
    """`key` of every run that recorded it (run_results' rows)."""
    return [row[key] for row in runs.values() if row.get(key) is not None]


def disagreements(reference: dict[str, dict], runs: dict[str, dict],
                  rtol: float = RTOL) -> tuple[list[str], float]:
    """(one line per perplexity of `runs` beyond |a - b| <= rtol |b| of `reference`'s, or
    missing from it; the largest relative difference): two repeats' tables compared run by
    run and length by length (run name -> {"ppl": {length: perplexity}})."""
    problems, largest = [], 0.0
    for name, row in reference.items():
        theirs = runs.get(name, {}).get("ppl", {})
        for length, b in row["ppl"].items():
            if length not in theirs:
                problems.append(f"{name}: no perplexity at {length}")
                continue
            relative = abs(theirs[length] - b) / abs(b)
            largest = max(largest, relative)
            if not relative <= rtol:  # a NaN is a disagreement too
                problems.append(f"{name}@{length}: {theirs[length]:.6g} against {b:.6g} "
                                f"({relative:.2g} relative > {rtol:g})")
    return problems, largest


def _by_point(runs: dict[str, dict]) -> dict[tuple[str, str], list[float]]:
    """(point, length) -> the perplexities of its seeds (run names POINT,seed=K)."""
    cells: dict[tuple[str, str], list[float]] = {}
    for name, row in runs.items():
        point = ",".join(part for part in name.split(",") if not part.startswith("seed="))
        for length, ppl in row["ppl"].items():
            cells.setdefault((point, length), []).append(ppl)
    return cells


def table_shift(reference: dict[str, dict], runs: dict[str, dict]) -> float:
    """The most a cell of the table (a point's mean perplexity over its seeds, at one length)
    moves from `reference`'s, as a fraction of the reference seeds' range (max - min) there:
    below 1, no ranking the table's brackets allow changes. Both run name -> {"ppl": {...}}."""
    theirs, largest = _by_point(runs), 0.0
    for cell, ppl in _by_point(reference).items():
        if len(theirs.get(cell, [])) != len(ppl):
            return math.inf  # a seed's perplexity is missing: the table is not the same
        shift = abs(statistics.mean(theirs[cell]) - statistics.mean(ppl))
        spread = max(ppl) - min(ppl)
        largest = max(largest, shift / spread if spread else math.inf if shift else 0.0)
    return largest


def summary(repeats: list[dict], target: float) -> dict:
    """The median, min and max wall seconds of each mode; the ratio vmapped / seed by seed
    of the medians, its range over the repeats (each repeat's pair of sweeps), and whether
    the ratio of the medians is at most `target` (the benchmark's, in its result file)."""
    wall = {mode: [r["wall_s"] for r in repeats if r["mode"] == mode] for mode in MODES}
    if not all(wall.values()):
        raise ConfigError("the vmap section needs a repeat of each mode: "
                          f"{ {mode: len(w) for mode, w in wall.items()} }")
    by_index = {(r["mode"], r["index"]): r["wall_s"] for r in repeats}
    pairs = [by_index["vmapped", i] / by_index["seed_by_seed", i]
             for mode, i in by_index if mode == "vmapped" and ("seed_by_seed", i) in by_index]
    ratio = statistics.median(wall["vmapped"]) / statistics.median(wall["seed_by_seed"])
    return {**{mode: {"median": statistics.median(w), "min": min(w), "max": max(w),
                      "n": len(w)} for mode, w in wall.items()},
            "ratio": ratio, "ratio_min": min(pairs, default=ratio),
            "ratio_max": max(pairs, default=ratio), "target": target, "met": ratio <= target}


def timed_sweep(cmds: list[list[str]], sweepdir: Path, log: Path) -> dict:
    """Run one repeat's sweep commands one after another in fresh processes (the output in
    `log`); its wall seconds and run_results. A failed command or run is one error naming
    the log."""
    env = {k: v for k, v in os.environ.items() if k not in CACHE_ENV}
    start = time.perf_counter()
    with open(log, "w") as out:
        for cmd in cmds:
            done = subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                  check=False)
            if done.returncode:
                raise RuntimeError(f"{' '.join(cmd[3:5])} failed with exit status "
                                   f"{done.returncode}; its output: {log}")
    wall = time.perf_counter() - start
    runs = run_results(sweepdir)
    failed = [name for name, row in runs.items() if row["status"] != "done"]
    if failed:
        raise RuntimeError(f"runs not done in {sweepdir}: {', '.join(failed)}; output: {log}")
    return {"wall_s": wall, "runs": runs}
